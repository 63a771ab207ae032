"""Interactive terminals (`/v1/sandboxes/:ref/ptys`, docs/sandbox-api.md "Terminals")
against a real sandboxd: a tty inside the sandbox, full-screen programs, resize, exit
codes and signals, abrupt disconnects, back-pressure, many terminals at once, lazy
resume, validation, and `rebuno sandbox sh` driven through tmux.

The WebSocket client is written here with the standard library (handshake and
framing), so nothing on the client side is shared with the server's code."""
import base64
import hashlib
import json
import os
import re
import shlex
import signal
import socket
import struct
import subprocess
import threading
import time
import uuid

import pytest

from conftest import BIN, local_auth

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class WS:
    """A minimal RFC 6455 client: handshake, masked frames out, frames in."""

    def __init__(self, port, path, timeout=30, headers=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        h = {"Host": f"127.0.0.1:{port}", "Upgrade": "websocket", "Connection": "Upgrade",
             "Sec-WebSocket-Key": key, "Sec-WebSocket-Version": "13", **local_auth(port, "sandboxd"),
             **(headers or {})}
        req = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
        self.sock.sendall((req + "\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("closed during the handshake")
            self.buf += chunk
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        self.head = head.decode()
        self.status = int(self.head.split()[1])
        if self.status == 101:
            want = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
            assert f"Sec-WebSocket-Accept: {want}" in self.head, self.head

    def send(self, payload, opcode=2):
        payload = payload.encode() if isinstance(payload, str) else payload
        n, mask = len(payload), os.urandom(4)
        hdr = bytes([0x80 | opcode])
        if n < 126:
            hdr += bytes([0x80 | n])
        elif n < 65536:
            hdr += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            hdr += bytes([0x80 | 127]) + struct.pack(">Q", n)
        m = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
        body = (int.from_bytes(payload, "big") ^ m).to_bytes(n, "big") if n else b""
        self.sock.sendall(hdr + mask + body)

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("connection closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self):
        b0, b1 = self._read(2)
        assert b0 & 0x80 and not b1 & 0x80, "one unmasked frame per message from the server"
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._read(8))[0]
        return b0 & 0x0F, self._read(n)

    def close(self):
        self.sock.close()


class Term:
    """One attached terminal: its output so far, its exit message, its close code."""

    def __init__(self, d, ref, **body):
        self.d, self.ref = d, ref
        self.info = d.ok("POST", f"/v1/sandboxes/{ref}/ptys", body, status=201)
        self.ws = WS(d.port, f"/v1/sandboxes/{ref}/ptys/{self.info['id']}/ws")
        assert self.ws.status == 101, self.ws.head
        self.out, self.exit, self.close_code, self.errors = bytearray(), None, None, []
        self.searched = 0  # output before this (less a margin) was searched already

    def type(self, text):
        self.ws.send(text)

    def control(self, **msg):
        self.ws.send(json.dumps(msg), opcode=1)

    def pump(self):
        """Read one message; False once the server closed."""
        op, p = self.ws.recv()
        if op == 2:
            self.out += p
        elif op == 1:
            m = json.loads(p)
            if m["type"] == "exit":
                self.exit = m
            else:
                self.errors.append(m)
        elif op == 8:
            self.close_code = struct.unpack(">H", p[:2])[0] if len(p) >= 2 else 1005
            try:
                self.ws.send(p[:2], opcode=8)
            except OSError:
                pass
            return False
        return True

    def until(self, pattern, timeout=30):
        """Read until the output matches pattern (bytes regex); returns the match."""
        end = time.time() + timeout
        while time.time() < end:
            m = re.compile(pattern).search(self.out, max(0, self.searched - 4096))
            if m:
                return m
            self.searched = len(self.out)
            if not self.pump():
                break
        raise AssertionError(f"{pattern!r} not seen; output so far: {bytes(self.out[-2000:])!r}")

    def wait(self, timeout=30):
        """Read to the end; returns the exit message."""
        self.ws.sock.settimeout(timeout)
        while self.pump():
            pass
        self.ws.close()
        return self.exit



SLEEPER = """python3 -c 'import time; print("ready", flush=True); time.sleep(100)'"""


def test_tty_reports_a_terminal(sandboxd):
    sandboxd.create("p1")
    t = Term(sandboxd, "p1", cmd="tty")
    assert t.info["status"] == "running" and t.info["term"] == "xterm-256color"
    assert (t.info["cols"], t.info["rows"]) == (80, 24)
    assert t.wait() == {"type": "exit", "code": 0, "signal": None}
    assert re.fullmatch(rb"/dev/pts/\d+\r\n", t.out), t.out
    assert t.close_code == 1000

    # the default is an interactive bash with TERM and the initial size
    t = Term(sandboxd, "p1", cols=100, rows=30)
    t.until(rb"root@p1:~# ")
    t.type("echo T=$TERM; stty size; tty; test -t 0 && echo is-a-tty; ps -o tty= -p $$\r")
    t.until(rb"is-a-tty\r\npts/\d+")
    assert b"T=xterm-256color\r\n" in t.out and b"30 100\r\n" in t.out
    t.type("exit\r")
    assert t.wait()["code"] == 0


def test_top_and_vi_round_trip(sandboxd):
    sandboxd.create("p2")
    t = Term(sandboxd, "p2", cmd="top", args=["-b", "-n1"])
    assert t.wait()["code"] == 0
    assert b"load average" in t.out and re.search(rb"PID +USER", t.out), t.out[:500]

    sandboxd.write("p2", "/root/notes.txt", b"first line\n")
    t = Term(sandboxd, "p2", cmd="vi", args=["/root/notes.txt"], cols=90, rows=20)
    t.until(rb"\x1b\[\?1049h")  # the alternate screen (smcup of xterm-256color)
    t.until(rb"first line")
    t.type("ix-")  # insert some text, then throw it away
    t.type("\x1b:q!\r")
    assert t.wait()["code"] == 0
    assert b"\x1b[?1049l" in t.out  # back to the normal screen (rmcup)
    assert sandboxd.read("p2", "/root/notes.txt")[1] == b"first line\n"


def test_resize_reaches_the_program(sandboxd):
    sandboxd.create("p3")
    t = Term(sandboxd, "p3", cmd="bash", args=["--norc", "-i"])
    t.type("trap 'echo got-winch' WINCH; stty size\r")
    t.until(rb"24 80\r\n")
    t.control(type="resize", cols=132, rows=50)
    t.until(rb"got-winch")
    t.type("stty size\r")
    t.until(rb"50 132\r\n")
    t.control(type="resize", cols=1, rows=1000)
    t.type("stty size; exit 0\r")
    assert t.wait()["code"] == 0
    assert b"1000 1\r\n" in t.out


def test_exit_codes_and_signals(sandboxd):
    sandboxd.create("p4")
    t = Term(sandboxd, "p4", cmd="bash", args=["--norc"])
    t.type("exit 3\r")
    assert t.wait() == {"type": "exit", "code": 3, "signal": None}

    t = Term(sandboxd, "p4", cmd="sh", args=["-c", "kill -TERM $$"])
    assert t.wait() == {"type": "exit", "code": 143, "signal": "TERM"}

    # a signal message reaches the terminal's foreground process group, as ^C does
    t = Term(sandboxd, "p4", cmd="sh", args=["-c", "echo ready; exec sleep 100"])
    t.until(rb"ready")
    t.control(type="signal", signal="INT")
    assert t.wait(timeout=30) == {"type": "exit", "code": 130, "signal": "INT"}

    # signals a terminal cannot generate (TIOCSIG takes INT, QUIT, TSTP) reach the group too
    t = Term(sandboxd, "p4", cmd="sh", args=["-c", "echo ready; exec sleep 100"])
    t.until(rb"ready")
    t.control(type="signal", signal="TERM")
    assert t.wait(timeout=30) == {"type": "exit", "code": 143, "signal": "TERM"}

    # ^C typed as a byte does the same, through the terminal's line discipline. The process
    # that says "ready" is the one that waits: a ^C typed while sh forks its child can be
    # taken by the child's copy of sh's handler just before it execs (then nothing ends)
    t = Term(sandboxd, "p4", cmd="sh", args=["-c", SLEEPER + "; echo survived"])
    t.until(rb"ready")
    t.type("\x03")
    assert t.wait(timeout=30)["code"] == 130 and b"survived" not in t.out

    # bad control messages get an error message; the terminal goes on
    t = Term(sandboxd, "p4", cmd="bash", args=["--norc"])
    for bad in ('{"type":"resize","cols":0,"rows":10}', '{"type":"resize","cols":5}',
                '{"type":"nope"}', '[1]', '{"type":"signal","signal":"NOPE"}',
                '{"type":"resize","cols":10,"rows":10,"x":1}'):
        t.ws.send(bad, opcode=1)
    t.type("echo still-$((40+2)); exit 4\r")
    assert t.wait()["code"] == 4
    assert b"still-42" in t.out
    assert len(t.errors) == 6 and all(e["type"] == "error" for e in t.errors), t.errors
    assert {e.get("field") for e in t.errors} >= {"cols", "type", "signal"}


def _procs(d, ref, pattern):
    """Pids of the sandbox's processes whose command line matches pattern (a regex)."""
    out = d.run(ref, "ps", ["-eo", "pid=,args="])["stdout"]
    return [ln.split()[0] for ln in out.splitlines() if re.search(pattern, ln)]


def _wait_gone(d, ref, pattern, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        if not _procs(d, ref, pattern):
            return
        time.sleep(0.1)
    raise AssertionError(f"{pattern} still runs: {_procs(d, ref, pattern)}")


def test_abrupt_disconnect_ends_the_terminal(sandboxd):
    sandboxd.create("p5")
    t = Term(sandboxd, "p5")
    t.until(rb"# ")
    t.type("sleep 1001 & sleep 1002\r")
    end = time.time() + 10
    while len(_procs(sandboxd, "p5", "sleep 100[12]")) < 2 and time.time() < end:
        time.sleep(0.05)
    assert len(_procs(sandboxd, "p5", "sleep 100[12]")) == 2
    t.ws.close()  # no close frame: the TCP connection just goes
    _wait_gone(sandboxd, "p5", "sleep 100[12]")  # the shell and its jobs got SIGHUP
    assert sandboxd.ok("GET", "/v1/sandboxes/p5/ptys")["ptys"] == []

    # mid-flood, with output waiting to be sent: the writer is ended too
    t = Term(sandboxd, "p5", cmd="sh", args=["-c", "exec yes flood-of-output"])
    t.until(rb"flood-of-output")
    t.ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    t.ws.close()  # RST
    _wait_gone(sandboxd, "p5", "yes flood-of-output")
    # a process that ignores SIGHUP is killed after the grace
    t = Term(sandboxd, "p5", cmd="sh", args=["-c", "trap '' HUP; echo armored; sleep 1003"])
    t.until(rb"armored")
    t.ws.close()
    _wait_gone(sandboxd, "p5", "sleep 1003")
    # the daemon carries on: commands and new terminals work
    assert sandboxd.sh("p5", "echo ok")["stdout"] == "ok\n"
    t = Term(sandboxd, "p5", cmd="echo", args=["again"])
    assert t.wait()["code"] == 0 and t.out == b"again\r\n"
    assert sandboxd.ok("GET", "/v1/health")["status"] == "ok"


def _rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def test_slow_reader_gets_back_pressure(sandboxd):
    sandboxd.create("p6")
    total = 40 << 20
    t = Term(sandboxd, "p6", cmd="sh",
             args=["-c", f"head -c {total} /dev/zero | tr '\\0' x; echo; echo DONE-$((6*7))"])
    t.until(rb"x{1000}")
    rss0 = _rss_kb(sandboxd.proc.pid)
    time.sleep(2)  # not reading: the program must block, not the daemon buffer
    # the producer is stuck writing to the terminal, far from done
    assert _procs(sandboxd, "p6", r"^\s*\d+ tr ")
    grown = _rss_kb(sandboxd.proc.pid) - rss0
    assert grown < 16 * 1024, f"sandboxd grew by {grown} KiB with a stalled client"
    # then everything arrives, nothing lost
    t.until(rb"DONE-42", timeout=120)
    assert t.out.count(b"x") == total
    assert t.wait()["code"] == 0


def test_slow_program_gets_input_back_pressure(sandboxd):
    sandboxd.create("pb")
    size = 16 << 20
    t = Term(sandboxd, "pb", cmd="sh",
             args=["-c", f"stty raw -echo; echo ready; sleep 3; head -c {size} | wc -c"])
    t.until(rb"ready")
    rss0 = _rss_kb(sandboxd.proc.pid)
    chunk = b"k" * 65536
    sender = threading.Thread(target=lambda: [t.type(chunk) for _ in range(size // len(chunk))])
    sender.start()
    time.sleep(2)  # the program does not read yet: the daemon must stop taking input
    grown = _rss_kb(sandboxd.proc.pid) - rss0
    assert sender.is_alive(), "16 MiB of input were taken while the program read nothing"
    assert grown < 16 * 1024, f"sandboxd grew by {grown} KiB holding unread input"
    t.until(rb"%d" % size, timeout=60)
    sender.join(30)
    assert t.wait()["code"] == 0


def test_delete_and_daemon_shutdown_end_terminals(make_sandboxd):
    d = make_sandboxd().start()
    # DELETE of an attached terminal hangs it up; the client still gets the exit
    d.create("pd")
    t = Term(d, "pd", cmd="cat")
    t.type("y\r")
    t.until(rb"y\r\ny\r\n")
    d.ok("DELETE", f"/v1/sandboxes/pd/ptys/{t.info['id']}", status=204)
    assert t.wait() == {"type": "exit", "code": 129, "signal": "HUP"}
    # deleting the sandbox ends its terminals; their clients are told
    t = Term(d, "pd", cmd="cat")
    t.type("z\r")
    t.until(rb"z\r\nz\r\n")
    d.ok("DELETE", "/v1/sandboxes/pd", status=204)
    assert t.wait() == {"type": "exit", "code": 137, "signal": "KILL"}
    # a graceful shutdown too (the fixture then checks LeakSanitizer's verdict)
    d.create("pc")
    t = Term(d, "pc", cmd="cat")
    t.type("x\r")
    t.until(rb"x\r\nx\r\n")
    stopper = threading.Thread(target=d.stop)
    stopper.start()
    assert t.wait(timeout=20) == {"type": "exit", "code": 137, "signal": "KILL"}
    stopper.join(30)
    assert d.proc.returncode == 0


def test_many_parallel_terminals(sandboxd):
    sandboxd.create("p7", resources={"pids": 4096})
    n = 20
    terms = [Term(sandboxd, "p7", cmd="bash", args=["--norc"], env={"WHO": f"t{i}"})
             for i in range(n)]
    assert len(sandboxd.ok("GET", "/v1/sandboxes/p7/ptys")["ptys"]) == n
    ttys = [None] * n
    errors = []

    def drive(i):
        try:
            t = terms[i]
            t.type("echo I-am-$WHO on $(tty); exit $((10 + ${WHO#t}))\r")
            ex = t.wait()
            assert ex["code"] == 10 + i, ex
            m = re.search(rb"I-am-(t\d+) on (/dev/pts/\d+)", t.out)
            assert m and m.group(1) == f"t{i}".encode(), t.out
            ttys[i] = m.group(2)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((i, e))

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    assert len(set(ttys)) == n  # each its own terminal
    assert sandboxd.ok("GET", "/v1/sandboxes/p7/ptys")["ptys"] == []


def test_lazy_resume_and_session_end(sandboxd):
    sandboxd.create("p8")
    sandboxd.ok("POST", "/v1/sandboxes/p8/stop")
    t = Term(sandboxd, "p8", cmd="cat")  # creating a terminal resumes a stopped sandbox
    assert sandboxd.get("p8")["state"] == "running"
    t.type("hello-cat\r")
    t.until(rb"hello-cat\r\nhello-cat\r\n")  # the echo, then cat's copy
    # stopping the sandbox ends the terminal: killed, and the client is told
    sandboxd.ok("POST", "/v1/sandboxes/p8/stop")
    assert t.wait() == {"type": "exit", "code": 137, "signal": "KILL"}

    # attaching to a paused sandbox's terminal thaws it
    info = sandboxd.ok("POST", "/v1/sandboxes/p8/ptys", {"cmd": "cat"}, status=201)
    sandboxd.ok("POST", "/v1/sandboxes/p8/pause")
    ws = WS(sandboxd.port, f"/v1/sandboxes/p8/ptys/{info['id']}/ws")
    assert ws.status == 101 and sandboxd.get("p8")["state"] == "running"
    ws.close()

    # a terminal nobody attaches to is listed until it is deleted
    info = sandboxd.ok("POST", "/v1/sandboxes/p8/ptys", {"cmd": "sleep", "args": ["1004"]},
                       status=201)
    got = sandboxd.ok("GET", f"/v1/sandboxes/p8/ptys/{info['id']}")
    assert got["status"] == "running" and got["attached"] is False and got["pid"] > 1
    sandboxd.ok("DELETE", f"/v1/sandboxes/p8/ptys/{info['id']}", status=204)
    _wait_gone(sandboxd, "p8", "sleep 1004")
    st, _ = sandboxd.request("GET", f"/v1/sandboxes/p8/ptys/{info['id']}")
    assert st == 404


def test_terminal_as_a_user(sandboxd):
    sandboxd.create("p9")
    sandboxd.ok("POST", "/v1/sandboxes/p9/users", {"name": "alice"}, status=201)
    t = Term(sandboxd, "p9", cmd="sh", args=["-c", 'id -un; pwd; stat -c "%U %a" "$(tty)"'],
             user="alice", term="vt100", env={"TERM": "ignored"})
    assert t.wait()["code"] == 0
    assert t.out == b"alice\r\n/home/alice\r\nalice 620\r\n", t.out
    assert t.info["user"] == "alice" and t.info["term"] == "vt100"
    t = Term(sandboxd, "p9", cmd="sh", args=["-c", 'echo "$TERM"; id -u'], user="alice",
             sudo=True, env={"TERM": "dumb"})
    assert t.wait()["code"] == 0 and t.out == b"dumb\r\n0\r\n"


def test_validation_and_errors(sandboxd):
    sandboxd.create("pa")
    for body, field in (({"cols": 0}, "cols"), ({"rows": 1001}, "rows"), ({"x": 1}, "x"),
                        ({"term": "a b"}, "term"), ({"cmd": ""}, "cmd"),
                        ({"cmd": "sh", "args": "x"}, "args"), ({"env": {"1A": "x"}}, "env")):
        st, out = sandboxd.request("POST", "/v1/sandboxes/pa/ptys", body)
        assert st == 400 and out["error"]["code"] == "validation_error", (body, st, out)
        assert field in out["error"].get("field", "") + out["error"]["message"], (body, out)
    st, out = sandboxd.request("POST", "/v1/sandboxes/pa/ptys", {"cmd": "no-such-program"})
    assert st == 400 and out["error"]["code"] == "command_not_found"
    st, out = sandboxd.request("POST", "/v1/sandboxes/pa/ptys", {"cwd": "/nope"})
    assert st == 400 and out["error"]["code"] == "cwd_not_found"
    st, out = sandboxd.request("POST", "/v1/sandboxes/pa/ptys", {"user": "bob"})
    assert st == 404 and out["error"]["code"] == "user_not_found"
    st, out = sandboxd.request("POST", "/v1/sandboxes/nope/ptys", {})
    assert st == 404 and out["error"]["code"] == "sandbox_not_found"
    st, out = sandboxd.request("GET", "/v1/sandboxes/pa/ptys/nope/ws")
    assert st == 404 and out["error"]["code"] == "no_such_pty"

    info = sandboxd.ok("POST", "/v1/sandboxes/pa/ptys", {"cmd": "cat"}, status=201)
    path = f"/v1/sandboxes/pa/ptys/{info['id']}/ws"
    st, out = sandboxd.request("GET", path)  # not a WebSocket handshake
    assert st == 400 and out["error"]["code"] == "websocket_required"
    ws = WS(sandboxd.port, path, headers={"Sec-WebSocket-Version": "8"})
    assert ws.status == 426 and "Sec-WebSocket-Version: 13" in ws.head
    ws.close()
    ws = WS(sandboxd.port, path, headers={"Sec-WebSocket-Key": "c2hvcnQ="})
    assert ws.status == 400
    ws.close()
    t = WS(sandboxd.port, path)
    assert t.status == 101
    second = WS(sandboxd.port, path)  # one client per terminal
    assert second.status == 409 and "pty_attached" in second.buf.decode() + second.head
    second.close()
    # a message over the cap closes the connection with 1009 (and ends the terminal)
    t.send(b"y" * ((1 << 20) + 1))
    while True:
        op, p = t.recv()
        if op == 8:
            assert struct.unpack(">H", p[:2])[0] == 1009
            break
    t.close()
    end = time.time() + 10
    while sandboxd.ok("GET", "/v1/sandboxes/pa/ptys")["ptys"] and time.time() < end:
        time.sleep(0.05)
    assert sandboxd.ok("GET", "/v1/sandboxes/pa/ptys")["ptys"] == []


# ---------------------------------------------------------------------------
# `rebuno sandbox sh` in a real terminal (tmux)
# ---------------------------------------------------------------------------

# A tmux server of this test process's own, so no other tmux user on the machine (or a
# server exiting with its last session) can interfere.
_TMUX_SOCKET = f"rebuno-test-{os.getpid()}"


def _tmux(*args, check=True):
    return subprocess.run(["tmux", "-L", _TMUX_SOCKET, *args], capture_output=True, text=True,
                          check=check, timeout=20)


def _new_session(session, *command):
    """A detached 120x40 session running command. Killing a server's last session makes
    the server exit, and a new-session that reaches it while it exits fails: retry."""
    for _ in range(5):
        p = _tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40", *command,
                  check=False)
        if p.returncode == 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"tmux new-session failed: {p.stderr}")


def _screen(session):
    return _tmux("capture-pane", "-p", "-t", session).stdout


def _wait_screen(session, pattern, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        s = _screen(session)
        m = re.search(pattern, s)
        if m:
            return m
        time.sleep(0.1)
    raise AssertionError(f"{pattern!r} not on screen:\n{_screen(session)}")


def _pane_tty_raw(session):
    """Whether the pane's terminal is in raw mode (no ICANON), read from outside."""
    tty = _tmux("display", "-p", "-t", session, "#{pane_tty}").stdout.strip()
    modes = subprocess.run(["stty", "-a", "-F", tty], capture_output=True, text=True,
                           timeout=10).stdout.split()
    assert "icanon" in modes or "-icanon" in modes, modes
    return "-icanon" in modes


def _cli_pid(session):
    """The `rebuno sandbox sh` process: the child of the pane's sh."""
    sh_pid = _tmux("display", "-p", "-t", session, "#{pane_pid}").stdout.strip()
    with open(f"/proc/{sh_pid}/task/{sh_pid}/children") as f:
        kids = f.read().split()
    assert len(kids) == 1, kids
    return int(kids[0])


def _start_cli(sandboxd, name, status):
    session = f"rebuno-test-{uuid.uuid4().hex[:10]}"
    inner = (f"{shlex.quote(BIN)} sandbox sh {name} --url {sandboxd.url}; "
             f"echo status=$? > {shlex.quote(str(status))}; sleep 600")
    _new_session(session, "env", "TERM=xterm-256color", "sh", "-c", inner)
    return session


def _wait_status(status, timeout=30):
    end = time.time() + timeout
    while not status.exists() and time.time() < end:
        time.sleep(0.1)
    return status.read_text().strip() if status.exists() else None


def test_cli_sh_restores_the_terminal_on_signals(sandboxd, tmp_path):
    sandboxd.create("tn")
    # SIGTERM: the terminal is restored, the exit status is the signal's
    status = tmp_path / "status"
    session = _start_cli(sandboxd, "tn", status)
    try:
        _wait_screen(session, r"root@tn:~#")
        assert _pane_tty_raw(session)
        os.kill(_cli_pid(session), signal.SIGTERM)
        assert _wait_status(status) == "status=143"
        assert not _pane_tty_raw(session)
        # the remote shell lost its client: it was hung up
        end = time.time() + 10
        while sandboxd.ok("GET", "/v1/sandboxes/tn/ptys")["ptys"] and time.time() < end:
            time.sleep(0.05)
        assert sandboxd.ok("GET", "/v1/sandboxes/tn/ptys")["ptys"] == []
    finally:
        _tmux("kill-session", "-t", session, check=False)

    # SIGTSTP under a job-control shell: stopped, then `fg` carries on
    status = tmp_path / "status2"
    session = f"rebuno-test-{uuid.uuid4().hex[:10]}"
    _new_session(session, "env", "TERM=xterm-256color", "PS1=host$ ", "bash", "--norc", "-i")
    try:
        _wait_screen(session, r"host\$")
        cmd = (f"sh -c '{BIN} sandbox sh tn --url {sandboxd.url}; "
               f"echo status=$? > {status}'")
        _tmux("send-keys", "-t", session, cmd, "Enter")
        _wait_screen(session, r"root@tn:~#")
        bash_pid = _tmux("display", "-p", "-t", session, "#{pane_pid}").stdout.strip()
        with open(f"/proc/{bash_pid}/task/{bash_pid}/children") as f:
            job = int(f.read().split()[0])
        os.killpg(os.getpgid(job), signal.SIGTSTP)  # as a ^Z on the local terminal would
        _wait_screen(session, r"Stopped")
        _tmux("send-keys", "-t", session, "fg", "Enter")
        # type once the client runs again and has the terminal back in raw mode: what is
        # typed during the hand-over, in the shell's cooked mode, was lost once in ~70 runs
        def job_running():
            pids = [job] + [int(p) for p in
                            open(f"/proc/{job}/task/{job}/children").read().split()]
            return all(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "T"
                       for p in pids)
        end = time.time() + 30
        while not (job_running() and _pane_tty_raw(session)) and time.time() < end:
            time.sleep(0.05)
        _tmux("send-keys", "-t", session, "echo back-$((3*3))", "Enter")
        _wait_screen(session, r"(?m)^back-9$")
        _tmux("send-keys", "-t", session, "exit 5", "Enter")
        assert _wait_status(status) == "status=5"
    finally:
        _tmux("kill-session", "-t", session, check=False)


def test_cli_sh_in_tmux(sandboxd, tmp_path):
    sandboxd.create("tm")
    status = tmp_path / "status"
    session = _start_cli(sandboxd, "tm", status)
    try:
        _wait_screen(session, r"root@tm:~#")  # (capture-pane drops trailing spaces)
        assert _pane_tty_raw(session)
        tag = f"hello-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        _tmux("send-keys", "-t", session, f"echo {tag}", "Enter")
        _wait_screen(session, rf"(?m)^{tag}$")
        h, w = _tmux("display", "-p", "-t", session, "#{pane_height} #{pane_width}").stdout.split()
        _tmux("send-keys", "-t", session, "stty size; echo T=$TERM", "Enter")
        _wait_screen(session, rf"(?m)^{h} {w}\n")
        _wait_screen(session, r"(?m)^T=xterm-256color$")
        # a window-size change reaches the remote terminal (SIGWINCH -> resize message)
        _tmux("resize-window", "-t", session, "-x", "100", "-y", "30")
        time.sleep(0.5)
        h, w = _tmux("display", "-p", "-t", session, "#{pane_height} #{pane_width}").stdout.split()
        assert (h, w) != ("40", "120")
        _tmux("send-keys", "-t", session, "clear; stty size", "Enter")
        _wait_screen(session, rf"(?m)^{h} {w}\n")
        # ^C is a byte for the remote terminal, not a signal for the CLI
        _tmux("send-keys", "-t", session, "sleep 100; echo after-sleep", "Enter")
        time.sleep(0.5)
        _tmux("send-keys", "-t", session, "C-c")
        _wait_screen(session, r"\^C\n(.*\n)?root@tm:~#")
        assert not re.search(r"(?m)^after-sleep$", _screen(session))
        # exit status passes through, and the local terminal is back to normal
        _tmux("send-keys", "-t", session, "exit 7", "Enter")
        assert _wait_status(status) == "status=7"
        assert not _pane_tty_raw(session)
        assert sandboxd.ok("GET", "/v1/sandboxes/tm/ptys")["ptys"] == []
    finally:
        _tmux("kill-session", "-t", session, check=False)


def test_cli_sh_without_a_terminal(sandboxd):
    sandboxd.create("nt")
    env = dict(os.environ, REBUNO_SANDBOX_URL=sandboxd.url)
    p = subprocess.run([BIN, "sandbox", "sh", "nt", "--", "bash", "--norc"],
                       input=b"echo piped-$((2+3))\nexit 5\n", capture_output=True, env=env,
                       timeout=60)
    assert p.returncode == 5, p
    assert b"piped-5" in p.stdout
    # stdin's EOF ends a shell that reads it (as ^D would)
    p = subprocess.run([BIN, "sandbox", "sh", "nt", "--", "cat"], input=b"", capture_output=True,
                       env=env, timeout=60)
    assert p.returncode == 0, p
    p = subprocess.run([BIN, "sandbox", "sh", "nope"], capture_output=True, env=env, timeout=60)
    assert p.returncode == 1 and b"no sandbox" in p.stderr
    p = subprocess.run([BIN, "sandbox", "sh", "nt", "--", "no-such-program"], capture_output=True,
                       env=env, timeout=60)
    assert p.returncode == 1 and b"command not found" in p.stderr
