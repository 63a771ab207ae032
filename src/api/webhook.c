/* webhook.c - libcurl's multi interface driven by libevent (see webhook.h). */
#include "api/webhook.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

#define REPLY_MAX (64 * 1024)

struct post {
    struct post *next, *prev;
    struct webhook *w;
    CURL *easy;
    struct curl_slist *hdrs;
    char *body;
    size_t got;
    webhook_done_fn done;
    webhook_reply_fn done_reply; /* instead of done: the reply body is kept in reply */
    void *arg;
    char *reply;
    bool probe; /* connect only: success is status 200 */
    char errbuf[CURL_ERROR_SIZE];
};

struct sock {
    struct sock *next, *prev;
    struct event *ev;
};

struct webhook {
    struct event_base *base;
    CURLM *multi;
    struct event *timer, *reap; /* reap: finish posts outside curl's callbacks */
    struct post *posts;
    struct sock *socks; /* freed at the end if curl does not remove them itself */
    int n;
};

static void sock_free(struct webhook *w, struct sock *sk)
{
    if (sk->prev) sk->prev->next = sk->next;
    else w->socks = sk->next;
    if (sk->next) sk->next->prev = sk->prev;
    event_free(sk->ev);
    free(sk);
}

static void check_done(struct webhook *w);

static void post_free(struct post *p)
{
    struct webhook *w = p->w;
    if (p->prev) p->prev->next = p->next;
    else w->posts = p->next;
    if (p->next) p->next->prev = p->prev;
    w->n--;
    curl_multi_remove_handle(w->multi, p->easy);
    curl_easy_cleanup(p->easy);
    curl_slist_free_all(p->hdrs);
    free(p->body);
    free(p->reply);
    free(p);
}

static void event_cb(evutil_socket_t fd, short what, void *arg)
{
    struct webhook *w = arg;
    int flags = (what & EV_READ ? CURL_CSELECT_IN : 0) | (what & EV_WRITE ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(w->multi, fd, flags, &running);
    check_done(w);
}

static int socket_cb(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
    struct webhook *w = userp;
    struct sock *sk = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (sk) {
            sock_free(w, sk);
            curl_multi_assign(w->multi, s, NULL);
        }
        return 0;
    }
    short ev = EV_PERSIST | (what & CURL_POLL_IN ? EV_READ : 0) | (what & CURL_POLL_OUT ? EV_WRITE : 0);
    if (!sk) {
        sk = xcalloc(1, sizeof *sk);
        sk->next = w->socks;
        if (w->socks) w->socks->prev = sk;
        w->socks = sk;
        curl_multi_assign(w->multi, s, sk);
    } else {
        event_free(sk->ev);
    }
    sk->ev = event_new(w->base, s, ev, event_cb, w);
    event_add(sk->ev, NULL);
    return 0;
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct webhook *w = arg;
    int running;
    curl_multi_socket_action(w->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(w);
}

static int timerfn(CURLM *m, long timeout_ms, void *userp)
{
    struct webhook *w = userp;
    if (timeout_ms < 0) {
        evtimer_del(w->timer);
        return 0;
    }
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    evtimer_add(w->timer, &tv);
    return 0;
}

static void check_done(struct webhook *w)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(w->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        struct post *p = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&p);
        long status = 0;
        char why[CURL_ERROR_SIZE + 32] = "";
        if (m->data.result == CURLE_OK) {
            if (p->probe) status = 200;
            else curl_easy_getinfo(p->easy, CURLINFO_RESPONSE_CODE, &status);
        } else {
            snprintf(why, sizeof why, "%s", p->errbuf[0] ? p->errbuf : curl_easy_strerror(m->data.result));
        }
        webhook_done_fn done = p->done;
        webhook_reply_fn done_reply = p->done_reply;
        void *arg = p->arg;
        char *reply = p->reply;
        size_t got = p->got;
        p->reply = NULL;
        post_free(p);
        if (done_reply) done_reply(arg, status, why, reply ? reply : "", reply ? got : 0);
        else done(arg, status, why);
        free(reply);
    }
}

static void reap_cb(evutil_socket_t fd, short what, void *arg)
{
    int running;
    struct webhook *w = arg;
    curl_multi_socket_action(w->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(w);
}

static size_t write_cb(char *data, size_t size, size_t n, void *arg)
{
    struct post *p = arg;
    size_t add = size * n;
    if (p->got + add > REPLY_MAX) return 0; /* a huge reply ends the transfer */
    if (p->done_reply) {
        p->reply = xrealloc(p->reply, p->got + add + 1);
        memcpy(p->reply + p->got, data, add);
        p->reply[p->got + add] = '\0';
    }
    p->got += add;
    return add;
}

struct webhook *webhook_new(struct event_base *base)
{
    static int inited;
    if (!inited++) curl_global_init(CURL_GLOBAL_DEFAULT);
    struct webhook *w = xcalloc(1, sizeof *w);
    w->base = base;
    w->multi = curl_multi_init();
    w->timer = evtimer_new(base, timer_cb, w);
    w->reap = event_new(base, -1, 0, reap_cb, w);
    curl_multi_setopt(w->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(w->multi, CURLMOPT_SOCKETDATA, w);
    curl_multi_setopt(w->multi, CURLMOPT_TIMERFUNCTION, timerfn);
    curl_multi_setopt(w->multi, CURLMOPT_TIMERDATA, w);
    return w;
}

void webhook_free(struct webhook *w)
{
    if (!w) return;
    while (w->posts) {
        webhook_done_fn done = w->posts->done;
        webhook_reply_fn done_reply = w->posts->done_reply;
        void *arg = w->posts->arg;
        post_free(w->posts);
        if (done_reply) done_reply(arg, -1, "the kernel is stopping", "", 0);
        else if (done) done(arg, -1, "the kernel is stopping"); /* status -1: only release arg */
    }
    curl_multi_cleanup(w->multi);
    while (w->socks) sock_free(w, w->socks);
    event_free(w->timer);
    event_free(w->reap);
    free(w);
}

int webhook_post(struct webhook *w, const char *url, const char *const *headers, const char *body,
                 size_t len, long timeout_ms, webhook_done_fn done, void *arg)
{
    struct post *p = xcalloc(1, sizeof *p);
    p->w = w;
    p->done = done;
    p->arg = arg;
    p->easy = curl_easy_init();
    if (!p->easy) {
        free(p);
        return -1;
    }
    p->body = xmalloc(len + 1);
    memcpy(p->body, body, len);
    p->body[len] = '\0';
    for (size_t i = 0; headers && headers[i]; i++) p->hdrs = curl_slist_append(p->hdrs, headers[i]);
    p->hdrs = curl_slist_append(p->hdrs, "Expect:"); /* no 100-continue round trip */
    CURL *e = p->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, p->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, p->hdrs);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 10000 ? timeout_ms : 10000L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, p);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, p->errbuf);
    curl_easy_setopt(e, CURLOPT_PRIVATE, p);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "rebuno-kernel");
    p->next = w->posts;
    if (w->posts) w->posts->prev = p;
    w->posts = p;
    w->n++;
    if (curl_multi_add_handle(w->multi, e) != CURLM_OK) {
        p->done = NULL;
        post_free(p);
        return -1;
    }
    event_active(w->reap, 0, 0); /* start it from the loop, not from the caller's stack */
    return 0;
}

int webhook_post_reply(struct webhook *w, const char *url, const char *const *headers, const char *body,
                       size_t len, long timeout_ms, webhook_reply_fn done, void *arg)
{
    /* webhook_post with a placeholder done, swapped for the reply callback before any
     * transfer starts (posts only start from the loop) */
    if (webhook_post(w, url, headers, body, len, timeout_ms, NULL, arg) < 0) return -1;
    w->posts->done_reply = done;
    return 0;
}

int webhook_probe(struct webhook *w, const char *url, long timeout_ms, webhook_done_fn done, void *arg)
{
    struct post *p = xcalloc(1, sizeof *p);
    p->w = w;
    p->done = done;
    p->arg = arg;
    p->probe = true;
    if (!(p->easy = curl_easy_init())) {
        free(p);
        return -1;
    }
    CURL *e = p->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, p->errbuf);
    curl_easy_setopt(e, CURLOPT_PRIVATE, p);
    p->next = w->posts;
    if (w->posts) w->posts->prev = p;
    w->posts = p;
    w->n++;
    if (curl_multi_add_handle(w->multi, e) != CURLM_OK) {
        p->done = NULL;
        post_free(p);
        return -1;
    }
    event_active(w->reap, 0, 0);
    return 0;
}

int webhook_in_flight(const struct webhook *w)
{
    return w->n;
}
