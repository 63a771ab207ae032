/*
 * connect.c - the Connect protocol as the e2b SDK speaks it to envd: JSON mode only,
 * no compression. Unary RPCs are a JSON body in, a JSON body out (errors: a status
 * and {"code","message"}); server-streaming ones are one 5-byte-framed envelope in,
 * then envelopes out ending with an end-of-stream envelope (flags 0x02) that carries
 * the error, if any.
 */
#include "sandbox/e2b/e2b_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jtext.h"

#define CX_MSG_MAX (1u << 20) /* bytes of one request message */
#define CX_FLAG_COMPRESSED 0x01
#define CX_FLAG_END 0x02

static const struct {
    const char *code;
    int status;
} codes[] = {
    {"invalid_argument", 400}, {"unauthenticated", 401}, {"permission_denied", 403},
    {"not_found", 404},        {"already_exists", 409},  {"failed_precondition", 412},
    {"resource_exhausted", 429}, {"internal", 500},      {"unimplemented", 501},
    {"unavailable", 503},      {"deadline_exceeded", 504}, {"unknown", 500},
};

static int code_status(const char *code)
{
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (!strcmp(codes[i].code, code)) return codes[i].status;
    return 500;
}

const char *cx_code(const struct err *e)
{
    switch (e->status) {
    case 400: case 413: case 422: return "invalid_argument";
    case 401: return "unauthenticated";
    case 403: return "permission_denied";
    case 404: case 410: return "not_found";
    case 409:
        return strstr(e->code, "exists") ? "already_exists" : "failed_precondition";
    case 429: return "resource_exhausted";
    case 503: return "unavailable";
    case 504: return "deadline_exceeded";
    case 507: return "resource_exhausted";
    default: return "internal";
    }
}

static void error_body(struct http_req *r, const char *code, const char *msg)
{
    json_t *o = json_object();
    json_object_set_new(o, "code", json_string(code));
    json_object_set_new(o, "message", json_string(msg));
    http_reply_json(r, code_status(code), o);
}

void cx_error(struct http_req *r, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    error_body(r, code, msg);
}

void cx_error_err(struct http_req *r, const struct err *e)
{
    error_body(r, cx_code(e), e->msg);
}

static json_t *parse_msg(struct http_req *r, const char *p, size_t n)
{
    json_error_t je;
    json_t *j = json_loadb(p, n, JSON_REJECT_DUPLICATES, &je);
    if (!j || !json_is_object(j)) {
        json_decref(j);
        cx_error(r, "invalid_argument", "the request message is not a JSON object: %s",
                 j ? "not an object" : je.text);
        return NULL;
    }
    return j;
}

json_t *cx_unary_body(struct http_req *r)
{
    size_t n;
    const char *p = http_req_body(r, &n);
    if (n > CX_MSG_MAX) {
        cx_error(r, "resource_exhausted", "request messages are limited to %u bytes",
                 CX_MSG_MAX);
        return NULL;
    }
    if (n == 0) return json_object();
    return parse_msg(r, p, n);
}

json_t *cx_stream_body(struct http_req *r)
{
    size_t n;
    const unsigned char *p = (const unsigned char *)http_req_body(r, &n);
    if (n < 5) {
        cx_error(r, "invalid_argument", "the request must be one Connect envelope");
        return NULL;
    }
    uint32_t len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
    if (p[0] & CX_FLAG_COMPRESSED) {
        cx_error(r, "unimplemented", "compressed messages are not supported");
        return NULL;
    }
    if (len > CX_MSG_MAX || (size_t)len != n - 5) {
        cx_error(r, "invalid_argument",
                 "the envelope says %u bytes but %zu follow (one message, at most %u bytes)",
                 len, n - 5, CX_MSG_MAX);
        return NULL;
    }
    return parse_msg(r, (const char *)p + 5, len);
}

void cx_reply(struct http_req *r, json_t *msg)
{
    http_reply_json(r, 200, msg ? msg : json_object());
}

void cx_stream_start(struct http_req *r)
{
    http_stream_start(r, "application/connect+json");
}

static int send_envelope(struct http_req *r, unsigned flags, json_t *msg)
{
    size_t len;
    char *s = jtext_dump(msg, &len);
    json_decref(msg);
    if (!s) return -ENOMEM;
    unsigned char *frame = malloc(len + 5);
    if (!frame) {
        free(s);
        return -ENOMEM;
    }
    frame[0] = (unsigned char)flags;
    frame[1] = (unsigned char)(len >> 24);
    frame[2] = (unsigned char)(len >> 16);
    frame[3] = (unsigned char)(len >> 8);
    frame[4] = (unsigned char)len;
    memcpy(frame + 5, s, len);
    free(s);
    int rc = http_stream_write(r, frame, len + 5); /* -EAGAIN: nothing was queued */
    free(frame);
    return rc;
}

int cx_stream_send(struct http_req *r, json_t *msg)
{
    return send_envelope(r, 0, msg);
}

int cx_stream_end(struct http_req *r, const char *code, const char *message)
{
    json_t *o = json_object();
    if (code) {
        json_t *e = json_object();
        json_object_set_new(e, "code", json_string(code));
        json_object_set_new(e, "message", json_string(message ? message : code));
        json_object_set_new(o, "error", e);
    }
    int rc = send_envelope(r, CX_FLAG_END, o);
    if (rc == -EAGAIN) return rc;
    http_sse_end(r);
    return 0;
}
