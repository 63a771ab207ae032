/* commands.h - one entry point per rebuno subcommand; argv[0] is the subcommand's name. */
#ifndef REBUNO_CLI_COMMANDS_H
#define REBUNO_CLI_COMMANDS_H

int cmd_serve(int argc, char **argv); /* dev, server */
int cmd_policy(int argc, char **argv);
int cmd_exec(int argc, char **argv);
int cmd_approval(int argc, char **argv);
int cmd_sandboxd(int argc, char **argv); /* sandboxd */
int cmd_sandbox(int argc, char **argv);  /* sandbox */
int cmd_sandbox_snap(int argc, char **argv); /* sandbox snapshot|snapshots|snapshot-rm|fork */
int cmd_sandbox_image(int argc, char **argv); /* sandbox image import|images|image-rm */
int cmd_drive(int argc, char **argv);        /* drive: cmd_drive.c */
int cmd_egress_proxy(int argc, char **argv); /* src/proxy/cmd_egress_proxy.c; hidden, for tests */

struct event;
/* After the first SIGINT or SIGTERM (cmd_sandboxd.c): drop the loop's signal events and
 * ignore both signals from now on, so a second one cannot cut a graceful stop short. */
void cli_stop_signals_ignore(struct event *sigint, struct event *sigterm);

#endif
