"""The asynchronous sandbox handles (``rebuno.sandbox``).

Objects and what they pin:

* :class:`Sandbox`: a sandbox by id. Its command, file and user calls resume a stopped or
  paused sandbox lazily (sandboxd does it), and the handle adopts the new session.
* :class:`SandboxRuntimeSession`: one session of a sandbox (``await box.session()``). Every
  call carries ``session=<id>``, so it never resumes: a stopped session fails with
  :class:`SandboxSessionEndedError`.
* :class:`SandboxUser`: a Linux account inside a sandbox or a session (``create_user`` /
  ``as_user``); commands, reads, listings, renames and removals run as that account;
  uploads and ``mkdir`` use the files API (root's rights inside) and belong to it.
* :class:`Command`: a started command (``create_command``, ``get_command``) with
  ``stdin``/``stdout``/``stderr`` streams, ``wait()``, ``communicate()`` and signals.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import contextlib
import dataclasses
import io
import json
import os
import posixpath
import re
import subprocess
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from types import TracebackType
from typing import IO, Any, Literal, TextIO

from rebuno._http import iter_sse
from rebuno.sandbox._api import LONG_TIMEOUT, Api, quote
from rebuno.sandbox._interactive import InteractiveSession, pty_body
from rebuno.sandbox._errors import _BY_CODE as _ERROR_CLASSES
from rebuno.sandbox._errors import (
    SandboxApiError,
    SandboxCleanupError,
    SandboxCommandError,
    SandboxFileExistsError,
    SandboxFilesystemError,
    SandboxNotFoundError,
    SandboxPathNotFoundError,
    SandboxResponseError,
    SandboxStateError,
    SandboxStdinClosedError,
    SandboxStreamError,
    SandboxTimeoutError,
    SandboxUserAlreadyExistsError,
)
from rebuno.sandbox._models import (
    OMITTED,
    CommandStatus,
    CompletedCommand,
    DirectoryEntry,
    DriveInfo,
    DriveMount,
    DriveQuery,
    DriveQueryByCreatedAt,
    DurationInput,
    NetworkPolicy,
    SandboxInfo,
    SandboxQuery,
    SandboxResources,
    SandboxServiceOptions,
    SandboxStatus,
    SandboxUsage,
    SandboxUserInfo,
    SnapshotInfo,
    check_str_seq,
    drive_ref,
    duration_ms,
    mounts_api,
    network_policy_api,
    not_implemented,
    ports_api,
    parse_time,
    resolve_region,
    signal_value,
    source_api,
)

RemotePath = Any  # str | os.PathLike[str] (PurePosixPath works)

IO_CHUNK = 8 << 20          # file content per request (the API allows 16 MiB)
OUTPUT_CHUNK = 1 << 20      # command output per request
WAIT_SLICE_MS = 25_000      # one long-poll
WAIT_MAX_MS = 300_000       # the API's cap on /wait
STDIN_CHUNK = 4 << 20       # the API queues at most 8 MiB of stdin
_USERNAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


def _validate_username(username: str) -> str:
    if not isinstance(username, str) or not _USERNAME.fullmatch(username):
        raise ValueError(f"invalid username {username!r}: it must match [a-z_][a-z0-9_-]* "
                         "and have at most 32 characters")
    return username


def _fspath(path: RemotePath, name: str = "path") -> str:
    if isinstance(path, str):
        return path
    if hasattr(path, "__fspath__"):
        p = path.__fspath__()
        if isinstance(p, str):
            return p
    if path is not None and type(path).__name__ in ("PurePosixPath", "PosixPath", "PurePath"):
        return str(path)
    raise TypeError(f"{name} must be a string or a path, not {type(path).__name__}")


def _join(path: RemotePath, cwd: RemotePath | None) -> str:
    p = _fspath(path)
    if cwd is not None and not p.startswith("/"):
        p = posixpath.join(_fspath(cwd, "cwd"), p)
    return p


def _env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    if env is None:
        return None
    out = {}
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError("env must map strings to strings")
        out[k] = v
    return out


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"{old}() is deprecated; use {new}()", DeprecationWarning, stacklevel=3)


# --- where calls go -------------------------------------------------------------------------


class _Scope:
    """A sandbox (by id), optionally pinned to one session, and the handle that adopts the
    sandbox's new state after a call that may have resumed it."""

    __slots__ = ("api", "sandbox_id", "session_id", "owner")

    def __init__(self, api: Api, sandbox_id: str, session_id: str | None = None, owner: Sandbox | None = None):
        self.api = api
        self.sandbox_id = sandbox_id
        self.session_id = session_id
        self.owner = owner

    @property
    def base(self) -> str:
        return f"/sandboxes/{quote(self.sandbox_id)}"

    def pin(self) -> dict[str, str]:
        return {"session": self.session_id} if self.session_id else {}

    async def adopt(self, session_id: str | None = None) -> None:
        if self.owner is not None and self.session_id is None:
            await self.owner._adopt(session_id)


# --- command output -----------------------------------------------------------------------------


class _StreamSource:
    """One output stream of a command, read by byte offset with long-polls (``/output``)."""

    def __init__(self, api: Api, path: str, stream: str, offset: int = 0):
        self._api = api
        self._path = path
        self._stream = stream
        self.offset = offset
        self.eof = False
        self.dropped = 0

    async def read_chunk(self) -> bytes:
        while not self.eof:
            resp = await self._api.request(
                "GET", self._path + "/output",
                query={"stream": self._stream, "offset": self.offset, "limit": OUTPUT_CHUNK,
                       "wait_ms": WAIT_SLICE_MS},
                timeout=WAIT_SLICE_MS / 1000 + 15)
            start = int(resp.headers.get("x-rebuno-offset", self.offset))
            if start > self.offset:
                self.dropped += start - self.offset  # the bounded log had dropped these bytes
            self.offset = int(resp.headers.get("x-rebuno-next-offset", start + len(resp.body)))
            if resp.headers.get("x-rebuno-eof") == "true":
                self.eof = True
            if resp.body:
                return resp.body
        return b""

    async def aclose(self) -> None:
        self.eof = True


class _MergedSource:
    """stdout and stderr of a command in arrival order (the SSE ``/stream``)."""

    def __init__(self, api: Api, path: str):
        self._api = api
        self._path = path
        self._events: AsyncIterator[tuple[str, Any]] | None = None
        self.eof = False
        self.dropped = 0
        self.final: dict[str, Any] | None = None

    async def read_chunk(self) -> bytes:
        if self.eof:
            return b""
        if self._events is None:
            self._events = _command_events(self._api, self._path)
        async for kind, data in self._events:
            if kind in ("stdout", "stderr") and data:
                return data
            if kind == "gap":
                self.dropped += data[1]
            if kind == "exit":
                self.final = data
        self.eof = True
        return b""

    async def aclose(self) -> None:
        self.eof = True
        if self._events is not None:
            await self._events.aclose()  # type: ignore[attr-defined]


async def _command_events(api: Api, path: str) -> AsyncIterator[tuple[str, Any]]:
    """``(kind, data)`` from a command's SSE stream until its exit: ``("stdout", bytes)``,
    ``("stderr", bytes)``, ``("gap", (stream, dropped_bytes))``, ``("exit", command_json)``.
    Reconnects with ``Last-Event-ID`` if the stream breaks before the exit."""
    last_id: str | None = None
    for _attempt in range(4):
        resp = await api.stream("GET", path + "/stream", headers={"Last-Event-ID": last_id} if last_id else None,
                                read_timeout=60.0)
        try:
            async for ev in iter_sse(resp):
                kind = ev.get("event", "message")
                if ev.get("id"):
                    last_id = ev["id"]
                if kind in ("stdout", "stderr"):
                    yield kind, base64.b64decode(json.loads(ev["data"])["data"])
                elif kind == "gap":
                    g = json.loads(ev["data"])
                    yield "gap", (str(g.get("stream")), int(g.get("to", 0)) - int(g.get("from", 0)))
                elif kind == "exit":
                    yield "exit", json.loads(ev["data"])
                    return
        except (asyncio.TimeoutError, OSError):
            pass
        finally:
            resp.close()
    # the stream kept breaking: settle with plain long-polls (the rest of the output is lost)
    while True:
        info = await api.json("GET", path + "/wait", query={"timeout_ms": WAIT_MAX_MS},
                              timeout=WAIT_MAX_MS / 1000 + 15)
        if info.get("status") in ("exited", "failed"):
            yield "exit", info
            return


class TextReader:
    """A command's output as text, read forward once (``Command.stdout`` / ``.stderr``).

    ``readline()`` returns one line with its ``"\\n"`` (``""`` at the end), ``read()`` the
    rest; ``async for line in reader`` iterates lines. Reading waits for the command to
    write. Invalid UTF-8 is replaced. ``dropped`` counts bytes the service's bounded output
    log had already discarded before they were read.
    """

    def __init__(self, source: _StreamSource | _MergedSource, *, encoding: str = "utf-8", errors: str = "replace"):
        self._src = source
        self._dec = codecs.getincrementaldecoder(encoding)(errors)
        self._buf = ""
        self._eof = False

    async def _fill(self) -> None:
        chunk = await self._src.read_chunk()
        if chunk:
            self._buf += self._dec.decode(chunk)
        else:
            self._buf += self._dec.decode(b"", final=True)
            self._eof = True

    @property
    def at_eof(self) -> bool:
        """``True`` once everything has been read."""
        return self._eof and not self._buf

    @property
    def dropped(self) -> int:
        """Bytes the bounded output log dropped before this reader got them."""
        return self._src.dropped

    async def readline(self) -> str:
        """The next line, including its newline; ``""`` at the end of the output."""
        while "\n" not in self._buf and not self._eof:
            await self._fill()
        if "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            return line + "\n"
        line, self._buf = self._buf, ""
        return line

    async def read(self, size: int = -1) -> str:
        """Up to ``size`` characters (everything until the end when ``size < 0``)."""
        if size is None or size < 0:
            while not self._eof:
                await self._fill()
            out, self._buf = self._buf, ""
            return out
        while len(self._buf) < size and not self._eof:
            await self._fill()
        out, self._buf = self._buf[:size], self._buf[size:]
        return out

    async def readlines(self) -> list[str]:
        """Every remaining line."""
        lines = []
        while True:
            line = await self.readline()
            if not line:
                return lines
            lines.append(line)

    def __aiter__(self) -> TextReader:
        return self

    async def __anext__(self) -> str:
        line = await self.readline()
        if not line:
            raise StopAsyncIteration
        return line

    async def aclose(self) -> None:
        """Stop reading (the command is not affected)."""
        self._eof = True
        self._buf = ""
        await self._src.aclose()


class CommandStdin:
    """A command's standard input (``create_command(..., stdin=subprocess.PIPE)``).

    It follows ``anyio.abc.ByteSendStream``: ``await send(bytes)`` returns once the bytes
    are in the command's pipe (back-pressure), ``await aclose()`` (or ``send_eof()``) closes
    it so the command sees EOF. Sending after the command stopped reading raises
    :class:`SandboxStdinClosedError` (a ``BrokenPipeError``).
    """

    def __init__(self, api: Api, path: str, *, is_open: bool = True):
        self._api = api
        self._path = path
        self._closed = not is_open

    @property
    def closed(self) -> bool:
        """``True`` after ``aclose()`` (or when the command's stdin is not open)."""
        return self._closed

    async def send(self, item: bytes | bytearray | memoryview) -> None:
        """Write ``item`` to the command's stdin; returns once it is in the pipe."""
        if self._closed:
            raise SandboxStreamError("the command's stdin is closed")
        if isinstance(item, str):
            raise TypeError("stdin takes bytes; encode text first (or wrap it in a text stream)")
        data = memoryview(bytes(item))
        if not data:
            return
        for off in range(0, len(data), STDIN_CHUNK):
            await self._api.request("POST", self._path + "/stdin", body=bytes(data[off:off + STDIN_CHUNK]),
                                    timeout=LONG_TIMEOUT)

    async def send_eof(self) -> None:
        """Close stdin: the command reads EOF. Closing twice does nothing."""
        await self.aclose()

    async def aclose(self) -> None:
        """Close stdin: the command reads EOF. Closing twice does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._api.request("POST", self._path + "/stdin", query={"close": True}, body=b"",
                                    timeout=LONG_TIMEOUT)
        except (SandboxStdinClosedError, SandboxCommandError):
            pass  # already closed by the command, or the command is gone

    async def __aenter__(self) -> CommandStdin:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


# --- output routing for run_command ------------------------------------------------------


def _is_binary(dest: Any) -> bool:
    if isinstance(dest, (io.RawIOBase, io.BufferedIOBase)):
        return True
    return "b" in str(getattr(dest, "mode", ""))


class _Sink:
    def __init__(self, dest: Any, default: Callable[[], Any] | None):
        self.dest = dest
        self.default = default
        self.buf = bytearray()
        self.dec = codecs.getincrementaldecoder("utf-8")("replace")

    def write(self, data: bytes, final: bool = False) -> None:
        if self.dest == subprocess.DEVNULL:
            return
        if self.dest == subprocess.PIPE:
            self.buf += data
            return
        target = self.dest if self.dest is not None else (self.default() if self.default else None)
        if target is None:
            return
        if _is_binary(target):
            if data:
                target.write(data)
        else:
            text = self.dec.decode(data, final=final)
            if text:
                target.write(text)
        if final and hasattr(target, "flush"):
            with contextlib.suppress(Exception):
                target.flush()

    def text(self) -> str | None:
        return self.buf.decode("utf-8", errors="replace") if self.dest == subprocess.PIPE else None


def _check_dest(dest: Any, name: str, *, allow_merge: bool = False) -> Any:
    if dest is None or dest in (subprocess.PIPE, subprocess.DEVNULL):
        return dest
    if dest == subprocess.STDOUT:
        if allow_merge:
            return dest
        raise ValueError(f"{name} cannot be subprocess.STDOUT")
    if isinstance(dest, int):
        raise ValueError(f"{name} must be None, subprocess.PIPE, subprocess.DEVNULL"
                         f"{', subprocess.STDOUT' if allow_merge else ''} or a writable stream")
    if not hasattr(dest, "write"):
        raise TypeError(f"{name} must be a writable stream")
    return dest


def _reader_dest(dest: Any, name: str, *, allow_merge: bool = False) -> int:
    if dest in (subprocess.PIPE, subprocess.DEVNULL) or (allow_merge and dest == subprocess.STDOUT):
        return dest
    raise ValueError(f"create_command(): {name} must be subprocess.PIPE or subprocess.DEVNULL"
                     f"{' or subprocess.STDOUT' if allow_merge else ''} (the command runs in the sandbox; "
                     "use run_command() to send its output to a local stream)")


# --- commands ----------------------------------------------------------------------------------


class Command:
    """A command started in a sandbox (``create_command()``, ``get_command()``).

    Shaped like :class:`subprocess.Popen`: ``stdin`` (a :class:`CommandStdin` when started
    with ``stdin=subprocess.PIPE``), ``stdout``/``stderr`` (:class:`TextReader`, ``None``
    for ``DEVNULL``; with ``stderr=subprocess.STDOUT`` both arrive on ``stdout``),
    ``await wait()``, ``await communicate()``, ``send_signal()``, ``terminate()``,
    ``kill()``. ``returncode`` is ``None`` until the command is done. The handle can be
    recreated later with ``get_command(id)``: its readers start from the oldest byte the
    service still holds.
    """

    def __init__(self, scope: _Scope, payload: Mapping[str, Any], *, stdin: bool | None = None,
                 stdout: int = subprocess.PIPE, stderr: int = subprocess.PIPE):
        self._scope = scope
        self._api = scope.api
        self._data: dict[str, Any] = dict(payload)
        self._path = f"/sandboxes/{quote(self._data.get('sandbox_id') or scope.sandbox_id)}/commands/{quote(self.id)}"
        is_open = bool(self._data.get("stdin_open")) if stdin is None else stdin
        self.stdin: CommandStdin | None = CommandStdin(self._api, self._path) if is_open else None
        self.stdout: TextReader | None = None
        self.stderr: TextReader | None = None
        if stderr == subprocess.STDOUT:
            if stdout == subprocess.PIPE:
                self.stdout = TextReader(_MergedSource(self._api, self._path))
        else:
            if stdout == subprocess.PIPE:
                self.stdout = TextReader(_StreamSource(self._api, self._path, "stdout"))
            if stderr == subprocess.PIPE:
                self.stderr = TextReader(_StreamSource(self._api, self._path, "stderr"))

    # --- state
    @property
    def id(self) -> str:
        """The command's id (UUIDv7)."""
        return str(self._data["id"])

    @property
    def name(self) -> str:
        """The executable (``cmd``)."""
        return str(self._data.get("cmd") or "")

    @property
    def args(self) -> tuple[str, ...]:
        """The whole argv: ``(cmd, *args)``."""
        return (self.name, *self._data.get("args", ()))

    @property
    def cwd(self) -> str | None:
        """The working directory it runs in."""
        return self._data.get("cwd")

    @property
    def user(self) -> str | None:
        """The account it runs as."""
        return self._data.get("user")

    @property
    def sudo(self) -> bool:
        """``True`` when it runs as root for a user handle."""
        return bool(self._data.get("sudo"))

    @property
    def session_id(self) -> str | None:
        """The session it runs in."""
        return self._data.get("session_id")

    @property
    def sandbox_id(self) -> str:
        """The sandbox it runs in."""
        return str(self._data.get("sandbox_id") or self._scope.sandbox_id)

    @property
    def status(self) -> CommandStatus:
        """``running``, ``exited`` or ``failed`` (as of the last reply)."""
        try:
            return CommandStatus(self._data.get("status"))
        except ValueError:
            return CommandStatus.RUNNING

    @property
    def pid(self) -> int | None:
        """Its process id inside the sandbox."""
        return self._data.get("pid")

    @property
    def returncode(self) -> int | None:
        """The exit status once done (``128 + signal`` if a signal killed it), else ``None``."""
        return self._data.get("exit_code") if self._data.get("status") == "exited" else None

    @property
    def exit_code(self) -> int | None:
        """The same as ``returncode``."""
        return self.returncode

    @property
    def signal(self) -> str | None:
        """The signal that ended it (``"KILL"``, ``"TERM"``, ...), if any."""
        return self._data.get("signal")

    @property
    def timed_out(self) -> bool:
        """``True`` if ``kill_after`` killed it."""
        return bool(self._data.get("timed_out"))

    @property
    def started_at(self) -> datetime | None:
        """When it started."""
        return parse_time(self._data.get("started_at"))

    @property
    def ended_at(self) -> datetime | None:
        """When it ended (``None`` while running)."""
        return parse_time(self._data.get("ended_at"))

    def model_dump(self, *, mode: Literal["python", "json"] | str = "python") -> dict[str, Any]:
        """The command as the API last described it (read-only data, not a handle)."""
        d = dict(self._data)
        if mode != "json":
            for k in ("started_at", "ended_at"):
                d[k] = parse_time(d.get(k))
        return d

    def __repr__(self) -> str:
        return f"<Command {self.id} {' '.join(self.args)!r} {self._data.get('status')}>"

    # --- operations
    async def refresh(self) -> Command:
        """Fetch the command's current state; returns this handle."""
        self._data = await self._api.json("GET", self._path)
        return self

    async def wait(self, timeout: float | None = None) -> int:
        """Wait until the command is done and return ``returncode``.

        ``timeout`` (seconds) raises :class:`SandboxTimeoutError` if it is still running;
        the command keeps running.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            slice_ms = WAIT_MAX_MS
            if deadline is not None:
                slice_ms = max(0, min(WAIT_MAX_MS, int((deadline - loop.time()) * 1000)))
            self._data = await self._api.json("GET", self._path + "/wait", query={"timeout_ms": slice_ms},
                                              timeout=slice_ms / 1000 + 15)
            if self._data.get("status") in ("exited", "failed"):
                rc = self.returncode
                if rc is None:
                    err = self._data.get("error") or {}
                    raise SandboxCommandError(err.get("message") or "the command failed to start",
                                              status_code=400, code=err.get("code") or "exec_failed")
                return rc
            if deadline is not None and loop.time() >= deadline:
                raise SandboxTimeoutError(f"command {self.id} still running after {timeout}s")

    async def communicate(self, input: bytes | str | None = None,
                          timeout: float | None = None) -> tuple[str | None, str | None]:
        """Send ``input`` (if any), close stdin, read the rest of the output and wait.

        Returns ``(stdout, stderr)``; a stream without a reader is ``None`` (so
        ``stderr=subprocess.STDOUT`` gives ``(merged, None)``).
        """
        async def go() -> tuple[str | None, str | None]:
            if input is not None:
                if self.stdin is None:
                    raise SandboxStreamError("communicate(input=...) needs stdin=subprocess.PIPE")
                await self.stdin.send(input.encode() if isinstance(input, str) else input)
            if self.stdin is not None:
                await self.stdin.aclose()
            out, err = await asyncio.gather(
                self.stdout.read() if self.stdout is not None else _none(),
                self.stderr.read() if self.stderr is not None else _none())
            await self.wait()
            return out, err

        if timeout is None:
            return await go()
        try:
            return await asyncio.wait_for(go(), timeout)
        except asyncio.TimeoutError as e:
            raise SandboxTimeoutError(f"command {self.id} still running after {timeout}s") from e

    async def send_signal(self, signal: Any, *, group: bool = True) -> None:
        """Send a signal (``"TERM"``, ``"SIGTERM"``, ``15``, ``signal.SIGTERM`` or a
        :class:`CommandSignal`) to the command's process group (only its process with
        ``group=False``)."""
        self._data = await self._api.json("POST", self._path + "/signal",
                                          json={"signal": signal_value(signal), "group": group})

    async def terminate(self) -> None:
        """Send ``SIGTERM``."""
        await self.send_signal("TERM")

    async def kill(self) -> None:
        """Send ``SIGKILL``."""
        await self.send_signal("KILL")


async def _none() -> None:
    return None


async def _kill_quietly(api: Api, path: str) -> None:
    with contextlib.suppress(Exception):
        await api.request("POST", path + "/signal", json={"signal": "KILL", "group": True}, timeout=5)


# --- commands and files on a scope ----------------------------------------------------------


class _Executor:
    """Commands for a scope as one account (shared by sandboxes, sessions and users)."""

    _scope: _Scope
    _run_as: str | None = None

    async def _before(self) -> None:
        """Hook for user handles (resolve the account on first use)."""

    def _command_body(self, cmd: str, args: Sequence[str] | None, *, cwd: Any, env: Mapping[str, str] | None,
                      sudo: bool, kill_after: DurationInput) -> dict[str, Any]:
        if not isinstance(cmd, str) or not cmd:
            raise TypeError("cmd must be a non-empty string")
        body: dict[str, Any] = {"cmd": cmd, "args": check_str_seq(args)}
        if cwd is not None:
            body["cwd"] = _fspath(cwd, "cwd")
        e = _env(env)
        if e:
            body["env"] = e
        if self._run_as:
            body["user"] = self._run_as
        if sudo:
            body["sudo"] = True
        ms = duration_ms(kill_after, "kill_after")
        if ms is not None:
            if ms <= 0:
                raise ValueError("kill_after must be positive")
            body["timeout_ms"] = ms
        body.update(self._scope.pin())
        return body

    async def run_command(self, cmd: str, args: Sequence[str] | None = None, *, cwd: str | None = None,
                          env: Mapping[str, str] | None = None, sudo: bool = False,
                          kill_after: DurationInput = None, check: bool = False,
                          stdout: TextIO | IO[bytes] | int | None = None,
                          stderr: TextIO | IO[bytes] | int | None = None, capture_output: bool = False,
                          input: str | bytes | None = None) -> CompletedCommand:
        """Run ``cmd`` with ``args`` to completion, like :func:`subprocess.run`.

        Nothing goes through a shell. ``cwd`` defaults to the account's home (relative paths
        resolve against it); ``env`` is added to the sandbox's environment; ``sudo=True`` runs
        as root; ``kill_after`` (seconds or timedelta) kills the command's process group with
        SIGKILL. ``input`` (text or bytes) is the command's stdin, then EOF.

        Output goes where ``stdout``/``stderr`` say: ``None`` (default) to this process's
        ``sys.stdout``/``sys.stderr`` as it arrives, ``subprocess.PIPE`` (or
        ``capture_output=True``) into the result, ``subprocess.DEVNULL`` nowhere, a writable
        stream, and ``stderr=subprocess.STDOUT`` merged into stdout's destination.
        ``check=True`` raises :class:`subprocess.CalledProcessError` for a non-zero status.
        Cancelling the call kills the command's process group. A command that cannot start
        raises (:class:`SandboxCommandNotFoundError`,
        :class:`SandboxPathNotFoundError` for a missing ``cwd``, ...).
        """
        if capture_output:
            if stdout is not None or stderr is not None:
                raise ValueError("stdout and stderr arguments may not be used with capture_output.")
            stdout = stderr = subprocess.PIPE
        out_dest = _check_dest(stdout, "stdout")
        err_dest = _check_dest(stderr, "stderr", allow_merge=True)
        body = self._command_body(cmd, args, cwd=cwd, env=env, sudo=sudo, kill_after=kill_after)
        if input is not None:
            if isinstance(input, str):
                body["input"] = input
            else:
                body["input"] = base64.b64encode(bytes(input)).decode("ascii")
                body["input_encoding"] = "base64"
        await self._before()
        scope = self._scope
        # start it, then follow its output stream to the exit: the output arrives live and
        # the command is known by id, so cancelling this call kills it
        data, out_text, err_text, out_trunc, err_trunc = await self._run_streamed(body, out_dest, err_dest)
        result = _completed(data, out_text, err_text, out_trunc, err_trunc)
        await scope.adopt(data.get("session_id"))
        if check:
            result.check_returncode()
        return result

    async def _run_streamed(self, body: dict[str, Any], out_dest: Any,
                            err_dest: Any) -> tuple[dict[str, Any], str | None, str | None, bool, bool]:
        scope = self._scope
        info = await scope.api.json("POST", scope.base + "/commands", json=body)
        path = f"{scope.base}/commands/{quote(info['id'])}"
        out = _Sink(out_dest, lambda: sys.stdout)
        err = out if err_dest == subprocess.STDOUT else _Sink(err_dest, lambda: sys.stderr)
        dropped = {"stdout": 0, "stderr": 0}
        final: dict[str, Any] | None = None
        events = _command_events(scope.api, path)
        try:
            async for kind, data in events:
                if kind == "stdout":
                    out.write(data)
                elif kind == "stderr":
                    err.write(data)
                elif kind == "gap":
                    dropped[data[0] if data[0] in dropped else "stdout"] += data[1]
                elif kind == "exit":
                    final = data
        except BaseException:
            await asyncio.shield(_kill_quietly(scope.api, path))
            raise
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        out.write(b"", final=True)
        if err is not out:
            err.write(b"", final=True)
        assert final is not None
        return (final, out.text(), None if err is out else err.text(), dropped["stdout"] > 0,
                dropped["stderr"] > 0)

    async def create_command(self, cmd: str, args: Sequence[str] | None = None, *, cwd: str | None = None,
                             env: Mapping[str, str] | None = None, sudo: bool = False,
                             kill_after: DurationInput = None, stdin: int | None = None,
                             stdout: int = subprocess.PIPE, stderr: int = subprocess.PIPE) -> Command:
        """Start ``cmd`` and return a :class:`Command` handle without waiting for it, like
        :class:`subprocess.Popen`.

        ``stdin=subprocess.PIPE`` keeps its stdin open for ``command.stdin.send()``
        (``None``/``DEVNULL``: EOF at once). ``stdout``/``stderr`` are ``subprocess.PIPE``
        (readers on the handle), ``subprocess.DEVNULL`` (no reader; the service still keeps
        the log) or, for ``stderr``, ``subprocess.STDOUT`` (merged into ``stdout`` in arrival
        order). The other arguments are those of :meth:`run_command`.
        """
        if stdin not in (None, subprocess.PIPE, subprocess.DEVNULL):
            raise ValueError("stdin must be None, subprocess.PIPE or subprocess.DEVNULL")
        out_mode = _reader_dest(stdout, "stdout")
        err_mode = _reader_dest(stderr, "stderr", allow_merge=True)
        body = self._command_body(cmd, args, cwd=cwd, env=env, sudo=sudo, kill_after=kill_after)
        body["stdin"] = "pipe" if stdin == subprocess.PIPE else "null"
        await self._before()
        scope = self._scope
        data = await scope.api.json("POST", scope.base + "/commands", json=body)
        await scope.adopt(data.get("session_id"))
        return Command(scope, data, stdin=stdin == subprocess.PIPE, stdout=out_mode, stderr=err_mode)

    async def run_process(self, cmd: str, args: Sequence[str] | None = None, **kwargs: Any) -> CompletedCommand:
        """Deprecated alias of :meth:`run_command` (emits ``DeprecationWarning``)."""
        _deprecated("run_process", "run_command")
        return await self.run_command(cmd, args, **kwargs)

    async def create_process(self, cmd: str, args: Sequence[str] | None = None, **kwargs: Any) -> Command:
        """Deprecated alias of :meth:`create_command` (emits ``DeprecationWarning``)."""
        _deprecated("create_process", "create_command")
        return await self.create_command(cmd, args, **kwargs)

    def open_interactive(self, cmd: str = "/bin/bash", args: Sequence[str] | None = None, *, cols: int = 80,
                         rows: int = 24, env: Mapping[str, str] | None = None, cwd: str | None = None,
                         term: str | None = None, sudo: bool = False) -> InteractiveSession:
        """Start ``cmd`` on a pseudo-terminal, scoped to ``async with``::

            async with box.open_interactive("/bin/bash", cols=100, rows=30) as pty:
                await pty.stream.send(b"exit 3\\n")
                async for chunk in pty.stream: ...
                code = await pty.wait()

        ``pty.stream`` carries the raw terminal bytes both ways (an
        :class:`InteractiveStream`); ``resize()``, ``send_signal()`` and ``wait()`` are on the
        session. ``TERM`` is ``xterm-256color`` unless ``env`` or ``term`` says otherwise;
        ``cwd``, ``env`` and ``sudo`` are those of :meth:`run_command`. The arguments are
        checked here; the terminal is created when the block is entered. If the connection
        ends before the process's exit, reads and ``wait()`` raise
        :class:`SandboxPtyDisconnectedError`; leaving the block earlier hangs the terminal up.
        """
        body = self._command_body(cmd, args, cwd=cwd, env=env, sudo=sudo, kill_after=None)
        return InteractiveSession(self._scope, pty_body(body, cols=cols, rows=rows, term=term), before=self._before)

    async def _exec(self, argv: Sequence[str], *, binary: bool = False) -> dict[str, Any]:
        """Run an internal helper command (as this account) to completion and return its
        result. It runs in ``/`` (a helper never depends on the account's home) with
        ``LC_ALL=C`` (stable error messages); ``binary`` asks for base64 output, which is
        decoded here: ``stdout``/``stderr`` are then bytes. The call may have resumed the
        sandbox: the scope adopts the command's session."""
        body = self._command_body(argv[0], list(argv[1:]), cwd="/", env={"LC_ALL": "C"}, sudo=False,
                                  kill_after=60)
        body["wait"] = True
        if binary:
            body["output_encoding"] = "base64"
        r = await self._scope.api.json("POST", self._scope.base + "/commands", json=body, timeout=90)
        if binary and r.get("output_encoding") == "base64":
            r["stdout"] = base64.b64decode(r.get("stdout") or "")
            r["stderr"] = base64.b64decode(r.get("stderr") or "")
        await self._scope.adopt(r.get("session_id"))
        return r


def _completed(data: Mapping[str, Any], out: str | None, err: str | None, out_trunc: bool,
               err_trunc: bool) -> CompletedCommand:
    rc = data.get("exit_code")
    if rc is None:
        raise SandboxResponseError("the command result has no exit_code", data=dict(data))
    return CompletedCommand(
        id=data["id"], name=data.get("cmd") or "", args=(data.get("cmd") or "", *data.get("args", ())),
        returncode=int(rc), stdout=out, stderr=err, cwd=data.get("cwd"), user=data.get("user"),
        session_id=data.get("session_id"), sandbox_id=data.get("sandbox_id"),
        started_at=parse_time(data.get("started_at")), ended_at=parse_time(data.get("ended_at")),
        signal=data.get("signal"), timed_out=bool(data.get("timed_out")),
        stdout_truncated=out_trunc, stderr_truncated=err_trunc)


class _CommandLookup:
    """``get_command`` / ``query_commands`` (sandboxes and sessions, not users)."""

    _scope: _Scope

    async def get_command(self, command_id: str) -> Command:
        """Re-attach to a command by id (running or recently finished). Its ``stdout`` and
        ``stderr`` readers start from the oldest byte the service still holds, and ``stdin``
        is usable if the command still has it open."""
        data = await self._scope.api.json("GET", f"{self._scope.base}/commands/{quote(command_id)}")
        return Command(self._scope, data)

    async def query_commands(self) -> list[Command]:
        """The commands the service keeps (every running one and the last 64 finished),
        oldest first. A session handle lists only its session's commands."""
        data = await self._scope.api.json("GET", f"{self._scope.base}/commands")
        cmds = data.get("commands") or []
        if self._scope.session_id:
            cmds = [c for c in cmds if c.get("session_id") == self._scope.session_id]
        return [Command(self._scope, c) for c in cmds]

    async def get_process(self, process_id: str) -> Command:
        """Deprecated alias of :meth:`get_command` (emits ``DeprecationWarning``)."""
        _deprecated("get_process", "get_command")
        return await self.get_command(process_id)

    async def query_processes(self) -> list[Command]:
        """Deprecated alias of :meth:`query_commands` (emits ``DeprecationWarning``)."""
        _deprecated("query_processes", "query_commands")
        return await self.query_commands()


# --- files --------------------------------------------------------------------------------


class SandboxFilesystem:
    """File operations in a sandbox, a session or as a user (``handle.fs``).

    Paths are absolute, or relative to the account's home (``cwd=`` gives another base).
    Content moves in chunks of at most 8 MiB, so large files are never one request.
    A missing path raises :class:`SandboxPathNotFoundError` (a ``FileNotFoundError``).
    Through a user handle, everything but uploads and ``mkdir`` runs as the account (reads
    then come in 1 MiB ranges, one command each).
    """

    def __init__(self, owner: _Executor, *, user: str | None = None):
        self._owner = owner
        self._user = user  # a non-root account: permission checks and upload ownership

    @property
    def _scope(self) -> _Scope:
        return self._owner._scope

    def _q(self, path: str, **extra: Any) -> dict[str, Any]:
        q: dict[str, Any] = {"path": path}
        if self._user:
            q["user"] = self._user
        q.update(self._scope.pin())
        q.update({k: v for k, v in extra.items() if v is not None})
        return q

    async def _done(self) -> None:
        await self._scope.adopt(None)

    # --- as the account (user handles)
    #
    # The files API acts as root inside, so a user handle's reads, listings, stats, renames
    # and removals are commands run as the account instead: the kernel checks its
    # permissions on the very open, stat, rename or unlink that does the work, and no
    # check-then-act window lets a symlink swapped in between reach what the account cannot
    # (004: "User file reads use base64 command output"). The helpers are argv only: their
    # scripts are constants and every path is an argument (after "--" where the tool
    # takes options). Uploads and mkdir stay on the files API (trusted orchestration).

    def _abs(self, p: str) -> str:
        """``p`` normalised as sandboxd does: lexically, ``..`` never above ``/``, and
        relative to the account's home (known once ``_before()`` resolved the account)."""
        home = getattr(self._owner, "home_dir", None) or "/"
        full = posixpath.normpath(p if p.startswith("/") else posixpath.join(home, p))
        return "/" + full.lstrip("/")

    async def _user_run(self, argv: Sequence[str], path: str, what: str, *,
                        binary: bool = False) -> dict[str, Any]:
        """Run a helper as the account; a failure raises the error its message names."""
        r = await self._owner._exec(argv, binary=binary)
        if r.get("exit_code") != 0:
            raise _user_error(r, path, what, self._user)
        return r

    async def _user_chunks(self, p: str, offset: int = 0) -> AsyncIterator[bytes]:
        """The file's bytes read as the account, a bounded range per command: one open as
        the account per range (so its permissions decide every read), and a range always
        fits the command's kept output (halved if sandboxd keeps less)."""
        p = self._abs(p)
        size = USER_READ_CHUNK
        while True:
            r = await self._user_run(["bash", "-c", _USER_READ_SH, "rebuno-read", p, str(offset), str(size)],
                                     p, "read", binary=True)
            if r.get("stdout_truncated"):
                if size <= 4096:
                    raise SandboxFilesystemError(f"read {p!r}: the command output limit is too small",
                                                 status_code=500, code="output_truncated")
                size //= 2
                continue
            data = r.get("stdout") or b""
            offset += len(data)
            if data:
                yield data
            if len(data) < size:
                return

    async def _user_entries(self, p: str, *, depth: int, follow: str) -> list[DirectoryEntry]:
        """``find`` records of ``p`` (depth 0) and, with ``depth=1``, its entries, found and
        stat'ed as the account."""
        r = await self._user_run(["find", follow, "--", p, "-maxdepth", str(depth), "-printf", _FIND_FORMAT],
                                 p, "list" if depth else "stat", binary=True)
        if r.get("stdout_truncated"):
            raise SandboxFilesystemError(f"list {p!r}: too many entries for one listing", status_code=413,
                                         code="listing_too_large", field="path")
        fields = r["stdout"].split(b"\0")
        out = []
        for i in range(0, len(fields) - 8, 9):
            d, y, size, mode, uid, gid, mtime, target, name = fields[i:i + 9]
            text = name.decode("utf-8", "replace")
            if d == b"0":
                path = p
            else:
                path = p.rstrip("/") + "/" + text
            out.append(DirectoryEntry(
                name=text, path=path, type=_FIND_TYPES.get(y, "unknown"), size=int(size or 0),
                mode=int(mode or b"0", 8), uid=int(uid) if uid.isdigit() else None,
                gid=int(gid) if gid.isdigit() else None, mtime=_epoch(mtime),
                target=target.decode("utf-8", "replace") if y == b"l" else None))
        if not out:
            raise SandboxResponseError(f"find printed nothing for {p!r}", data=dict(r))
        return out

    async def _user_test(self, path: str, flag: str) -> bool:
        """Whether ``test <flag> path`` holds for the account (``test`` takes no ``--``;
        its two-argument form always reads the second as the operand)."""
        return (await self._owner._exec(["test", flag, self._abs(path)])).get("exit_code") == 0

    # --- reading
    async def read_bytes(self, path: RemotePath, *, cwd: RemotePath | None = None) -> bytes:
        """The whole file as bytes (read in 8 MiB chunks)."""
        parts = [chunk async for chunk in self._iter_content(_join(path, cwd))]
        return b"".join(parts)

    async def read_text(self, path: RemotePath, *, cwd: RemotePath | None = None, encoding: str = "utf-8",
                        errors: str = "strict") -> str:
        """The whole file decoded as text."""
        return (await self.read_bytes(path, cwd=cwd)).decode(encoding, errors)

    async def _iter_content(self, p: str, offset: int = 0, chunk: int | None = None) -> AsyncIterator[bytes]:
        chunk = chunk or IO_CHUNK
        await self._owner._before()
        if self._user:
            async for data in self._user_chunks(p, offset):
                yield data
            return
        first = True
        while True:
            resp = await self._scope.api.request("GET", self._scope.base + "/files/content",
                                                 query=self._q(p, offset=offset, length=chunk))
            if first:
                first = False
                await self._done()
            offset += len(resp.body)
            if resp.body:
                yield resp.body
            if resp.headers.get("x-rebuno-eof") == "true" or not resp.body:
                return

    # --- writing
    async def write_bytes(self, path: RemotePath, data: bytes | bytearray | memoryview, *,
                          cwd: RemotePath | None = None, mode: int | None = None) -> None:
        """Replace the file's content with ``data``. A missing file is created (with ``mode``
        permission bits when given; an existing file gets ``mode`` too, set by sandboxd on
        the file it writes), and so are missing parent directories. Sent in 8 MiB chunks.
        Through a user handle, a path through a symlink another account than root made is
        refused (:class:`SandboxPermissionError`, ``symlink_refused``)."""
        p = _join(path, cwd)
        mv = memoryview(bytes(data))
        _check_mode(mode)
        off = 0
        while True:
            piece = bytes(mv[off:off + IO_CHUNK])
            await self._put(p, piece, off, mode)
            off += len(piece)
            if off >= len(mv):
                break
        await self._done()

    async def write_text(self, path: RemotePath, text: str, *, cwd: RemotePath | None = None,
                         encoding: str = "utf-8", errors: str = "strict", mode: int | None = None) -> None:
        """Replace the file's content with ``text`` encoded (see :meth:`write_bytes`)."""
        await self.write_bytes(path, text.encode(encoding, errors), cwd=cwd, mode=mode)

    async def _put(self, p: str, piece: bytes, offset: int, mode: int | None) -> None:
        await self._owner._before()
        q = self._q(p, offset=offset, mode=f"{mode:04o}" if mode is not None else None)
        if offset == 0:
            q["truncate"] = True
        timeout = max(self._scope.api.timeout, 120)
        try:
            await self._scope.api.request("PUT", self._scope.base + "/files/content", query=q, body=piece,
                                          timeout=timeout)
        except SandboxPathNotFoundError:
            # uploads create missing parent directories (as the upstream SDK's archive uploads do)
            parent = posixpath.dirname(p.rstrip("/"))
            if offset != 0 or not parent or parent in (".", "/"):
                raise
            await self.mkdir(parent, recursive=True)
            await self._scope.api.request("PUT", self._scope.base + "/files/content", query=q, body=piece,
                                          timeout=timeout)

    async def mkdir(self, path: RemotePath, *, cwd: RemotePath | None = None, recursive: bool = True,
                    mode: int | None = None) -> None:
        """Create a directory (with its parents when ``recursive``, the default; an existing
        directory is then fine). Without ``recursive`` an existing path raises
        :class:`SandboxFileExistsError` and a missing parent :class:`SandboxPathNotFoundError`.

        Through a user handle the files API creates them (trusted orchestration, as for
        uploads) and every directory it creates belongs to the account and the sandbox
        default group (root's group, gid 0), mode ``0770`` unless ``mode`` is given."""
        _check_mode(mode)
        await self._owner._before()
        body: dict[str, Any] = {"path": _join(path, cwd), "parents": bool(recursive)}
        if mode is not None:
            body["mode"] = f"{mode:04o}"
        if self._user:
            body["user"] = self._user
        body.update(self._scope.pin())
        try:
            await self._scope.api.request("POST", self._scope.base + "/files/mkdir", json=body)
        except SandboxFileExistsError:
            if not recursive or not await self.is_dir(body["path"]):
                raise
        await self._done()

    # --- metadata
    async def stat(self, path: RemotePath, *, cwd: RemotePath | None = None,
                   follow_symlinks: bool = True) -> DirectoryEntry:
        """The entry at ``path`` (following symlinks inside the sandbox unless
        ``follow_symlinks=False``; a dangling one is then not found). Through a user handle
        it is looked up as the account, so a path it cannot reach raises
        :class:`SandboxPermissionError`."""
        p = _join(path, cwd)
        await self._owner._before()
        if self._user:
            entry = (await self._user_entries(self._abs(p), depth=0, follow="-L" if follow_symlinks else "-P"))[0]
            if follow_symlinks and entry.type == "symlink":  # find -L keeps a dangling link
                raise SandboxPathNotFoundError(f"stat {entry.path!r}: the symlink's target does not exist",
                                               status_code=404, code="path_not_found", field="path")
            return entry
        for _ in range(40):
            d = await self._scope.api.json("GET", self._scope.base + "/files/stat", query=self._q(p))
            entry = DirectoryEntry.from_api(d)
            if not follow_symlinks or entry.type != "symlink" or not entry.target:
                await self._done()
                return entry
            parent = posixpath.dirname(entry.path)
            p = entry.target if entry.target.startswith("/") else posixpath.join(parent, entry.target)
        raise SandboxFilesystemError(f"{path}: too many levels of symbolic links", status_code=400,
                                     code="symlink_loop", field="path")

    async def _probe(self, path: RemotePath, cwd: RemotePath | None, flag: str, kind: str | None) -> bool:
        p = _join(path, cwd)
        await self._owner._before()
        if self._user:
            return await self._user_test(p, flag)
        try:
            entry = await self.stat(p)
        except SandboxPathNotFoundError:
            return False
        return kind is None or entry.type == kind

    async def exists(self, path: RemotePath, *, cwd: RemotePath | None = None) -> bool:
        """Whether ``path`` exists (a dangling symlink does not; as a user: whether the
        account can see it)."""
        return await self._probe(path, cwd, "-e", None)

    async def is_file(self, path: RemotePath, *, cwd: RemotePath | None = None) -> bool:
        """Whether ``path`` is a regular file (following symlinks)."""
        return await self._probe(path, cwd, "-f", "file")

    async def is_dir(self, path: RemotePath, *, cwd: RemotePath | None = None) -> bool:
        """Whether ``path`` is a directory (following symlinks)."""
        return await self._probe(path, cwd, "-d", "directory")

    async def listdir(self, path: RemotePath = ".", *, cwd: RemotePath | None = None) -> list[DirectoryEntry]:
        """The entries of a directory (not ``.`` and ``..``), sorted by name. Through a user
        handle the directory is read as the account (:class:`SandboxPermissionError` if it
        may not)."""
        p = _join(path, cwd)
        await self._owner._before()
        if self._user:
            found = await self._user_entries(self._abs(p), depth=1, follow="-H")
            if found[0].type != "directory":
                raise SandboxPathNotFoundError(f"list {found[0].path!r}: not a directory", status_code=404,
                                               code="path_not_found", field="path")
            return sorted(found[1:], key=lambda e: e.name)
        d = await self._scope.api.json("GET", self._scope.base + "/files/list", query=self._q(p))
        await self._done()
        parent = d.get("path") or p
        return sorted((DirectoryEntry.from_api(e, parent) for e in d.get("entries") or ()), key=lambda e: e.name)

    # --- changing the tree
    async def remove(self, path: RemotePath, *, cwd: RemotePath | None = None, recursive: bool = False,
                     missing_ok: bool = False) -> None:
        """Remove a file, a symlink (never what it points to) or an empty directory; a whole
        tree with ``recursive=True`` (never crossing into another mount). A missing path
        raises unless ``missing_ok``. Through a user handle ``rm`` runs as the account."""
        p = _join(path, cwd)
        await self._owner._before()
        try:
            if self._user:
                a = self._abs(p)
                argv = ["rm", "-r", "--one-file-system", "--", a] if recursive else ["rm", "-d", "--", a]
                await self._user_run(argv, a, "remove")
            else:
                await self._scope.api.request("DELETE", self._scope.base + "/files",
                                              query=self._q(p, recursive=bool(recursive)))
        except SandboxPathNotFoundError:
            if not missing_ok:
                raise
        await self._done()

    async def rename(self, source: RemotePath, destination: RemotePath, *, cwd: RemotePath | None = None,
                     overwrite: bool = True) -> None:
        """Rename or move an entry inside the sandbox. An existing destination is replaced,
        like ``os.rename``, unless ``overwrite=False`` (then :class:`SandboxFileExistsError`).
        Through a user handle ``mv`` runs as the account."""
        src, dst = _join(source, cwd), _join(destination, cwd)
        await self._owner._before()
        if self._user:
            a, b = self._abs(src), self._abs(dst)
            if overwrite:
                await self._user_run(["mv", "-T", "--", a, b], a, "rename")
            else:
                # mv -n skips an existing destination (renameat2 RENAME_NOREPLACE, so no
                # window) and succeeds silently; -v says whether it moved anything
                r = await self._user_run(["mv", "-T", "-n", "-v", "--", a, b], a, "rename")
                if not (r.get("stdout") or "").strip():
                    raise SandboxFileExistsError(f"rename {a!r}: {b!r} exists", status_code=409,
                                                 code="already_exists", field="to")
        else:
            body = {"from": src, "to": dst, "overwrite": bool(overwrite), **self._scope.pin()}
            await self._scope.api.request("POST", self._scope.base + "/files/rename", json=body)
        await self._done()

    # --- handles
    def open(self, path: RemotePath, mode: str = "r", *, cwd: RemotePath | None = None,
             encoding: str | None = None, errors: str | None = None, newline: str | None = None,
             size: int | None = None, permissions: int | None = None) -> Any:
        """A lazy, sequential file handle: ``"r"``/``"rb"`` read in chunks, ``"w"``/``"wb"``
        write in chunks (the file is replaced; ``permissions`` sets the mode). Use it as an
        async context manager, or call ``aclose()`` (a writer's last chunk goes out then)."""
        p = _join(path, cwd)
        _check_mode(permissions)
        if mode == "rb":
            return SandboxBinaryReader(self, p)
        if mode == "r":
            return SandboxTextReader(self, p, encoding or "utf-8", errors or "strict", newline)
        if mode == "wb":
            return SandboxBinaryWriter(self, p, permissions, size)
        if mode == "w":
            return SandboxTextWriter(self, p, permissions, encoding or "utf-8", errors or "strict", newline)
        raise ValueError(f"mode must be 'r', 'rb', 'w' or 'wb', not {mode!r}")

    def batch(self, *, cwd: RemotePath | None = None) -> SandboxFilesystemBatch:
        """Stage several writes and upload them when the ``async with`` block ends without
        an exception (one after another; a failure can leave earlier files written)."""
        return SandboxFilesystemBatch(self, cwd)


def _check_mode(mode: int | None) -> None:
    if mode is None:
        return
    if isinstance(mode, bool) or not isinstance(mode, int):
        raise TypeError("mode must be an int such as 0o644")
    if not 0 <= mode <= 0o7777:
        raise ValueError("mode must be between 0 and 0o7777")


# How a user handle reads: one range per command, as the account. The file is opened once
# (as the account), must be regular (a FIFO or device is refused, as the files API refuses
# them), and dd copies the range from that descriptor. $1 path, $2 offset, $3 length.
_USER_READ_SH = """\
[ -p "$1" ] && { echo "rebuno: not a regular file" >&2; exit 22; }
exec 3<"$1" || exit 1
[ -d /dev/fd/3 ] && { echo "rebuno: Is a directory" >&2; exit 21; }
[ -f /dev/fd/3 ] || { echo "rebuno: not a regular file" >&2; exit 22; }
exec dd bs=1048576 skip="$2" count="$3" iflag=skip_bytes,count_bytes status=none <&3 3<&-
"""
USER_READ_CHUNK = 1 << 20   # bytes per read command (sandboxd keeps 1 MiB of output by default)

# One entry per find record: depth, type, size, mode, uid, gid, mtime, symlink target, name,
# each ended by a NUL (names cannot contain one).
_FIND_FORMAT = "%d\\0%y\\0%s\\0%m\\0%U\\0%G\\0%T@\\0%l\\0%f\\0"
_FIND_TYPES = {b"f": "file", b"d": "directory", b"l": "symlink", b"p": "fifo", b"s": "socket",
               b"c": "char_device", b"b": "block_device"}

# A helper's error message ends with strerror() (LC_ALL=C): the API's code for it.
_ERRNO_CODES = (
    ("No such file or directory", 404, "path_not_found"),
    ("Not a directory", 404, "path_not_found"),
    ("Permission denied", 403, "permission_denied"),
    ("Operation not permitted", 403, "permission_denied"),
    ("Read-only file system", 403, "read_only"),
    ("Is a directory", 400, "is_a_directory"),
    ("not a regular file", 400, "not_a_file"),
    ("File exists", 409, "already_exists"),
    ("Directory not empty", 409, "directory_not_empty"),
    ("Too many levels of symbolic links", 400, "symlink_loop"),
    ("Invalid cross-device link", 400, "cross_device"),
    ("Device or resource busy", 409, "busy"),
    ("No space left on device", 507, "no_space"),
    ("Disk quota exceeded", 507, "no_space"),
    ("File name too long", 400, "validation_error"),
)


def _epoch(value: bytes) -> datetime | None:
    """find's ``%T@`` (seconds.fraction) as an aware datetime, to the millisecond like the API."""
    sec, _, frac = value.decode("ascii", "replace").partition(".")
    try:
        ms = int((frac + "000")[:3]) if frac else 0
        return datetime.fromtimestamp(int(sec), timezone.utc) + timedelta(milliseconds=ms)
    except (ValueError, OverflowError, OSError):
        return None


def _user_error(r: Mapping[str, Any], path: str, what: str, user: str | None) -> SandboxApiError:
    """The error for a failed helper command run as an account, from its message."""
    err = r.get("stderr") or ""
    if isinstance(err, bytes):
        err = err.decode("utf-8", "replace")
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    if r.get("timed_out"):
        return SandboxFilesystemError(f"{what} {path!r} as {user}: timed out", status_code=504, code="timed_out",
                                      field="path")
    for line in lines:
        for text, status, code in _ERRNO_CODES:
            if line.endswith(text):
                cls = _ERROR_CLASSES.get(code, SandboxFilesystemError)
                return cls(f"{what} {path!r} as {user}: {text.lower()}", status_code=status, code=code,
                           field="path")
        if "cannot overwrite directory" in line:
            return _ERROR_CLASSES["is_a_directory"](f"{what} {path!r} as {user}: {line}", status_code=400,
                                                    code="is_a_directory", field="path")
    msg = lines[-1] if lines else f"exit status {r.get('exit_code')}"
    return SandboxFilesystemError(f"{what} {path!r} as {user}: {msg}", status_code=400, code="invalid_operation",
                                  field="path")


class SandboxBinaryReader:
    """``fs.open(path, "rb")``: ``await read(n)``; ``async for chunk in reader`` yields the
    file in chunks as they are fetched."""

    def __init__(self, fs: SandboxFilesystem, path: str):
        self._fs = fs
        self.path = path
        self._it: AsyncIterator[bytes] | None = None
        self._buf = b""
        self._eof = False

    async def _more(self) -> bool:
        if self._eof:
            return False
        if self._it is None:
            self._it = self._fs._iter_content(self.path)
        try:
            self._buf += await self._it.__anext__()
            return True
        except StopAsyncIteration:
            self._eof = True
            return False

    async def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (the rest when ``size < 0``); ``b""`` at the end."""
        if size is None or size < 0:
            while await self._more():
                pass
            out, self._buf = self._buf, b""
            return out
        while len(self._buf) < size and await self._more():
            pass
        out, self._buf = self._buf[:size], self._buf[size:]
        return out

    def __aiter__(self) -> SandboxBinaryReader:
        return self

    async def __anext__(self) -> bytes:
        if not self._buf and not await self._more():
            raise StopAsyncIteration
        out, self._buf = self._buf, b""
        return out

    async def aclose(self) -> None:
        """Stop reading."""
        self._eof = True
        if self._it is not None:
            await self._it.aclose()  # type: ignore[attr-defined]

    async def __aenter__(self) -> SandboxBinaryReader:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class SandboxTextReader:
    """``fs.open(path, "r")``: ``read()``, ``readline()``, ``async for line in reader``."""

    def __init__(self, fs: SandboxFilesystem, path: str, encoding: str, errors: str, newline: str | None):
        self._raw = SandboxBinaryReader(fs, path)
        self.path = path
        self._dec = codecs.getincrementaldecoder(encoding)(errors)
        self._translate = newline is None
        self._buf = ""
        self._eof = False

    async def _fill(self) -> None:
        chunk = await self._raw.read(IO_CHUNK)
        text = self._dec.decode(chunk, final=not chunk)
        if self._translate:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        self._buf += text
        if not chunk:
            self._eof = True

    async def read(self, size: int = -1) -> str:
        """Up to ``size`` characters (the rest when ``size < 0``)."""
        while (size is None or size < 0 or len(self._buf) < size) and not self._eof:
            await self._fill()
        if size is None or size < 0:
            out, self._buf = self._buf, ""
        else:
            out, self._buf = self._buf[:size], self._buf[size:]
        return out

    async def readline(self) -> str:
        """The next line with its newline; ``""`` at the end."""
        while "\n" not in self._buf and not self._eof:
            await self._fill()
        if "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            return line + "\n"
        out, self._buf = self._buf, ""
        return out

    def __aiter__(self) -> SandboxTextReader:
        return self

    async def __anext__(self) -> str:
        line = await self.readline()
        if not line:
            raise StopAsyncIteration
        return line

    async def aclose(self) -> None:
        """Stop reading."""
        await self._raw.aclose()

    async def __aenter__(self) -> SandboxTextReader:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class SandboxBinaryWriter:
    """``fs.open(path, "wb")``: ``await write(data)`` buffers and sends 8 MiB chunks;
    ``aclose()`` sends the rest. The file is replaced from the first chunk on. ``size``, if
    given, is checked against the bytes written."""

    def __init__(self, fs: SandboxFilesystem, path: str, permissions: int | None, size: int | None = None):
        self._fs = fs
        self.path = path
        self._mode = permissions
        self._size = size
        self._buf = bytearray()
        self._offset = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        """``True`` after ``aclose()``."""
        return self._closed

    async def write(self, data: bytes | bytearray | memoryview) -> int:
        """Queue ``data``; full chunks are sent at once. Returns ``len(data)``."""
        if self._closed:
            raise ValueError("write to a closed file")
        self._buf += data
        while len(self._buf) >= IO_CHUNK:
            await self._flush_chunk(bytes(self._buf[:IO_CHUNK]))
            del self._buf[:IO_CHUNK]
        return len(data)

    async def _flush_chunk(self, piece: bytes) -> None:
        await self._fs._put(self.path, piece, self._offset, self._mode)
        self._offset += len(piece)

    async def aclose(self) -> None:
        """Send what is buffered (creating an empty file if nothing was written)."""
        if self._closed:
            return
        self._closed = True
        if self._buf or self._offset == 0:
            await self._flush_chunk(bytes(self._buf))
            self._buf.clear()
        await self._fs._done()
        if self._size is not None and self._size != self._offset:
            raise SandboxFilesystemError(f"{self.path}: {self._offset} bytes written, {self._size} announced",
                                         status_code=400, code="size_mismatch")

    async def __aenter__(self) -> SandboxBinaryWriter:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: Any) -> None:
        if exc_type is None:
            await self.aclose()
        else:
            self._closed = True


class SandboxTextWriter:
    """``fs.open(path, "w")``: ``await write(text)``; see :class:`SandboxBinaryWriter`."""

    def __init__(self, fs: SandboxFilesystem, path: str, permissions: int | None, encoding: str, errors: str,
                 newline: str | None):
        self._raw = SandboxBinaryWriter(fs, path, permissions)
        self.path = path
        self._enc = codecs.getincrementalencoder(encoding)(errors)
        self._newline = newline

    @property
    def closed(self) -> bool:
        """``True`` after ``aclose()``."""
        return self._raw.closed

    async def write(self, text: str) -> int:
        """Queue ``text``; returns ``len(text)``."""
        t = text if self._newline in (None, "", "\n") else text.replace("\n", self._newline)
        await self._raw.write(self._enc.encode(t))
        return len(text)

    async def aclose(self) -> None:
        """Send the rest."""
        if not self._raw.closed:
            await self._raw.write(self._enc.encode("", final=True))
        await self._raw.aclose()

    async def __aenter__(self) -> SandboxTextWriter:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: Any) -> None:
        if exc_type is None:
            await self.aclose()
        else:
            await self._raw.__aexit__(exc_type)


class SandboxFilesystemBatch:
    """Writes staged with ``write_bytes``/``write_text`` and uploaded when the ``async with``
    block ends without an exception."""

    def __init__(self, fs: SandboxFilesystem, cwd: RemotePath | None):
        self._fs = fs
        self._cwd = cwd
        self._files: list[tuple[str, bytes, int | None]] = []

    def write_bytes(self, path: RemotePath, data: bytes, *, mode: int | None = None) -> None:
        """Stage ``data`` for ``path``."""
        _check_mode(mode)
        self._files.append((_join(path, self._cwd), bytes(data), mode))

    def write_text(self, path: RemotePath, text: str, *, encoding: str = "utf-8", errors: str = "strict",
                   mode: int | None = None) -> None:
        """Stage ``text`` encoded for ``path``."""
        self.write_bytes(path, text.encode(encoding, errors), mode=mode)

    async def __aenter__(self) -> SandboxFilesystemBatch:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: Any) -> None:
        files, self._files = self._files, []
        if exc_type is None:
            for path, data, mode in files:
                await self._fs.write_bytes(path, data, mode=mode)


# --- users ---------------------------------------------------------------------------------


class SandboxUser(_Executor):
    """A Linux account in a sandbox (or pinned to a session): ``create_user()`` or
    ``as_user()``.

    ``run_command``/``create_command`` run as the account (its uid, primary and
    supplementary groups; ``HOME``, ``USER``, ``LOGNAME``; cwd its home); ``sudo=True`` runs
    one command as root with root's environment but the same default cwd. ``fs`` reads,
    lists, stats, renames and removes as the account: those are commands run as it, so its
    permissions apply to the operation itself. Uploads and ``mkdir`` are trusted
    orchestration through the files API, with root's rights inside (they can write where the
    account cannot: not a permission boundary); files then belong to the account and its
    group, directories to the account and group root (gid 0), mode 0770. ``home_dir`` is
    ``None`` until the account was looked up (on first use of an ``as_user()`` handle),
    except for root.
    """

    def __init__(self, scope: _Scope, username: str, info: SandboxUserInfo | None = None):
        self._scope = scope
        self._username = _validate_username(username)
        self._info = info
        self._run_as = username
        self.fs = SandboxFilesystem(self, user=None if username == "root" else username)

    @property
    def username(self) -> str:
        """The account name."""
        return self._username

    @property
    def home_dir(self) -> str | None:
        """The account's home (``None`` until looked up; ``/root`` for root)."""
        if self._info is not None:
            return self._info.home_dir
        return "/root" if self._username == "root" else None

    @property
    def info(self) -> SandboxUserInfo | None:
        """uid, gid, groups, home and shell, once looked up."""
        return self._info

    async def resolve(self) -> SandboxUserInfo:
        """Look the account up now (``SandboxUserNotFoundError`` if it does not exist)."""
        d = await self._scope.api.json("GET", f"{self._scope.base}/users/{quote(self._username)}",
                                       query=self._scope.pin())
        self._info = SandboxUserInfo.from_api(d)
        await self._scope.adopt(None)
        return self._info

    async def _before(self) -> None:
        if self._info is None:
            await self.resolve()

    def __repr__(self) -> str:
        return f"<SandboxUser {self._username} in {self._scope.sandbox_id}>"


class _UserFactory:
    _scope: _Scope

    async def create_user(self, username: str) -> SandboxUser:
        """Create a Linux account with a private home (``/home/<username>``, mode 0770, a
        group of the same name, ``/bin/bash``) and return its handle.

        An invalid name raises ``ValueError`` before any request; an existing account raises
        :class:`SandboxUserAlreadyExistsError` (pass its ``username`` to ``as_user()``); an
        existing home path is refused too.
        """
        _validate_username(username)
        body = {"name": username, **self._scope.pin()}
        try:
            d = await self._scope.api.json("POST", f"{self._scope.base}/users", json=body)
        except SandboxUserAlreadyExistsError as e:
            e.username = username
            raise
        await self._scope.adopt(None)
        return SandboxUser(self._scope, username, SandboxUserInfo.from_api(d))

    def as_user(self, username: str) -> SandboxUser:
        """A handle for an existing account, without any request (the account is looked up
        on first use and never created). ``as_user("root")`` is a persistent root identity."""
        return SandboxUser(self._scope, username)


# --- sessions ---------------------------------------------------------------------------------


class SandboxRuntimeSession(_Executor, _CommandLookup, _UserFactory):
    """One session of a sandbox (``await box.session()``): every call is pinned to it and
    never resumes the sandbox. Once the session is over (stop, timeout, daemon restart),
    calls raise :class:`SandboxSessionEndedError`; while it is paused,
    :class:`SandboxSessionPausedError`."""

    def __init__(self, sandbox: Sandbox, session_id: str, started_at: datetime | None = None):
        self._sandbox = sandbox
        self._scope = _Scope(sandbox._api, sandbox.id, session_id)
        self._started_at = started_at
        self.fs = SandboxFilesystem(self)

    @property
    def id(self) -> str:
        """The session id."""
        return str(self._scope.session_id)

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox handle this session was acquired from."""
        return self._sandbox

    @property
    def sandbox_id(self) -> str:
        """The sandbox's id."""
        return self._sandbox.id

    @property
    def sandbox_name(self) -> str:
        """The sandbox's name."""
        return self._sandbox.name

    @property
    def started_at(self) -> datetime | None:
        """When the session started."""
        return self._started_at

    async def is_active(self) -> bool:
        """Whether this session is still the sandbox's current one (running or paused)."""
        info = await self._sandbox.refresh()
        return info.current_session_id == self.id

    async def stop(self) -> SandboxRuntimeSession:
        """Stop the sandbox if this session is still its current one; otherwise do nothing
        (a later session is never stopped by an older handle)."""
        await self._sandbox.refresh()
        if self._sandbox.current_session_id == self.id:
            await self._sandbox.stop()
        return self

    async def extend_timeout(self, duration: DurationInput) -> SandboxRuntimeSession:
        """Add ``duration`` to the session's expiry (it must be current and running)."""
        await self._sandbox.refresh()
        if self._sandbox.current_session_id != self.id:
            raise SandboxStateError(f"session {self.id} has ended", status_code=409, code="session_ended")
        await self._sandbox.extend_timeout(duration)
        return self

    def __repr__(self) -> str:
        return f"<SandboxRuntimeSession {self.id} of {self._sandbox.name}>"


class _SessionAcquisition:
    """``box.session()``: ``await`` it for the current session (resuming the sandbox if
    needed, left running), or ``async with`` it to stop exactly that session at the end."""

    def __init__(self, sandbox: Sandbox):
        self._sandbox = sandbox
        self._session: SandboxRuntimeSession | None = None

    async def _acquire(self) -> SandboxRuntimeSession:
        box = self._sandbox
        if box.status != SandboxStatus.RUNNING or not box.current_session_id:
            await box.resume()
        else:
            await box.refresh()
            if box.status != SandboxStatus.RUNNING:
                await box.resume()
        info = box.info
        if info.session is None:
            raise SandboxResponseError("the sandbox has no session after resume", data=box.model_dump(mode="json"))
        return SandboxRuntimeSession(box, info.session.id, info.session.started_at)

    def __await__(self) -> Generator[Any, None, SandboxRuntimeSession]:
        return self._acquire().__await__()

    async def __aenter__(self) -> SandboxRuntimeSession:
        self._session = await self._acquire()
        return self._session

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._session is None:
            return
        try:
            await self._session.stop()
        except Exception as e:
            if exc is not None:
                exc.add_note(f"stopping session {self._session.id} also failed: {e}")
                return
            raise SandboxCleanupError(f"could not stop session {self._session.id}", cause=e,
                                      resource_id=self._session.id) from e


# --- sandboxes --------------------------------------------------------------------------------


class Sandbox(_Executor, _CommandLookup, _UserFactory):
    """A sandbox handle (``create_sandbox()``, ``get_sandbox()``).

    Command, file and user calls resume a stopped or paused sandbox lazily and the handle
    adopts the new session. ``stop()`` keeps the files, ``pause()`` freezes processes with
    memory kept, ``delete()`` removes everything. Properties reflect the last reply; call
    ``refresh()`` to re-read. ``session()`` gives a handle pinned to one session.
    """

    def __init__(self, api: Api, payload: Mapping[str, Any], *, region: str | None = None):
        self._api = api
        self._region = region  # stands in when sandboxd's reply has no region (older daemons)
        self._region_override: str | None = None  # update(region=): this handle only
        self._info = SandboxInfo.from_api(payload, region=region)
        self._scope = _Scope(api, self._info.id, None, self)
        self.fs = SandboxFilesystem(self)

    # --- state
    @property
    def info(self) -> SandboxInfo:
        """The sandbox's state from the last reply (read-only)."""
        return self._info

    @property
    def id(self) -> str:
        """The sandbox id (UUIDv7)."""
        return self._info.id

    @property
    def name(self) -> str:
        """The sandbox name (unique on this host)."""
        return self._info.name

    @property
    def status(self) -> SandboxStatus:
        """``running``, ``paused`` or ``stopped``."""
        return self._info.status

    @property
    def metadata(self) -> Mapping[str, str]:
        """The sandbox's metadata (read-only; change it with ``update(metadata=...)``)."""
        return self._info.metadata

    @property
    def tags(self) -> Mapping[str, str]:
        """The same as ``metadata`` (the upstream SDK's name)."""
        return self._info.metadata

    @property
    def env_keys(self) -> tuple[str, ...]:
        """Names of the sandbox's environment variables (values are never returned)."""
        return self._info.env_keys

    @property
    def resources(self) -> SandboxResources:
        """vCPUs, memory (MiB) and pids limit."""
        return self._info.resources

    @property
    def timeout(self) -> timedelta | None:
        """How long a session may run (``None``: no limit)."""
        ms = self._info.timeout_ms
        return timedelta(milliseconds=ms) if ms else None

    @property
    def execution_time_limit(self) -> timedelta | None:
        """The same as ``timeout``."""
        return self.timeout

    @property
    def on_timeout(self) -> str:
        """``stop`` or ``pause``: what the timeout does."""
        return self._info.on_timeout

    @property
    def image(self) -> str | None:
        """The resolved image: the digest-pinned reference (``name@sha256:...``,
        ``sha256:...``) or ``host``."""
        return self._info.image

    @property
    def created_at(self) -> datetime | None:
        """When the sandbox was created."""
        return self._info.created_at

    @property
    def updated_at(self) -> datetime | None:
        """When it last changed."""
        return self._info.updated_at

    @property
    def expires_at(self) -> datetime | None:
        """When the running session times out (``None`` without a timeout or session)."""
        return self._info.expires_at

    @property
    def stopped_at(self) -> datetime | None:
        """When it stopped (``None`` while it has a session)."""
        return self._info.stopped_at

    @property
    def stop_reason(self) -> str | None:
        """``stopped``, ``timeout``, ``init_exited``, ``daemon_shutdown``, ``daemon_restart``."""
        return self._info.stop_reason

    @property
    def current_session_id(self) -> str | None:
        """The current session's id (``None`` when stopped)."""
        return self._info.session.id if self._info.session else None

    @property
    def usage(self) -> SandboxUsage | None:
        """Memory, pids and OOM kills of the session (from single-sandbox replies)."""
        return self._info.usage

    @property
    def region(self) -> str | None:
        """The region sandboxd recorded at creation (``"local"`` when none was asked for; a
        rebuno host is one region), or the one given to ``update(region=)`` on this handle."""
        return self._info.region

    @property
    def network_id(self) -> str | None:
        """The private network it is attached to (sandboxes on the same one reach each
        other), or ``None``."""
        return self._info.network_id

    @property
    def network_policy(self) -> NetworkPolicy | None:
        """Its egress policy as the server holds it (header values read ``<redacted>``)."""
        return self._info.network_policy

    @property
    def ports(self) -> tuple[int, ...]:
        """The sandbox ports published on host loopback (see :meth:`domain`)."""
        return self._info.ports

    @property
    def mounts(self) -> Mapping[str, DriveMount]:
        """The Drives mounted at the next session: ``{"/path": DriveMount(drive, mode,
        drive_id)}`` (read-only; change it with ``update(mounts=...)``)."""
        return self._info.mounts

    @property
    def source(self) -> Mapping[str, Any] | None:
        """Where the sandbox's files came from: ``{"type": "snapshot", "snapshot_id", ...}``,
        ``{"type": "fork", "sandbox_id", "sandbox_name"}``, ``{"type": "git", ...}``,
        ``{"type": "tarball", ...}``, or ``None``."""
        return self._info.source

    @property
    def snapshot_expiration(self) -> timedelta | None:
        """The default expiration of this sandbox's snapshots (``None``: the daemon's
        default; ``timedelta(0)``: never expire)."""
        ms = self._info.snapshot_expiration_ms
        return None if ms is None else timedelta(milliseconds=ms)

    @property
    def persistent(self) -> bool:
        """Always ``True``: stopping keeps the files until ``delete()``."""
        return True

    def model_dump(self, *, mode: Literal["python", "json"] | str = "python") -> dict[str, Any]:
        """The sandbox's state as data (it does not recreate a handle: keep the name and
        call ``get_sandbox(name=...)``)."""
        return self._info.model_dump(mode=mode)

    def __repr__(self) -> str:
        return f"<Sandbox {self.name} ({self.id}) {self.status.value}>"

    def _apply(self, payload: Mapping[str, Any]) -> Sandbox:
        self._info = SandboxInfo.from_api(payload, region=self._region)
        if self._region_override is not None:
            self._info = dataclasses.replace(self._info, region=self._region_override)
        return self

    async def _adopt(self, session_id: str | None) -> None:
        if self._info.status == SandboxStatus.RUNNING and (session_id is None or session_id == self.current_session_id):
            return
        with contextlib.suppress(SandboxApiError):
            await self.refresh()

    # --- lifecycle
    async def refresh(self) -> Sandbox:
        """Re-read the sandbox's state; returns this handle."""
        return self._apply(await self._api.json("GET", self._scope.base))

    async def stop(self) -> Sandbox:
        """End every process and keep the files (stopping a stopped sandbox does nothing).
        The next command or file call starts a new session."""
        return self._apply(await self._api.json("POST", self._scope.base + "/stop", timeout=60))

    async def pause(self) -> Sandbox:
        """Freeze every process (memory stays resident). A stopped sandbox raises
        :class:`SandboxStateError` (``sandbox_stopped``)."""
        return self._apply(await self._api.json("POST", self._scope.base + "/pause", timeout=60))

    async def resume(self) -> Sandbox:
        """Thaw a paused sandbox or start a new session for a stopped one; the timeout
        starts again. A running sandbox is left as it is."""
        return self._apply(await self._api.json("POST", self._scope.base + "/resume", timeout=60))

    async def delete(self) -> None:
        """Stop the sandbox and remove its files."""
        await self._api.request("DELETE", self._scope.base, timeout=60)

    async def destroy(self) -> Sandbox:
        """The same as ``delete()`` (the upstream SDK's name); returns this handle."""
        await self.delete()
        return self

    async def extend_timeout(self, duration: DurationInput) -> Sandbox:
        """Add ``duration`` (seconds or timedelta) to ``expires_at``. The sandbox must be
        running (:class:`SandboxStateError` ``sandbox_not_running`` otherwise)."""
        ms = duration_ms(duration, "duration")
        if not ms:
            raise ValueError("duration must be positive")
        return self._apply(await self._api.json("POST", self._scope.base + "/extend", json={"duration_ms": ms}))

    async def extend_execution_time_limit(self, duration: DurationInput) -> Sandbox:
        """The same as ``extend_timeout()`` (the upstream SDK's name)."""
        return await self.extend_timeout(duration)

    async def update(self, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None,
                     env: Mapping[str, str] | None = None,
                     resources: SandboxResources | Mapping[str, int] | None = None,
                     timeout: DurationInput = None, execution_time_limit: DurationInput = None,
                     on_timeout: Literal["stop", "pause"] | None = None, region: Any = OMITTED,
                     network_id: Any = OMITTED, network_policy: NetworkPolicy | None = None,
                     ports: Sequence[int] | None = None, persistent: bool | None = None, runtime: str | None = None,
                     mounts: Mapping[Any, Any] | None = None, snapshot_expiration: Any = None,
                     snapshot_retention: Any = OMITTED, current_snapshot_id: str | None = None) -> Sandbox:
        """Change the sandbox's configuration; ``None`` leaves a value as it is.

        ``metadata`` (alias ``tags``) and ``env`` replace the old values entirely;
        ``resources`` apply to the running session at once; ``timeout`` (alias
        ``execution_time_limit``; ``0`` = none) restarts the clock; ``region`` is recorded on
        this handle only (sandboxd keeps the region the sandbox was created with). ``network_policy`` applies live (connections it no longer allows are
        closed, and re-applying a policy is how a re-opened sandbox gets the credentials the
        caller holds now); ``network_id`` attaches to a private network (``None``
        disconnects); ``ports`` replaces the published ports (``[]``: none).
        ``mounts`` replaces the mount map **for the next session** (``{}`` removes every
        mount; paths are validated as in ``create_sandbox``). ``snapshot_expiration``
        (seconds or timedelta, ``0`` = never) sets the default expiration of its snapshots.
        ``runtime``, ``snapshot_retention`` and ``current_snapshot_id`` raise
        ``NotImplementedError``.
        """
        body = _config_body(metadata=metadata, tags=tags, env=env, resources=resources, timeout=timeout,
                            execution_time_limit=execution_time_limit, on_timeout=on_timeout)
        _network_body(body, network_policy=network_policy, network_id=network_id, ports=ports, update=True)
        _reject_later(runtime=runtime,
                      snapshot_retention=None if snapshot_retention is OMITTED else snapshot_retention,
                      current_snapshot_id=current_snapshot_id)
        if mounts is not None:
            body["mounts"] = mounts_api(mounts)
        if snapshot_expiration is not None:
            body["snapshot_expiration_ms"] = duration_ms(snapshot_expiration, "snapshot_expiration")
        if persistent is False:
            raise not_implemented("persistent=False", "stop always keeps a sandbox's files")
        if region is not OMITTED:
            # sandboxd keeps the region given at creation (one host is one region): an
            # explicit region here is recorded on this handle only
            self._region_override = resolve_region(region)
        if body:
            self._apply(await self._api.json("PATCH", self._scope.base, json=body))
        elif self._region_override is not None:
            self._info = dataclasses.replace(self._info, region=self._region_override)
        return self

    def session(self) -> _SessionAcquisition:
        """The current session as a pinned handle: ``active = await box.session()``
        (resumes the sandbox if needed and leaves it running) or ``async with box.session()
        as s:`` (stops exactly that session at the end, never a later one)."""
        return _SessionAcquisition(self)

    # --- snapshots
    async def snapshot(self, *, expiration: DurationInput = None, name: str | None = None) -> Snapshot:
        """Take a snapshot of the sandbox's files; returns a :class:`Snapshot`.

        **Unlike Vercel's, this never stops the sandbox**: a running sandbox's processes are
        frozen (cgroup freezer) only while its tree is cloned, a few milliseconds, and keep
        running afterwards; paused and stopped sandboxes are cloned as they are.
        ``expiration`` (seconds or timedelta; ``0`` = never) overrides the sandbox's
        ``snapshot_expiration`` and the daemon's default (30 days). ``name`` (1-128 of
        ``[A-Za-z0-9._/-]``, not unique) is kept with it (``query_snapshots(name=)``). Restore
        it with ``create_sandbox(source=SnapshotSource(snapshot_id=snap.snapshot_id))``.
        """
        body: dict[str, Any] = {}
        ms = duration_ms(expiration, "expiration")
        if ms is not None:
            body["expiration_ms"] = ms
        if name is not None:
            body["name"] = name
        data = await self._api.json("POST", self._scope.base + "/snapshots", json=body, timeout=120)
        return Snapshot(self._api, data)

    async def list_snapshots(self, *, limit: int | None = None) -> list[Snapshot]:
        """This sandbox's snapshots (unexpired, creation order), at most ``limit``."""
        out: list[Snapshot] = []
        async for snap in _query_snapshots(self._api, sandbox=self.id, name=None,
                                           page_size=min(limit, 1000) if limit else 1000):
            out.append(snap)
            if limit is not None and len(out) >= limit:
                break
        return out

    def domain(self, port: int) -> str:
        """The URL that reaches ``port`` inside the sandbox from this host:
        ``http://127.0.0.1:<host port>`` (the port must be in ``ports`` and the sandbox
        running; the host port can change with each session)."""
        if port not in self._info.ports:
            raise ValueError(f"port {port} is not exposed: create or update the sandbox with ports=[{port}]")
        host_port = self._info.host_ports.get(port)
        if not host_port:
            raise SandboxStateError(f"sandbox {self.name} is not running, so port {port} has no host port yet",
                                    status_code=409, code="sandbox_not_running")
        return f"http://127.0.0.1:{host_port}"


def _config_body(*, metadata: Mapping[str, str] | None, tags: Mapping[str, str] | None, env: Mapping[str, str] | None,
                 resources: Any, timeout: DurationInput, execution_time_limit: DurationInput,
                 on_timeout: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if metadata is not None and tags is not None:
        raise TypeError("pass metadata= or tags=, not both")
    meta = metadata if metadata is not None else tags
    if meta is not None:
        body["metadata"] = _env(meta)
    if env is not None:
        body["env"] = _env(env)
    if resources is not None:
        if isinstance(resources, SandboxResources):
            body["resources"] = resources.to_api()
        elif isinstance(resources, Mapping):
            body["resources"] = dict(resources)
        else:
            raise TypeError("resources must be SandboxResources(vcpus=, memory=) or a dict")
    if timeout is not None and execution_time_limit is not None:
        raise TypeError("pass timeout= or execution_time_limit=, not both")
    ms = duration_ms(timeout if timeout is not None else execution_time_limit, "timeout")
    if ms is not None:
        body["timeout_ms"] = ms
    if on_timeout is not None:
        if on_timeout not in ("stop", "pause"):
            raise ValueError("on_timeout must be 'stop' or 'pause'")
        body["on_timeout"] = on_timeout
    return body


def _network_body(body: dict[str, Any], *, network_policy: Any, network_id: Any, ports: Any,
                  update: bool) -> None:
    if network_policy is not None:
        body["network_policy"] = network_policy_api(network_policy)
    if network_id is not OMITTED and (network_id is not None or update):
        if network_id is not None and not isinstance(network_id, str):
            raise TypeError("network_id must be a string or None")
        body["network_id"] = network_id
    if ports is not None:
        body["ports"] = ports_api(ports)


def _reject_later(**given: Any) -> None:
    names = {
        "source": "source= (Git, tarball and snapshot sources)",
        "network_policy": "network_policy= (network egress policies)",
        "ports": "ports= (port exposure)",
        "runtime": "runtime= (runtimes; the default image has python3, git and the host's /usr tools)",
        "snapshot_expiration": "snapshot_expiration= (snapshots)",
        "snapshot_retention": "snapshot_retention= (snapshots)",
        "current_snapshot_id": "current_snapshot_id= (snapshots)",
        "network_id": "network_id= (Secure Compute private networks)",
        "mounts": "mounts= (Sandbox Drives)",
    }
    for key, value in given.items():
        if value is None:
            continue
        if key in ("ports", "mounts") and not value:
            continue
        raise not_implemented(names[key])


def create_body(*, name: str | None, metadata: Mapping[str, str] | None, tags: Mapping[str, str] | None,
                env: Mapping[str, str] | None, resources: Any, timeout: DurationInput,
                execution_time_limit: DurationInput, on_timeout: str | None, image: str | None, start: bool,
                source: Any, network_policy: Any, network_id: Any, ports: Any, runtime: Any, mounts: Any,
                persistent: bool | None, snapshot_expiration: Any, snapshot_retention: Any) -> dict[str, Any]:
    """The ``POST /v1/sandboxes`` body for ``create_sandbox()`` arguments (validated)."""
    _reject_later(runtime=runtime, snapshot_retention=snapshot_retention)
    if persistent is False:
        raise not_implemented("persistent=False", "stop always keeps a sandbox's files")
    body = _config_body(metadata=metadata, tags=tags, env=env, resources=resources, timeout=timeout,
                        execution_time_limit=execution_time_limit, on_timeout=on_timeout)
    _network_body(body, network_policy=network_policy, network_id=network_id, ports=ports, update=False)
    _storage_body(body, mounts=mounts, snapshot_expiration=snapshot_expiration)
    if name is not None:
        body["name"] = name
    if image is not None:
        body["image"] = image  # sent unchanged; sandboxd validates it
    if source is not None:
        body["source"] = source_api(source)
    if not start:
        body["start"] = False
    return body


def _storage_body(body: dict[str, Any], *, mounts: Any, snapshot_expiration: Any) -> None:
    if mounts is not None:
        body["mounts"] = mounts_api(mounts)
    if snapshot_expiration is not None:
        body["snapshot_expiration_ms"] = duration_ms(snapshot_expiration, "snapshot_expiration")


def fork_body(*, name: str | None, metadata: Mapping[str, str] | None, tags: Mapping[str, str] | None,
              env: Mapping[str, str] | None, resources: Any, timeout: DurationInput,
              execution_time_limit: DurationInput, on_timeout: str | None, start: bool, mounts: Any,
              snapshot_expiration: Any) -> dict[str, Any]:
    """The ``POST /v1/sandboxes/:ref/fork`` body: only the overrides that were given."""
    body = _config_body(metadata=metadata, tags=tags, env=env, resources=resources, timeout=timeout,
                        execution_time_limit=execution_time_limit, on_timeout=on_timeout)
    _storage_body(body, mounts=mounts, snapshot_expiration=snapshot_expiration)
    if name is not None:
        body["name"] = name
    if not start:
        body["start"] = False
    return body


# --- snapshots and drives --------------------------------------------------------------------------


class Snapshot:
    """A snapshot of a sandbox's files (``await box.snapshot()``, ``get_snapshot()``).

    Snapshots are immutable and independent of their sandbox: deleting the sandbox keeps
    them. Restore one with ``create_sandbox(source=SnapshotSource(snapshot_id=...))`` (or
    ``source=snapshot``). Properties reflect the last reply.
    """

    def __init__(self, api: Api, payload: Mapping[str, Any]):
        self._api = api
        self._info = SnapshotInfo.from_api(payload)

    @property
    def info(self) -> SnapshotInfo:
        """The snapshot's state from the last reply (read-only)."""
        return self._info

    @property
    def id(self) -> str:
        """The snapshot id (UUIDv7)."""
        return self._info.id

    @property
    def snapshot_id(self) -> str:
        """The same as ``id`` (the upstream SDK's name)."""
        return self._info.id

    @property
    def source_sandbox_id(self) -> str | None:
        """The id of the sandbox it was taken from (it may have been deleted since)."""
        return self._info.sandbox_id

    @property
    def sandbox_id(self) -> str | None:
        """The same as ``source_sandbox_id``."""
        return self._info.sandbox_id

    @property
    def sandbox_name(self) -> str | None:
        """The name of the sandbox it was taken from."""
        return self._info.sandbox_name

    @property
    def name(self) -> str | None:
        """The snapshot's own name, if it was given one (``snapshot(name=)``)."""
        return self._info.name

    @property
    def image(self) -> str | None:
        """The image of its sandbox (a restore uses it too)."""
        return self._info.image

    @property
    def status(self) -> str:
        """``created`` (snapshots are taken synchronously)."""
        return self._info.status

    @property
    def size_bytes(self) -> int | None:
        """Always ``None``: sandboxd does not report a snapshot's size."""
        return self._info.size_bytes

    @property
    def created_at(self) -> datetime | None:
        """When it was taken."""
        return self._info.created_at

    @property
    def expires_at(self) -> datetime | None:
        """When it expires and is deleted (``None``: never)."""
        return self._info.expires_at

    def model_dump(self, *, mode: Literal["python", "json"] | str = "python") -> dict[str, Any]:
        """The snapshot's state as data."""
        return self._info.model_dump(mode=mode)

    def __repr__(self) -> str:
        return f"<Snapshot {self.id} of {self.sandbox_name or self.sandbox_id} {self.status}>"

    async def refresh(self) -> Snapshot:
        """Re-read it (``SandboxApiError`` 404 ``snapshot_not_found`` once deleted or expired)."""
        self._info = SnapshotInfo.from_api(await self._api.json("GET", f"/snapshots/{quote(self.id)}"))
        return self

    async def delete(self) -> None:
        """Delete the snapshot (``SandboxApiError`` 404 ``snapshot_not_found`` if it is gone)."""
        await self._api.request("DELETE", f"/snapshots/{quote(self.id)}")


async def _query_snapshots(api: Api, *, sandbox: str | None, name: str | None, page_size: int | None,
                           cursor: str | None = None) -> AsyncIterator[Snapshot]:
    q: dict[str, Any] = {"limit": page_size or 100, "sandbox": sandbox, "name": name}
    while True:
        if cursor:
            q["cursor"] = cursor
        d = await api.json("GET", "/snapshots", query=q)
        for item in d.get("snapshots") or ():
            yield Snapshot(api, item)
        cursor = d.get("next_cursor")
        if not cursor:
            return


class Drive:
    """A Sandbox Drive: a named persistent file system that sandboxes mount
    (``get_or_create_drive()``, ``get_drive()``).

    Mount it with ``create_sandbox(mounts={"/cache": drive})`` (read-write: one running
    writer at a time; its data is committed when that session ends) or
    ``mounts={"/ref": drive.snapshot()}`` (a read-only view of the committed data).
    Properties reflect the last reply; ``refresh()`` re-reads.
    """

    def __init__(self, api: Api, payload: Mapping[str, Any]):
        self._api = api
        self._info = DriveInfo.from_api(payload)

    def _drive_ref(self) -> str:
        return self._info.name

    @property
    def info(self) -> DriveInfo:
        """The drive's state from the last reply (read-only)."""
        return self._info

    @property
    def id(self) -> str:
        """The drive id (UUIDv7)."""
        return self._info.id

    @property
    def name(self) -> str:
        """The drive name (unique on this host)."""
        return self._info.name

    @property
    def region(self) -> str | None:
        """``"local"``: a rebuno host is one region."""
        return self._info.region

    @property
    def max_size_bytes(self) -> int | None:
        """The size limit (enforced with btrfs quotas where available)."""
        return self._info.max_size_bytes

    @property
    def max_size_enforced(self) -> bool:
        """Whether the store enforces ``max_size_bytes``."""
        return self._info.max_size_enforced

    @property
    def created_at(self) -> datetime | None:
        """When the drive was created."""
        return self._info.created_at

    @property
    def updated_at(self) -> datetime | None:
        """When it last changed (a commit changes it)."""
        return self._info.updated_at

    @property
    def initialized(self) -> bool:
        """Whether it has committed data (a read-write session on it has ended)."""
        return self._info.initialized

    @property
    def committed_at(self) -> datetime | None:
        """When its data was last committed."""
        return self._info.committed_at

    @property
    def parent_drive_id(self) -> str | None:
        """The drive this one was forked from (``None`` when not a fork)."""
        return self._info.parent_drive_id

    @property
    def root_drive_id(self) -> str | None:
        """The first drive of its fork line (``None`` when not a fork)."""
        return self._info.root_drive_id

    @property
    def attached_to(self) -> Mapping[str, Any] | None:
        """The sandbox that mounts it read-write now, or ``None``."""
        return self._info.attached_to

    def model_dump(self, *, mode: Literal["python", "json"] | str = "python") -> dict[str, Any]:
        """The drive's state as data."""
        return self._info.model_dump(mode=mode)

    def __repr__(self) -> str:
        return f"<Drive {self.name} ({self.id})>"

    def snapshot(self) -> DriveMount:
        """A read-only, point-in-time mount of this drive's committed data:
        ``mounts={"/ref": drive.snapshot()}`` (no I/O)."""
        return DriveMount(self._info.name, mode="snapshot", drive_id=self._info.id)

    async def refresh(self) -> Drive:
        """Re-read the drive (``SandboxApiError`` 404 ``not_found`` once deleted)."""
        self._info = DriveInfo.from_api(await self._api.json("GET", f"/drives/{quote(self.id)}"))
        return self

    async def fork(self, *, name: str) -> Drive:
        """A new, independent drive with this one's committed data and maximum size; this
        handle is unchanged. ``SandboxApiError``: 409 ``conflict`` (the name is taken), 409
        ``drive_not_initialized`` (no committed data yet), 404 ``not_found``."""
        return await _fork_drive(self._api, self.id, name)

    async def delete(self) -> None:
        """Delete the drive and its data. ``SandboxApiError`` 409 ``drive_attached`` while a
        running or paused sandbox mounts it; 404 ``not_found`` if it is gone."""
        await self._api.request("DELETE", f"/drives/{quote(self.id)}", timeout=60)


async def _fork_drive(api: Api, source: str, name: str) -> Drive:
    if not isinstance(name, str) or not name:
        raise ValueError("fork_drive() needs name=, the new drive's name")
    data = await api.json("POST", f"/drives/{quote(source)}/fork", json={"name": name}, timeout=120)
    return Drive(api, data)


# --- creation operations --------------------------------------------------------------------------


class CreateSandboxOperation:
    """``create_sandbox(...)``: ``await`` it for a sandbox that stays alive, or ``async with``
    it to delete (``destroy=True``, the default) or stop (``destroy=False``) the sandbox when
    the block ends. Usable once."""

    def __init__(self, make: Callable[[], Awaitable[Sandbox]], *, destroy: bool = True,
                 cleanup: Literal["destroy", "stop"] | None = None):
        self._make = make
        self._cleanup = cleanup or ("destroy" if destroy else "stop")
        self._used = False
        self._handle: Sandbox | None = None

    async def _run(self) -> Sandbox:
        if self._used:
            raise RuntimeError("a create_sandbox(...) operation can be awaited or entered only once")
        self._used = True
        return await self._make()

    def __await__(self) -> Generator[Any, None, Sandbox]:
        return self._run().__await__()

    async def __aenter__(self) -> Sandbox:
        self._handle = await self._run()
        return self._handle

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._handle is None:
            return
        await _cleanup(self._handle, self._cleanup, exc)


async def _cleanup(handle: Sandbox, action: str, exc: BaseException | None) -> None:
    try:
        if action == "destroy":
            with contextlib.suppress(SandboxNotFoundError):
                await handle.delete()
        else:
            with contextlib.suppress(SandboxNotFoundError):
                await handle.stop()
    except Exception as e:
        if exc is not None:
            exc.add_note(f"cleaning up sandbox {handle.name} ({action}) also failed: {e}")
            return
        raise SandboxCleanupError(f"could not {action} sandbox {handle.name}", cause=e,
                                  resource_id=handle.id) from e


# --- the client ------------------------------------------------------------------------------------


def _states(state: Any) -> str | None:
    if state is None:
        return None
    if isinstance(state, (str, SandboxStatus)):
        state = [state]
    out = []
    for s in state:
        out.append(SandboxStatus(s.value if isinstance(s, SandboxStatus) else str(s)).value)
    return ",".join(out)


class SandboxClient:
    """A standalone asynchronous client for one sandboxd.

    ``SandboxClient.create(options=SandboxServiceOptions(region="iad1"))`` (or
    ``SandboxClient(base_url)``) performs no I/O. The URL is ``base_url``, else
    ``options.base_url``, else ``$REBUNO_SANDBOX_URL``, else ``http://127.0.0.1:8090``; the
    token ``token``, else ``$REBUNO_SANDBOX_TOKEN``, else the daemon's local token (found
    by itself for the user who started sandboxd).
    The application that creates it calls ``await client.aclose()`` at shutdown (or uses
    ``async with``). It never reads or changes the ambient ``session()``.
    """

    def __init__(self, base_url: str | None = None, *, options: SandboxServiceOptions | None = None,
                 timeout: float | None = None, _keepalive: bool = True, token: str | None = None):
        self.options = options or SandboxServiceOptions()
        self._region = resolve_region(self.options.region)
        self._api = Api(base_url or self.options.base_url, timeout=timeout or self.options.timeout,
                        keepalive=_keepalive, token=token)

    @classmethod
    def create(cls, *, options: SandboxServiceOptions | None = None, base_url: str | None = None) -> SandboxClient:
        """Build a client (no I/O)."""
        return cls(base_url, options=options)

    @property
    def base_url(self) -> str:
        """The sandboxd URL."""
        return self._api.base_url

    @property
    def region(self) -> str | None:
        """The default region recorded on new sandboxes."""
        return self._region

    @property
    def closed(self) -> bool:
        """``True`` after ``aclose()``."""
        return self._api.closed

    def _region_for(self, region: Any) -> str | None:
        return self._region if region is None else resolve_region(region)

    # --- sandboxes
    def create_sandbox(self, *, name: str | None = None, metadata: Mapping[str, str] | None = None,
                       tags: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None,
                       resources: SandboxResources | Mapping[str, int] | None = None,
                       timeout: DurationInput = None, execution_time_limit: DurationInput = None,
                       on_timeout: Literal["stop", "pause"] | None = None, image: str | None = None,
                       region: Any = None, start: bool = True, destroy: bool = True, source: Any = None,
                       network_policy: NetworkPolicy | str | Mapping[str, Any] | None = None,
                       network_id: str | None = None,
                       ports: Sequence[int] | None = None, runtime: str | None = None,
                       mounts: Mapping[Any, Any] | None = None, persistent: bool | None = None,
                       snapshot_expiration: Any = None, snapshot_retention: Any = None,
                       allow_privilege_escalation: bool = False) -> CreateSandboxOperation:
        """Create a sandbox. ``await`` the result for a handle, or ``async with`` it to delete
        the sandbox at the end (``destroy=False``: only stop it).

        ``name`` (unique; generated when omitted), ``metadata``/``tags`` (string values,
        queryable), ``env``, ``resources`` (``SandboxResources(vcpus=, memory=)``, memory in
        MiB), ``timeout``/``execution_time_limit`` (seconds or timedelta, ``0`` = none;
        default 5 minutes), ``on_timeout`` (``"stop"`` or ``"pause"``), ``image`` (sent as
        is; only ``"default"`` exists), ``start=False`` (created stopped; the first call
        starts it), ``region`` (sent and recorded by sandboxd, which has one region, so it
        places nothing; without one sandboxd says ``"local"``; ``CURRENT_REGION`` reads
        ``$REBUNO_REGION`` / ``$VERCEL_REGION``), ``network_policy`` (a :class:`NetworkPolicy`; default deny-all:
        no egress), ``network_id`` (a private network to join) and ``ports`` (published on
        host loopback; see :meth:`Sandbox.domain`).

        ``source`` fills the sandbox before the call returns: ``SnapshotSource(snapshot_id=)``
        restores a snapshot (404 ``snapshot_not_found`` if it is missing; nothing is created),
        ``GitSource(url=, revision=, depth=)`` clones inside, ``TarballSource(url=<host
        path>)`` extracts inside, ``ImageSource(image=)`` picks the image. ``mounts`` maps
        absolute paths to drives (a name or id, a :class:`Drive`, ``drive.snapshot()`` or
        ``DriveMount(name, mode="snapshot")``); paths are canonicalized and checked here
        (``ValueError``) and by sandboxd. ``snapshot_expiration`` (seconds or timedelta,
        ``0`` = never) is the default expiration of its snapshots.
        ``allow_privilege_escalation=True`` lets setuid programs (``sudo``) work inside; what
        they reach is the sandbox's own root, as ``sudo=True`` commands do (docs/sandbox.md).
        ``runtime``, ``persistent=False`` and ``snapshot_retention`` raise
        ``NotImplementedError``.
        """
        body = create_body(name=name, metadata=metadata, tags=tags, env=env, resources=resources, timeout=timeout,
                           execution_time_limit=execution_time_limit, on_timeout=on_timeout, image=image,
                           start=start, source=source, network_policy=network_policy, network_id=network_id,
                           ports=ports, runtime=runtime, mounts=mounts, persistent=persistent,
                           snapshot_expiration=snapshot_expiration, snapshot_retention=snapshot_retention)
        if allow_privilege_escalation:
            body["allow_privilege_escalation"] = True
        rgn = self._region_for(region)
        if rgn is not None:
            body["region"] = rgn  # sandboxd records it (and validates it: [a-z0-9-], 1-32)

        async def make() -> Sandbox:
            data = await self._api.json("POST", "/sandboxes", json=body, timeout=60)
            return Sandbox(self._api, data, region=rgn)

        return CreateSandboxOperation(make, destroy=destroy)

    async def get_sandbox(self, name: str | None = None, *, id: str | None = None) -> Sandbox:
        """The sandbox with that name (or ``id=``), without resuming it.
        :class:`SandboxNotFoundError` if there is none."""
        ref = name if name is not None else id
        if not ref:
            raise TypeError("get_sandbox() needs name= or id=")
        data = await self._api.json("GET", f"/sandboxes/{quote(ref)}")
        return Sandbox(self._api, data, region=self._region)

    def resume_sandbox(self, *, name: str) -> CreateSandboxOperation:
        """Resume the named sandbox: ``await`` it for a running handle, or ``async with`` it
        to stop the sandbox (keeping its files) at the end."""
        async def make() -> Sandbox:
            box = await self.get_sandbox(name)
            return await box.resume()

        return CreateSandboxOperation(make, cleanup="stop")

    def get_or_create_sandbox(self, *, name: str, **create_kwargs: Any) -> CreateSandboxOperation:
        """The named sandbox if it exists (unchanged), else a new one created with
        ``create_kwargs`` (see ``create_sandbox``). ``async with`` stops it at the end
        (the files stay). ``.created`` on the operation says which happened."""
        create_kwargs.pop("destroy", None)
        op = self.create_sandbox(name=name, **create_kwargs)
        holder: dict[str, bool] = {}

        async def make() -> Sandbox:
            try:
                box = await self.get_sandbox(name)
                holder["created"] = False
                return box
            except SandboxNotFoundError:
                pass
            try:
                box = await op
            except SandboxApiError as e:
                if e.code != "name_taken":
                    raise
                box = await self.get_sandbox(name)  # created concurrently
                holder["created"] = False
                return box
            holder["created"] = True
            return box

        result = _GetOrCreateOperation(make, holder)
        return result

    async def _page(self, query: dict[str, Any]) -> tuple[list[Sandbox], str | None]:
        d = await self._api.json("GET", "/sandboxes", query=query)
        return [Sandbox(self._api, s, region=self._region) for s in d.get("sandboxes") or ()], d.get("next_cursor")

    async def query_sandboxes(self, *, query: SandboxQuery | None = None, metadata: Mapping[str, str] | None = None,
                              tags: Mapping[str, str] | None = None, state: Any = None,
                              page_size: int | None = None, cursor: str | None = None) -> AsyncIterator[Sandbox]:
        """Iterate over sandboxes (creation order) with every given ``metadata``/``tags``
        key and value and, if given, a ``state`` among ``state`` (a status or a list of
        them). Pages are fetched as needed."""
        meta = metadata if metadata is not None else tags
        if query is not None:
            meta = query.metadata if meta is None else meta
            state = query.state if state is None else state
        q: dict[str, Any] = {"limit": page_size or 100}
        if meta:
            q["metadata"] = json.dumps(dict(meta), separators=(",", ":"))
        st = _states(state)
        if st:
            q["state"] = st
        while True:
            if cursor:
                q["cursor"] = cursor
            boxes, cursor = await self._page(q)
            for b in boxes:
                yield b
            if not cursor:
                return

    async def list_sandboxes(self, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None,
                             state: Any = None, limit: int | None = None) -> list[Sandbox]:
        """All matching sandboxes as a list (see ``query_sandboxes``), at most ``limit``."""
        out: list[Sandbox] = []
        async for b in self.query_sandboxes(metadata=metadata, tags=tags, state=state,
                                            page_size=min(limit, 1000) if limit else 1000):
            out.append(b)
            if limit is not None and len(out) >= limit:
                break
        return out

    async def delete_sandbox(self, *, name: str) -> None:
        """Delete the named sandbox (``SandboxNotFoundError`` if there is none)."""
        await self._api.request("DELETE", f"/sandboxes/{quote(name)}", timeout=60)

    async def health(self) -> dict[str, Any]:
        """``GET /v1/health``: ``{"status": "ok", "service": "sandboxd", "sandboxes": N}``."""
        return await self._api.json("GET", "/health")

    # --- forks
    def fork_sandbox(self, *, source_sandbox: str | Sandbox, name: str | None = None,
                     metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None,
                     env: Mapping[str, str] | None = None,
                     resources: SandboxResources | Mapping[str, int] | None = None,
                     timeout: DurationInput = None, execution_time_limit: DurationInput = None,
                     on_timeout: Literal["stop", "pause"] | None = None, region: Any = None, start: bool = True,
                     destroy: bool = True, network_policy: NetworkPolicy | str | Mapping[str, Any] | None = None,
                     network_id: Any = OMITTED, ports: Sequence[int] | None = None,
                     mounts: Mapping[Any, Any] | None = None, snapshot_expiration: Any = None,
                     persistent: bool | None = None, runtime: str | None = None,
                     snapshot_retention: Any = None) -> CreateSandboxOperation:
        """A new sandbox from ``source_sandbox``'s current files (its name, id or handle).
        ``await`` it for a handle, or ``async with`` it to delete the fork at the end
        (``destroy=False``: only stop it).

        The source keeps running (its processes are frozen for a few milliseconds while its
        tree is cloned). The fork inherits the source's image, resources, timeout,
        ``on_timeout``, env, metadata (tags), snapshot expiration, network policy, network
        and ports; only the arguments given override (``resources`` merges, ``env`` and
        ``metadata`` replace). It never inherits ``mounts``: pass them explicitly (a
        read-write drive the source still mounts raises ``SandboxApiError`` 409
        ``drive_attached``). ``network_policy``, ``network_id`` and ``ports`` are part of
        the fork call, so a fork never runs with the source's network settings when it is
        given its own. A fork keeps the source's region (``region`` is accepted, not sent).
        """
        _reject_later(runtime=runtime, snapshot_retention=snapshot_retention)
        if persistent is False:
            raise not_implemented("persistent=False", "stop always keeps a sandbox's files")
        if isinstance(source_sandbox, Sandbox):
            ref = source_sandbox.id
        elif isinstance(source_sandbox, str) and source_sandbox:
            ref = source_sandbox
        else:
            raise TypeError("fork_sandbox() needs source_sandbox=, a sandbox name, id or handle")
        body = fork_body(name=name, metadata=metadata, tags=tags, env=env, resources=resources, timeout=timeout,
                         execution_time_limit=execution_time_limit, on_timeout=on_timeout, start=start,
                         mounts=mounts, snapshot_expiration=snapshot_expiration)
        _network_body(body, network_policy=network_policy, network_id=network_id, ports=ports, update=True)
        rgn = self._region_for(region)

        async def make() -> Sandbox:
            data = await self._api.json("POST", f"/sandboxes/{quote(ref)}/fork", json=body, timeout=120)
            return Sandbox(self._api, data, region=rgn)

        return CreateSandboxOperation(make, destroy=destroy)

    # --- snapshots
    async def get_snapshot(self, *, snapshot_id: str) -> Snapshot:
        """The snapshot with that id. ``SandboxApiError`` with ``status_code == 404``
        (``snapshot_not_found``) if it does not exist or expired."""
        if not isinstance(snapshot_id, str) or not snapshot_id:
            raise TypeError("get_snapshot() needs snapshot_id=")
        return Snapshot(self._api, await self._api.json("GET", f"/snapshots/{quote(snapshot_id)}"))

    async def query_snapshots(self, *, sandbox: str | Sandbox | None = None, page_size: int | None = None,
                              cursor: str | None = None, name: str | None = None) -> AsyncIterator[Snapshot]:
        """Iterate over unexpired snapshots (``async for``, creation order), only those of
        ``sandbox`` (a name, id or handle; also after it was deleted) if given, and only
        those named ``name`` (a snapshot's own name, or its id) if given."""
        ref = sandbox.id if isinstance(sandbox, Sandbox) else sandbox
        async for snap in _query_snapshots(self._api, sandbox=ref, name=name, page_size=page_size,
                                           cursor=cursor):
            yield snap

    async def delete_snapshot(self, *, snapshot_id: str) -> None:
        """Delete a snapshot (``SandboxApiError`` 404 ``snapshot_not_found`` if it is gone)."""
        await self._api.request("DELETE", f"/snapshots/{quote(snapshot_id)}")

    # --- images (imported on this host; registry pulls and builds come through the same API)
    async def import_image(self, path: str | os.PathLike[str], *, type: str | None = None,
                           ref: str | None = None) -> tuple[dict[str, Any], bool]:
        """Import an image from a host path, cached by digest: ``(image, created)``.
        ``type``: ``"oci-layout"`` (an OCI image layout directory, or a tar of one),
        ``"docker-archive"`` (a ``docker save`` tar), ``"dir"`` or ``"tarball"`` (a folder
        or tarball as a one-layer image); by default a folder holding ``oci-layout`` is
        an OCI layout, another folder ``"dir"``, a file ``"tarball"``. ``ref``: a name to
        tag it with (``"name:tag"``), usable as ``create_sandbox(image=)``. ``image`` is
        ``{"digest", "reference" (digest-pinned), "references", "layers", "config",
        "size_bytes", "source", "created_at"}``. The path is made absolute here
        (sandboxd reads it, not this process's cwd). Images are self-contained: nothing
        of the host's /usr is visible in their sandboxes."""
        p = os.path.abspath(os.fspath(path))
        if type is None:
            if os.path.isdir(p):
                type = "oci-layout" if os.path.isfile(os.path.join(p, "oci-layout")) else "dir"
            else:
                type = "tarball"
        body: dict[str, Any] = {"type": type, "path": p}
        if ref is not None:
            body["ref"] = ref
        resp = await self._api.request("POST", "/images", json=body, timeout=600)
        try:
            data = json.loads(resp.body)
        except ValueError as e:
            raise SandboxResponseError("POST /images: the reply is not JSON", data=resp.body[:200]) from e
        return data, resp.status == 201

    async def build_image(self, recipe: str, context: str | os.PathLike[str] | None = None, *,
                          ref: str | None = None, network_policy: Any = None,
                          on_log: Callable[[str], Any] | None = None) -> dict[str, Any]:
        """Build an image from a Dockerfile-like ``recipe`` (the text: ``FROM``, ``RUN``,
        ``COPY``, ``ENV``, ``WORKDIR``, ``USER``) and return it (the image object of
        :meth:`get_image`) once recorded; ``ref`` (``"name:tag"``) tags it. Each ``RUN``
        runs in a sandbox of the daemon and becomes a layer; a step built before (same
        parent, same instruction) is reused. ``COPY`` reads from the host folder
        ``context`` (made absolute here: sandboxd reads it). ``on_log(line)`` (sync or
        async) gets each line of the build log (``STEP n/N``, the RUN output, ``->
        sha256:...``). A failed build raises the ``SandboxApiError`` of its error (400
        ``build_failed`` with the step's exit code and output tail, 400
        ``validation_error`` for a bad recipe, 404 ``image_not_found`` for an unknown
        ``FROM``); nothing of it is recorded. ``network_policy`` (as for
        ``create_sandbox``; default ``"deny-all"``) is that of every ``RUN``."""
        if not isinstance(recipe, str) or not recipe:
            raise TypeError("build_image() needs the recipe's text, e.g. 'FROM base:v1\\nRUN ...'")
        body: dict[str, Any] = {"type": "build", "recipe": recipe}
        if context is not None:
            body["context"] = os.path.abspath(os.fspath(context))
        if ref is not None:
            body["ref"] = ref
        if network_policy is not None:
            body["network_policy"] = network_policy
        job = await self._api.json("POST", "/images", json=body)
        path = f"/images/builds/{quote(str(job['id']))}"
        seen = False  # the first event holds the log so far (all of it if already over)

        async def tell(line: str) -> None:
            if on_log is not None:
                r = on_log(line)
                if isinstance(r, Awaitable):
                    await r

        async def on_event(kind: str, data: dict[str, Any]) -> None:
            nonlocal seen
            if kind == "log":
                await tell(str(data.get("line", "")))
            elif not seen and "log" in data:
                seen = True
                for line in data["log"]:
                    await tell(str(line))

        return await self._follow_image_job(path, on_event, read_timeout=3600.0,
                                            failure=("build_failed", "the build failed", 400),
                                            context="image build")

    async def _follow_image_job(self, path: str,
                                on_event: Callable[[str, dict[str, Any]], Awaitable[None]], *,
                                read_timeout: float, failure: tuple[str, str, int],
                                context: str) -> dict[str, Any]:
        """Follow an image job (a pull or a build) on its SSE stream until it ends, giving
        each event to ``on_event(kind, data)``; a stream that keeps breaking falls back to
        polling the job. Returns the installed image, or raises the job's error
        (``failure``: the code, message and status used when the job names none)."""
        final: dict[str, Any] | None = None
        for _attempt in range(4):
            resp = await self._api.stream("GET", path + "/stream", read_timeout=read_timeout)
            try:
                async for ev in iter_sse(resp):
                    kind = ev.get("event", "message")
                    data = json.loads(ev.get("data") or "{}")
                    await on_event(kind, data)
                    if kind in ("done", "error"):
                        final = data
                        break
            except (asyncio.TimeoutError, OSError):
                pass
            finally:
                resp.close()
            if final is not None:
                break
        if final is None:  # the stream kept breaking: the job says how it ended
            while True:
                final = await self._api.json("GET", path)
                if final.get("status") in ("done", "failed"):
                    break
                await asyncio.sleep(0.5)
        if final.get("status") != "done":
            code, message, status = failure
            err = final.get("error") or {"code": code, "message": message}
            raise self._api.error(int(err.get("status") or status), json.dumps({"error": err}).encode(),
                                  context=context)
        return dict(final.get("image") or {})

    async def list_images(self) -> list[dict[str, Any]]:
        """The imported images (the built-in ``host`` image is not listed)."""
        return list((await self._api.json("GET", "/images")).get("images") or [])

    async def get_image(self, ref: str) -> dict[str, Any]:
        """One image by reference (``"name:tag"``, ``"name@sha256:..."``), digest or
        ``"host"`` (``SandboxApiError`` 404 ``image_not_found`` naming it otherwise)."""
        if not isinstance(ref, str) or not ref:
            raise TypeError("get_image() needs an image reference or digest")
        return await self._api.json("GET", f"/images/{quote(ref)}")

    async def delete_image(self, ref: str) -> None:
        """Delete an imported image by reference or digest (``SandboxApiError`` 409
        ``image_in_use`` while a sandbox or snapshot uses it, 404 if there is none).
        Layers no other image has are removed with it."""
        if not isinstance(ref, str) or not ref:
            raise TypeError("delete_image() needs the image's reference or digest")
        await self._api.request("DELETE", f"/images/{quote(ref)}")

    async def pull_image(self, ref: str, *,
                         on_progress: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any]:
        """Pull ``ref`` (``name[:tag]``, ``name@sha256:...``, ``host[:port]/path/name:tag``)
        from its OCI registry into sandboxd and return the image (``{"digest", "ref",
        "reference", "references", "layers", "size_bytes", "config", "source"}``) once it is
        installed (then ``create_sandbox(image=ref)``). The daemon
        downloads it (credentials are the daemon's ``--registry-auth``, never sent from
        here); ``on_progress(job)`` (sync or async) gets the job object of each progress
        event: ``status``, ``layers`` (``digest``, ``size``, ``done``, ``cached``),
        ``bytes_total``, ``bytes_done``, ``bytes_fetched``. A failed pull raises the
        ``SandboxApiError`` of its error (404 ``image_not_found``, 401
        ``registry_unauthorized``, 502 ``digest_mismatch``, 507 ``no_space``, ...).
        A pull of a reference already being pulled joins it (one download)."""
        if not isinstance(ref, str) or not ref:
            raise TypeError("pull_image() needs an image reference, e.g. 'debian:bookworm'")
        job = await self._api.json("POST", "/images", json={"type": "pull", "ref": ref})
        path = f"/images/jobs/{quote(str(job['id']))}"

        async def on_event(kind: str, data: dict[str, Any]) -> None:
            if on_progress is not None:
                r = on_progress(data)
                if isinstance(r, Awaitable):
                    await r

        return await self._follow_image_job(path, on_event, read_timeout=60.0,
                                            failure=("pull_failed", "the pull failed", 502),
                                            context=f"pull {ref}")

    # --- drives
    async def get_or_create_drive(self, *, name: str, max_size_bytes: int | None = None,
                                  region: Any = None) -> tuple[Drive, bool]:
        """The drive called ``name`` and whether this call created it: ``(drive, created)``.
        An existing drive is returned unchanged (``max_size_bytes`` applies only to a new
        one: 1 MiB to 1 TiB, default 10 GiB). ``region`` is accepted for compatibility and
        not sent: a rebuno host is one region (``"local"``)."""
        resolve_region(region)
        body: dict[str, Any] = {"name": name}
        if max_size_bytes is not None:
            body["max_size_bytes"] = max_size_bytes
        resp = await self._api.request("POST", "/drives", json=body)
        try:
            data = json.loads(resp.body)
        except ValueError as e:
            raise SandboxResponseError("POST /drives: the reply is not JSON", data=resp.body[:200]) from e
        return Drive(self._api, data), resp.status == 201

    async def get_drive(self, *, name_or_id: str) -> Drive:
        """The drive with that name or id, without creating it. ``SandboxApiError`` with
        ``status_code == 404`` (``not_found``) if there is none."""
        if not isinstance(name_or_id, str) or not name_or_id:
            raise TypeError("get_drive() needs name_or_id=")
        return Drive(self._api, await self._api.json("GET", f"/drives/{quote(name_or_id)}"))

    async def fork_drive(self, *, source: str | Drive, name: str) -> Drive:
        """Fork the drive ``source`` (a name, id or handle) into a new independent drive
        ``name`` with its committed data. ``SandboxApiError``: 404 ``not_found`` (no such
        source), 409 ``conflict`` (the name is taken), 409 ``drive_not_initialized`` (the
        source has no committed data: mount it read-write and stop that session first)."""
        return await _fork_drive(self._api, drive_ref(source), name)

    async def delete_drive(self, *, name: str) -> None:
        """Delete the drive called ``name`` (or with that id). ``SandboxApiError`` 409
        ``drive_attached`` while a running or paused sandbox mounts it, 404 ``not_found``."""
        await self._api.request("DELETE", f"/drives/{quote(drive_ref(name))}", timeout=60)

    async def query_drives(self, query: DriveQuery | None = None, *, name_prefix: str | None = None,
                           page_size: int | None = None, cursor: str | None = None) -> AsyncIterator[Drive]:
        """Iterate over drives (``async for``): ``DriveQueryByCreatedAt`` (the default,
        oldest first), ``DriveQueryByUpdatedAt`` or ``DriveQueryByName``, optionally only
        names starting with ``name_prefix``. Pages are fetched as needed."""
        q = (query or DriveQueryByCreatedAt()).to_query()
        if name_prefix is not None:
            q["name"] = name_prefix
        q["limit"] = page_size or 100
        while True:
            if cursor:
                q["cursor"] = cursor
            d = await self._api.json("GET", "/drives", query=q)
            for item in d.get("drives") or ():
                yield Drive(self._api, item)
            cursor = d.get("next_cursor")
            if not cursor:
                return

    # --- lifetime
    async def aclose(self) -> None:
        """Close the client's connections. Handles made by it stop working."""
        await self._api.close()

    async def __aenter__(self) -> SandboxClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class _GetOrCreateOperation(CreateSandboxOperation):
    """``get_or_create_sandbox(...)``; ``created`` tells whether it created the sandbox."""

    def __init__(self, make: Callable[[], Awaitable[Sandbox]], holder: dict[str, bool]):
        super().__init__(make, cleanup="stop")
        self._holder = holder

    @property
    def created(self) -> bool | None:
        """``True`` if the sandbox was created, ``False`` if it existed (``None`` before)."""
        return self._holder.get("created")
