/*
 * observe.c - command events for the core's users and the front-ends (see observe.h).
 */
#include "sandbox/core/observe.h"

#include "sandbox/core/sandboxd_int.h"

void sbx_observe(struct sbxd *d, struct sbx_observer *o)
{
    o->next = NULL;
    if (d->observers_last)
        d->observers_last->next = o;
    else
        d->observers = o;
    d->observers_last = o;
}

void sbx_cmd_notify(struct sbxd *d, struct sbx_cmd *c, int ev)
{
    sbx_source_on_event(d, c, ev);
    for (struct sbx_observer *o = d->observers; o; o = o->next)
        o->on_cmd(o, c, ev);
}

void sbx_session_notify(struct sbxd *d, struct sbx *s)
{
    for (struct sbx_observer *o = d->observers; o; o = o->next)
        if (o->on_session_end) o->on_session_end(o, s);
}

void sbx_observers_shutdown(struct sbxd *d)
{
    for (struct sbx_observer *o = d->observers; o; o = o->next)
        if (o->on_shutdown) o->on_shutdown(o);
}

void sbx_stdin_forget(struct sbx_cmd *c, struct sbx_stdin_waiter *w)
{
    for (struct stdin_chunk *k = c->in_head; k; k = k->next)
        if (k->w == w) k->w = NULL;
}

void sbx_observers_release(struct sbxd *d)
{
    for (struct sbx_observer *o = d->observers, *next; o; o = next) {
        next = o->next;
        if (o->release) o->release(o);
    }
    d->observers = d->observers_last = NULL;
}
