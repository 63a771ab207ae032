/* commands.h - one entry point per rebuno subcommand; argv[0] is the subcommand's name. */
#ifndef REBUNO_CLI_COMMANDS_H
#define REBUNO_CLI_COMMANDS_H

int cmd_serve(int argc, char **argv); /* dev, server */
int cmd_policy(int argc, char **argv);
int cmd_exec(int argc, char **argv);
int cmd_approval(int argc, char **argv);
int cmd_agent(int argc, char **argv);    /* agent: cmd_agent.c */
int cmd_key(int argc, char **argv);      /* key: cmd_key.c (scoped API keys) */
int cmd_sandboxd(int argc, char **argv); /* sandboxd */
int cmd_sandbox(int argc, char **argv);  /* sandbox */
int cmd_sandbox_image_build(int argc, char **argv); /* sandbox image build: cmd_image_build.c */
int cmd_sandbox_snap(int argc, char **argv); /* sandbox snapshot|snapshots|snapshot-rm|fork */
int cmd_sandbox_image(int argc, char **argv); /* sandbox image import|images|image-rm */
int cmd_sandbox_image_pull(int argc, char **argv); /* sandbox image pull REF: cmd_image_pull.c */
int cmd_drive(int argc, char **argv);        /* drive: cmd_drive.c */
int cmd_store(int argc, char **argv);        /* store copy: cmd_store.c */
int cmd_egress_proxy(int argc, char **argv); /* src/proxy/cmd_egress_proxy.c; hidden, for tests */

/* stop_signals.c: SIGINT, SIGTERM and SIGHUP stop a daemon gracefully. add: each calls
 * fn(sig, EV_SIGNAL, arg) on the loop; ignore (after the first): drop the events and
 * ignore all three from now on, so a second one cannot cut the stop short. */
#include <event2/event.h>
#define CLI_STOP_SIGNALS 3
struct cli_stop_signals {
    struct event *ev[CLI_STOP_SIGNALS];
};
void cli_stop_signals_add(struct cli_stop_signals *s, struct event_base *base, event_callback_fn fn,
                          void *arg);
void cli_stop_signals_ignore(struct cli_stop_signals *s);
void cli_stop_signals_free(struct cli_stop_signals *s);

#endif
