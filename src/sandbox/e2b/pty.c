/*
 * pty.c - envd's terminals (Start with "pty", data.pty output, SendInput pty, Update
 * size, SendSignal) over the core's terminals. Not there yet: every call says so.
 */
#include "sandbox/e2b/e2b_int.h"

void e2b_pty_start(struct e2b *e, struct sbx *s, struct http_req *r)
{
    cx_stream_start(r);
    cx_stream_end(r, "unimplemented", "terminals are not available on this endpoint yet");
}

bool e2b_pty_connect(struct e2b *e, struct sbx *s, struct http_req *r, const json_t *body)
{
    return false;
}

void e2b_pty_list(struct sbx *s, json_t *arr)
{
}

int e2b_pty_input(struct sbx *s, int64_t pid, const void *data, size_t len, struct err *err)
{
    return err_set(err, 404, "not_found", "process.pid", "no terminal with pid %lld",
                   (long long)pid);
}

bool e2b_pty_signal(struct sbx *s, int64_t pid, int sig, struct err *err)
{
    return false;
}

int e2b_pty_update(struct sbx *s, int64_t pid, const json_t *body, struct err *err)
{
    return err_set(err, 404, "not_found", "process.pid", "no terminal with pid %lld",
                   (long long)pid);
}
