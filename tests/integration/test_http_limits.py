"""The connection limits of both HTTP APIs (src/net/http.c; docs/api.md "Connections",
docs/sandbox-api.md "Conventions"): slowloris against the kernel and sandboxd with the
real defaults, heads and bodies that drip, idle keep-alive connections shed for a new
one, a peer's share, and the long-lived replies (long-poll, SSE, WebSocket, a 16 MiB
upload) that must outlive short deadlines.

The slow clients are real sockets in this process, driven by one selector loop; health
probes run in a thread, each on a fresh connection, like a monitor's."""
import base64
import http.client
import json
import resource
import selectors
import socket
import threading
import time

import pytest

from conftest import Dispatch
from test_events import read_sse
from test_sandbox_commands import sse_events
from test_sandbox_pty import Term

SLOW = 4200  # the load: more than the 4,096 connections a server holds
HEADER_TIMEOUT = 10  # the default head deadline, seconds


@pytest.fixture
def many_files():
    """Room for the slow connections here and in the daemons started after this (they
    inherit the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * SLOW + 1024
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class Slow:
    """n connections from address src, each sending `first` at once and then one more
    byte of `drip` every `every` seconds; with refill, the ones the server closes are
    opened again once a second, as an attacker's tool does. Records how each one ended
    (what the server sent, how long it lived)."""

    def __init__(self, sel, port, n, every, first, drip=b"a", src="127.0.0.1", refill=True):
        self.sel, self.port, self.n, self.every = sel, port, n, every
        self.first, self.drip, self.src, self.refill = first, drip, src, refill
        self.open = {}  # socket -> [opened_at, next drip]
        self.ended = []  # (lived seconds, bytes the server sent)
        self.oldest_left = 0.0  # age of the oldest one still open at the end
        self.connect_errors = 0
        self.next_fill = 0.0

    def fill(self, now):
        if now < self.next_fill or (not self.refill and self.next_fill):
            return
        self.next_fill = now + 1.0
        while len(self.open) < self.n:
            s = socket.socket()
            try:
                s.bind((self.src, 0))
                s.settimeout(2)
                s.connect(("127.0.0.1", self.port))
                s.sendall(self.first)
            except OSError:
                s.close()
                self.connect_errors += 1
                return
            s.setblocking(False)
            t = time.monotonic()
            # spread the drips over the interval, as n independent clients would
            self.open[s] = [t, t + self.every * (len(self.open) % 97 + 1) / 97]
            self.sel.register(s, selectors.EVENT_READ, self)

    def tick(self, now):
        for s, st in self.open.items():
            if st[1] <= now:
                st[1] = now + self.every
                try:
                    s.send(self.drip)
                except OSError:
                    pass  # closed by the server: the selector reports it

    def readable(self, s):
        got = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        except BlockingIOError:
            if not got:
                return
        except OSError:
            pass
        # the server answers a late head with 408 and closes: either way this one is over
        self.ended.append((time.monotonic() - self.open[s][0], got))
        self.close(s)

    def close(self, s):
        self.sel.unregister(s)
        del self.open[s]
        s.close()

    def close_all(self):
        now = time.monotonic()
        self.oldest_left = max((now - st[0] for st in self.open.values()), default=0.0)
        for s in list(self.open):
            self.close(s)


def drive(pools, seconds):
    sel = pools[0].sel
    end = time.monotonic() + seconds
    while (now := time.monotonic()) < end:
        for p in pools:
            p.fill(now)
            p.tick(now)
        for key, _ in sel.select(timeout=0.05):
            key.data.readable(key.fileobj)


class Prober(threading.Thread):
    """GET path on a fresh connection every 0.2 s until stopped; records each answer."""

    def __init__(self, port, path):
        super().__init__(daemon=True)
        self.port, self.path = port, path
        self.answers, self.stop = [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", self.path)
                r = c.getresponse()
                self.answers.append((r.status, r.read()))
                c.close()
            except OSError as e:  # refused, reset, timed out: not answered
                self.answers.append((None, repr(e).encode()))
            self.stop.wait(0.2)


def slowloris(port, health, seconds, extra=()):
    """The issue's load (SLOW connections from 127.0.0.1, each a byte of a request head
    every 5 s) for `seconds`, with health probes from the same address; returns the
    pool and the probes' answers."""
    sel = selectors.DefaultSelector()
    pool = Slow(sel, port, SLOW, 5.0, b"G", b"ET / HTTP/1.1\r\nX-Slow: " + b"a" * 60000)
    pools = [pool] + [cls(sel) for cls in extra]
    probe = Prober(port, health)
    try:
        pool.fill(time.monotonic())
        assert len(pool.open) >= SLOW - 10, f"only {len(pool.open)} slow connections opened"
        probe.start()
        drive(pools, seconds)
    finally:
        probe.stop.set()
        probe.join(10)
        for p in pools:
            p.close_all()
        sel.close()
    return pools, probe.answers


def all_answered(answers):
    bad = [a for a in answers if a[0] != 200]
    assert len(answers) >= 5 and not bad, \
        f"{len(bad)} of {len(answers)} health probes not answered, e.g. {bad[:3]}"


def error_of(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), raw[:200]
    return json.loads(body)  # the kernel's envelope: {code, message, details} at the top


def test_slowloris_kernel(make_kernel, many_files):
    """Health stays answered under the issue's load; heads and bodies that drip (from
    another peer, so nothing sheds them) are cut at their deadline with 408 although a
    byte arrives every second."""
    k = make_kernel().start()
    heads = lambda sel: Slow(sel, k.port, 20, 1.0, b"GET /v0/health HTTP/1.1\r\nX-Pad: ",
                             src="127.0.0.2", refill=False)
    bodies = lambda sel: Slow(sel, k.port, 5, 1.0,
                              b"POST /v0/executions HTTP/1.1\r\nHost: k\r\n"
                              b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
                              b'{"agent_id": "hello", "input": "', src="127.0.0.2", refill=False)
    (pool, head_pool, body_pool), answers = slowloris(k.port, "/v0/health",
                                                     HEADER_TIMEOUT + 3, (heads, bodies))
    all_answered(answers)
    # no dripping connection outlives its deadline (plus slack), though each keeps sending
    limit = HEADER_TIMEOUT + 2.5
    assert max(lived for lived, _ in pool.ended) < limit and pool.oldest_left < limit
    for p, field in ((head_pool, "headers"), (body_pool, "body")):
        assert len(p.ended) == p.n, f"{p.n - len(p.ended)} {field} drippers were not cut"
        for lived, raw in p.ended:
            assert lived < limit, lived
            e = error_of(raw)
            assert e["code"] == "request_timeout" and e["details"]["field"] == field, e
    assert k.proc.poll() is None


def test_slowloris_sandboxd(make_sandboxd, many_files):
    """The same load against /v1 (its share per peer is the whole table, so here the full
    table sheds): health stays answered."""
    d = make_sandboxd().start()
    (pool,), answers = slowloris(d.port, "/v1/health", 6)
    all_answered(answers)
    assert d.proc.poll() is None


def test_idle_keep_alive_shed_and_peer_share(make_kernel):
    """A full table of idle keep-alive connections makes room for a new one (the longest
    idle goes); a peer at its share sheds its own connections, not another peer's."""
    k = make_kernel(args=["--http-max-connections", "60",
                          "--http-max-connections-per-peer", "40"]).start()
    conns = []
    try:
        def keep_alive(src):
            c = http.client.HTTPConnection("127.0.0.1", k.port, timeout=5,
                                           source_address=(src, 0))
            c.request("GET", "/v0/health")
            assert c.getresponse().read()
            conns.append(c)
            return c

        others = [keep_alive("127.0.0.2") for _ in range(20)]
        mine = [keep_alive("127.0.0.1") for _ in range(40)]  # the table is full now
        time.sleep(0.1)
        st, _ = k.request("GET", "/v0/health")  # from 127.0.0.1, at its share: sheds its own
        assert st == 200
        assert mine[0].sock.recv(1) == b"", "127.0.0.1's longest idle connection must go"
        for c in others + mine[1:]:  # all still there; idle again in this order
            c.request("GET", "/v0/health")
            assert c.getresponse().read()
        keep_alive("127.0.0.3")  # the 60th
        time.sleep(0.1)
        keep_alive("127.0.0.3")  # another peer, the table full: the longest idle goes
        assert others[0].sock.recv(1) == b"", "the longest idle connection must make room"
        for c in others[1:] + mine[1:]:
            c.request("GET", "/v0/health")
            assert c.getresponse().status == 200
    finally:
        for c in conns:
            c.close()


def test_long_lived_replies_outlive_short_deadlines_kernel(make_kernel):
    """A claim long-poll and an event stream last longer than every deadline; a big body
    arrives in time; an idle keep-alive connection is closed quietly after its timeout."""
    k = make_kernel(args=["--http-header-timeout-seconds", "1", "--http-idle-timeout-seconds", "1",
                          "--http-body-timeout-seconds", "1"]).start()
    w = k.worker("hello")
    t0 = time.monotonic()
    assert k.claim("hello", w, wait=3) is None  # 204 after the full wait
    assert time.monotonic() - t0 >= 2.9
    ex = k.create("hello", {"blob": "x" * (900 * 1024)})  # 900 KiB body
    path = f"/v0/executions/{ex['id']}/events/stream"
    frames = {}
    t = threading.Thread(target=lambda: frames.update(all=read_sse(k.port, path, timeout=20)))
    t.start()
    time.sleep(2.5)  # the stream idles past every deadline
    d = Dispatch(k, k.claim("hello", w))
    assert d.complete({"ok": True})[0] == 204
    t.join(20)
    types = [f["event"] for f in frames.get("all", [])]
    assert types and types[0] == "execution.created" and types[-1] == "execution.completed", types
    # idle keep-alive: closed, without a reply, once the idle timeout is over
    s = socket.create_connection(("127.0.0.1", k.port), timeout=5)
    s.sendall(b"GET /v0/health HTTP/1.1\r\nHost: k\r\n\r\n")
    assert s.recv(65536).startswith(b"HTTP/1.1 200 ")
    assert s.recv(65536) == b""
    s.close()


def test_long_lived_replies_outlive_short_deadlines_sandboxd(make_sandboxd):
    """A command's output stream, a wait long-poll and a terminal's WebSocket last longer
    than every deadline; a 16 MiB upload arrives in time."""
    d = make_sandboxd(args=["--header-timeout", "1", "--idle-timeout", "1",
                            "--body-timeout", "1"]).start()
    d.create("ll")
    blob = bytes(range(256)) * (16 * 1024 * 1024 // 256)
    d.write("ll", "/tmp/blob", blob)
    st, back = d.read("ll", "/tmp/blob")
    assert st == 200 and back == blob
    c = d.ok("POST", "/v1/sandboxes/ll/commands",
             {"cmd": "bash", "args": ["-c", "echo one; sleep 2.5; echo two"]}, status=201)
    evs = sse_events(d, f"/v1/sandboxes/ll/commands/{c['id']}/stream")
    out = b"".join(base64.b64decode(json.loads(e["data"])["data"]) for e in evs
                   if e.get("event") == "stdout")
    assert out == b"one\ntwo\n" and evs[-1]["event"] == "exit", evs
    c = d.ok("POST", "/v1/sandboxes/ll/commands", {"cmd": "sleep", "args": ["2.5"]}, status=201)
    w = d.ok("GET", f"/v1/sandboxes/ll/commands/{c['id']}/wait?timeout_ms=10000")
    assert w["status"] == "exited" and w["exit_code"] == 0
    term = Term(d, "ll")
    time.sleep(2.5)
    term.type("echo still-$((40+2))\r")
    term.until(rb"still-42")
    term.type("exit\r")
    assert term.wait()["code"] == 0
