/*
 * test_sandbox_pty.c - unit tests for the pure pieces of interactive terminals:
 * control messages and the exit message (sandbox/pty.h), the WebSocket handshake
 * helpers (net/ws.h), the SPAWN_PTY encoding (sandbox/proto.h) and the CLI's URL
 * split (cli/sandbox_sh.h). The terminals themselves are tested for real in
 * tests/integration/test_sandbox_pty.py.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli/sandbox_sh.h"
#include "net/ws.h"
#include "sandbox/runtime/proto.h"
#include "sandbox/runtime/pty.h"

static int parse(const char *s, struct sbx_pty_ctl *c, struct err *e)
{
    err_clear(e);
    return sbx_pty_parse_ctl(s, strlen(s), c, e);
}

Test(pty_ctl, valid_messages)
{
    struct sbx_pty_ctl c;
    struct err e = ERR_INIT;
    cr_assert_eq(parse("{\"type\":\"resize\",\"cols\":132,\"rows\":50}", &c, &e), 0, "%s", e.msg);
    cr_assert_eq(c.type, SBX_PTY_CTL_RESIZE);
    cr_assert_eq(c.cols, 132);
    cr_assert_eq(c.rows, 50);
    cr_assert_eq(parse("{\"rows\":1000,\"type\":\"resize\",\"cols\":1}", &c, &e), 0);
    cr_assert_eq(c.cols, 1);
    cr_assert_eq(c.rows, 1000);
    cr_assert_eq(parse("{\"type\":\"signal\",\"signal\":\"INT\"}", &c, &e), 0, "%s", e.msg);
    cr_assert_eq(c.type, SBX_PTY_CTL_SIGNAL);
    cr_assert_eq(c.signal, 2);
    cr_assert_eq(parse("{\"type\":\"signal\",\"signal\":\"SIGTERM\"}", &c, &e), 0);
    cr_assert_eq(c.signal, 15);
    cr_assert_eq(parse("{\"type\":\"signal\",\"signal\":9}", &c, &e), 0);
    cr_assert_eq(c.signal, 9);
}

Test(pty_ctl, invalid_messages)
{
    static const struct {
        const char *msg, *field;
    } bad[] = {
        {"{\"type\":\"resize\",\"cols\":0,\"rows\":10}", "cols"},
        {"{\"type\":\"resize\",\"cols\":1001,\"rows\":10}", "cols"},
        {"{\"type\":\"resize\",\"cols\":10,\"rows\":-1}", "rows"},
        {"{\"type\":\"resize\",\"cols\":10}", "rows"},
        {"{\"type\":\"resize\",\"cols\":\"10\",\"rows\":10}", "cols"},
        {"{\"type\":\"resize\",\"cols\":10.5,\"rows\":10}", "cols"},
        {"{\"type\":\"resize\",\"cols\":10,\"rows\":10,\"extra\":1}", "extra"},
        {"{\"type\":\"signal\",\"signal\":\"NOPE\"}", "signal"},
        {"{\"type\":\"signal\",\"signal\":65}", "signal"},
        {"{\"type\":\"signal\",\"signal\":0}", "signal"},
        {"{\"type\":\"signal\"}", "signal"},
        {"{\"type\":\"exit\"}", "type"},
        {"{\"cols\":1,\"rows\":1}", "type"},
        {"{\"type\":7}", "type"},
        {"[\"resize\"]", ""},
        {"not json", ""},
        {"", ""},
        {"{\"type\":\"resize\",\"type\":\"signal\",\"cols\":1,\"rows\":1}", ""}, /* duplicate */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct sbx_pty_ctl c;
        struct err e = ERR_INIT;
        cr_assert_eq(parse(bad[i].msg, &c, &e), -1, "accepted %s", bad[i].msg);
        cr_assert_eq(e.status, 400, "%s", bad[i].msg);
        cr_assert_str_eq(e.code, "validation_error");
        cr_assert(strstr(e.field, bad[i].field) || strstr(e.msg, bad[i].field), "%s: %s / %s",
                  bad[i].msg, e.field, e.msg);
    }
}

Test(pty_ctl, size_cap)
{
    /* a valid message padded past the cap is refused without being parsed */
    size_t n = SBX_PTY_CTL_MAX + 1;
    char *m = malloc(n + 1);
    memset(m, ' ', n);
    memcpy(m, "{\"type\":\"signal\",\"signal\":2}", 28);
    m[n] = '\0';
    struct sbx_pty_ctl c;
    struct err e = ERR_INIT;
    cr_assert_eq(sbx_pty_parse_ctl(m, n, &c, &e), -1);
    cr_assert(strstr(e.msg, "at most"), "%s", e.msg);
    cr_assert_eq(sbx_pty_parse_ctl(m, SBX_PTY_CTL_MAX, &c, &e), 0, "%s", e.msg);
    free(m);
}

Test(pty_ctl, exit_message)
{
    char *m = sbx_pty_exit_msg(3, 0);
    cr_assert_str_eq(m, "{\"type\":\"exit\",\"code\":3,\"signal\":null}");
    free(m);
    m = sbx_pty_exit_msg(137, 9);
    cr_assert_str_eq(m, "{\"type\":\"exit\",\"code\":137,\"signal\":\"KILL\"}");
    free(m);
}

Test(ws, accept_value_rfc6455_example)
{
    char acc[WS_ACCEPT_LEN + 1];
    ws_accept_value("dGhlIHNhbXBsZSBub25jZQ==", acc);
    cr_assert_str_eq(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

Test(ws, keys)
{
    cr_assert(ws_key_valid("dGhlIHNhbXBsZSBub25jZQ=="));
    cr_assert(!ws_key_valid(NULL));
    cr_assert(!ws_key_valid(""));
    cr_assert(!ws_key_valid("c2hvcnQ="));                /* 5 bytes */
    cr_assert(!ws_key_valid("dGhlIHNhbXBsZSBub25jZQ=")); /* one '=' short */
    cr_assert(!ws_key_valid("dGhlIHNhbXBsZSBub25jZ*=="));
    cr_assert(!ws_key_valid("dGhlIHNhbXBsZSBub25jZR==")); /* stray low bits */
    char a[WS_KEY_LEN + 1], b[WS_KEY_LEN + 1];
    ws_client_key(a);
    ws_client_key(b);
    cr_assert_eq(strlen(a), WS_KEY_LEN);
    cr_assert(ws_key_valid(a) && ws_key_valid(b), "%s %s", a, b);
    cr_assert_str_neq(a, b);
}

Test(ws, client_checks_the_reply)
{
    const char *key = "dGhlIHNhbXBsZSBub25jZQ==";
    const char *good = "HTTP/1.1 101 Switching Protocols\r\nupgrade: WebSocket\r\n"
                       "Connection: keep-alive, Upgrade\r\n"
                       "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
    struct err e = ERR_INIT;
    cr_assert_eq(ws_client_check_reply(good, strlen(good), key, &e), 0, "%s", e.msg);
    const char *wrong = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Accept: AAAA\r\n\r\n";
    cr_assert_eq(ws_client_check_reply(wrong, strlen(wrong), key, &e), -1);
    cr_assert(strstr(e.msg, "Accept"), "%s", e.msg);
    const char *no_up = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
    cr_assert_eq(ws_client_check_reply(no_up, strlen(no_up), key, &e), -1);
    const char *refused = "HTTP/1.1 409 Conflict\r\nContent-Length: 2\r\n\r\n";
    err_clear(&e);
    cr_assert_eq(ws_client_check_reply(refused, strlen(refused), key, &e), -1);
    cr_assert_eq(e.status, 409);
    cr_assert_eq(ws_client_check_reply("garbage\r\n\r\n", 11, key, &e), -1);
    cr_assert_str_eq(e.code, "bad_response");
}

Test(pty_proto, spawn_pty_encoding)
{
    const char *argv[] = {"/bin/bash", "-l"};
    const char *envp[] = {"TERM=xterm-256color"};
    struct sbx_spawn_req r = {.id = 42,
                              .uid = 1000,
                              .gid = 1000,
                              .ngroups = 1,
                              .groups = {1000},
                              .cwd = "/home/a",
                              .argc = 2,
                              .envc = 1,
                              .argv = argv,
                              .envp = envp,
                              .pty = true,
                              .cols = 120,
                              .rows = 40};
    struct buf out;
    buf_init(&out, 0);
    cr_assert_eq(sbx_spawn_encode(&r, &out), 0);
    struct sbx_msg_hdr h;
    const void *pl;
    cr_assert_eq(sbx_msg_decode(out.data, out.len, &h, &pl), 0);
    cr_assert_eq(h.type, SBX_MSG_SPAWN_PTY);
    cr_assert_eq(h.id, 42);
    cr_assert_eq(h.a, 120);
    cr_assert_eq(h.b, 40);
    struct sbx_spawn_req d;
    cr_assert_eq(sbx_spawn_decode(pl, h.len, h.id, &d), 0);
    cr_assert_str_eq(d.argv[1], "-l");
    cr_assert_str_eq(d.envp[0], "TERM=xterm-256color");
    sbx_spawn_req_fini(&d);
    r.cols = 0;
    cr_assert_eq(sbx_spawn_encode(&r, &out), -EINVAL);
    r.cols = SBX_PTY_DIM_MAX + 1;
    cr_assert_eq(sbx_spawn_encode(&r, &out), -EINVAL);
    r.pty = false; /* a plain spawn ignores the size */
    cr_assert_eq(sbx_spawn_encode(&r, &out), 0);
    cr_assert_eq(sbx_msg_decode(out.data, out.len, &h, &pl), 0);
    cr_assert_eq(h.type, SBX_MSG_SPAWN);
    cr_assert_eq(h.a, 0);
    buf_fini(&out);
}

Test(pty_cli, split_url)
{
    char host[64], port[8], prefix[64];
    cr_assert_eq(sbx_cli_split_url("http://127.0.0.1:8090", host, sizeof host, port, sizeof port,
                                   prefix, sizeof prefix),
                 0);
    cr_assert_str_eq(host, "127.0.0.1");
    cr_assert_str_eq(port, "8090");
    cr_assert_str_eq(prefix, "");
    cr_assert_eq(sbx_cli_split_url("http://[::1]:9/base/", host, sizeof host, port, sizeof port,
                                   prefix, sizeof prefix),
                 0);
    cr_assert_str_eq(host, "::1");
    cr_assert_str_eq(port, "9");
    cr_assert_str_eq(prefix, "/base");
    cr_assert_eq(sbx_cli_split_url("http://localhost", host, sizeof host, port, sizeof port, prefix,
                                   sizeof prefix),
                 0);
    cr_assert_str_eq(port, "80");
    static const char *bad[] = {"https://x:1", "http://", "http://:80", "http://h:x",
                                "http://h:",   "ftp://h", "http://[::1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(
            sbx_cli_split_url(bad[i], host, sizeof host, port, sizeof port, prefix, sizeof prefix),
            -1, "%s", bad[i]);
}
