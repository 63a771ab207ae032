/*
 * fwd.c - relay host-loopback connections to a sandbox port (see fwd.h).
 *
 * Each relayed connection is two bufferevents, h (the host client) and s (the
 * sandbox). Bytes read on one side are moved to the other's output; reading pauses
 * while the other's output holds more than FWD_BUF_MAX and resumes when it drains.
 * An EOF is passed on as shutdown(SHUT_WR) once everything before it was written; the
 * pair is freed when both directions are done, or at the first error.
 */
#include "sandbox/net/fwd.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/xalloc.h"

#define FWD_BUF_MAX (256 * 1024)
#define FWD_CONNS_MAX 256

struct fconn;

struct sbx_fwd {
    struct event_base *base;
    struct evconnlistener *lev;
    struct sockaddr_in to;
    uint16_t port;
    struct fconn *conns;
    int nconns;
};

struct fconn {
    struct sbx_fwd *f;
    struct fconn *prev, *next;
    struct bufferevent *h, *s;
    bool h_eof, s_eof, connected;
};

static void conn_free(struct fconn *c)
{
    struct sbx_fwd *f = c->f;
    if (c->prev)
        c->prev->next = c->next;
    else
        f->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    f->nconns--;
    if (c->h) bufferevent_free(c->h);
    if (c->s) bufferevent_free(c->s);
    free(c);
}

static struct bufferevent *other(struct fconn *c, struct bufferevent *bev)
{
    return bev == c->h ? c->s : c->h;
}

static bool *eof_of(struct fconn *c, struct bufferevent *bev)
{
    return bev == c->h ? &c->h_eof : &c->s_eof;
}

/* Both directions finished and flushed? Then free. */
static bool maybe_done(struct fconn *c)
{
    if (c->h_eof && c->s_eof && evbuffer_get_length(bufferevent_get_output(c->h)) == 0 &&
        evbuffer_get_length(bufferevent_get_output(c->s)) == 0) {
        conn_free(c);
        return true;
    }
    return false;
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct fconn *c = arg;
    struct bufferevent *o = other(c, bev);
    struct evbuffer *out = bufferevent_get_output(o);
    evbuffer_add_buffer(out, bufferevent_get_input(bev));
    if (evbuffer_get_length(out) > FWD_BUF_MAX) bufferevent_disable(bev, EV_READ);
}

/* o's output drained (low watermark 0): resume its peer, pass on a pending EOF. */
static void on_write(struct bufferevent *o, void *arg)
{
    struct fconn *c = arg;
    struct bufferevent *peer = other(c, o);
    if (*eof_of(c, peer)) {
        shutdown(bufferevent_getfd(o), SHUT_WR);
        maybe_done(c);
        return;
    }
    bufferevent_enable(peer, EV_READ);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct fconn *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        c->connected = true;
        bufferevent_enable(c->h, EV_READ);
        bufferevent_enable(c->s, EV_READ);
        return;
    }
    if (what & BEV_EVENT_EOF && !(what & BEV_EVENT_ERROR) && c->connected) {
        on_read(bev, c); /* anything still in the input */
        *eof_of(c, bev) = true;
        bufferevent_disable(bev, EV_READ);
        struct bufferevent *o = other(c, bev);
        if (evbuffer_get_length(bufferevent_get_output(o)) == 0) {
            shutdown(bufferevent_getfd(o), SHUT_WR);
            maybe_done(c);
        }
        return;
    }
    conn_free(c); /* an error, or the sandbox side refused */
}

static void on_accept(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa, int len,
                      void *arg)
{
    struct sbx_fwd *f = arg;
    if (f->nconns >= FWD_CONNS_MAX) {
        close(fd);
        return;
    }
    struct fconn *c = xcalloc(1, sizeof *c);
    c->f = f;
    c->h = bufferevent_socket_new(f->base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->s = bufferevent_socket_new(f->base, -1, BEV_OPT_CLOSE_ON_FREE);
    c->next = f->conns;
    if (c->next) c->next->prev = c;
    f->conns = c;
    f->nconns++;
    if (!c->h || !c->s) {
        if (!c->h) close(fd);
        conn_free(c);
        return;
    }
    bufferevent_setcb(c->h, on_read, on_write, on_event, c);
    bufferevent_setcb(c->s, on_read, on_write, on_event, c);
    bufferevent_setwatermark(c->h, EV_WRITE, 0, 0);
    bufferevent_setwatermark(c->s, EV_WRITE, 0, 0);
    bufferevent_disable(c->h, EV_READ); /* until the sandbox side is connected */
    if (bufferevent_socket_connect(c->s, (struct sockaddr *)&f->to, sizeof f->to) < 0) conn_free(c);
}

struct sbx_fwd *sbx_fwd_new(struct event_base *base, uint16_t port, const struct sockaddr_in *to,
                            int *e)
{
    struct sbx_fwd *f = xcalloc(1, sizeof *f);
    f->base = base;
    f->to = *to;
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC;
    f->lev =
        evconnlistener_new_bind(base, on_accept, f, flags, 128, (struct sockaddr *)&sa, sizeof sa);
    if (!f->lev && port) { /* the port of the last session is taken: any will do */
        sa.sin_port = 0;
        f->lev = evconnlistener_new_bind(base, on_accept, f, flags, 128, (struct sockaddr *)&sa,
                                         sizeof sa);
    }
    if (!f->lev) {
        *e = -errno;
        free(f);
        return NULL;
    }
    struct sockaddr_in b;
    socklen_t bl = sizeof b;
    getsockname(evconnlistener_get_fd(f->lev), (struct sockaddr *)&b, &bl);
    f->port = ntohs(b.sin_port);
    return f;
}

uint16_t sbx_fwd_port(const struct sbx_fwd *f)
{
    return f->port;
}

void sbx_fwd_free(struct sbx_fwd *f)
{
    if (!f) return;
    while (f->conns)
        conn_free(f->conns);
    evconnlistener_free(f->lev);
    free(f);
}
