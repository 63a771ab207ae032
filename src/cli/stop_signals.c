/*
 * stop_signals.c - the signals that stop a daemon (`rebuno dev|server|sandboxd`)
 * gracefully: SIGINT (Ctrl-C), SIGTERM (systemd, kill) and SIGHUP (the terminal it runs
 * in was closed). Ctrl-C, systemd and a closing terminal signal every process of the
 * group at once, so after the first one a daemon ignores all three: a second signal must
 * not cut its clean-up short.
 */
#include <signal.h>

#include <event2/event.h>

#include "base/xalloc.h"
#include "cli/commands.h"

static const int stop_sigs[CLI_STOP_SIGNALS] = {SIGINT, SIGTERM, SIGHUP};

void cli_stop_signals_add(struct cli_stop_signals *s, struct event_base *base, event_callback_fn fn,
                          void *arg)
{
    for (int i = 0; i < CLI_STOP_SIGNALS; i++) {
        s->ev[i] = evsignal_new(base, stop_sigs[i], fn, arg);
        ASSERT(s->ev[i]);
        event_add(s->ev[i], NULL);
    }
}

void cli_stop_signals_ignore(struct cli_stop_signals *s)
{
    /* libevent puts the default action back when its signal events go: drop them with the
     * signals blocked and ignore the signals before they can come through again */
    sigset_t set, old;
    sigemptyset(&set);
    for (int i = 0; i < CLI_STOP_SIGNALS; i++)
        sigaddset(&set, stop_sigs[i]);
    sigprocmask(SIG_BLOCK, &set, &old);
    for (int i = 0; i < CLI_STOP_SIGNALS; i++) {
        if (s->ev[i]) event_del(s->ev[i]);
        signal(stop_sigs[i], SIG_IGN);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
}

void cli_stop_signals_free(struct cli_stop_signals *s)
{
    for (int i = 0; i < CLI_STOP_SIGNALS; i++) {
        if (s->ev[i]) event_free(s->ev[i]);
        s->ev[i] = NULL;
    }
}
