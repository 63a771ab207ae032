"""Exceptions of the sandbox client (``rebuno.sandbox``).

Hierarchy::

    RebunoError
    └── SandboxError
        ├── SandboxApiError               sandboxd answered with an error (status_code, code, message, field)
        │   ├── SandboxNotFoundError          404 sandbox_not_found
        │   ├── SandboxStateError             409: the sandbox or session is not in a state that allows this
        │   │   ├── SandboxSessionEndedError      409 session_ended (an explicit session never resumes)
        │   │   └── SandboxSessionPausedError     409 session_paused
        │   ├── SandboxCommandError           command_not_found, no_such_command, command_finished, ...
        │   │   ├── SandboxCommandNotFoundError   also a FileNotFoundError, as subprocess raises
        │   │   └── SandboxStdinClosedError       also a BrokenPipeError
        │   ├── SandboxFilesystemError        file API errors
        │   │   ├── SandboxPathNotFoundError      404 path_not_found (also a FileNotFoundError)
        │   │   ├── SandboxPermissionError        403 (also a PermissionError)
        │   │   ├── SandboxFileExistsError        409 already_exists (also a FileExistsError)
        │   │   └── SandboxIsADirectoryError      400 is_a_directory (also an IsADirectoryError)
        │   ├── SandboxUserAlreadyExistsError 409 user_exists
        │   ├── SandboxUserNotFoundError      404 user_not_found
        │   └── SandboxLimitError             429 too_many_sandboxes / too_many_commands / stdin_full / too_many_ptys
        ├── SandboxConnectionError        sandboxd could not be reached (also a rebuno NetworkError)
        │   └── SandboxPtyDisconnectedError   a terminal's connection ended before its exit (also a ConnectionError)
        ├── SandboxTimeoutError           a client-side wait ran out (also a TimeoutError)
        ├── SandboxCleanupError           leaving a managed context could not stop/delete the sandbox
        ├── SandboxResponseError          a reply did not have the documented shape
        └── SandboxStreamError            a command's input or output stream cannot be used
            └── SandboxEndOfStream            a terminal stream's receive() after the end (also an EOFError)

Every :class:`SandboxApiError` carries the HTTP ``status_code`` and the API's stable ``code``
(``docs/sandbox-api.md``), so callers can branch on ``err.code == "name_taken"`` without
parsing messages. ``SandboxApiError`` is also a :class:`rebuno.APIError`.
"""

from __future__ import annotations

import json
from typing import Any

from rebuno.errors import APIError, NetworkError, RebunoError


class SandboxError(RebunoError):
    """Base class of every exception the sandbox client raises."""


class SandboxApiError(SandboxError, APIError):
    """sandboxd answered with an error envelope ``{"error": {code, message, field}}``.

    ``status_code`` is the HTTP status, ``code`` the API's stable error code, ``message`` the
    human-readable text, ``field`` the input it concerns (or ``None``), ``data`` the parsed
    reply body.
    """

    def __init__(self, message: str, *, status_code: int = 500, code: str = "internal_error",
                 field: str | None = None, data: Any = None):
        APIError.__init__(self, message, code, status_code, field)
        self.data = data

    @property
    def status(self) -> int:
        """The HTTP status (the same as ``status_code``)."""
        return self.status_code


class SandboxNotFoundError(SandboxApiError):
    """404 ``sandbox_not_found``: no sandbox has that id or name."""


class SandboxStateError(SandboxApiError):
    """409: the sandbox (or the pinned session) is not in a state that allows the call
    (``sandbox_stopped``, ``sandbox_not_running``, ``busy``, ...)."""


class SandboxSessionEndedError(SandboxStateError):
    """409 ``session_ended``: the call was pinned to a session that is over. Explicit
    sessions never resume; use the sandbox handle (which resumes lazily) or a new session."""


class SandboxSessionPausedError(SandboxStateError):
    """409 ``session_paused``: the call was pinned to a session that is paused."""


class SandboxCommandError(SandboxApiError):
    """A command could not be started, found or signalled (``exec_failed``,
    ``no_such_command``, ``command_finished``, ``command_gone``, ...)."""


class SandboxCommandNotFoundError(SandboxCommandError, FileNotFoundError):
    """400 ``command_not_found``: the executable is not on the command's ``PATH``.

    Also a :class:`FileNotFoundError`, which is what :func:`subprocess.run` raises."""


class SandboxStdinClosedError(SandboxCommandError, BrokenPipeError):
    """409 ``stdin_closed``: the command closed its stdin or finished before the bytes were
    written. Also a :class:`BrokenPipeError`, as writing to a dead pipe is locally."""


class SandboxFilesystemError(SandboxApiError):
    """A file operation failed (``not_a_file``, ``symlink_loop``, ``directory_not_empty``,
    ``cross_device``, ``no_space``, ...)."""


class SandboxPathNotFoundError(SandboxFilesystemError, FileNotFoundError):
    """404 ``path_not_found`` (or 400 ``cwd_not_found`` for a command): the path does not
    exist inside the sandbox. Also a :class:`FileNotFoundError`."""


class SandboxPermissionError(SandboxFilesystemError, PermissionError):
    """403 ``permission_denied`` / ``forbidden_path`` / ``read_only`` / ``symlink_refused``
    (an upload or mkdir for a user through a link another account than root made): the
    path may not be used (by this user). Also a :class:`PermissionError`."""


class SandboxFileExistsError(SandboxFilesystemError, FileExistsError):
    """409 ``already_exists``: the destination exists. Also a :class:`FileExistsError`."""


class SandboxIsADirectoryError(SandboxFilesystemError, IsADirectoryError):
    """400 ``is_a_directory``: a file operation named a directory."""


class SandboxUserAlreadyExistsError(SandboxApiError):
    """409 ``user_exists`` (or ``group_exists``/``home_exists``) from ``create_user()``.

    ``username`` is the account; pass it to ``as_user()`` to use the existing account."""

    def __init__(self, message: str, *, status_code: int = 409, code: str = "user_exists",
                 field: str | None = None, data: Any = None, username: str = ""):
        super().__init__(message, status_code=status_code, code=code, field=field, data=data)
        self.username = username


class SandboxUserNotFoundError(SandboxApiError):
    """404 ``user_not_found``: the account does not exist in the sandbox."""


class SandboxLimitError(SandboxApiError):
    """429: a limit of the service was reached (``too_many_sandboxes``,
    ``too_many_commands``, ``stdin_full``, ``too_many_ptys``)."""


class SandboxConnectionError(SandboxError, NetworkError):
    """sandboxd could not be reached (refused, reset, timed out). ``sent`` says whether the
    request may have reached the service before the failure."""

    def __init__(self, message: str, *, sent: bool = False):
        NetworkError.__init__(self, message, sent=sent)


class SandboxTimeoutError(SandboxError, TimeoutError):
    """A client-side wait (``Command.wait(timeout=...)``, ``communicate(timeout=...)``) ran
    out. The command keeps running."""


class SandboxCleanupError(SandboxError):
    """Leaving a managed ``create_sandbox()``/``session()`` context could not stop or delete
    what it owns. ``cause`` is the underlying exception."""

    def __init__(self, message: str, *, cause: BaseException | None = None, resource_id: str = ""):
        super().__init__(message)
        self.cause = cause
        self.resource_id = resource_id


class SandboxResponseError(SandboxError):
    """A reply from sandboxd did not have the documented shape."""

    def __init__(self, message: str, *, data: Any = None):
        super().__init__(message)
        self.data = data


class SandboxStreamError(SandboxError):
    """A command's stdin/stdout stream cannot be used (closed locally, not piped, ...)."""


class SandboxEndOfStream(SandboxStreamError, EOFError):
    """``receive()`` on an interactive terminal's stream after its process exited and every
    byte was read (what ``anyio.EndOfStream`` says for an anyio stream). Also an
    :class:`EOFError`. ``read()`` returns ``b""`` instead, and ``async for`` stops."""


class SandboxPtyDisconnectedError(SandboxConnectionError, ConnectionError):
    """An interactive terminal's connection ended before the daemon reported the process's
    exit, even with a clean WebSocket close: reading its stream and ``wait()`` raise this
    rather than looking like a normal end (the process was hung up, or the daemon went away).
    Also a :class:`ConnectionError`, what the synchronous stream raises by the spec; the
    asynchronous stream raises it where an anyio stream would raise
    ``anyio.BrokenResourceError``. ``close_code`` is the WebSocket close status, if a close
    frame came."""

    def __init__(self, message: str, *, close_code: int | None = None):
        super().__init__(message, sent=True)
        self.close_code = close_code


_BY_CODE: dict[str, type[SandboxApiError]] = {
    "sandbox_not_found": SandboxNotFoundError,
    "session_ended": SandboxSessionEndedError,
    "session_paused": SandboxSessionPausedError,
    "sandbox_stopped": SandboxStateError,
    "sandbox_not_running": SandboxStateError,
    "busy": SandboxStateError,
    "command_not_found": SandboxCommandNotFoundError,
    "exec_failed": SandboxCommandError,
    "spawn_failed": SandboxCommandError,
    "no_such_command": SandboxCommandError,
    "command_finished": SandboxCommandError,
    "command_gone": SandboxCommandError,
    "stdin_closed": SandboxStdinClosedError,
    "cwd_not_found": SandboxPathNotFoundError,
    "path_not_found": SandboxPathNotFoundError,
    "permission_denied": SandboxPermissionError,
    "forbidden_path": SandboxPermissionError,
    "read_only": SandboxPermissionError,
    "symlink_refused": SandboxPermissionError,
    "already_exists": SandboxFileExistsError,
    "is_a_directory": SandboxIsADirectoryError,
    "not_a_file": SandboxFilesystemError,
    "symlink_loop": SandboxFilesystemError,
    "cross_device": SandboxFilesystemError,
    "directory_not_empty": SandboxFilesystemError,
    "file_too_large": SandboxFilesystemError,
    "no_space": SandboxFilesystemError,
    "user_exists": SandboxUserAlreadyExistsError,
    "group_exists": SandboxUserAlreadyExistsError,
    "home_exists": SandboxUserAlreadyExistsError,
    "user_not_found": SandboxUserNotFoundError,
    "too_many_sandboxes": SandboxLimitError,
    "too_many_commands": SandboxLimitError,
    "stdin_full": SandboxLimitError,
    "too_many_ptys": SandboxLimitError,
    "no_such_pty": SandboxCommandError,
    "pty_attached": SandboxStateError,
    "pty_not_running": SandboxStateError,
    "pty_starting": SandboxStateError,
}


def api_error(status: int, body: bytes, *, context: str = "", hint: str = "") -> SandboxApiError:
    """Turn an error reply into the matching :class:`SandboxApiError` subclass (``hint``:
    what the client adds in parentheses)."""
    code, message, field = "", "", None
    data: Any = None
    try:
        data = json.loads(body) if body else None
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        err = data["error"]
        code = str(err.get("code") or "")
        message = str(err.get("message") or "")
        field = err.get("field") or None
    if not message:
        message = body.decode("utf-8", errors="replace")[:500] or f"HTTP {status}"
    if not code:
        code = "internal_error" if status >= 500 else f"http_{status}"
    if context:
        message = f"{context}: {message}"
    if hint:
        message = f"{message} ({hint})"
    cls = _BY_CODE.get(code, SandboxApiError)
    return cls(message, status_code=status, code=code, field=field, data=data)
