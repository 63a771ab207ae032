/*
 * worker.c - thread pool with results delivered on the event loop (see worker.h).
 *
 * Threads and loop meet in one mutex: a FIFO of queued jobs and a list of
 * finished ones. A finished job writes one byte into a non-blocking pipe whose
 * read end is a persistent event on the loop; the loop drains the pipe and the
 * finished list together, so a full pipe (EAGAIN) never loses a wake-up.
 * `canceled` is only touched on the loop thread.
 */
#include "proxy/worker.h"

#include "base/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct proxy_job {
    struct proxy_job *next;
    proxy_job_fn work, done, drop;
    void *arg;
    bool canceled;
};

struct proxy_worker {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct proxy_job *queue, **queue_tail; /* mu */
    struct proxy_job *fin, **fin_tail;     /* mu */
    bool stop;                             /* mu */
    int nthreads;
    pthread_t *threads;
    int pipe[2];
    struct event *ev;
};

static void *worker_main(void *arg)
{
    struct proxy_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->queue && !w->stop)
            pthread_cond_wait(&w->cond, &w->mu);
        if (w->stop) break;
        struct proxy_job *j = w->queue;
        w->queue = j->next;
        if (!w->queue) w->queue_tail = &w->queue;
        pthread_mutex_unlock(&w->mu);
        j->work(j->arg);
        pthread_mutex_lock(&w->mu);
        j->next = NULL;
        *w->fin_tail = j;
        w->fin_tail = &j->next;
        char c = 1;
        ssize_t r = write(w->pipe[1], &c, 1);
        (void)r; /* EAGAIN: a wake-up is already pending */
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void job_finish(struct proxy_job *j)
{
    if (j->canceled) {
        if (j->drop) j->drop(j->arg);
    } else {
        j->done(j->arg);
    }
    free(j);
}

static void worker_wake(evutil_socket_t fd, short what, void *arg)
{
    struct proxy_worker *w = arg;
    char b[256];
    while (read(fd, b, sizeof b) > 0) {
    }
    pthread_mutex_lock(&w->mu);
    struct proxy_job *list = w->fin;
    w->fin = NULL;
    w->fin_tail = &w->fin;
    pthread_mutex_unlock(&w->mu);
    while (list) {
        struct proxy_job *j = list;
        list = j->next;
        job_finish(j);
    }
}

struct proxy_worker *proxy_worker_new(struct event_base *base, int threads, struct err *err)
{
    struct proxy_worker *w = xcalloc(1, sizeof *w);
    w->queue_tail = &w->queue;
    w->fin_tail = &w->fin;
    if (pipe2(w->pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
        err_internal(err, "worker pipe: %s", strerror(errno));
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->ev = event_new(base, w->pipe[0], EV_READ | EV_PERSIST, worker_wake, w);
    event_add(w->ev, NULL);
    w->threads = xcalloc((size_t)threads, sizeof *w->threads);
    for (int i = 0; i < threads; i++) {
        int rc = pthread_create(&w->threads[i], NULL, worker_main, w);
        if (rc != 0) {
            err_internal(err, "worker thread: %s", strerror(rc));
            proxy_worker_free(w);
            return NULL;
        }
        w->nthreads++;
    }
    return w;
}

void proxy_worker_free(struct proxy_worker *w)
{
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->nthreads; i++)
        pthread_join(w->threads[i], NULL);
    /* Nothing runs any more: every job left is dropped, delivered or not. */
    struct proxy_job *lists[2] = {w->queue, w->fin};
    for (int i = 0; i < 2; i++)
        while (lists[i]) {
            struct proxy_job *j = lists[i];
            lists[i] = j->next;
            j->canceled = true;
            job_finish(j);
        }
    event_free(w->ev);
    close(w->pipe[0]);
    close(w->pipe[1]);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cond);
    free(w->threads);
    free(w);
}

struct proxy_job *proxy_worker_submit(struct proxy_worker *w, proxy_job_fn work, proxy_job_fn done,
                                      proxy_job_fn drop, void *arg)
{
    struct proxy_job *j = xcalloc(1, sizeof *j);
    j->work = work;
    j->done = done;
    j->drop = drop;
    j->arg = arg;
    pthread_mutex_lock(&w->mu);
    *w->queue_tail = j;
    w->queue_tail = &j->next;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->mu);
    return j;
}

void proxy_worker_cancel(struct proxy_job *j)
{
    j->canceled = true;
}
