/*
 * worker.h - a small thread pool that reports back to a libevent loop.
 *
 * The loop submits a job; a worker thread runs work(arg); the loop thread then
 * runs done(arg). A job can be canceled from the loop at any time before done()
 * ran: done() is then skipped and drop(arg) runs instead (also on the loop, once
 * the thread is finished with it), so the job's memory has one owner at every
 * moment. Used for blocking work the event loop must not wait for: minting leaf
 * certificates (the CA key is only touched on the signer thread) and getaddrinfo.
 */
#ifndef REBUNO_PROXY_WORKER_H
#define REBUNO_PROXY_WORKER_H

#include <event2/event.h>

#include "base/err.h"

typedef void (*proxy_job_fn)(void *arg);

struct proxy_worker;
struct proxy_job;

struct proxy_worker *proxy_worker_new(struct event_base *base, int threads, struct err *err);
/* Stops and joins the threads (waiting for jobs that are running); every job not
 * yet delivered gets drop(). */
void proxy_worker_free(struct proxy_worker *w);
/* work runs on a thread; done or drop (not both) later on the loop, never inside
 * this call. drop may be NULL. */
struct proxy_job *proxy_worker_submit(struct proxy_worker *w, proxy_job_fn work, proxy_job_fn done,
                                      proxy_job_fn drop, void *arg);
/* Loop thread, before done() ran: done() will not run; drop() will. */
void proxy_worker_cancel(struct proxy_job *j);

#endif
