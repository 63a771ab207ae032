"""``open_interactive()`` (rebuno.sandbox and rebuno.sandbox.sync) against a real
`rebuno sandboxd`: a tty inside the sandbox, the window size and resizes, exit codes and
signals, full-screen programs, early ends of the connection (cut by a relay, killed on the
daemon's side, closed cleanly without an exit), several terminals at once, the bounded
output buffer, and the sync form's io.RawIOBase stream.

The daemon and the per-test cleanup (every sandbox deleted through the raw API, pass or
fail; at the end no process, cgroup or mount left and no sanitizer report) are the
fixtures of test_sandbox_client.py. The WebSocket framing (fragments, ping, close) is also
checked against a small scripted server, since sandboxd never fragments or pings.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import wait_for
from test_sandbox_client import Daemon, daemon, run, sbx_url  # noqa: F401  (fixtures: the daemon, cleanup)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandboxd runs as root")


# --- helpers ---------------------------------------------------------------------------------------


async def until(stream: Any, pattern: bytes, out: bytearray, timeout: float = 30) -> re.Match[bytes]:
    """Read the async stream into ``out`` until ``pattern`` (a bytes regex) matches it."""
    rx = re.compile(pattern)

    async def go() -> re.Match[bytes]:
        while True:
            m = rx.search(out)
            if m:
                return m
            out.extend(await stream.receive())

    try:
        return await asyncio.wait_for(go(), timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"{pattern!r} not seen; output so far: {bytes(out[-2000:])!r}") from None


def sync_until(stream: io.RawIOBase, pattern: bytes, out: bytearray, timeout: float = 30) -> re.Match[bytes]:
    """The same for the sync stream (each read returns what arrived)."""
    rx = re.compile(pattern)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        m = rx.search(out)
        if m:
            return m
        chunk = stream.read(65536)
        if not chunk:
            break
        out.extend(chunk)
    raise AssertionError(f"{pattern!r} not seen; output so far: {bytes(out[-2000:])!r}")


def ptys(d: Daemon, box: Any) -> list[dict[str, Any]]:
    st, body = d.http("GET", f"/v1/sandboxes/{box.id}/ptys")
    assert st == 200, body
    return body["ptys"]


def procs(d: Daemon, box: Any, pattern: str) -> list[str]:
    st, body = d.http("POST", f"/v1/sandboxes/{box.id}/commands",
                      {"cmd": "ps", "args": ["-eo", "pid=,args="], "wait": True})
    assert st in (200, 201), body
    return [ln for ln in body["stdout"].splitlines() if re.search(pattern, ln)]


class Relay:
    """A TCP relay in front of sandboxd, to end the terminal's WebSocket the ways a network or
    a broken server would: ``cut()`` drops it (RST), ``close_without_exit()`` sends the client
    a clean close frame (1000) that no exit message preceded."""

    def __init__(self, upstream_port: int):
        self.upstream = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.conns: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.hold = threading.Event()  # set: daemon -> client bytes are held back
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.upstream))
            conn = {"c": c, "u": u, "ws": False, "dead": False}
            with self.lock:
                self.conns.append(conn)
            threading.Thread(target=self._pump, args=(conn, c, u, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(conn, u, c, False), daemon=True).start()

    def _pump(self, conn: dict[str, Any], src: socket.socket, dst: socket.socket, upward: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upward and b"Upgrade: websocket" in data:
                    conn["ws"] = True
                while not upward and self.hold.is_set() and conn["ws"] and not conn["dead"]:
                    time.sleep(0.01)
                if conn["dead"]:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def websockets(self) -> list[dict[str, Any]]:
        with self.lock:
            return [c for c in self.conns if c["ws"]]

    def cut(self) -> None:
        for conn in self.websockets():
            conn["dead"] = True
            conn["c"].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            for s in (conn["c"], conn["u"]):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close_without_exit(self) -> None:
        self.hold.set()
        time.sleep(0.3)  # the terminal is idle: no frame is half-way through the relay
        for conn in self.websockets():
            # the close frame first: shutting the upstream down ends its pump thread,
            # which then shuts the client's socket too
            conn["c"].sendall(b"\x88\x02" + struct.pack(">H", 1000))
            conn["u"].shutdown(socket.SHUT_RDWR)  # the daemon sees the client go

    def close(self) -> None:
        self.listener.close()
        with self.lock:
            for conn in self.conns:
                conn["dead"] = True
                for s in (conn["c"], conn["u"]):
                    try:
                        s.close()
                    except OSError:
                        pass


@pytest.fixture
def relay(daemon: Daemon) -> Iterator[Relay]:  # noqa: F811
    r = Relay(daemon.port)
    try:
        yield r
    finally:
        r.close()


# --- the spec's examples -----------------------------------------------------------------------------


def test_spec_examples_async_and_sync(sbx_url: str) -> None:  # noqa: F811
    """The two examples of spec 004 "Interactive PTY sessions", with only the import changed."""
    printed: list[str] = []

    async def main() -> None:
        from rebuno import sandbox

        async with sandbox.create_sandbox() as box:
            async with box.open_interactive("/bin/bash", cols=100, rows=30) as pty:
                await pty.stream.send(b"tty\n")
                async for chunk in pty.stream:
                    printed.append(chunk.decode(errors="replace"))
                    break

                await pty.resize(120, 40)
                await pty.stream.send(b"exit 0\n")
                printed.append(str(await pty.wait()))

    run(main())
    assert printed[-1] == "0" and printed[0]

    from rebuno.sandbox import sync as sandbox

    with sandbox.create_sandbox() as box:
        with box.open_interactive("/bin/bash") as pty:
            pty.stream.write(b"tty\n")
            assert pty.stream.read(1024)
            pty.stream.write(b"exit 0\n")
            assert pty.wait(timeout=30) == 0


# --- a terminal, its size, its exit ------------------------------------------------------------------


def test_tty_size_resize_and_term(sbx_url: str, daemon: Daemon) -> None:  # noqa: F811
    from rebuno import sandbox
    from rebuno.sandbox import InteractiveSession, InteractiveStream

    async def main() -> None:
        async with sandbox.create_sandbox(name="pty-a") as box:
            session = box.open_interactive("bash", ["--norc", "-i"], cols=100, rows=30)
            assert isinstance(session, InteractiveSession) and session.id is None  # nothing created yet
            async with session as pty:
                assert isinstance(pty.stream, InteractiveStream)
                assert pty.term == "xterm-256color" and pty.pid and pty.sandbox_id == box.id
                assert [p["id"] for p in ptys(daemon, box)] == [pty.id]
                out = bytearray()
                await pty.stream.send(b"tty; test -t 0 && echo is-a-tty; echo T=$TERM; stty size\r")
                await until(pty.stream, rb"30 100\r\n", out)
                assert re.search(rb"\r/dev/pts/\d+\r\nis-a-tty\r\nT=xterm-256color\r\n", out), out

                await pty.send_signal("NOPE")  # refused by the daemon: recorded, the terminal goes on
                await pty.stream.send(b"trap 'echo got-winch' WINCH\r")
                await pty.resize(132, 50)
                assert (pty.cols, pty.rows) == (132, 50)
                await until(pty.stream, rb"got-winch", out)
                await pty.stream.send(b"stty size\r")
                await until(pty.stream, rb"50 132\r\n", out)
                await pty.resize(1, 1000)
                await pty.stream.send(b"stty size; exit 0\r")
                rest = await pty.stream.read()  # to the end of the stream
                assert b"1000 1\r\n" in rest, rest
                assert await pty.wait() == 0 and pty.exit_code == 0 and pty.signal is None
                assert await pty.stream.read() == b""  # the end, again
                assert [(e["code"], e.get("field")) for e in pty.errors] == [("validation_error", "signal")]

            # TERM through env, or term=; cwd and env as for commands
            async with box.open_interactive("sh", ["-c", 'echo "$TERM $PWD $X"'], env={"TERM": "vt100", "X": "1"},
                                            cwd="/tmp") as pty:
                assert await pty.stream.read() == b"vt100 /tmp 1\r\n"
                assert await pty.wait() == 0
            async with box.open_interactive("sh", ["-c", 'echo "$TERM"'], term="dumb") as pty:
                assert await pty.stream.read() == b"dumb\r\n"

    run(main())


def test_exit_codes_and_signals(sbx_url: str) -> None:  # noqa: F811
    from rebuno import sandbox
    from rebuno.sandbox import SandboxEndOfStream, SandboxStreamError

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            async with box.open_interactive("bash", ["--norc"]) as pty:
                await pty.stream.send(b"exit 3\r")
                chunks = [c async for c in pty.stream]  # the iteration ends with the process
                assert chunks and await pty.wait() == 3
                with pytest.raises(SandboxEndOfStream):
                    await pty.stream.receive()
                with pytest.raises(EOFError):
                    await pty.stream.receive()
                with pytest.raises(SandboxStreamError, match="exited"):
                    await pty.stream.send(b"too late\r")
                await pty.resize(10, 10)  # nothing to resize any more: no error

            async with box.open_interactive("sh", ["-c", "kill -TERM $$"]) as pty:
                assert await pty.wait(timeout=30) == 143 and pty.signal == "TERM"

            # a signal goes to the terminal's foreground process group, as a typed ^C
            async with box.open_interactive("sh", ["-c", "echo ready; exec sleep 100"]) as pty:
                await until(pty.stream, rb"ready", bytearray())
                await pty.send_signal("SIGINT")
                assert await pty.wait(timeout=30) == 130 and pty.signal == "INT"

            # ^C typed as a byte does the same through the line discipline; ^D is send_eof().
            # The process that says "ready" is the one that waits: a ^C typed while sh forks
            # can be taken by the child's copy of sh's handler just before it execs
            sleeper = """python3 -c 'import time; print("ready", flush=True); time.sleep(100)'"""
            async with box.open_interactive("sh", ["-c", sleeper + "; echo survived"]) as pty:
                await until(pty.stream, rb"ready", bytearray())
                await pty.stream.send(b"\x03")
                assert await pty.wait(timeout=30) == 130
            async with box.open_interactive("cat") as pty:
                await pty.stream.send(b"line\r")
                await pty.stream.send_eof()
                assert await pty.stream.read() == b"line\r\nline\r\n"
                assert await pty.wait(timeout=30) == 0

            # a client-side time limit: the process keeps running
            async with box.open_interactive("sleep", ["100"]) as pty:
                with pytest.raises(TimeoutError):
                    await pty.wait(timeout=0.3)
                assert pty.exit_code is None

    run(main())


def test_full_screen_programs(sbx_url: str) -> None:  # noqa: F811
    from rebuno import sandbox

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            async with box.open_interactive("top", ["-b", "-n1"], cols=120, rows=40) as pty:
                out = await pty.stream.read()
                assert await pty.wait() == 0
                assert b"load average" in out and re.search(rb"PID +USER", out), out[:500]

            await box.fs.write_text("/root/notes.txt", "first line\n")
            async with box.open_interactive("vi", ["/root/notes.txt"], cols=90, rows=20) as pty:
                out = bytearray()
                await until(pty.stream, rb"\x1b\[\?1049h", out)  # the alternate screen (smcup)
                await until(pty.stream, rb"first line", out)
                await pty.resize(100, 25)  # vi repaints
                await pty.stream.send(b"ix-\x1b:q!\r")  # type, then throw it away
                out += await pty.stream.read()
                assert await pty.wait() == 0
                assert b"\x1b[?1049l" in out  # back to the normal screen (rmcup)
            assert await box.fs.read_text("/root/notes.txt") == "first line\n"

    run(main())


# --- the connection ending early ---------------------------------------------------------------------


def test_cut_connection_raises_after_the_output_that_came(relay: Relay, daemon: Daemon) -> None:  # noqa: F811
    from rebuno.sandbox import SandboxClient, SandboxConnectionError, SandboxPtyDisconnectedError

    async def main() -> None:
        async with SandboxClient(relay.url, token=daemon.token()) as client:
            async with client.create_sandbox() as box:
                async with box.open_interactive("bash", ["--norc"]) as pty:
                    out = bytearray()
                    await pty.stream.send(b"sleep 1001 & echo before-$((6*7)); echo started\r")
                    await until(pty.stream, rb"started\r\n", out)
                    wait_for(lambda: procs(daemon, box, r"sleep 1001"), 10, what="the job")
                    await pty.stream.send(b"echo still-$((40+2))\r")
                    await asyncio.sleep(1)  # it arrives, unread
                    relay.cut()
                    got = bytearray()
                    with pytest.raises(SandboxPtyDisconnectedError) as e:
                        async for chunk in pty.stream:
                            got += chunk
                    assert b"still-42" in got  # what arrived is read first
                    assert isinstance(e.value, ConnectionError) and isinstance(e.value, SandboxConnectionError)
                    assert "before the process reported its exit" in str(e.value)
                    with pytest.raises(SandboxPtyDisconnectedError):
                        await pty.wait()
                    with pytest.raises(SandboxPtyDisconnectedError):
                        await pty.stream.receive()
                    with pytest.raises(SandboxPtyDisconnectedError):
                        await pty.stream.send(b"x")
                    assert pty.exit_code is None
                # the daemon hung the terminal up: the shell and its job got SIGHUP
                wait_for(lambda: not procs(daemon, box, r"sleep 1001"), 15, what="the job to end")
                assert ptys(daemon, box) == []
                assert (await box.run_command("echo", ["ok"], capture_output=True)).stdout == "ok\n"

    run(main())


def test_clean_close_without_exit_raises(relay: Relay, daemon: Daemon) -> None:  # noqa: F811
    """A close frame (1000) with no exit message before it is not a normal end."""
    from rebuno.sandbox import SandboxPtyDisconnectedError
    from rebuno.sandbox.sync import SyncSandboxClient

    with SyncSandboxClient(relay.url, token=daemon.token()) as client:
        with client.create_sandbox() as box:
            with box.open_interactive("cat") as pty:
                out = bytearray()
                pty.stream.write(b"hello\r")
                sync_until(pty.stream, rb"hello\r\nhello\r\n", out)
                relay.close_without_exit()
                with pytest.raises(ConnectionError) as e:  # what the sync stream raises, by the spec
                    pty.stream.read(100)
                assert isinstance(e.value, SandboxPtyDisconnectedError) and e.value.close_code == 1000
                with pytest.raises(SandboxPtyDisconnectedError):
                    pty.wait(timeout=10)
            wait_for(lambda: ptys(daemon, box) == [], 10, what="the terminal to be hung up")


def test_daemon_side_socket_killed(sbx_url: str, daemon: Daemon) -> None:  # noqa: F811
    """The daemon's end of the connection destroyed (``ss -K``): the client is told."""
    from rebuno import sandbox
    from rebuno.sandbox import SandboxPtyDisconnectedError

    if not shutil.which("ss"):
        pytest.skip("no ss")

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            async with box.open_interactive("cat") as pty:
                await pty.stream.send(b"x\r")
                await until(pty.stream, rb"x\r\nx\r\n", bytearray())
                cport = pty._ws._writer.get_extra_info("sockname")[1]  # type: ignore[union-attr]
                r = subprocess.run(["ss", "-K", "-t", "src", f"127.0.0.1:{daemon.port}", "dst",
                                    f"127.0.0.1:{cport}"], capture_output=True, text=True)
                if str(cport) not in r.stdout:
                    pytest.skip(f"ss -K cannot destroy sockets here: {r.stdout} {r.stderr}")
                with pytest.raises(SandboxPtyDisconnectedError):
                    await pty.wait(timeout=20)
            wait_for(lambda: ptys(daemon, box) == [], 10, what="the terminal to be hung up")
            assert (await box.run_command("true")).returncode == 0

    run(main())


def test_sandbox_stopped_or_deleted_mid_session_is_an_exit(sbx_url: str) -> None:  # noqa: F811
    """The daemon reports those ends: exit 137 (KILL), not a broken connection."""
    from rebuno import sandbox

    async def main() -> None:
        box = await sandbox.create_sandbox()
        try:
            async with box.open_interactive("cat") as pty:
                await pty.stream.send(b"y\r")
                await until(pty.stream, rb"y\r\ny\r\n", bytearray())
                await box.stop()
                assert await pty.wait(timeout=30) == 137 and pty.signal == "KILL"
            # the next terminal resumes the stopped sandbox lazily; the handle adopts it
            async with box.open_interactive("cat") as pty:
                assert box.status == "running" and pty.session_id == box.current_session_id
                await pty.stream.send(b"z\r")
                await until(pty.stream, rb"z\r\nz\r\n", bytearray())
                await box.delete()
                assert await pty.wait(timeout=30) == 137
        finally:
            with __import__("contextlib").suppress(Exception):
                await box.delete()

    run(main())


# --- many at once, sessions, users, errors ----------------------------------------------------------


def test_parallel_terminals_async_and_sync(sbx_url: str, daemon: Daemon) -> None:  # noqa: F811
    from rebuno import sandbox
    from rebuno.sandbox import sync

    n = 10

    async def one(box: Any, i: int) -> bytes:
        async with box.open_interactive("bash", ["--norc"], env={"WHO": f"t{i}"}) as pty:
            await pty.stream.send(b"echo I-am-$WHO on $(tty); exit $((10 + ${WHO#t}))\r")
            out = await pty.stream.read()
            assert await pty.wait() == 10 + i, out
            m = re.search(rb"I-am-(t\d+) on (/dev/pts/\d+)", out)
            assert m and m.group(1) == f"t{i}".encode(), out
            return m.group(2)

    async def main() -> None:
        async with sandbox.create_sandbox(resources={"pids": 4096}) as box:
            ttys = await asyncio.gather(*(one(box, i) for i in range(n)))
            assert len(set(ttys)) == n  # each its own terminal
            assert ptys(daemon, box) == []

    run(main())

    with sync.create_sandbox() as box:
        results: dict[int, Any] = {}

        def drive(i: int) -> None:
            try:
                with box.open_interactive("sh", ["-c", f"echo sync-{i}; exit {i}"]) as pty:
                    results[i] = (pty.stream.readall(), pty.wait(timeout=30))
            except Exception as e:  # noqa: BLE001 - checked below
                results[i] = e

        threads = [threading.Thread(target=drive, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == {i: (f"sync-{i}\r\n".encode(), i) for i in range(6)}


def test_sessions_users_and_errors(sbx_url: str, daemon: Daemon) -> None:  # noqa: F811
    from rebuno import sandbox
    from rebuno.sandbox import (SandboxCommandNotFoundError, SandboxPathNotFoundError, SandboxStreamError,
                                SandboxUserNotFoundError)

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            # arguments are checked before any request
            for kwargs, exc in (({"cols": 0}, ValueError), ({"rows": 1001}, ValueError), ({"cols": "80"}, TypeError),
                                ({"term": ""}, TypeError), ({"env": {"A": 1}}, TypeError)):
                with pytest.raises(exc):
                    box.open_interactive("sh", **kwargs)
            with pytest.raises(TypeError):
                box.open_interactive("sh", "-c true")  # args is a list
            # start failures are the API's errors, and nothing is left behind
            with pytest.raises(SandboxCommandNotFoundError):
                async with box.open_interactive("no-such-program"):
                    pass
            with pytest.raises(SandboxPathNotFoundError):
                async with box.open_interactive("sh", cwd="/nope"):
                    pass
            with pytest.raises(SandboxUserNotFoundError):
                async with box.as_user("bob").open_interactive("sh"):
                    pass
            assert ptys(daemon, box) == []

            # leaving the block early hangs the terminal up
            pty = box.open_interactive("sh", ["-c", "echo armed; sleep 1002"])
            async with pty:
                await until(pty.stream, rb"armed", bytearray())
            assert pty.closed and pty.exit_code is None
            with pytest.raises(SandboxStreamError):
                await pty.stream.receive()
            with pytest.raises(SandboxStreamError, match="one connection"):
                async with pty:
                    pass
            wait_for(lambda: not procs(daemon, box, r"sleep 1002"), 15, what="the hung-up terminal to end")
            assert ptys(daemon, box) == []

            # a pinned session and a user handle have terminals too
            active = await box.session()
            async with active.open_interactive("sh", ["-c", "echo in-session"]) as pty:
                assert pty.session_id == active.id
                assert await pty.stream.read() == b"in-session\r\n"
            alice = await box.create_user("alice")
            async with alice.open_interactive("sh", ["-c", 'id -un; pwd; stat -c "%U" "$(tty)"']) as pty:
                assert await pty.stream.read() == b"alice\r\n/home/alice\r\nalice\r\n"
            async with alice.open_interactive("id", ["-u"], sudo=True) as pty:
                assert await pty.stream.read() == b"0\r\n"

    run(main())


# --- volume: the bounded buffer, big input -----------------------------------------------------------


def test_bounded_buffer_and_large_input(sbx_url: str) -> None:  # noqa: F811
    from rebuno import sandbox
    from rebuno.sandbox import SandboxTimeoutError

    total = 8 << 20

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            async with box.open_interactive(
                    "sh", ["-c", f"head -c {total} /dev/zero | tr '\\0' x; echo; echo DONE-$((6*7))"]) as pty:
                # more output than the buffer holds: wait() cannot reach the exit unread
                with pytest.raises(SandboxTimeoutError):
                    await pty.wait(timeout=3)
                out = await pty.stream.read()
                assert out.count(b"x") == total and out.endswith(b"DONE-42\r\n")
                assert await pty.wait() == 0

            size = 3 << 20  # over the daemon's 1 MiB message cap: sent in pieces
            async with box.open_interactive("sh", ["-c", f"stty raw -echo; echo ready; head -c {size} | wc -c"]) as pty:
                await until(pty.stream, rb"ready", bytearray())
                await pty.stream.send(b"k" * size)
                assert (await pty.stream.read()).strip() == str(size).encode()
                assert await pty.wait(timeout=60) == 0

    run(main())


# --- the sync stream -----------------------------------------------------------------------------------


def test_sync_stream_is_a_raw_io(sbx_url: str) -> None:  # noqa: F811
    from rebuno.sandbox import SandboxEndOfStream, SandboxTimeoutError
    from rebuno.sandbox import sync as sandbox
    from rebuno.sandbox.sync import SyncInteractiveSession, SyncInteractiveStream

    with sandbox.create_sandbox() as box:
        with box.open_interactive("bash", ["--norc"], cols=70, rows=22) as pty:
            assert isinstance(pty, SyncInteractiveSession)
            assert isinstance(pty.stream, SyncInteractiveStream) and isinstance(pty.stream, io.RawIOBase)
            assert pty.stream.readable() and pty.stream.writable()
            out = bytearray()
            text = io.TextIOWrapper(io.BufferedRWPair(pty.stream, pty.stream), encoding="utf-8", newline="",
                                    write_through=True)
            text.write("stty size; echo sum-$((1+2))\r")
            text.flush()  # through the BufferedWriter
            sync_until(pty.stream, rb"sum-3\r\n", out)
            assert b"22 70\r\n" in out
            pty.resize(90, 33)
            pty.stream.send(b"stty size\r")
            sync_until(pty.stream, rb"33 90\r\n", out)
            with pytest.raises(SandboxTimeoutError):
                pty.wait(timeout=0.3)
            pty.stream.write(b"exit 5\r")
            sink = io.BytesIO()
            shutil.copyfileobj(pty.stream, sink)  # anything that consumes a raw stream: to the end
            assert sink.getvalue().endswith(b"exit\r\n")
            assert pty.wait(timeout=30) == 5 and pty.exit_code == 5
            assert pty.stream.read(10) == b""
            with pytest.raises(SandboxEndOfStream):
                pty.stream.receive()
        assert pty.stream.closed and pty.closed
        with pytest.raises(ValueError):
            pty.stream.read(1)


# --- the WebSocket client against a scripted server ---------------------------------------------------


def _server_frame(opcode: int, payload: bytes, fin: bool = True, mask: bool = False) -> bytes:
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    m = 0x80 if mask else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 65536:
        head += bytes([m | 126]) + struct.pack(">H", n)
    else:
        head += bytes([m | 127]) + struct.pack(">Q", n)
    if mask:
        key = os.urandom(4)
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        head += key
    return head + payload


async def _read_client_frame(reader: asyncio.StreamReader) -> tuple[bool, int, bytes]:
    b0, b1 = await reader.readexactly(2)
    assert b1 & 0x80, "client frames are masked"
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack(">H", await reader.readexactly(2))[0]
    elif n == 127:
        n = struct.unpack(">Q", await reader.readexactly(8))[0]
    key = await reader.readexactly(4)
    data = await reader.readexactly(n)
    return bool(b0 & 0x80), b0 & 0x0F, bytes(b ^ key[i % 4] for i, b in enumerate(data))


def test_websocket_client_framing() -> None:
    from rebuno.sandbox import SandboxApiError, SandboxResponseError
    from rebuno.sandbox._api import Api
    from rebuno.sandbox._interactive import OP_BINARY, OP_CLOSE, OP_TEXT, WebSocket, _ProtocolError

    seen: dict[str, Any] = {}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        path = head.split()[1]
        key = re.search(r"Sec-WebSocket-Key: (\S+)", head).group(1)  # type: ignore[union-attr]
        assert "Sec-WebSocket-Version: 13" in head and "Upgrade: websocket" in head
        if path == "/v1/missing":
            body = b'{"error":{"code":"no_such_pty","message":"gone"}}'
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
            await writer.drain()
            writer.close()
            return
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        if path == "/v1/bad-accept":
            accept = base64.b64encode(b"x" * 20)
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        if path == "/v1/bad-accept":
            await writer.drain()
            writer.close()
            return
        if path == "/v1/masked":
            writer.write(_server_frame(OP_BINARY, b"no", mask=True))
            await writer.drain()
            await asyncio.sleep(0.5)
            writer.close()
            return
        # a binary message in three fragments with a ping in between; a fragmented text
        # message; a big one (64-bit length)
        writer.write(_server_frame(OP_BINARY, b"hel", fin=False) + _server_frame(0x9, b"png")
                     + _server_frame(0x0, b"lo ", fin=False) + _server_frame(0x0, b"world"))
        writer.write(_server_frame(OP_TEXT, b'{"type":', fin=False) + _server_frame(0x0, '"é"}'.encode()))
        writer.write(_server_frame(OP_BINARY, b"b" * 70000))
        await writer.drain()
        seen["pong"] = await _read_client_frame(reader)
        frames = [await _read_client_frame(reader) for _ in range(3)]  # a message the client fragmented
        seen["fragments"] = frames
        writer.write(_server_frame(OP_CLOSE, struct.pack(">H", 1000) + b"bye"))
        await writer.drain()
        seen["close"] = await _read_client_frame(reader)
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        api = Api(url)
        try:
            ws = await WebSocket.connect(api, "/ok")
            assert await ws.recv() == (OP_BINARY, b"hello world")
            assert await ws.recv() == (OP_TEXT, '{"type":"é"}'.encode())
            assert await ws.recv() == (OP_BINARY, b"b" * 70000)
            await ws.send(OP_BINARY, b"abcdefghij", fragment=4)
            op, payload = await ws.recv()
            assert op == OP_CLOSE and ws.close_code == 1000 and ws.close_reason == "bye"
            await ws.send_close(1000)
            await asyncio.sleep(0.2)
            ws.abort()
            assert seen["pong"] == (True, 0xA, b"png")
            assert seen["fragments"] == [(False, OP_BINARY, b"abcd"), (False, 0, b"efgh"), (True, 0, b"ij")]
            assert seen["close"][1] == OP_CLOSE and seen["close"][2][:2] == struct.pack(">H", 1000)

            with pytest.raises(SandboxApiError) as e:
                await WebSocket.connect(api, "/missing")
            assert e.value.status_code == 404 and e.value.code == "no_such_pty"
            with pytest.raises(SandboxResponseError, match="Sec-WebSocket-Accept"):
                await WebSocket.connect(api, "/bad-accept")
            ws = await WebSocket.connect(api, "/masked")
            with pytest.raises(_ProtocolError, match="masked"):
                await ws.recv()
            ws.abort()
        finally:
            server.close()
            await server.wait_closed()
            await api.close()

    run(main())


def test_fragmented_control_message_reaches_the_daemon(sbx_url: str) -> None:  # noqa: F811
    """The daemon takes a resize message the client sent in fragments."""
    from rebuno import sandbox
    from rebuno.sandbox._interactive import OP_TEXT

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            async with box.open_interactive("bash", ["--norc"]) as pty:
                await pty._ws.send(OP_TEXT, b'{"type":"resize","cols":77,"rows":11}', fragment=5)  # type: ignore
                await pty.stream.send(b"stty size; exit\r")
                assert b"11 77\r\n" in await pty.stream.read()
                assert await pty.wait() == 0 and pty.errors == []

    run(main())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
