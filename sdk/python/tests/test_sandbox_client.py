"""rebuno.sandbox (async) and rebuno.sandbox.sync against a real `rebuno sandboxd`.

One daemon serves the module (binary from $REBUNO_BIN, else build/asan/rebuno) on a free
loopback port with a temporary --state-dir; it needs root. After every test every sandbox
is deleted through the raw HTTP API (pass or fail); at the end the daemon gets SIGTERM and
the module checks that it exited cleanly, left no process, cgroup or mount behind and that
its log has no sanitizer report.

The last tests run the Vercel Sandbox README's (spec 004) examples with only their imports
changed: `from vercel import sandbox` -> `from rebuno import sandbox`, `from vercel.api import
session` / `from vercel.sandbox import ...` -> `from rebuno.sandbox import ...`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import http.client
import inspect
import io
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, free_port, wait_for

BIN = os.environ.get("REBUNO_BIN") or str(REPO / "build" / "asan" / "rebuno")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandboxd runs as root")


# --- the daemon -------------------------------------------------------------------------------------


def _fnv1a(s: str) -> int:
    h = 1469598103934665603
    for b in s.encode():
        h ^= b
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out: set[int] = set()
    todo = [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Daemon:
    """A running `rebuno sandboxd` for this module."""

    def __init__(self, root: Path):
        self.root = root
        self.state = root / "state"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "sandboxd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.seen: set[int] = set()

    def start(self) -> Daemon:
        env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0"))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([BIN, "sandboxd", "--listen", f"127.0.0.1:{self.port}",
                                          "--state-dir", str(self.state)], stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL, env=env)

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"sandboxd exited with {self.proc.returncode}:\n{self.log()}")
            try:
                return self.http("GET", "/v1/health")[0] == 200
            except OSError:
                return False

        wait_for(ready, 20, what=f"sandboxd on {self.url}")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def token(self) -> str | None:
        """Its local token, found as its user's clients find it (for a client behind a relay,
        whose address has none)."""
        from rebuno import _localauth
        return _localauth.find(self.url, _localauth.SANDBOXD_STATE_FILE)[0]

    def http(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        token = self.token()
        try:
            conn.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                         headers={"Authorization": f"Bearer {token}"} if token else {})
            resp = conn.getresponse()
            raw = resp.read()
            ctype = resp.getheader("Content-Type") or ""
            return resp.status, (json.loads(raw) if raw and ctype.startswith("application/json") else raw)
        finally:
            conn.close()

    def cleanup(self) -> None:
        """What a test leaves behind: its sandboxes."""
        self.delete_all()

    def delete_all(self) -> None:
        assert self.proc is not None
        self.seen |= _descendants(self.proc.pid)
        st, body = self.http("GET", "/v1/sandboxes?limit=1000")
        assert st == 200, body
        for s in body["sandboxes"]:
            self.http("DELETE", f"/v1/sandboxes/{s['id']}")

    @property
    def cgroup_dirs(self) -> list[str]:
        name = "rebuno-%012x" % (_fnv1a(os.path.realpath(self.state)) & 0xFFFFFFFFFFFF)
        return [os.path.join("/sys/fs/cgroup", c, name) for c in ("memory", "pids", "cpu", "freezer")]

    def stop(self) -> list[str]:
        """SIGTERM, then the list of problems (leftovers, sanitizer reports)."""
        problems = []
        assert self.proc is not None
        self.seen |= _descendants(self.proc.pid)
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return ["sandboxd did not exit within 20 s of SIGTERM"]
        if rc != 0:
            problems.append(f"sandboxd exited with {rc}")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(p) for p in self.seen):
            time.sleep(0.05)
        left = [p for p in self.seen if _alive(p)]
        if left:
            problems.append(f"processes left behind: {left}")
        problems += [f"cgroup left behind: {d}" for d in self.cgroup_dirs if os.path.exists(d)]
        with open("/proc/self/mountinfo") as f:
            if any(str(os.path.realpath(self.state)) in line for line in f):
                problems.append("mounts left behind")
        log = self.log()
        for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            if marker in log:
                problems.append(f"{marker} in the log:\n{log[-3000:]}")
        return problems


def daemon_lifetime(cls: type[Daemon], prefix: str) -> Iterator[Daemon]:
    """A module's daemon: started in a new folder; at the end everything it holds is
    deleted, and it must stop leaving no process, cgroup, mount or sanitizer report."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    d = cls(root).start()
    try:
        yield d
    finally:
        with contextlib.suppress(Exception):
            d.cleanup()
        problems = d.stop()
        if not problems:
            shutil.rmtree(root, ignore_errors=True)
        assert not problems, "\n".join(problems) + f"\n(state kept in {root})"


def pointed_at(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Point the module-level API at the daemon for one test; clean up after it."""
    monkeypatch.setenv("REBUNO_SANDBOX_URL", daemon.url)
    monkeypatch.delenv("VERCEL_REGION", raising=False)
    monkeypatch.delenv("REBUNO_REGION", raising=False)
    try:
        yield daemon.url
    finally:
        daemon.cleanup()


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    yield from daemon_lifetime(Daemon, "rebuno-sbx-client-")


@pytest.fixture(autouse=True)
def sbx_url(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Point the module-level API at the test daemon; delete every sandbox afterwards."""
    yield from pointed_at(daemon, monkeypatch)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# --- sandboxes ---------------------------------------------------------------------------------------


def test_create_get_list_query_update_delete(sbx_url: str) -> None:
    from rebuno import APIError
    from rebuno.sandbox import (
        SandboxApiError, SandboxClient, SandboxNotFoundError, SandboxResources, SandboxServiceOptions,
        SandboxStatus,
    )

    async def main() -> None:
        async with SandboxClient.create(options=SandboxServiceOptions(region="local1")) as client:
            box = await client.create_sandbox(name="alpha", metadata={"team": "a", "env": "dev"}, env={"FOO": "bar"},
                                              resources=SandboxResources(vcpus=1, memory=512, disk_mb=256),
                                              timeout=60)
            assert (box.name, box.status, box.region) == ("alpha", SandboxStatus.RUNNING, "local1")
            assert dict(box.metadata) == {"team": "a", "env": "dev"} and box.tags == box.metadata
            nofile = box.resources.nofile  # the server's default for 1024 pids on this host
            assert nofile and box.resources == SandboxResources(vcpus=1, memory=512, pids=1024, nofile=nofile,
                                                                disk_mb=256)
            assert box.info.disk_enforced is True
            assert box.env_keys == ("FOO",) and box.timeout.total_seconds() == 60 and box.current_session_id
            assert box.image == "host" and box.expires_at and box.usage and box.usage.pids >= 1
            data = box.model_dump(mode="json")
            assert json.loads(json.dumps(data))["name"] == "alpha" and data["status"] == "running"
            with pytest.raises(dataclasses.FrozenInstanceError):
                box.resources.vcpus = 4  # type: ignore[misc]
            with pytest.raises(TypeError):
                box.metadata["x"] = "y"  # type: ignore[index]

            beta = await client.create_sandbox(name="beta", metadata={"team": "b"}, start=False)
            assert beta.status == SandboxStatus.STOPPED
            gamma = await client.create_sandbox(metadata={"team": "a"}, region="eu1")
            assert gamma.name.startswith("sbx-") and gamma.region == "eu1"

            got = await client.get_sandbox(name="alpha")
            assert got.id == box.id and (await client.get_sandbox(id=box.id)).name == "alpha"
            names = lambda boxes: [b.name for b in boxes]  # noqa: E731
            assert names(await client.list_sandboxes()) == ["alpha", "beta", gamma.name]
            assert names(await client.list_sandboxes(metadata={"team": "a"})) == ["alpha", gamma.name]
            assert names(await client.list_sandboxes(tags={"team": "a"}, state="running")) == ["alpha", gamma.name]
            assert names(await client.list_sandboxes(state=["stopped"])) == ["beta"]
            paged = [b.name async for b in client.query_sandboxes(page_size=1)]  # follows next_cursor
            assert paged == ["alpha", "beta", gamma.name]

            await box.update(metadata={"team": "z"}, resources=SandboxResources(memory=1024), timeout=0,
                             on_timeout="pause", region="moved")
            assert dict(box.metadata) == {"team": "z"} and box.resources.memory == 1024
            assert box.timeout is None and box.expires_at is None and box.on_timeout == "pause"
            assert box.region == "moved"

            with pytest.raises(SandboxApiError) as e:
                await client.create_sandbox(name="alpha")
            assert (e.value.status_code, e.value.code, e.value.status) == (409, "name_taken", 409)
            assert isinstance(e.value, APIError)
            with pytest.raises(SandboxApiError) as e:
                await client.create_sandbox(name="bad name")
            assert (e.value.status_code, e.value.code, e.value.field) == (400, "validation_error", "name")

            await box.delete()
            with pytest.raises(SandboxNotFoundError) as nf:
                await client.get_sandbox(name="alpha")
            assert (nf.value.status_code, nf.value.code) == (404, "sandbox_not_found")
            await client.delete_sandbox(name="beta")
            assert names(await client.list_sandboxes()) == [gamma.name]
            assert (await client.health())["service"] == "sandboxd"
        assert client.closed

    run(main())


def test_region_is_recorded_by_sandboxd(sbx_url: str) -> None:
    """region= is sent on create and read back from sandboxd, so a fresh client (which has
    no region option of its own) sees the sandbox's region; a sandbox created without one
    is in sandboxd's only region, "local"."""
    from rebuno.sandbox import SandboxApiError, SandboxClient, SandboxServiceOptions
    from rebuno.sandbox.sync import SyncSandboxClient

    async def main() -> None:
        async with SandboxClient.create(options=SandboxServiceOptions(region="sfo1")) as maker:
            iad = await maker.create_sandbox(name="in-iad1", region="iad1")  # the call's region wins
            dflt = await maker.create_sandbox(name="in-sfo1")  # else the client's option
            assert (iad.region, dflt.region) == ("iad1", "sfo1")
            with pytest.raises(SandboxApiError) as e:
                await maker.create_sandbox(name="bad-region", region="Not A Region")
            assert (e.value.status_code, e.value.field) == (400, "region")
        async with SandboxClient.create() as fresh:
            assert fresh.region is None
            got = await fresh.get_sandbox(name="in-iad1")
            assert got.region == "iad1" and got.model_dump(mode="json")["region"] == "iad1"
            assert {b.name: b.region for b in await fresh.list_sandboxes()} == {"in-iad1": "iad1", "in-sfo1": "sfo1"}
            plain = await fresh.create_sandbox(name="no-region", start=False)
            assert plain.region == "local" and (await plain.refresh()).region == "local"
            await got.stop()
            assert (await got.refresh()).region == "iad1"  # kept across stop and refresh
    run(main())
    with SyncSandboxClient() as client:
        assert client.get_sandbox(name="in-iad1").region == "iad1"


def test_run_command_args_cwd_env_input_check_kill_after(sbx_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import SandboxCommandNotFoundError, SandboxPathNotFoundError

    async def main() -> None:
        async with sandbox.create_sandbox(env={"SBX": "from-sandbox", "OVR": "sandbox"}) as box:
            r = await box.run_command("echo", ["hello", "$HOME", "a b;c"], capture_output=True)
            assert (r.stdout, r.stderr, r.returncode) == ("hello $HOME a b;c\n", "", 0)  # argv, no shell
            assert r.args == ("echo", "hello", "$HOME", "a b;c") and r.name == "echo" and r.cwd == "/root"
            r = await box.run_command("bash", ["-c", 'echo "$SBX $OVR $PWD"; echo err >&2; exit 3'],
                                      env={"OVR": "cmd"}, cwd="/tmp", capture_output=True)
            assert (r.stdout, r.stderr, r.returncode) == ("from-sandbox cmd /tmp\n", "err\n", 3)
            r = await box.run_command("sort", input="b\na\n", capture_output=True)
            assert r.stdout == "a\nb\n"
            r = await box.run_command("od", ["-An", "-tx1"], input=b"\x00\xff", capture_output=True)
            assert r.stdout.split() == ["00", "ff"]
            with pytest.raises(subprocess.CalledProcessError) as e:
                await box.run_command("bash", ["-c", "echo out; exit 7"], capture_output=True, check=True)
            assert e.value.returncode == 7 and e.value.output == "out\n"
            assert e.value.cmd == ["bash", "-c", "echo out; exit 7"]

            t0 = time.monotonic()
            r = await box.run_command("bash", ["-c", "sleep 300 & echo started; wait"], kill_after=0.5,
                                      capture_output=True)
            assert time.monotonic() - t0 < 10
            assert r.timed_out and r.signal == "KILL" and r.returncode == 128 + 9 and r.stdout == "started\n"
            ps = await box.run_command("ps", ["-eo", "args", "--no-headers"], capture_output=True)
            assert "sleep 300" not in ps.stdout  # the whole process group was killed

            # output destinations: inherited (live), a stream, merged, dropped
            r = await box.run_command("bash", ["-c", "echo to-stdout; echo to-stderr >&2"])
            assert r.stdout is None and r.stderr is None
            out = io.StringIO()
            r = await box.run_command("bash", ["-c", "echo one; echo two >&2; echo three"], stdout=out,
                                      stderr=subprocess.STDOUT)
            assert sorted(out.getvalue().splitlines()) == ["one", "three", "two"] and r.stderr is None
            r = await box.run_command("bash", ["-c", "echo x; echo y >&2"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE)
            assert (r.stdout, r.stderr) == (None, "y\n")
            buf = io.BytesIO()
            await box.run_command("printf", ["\\xff\\x00"], stdout=buf)
            assert buf.getvalue() == b"\xff\x00"

            with pytest.raises(SandboxCommandNotFoundError) as nf:
                await box.run_command("no-such-binary")
            assert isinstance(nf.value, FileNotFoundError)
            assert (nf.value.status_code, nf.value.code) == (400, "command_not_found")
            with pytest.raises(SandboxPathNotFoundError) as cw:
                await box.run_command("true", cwd="/nope")
            assert cw.value.code == "cwd_not_found"
            with pytest.raises(ValueError):
                await box.run_command("true", capture_output=True, stdout=subprocess.PIPE)
            with pytest.raises(TypeError):
                await box.run_command("ls", "-la")  # type: ignore[arg-type]

            # cancelling run_command kills the command
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(box.run_command("sleep", ["301"], capture_output=True), 0.5)
            for _ in range(50):
                ps = await box.run_command("ps", ["-eo", "args", "--no-headers"], capture_output=True)
                if "sleep 301" not in ps.stdout:
                    break
                await asyncio.sleep(0.05)
            assert "sleep 301" not in ps.stdout

    run(main())
    captured = capsys.readouterr()
    assert "to-stdout\n" in captured.out and "to-stderr\n" in captured.err


def test_create_command_stdin_streaming_communicate_and_signals(sbx_url: str) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import CommandSignal, CommandStatus, SandboxStdinClosedError, SandboxTimeoutError

    upper = "import sys\nfor l in sys.stdin:\n    print(l.strip().upper(), flush=True)\n" \
            "    print('seen', l.strip(), file=sys.stderr, flush=True)\n"

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            c = await box.create_command("python3", ["-u", "-c", upper], stdin=subprocess.PIPE)
            assert c.status == CommandStatus.RUNNING and c.returncode is None and c.stdin is not None
            for word in ("ping", "second", "third"):
                await c.stdin.send(f"{word}\n".encode())
                assert await c.stdout.readline() == word.upper() + "\n"  # line by line, as they come
            assert await c.stderr.readline() == "seen ping\n"
            out, err = await c.communicate(b"last\n")
            assert out == "LAST\n" and err == "seen second\nseen third\nseen last\n"
            assert c.returncode == 0 and await c.wait() == 0 and c.status == CommandStatus.EXITED

            # merged stderr, async iteration over lines
            m = await box.create_command("bash", ["-c", "echo a; echo b >&2; echo c"], stderr=subprocess.STDOUT)
            assert m.stderr is None and sorted([line async for line in m.stdout]) == ["a\n", "b\n", "c\n"]

            # wait with a timeout, signals
            s = await box.create_command("bash", ["-c", "trap 'echo got-term; exit 3' TERM; "
                                                  "while :; do sleep 0.05; done"])
            with pytest.raises(SandboxTimeoutError):
                await s.wait(timeout=0.3)
            await s.terminate()
            assert await s.wait() == 3 and await s.stdout.read() == "got-term\n"
            k = await box.create_command("sleep", ["30"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            await k.send_signal(CommandSignal.KILL)
            assert await k.wait() == 137 and k.signal == "KILL" and k.stdout is None

            # the command stopped reading: the service answers 409 stdin_closed
            q = await box.create_command("true", stdin=subprocess.PIPE)
            await q.wait()
            with pytest.raises(SandboxStdinClosedError) as e:
                await q.stdin.send(b"late")
            assert (e.value.status_code, e.value.code) == (409, "stdin_closed")
            assert isinstance(e.value, BrokenPipeError)

    run(main())


def test_reattach_to_detached_command(sbx_url: str) -> None:
    from rebuno.sandbox import SandboxClient

    script = "for l in sys.stdin:\n    print('got', l.strip(), flush=True)"

    async def main() -> None:
        async with SandboxClient() as first:
            box = await first.create_sandbox(name="reattach")
            c = await box.create_command("python3", ["-u", "-c", "import sys\n" + script], stdin=subprocess.PIPE)
            await c.stdin.send(b"one\n")
            assert await c.stdout.readline() == "got one\n"
            cid = c.id
        # a new client, as a later request would: only the sandbox name and the command id
        async with SandboxClient() as later:
            box = await later.get_sandbox(name="reattach")
            again = await box.get_command(cid)
            assert again.id == cid and again.returncode is None and again.stdin is not None
            assert await again.stdout.readline() == "got one\n"  # the kept log, from its start
            await again.stdin.send(b"two\n")
            assert await again.stdout.readline() == "got two\n"
            assert cid in [x.id for x in await box.query_commands()]
            await again.stdin.aclose()
            assert await again.wait() == 0 and await again.stdout.read() == ""

    run(main())


# --- files ---------------------------------------------------------------------------------------------


def test_files_text_bytes_large_streamed_and_errors(sbx_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import rebuno.sandbox._aio as aio
    from rebuno import sandbox
    from rebuno.sandbox import (
        DirectoryEntry, SandboxFileExistsError, SandboxIsADirectoryError, SandboxPathNotFoundError,
    )

    monkeypatch.setattr(aio, "IO_CHUNK", 1 << 20)  # 1 MiB requests, so 5 MiB takes several

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            await box.fs.write_text("notes.txt", "héllo\n")  # relative to the home (/root)
            assert await box.fs.read_text("/root/notes.txt") == "héllo\n"
            assert await box.fs.read_bytes("notes.txt", cwd="/root") == "héllo\n".encode()
            await box.fs.write_bytes("/tmp/bin", b"\x00\xff\x01")
            assert await box.fs.read_bytes("/tmp/bin") == b"\x00\xff\x01"

            blob = os.urandom(5 << 20)
            async with box.fs.open("/srv/big.bin", "wb") as w:
                for off in range(0, len(blob), 700_000):  # written in pieces, sent in 1 MiB chunks
                    await w.write(blob[off:off + 700_000])
            r = await box.run_command("sha256sum", ["/srv/big.bin"], capture_output=True)
            assert r.stdout.split()[0] == hashlib.sha256(blob).hexdigest()
            chunks = []
            async with box.fs.open("/srv/big.bin", "rb") as f:
                async for chunk in f:
                    chunks.append(chunk)
            assert len(chunks) == 5 and b"".join(chunks) == blob
            assert await box.fs.read_bytes("/srv/big.bin") == blob
            await box.fs.write_bytes("/srv/big2.bin", blob)
            assert (await box.fs.stat("/srv/big2.bin")).size == len(blob)

            async with box.fs.open("lines.txt", "w") as tw:
                await tw.write("a\nb\n")
            async with box.fs.open("lines.txt") as tr:
                assert [line async for line in tr] == ["a\n", "b\n"]

            await box.fs.write_text("/tmp/private", "x", mode=0o600)
            assert (await box.fs.stat("/tmp/private")).mode == 0o600
            await box.fs.write_text("/tmp/private", "y", mode=0o640)  # an existing file gets the mode too
            assert (await box.fs.stat("/tmp/private")).mode == 0o640

            await box.fs.mkdir("/srv/a/b")  # recursive by default, existing is fine
            await box.fs.mkdir("/srv/a/b")
            with pytest.raises(SandboxFileExistsError):
                await box.fs.mkdir("/srv/a/b", recursive=False)
            async with box.fs.batch(cwd="/srv/a") as batch:
                batch.write_text("b/one.txt", "1")
                batch.write_bytes("two.bin", b"2", mode=0o700)
            entries = await box.fs.listdir("/srv/a")
            assert [(e.name, e.type) for e in entries] == [("b", "directory"), ("two.bin", "file")]
            assert all(isinstance(e, DirectoryEntry) for e in entries) and entries[1].path == "/srv/a/two.bin"
            assert entries[1].mode == 0o700 and json.dumps(entries[1].model_dump(mode="json"))
            assert await box.fs.is_dir("/srv/a") and await box.fs.is_file("/srv/a/b/one.txt")
            assert await box.fs.exists("/srv/a/two.bin") and not await box.fs.exists("/srv/nope")
            await box.run_command("ln", ["-s", "/srv/a/two.bin", "/srv/link"])
            assert await box.fs.is_file("/srv/link")
            assert (await box.fs.stat("/srv/link", follow_symlinks=False)).is_symlink

            await box.fs.rename("/srv/a/two.bin", "/srv/a/three.bin")
            with pytest.raises(SandboxFileExistsError):
                await box.fs.rename("/srv/a/b/one.txt", "/srv/a/three.bin", overwrite=False)
            await box.fs.rename("/srv/a/b/one.txt", "/srv/a/three.bin")
            assert await box.fs.read_text("/srv/a/three.bin") == "1"
            await box.fs.remove("/srv/a", recursive=True)
            await box.fs.remove("/srv/a", missing_ok=True)

            with pytest.raises(SandboxPathNotFoundError) as e:
                await box.fs.read_text("/srv/a/three.bin")
            assert isinstance(e.value, FileNotFoundError)
            assert (e.value.status_code, e.value.code) == (404, "path_not_found")
            for call in (box.fs.read_bytes("/nope"), box.fs.listdir("/nope"), box.fs.remove("/nope"),
                         box.fs.stat("/nope"), box.fs.rename("/nope", "/srv/x")):
                with pytest.raises(SandboxPathNotFoundError):
                    await call
            await box.fs.write_text("/srv/new/dirs/f.txt", "x")  # uploads create missing parents
            assert await box.fs.read_text("/srv/new/dirs/f.txt") == "x"
            with pytest.raises(SandboxIsADirectoryError):
                await box.fs.read_bytes("/srv")

    run(main())


# --- users -----------------------------------------------------------------------------------------------


def test_users_create_as_user_sudo_and_permissions(sbx_url: str) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import SandboxPermissionError, SandboxUserAlreadyExistsError, SandboxUserNotFoundError

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            alice = await box.create_user("alice")
            assert alice.username == "alice" and alice.home_dir == "/home/alice" and alice.info.uid >= 1000
            r = await alice.run_command("id", capture_output=True, check=True)
            assert r.stdout.startswith(f"uid={alice.info.uid}(alice) gid={alice.info.gid}(alice)")
            r = await alice.run_command("bash", ["-c", 'whoami; echo "$HOME"; pwd'], capture_output=True)
            assert r.stdout == "alice\n/home/alice\n/home/alice\n" and r.user == "alice"
            r = await alice.run_command("bash", ["-c", "id -u; echo $HOME; pwd"], sudo=True, capture_output=True)
            assert r.stdout == "0\n/root\n/home/alice\n"
            # no_new_privs holds unless the sandbox allows escalation: setuid sudo cannot work
            assert box.info.allow_privilege_escalation is False
            r = await alice.run_command("grep", ["NoNewPrivs", "/proc/self/status"], capture_output=True)
            assert r.stdout.split() == ["NoNewPrivs:", "1"]
        async with sandbox.create_sandbox(allow_privilege_escalation=True) as esc:
            assert esc.info.allow_privilege_escalation is True
            r = await esc.run_command("grep", ["NoNewPrivs", "/proc/self/status"], capture_output=True)
            assert r.stdout.split() == ["NoNewPrivs:", "0"]
            await esc.run_command("bash", ["-c", "timeout 0.3 bash -c 'while :; do :; done' || true"])
            usage = (await esc.refresh()).info.usage
            assert usage is not None and usage.cpu_usage_us is not None and usage.cpu_usage_us > 0, usage
        async with sandbox.create_sandbox() as box:
            alice = await box.create_user("alice")

            with pytest.raises(SandboxUserAlreadyExistsError) as e:
                await box.create_user("alice")
            assert (e.value.status_code, e.value.code, e.value.username) == (409, "user_exists", "alice")
            with pytest.raises(ValueError):
                await box.create_user("Not Valid")

            await box.create_user("bob")
            bob = box.as_user("bob")
            assert bob.home_dir is None  # no request yet
            assert (await bob.run_command("whoami", capture_output=True)).stdout == "bob\n"
            assert bob.home_dir == "/home/bob"
            assert box.as_user("root").home_dir == "/root"
            ghost = box.as_user("ghost")
            with pytest.raises(SandboxUserNotFoundError) as nf:
                await ghost.run_command("true")
            assert (nf.value.status_code, nf.value.code) == (404, "user_not_found")

            await alice.fs.write_text("secret.txt", "private", mode=0o600)
            st = await box.fs.stat("/home/alice/secret.txt")
            assert (st.uid, st.mode) == (alice.info.uid, 0o600)
            assert await alice.fs.read_text("secret.txt") == "private"
            with pytest.raises(SandboxPermissionError) as pe:
                await bob.fs.read_text("/home/alice/secret.txt")
            assert isinstance(pe.value, PermissionError) and pe.value.status_code == 403
            assert not await bob.fs.exists("/home/alice/secret.txt")
            with pytest.raises(SandboxPermissionError):
                await bob.fs.listdir("/home/alice")
            with pytest.raises(SandboxPermissionError):
                await bob.fs.remove("/home/alice/secret.txt")
            assert await box.fs.read_text("/home/alice/secret.txt") == "private"  # root can
            await alice.fs.mkdir("work/deep")
            assert (await box.fs.stat("/home/alice/work/deep")).uid == alice.info.uid
            await alice.fs.rename("secret.txt", "work/moved.txt")
            assert [e.name for e in await alice.fs.listdir("work")] == ["deep", "moved.txt"]
            await alice.fs.remove("work", recursive=True)
            assert not await alice.fs.exists("work")

    run(main())


# The flipper: as the user, keep swapping two symlinks between what the user may read and
# what only root may, each swap an atomic rename, as fast as it can.
_FLIP = """\
while :; do
  ln -sfn /root/secret f.tmp && mv -T f.tmp f
  ln -sfn /root/private d.tmp && mv -T d.tmp d
  ln -sfn mine.txt f.tmp && mv -T f.tmp f
  ln -sfn mydir d.tmp && mv -T d.tmp d
done
"""


def test_user_reads_race_a_symlink_flip_and_never_see_roots_files(sbx_url: str) -> None:
    """Reads, stat and listings through a user handle are done as the user, so a symlink
    the user swaps to /root while the call runs is refused by the kernel (they used to be
    checked as the user and then done as root: 32 leaks in 200 reads)."""
    from rebuno import sandbox
    from rebuno.sandbox import CommandStatus, SandboxPermissionError

    secret = "ROOT-ONLY " * 7
    own = "alice's own file\n"

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            await box.fs.write_text("/root/secret", secret, mode=0o600)
            await box.fs.write_text("/root/private/root-entry", "r")
            alice = await box.create_user("alice")
            await alice.fs.write_text("mine.txt", own)
            await alice.fs.write_text("mydir/alice-entry", "a")
            await alice.run_command("bash", ["-c", "ln -s mine.txt f && ln -s mydir d"], check=True)
            flipper = await alice.create_command("bash", ["-c", _FLIP])
            outcomes: dict[str, int] = {}

            def seen(kind: str) -> None:
                outcomes[kind] = outcomes.get(kind, 0) + 1

            for _ in range(150):
                try:
                    text = await alice.fs.read_text("f")
                    assert text == own, text
                    seen("read")
                except SandboxPermissionError:
                    seen("read denied")
                try:
                    async with alice.fs.open("f", "r") as fh:
                        assert await fh.read() == own
                    seen("open")
                except SandboxPermissionError:
                    seen("open denied")
                try:
                    entry = await alice.fs.stat("f")
                    assert (entry.uid, entry.size) == (alice.info.uid, len(own)), entry
                    seen("stat")
                except SandboxPermissionError:
                    seen("stat denied")
                try:
                    names = [e.name for e in await alice.fs.listdir("d")]
                    assert names == ["alice-entry"], names
                    seen("list")
                except SandboxPermissionError:
                    seen("list denied")
            assert (await flipper.refresh()).status == CommandStatus.RUNNING  # it flipped all along
            await flipper.kill()
            await flipper.wait()
            print(outcomes)

            # settled either way, each call gives exactly the one answer
            await alice.run_command("ln", ["-sfn", "mine.txt", "f"], check=True)
            assert await alice.fs.read_text("f") == own
            await alice.run_command("ln", ["-sfn", "/root/secret", "f"], check=True)
            for call in (alice.fs.read_text("f"), alice.fs.read_bytes("/root/secret"), alice.fs.stat("f")):
                with pytest.raises(SandboxPermissionError):
                    await call
            assert await box.fs.read_text("/root/secret") == secret  # root's handle still reads it

    run(main())


def test_user_stat_list_and_probes_honour_permissions(sbx_url: str) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import (
        SandboxFileExistsError, SandboxFilesystemError, SandboxIsADirectoryError, SandboxPathNotFoundError,
        SandboxPermissionError,
    )

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            await box.fs.write_text("/root/secret", "s", mode=0o600)
            alice = await box.create_user("alice")
            bob = await box.create_user("bob")
            await bob.fs.write_text("bob.txt", "b", mode=0o644)

            # stat and listdir are done as the user: root's and bob's homes are closed to alice
            for call in (alice.fs.stat("/root/secret"), alice.fs.stat("/home/bob/bob.txt"),
                         alice.fs.stat("/root/secret", follow_symlinks=False), alice.fs.listdir("/root"),
                         alice.fs.listdir("/home/bob"), alice.fs.read_bytes("/home/bob/bob.txt"),
                         alice.fs.rename("/home/bob/bob.txt", "stolen.txt"), alice.fs.remove("/root/secret"),
                         alice.fs.remove("/home/bob", recursive=True)):
                with pytest.raises(SandboxPermissionError) as e:
                    await call
                assert (e.value.status_code, e.value.code) == (403, "permission_denied")
            for probe in (alice.fs.exists, alice.fs.is_file, alice.fs.is_dir):
                assert not await probe("/root/secret") and not await probe("/home/bob/bob.txt")
            assert await box.fs.exists("/home/bob/bob.txt")  # root's handle sees it
            assert (await box.fs.stat("/root/secret")).size == 1

            # what the user can reach works as before, with the errors of the files API
            entry = await alice.fs.stat("/home/bob")  # the home itself is visible: 0770 user:root
            assert (entry.type, entry.uid, entry.gid, entry.mode) == ("directory", bob.info.uid, 0, 0o770)
            await alice.fs.write_bytes("bin/data", bytes(range(256)) * 9000)  # > 2 read commands
            assert await alice.fs.read_bytes("bin/data") == bytes(range(256)) * 9000
            async with alice.fs.open("bin/data", "rb") as fh:
                assert await fh.read(3) == b"\x00\x01\x02"
                assert len(await fh.read()) == 256 * 9000 - 3
            await alice.run_command("ln", ["-s", "bin/data", "link"], check=True)
            await alice.run_command("ln", ["-s", "nowhere", "dangling"], check=True)
            assert (await alice.fs.stat("link")).type == "file"
            link = await alice.fs.stat("link", follow_symlinks=False)
            assert (link.type, link.target, link.path) == ("symlink", "bin/data", "/home/alice/link")
            with pytest.raises(SandboxPathNotFoundError):
                await alice.fs.stat("dangling")
            assert [e.name for e in await alice.fs.listdir("bin")] == ["data"]
            with pytest.raises(SandboxPathNotFoundError):
                await alice.fs.listdir("bin/data")
            with pytest.raises(SandboxPathNotFoundError):
                await alice.fs.read_text("missing")
            with pytest.raises(SandboxIsADirectoryError):
                await alice.fs.read_text("bin")
            await alice.run_command("mkfifo", ["fifo"], check=True)
            with pytest.raises(SandboxFilesystemError) as nf:
                await alice.fs.read_bytes("fifo")
            assert nf.value.code == "not_a_file"
            await alice.fs.write_text("one", "1")
            with pytest.raises(SandboxFileExistsError):
                await alice.fs.rename("one", "bin/data", overwrite=False)
            await alice.fs.rename("one", "bin/data")
            assert await alice.fs.read_text("bin/data") == "1"
            with pytest.raises(SandboxFilesystemError) as ne:
                await alice.fs.remove("bin")
            assert ne.value.code == "directory_not_empty"
            await alice.fs.remove("missing", missing_ok=True)
            await alice.fs.remove("bin", recursive=True)
            assert not await alice.fs.exists("bin")

    run(main())


def test_user_mkdir_and_uploads_ownership(sbx_url: str) -> None:
    """mkdir and uploads are trusted orchestration on the files API (root's rights inside):
    directories belong to the user and the sandbox default group (gid 0), mode 0770;
    uploaded files to the user and its own group."""
    from rebuno import sandbox
    from rebuno.sandbox import SandboxPermissionError

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            alice = await box.create_user("alice")
            home = await box.fs.stat("/home/alice")
            assert (home.uid, home.gid, home.mode) == (alice.info.uid, 0, 0o770)
            await alice.fs.mkdir("a/b/c")
            for d in ("a", "a/b", "a/b/c"):
                st = await box.fs.stat(f"/home/alice/{d}")
                assert (st.uid, st.gid, st.mode) == (alice.info.uid, 0, 0o770), (d, st)
            await alice.fs.mkdir("p", mode=0o750)
            assert (await box.fs.stat("/home/alice/p")).mode == 0o750
            await alice.fs.write_text("x/y/z.txt", "z", mode=0o640)  # missing parents made too
            st, parent = await box.fs.stat("/home/alice/x/y/z.txt"), await box.fs.stat("/home/alice/x/y")
            assert (st.uid, st.gid, st.mode) == (alice.info.uid, alice.info.gid, 0o640)
            assert (parent.uid, parent.gid, parent.mode) == (alice.info.uid, 0, 0o770)
            # uploads are not a permission boundary: they write where alice's commands cannot
            await alice.fs.write_text("/root/from-alice.txt", "w")
            assert (await box.fs.stat("/root/from-alice.txt")).uid == alice.info.uid
            with pytest.raises(SandboxPermissionError):
                await alice.fs.read_text("/root/from-alice.txt")

    run(main())


def test_user_uploads_never_follow_a_link_the_user_planted(sbx_url: str) -> None:
    """Issue 13 #16: alice plants ``s2 -> /home/bob/notes``; an upload through her handle
    is refused (it used to overwrite bob's 0600 file, and the chmod after an upload with a
    mode then made it 0644 as root). Links root made are still followed."""
    from rebuno import sandbox
    from rebuno.sandbox import SandboxPermissionError

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            alice = await box.create_user("alice")
            bob = await box.create_user("bob")
            await bob.fs.write_text("notes", "bob's notes\n", mode=0o600)
            await alice.run_command("ln", ["-s", "/home/bob/notes", "s2"], check=True)
            await alice.run_command("ln", ["-s", "/home/bob", "bobdir"], check=True)
            for call in (alice.fs.write_text("s2", "alice was here", mode=0o644),
                         alice.fs.write_bytes("bobdir/planted", b"x"),
                         alice.fs.mkdir("bobdir/sub")):
                with pytest.raises(SandboxPermissionError) as e:
                    await call
                assert (e.value.status_code, e.value.code) == (403, "symlink_refused")
            assert "/home/alice/s2" in str(e.value) or "/home/alice/bobdir" in str(e.value)
            notes = await box.fs.stat("/home/bob/notes")
            assert (notes.uid, notes.mode) == (bob.info.uid, 0o600)
            assert await box.fs.read_text("/home/bob/notes") == "bob's notes\n"
            assert [x.name for x in await box.fs.listdir("/home/bob") if not x.name.startswith(".")] == ["notes"]

            # a link root made works for alice; an existing file gets the upload's mode
            await box.run_command("bash", ["-c", "mkdir -p /srv/team && ln -s /srv/team /home/alice/team"],
                                  check=True)
            await alice.fs.write_text("team/plan.txt", "plan", mode=0o640)
            await alice.fs.write_text("team/plan.txt", "plan v2", mode=0o600)
            st = await box.fs.stat("/srv/team/plan.txt")
            assert (st.uid, st.mode) == (alice.info.uid, 0o600)
            async with alice.fs.open("team/plan.txt", "wb", permissions=0o644) as fh:
                await fh.write(b"plan v3")
            assert (await box.fs.stat("/srv/team/plan.txt")).mode == 0o644

    run(main())


def test_user_handles_resume_lazily_and_session_users_never_do(sbx_url: str) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import SandboxSessionEndedError, SandboxStatus

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            alice = await box.create_user("alice")
            await alice.fs.write_text("kept.txt", "kept")
            first = box.current_session_id
            await box.stop()
            r = await alice.run_command("whoami", capture_output=True)  # resumes the stopped sandbox
            assert r.stdout == "alice\n" and box.status == SandboxStatus.RUNNING
            assert box.current_session_id not in (None, first) and r.session_id == box.current_session_id
            await box.stop()
            assert await alice.fs.read_text("kept.txt") == "kept"  # a file read resumes too
            assert box.status == SandboxStatus.RUNNING
            await box.pause()
            assert [e.name for e in await alice.fs.listdir(".") if not e.name.startswith(".")] == ["kept.txt"]
            assert box.status == SandboxStatus.RUNNING

            # a user of an explicit session stays pinned to it and never resumes the sandbox
            active = await box.session()
            pinned, made = active.as_user("alice"), await active.create_user("bob")
            assert (await pinned.run_command("whoami", capture_output=True)).stdout == "alice\n"
            await box.stop()
            for call in (pinned.run_command("true"), pinned.fs.read_text("kept.txt"), pinned.fs.stat("kept.txt"),
                         pinned.fs.listdir("."), pinned.fs.exists("kept.txt"), pinned.fs.write_text("n.txt", "n"),
                         made.run_command("true"), made.fs.mkdir("d"), active.as_user("alice").fs.read_text("kept.txt")):
                with pytest.raises(SandboxSessionEndedError):
                    await call
            assert (await box.refresh()).status == SandboxStatus.STOPPED  # nothing resumed it

    run(main())


# --- lifecycle and sessions -----------------------------------------------------------------------------


def test_stop_pause_resume_and_lazy_resume(sbx_url: str) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import SandboxStateError, SandboxStatus

    async def main() -> None:
        async with sandbox.create_sandbox(timeout=120) as box:
            first = box.current_session_id
            await box.fs.write_text("keep.txt", "kept")
            bg = (await box.run_command("bash", ["-c", "sleep 1000 & echo $!"], capture_output=True)).stdout.strip()

            assert (await box.pause()).status == SandboxStatus.PAUSED
            r = await box.run_command("bash", ["-c", f"kill -0 {bg} && echo alive"], capture_output=True)
            assert r.stdout == "alive\n"  # a command thawed it: same session, processes kept
            assert box.status == SandboxStatus.RUNNING and box.current_session_id == first

            await box.stop()
            assert box.status == SandboxStatus.STOPPED and box.stop_reason == "stopped"
            assert box.current_session_id is None
            with pytest.raises(SandboxStateError) as e:
                await box.pause()
            assert (e.value.status_code, e.value.code) == (409, "sandbox_stopped")
            with pytest.raises(SandboxStateError) as e:
                await box.extend_timeout(30)
            assert e.value.code == "sandbox_not_running"

            assert await box.fs.read_text("keep.txt") == "kept"  # a file call resumed it lazily
            assert box.status == SandboxStatus.RUNNING and box.current_session_id not in (None, first)
            r = await box.run_command("bash", ["-c", f"kill -0 {bg} 2>/dev/null || echo gone"], capture_output=True)
            assert r.stdout == "gone\n"

            await box.pause()
            assert (await box.resume()).status == SandboxStatus.RUNNING
            before = box.expires_at
            await box.extend_timeout(60)
            assert (box.expires_at - before).total_seconds() >= 59

    run(main())


def test_explicit_session_never_resumes(sbx_url: str) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import SandboxSessionEndedError, SandboxSessionPausedError, SandboxStatus

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            active = await box.session()
            assert active.id == box.current_session_id and active.sandbox is box
            assert (await active.run_command("echo", ["pinned"], capture_output=True)).stdout == "pinned\n"
            await active.fs.write_text("/tmp/s.txt", "s")
            await box.pause()
            with pytest.raises(SandboxSessionPausedError):
                await active.run_command("true")
            await box.stop()
            for call in (active.run_command("true"), active.fs.read_text("/tmp/s.txt"),
                         active.create_user("carol")):
                with pytest.raises(SandboxSessionEndedError) as e:
                    await call
                assert (e.value.status_code, e.value.code) == (409, "session_ended")
            assert not await active.is_active()
            assert (await box.refresh()).status == SandboxStatus.STOPPED  # nothing resumed it

            # managed acquisition resumes and stops exactly the session it yielded
            async with box.session() as exact:
                assert box.status == SandboxStatus.RUNNING and exact.id == box.current_session_id
                await exact.run_command("true")
            assert (await box.refresh()).status == SandboxStatus.STOPPED
            # ... and never a replacement session adopted by the sandbox handle
            async with box.session() as old:
                await old.run_command("true")
                await box.stop()
                await box.run_command("true")  # lazy resume: a new session
                assert box.current_session_id != old.id
            assert (await box.refresh()).status == SandboxStatus.RUNNING
            assert [c.session_id for c in await old.query_commands()] == [old.id]

    run(main())


# --- sync API ------------------------------------------------------------------------------------------


def test_sync_client_equivalents(sbx_url: str) -> None:
    from rebuno.sandbox import (
        SandboxNotFoundError, SandboxPathNotFoundError, SandboxSessionEndedError, SandboxStatus,
        SyncSandboxExecution,
    )
    from rebuno.sandbox.sync import SyncSandboxClient

    with SyncSandboxClient() as client:
        with client.create_sandbox(name="sync-box", metadata={"k": "v"}) as box:
            r = box.run_command("echo", ["hello"], capture_output=True)
            assert (r.stdout, r.returncode) == ("hello\n", 0)
            with pytest.raises(subprocess.CalledProcessError):
                box.run_command("false", check=True)
            c = box.create_command("python3", ["-u", "-c", "import sys\nfor l in sys.stdin: print(l.strip()[::-1])"],
                                   stdin=subprocess.PIPE)
            text_in = io.TextIOWrapper(c.stdin, encoding="utf-8", write_through=True)
            text_in.write("abc\n")
            assert c.stdout.readline() == "cba\n"
            c.stdin.write(b"xyz\n")
            assert c.stdout.readline() == "zyx\n"
            assert c.poll() is None
            assert c.communicate() == ("", "") and c.wait() == 0 and c.poll() == 0
            again = box.get_command(c.id)
            assert again.stdout.read() == "cba\nzyx\n"
            assert [x.id for x in box.query_commands()][-1] in (c.id, again.id)

            box.fs.write_text("f.txt", "sync")
            assert box.fs.read_text("/root/f.txt") == "sync"
            with box.fs.open("big", "wb") as w:
                w.write(b"x" * 100_000)
            assert box.fs.stat("big").size == 100_000 and [e.name for e in box.fs.listdir()] == ["big", "f.txt"]
            with pytest.raises(SandboxPathNotFoundError):
                box.fs.read_bytes("missing")

            alice = box.create_user("alice")
            assert alice.run_command("whoami", capture_output=True).stdout == "alice\n"
            assert isinstance(box, SyncSandboxExecution) and isinstance(alice, SyncSandboxExecution)

            assert box.stop().status == SandboxStatus.STOPPED
            assert box.fs.read_text("f.txt") == "sync" and box.status == SandboxStatus.RUNNING  # lazy resume
            s = box.session()
            assert s.run_command("true").returncode == 0
            box.pause().resume()
            with box.session() as exact:
                assert exact.id == s.id
            with pytest.raises(SandboxSessionEndedError):
                s.run_command("true")
            assert box.refresh().status == SandboxStatus.STOPPED
            assert [b.name for b in client.list_sandboxes(metadata={"k": "v"})] == ["sync-box"]
            assert [b.name for b in client.query_sandboxes(state="stopped")] == ["sync-box"]
        with pytest.raises(SandboxNotFoundError):  # leaving the block deleted it
            client.get_sandbox(name="sync-box")
        kept = client.create_sandbox(name="kept", destroy=False)
        with kept:
            pass
        assert client.get_sandbox(name="kept").status == SandboxStatus.STOPPED  # destroy=False: stopped
    assert client.closed


def test_deprecated_process_aliases_warn(sbx_url: str) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import (
        Command, CommandStatus, CommandStdin, CompletedCommand, CompletedProcess, Process, ProcessStatus,
        ProcessStdin, SyncCommand, SyncCommandStdin, SyncProcess, SyncProcessStdin,
    )
    from rebuno.sandbox import sync as sync_sandbox

    assert (Process, CompletedProcess, ProcessStatus, ProcessStdin) == (Command, CompletedCommand, CommandStatus,
                                                                          CommandStdin)
    assert (SyncProcess, SyncProcessStdin) == (SyncCommand, SyncCommandStdin)

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            with pytest.warns(DeprecationWarning, match="run_command"):
                r = await box.run_process("echo", ["old"], capture_output=True)
            assert r.stdout == "old\n"
            with pytest.warns(DeprecationWarning, match="create_command"):
                p = await box.create_process("true")
            with pytest.warns(DeprecationWarning, match="get_command"):
                assert (await box.get_process(p.id)).id == p.id
            with pytest.warns(DeprecationWarning, match="query_commands"):
                assert p.id in [x.id for x in await box.query_processes()]
            user = await box.create_user("dep")
            with pytest.warns(DeprecationWarning):
                assert (await user.run_process("whoami", capture_output=True)).stdout == "dep\n"

    run(main())
    with sync_sandbox.create_sandbox() as sbox:
        with pytest.warns(DeprecationWarning):
            assert sbox.run_process("echo", ["s"], capture_output=True).stdout == "s\n"
        with pytest.warns(DeprecationWarning):
            p = sbox.create_process("true")
        with pytest.warns(DeprecationWarning):
            assert sbox.get_process(p.id).wait() == 0
        with pytest.warns(DeprecationWarning):
            assert sbox.query_processes()


def test_later_features_raise_not_implemented(sbx_url: str) -> None:
    """What sandboxd has no equivalent for raises at once, before any request."""
    from rebuno import sandbox
    from rebuno.sandbox import NetworkPolicy
    from rebuno.sandbox import sync as sync_sandbox

    for kwargs in ({"runtime": "node22"}, {"persistent": False}, {"snapshot_retention": 3}):
        with pytest.raises(NotImplementedError, match="not supported by rebuno sandboxd yet|keeps"):
            sandbox.create_sandbox(**kwargs)
        with pytest.raises(NotImplementedError):
            sync_sandbox.create_sandbox(**kwargs)
    for call in (lambda: sandbox.fork_sandbox(source_sandbox="x", runtime="node22"),
                 lambda: sync_sandbox.fork_sandbox(source_sandbox="x", persistent=False)):
        with pytest.raises(NotImplementedError):
            call()

    async def main() -> None:
        async with sandbox.create_sandbox(ports=[], mounts={}) as box:  # empty means none: fine
            await box.update(network_id=None, mounts={})  # "disconnect": there is nothing connected
            assert box.network_id is None and dict(box.mounts) == {}
            assert box.network_policy == NetworkPolicy.deny_all()  # the default
            with pytest.raises(NotImplementedError):
                await box.update(runtime="node22")
            assert (await box.run_command("true")).returncode == 0  # nothing was half-done

    run(main())


def test_network_policy_ports_and_networks(sbx_url: str) -> None:
    """The document's NetworkPolicy classes, sent as the API's JSON; live updates; ports."""
    from rebuno import sandbox
    from rebuno.sandbox import NetworkPolicy, NetworkPolicyRule, NetworkPolicyTransform
    from rebuno.sandbox import sync as sync_sandbox

    secret = "Basic " + base64.b64encode(b"x-access-token:ghs_notARealToken").decode()
    policy = NetworkPolicy.custom({
        "*": [],
        "github.com": [NetworkPolicyRule(transform=[NetworkPolicyTransform(headers={"Authorization": secret})])],
    })
    assert policy.to_api() == {"*": [], "github.com": [{"transform": [{"headers": {"Authorization": secret}}]}]}
    assert secret not in repr(policy) and "<redacted>" in repr(policy)
    assert NetworkPolicy.allow_all().to_api() == "allow-all" and NetworkPolicy.deny_all().to_api() == "deny-all"
    with pytest.raises(TypeError):
        NetworkPolicyRule(transform="not a list")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        NetworkPolicy(mode="sometimes")
    # headers over plain HTTP (port 80) only when asked for by name
    old = NetworkPolicyRule(transform=[NetworkPolicyTransform(headers={"X-Key": "v"})], plain_http=True)
    assert old.to_api() == {"transform": [{"headers": {"X-Key": "v"}}], "plain_http": True}
    assert NetworkPolicy.from_api({"h.example": [old.to_api()]}).rules["h.example"][0].plain_http  # type: ignore[index]
    with pytest.raises(TypeError):
        NetworkPolicyRule(plain_http="yes")  # type: ignore[arg-type]
    # per-request rules: match, forward_url, response (the API's shapes)
    from rebuno.sandbox import NetworkPolicyResponse
    routed = NetworkPolicy.custom({"api.example": [
        NetworkPolicyRule(match={"path": {"startsWith": "/v1/"}}, forward_url="https://p.example/in"),
        NetworkPolicyRule(match={"method": ["DELETE"]},
                          response=NetworkPolicyResponse(403, body="read-only", content_type="text/plain")),
        NetworkPolicyRule(match={"headers": [{"key": {"exact": "x-k"}}]},
                          transform=[NetworkPolicyTransform(headers={"Authorization": secret})]),
    ]})
    routed_api = {"api.example": [
        {"match": {"path": {"startsWith": "/v1/"}}, "forwardURL": "https://p.example/in"},
        {"match": {"method": ["DELETE"]},
         "response": {"statusCode": 403, "body": "read-only", "contentType": "text/plain"}},
        {"match": {"headers": [{"key": {"exact": "x-k"}}]},
         "transform": [{"headers": {"Authorization": secret}}]}]}
    assert routed.to_api() == routed_api
    assert NetworkPolicy.from_api(routed_api) == routed
    assert secret not in repr(routed) and "p.example" in repr(routed)
    with pytest.raises(ValueError):
        NetworkPolicyRule(forward_url="https://p.example", response=NetworkPolicyResponse(200))
    with pytest.raises(TypeError):
        NetworkPolicyResponse("200")  # type: ignore[arg-type]

    async def main() -> None:
        async with sandbox.create_sandbox(network_policy=routed) as box:
            got = box.network_policy
            assert got is not None and got.rules is not None
            rules = got.rules["api.example"]
            assert rules[0].forward_url == "https://p.example/in" and rules[0].match == {
                "path": {"startsWith": "/v1/"}}
            assert rules[1].response == NetworkPolicyResponse(403, body="read-only", content_type="text/plain")
            assert dict(rules[2].transform[0].headers) == {"Authorization": "<redacted>"}
            with pytest.raises(sandbox.SandboxApiError) as e:
                await box.update(network_policy={"api.example": [
                    {"match": {"path": {"regex": "^/"}}, "forwardURL": "https://p.example"}]})
            assert e.value.status_code == 400 and e.value.field == "network_policy.api.example[0].match.path.regex"
        async with sandbox.create_sandbox(network_policy=policy, ports=[3000]) as box:
            got = box.network_policy
            assert got is not None and got.mode == "custom" and set(got.rules or {}) == {"*", "github.com"}
            hdrs = got.rules["github.com"][0].transform[0].headers  # type: ignore[index]
            assert dict(hdrs) == {"Authorization": "<redacted>"}  # never returned
            assert box.ports == (3000,)
            url = box.domain(3000)
            assert url.startswith("http://127.0.0.1:")
            with pytest.raises(ValueError):
                box.domain(4000)
            # in the sandbox: the trust variables point at the bundle holding its CA
            r = await box.run_command("bash", ["-c", "echo $SSL_CERT_FILE; grep -c CERTIFICATE $NODE_EXTRA_CA_CERTS"],
                                      capture_output=True)
            assert r.stdout.split() == ["/etc/ssl/certs/ca-certificates.crt", "2"]
            await box.update(network_policy=NetworkPolicy.deny_all(), network_id="net-1", ports=[])
            assert box.network_policy == NetworkPolicy.deny_all() and box.network_id == "net-1"
            assert box.ports == ()
            await box.update(network_policy="allow-all")
            assert box.network_policy == NetworkPolicy.allow_all()
            with pytest.raises(sandbox.SandboxApiError) as e:
                await box.update(network_policy={"github.com": [{"transform": [{"headers": {"Host": "x"}}]}]})
            assert e.value.status_code == 400 and (e.value.field or "").startswith("network_policy")

    run(main())
    with sync_sandbox.create_sandbox(network_policy=NetworkPolicy.allow_all(), network_id="net-2") as box:
        assert box.network_id == "net-2" and box.network_policy == NetworkPolicy.allow_all()


def test_errors_and_protocols(sbx_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import rebuno.sandbox._api as api
    from rebuno import NetworkError
    from rebuno.sandbox import (
        SandboxApiError, SandboxClient, SandboxConnectionError, SandboxExecution, SandboxFilesystemOperations,
        SandboxLimitError, SandboxNotFoundError,
    )

    monkeypatch.setattr(api, "CONNECT_RETRY_FOR", 0.0)

    async def main() -> None:
        async with SandboxClient(f"http://127.0.0.1:{free_port()}") as nowhere:
            with pytest.raises(SandboxConnectionError) as e:
                await nowhere.health()
            assert isinstance(e.value, NetworkError) and "sandboxd" in str(e.value)
        async with SandboxClient(sbx_url) as client:
            with pytest.raises(SandboxNotFoundError) as nf:
                await client.get_sandbox(name="missing")
            assert "[sandbox_not_found]" in str(nf.value) and nf.value.data["error"]["code"] == "sandbox_not_found"
            box = await client.create_sandbox()
            session = await box.session()
            user = await box.create_user("u1")
            for x in (box, session, user):
                assert isinstance(x, SandboxExecution) and isinstance(x.fs, SandboxFilesystemOperations)
            assert issubclass(SandboxLimitError, SandboxApiError)
            await box.delete()
            with pytest.raises(SandboxNotFoundError):
                await box.run_command("true")

    run(main())


def test_public_names_have_docstrings_and_type_hints() -> None:
    import rebuno.sandbox
    import rebuno.sandbox.sync

    missing: list[str] = []
    for mod in (rebuno.sandbox, rebuno.sandbox.sync):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.ismodule(obj) or not (inspect.isclass(obj) or callable(obj)):
                continue
            if not (getattr(obj, "__doc__", None) or "").strip():
                missing.append(f"{mod.__name__}.{name}")
            for mname, member in (inspect.getmembers(obj) if inspect.isclass(obj) else []):
                if mname.startswith("_") or mname in {"args", "with_traceback", "add_note", "errno", "strerror",
                                                      "filename", "filename2", "characters_written"}:
                    continue
                if inspect.isfunction(member) or isinstance(member, property):
                    if not (member.__doc__ or "").strip():
                        missing.append(f"{mod.__name__}.{name}.{mname}")
                if inspect.isfunction(member):
                    for p in inspect.signature(member).parameters.values():
                        if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty:
                            missing.append(f"{mod.__name__}.{name}.{mname}({p.name})")
            if inspect.isfunction(obj):
                for p in inspect.signature(obj).parameters.values():
                    if p.annotation is inspect.Parameter.empty:
                        missing.append(f"{mod.__name__}.{name}({p.name})")
    assert not missing, missing


# --- the Vercel Sandbox README (spec 004), with only the imports changed ------------------------------------


def test_readme_examples_async(sbx_url: str, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    async def main_example() -> None:
        import subprocess

        from rebuno import sandbox
        from rebuno.sandbox import session

        async with session():
            async with sandbox.create_sandbox() as instance:
                process = await instance.run_command("echo", ["hello"], capture_output=True)
                print(process.stdout)

                # Pass input to run_command, or keep stdin open with stdin=subprocess.PIPE.
                result = await instance.run_command("sort", input="b\na\n", capture_output=True)
                server = await instance.create_command("cat", stdin=subprocess.PIPE)
                await server.stdin.send(b"ping\n")
                print(await server.stdout.readline())
                print(await server.communicate())  # Close stdin, read the rest, and wait.
        assert result.stdout == "a\nb\n"

    run(main_example())
    assert capsys.readouterr().out == "hello\n\nping\n\n('', '')\n"

    async def inputs_and_outputs() -> dict[str, Any]:
        from rebuno import sandbox
        from rebuno.sandbox import SandboxResources

        async with sandbox.create_sandbox(
            resources=SandboxResources(vcpus=2, memory=4096),
        ) as instance:
            result = await instance.run_command(
                "echo", ["hello"], capture_output=True,
            )

            if result.returncode == 0:
                output = result.stdout

            # Prepare the result for a JSON response.
            response_data = result.model_dump(mode="json")
            assert instance.resources.vcpus == 2 and instance.resources.memory == 4096
        assert output == "hello\n"
        return response_data

    data = run(inputs_and_outputs())
    assert json.loads(json.dumps(data))["stdout"] == "hello\n" and data["returncode"] == 0

    async def standalone_client() -> None:
        from rebuno.sandbox import SandboxClient, SandboxServiceOptions

        client = SandboxClient.create(
            options=SandboxServiceOptions(region="iad1"),
        )

        try:
            async with client.create_sandbox() as instance:
                ...
                assert instance.region == "iad1"
        finally:
            await client.aclose()

    run(standalone_client())

    monkeypatch.setenv("VERCEL_REGION", "iad1")

    async def region_placement() -> None:
        from rebuno import sandbox
        from rebuno.sandbox import session
        from rebuno.sandbox import CURRENT_REGION, SandboxServiceOptions

        async with session():
            instance = await sandbox.create_sandbox(region=CURRENT_REGION)
            assert instance.region == "iad1"
            cache, created = await sandbox.get_or_create_drive(name="cache", region=CURRENT_REGION)
            assert created and cache.name == "cache"
            await cache.delete()

        # Opt in for all creation calls in a session or standalone client instead.
        async with session(service_options=[SandboxServiceOptions(region=CURRENT_REGION)]):
            instance = await sandbox.create_sandbox()
            assert instance.region == "iad1"

    run(region_placement())

    async def secure_compute_network() -> None:
        from rebuno import sandbox
        from rebuno.sandbox import session

        async with session():
            instance = await sandbox.create_sandbox(network_id="network_123")
            print(instance.network_id)
            assert instance.network_id == "network_123"  # a private network of this host
            await instance.update(network_id=None)  # Disconnect from Secure Compute
            assert instance.network_id is None
            await instance.delete()

    run(secure_compute_network())
    assert capsys.readouterr().out == "network_123\n"

    async def custom_image() -> None:
        from rebuno import sandbox
        from rebuno.sandbox import SandboxApiError, session

        with pytest.raises(SandboxApiError) as e:  # not imported or pulled on this daemon
            async with session():
                async with sandbox.create_sandbox(image="my-repository:latest") as instance:
                    result = await instance.run_command("my-command", capture_output=True)
                    print(result.stdout)
                    print(instance.image)  # The resolved digest-pinned image reference
        assert (e.value.status_code, e.value.code, e.value.field) == (404, "image_not_found", "image")
        assert "docker.io/library/my-repository:latest" in str(e.value)
        async with session():
            async with sandbox.create_sandbox(image="default") as instance:
                print(instance.image)
        assert capsys.readouterr().out == "host\n"

    run(custom_image())

    # The document's snapshot, fork, Drive and PTY examples run for real in
    # test_sandbox_snapshots.py, test_sandbox_drives.py and test_sandbox_interactive.py.

    async def session_lifecycles() -> None:
        from rebuno import sandbox

        setup = await sandbox.create_sandbox(name="workspace")
        await setup.fs.write_text("script.py", "import os; print('ran in', os.getcwd())\n")
        await setup.run_command("ln", ["-s", "/usr/bin/python3", "/usr/local/bin/python"], check=True)  # no `python`
        await setup.stop()

        box = await sandbox.get_sandbox(name="workspace")
        result = await box.run_command("python", ["script.py"])

        active = await box.session()

        async with box.session() as exact_session:
            await exact_session.run_command("python", ["script.py"])

        assert result.returncode == 0 and active.id == exact_session.id
        assert (await box.refresh()).status == "stopped"

    run(session_lifecycles())
    assert capsys.readouterr().out == "ran in /root\nran in /root\n"

    async def users_and_generic_execution() -> None:
        from rebuno import sandbox

        async with sandbox.create_sandbox() as instance:
            alice = await instance.create_user("alice")
            await instance.create_user("bob")
            bob = instance.as_user("bob")  # Synchronous selection, including on the async API

            await alice.fs.write_text("secret.txt", "private", mode=0o600)
            result = await alice.run_command("whoami", capture_output=True, check=True)
            assert result.stdout == "alice\n"
            assert alice.home_dir == "/home/alice"

            from rebuno.sandbox import SandboxExecution

            async def run_agent(executor: SandboxExecution) -> str:
                await executor.fs.write_text("input.txt", "hello")
                result = await executor.run_command("cat", ["input.txt"], capture_output=True, check=True)
                return result.stdout or ""

            assert await run_agent(instance) == "hello"
            assert await run_agent(await instance.session()) == "hello"
            assert await run_agent(alice) == "hello"
            assert await run_agent(bob) == "hello"
            assert (await instance.fs.stat("/home/bob/input.txt")).uid == bob.info.uid

    run(users_and_generic_execution())


def test_readme_examples_sync(sbx_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from rebuno.sandbox import session
    from rebuno.sandbox import sync as sandbox

    with session():
        with sandbox.create_sandbox() as instance:
            process = instance.run_command("echo", ["hello"], capture_output=True)
            print(process.stdout)
    assert capsys.readouterr().out == "hello\n\n"

    from rebuno.sandbox.sync import SandboxServiceOptions, SyncSandboxClient

    client = SyncSandboxClient.create(options=SandboxServiceOptions(region="iad1"))
    try:
        with client.create_sandbox() as instance:
            ...
            assert instance.region == "iad1"
    finally:
        client.close()

    with sandbox.create_sandbox(name="production-agent") as source:
        source.fs.write_text("script.py", "print('forked')\n")
        with sandbox.fork_sandbox(source_sandbox="production-agent") as forked:
            result = forked.run_command("python3", ["script.py"], capture_output=True)
            assert result.stdout == "forked\n"

    with session():
        setup = sandbox.create_sandbox(name="workspace")
        setup.stop()
        box = sandbox.get_sandbox(name="workspace")
        active = box.session()
        with box.session() as exact_session:
            exact_session.run_command("true")
        assert active.id == exact_session.id and box.refresh().status == "stopped"
        box.delete()

    with sandbox.create_sandbox() as instance:
        alice = instance.create_user("alice")
        alice.fs.write_text("secret.txt", "private", mode=0o600)
        result = alice.run_command("whoami", capture_output=True, check=True)
        assert result.stdout == "alice\n"
        assert alice.home_dir == "/home/alice"


def test_network_policy_subnets(sbx_url: str) -> None:
    """Address ranges beside the domains: sent as the API's wrapped form, read back, and
    a bad range is the daemon's 400 naming the element."""
    from rebuno import sandbox
    from rebuno.sandbox import NetworkPolicy

    p = NetworkPolicy.custom({"github.com": []}, subnets={"allow": ["203.0.113.0/24"], "deny": ["10.0.0.0/8"]})
    assert p.to_api() == {"allow": {"github.com": []},
                          "subnets": {"allow": ["203.0.113.0/24"], "deny": ["10.0.0.0/8"]}}
    assert NetworkPolicy.from_api(p.to_api()) == p
    assert NetworkPolicy.from_api({"subnets": []}).rules == {"subnets": ()}  # a host named "subnets"
    assert "subnets=" in repr(p)
    with pytest.raises(TypeError):
        NetworkPolicy.custom({}, subnets={"deny": "10.0.0.0/8"})
    with pytest.raises(ValueError):
        NetworkPolicy.custom({}, subnets={"precedence": "first"})
    with pytest.raises(ValueError):
        NetworkPolicy(mode="allow-all", subnets={"deny": []})

    async def main() -> None:
        async with sandbox.create_sandbox(network_policy=p) as box:
            got = box.network_policy
            assert got == p, got
            e2b_like = NetworkPolicy.custom({"*": []}, subnets={"deny": ["198.51.100.7"], "precedence": "allow"})
            await box.update(network_policy=e2b_like)
            assert box.network_policy == e2b_like
            with pytest.raises(sandbox.SandboxApiError) as e:
                await box.update(network_policy=NetworkPolicy.custom({}, subnets={"deny": ["10.0.0.0/8", "10.1.2.3/8"]}))
            assert e.value.status_code == 400 and e.value.field == "network_policy.subnets.deny[1]", e.value.field
            with pytest.raises(sandbox.SandboxApiError) as e:
                await box.update(network_policy={"allow": [], "subnets": {"allow": ["2001:db8::/32"]}})
            assert e.value.field == "network_policy.subnets.allow[0]"

    run(main())
