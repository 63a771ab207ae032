"""rebuno.sandbox.sync: the synchronous mirror of :mod:`rebuno.sandbox`.

Same names, same arguments, blocking calls::

    from rebuno.sandbox import session
    from rebuno.sandbox import sync as sandbox

    with session():
        with sandbox.create_sandbox() as instance:
            process = instance.run_command("echo", ["hello"], capture_output=True)
            print(process.stdout)

``create_sandbox()`` creates the sandbox at once and returns a handle that is also a context
manager: leaving the ``with`` block deletes it (``destroy=False``: stops it). Calling it
without ``with`` does no cleanup. ``command.stdin`` is a writable :class:`io.RawIOBase`
(wrap it in :class:`io.TextIOWrapper` for text). Each client runs a private event loop in a
daemon thread, so the handles work from any thread.
"""

from __future__ import annotations

import asyncio
import io
import subprocess
import threading
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from types import TracebackType
from typing import IO, Any, Literal, TextIO, TypeVar

from rebuno.sandbox import _aio
from rebuno.sandbox._interactive import SyncInteractiveSession, SyncInteractiveStream  # noqa: F401
from rebuno.sandbox._errors import (
    SandboxApiError,
    SandboxCleanupError,
    SandboxCommandError,
    SandboxCommandNotFoundError,
    SandboxConnectionError,
    SandboxError,
    SandboxFileExistsError,
    SandboxFilesystemError,
    SandboxIsADirectoryError,
    SandboxLimitError,
    SandboxNotFoundError,
    SandboxPathNotFoundError,
    SandboxPermissionError,
    SandboxResponseError,
    SandboxSessionEndedError,
    SandboxSessionPausedError,
    SandboxStateError,
    SandboxStdinClosedError,
    SandboxEndOfStream,
    SandboxPtyDisconnectedError,
    SandboxStreamError,
    SandboxTimeoutError,
    SandboxUserAlreadyExistsError,
    SandboxUserNotFoundError,
)
from rebuno.sandbox._models import (
    CURRENT_REGION,
    CommandSignal,
    CommandStatus,
    CompletedCommand,
    DirectoryEntry,
    DriveInfo,
    DriveMount,
    DriveQuery,
    DriveQueryByCreatedAt,
    DriveQueryByName,
    DriveQueryByUpdatedAt,
    DurationInput,
    GitSource,
    ImageSource,
    NetworkPolicy,
    RegionInput,
    SandboxInfo,
    SandboxQuery,
    SandboxResources,
    SandboxServiceOptions,
    SandboxSource,
    SandboxStatus,
    SandboxUsage,
    SandboxUserInfo,
    SnapshotInfo,
    SnapshotSource,
    TarballSource,
)
from rebuno.sandbox._protocols import (
    SandboxExecution,
    SandboxFilesystemOperations,
    SyncSandboxExecution,
    SyncSandboxFilesystemOperations,
)
from rebuno.sandbox._session import current_sync_client, session

_T = TypeVar("_T")


class _Runner:
    """A private event loop in a daemon thread; ``run()`` blocks on a coroutine there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rebuno-sandbox-sync", daemon=True)
        self.thread.start()

    @property
    def closed(self) -> bool:
        return self.loop.is_closed()

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("a synchronous sandbox handle was used from inside its own event loop")
        if self.loop.is_closed():
            coro.close()
            raise SandboxConnectionError("the synchronous sandbox client is closed")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result()
        except BaseException:
            fut.cancel()  # Ctrl-C while blocked: stop the work on the loop too
            raise

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


def _prop(name: str, doc: str) -> property:
    def get(self: Any) -> Any:
        return getattr(self._a, name)

    return property(get, doc=doc)


# --- command streams --------------------------------------------------------------------------------


class SyncTextReader:
    """A command's output as text, read forward once: ``readline()``, ``read()``,
    ``for line in reader``."""

    def __init__(self, reader: _aio.TextReader, runner: _Runner):
        self._a = reader
        self._r = runner

    at_eof = _prop("at_eof", "``True`` once everything has been read.")
    dropped = _prop("dropped", "Bytes the bounded output log dropped before this reader got them.")

    def readline(self) -> str:
        """The next line with its newline; ``""`` at the end of the output."""
        return self._r.run(self._a.readline())

    def read(self, size: int = -1) -> str:
        """Up to ``size`` characters (everything until the end when ``size < 0``)."""
        return self._r.run(self._a.read(size))

    def readlines(self) -> list[str]:
        """Every remaining line."""
        return self._r.run(self._a.readlines())

    def __iter__(self) -> Iterator[str]:
        while True:
            line = self.readline()
            if not line:
                return
            yield line

    def close(self) -> None:
        """Stop reading (the command is not affected)."""
        self._r.run(self._a.aclose())


class SyncCommandStdin(io.RawIOBase):
    """A command's standard input as a writable :class:`io.RawIOBase`: ``write(bytes)``
    returns once the bytes are in the command's pipe, ``close()`` sends EOF. Wrap it in
    :class:`io.TextIOWrapper` (``write_through=True``) for text."""

    def __init__(self, stdin: _aio.CommandStdin, runner: _Runner):
        super().__init__()
        self._a = stdin
        self._r = runner

    def writable(self) -> bool:
        """Always ``True``."""
        return True

    def write(self, b: Any) -> int:
        """Send ``b`` (bytes-like) to the command; returns its length."""
        if self.closed:
            raise ValueError("write to closed stdin")
        data = bytes(b)
        self._r.run(self._a.send(data))
        return len(data)

    def send(self, data: bytes) -> None:
        """The same as ``write()`` (the asynchronous API's name)."""
        self.write(data)

    def close(self) -> None:
        """Close stdin: the command reads EOF."""
        if not self.closed:
            try:
                if not self._r.closed:
                    self._r.run(self._a.aclose())
            finally:
                super().close()

    def __del__(self) -> None:
        # never do remote I/O from the garbage collector (it may run on the loop's thread)
        try:
            io.RawIOBase.close(self)
        except Exception:
            pass


class SyncCommand:
    """A started command (``create_command()``, ``get_command()``), shaped like
    :class:`subprocess.Popen`: ``stdin`` (a :class:`SyncCommandStdin`), ``stdout`` and
    ``stderr`` (:class:`SyncTextReader`), ``wait()``, ``communicate()``, ``poll()``,
    ``send_signal()``, ``terminate()``, ``kill()``."""

    def __init__(self, command: _aio.Command, runner: _Runner):
        self._a = command
        self._r = runner
        self.stdin: SyncCommandStdin | None = SyncCommandStdin(command.stdin, runner) if command.stdin else None
        self.stdout: SyncTextReader | None = SyncTextReader(command.stdout, runner) if command.stdout else None
        self.stderr: SyncTextReader | None = SyncTextReader(command.stderr, runner) if command.stderr else None

    id = _prop("id", "The command's id (UUIDv7).")
    name = _prop("name", "The executable (``cmd``).")
    args = _prop("args", "The whole argv: ``(cmd, *args)``.")
    cwd = _prop("cwd", "The working directory it runs in.")
    user = _prop("user", "The account it runs as.")
    sudo = _prop("sudo", "``True`` when it runs as root for a user handle.")
    session_id = _prop("session_id", "The session it runs in.")
    sandbox_id = _prop("sandbox_id", "The sandbox it runs in.")
    status = _prop("status", "``running``, ``exited`` or ``failed`` (as of the last reply).")
    pid = _prop("pid", "Its process id inside the sandbox.")
    returncode = _prop("returncode", "The exit status once done (``128 + signal`` after a signal), else ``None``.")
    exit_code = _prop("exit_code", "The same as ``returncode``.")
    signal = _prop("signal", "The signal that ended it, if any.")
    timed_out = _prop("timed_out", "``True`` if ``kill_after`` killed it.")
    started_at = _prop("started_at", "When it started.")
    ended_at = _prop("ended_at", "When it ended (``None`` while running).")

    def model_dump(self, *, mode: Literal["python", "json"] | str = "python") -> dict[str, Any]:
        """The command as the API last described it."""
        return self._a.model_dump(mode=mode)

    def __repr__(self) -> str:
        return repr(self._a).replace("<Command", "<SyncCommand", 1)

    def refresh(self) -> SyncCommand:
        """Fetch the command's current state; returns this handle."""
        self._r.run(self._a.refresh())
        return self

    def poll(self) -> int | None:
        """Refresh and return ``returncode`` (``None`` while it runs)."""
        self.refresh()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait until done and return ``returncode`` (:class:`SandboxTimeoutError` after
        ``timeout`` seconds; the command keeps running)."""
        return self._r.run(self._a.wait(timeout))

    def communicate(self, input: bytes | str | None = None,
                    timeout: float | None = None) -> tuple[str | None, str | None]:
        """Send ``input``, close stdin, read the rest of the output and wait; returns
        ``(stdout, stderr)``."""
        out = self._r.run(self._a.communicate(input, timeout))
        if self.stdin is not None:
            io.RawIOBase.close(self.stdin)
        return out

    def send_signal(self, signal: Any, *, group: bool = True) -> None:
        """Send a signal (name, number, ``signal.Signals`` or :class:`CommandSignal`) to the
        command's process group."""
        self._r.run(self._a.send_signal(signal, group=group))

    def terminate(self) -> None:
        """Send ``SIGTERM``."""
        self._r.run(self._a.terminate())

    def kill(self) -> None:
        """Send ``SIGKILL``."""
        self._r.run(self._a.kill())


# --- files -----------------------------------------------------------------------------------------


class _SyncHandle:
    _a: Any
    _r: _Runner

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._r.run(self._a.__aexit__(exc_type, exc, tb))

    def close(self) -> None:
        """Finish (a writer sends its last chunk)."""
        self._r.run(self._a.aclose())


class SyncSandboxBinaryReader(_SyncHandle):
    """``fs.open(path, "rb")``: ``read(n)``; iterating yields chunks."""

    def __init__(self, handle: _aio.SandboxBinaryReader, runner: _Runner):
        self._a = handle
        self._r = runner

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (the rest when ``size < 0``)."""
        return self._r.run(self._a.read(size))

    def __iter__(self) -> Iterator[bytes]:
        while True:
            try:
                yield self._r.run(self._a.__anext__())
            except StopAsyncIteration:
                return


class SyncSandboxTextReader(_SyncHandle):
    """``fs.open(path, "r")``: ``read()``, ``readline()``, ``for line in f``."""

    def __init__(self, handle: _aio.SandboxTextReader, runner: _Runner):
        self._a = handle
        self._r = runner

    def read(self, size: int = -1) -> str:
        """Up to ``size`` characters (the rest when ``size < 0``)."""
        return self._r.run(self._a.read(size))

    def readline(self) -> str:
        """The next line; ``""`` at the end."""
        return self._r.run(self._a.readline())

    def __iter__(self) -> Iterator[str]:
        while True:
            line = self.readline()
            if not line:
                return
            yield line


class SyncSandboxBinaryWriter(_SyncHandle):
    """``fs.open(path, "wb")``: ``write(data)``; ``close()`` (or leaving ``with``) sends
    the rest."""

    def __init__(self, handle: _aio.SandboxBinaryWriter, runner: _Runner):
        self._a = handle
        self._r = runner

    def write(self, data: bytes) -> int:
        """Queue ``data`` (full 8 MiB chunks are sent at once)."""
        return self._r.run(self._a.write(data))


class SyncSandboxTextWriter(_SyncHandle):
    """``fs.open(path, "w")``: ``write(text)``; ``close()`` sends the rest."""

    def __init__(self, handle: _aio.SandboxTextWriter, runner: _Runner):
        self._a = handle
        self._r = runner

    def write(self, text: str) -> int:
        """Queue ``text``."""
        return self._r.run(self._a.write(text))


class SyncSandboxFilesystemBatch:
    """Writes staged with ``write_bytes``/``write_text`` and uploaded when the ``with``
    block ends without an exception."""

    def __init__(self, batch: _aio.SandboxFilesystemBatch, runner: _Runner):
        self._a = batch
        self._r = runner

    def write_bytes(self, path: Any, data: bytes, *, mode: int | None = None) -> None:
        """Stage ``data`` for ``path``."""
        self._a.write_bytes(path, data, mode=mode)

    def write_text(self, path: Any, text: str, *, encoding: str = "utf-8", errors: str = "strict",
                   mode: int | None = None) -> None:
        """Stage ``text`` for ``path``."""
        self._a.write_text(path, text, encoding=encoding, errors=errors, mode=mode)

    def __enter__(self) -> SyncSandboxFilesystemBatch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: Any) -> None:
        self._r.run(self._a.__aexit__(exc_type))


class SyncSandboxFilesystem:
    """File operations (``handle.fs``); see :class:`rebuno.sandbox.SandboxFilesystem`.
    A missing path raises :class:`SandboxPathNotFoundError`."""

    def __init__(self, fs: _aio.SandboxFilesystem, runner: _Runner):
        self._a = fs
        self._r = runner

    def read_bytes(self, path: Any, *, cwd: Any = None) -> bytes:
        """The whole file as bytes (read in 8 MiB chunks)."""
        return self._r.run(self._a.read_bytes(path, cwd=cwd))

    def read_text(self, path: Any, *, cwd: Any = None, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The whole file decoded as text."""
        return self._r.run(self._a.read_text(path, cwd=cwd, encoding=encoding, errors=errors))

    def write_bytes(self, path: Any, data: bytes, *, cwd: Any = None, mode: int | None = None) -> None:
        """Replace the file's content (created if missing, with ``mode`` when given)."""
        self._r.run(self._a.write_bytes(path, data, cwd=cwd, mode=mode))

    def write_text(self, path: Any, text: str, *, cwd: Any = None, encoding: str = "utf-8",
                   errors: str = "strict", mode: int | None = None) -> None:
        """Replace the file's content with ``text`` encoded."""
        self._r.run(self._a.write_text(path, text, cwd=cwd, encoding=encoding, errors=errors, mode=mode))

    def mkdir(self, path: Any, *, cwd: Any = None, recursive: bool = True, mode: int | None = None) -> None:
        """Create a directory (with parents by default)."""
        self._r.run(self._a.mkdir(path, cwd=cwd, recursive=recursive, mode=mode))

    def stat(self, path: Any, *, cwd: Any = None, follow_symlinks: bool = True) -> DirectoryEntry:
        """The entry at ``path``."""
        return self._r.run(self._a.stat(path, cwd=cwd, follow_symlinks=follow_symlinks))

    def exists(self, path: Any, *, cwd: Any = None) -> bool:
        """Whether ``path`` exists."""
        return self._r.run(self._a.exists(path, cwd=cwd))

    def is_file(self, path: Any, *, cwd: Any = None) -> bool:
        """Whether ``path`` is a regular file."""
        return self._r.run(self._a.is_file(path, cwd=cwd))

    def is_dir(self, path: Any, *, cwd: Any = None) -> bool:
        """Whether ``path`` is a directory."""
        return self._r.run(self._a.is_dir(path, cwd=cwd))

    def listdir(self, path: Any = ".", *, cwd: Any = None) -> list[DirectoryEntry]:
        """The entries of a directory, sorted by name."""
        return self._r.run(self._a.listdir(path, cwd=cwd))

    def remove(self, path: Any, *, cwd: Any = None, recursive: bool = False, missing_ok: bool = False) -> None:
        """Remove an entry (a tree with ``recursive=True``)."""
        self._r.run(self._a.remove(path, cwd=cwd, recursive=recursive, missing_ok=missing_ok))

    def rename(self, source: Any, destination: Any, *, cwd: Any = None, overwrite: bool = True) -> None:
        """Rename or move an entry."""
        self._r.run(self._a.rename(source, destination, cwd=cwd, overwrite=overwrite))

    def open(self, path: Any, mode: str = "r", *, cwd: Any = None, encoding: str | None = None,
             errors: str | None = None, newline: str | None = None, size: int | None = None,
             permissions: int | None = None) -> Any:
        """A sequential file handle (``"r"``, ``"rb"``, ``"w"``, ``"wb"``); use ``with``."""
        h = self._a.open(path, mode, cwd=cwd, encoding=encoding, errors=errors, newline=newline, size=size,
                         permissions=permissions)
        cls = {_aio.SandboxBinaryReader: SyncSandboxBinaryReader, _aio.SandboxTextReader: SyncSandboxTextReader,
               _aio.SandboxBinaryWriter: SyncSandboxBinaryWriter,
               _aio.SandboxTextWriter: SyncSandboxTextWriter}[type(h)]
        return cls(h, self._r)

    def batch(self, *, cwd: Any = None) -> SyncSandboxFilesystemBatch:
        """Staged writes uploaded when the ``with`` block ends."""
        return SyncSandboxFilesystemBatch(self._a.batch(cwd=cwd), self._r)


# --- commands and users on a handle --------------------------------------------------------------


class _SyncExecutor:
    _a: Any
    _r: _Runner

    def run_command(self, cmd: str, args: Sequence[str] | None = None, *, cwd: str | None = None,
                    env: Mapping[str, str] | None = None, sudo: bool = False, kill_after: DurationInput = None,
                    check: bool = False, stdout: TextIO | IO[bytes] | int | None = None,
                    stderr: TextIO | IO[bytes] | int | None = None, capture_output: bool = False,
                    input: str | bytes | None = None) -> CompletedCommand:
        """Run a command to completion, like :func:`subprocess.run`; see
        :meth:`rebuno.sandbox.Sandbox.run_command`."""
        return self._r.run(self._a.run_command(cmd, args, cwd=cwd, env=env, sudo=sudo, kill_after=kill_after,
                                               check=check, stdout=stdout, stderr=stderr,
                                               capture_output=capture_output, input=input))

    def create_command(self, cmd: str, args: Sequence[str] | None = None, *, cwd: str | None = None,
                       env: Mapping[str, str] | None = None, sudo: bool = False, kill_after: DurationInput = None,
                       stdin: int | None = None, stdout: int = subprocess.PIPE,
                       stderr: int = subprocess.PIPE) -> SyncCommand:
        """Start a command and return a :class:`SyncCommand`; see
        :meth:`rebuno.sandbox.Sandbox.create_command`."""
        return SyncCommand(self._r.run(self._a.create_command(cmd, args, cwd=cwd, env=env, sudo=sudo,
                                                              kill_after=kill_after, stdin=stdin, stdout=stdout,
                                                              stderr=stderr)), self._r)

    def run_process(self, cmd: str, args: Sequence[str] | None = None, **kwargs: Any) -> CompletedCommand:
        """Deprecated alias of :meth:`run_command` (emits ``DeprecationWarning``)."""
        _aio._deprecated("run_process", "run_command")
        return self.run_command(cmd, args, **kwargs)

    def create_process(self, cmd: str, args: Sequence[str] | None = None, **kwargs: Any) -> SyncCommand:
        """Deprecated alias of :meth:`create_command` (emits ``DeprecationWarning``)."""
        _aio._deprecated("create_process", "create_command")
        return self.create_command(cmd, args, **kwargs)

    def open_interactive(self, cmd: str = "/bin/bash", args: Sequence[str] | None = None, *, cols: int = 80,
                         rows: int = 24, env: Mapping[str, str] | None = None, cwd: str | None = None,
                         term: str | None = None, sudo: bool = False) -> SyncInteractiveSession:
        """Start ``cmd`` on a pseudo-terminal, scoped to ``with``: ``pty.stream`` is a
        readable and writable :class:`io.RawIOBase`, ``pty.wait(timeout=30)`` the exit code;
        see :meth:`rebuno.sandbox.Sandbox.open_interactive`. An early end of the connection
        raises :class:`SandboxPtyDisconnectedError` (a :class:`ConnectionError`)."""
        return SyncInteractiveSession(self._a.open_interactive(cmd, args, cols=cols, rows=rows, env=env, cwd=cwd,
                                                               term=term, sudo=sudo), self._r)


class _SyncLookup:
    _a: Any
    _r: _Runner

    def get_command(self, command_id: str) -> SyncCommand:
        """Re-attach to a command by id (its readers start from the oldest byte held)."""
        return SyncCommand(self._r.run(self._a.get_command(command_id)), self._r)

    def query_commands(self) -> list[SyncCommand]:
        """The commands the service keeps, oldest first."""
        return [SyncCommand(c, self._r) for c in self._r.run(self._a.query_commands())]

    def get_process(self, process_id: str) -> SyncCommand:
        """Deprecated alias of :meth:`get_command` (emits ``DeprecationWarning``)."""
        _aio._deprecated("get_process", "get_command")
        return self.get_command(process_id)

    def query_processes(self) -> list[SyncCommand]:
        """Deprecated alias of :meth:`query_commands` (emits ``DeprecationWarning``)."""
        _aio._deprecated("query_processes", "query_commands")
        return self.query_commands()


class _SyncUsers:
    _a: Any
    _r: _Runner

    def create_user(self, username: str) -> SyncSandboxUser:
        """Create a Linux account with a private home; see
        :meth:`rebuno.sandbox.Sandbox.create_user`."""
        return SyncSandboxUser(self._r.run(self._a.create_user(username)), self._r)

    def as_user(self, username: str) -> SyncSandboxUser:
        """A handle for an existing account (no request until first use)."""
        return SyncSandboxUser(self._a.as_user(username), self._r)


class SyncSandboxUser(_SyncExecutor):
    """A Linux account in a sandbox; see :class:`rebuno.sandbox.SandboxUser`."""

    def __init__(self, user: _aio.SandboxUser, runner: _Runner):
        self._a = user
        self._r = runner
        self.fs = SyncSandboxFilesystem(user.fs, runner)

    username = _prop("username", "The account name.")
    home_dir = _prop("home_dir", "The account's home (``None`` until looked up; ``/root`` for root).")
    info = _prop("info", "uid, gid, groups, home and shell, once looked up.")

    def resolve(self) -> SandboxUserInfo:
        """Look the account up now."""
        return self._r.run(self._a.resolve())

    def __repr__(self) -> str:
        return repr(self._a).replace("<SandboxUser", "<SyncSandboxUser", 1)


class SyncSandboxRuntimeSession(_SyncExecutor, _SyncLookup, _SyncUsers):
    """One session of a sandbox (``box.session()``): calls are pinned to it and never
    resume. As a context manager (``with box.session() as s:``) it stops exactly this
    session at the end."""

    def __init__(self, sess: _aio.SandboxRuntimeSession, sandbox: SyncSandbox, runner: _Runner):
        self._a = sess
        self._r = runner
        self._sandbox = sandbox
        self.fs = SyncSandboxFilesystem(sess.fs, runner)

    id = _prop("id", "The session id.")
    sandbox_id = _prop("sandbox_id", "The sandbox's id.")
    sandbox_name = _prop("sandbox_name", "The sandbox's name.")
    started_at = _prop("started_at", "When the session started.")

    @property
    def sandbox(self) -> SyncSandbox:
        """The sandbox handle this session came from."""
        return self._sandbox

    def is_active(self) -> bool:
        """Whether this session is still the sandbox's current one."""
        return self._r.run(self._a.is_active())

    def stop(self) -> SyncSandboxRuntimeSession:
        """Stop the sandbox if this session is still its current one."""
        self._r.run(self._a.stop())
        return self

    def extend_timeout(self, duration: DurationInput) -> SyncSandboxRuntimeSession:
        """Add ``duration`` to the session's expiry."""
        self._r.run(self._a.extend_timeout(duration))
        return self

    def __enter__(self) -> SyncSandboxRuntimeSession:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.stop()
        except Exception as e:
            if exc is not None:
                exc.add_note(f"stopping session {self.id} also failed: {e}")
                return
            raise SandboxCleanupError(f"could not stop session {self.id}", cause=e, resource_id=self.id) from e

    def __repr__(self) -> str:
        return repr(self._a).replace("<SandboxRuntimeSession", "<SyncSandboxRuntimeSession", 1)


class SyncSandbox(_SyncExecutor, _SyncLookup, _SyncUsers):
    """A sandbox handle; see :class:`rebuno.sandbox.Sandbox`. It is also a context manager:
    a handle from ``create_sandbox()`` is deleted when the ``with`` block ends (``destroy=False``:
    stopped), one from ``resume_sandbox()``/``get_or_create_sandbox()`` is stopped, one from
    ``get_sandbox()`` is left alone."""

    def __init__(self, box: _aio.Sandbox, runner: _Runner, *, on_exit: str | None = None):
        self._a = box
        self._r = runner
        self._on_exit = on_exit
        self.fs = SyncSandboxFilesystem(box.fs, runner)

    info = _prop("info", "The sandbox's state from the last reply (read-only).")
    id = _prop("id", "The sandbox id (UUIDv7).")
    name = _prop("name", "The sandbox name.")
    status = _prop("status", "``running``, ``paused`` or ``stopped``.")
    metadata = _prop("metadata", "The sandbox's metadata (read-only).")
    tags = _prop("tags", "The same as ``metadata``.")
    env_keys = _prop("env_keys", "Names of the sandbox's environment variables.")
    resources = _prop("resources", "vCPUs, memory (MiB) and pids limit.")
    timeout = _prop("timeout", "How long a session may run (``None``: no limit).")
    execution_time_limit = _prop("execution_time_limit", "The same as ``timeout``.")
    on_timeout = _prop("on_timeout", "``stop`` or ``pause``.")
    image = _prop("image", "The resolved image.")
    created_at = _prop("created_at", "When the sandbox was created.")
    updated_at = _prop("updated_at", "When it last changed.")
    expires_at = _prop("expires_at", "When the running session times out.")
    stopped_at = _prop("stopped_at", "When it stopped.")
    stop_reason = _prop("stop_reason", "Why it stopped.")
    current_session_id = _prop("current_session_id", "The current session's id (``None`` when stopped).")
    usage = _prop("usage", "Memory, pids and OOM kills of the session.")
    region = _prop("region", "The region recorded by this client.")
    network_id = _prop("network_id", "The private network it is attached to, or ``None``.")
    network_policy = _prop("network_policy", "Its egress policy (header values read ``<redacted>``).")
    ports = _prop("ports", "The sandbox ports published on host loopback (see :meth:`domain`).")
    mounts = _prop("mounts", "The Drives mounted at the next session: ``{path: DriveMount}``.")
    source = _prop("source", "Where the sandbox's files came from (snapshot, fork, git, tarball) or ``None``.")
    snapshot_expiration = _prop("snapshot_expiration", "The default expiration of its snapshots.")
    persistent = _prop("persistent", "Always ``True``.")

    def model_dump(self, *, mode: Literal["python", "json"] | str = "python") -> dict[str, Any]:
        """The sandbox's state as data."""
        return self._a.model_dump(mode=mode)

    def __repr__(self) -> str:
        return repr(self._a).replace("<Sandbox", "<SyncSandbox", 1)

    def refresh(self) -> SyncSandbox:
        """Re-read the sandbox's state."""
        self._r.run(self._a.refresh())
        return self

    def stop(self) -> SyncSandbox:
        """End every process and keep the files."""
        self._r.run(self._a.stop())
        return self

    def pause(self) -> SyncSandbox:
        """Freeze every process (memory stays resident)."""
        self._r.run(self._a.pause())
        return self

    def resume(self) -> SyncSandbox:
        """Thaw or restart the sandbox."""
        self._r.run(self._a.resume())
        return self

    def delete(self) -> None:
        """Stop the sandbox and remove its files."""
        self._r.run(self._a.delete())

    def destroy(self) -> SyncSandbox:
        """The same as ``delete()``; returns this handle."""
        self.delete()
        return self

    def extend_timeout(self, duration: DurationInput) -> SyncSandbox:
        """Add ``duration`` to ``expires_at`` (the sandbox must be running)."""
        self._r.run(self._a.extend_timeout(duration))
        return self

    def extend_execution_time_limit(self, duration: DurationInput) -> SyncSandbox:
        """The same as ``extend_timeout()``."""
        return self.extend_timeout(duration)

    def update(self, **kwargs: Any) -> SyncSandbox:
        """Change the configuration; the arguments of :meth:`rebuno.sandbox.Sandbox.update`."""
        self._r.run(self._a.update(**kwargs))
        return self

    def session(self) -> SyncSandboxRuntimeSession:
        """The current session, pinned (resumes the sandbox if needed). ``with
        box.session() as s:`` stops exactly that session at the end."""
        return SyncSandboxRuntimeSession(self._r.run(self._a.session()._acquire()), self, self._r)

    def snapshot(self, *, expiration: DurationInput = None, name: str | None = None) -> SyncSnapshot:
        """Take a snapshot of the sandbox's files, optionally named. Unlike Vercel's, the
        sandbox keeps running (see :meth:`rebuno.sandbox.Sandbox.snapshot`)."""
        return SyncSnapshot(self._r.run(self._a.snapshot(expiration=expiration, name=name)), self._r)

    def list_snapshots(self, *, limit: int | None = None) -> list[SyncSnapshot]:
        """This sandbox's snapshots (unexpired, creation order)."""
        return [SyncSnapshot(x, self._r) for x in self._r.run(self._a.list_snapshots(limit=limit))]

    def domain(self, port: int) -> str:
        """The URL that reaches ``port`` inside the sandbox from this host:
        ``http://127.0.0.1:<host port>``."""
        return self._a.domain(port)

    def __enter__(self) -> SyncSandbox:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._on_exit:
            self._r.run(_aio._cleanup(self._a, self._on_exit, exc))


# --- snapshots and drives --------------------------------------------------------------------------


def _iterate(runner: _Runner, agen: Any, wrap: Any) -> Iterator[Any]:
    """Drive an async iterator from the caller's thread, wrapping each item."""
    try:
        while True:
            try:
                item = runner.run(agen.__anext__())
            except StopAsyncIteration:
                return
            yield wrap(item)
    finally:
        if not runner.closed:
            runner.run(agen.aclose())


class SyncSnapshot:
    """A snapshot of a sandbox's files; see :class:`rebuno.sandbox.Snapshot`."""

    def __init__(self, snap: _aio.Snapshot, runner: _Runner):
        self._a = snap
        self._r = runner

    info = _prop("info", "The snapshot's state from the last reply (read-only).")
    id = _prop("id", "The snapshot id (UUIDv7).")
    snapshot_id = _prop("snapshot_id", "The same as ``id``.")
    source_sandbox_id = _prop("source_sandbox_id", "The id of the sandbox it was taken from.")
    sandbox_id = _prop("sandbox_id", "The same as ``source_sandbox_id``.")
    sandbox_name = _prop("sandbox_name", "The name of the sandbox it was taken from.")
    name = _prop("name", "The snapshot's own name, if it was given one.")
    image = _prop("image", "The image of its sandbox.")
    status = _prop("status", "``created``.")
    size_bytes = _prop("size_bytes", "Always ``None`` (sandboxd does not report it).")
    created_at = _prop("created_at", "When it was taken.")
    expires_at = _prop("expires_at", "When it expires (``None``: never).")

    def model_dump(self, *, mode: Literal["python", "json"] | str = "python") -> dict[str, Any]:
        """The snapshot's state as data."""
        return self._a.model_dump(mode=mode)

    def __repr__(self) -> str:
        return repr(self._a).replace("<Snapshot", "<SyncSnapshot", 1)

    def refresh(self) -> SyncSnapshot:
        """Re-read it (404 ``snapshot_not_found`` once deleted or expired)."""
        self._r.run(self._a.refresh())
        return self

    def delete(self) -> None:
        """Delete the snapshot."""
        self._r.run(self._a.delete())


class SyncDrive:
    """A Sandbox Drive; see :class:`rebuno.sandbox.Drive`."""

    def __init__(self, drive: _aio.Drive, runner: _Runner):
        self._a = drive
        self._r = runner

    def _drive_ref(self) -> str:
        return self._a._drive_ref()

    info = _prop("info", "The drive's state from the last reply (read-only).")
    id = _prop("id", "The drive id (UUIDv7).")
    name = _prop("name", "The drive name.")
    region = _prop("region", "``\"local\"``: a rebuno host is one region.")
    max_size_bytes = _prop("max_size_bytes", "The size limit.")
    max_size_enforced = _prop("max_size_enforced", "Whether the store enforces ``max_size_bytes``.")
    created_at = _prop("created_at", "When the drive was created.")
    updated_at = _prop("updated_at", "When it last changed.")
    initialized = _prop("initialized", "Whether it has committed data.")
    committed_at = _prop("committed_at", "When its data was last committed.")
    parent_drive_id = _prop("parent_drive_id", "The drive it was forked from, or ``None``.")
    root_drive_id = _prop("root_drive_id", "The first drive of its fork line, or ``None``.")
    attached_to = _prop("attached_to", "The sandbox that mounts it read-write now, or ``None``.")

    def model_dump(self, *, mode: Literal["python", "json"] | str = "python") -> dict[str, Any]:
        """The drive's state as data."""
        return self._a.model_dump(mode=mode)

    def __repr__(self) -> str:
        return repr(self._a).replace("<Drive", "<SyncDrive", 1)

    def snapshot(self) -> DriveMount:
        """A read-only, point-in-time mount of the drive's committed data (no I/O)."""
        return self._a.snapshot()

    def refresh(self) -> SyncDrive:
        """Re-read the drive."""
        self._r.run(self._a.refresh())
        return self

    def fork(self, *, name: str) -> SyncDrive:
        """A new independent drive with this one's committed data."""
        return SyncDrive(self._r.run(self._a.fork(name=name)), self._r)

    def delete(self) -> None:
        """Delete the drive (409 ``drive_attached`` while a live sandbox mounts it)."""
        self._r.run(self._a.delete())


# --- the client ------------------------------------------------------------------------------------


class SyncSandboxClient:
    """A standalone synchronous client: ``SyncSandboxClient.create(options=...)`` (no I/O)
    and ``client.close()`` at shutdown (or ``with``). It never reads or changes the
    ambient ``session()``."""

    def __init__(self, base_url: str | None = None, *, options: SandboxServiceOptions | None = None,
                 timeout: float | None = None, token: str | None = None):
        self._client = _aio.SandboxClient(base_url, options=options, timeout=timeout, token=token)
        self._r = _Runner()

    @classmethod
    def create(cls, *, options: SandboxServiceOptions | None = None,
               base_url: str | None = None) -> SyncSandboxClient:
        """Build a client (no I/O)."""
        return cls(base_url, options=options)

    @property
    def base_url(self) -> str:
        """The sandboxd URL."""
        return self._client.base_url

    @property
    def region(self) -> str | None:
        """The default region recorded on new sandboxes."""
        return self._client.region

    @property
    def options(self) -> SandboxServiceOptions:
        """The client's options."""
        return self._client.options

    @property
    def closed(self) -> bool:
        """``True`` after ``close()``."""
        return self._r.closed

    def create_sandbox(self, *, destroy: bool = True, **kwargs: Any) -> SyncSandbox:
        """Create a sandbox now and return its handle; ``with`` it to delete it at the end
        (``destroy=False``: stop). Arguments: those of
        :meth:`rebuno.sandbox.SandboxClient.create_sandbox`."""
        op = self._client.create_sandbox(destroy=destroy, **kwargs)
        return SyncSandbox(self._r.run(op._run()), self._r, on_exit="destroy" if destroy else "stop")

    def get_sandbox(self, name: str | None = None, *, id: str | None = None) -> SyncSandbox:
        """The sandbox with that name (or ``id=``), without resuming it."""
        return SyncSandbox(self._r.run(self._client.get_sandbox(name, id=id)), self._r)

    def resume_sandbox(self, *, name: str) -> SyncSandbox:
        """Resume the named sandbox; ``with`` it to stop it at the end."""
        return SyncSandbox(self._r.run(self._client.resume_sandbox(name=name)._run()), self._r, on_exit="stop")

    def get_or_create_sandbox(self, *, name: str, **kwargs: Any) -> SyncSandbox:
        """The named sandbox, created if missing; ``with`` it to stop it at the end."""
        op = self._client.get_or_create_sandbox(name=name, **kwargs)
        return SyncSandbox(self._r.run(op._run()), self._r, on_exit="stop")

    def query_sandboxes(self, *, query: SandboxQuery | None = None, metadata: Mapping[str, str] | None = None,
                        tags: Mapping[str, str] | None = None, state: Any = None, page_size: int | None = None,
                        cursor: str | None = None) -> Iterator[SyncSandbox]:
        """Iterate over matching sandboxes (creation order); pages are fetched as needed."""
        agen = self._client.query_sandboxes(query=query, metadata=metadata, tags=tags, state=state,
                                            page_size=page_size, cursor=cursor)
        try:
            while True:
                try:
                    box = self._r.run(agen.__anext__())
                except StopAsyncIteration:
                    return
                yield SyncSandbox(box, self._r)
        finally:
            if not self._r.closed:
                self._r.run(agen.aclose())  # type: ignore[attr-defined]

    def list_sandboxes(self, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None,
                       state: Any = None, limit: int | None = None) -> list[SyncSandbox]:
        """All matching sandboxes as a list."""
        boxes = self._r.run(self._client.list_sandboxes(metadata=metadata, tags=tags, state=state, limit=limit))
        return [SyncSandbox(b, self._r) for b in boxes]

    def delete_sandbox(self, *, name: str) -> None:
        """Delete the named sandbox."""
        self._r.run(self._client.delete_sandbox(name=name))

    def health(self) -> dict[str, Any]:
        """``GET /v1/health``."""
        return self._r.run(self._client.health())

    def fork_sandbox(self, *, source_sandbox: str | SyncSandbox, name: str | None = None,
                     destroy: bool = True, **kwargs: Any) -> SyncSandbox:
        """Fork a sandbox now and return the new handle; ``with`` it to delete the fork at the
        end (``destroy=False``: stop). Arguments: those of
        :meth:`rebuno.sandbox.SandboxClient.fork_sandbox`."""
        src = source_sandbox._a if isinstance(source_sandbox, SyncSandbox) else source_sandbox
        op = self._client.fork_sandbox(source_sandbox=src, name=name, destroy=destroy, **kwargs)
        return SyncSandbox(self._r.run(op._run()), self._r, on_exit="destroy" if destroy else "stop")

    def get_snapshot(self, *, snapshot_id: str) -> SyncSnapshot:
        """The snapshot with that id (404 ``snapshot_not_found`` if there is none)."""
        return SyncSnapshot(self._r.run(self._client.get_snapshot(snapshot_id=snapshot_id)), self._r)

    def query_snapshots(self, *, sandbox: Any = None, page_size: int | None = None,
                        cursor: str | None = None, name: str | None = None) -> Iterator[SyncSnapshot]:
        """Iterate over unexpired snapshots, only those of ``sandbox`` and named ``name``
        if given."""
        if isinstance(sandbox, SyncSandbox):
            sandbox = sandbox.id
        agen = self._client.query_snapshots(sandbox=sandbox, page_size=page_size, cursor=cursor,
                                            name=name)
        return _iterate(self._r, agen, lambda x: SyncSnapshot(x, self._r))

    def delete_snapshot(self, *, snapshot_id: str) -> None:
        """Delete a snapshot."""
        self._r.run(self._client.delete_snapshot(snapshot_id=snapshot_id))

    def import_image(self, path: Any, *, type: str | None = None,
                     ref: str | None = None) -> tuple[dict[str, Any], bool]:
        """Import an image from a host path: ``(image, created)``; see
        :meth:`rebuno.sandbox.SandboxClient.import_image`."""
        return self._r.run(self._client.import_image(path, type=type, ref=ref))

    def build_image(self, recipe: str, context: Any = None, *, ref: str | None = None,
                    network_policy: Any = None, on_log: Any = None) -> dict[str, Any]:
        """Build an image from a Dockerfile-like recipe; see
        :meth:`rebuno.sandbox.SandboxClient.build_image`."""
        return self._r.run(self._client.build_image(recipe, context, ref=ref,
                                                         network_policy=network_policy,
                                                         on_log=on_log))

    def list_images(self) -> list[dict[str, Any]]:
        """The imported images."""
        return self._r.run(self._client.list_images())

    def get_image(self, ref: str) -> dict[str, Any]:
        """One image by reference, digest or ``"host"``."""
        return self._r.run(self._client.get_image(ref))

    def delete_image(self, ref: str) -> None:
        """Delete an imported image (409 ``image_in_use`` while used)."""
        self._r.run(self._client.delete_image(ref))

    def pull_image(self, ref: str, *, on_progress: Any = None) -> dict[str, Any]:
        """Pull an image from its OCI registry into sandboxd and return it; see
        :meth:`rebuno.sandbox.SandboxClient.pull_image` (``on_progress(job)`` is called on
        this thread's event loop runner, so it should be quick)."""
        return self._r.run(self._client.pull_image(ref, on_progress=on_progress))

    def get_or_create_drive(self, *, name: str, max_size_bytes: int | None = None,
                            region: Any = None) -> tuple[SyncDrive, bool]:
        """The drive called ``name`` and whether this call created it."""
        drive, created = self._r.run(self._client.get_or_create_drive(name=name, max_size_bytes=max_size_bytes,
                                                                      region=region))
        return SyncDrive(drive, self._r), created

    def get_drive(self, *, name_or_id: str) -> SyncDrive:
        """The drive with that name or id (404 ``not_found`` if there is none)."""
        return SyncDrive(self._r.run(self._client.get_drive(name_or_id=name_or_id)), self._r)

    def fork_drive(self, *, source: Any, name: str) -> SyncDrive:
        """Fork a drive's committed data into a new drive ``name``."""
        if isinstance(source, SyncDrive):
            source = source._a
        return SyncDrive(self._r.run(self._client.fork_drive(source=source, name=name)), self._r)

    def delete_drive(self, *, name: str) -> None:
        """Delete the drive with that name or id."""
        if isinstance(name, SyncDrive):
            name = name.id
        self._r.run(self._client.delete_drive(name=name))

    def query_drives(self, query: DriveQuery | None = None, *, name_prefix: str | None = None,
                     page_size: int | None = None, cursor: str | None = None) -> Iterator[SyncDrive]:
        """Iterate over drives (``DriveQueryByCreatedAt`` by default)."""
        agen = self._client.query_drives(query, name_prefix=name_prefix, page_size=page_size, cursor=cursor)
        return _iterate(self._r, agen, lambda x: SyncDrive(x, self._r))

    def close(self) -> None:
        """Close connections and stop the private loop; handles made by it stop working."""
        if self._r.closed:
            return
        self._r.run(self._client.aclose())
        self._r.close()

    def __enter__(self) -> SyncSandboxClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --- module-level functions (ambient client) -------------------------------------------------


def create_sandbox(**kwargs: Any) -> SyncSandbox:
    """Create a sandbox with the ambient ``session()`` client; see
    :meth:`SyncSandboxClient.create_sandbox`."""
    return current_sync_client().create_sandbox(**kwargs)


def get_sandbox(name: str | None = None, *, id: str | None = None) -> SyncSandbox:
    """The named sandbox (ambient client), without resuming it."""
    return current_sync_client().get_sandbox(name, id=id)


def resume_sandbox(*, name: str) -> SyncSandbox:
    """Resume the named sandbox (ambient client); ``with`` stops it at the end."""
    return current_sync_client().resume_sandbox(name=name)


def get_or_create_sandbox(*, name: str, **kwargs: Any) -> SyncSandbox:
    """The named sandbox, created if missing (ambient client)."""
    return current_sync_client().get_or_create_sandbox(name=name, **kwargs)


def query_sandboxes(*, query: SandboxQuery | None = None, metadata: Mapping[str, str] | None = None,
                    tags: Mapping[str, str] | None = None, state: Any = None, page_size: int | None = None,
                    cursor: str | None = None) -> Iterator[SyncSandbox]:
    """Iterate over matching sandboxes (ambient client)."""
    return current_sync_client().query_sandboxes(query=query, metadata=metadata, tags=tags, state=state,
                                                 page_size=page_size, cursor=cursor)


def list_sandboxes(*, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None,
                   state: Any = None, limit: int | None = None) -> list[SyncSandbox]:
    """All matching sandboxes as a list (ambient client)."""
    return current_sync_client().list_sandboxes(metadata=metadata, tags=tags, state=state, limit=limit)


def delete_sandbox(*, name: str) -> None:
    """Delete the named sandbox (ambient client)."""
    current_sync_client().delete_sandbox(name=name)


def fork_sandbox(*, source_sandbox: Any, name: str | None = None, **kwargs: Any) -> SyncSandbox:
    """Fork a sandbox (ambient client); ``with`` deletes the fork at the end."""
    return current_sync_client().fork_sandbox(source_sandbox=source_sandbox, name=name, **kwargs)


def get_or_create_drive(*, name: str, max_size_bytes: int | None = None,
                        region: Any = None) -> tuple[SyncDrive, bool]:
    """The drive called ``name`` and whether this call created it (ambient client)."""
    return current_sync_client().get_or_create_drive(name=name, max_size_bytes=max_size_bytes, region=region)


def get_drive(*, name_or_id: str) -> SyncDrive:
    """The drive with that name or id (ambient client)."""
    return current_sync_client().get_drive(name_or_id=name_or_id)


def fork_drive(*, source: Any, name: str) -> SyncDrive:
    """Fork a drive's committed data into a new drive (ambient client)."""
    return current_sync_client().fork_drive(source=source, name=name)


def delete_drive(*, name: str) -> None:
    """Delete the drive with that name or id (ambient client)."""
    current_sync_client().delete_drive(name=name)


def query_drives(query: DriveQuery | None = None, *, name_prefix: str | None = None,
                 page_size: int | None = None, cursor: str | None = None) -> Iterator[SyncDrive]:
    """Iterate over drives (ambient client)."""
    return current_sync_client().query_drives(query, name_prefix=name_prefix, page_size=page_size, cursor=cursor)


def get_snapshot(*, snapshot_id: str) -> SyncSnapshot:
    """The snapshot with that id (ambient client)."""
    return current_sync_client().get_snapshot(snapshot_id=snapshot_id)


def query_snapshots(*, sandbox: Any = None, page_size: int | None = None,
                    cursor: str | None = None, name: str | None = None) -> Iterator[SyncSnapshot]:
    """Iterate over unexpired snapshots (ambient client)."""
    return current_sync_client().query_snapshots(sandbox=sandbox, page_size=page_size, cursor=cursor,
                                                 name=name)


def delete_snapshot(*, snapshot_id: str) -> None:
    """Delete a snapshot (ambient client)."""
    current_sync_client().delete_snapshot(snapshot_id=snapshot_id)


SyncProcess = SyncCommand
SyncProcessStdin = SyncCommandStdin
CompletedProcess = CompletedCommand
ProcessStatus = CommandStatus
ProcessSignal = CommandSignal

__all__ = [
    "CURRENT_REGION",
    "CommandSignal",
    "CommandStatus",
    "CompletedCommand",
    "CompletedProcess",
    "DirectoryEntry",
    "DriveInfo",
    "DriveMount",
    "DriveQuery",
    "DriveQueryByCreatedAt",
    "DriveQueryByName",
    "DriveQueryByUpdatedAt",
    "DurationInput",
    "GitSource",
    "ImageSource",
    "NetworkPolicy",
    "ProcessSignal",
    "ProcessStatus",
    "RegionInput",
    "SandboxApiError",
    "SandboxCleanupError",
    "SandboxCommandError",
    "SandboxCommandNotFoundError",
    "SandboxConnectionError",
    "SandboxEndOfStream",
    "SandboxError",
    "SandboxExecution",
    "SandboxFileExistsError",
    "SandboxFilesystemError",
    "SandboxFilesystemOperations",
    "SandboxInfo",
    "SandboxIsADirectoryError",
    "SandboxLimitError",
    "SandboxNotFoundError",
    "SandboxPathNotFoundError",
    "SandboxPermissionError",
    "SandboxPtyDisconnectedError",
    "SandboxQuery",
    "SandboxResources",
    "SandboxResponseError",
    "SandboxServiceOptions",
    "SandboxSessionEndedError",
    "SandboxSessionPausedError",
    "SandboxSource",
    "SandboxStateError",
    "SandboxStatus",
    "SandboxStdinClosedError",
    "SandboxStreamError",
    "SandboxTimeoutError",
    "SandboxUsage",
    "SandboxUserAlreadyExistsError",
    "SandboxUserInfo",
    "SandboxUserNotFoundError",
    "SnapshotInfo",
    "SnapshotSource",
    "SyncCommand",
    "SyncCommandStdin",
    "SyncDrive",
    "SyncInteractiveSession",
    "SyncInteractiveStream",
    "SyncProcess",
    "SyncProcessStdin",
    "SyncSandbox",
    "SyncSandboxBinaryReader",
    "SyncSandboxBinaryWriter",
    "SyncSandboxClient",
    "SyncSandboxExecution",
    "SyncSandboxFilesystem",
    "SyncSandboxFilesystemBatch",
    "SyncSandboxFilesystemOperations",
    "SyncSandboxRuntimeSession",
    "SyncSandboxTextReader",
    "SyncSandboxTextWriter",
    "SyncSandboxUser",
    "SyncSnapshot",
    "SyncTextReader",
    "TarballSource",
    "create_sandbox",
    "delete_drive",
    "delete_sandbox",
    "delete_snapshot",
    "fork_drive",
    "fork_sandbox",
    "get_drive",
    "get_or_create_drive",
    "get_or_create_sandbox",
    "get_sandbox",
    "get_snapshot",
    "list_sandboxes",
    "query_drives",
    "query_sandboxes",
    "query_snapshots",
    "resume_sandbox",
    "session",
]
