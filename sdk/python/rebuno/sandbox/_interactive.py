"""Interactive terminals: ``open_interactive()`` (spec 004 "Interactive PTY sessions").

A terminal is a process on a pseudo-terminal inside a sandbox, created with
``POST /v1/sandboxes/:ref/ptys`` and carried over one WebSocket
(``GET .../ptys/:id/ws``, ``docs/sandbox-api.md`` "Terminals"): binary frames are raw
terminal bytes both ways, text frames JSON control messages (``resize``, ``signal`` from
the client; ``exit`` and ``error`` from the daemon).

The WebSocket client (RFC 6455, version 13, no subprotocol, no extension) is written here
on asyncio streams: the handshake with its ``Sec-WebSocket-Accept`` check, masked client
frames, fragmented messages in and out, ping/pong, and the close handshake. It reuses the
SDK's HTTP transport for the base URL, the default headers and the error envelope.

Objects:

* :class:`InteractiveSession`: ``async with box.open_interactive(...) as pty``. ``pty.stream``
  is an :class:`InteractiveStream` (shaped like ``anyio.abc.ByteStream``); the session has
  ``resize()``, ``send_signal()`` and ``wait()``.
* :class:`SyncInteractiveSession` / :class:`SyncInteractiveStream`: the blocking mirror;
  the stream is an :class:`io.RawIOBase`.

A connection that ends before the daemon sent the process's exit, even with a clean close
frame, is an error (:class:`SandboxPtyDisconnectedError`, also a :class:`ConnectionError`),
never a normal end of the stream.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import json
import logging
import os
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from rebuno.errors import NetworkError
from rebuno.sandbox._api import Api, quote
from rebuno.sandbox._errors import (
    SandboxApiError,
    SandboxEndOfStream,
    SandboxError,
    SandboxPtyDisconnectedError,
    SandboxResponseError,
    SandboxStreamError,
    SandboxTimeoutError,
)
from rebuno.sandbox._models import signal_value

if TYPE_CHECKING:  # pragma: no cover
    from rebuno.sandbox.sync import _Runner

logger = logging.getLogger("rebuno.sandbox.pty")

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, section 1.3
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

DIM_MAX = 1000              # cols and rows: 1-1000 (the API's rule)
SEND_CHUNK = 64 << 10       # terminal input per message (the daemon takes messages of at most 1 MiB)
MAX_MESSAGE = 16 << 20      # the largest message taken from the daemon (it sends at most 16 KiB)
BUFFER_LIMIT = 1 << 20      # output held for the stream before the connection is left unread
CLOSE_WAIT = 2.0            # how long a close waits for the daemon's close frame
HEAD_MAX = 64 << 10         # the handshake reply's head


def pty_body(body: dict[str, Any], *, cols: int, rows: int, term: str | None) -> dict[str, Any]:
    """Add the terminal's fields to a command body (``cmd``, ``args``, ``cwd``, ``env``,
    ``user``, ``sudo``, ``session``), checking them before any request."""
    body["cols"] = _dim(cols, "cols")
    body["rows"] = _dim(rows, "rows")
    if term is not None:
        if not isinstance(term, str) or not term:
            raise TypeError("term must be a non-empty string")
        body["term"] = term
    return body


def _dim(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an integer, not {type(v).__name__}")
    if not 1 <= v <= DIM_MAX:
        raise ValueError(f"{name} must be from 1 to {DIM_MAX}, not {v}")
    return v


# --- WebSocket (RFC 6455), client side -----------------------------------------------------------


class _ProtocolError(Exception):
    """The daemon broke the WebSocket protocol; ``code`` is the close status to send."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def _accept(key: str) -> str:
    return base64.b64encode(hashlib.sha1((key + GUID).encode("ascii")).digest()).decode("ascii")


def _mask(data: bytes, key: bytes) -> bytes:
    n = len(data)
    if not n:
        return b""
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(k, "little")).to_bytes(n, "little")


def _frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    """One client frame: always masked (section 5.3)."""
    n = len(payload)
    head = bytearray([(0x80 if fin else 0) | opcode])
    if n < 126:
        head.append(0x80 | n)
    elif n < 1 << 16:
        head.append(0x80 | 126)
        head += struct.pack(">H", n)
    else:
        head.append(0x80 | 127)
        head += struct.pack(">Q", n)
    key = os.urandom(4)
    return bytes(head) + key + _mask(payload, key)


def _tokens(value: str) -> set[str]:
    return {t.strip().lower() for t in value.split(",") if t.strip()}


class WebSocket:
    """One client WebSocket connection: ``connect()``, ``send()``, ``recv()``, ``close()``.

    ``recv()`` answers pings itself and returns whole messages (fragments joined), or
    ``(OP_CLOSE, payload)`` once the peer's close frame arrived (it is answered). Writes
    are serialized, so messages of concurrent senders never interleave their fragments.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._reader = reader
        self._writer = writer
        self._wlock = asyncio.Lock()
        self.close_sent = False
        self.close_received = False
        self.close_code: int | None = None
        self.close_reason = ""

    @classmethod
    async def connect(cls, api: Api, path: str, *, timeout: float | None = None,
                      headers: Mapping[str, str] | None = None) -> WebSocket:
        """Open ``/v1<path>`` of ``api``'s service and upgrade it. A non-101 reply raises
        the matching :class:`SandboxApiError`; an unreachable service
        :class:`SandboxConnectionError`; a wrong handshake reply :class:`SandboxResponseError`."""
        try:
            return await cls._connect(api, path, timeout, headers)
        except SandboxApiError as e:  # the daemon restarted with a new local token: once more
            if e.status_code != 401 or not api.transport.token_changed(headers):
                raise
        return await cls._connect(api, path, timeout, headers)

    @classmethod
    async def _connect(cls, api: Api, path: str, timeout: float | None,
                       headers: Mapping[str, str] | None) -> WebSocket:
        t = api.transport
        timeout = api.timeout if timeout is None else timeout
        key = base64.b64encode(os.urandom(16)).decode("ascii")
        h = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": key,
             "Sec-WebSocket-Version": "13", **(headers or {})}
        request = t._encode("GET", api._path(path, None), None, h)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(t.host, t.port, ssl=t._ssl, server_hostname=t.host if t._ssl else None,
                                        limit=HEAD_MAX), timeout)
        except (OSError, asyncio.TimeoutError) as e:
            what = "timed out" if isinstance(e, asyncio.TimeoutError) else (e.strerror or str(e))
            raise api._network_error(NetworkError(f"cannot connect to {t.host}:{t.port}: {what}")) from e
        try:
            writer.write(request)
            await writer.drain()
            status, head = await asyncio.wait_for(_read_head(reader), timeout)
            if status != 101:
                body = await asyncio.wait_for(_read_body(reader, head), timeout)
                raise api.error(status, body, context="attaching to the terminal")
            _check_reply(head, key)
        except BaseException as e:
            writer.close()
            if isinstance(e, (OSError, EOFError, asyncio.TimeoutError, asyncio.LimitOverrunError, ValueError)) \
                    and not isinstance(e, SandboxError):
                what = "timed out" if isinstance(e, asyncio.TimeoutError) else (str(e) or type(e).__name__)
                raise api._network_error(NetworkError(f"WebSocket handshake with {t.host}:{t.port} failed: {what}",
                                                      sent=True)) from e
            raise
        return cls(reader, writer)

    # --- out
    async def send(self, opcode: int, payload: bytes, *, fragment: int | None = None) -> None:
        """Send one message (``fragment``: split into frames of at most that many bytes)."""
        frames: list[bytes] = []
        if fragment and len(payload) > fragment and opcode < 8:
            pieces = [payload[i:i + fragment] for i in range(0, len(payload), fragment)]
            for i, p in enumerate(pieces):
                frames.append(_frame(opcode if i == 0 else OP_CONT, p, fin=i == len(pieces) - 1))
        else:
            frames.append(_frame(opcode, payload))
        async with self._wlock:
            if self.close_sent:
                raise ConnectionResetError("the WebSocket is closing")
            if opcode == OP_CLOSE:
                self.close_sent = True
            self._writer.write(b"".join(frames))
            await self._writer.drain()

    async def send_close(self, code: int | None = 1000, reason: str = "") -> None:
        """Start (or answer) the close handshake; does nothing once a close frame was sent."""
        if self.close_sent:
            return
        payload = b"" if code is None else struct.pack(">H", code) + reason.encode("utf-8")[:123]
        await self.send(OP_CLOSE, payload)

    # --- in
    async def _exactly(self, n: int) -> bytes:
        return await self._reader.readexactly(n) if n else b""

    async def recv(self) -> tuple[int, bytes]:
        """The next message: ``(OP_TEXT | OP_BINARY, payload)``, or ``(OP_CLOSE, payload)``
        when the peer closed (the close is answered). Raises ``asyncio.IncompleteReadError``
        (or ``OSError``) when the connection just ends, :class:`_ProtocolError` for a bad frame."""
        kind: int | None = None
        parts: list[bytes] = []
        size = 0
        while True:
            b0, b1 = await self._exactly(2)
            fin, rsv, op = b0 & 0x80, b0 & 0x70, b0 & 0x0F
            if rsv:
                raise _ProtocolError(1002, "a frame with reserved bits set (no extension was agreed)")
            if b1 & 0x80:
                raise _ProtocolError(1002, "a masked frame from the server")
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", await self._exactly(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", await self._exactly(8))[0]
            if op >= 0x8:
                if n > 125 or not fin:
                    raise _ProtocolError(1002, "a fragmented or oversized control frame")
                payload = await self._exactly(n)
                if op == OP_PING:
                    with contextlib.suppress(ConnectionResetError):
                        await self.send(OP_PONG, payload)
                    continue
                if op == OP_PONG:
                    continue
                if op == OP_CLOSE:
                    self._got_close(payload)
                    return OP_CLOSE, payload
                raise _ProtocolError(1002, f"unknown control opcode {op:#x}")
            if op == OP_CONT:
                if kind is None:
                    raise _ProtocolError(1002, "a continuation frame outside a message")
            elif op in (OP_TEXT, OP_BINARY):
                if kind is not None:
                    raise _ProtocolError(1002, "a new message inside a fragmented one")
                kind = op
            else:
                raise _ProtocolError(1002, f"unknown opcode {op:#x}")
            size += n
            if size > MAX_MESSAGE:
                raise _ProtocolError(1009, f"a message over {MAX_MESSAGE} bytes")
            parts.append(await self._exactly(n))
            if fin:
                data = b"".join(parts)
                if kind == OP_TEXT:
                    try:
                        data.decode("utf-8")
                    except UnicodeDecodeError:
                        raise _ProtocolError(1007, "a text message that is not UTF-8") from None
                return kind, data

    def _got_close(self, payload: bytes) -> None:
        if len(payload) == 1:
            raise _ProtocolError(1002, "a close frame with a one-byte payload")
        self.close_received = True
        self.close_code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else 1005
        self.close_reason = payload[2:].decode("utf-8", errors="replace")

    def abort(self) -> None:
        """Drop the TCP connection now."""
        with contextlib.suppress(Exception):
            self._writer.close()


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    line = await reader.readline()
    if not line:
        raise EOFError("the connection closed before a reply")
    parts = line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"bad status line {line[:100]!r}")
    headers: dict[str, str] = {}
    total = len(line)
    while True:
        line = await reader.readline()
        total += len(line)
        if total > HEAD_MAX:
            raise ValueError("the reply's head is too large")
        if line in (b"\r\n", b"\n"):
            return int(parts[1]), headers
        if not line:
            raise EOFError("the connection closed in the reply's head")
        k, _, v = line.decode("latin-1").partition(":")
        k, v = k.strip().lower(), v.strip()
        headers[k] = f"{headers[k]}, {v}" if k in headers else v


async def _read_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> bytes:
    if "content-length" in headers:
        n = int(headers["content-length"])
        return await reader.readexactly(min(n, 1 << 20))
    if "chunked" in headers.get("transfer-encoding", "").lower():
        out = b""
        while len(out) < 1 << 20:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                break
            out += await reader.readexactly(size)
            await reader.readline()
        return out
    return await reader.read(1 << 20)


def _check_reply(headers: Mapping[str, str], key: str) -> None:
    problems = []
    if headers.get("upgrade", "").lower() != "websocket":
        problems.append("no 'Upgrade: websocket'")
    if "upgrade" not in _tokens(headers.get("connection", "")):
        problems.append("no 'Connection: upgrade'")
    if headers.get("sec-websocket-accept") != _accept(key):
        problems.append("a wrong Sec-WebSocket-Accept")
    if headers.get("sec-websocket-extensions"):
        problems.append("an extension that was not asked for")
    if headers.get("sec-websocket-protocol"):
        problems.append("a subprotocol that was not asked for")
    if problems:
        raise SandboxResponseError("the terminal's WebSocket handshake reply has " + ", ".join(problems),
                                   data=dict(headers))


# --- the session ------------------------------------------------------------------------------------


class InteractiveSession:
    """A process on a pseudo-terminal in a sandbox, bound to one connection
    (``async with box.open_interactive("/bin/bash", cols=100, rows=30) as pty:``).

    ``pty.stream`` carries the raw terminal bytes (escape sequences included) both ways;
    the session carries the controls: ``await resize(cols, rows)`` (the program gets
    ``SIGWINCH``), ``await send_signal("INT")`` (to the terminal's foreground process
    group, as a typed ``^C``) and ``await wait()`` (the exit code, ``128 + signal`` when a
    signal ended it). Leaving the ``async with`` block before the process exited hangs
    the terminal up (its session gets ``SIGHUP``, then ``SIGKILL``). The session cannot be
    entered again: open a new one.

    If the connection ends before the daemon reported the exit, even with a clean close,
    reading the stream and ``wait()`` raise :class:`SandboxPtyDisconnectedError` (after
    the output that did arrive has been read). Output that arrives while nobody reads is
    held for the stream up to ``BUFFER_LIMIT`` (1 MiB); beyond that the connection is not
    read (the program blocks on its writes), so ``wait()`` waits until the stream is read.
    """

    def __init__(self, scope: Any, body: dict[str, Any], *, before: Callable[[], Awaitable[None]] | None = None):
        self._scope = scope
        self._api: Api = scope.api
        self._body = body
        self._before = before
        self._info: dict[str, Any] = {}
        self._ws: WebSocket | None = None
        self._task: asyncio.Task[None] | None = None
        self._buf = bytearray()
        self._event: asyncio.Event | None = None
        self._exit: dict[str, Any] | None = None
        self._broken: tuple[str, int | None] | None = None  # why the connection ended early
        self._entered = False
        self._closed = False
        self._cols = int(body.get("cols", 80))
        self._rows = int(body.get("rows", 24))
        self.errors: list[dict[str, Any]] = []
        self.stream = InteractiveStream(self)

    # --- state
    @property
    def id(self) -> str | None:
        """The terminal's id (``None`` before the session is entered)."""
        return self._info.get("id")

    @property
    def info(self) -> Mapping[str, Any]:
        """The terminal object the daemon returned when it was created."""
        return dict(self._info)

    @property
    def pid(self) -> int | None:
        """The process id (inside the sandbox)."""
        return self._info.get("pid")

    @property
    def term(self) -> str | None:
        """The ``TERM`` the process got."""
        return self._info.get("term")

    @property
    def sandbox_id(self) -> str:
        """The sandbox it runs in."""
        return str(self._info.get("sandbox_id") or self._scope.sandbox_id)

    @property
    def session_id(self) -> str | None:
        """The sandbox session it runs in."""
        return self._info.get("session_id")

    @property
    def cols(self) -> int:
        """The window's width (as last set)."""
        return self._cols

    @property
    def rows(self) -> int:
        """The window's height (as last set)."""
        return self._rows

    @property
    def exit_code(self) -> int | None:
        """The exit code once the daemon reported it, else ``None``."""
        return None if self._exit is None else int(self._exit.get("code", -1))

    @property
    def returncode(self) -> int | None:
        """The same as ``exit_code``."""
        return self.exit_code

    @property
    def signal(self) -> str | None:
        """The signal that ended the process (``"KILL"``, ``"HUP"``, ...), if any."""
        return None if self._exit is None else self._exit.get("signal")

    @property
    def closed(self) -> bool:
        """``True`` once the session was left (or closed)."""
        return self._closed

    def __repr__(self) -> str:
        state = "new" if not self._entered else ("exited" if self._exit else ("closed" if self._closed else "open"))
        return f"<InteractiveSession {self.id or '-'} {self._body.get('cmd')!r} {state}>"

    # --- lifecycle
    async def __aenter__(self) -> InteractiveSession:
        await self.open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def open(self) -> InteractiveSession:
        """Create the terminal and attach to it (what entering ``async with`` does; a
        session opened this way must be closed with ``aclose()``)."""
        if self._entered:
            raise SandboxStreamError("an interactive session is bound to one connection: open a new one")
        self._entered = True
        self._event = asyncio.Event()
        if self._before is not None:
            await self._before()
        scope = self._scope
        info = await self._api.json("POST", scope.base + "/ptys", json=self._body, timeout=max(60.0, self._api.timeout))
        if not isinstance(info, dict) or not info.get("id"):
            raise SandboxResponseError("the terminal reply has no id", data=info)
        self._info = info
        path = f"/sandboxes/{quote(info.get('sandbox_id') or scope.sandbox_id)}/ptys/{quote(info['id'])}"
        try:
            await scope.adopt(info.get("session_id"))  # a lazy resume: the handle takes the new session
            self._ws = await WebSocket.connect(self._api, path + "/ws")
        except BaseException:
            # nobody will attach: hang it up now rather than after the daemon's 30 s
            await asyncio.shield(self._delete_quietly(path))
            self._closed = True
            raise
        self._task = asyncio.get_running_loop().create_task(self._pump(), name=f"rebuno-pty-{info['id']}")
        return self

    async def _delete_quietly(self, path: str) -> None:
        with contextlib.suppress(Exception):
            await self._api.request("DELETE", path, timeout=5)

    async def aclose(self) -> None:
        """Close the connection (once). If the process still runs, the daemon hangs the
        terminal up. Output not read yet is dropped."""
        if self._closed:
            return
        self._closed = True
        ws, task = self._ws, self._task
        self._buf.clear()
        self._notify()
        if ws is None:
            return
        try:
            if task is not None and not task.done():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ws.send_close(1000, "client closed"), CLOSE_WAIT)
                # the daemon answers with its own close frame; the pump then ends
                await asyncio.wait({task}, timeout=CLOSE_WAIT)
        finally:
            if task is not None and not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=1.0)
            ws.abort()
            self._notify()

    # --- the pump: the connection into the buffer and the exit
    def _notify(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = asyncio.Event()

    async def _changed(self) -> None:
        assert self._event is not None
        await self._event.wait()

    async def _pump(self) -> None:
        ws = self._ws
        assert ws is not None
        why: str | None = None
        try:
            while True:
                op, data = await ws.recv()
                if op == OP_BINARY:
                    if self._closed or not data:
                        continue
                    self._buf += data
                    self._notify()
                    while len(self._buf) >= BUFFER_LIMIT and not self._closed:
                        await self._changed()  # back-pressure: the reader makes room
                elif op == OP_TEXT:
                    self._control(data)
                elif op == OP_CLOSE:
                    echo = ws.close_code if ws.close_code not in (None, 1005, 1006) else 1000
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(ws.send_close(echo), CLOSE_WAIT)  # the close handshake
                    reason = f" {ws.close_reason}" if ws.close_reason else ""
                    why = f"the daemon closed the connection ({ws.close_code}{reason})"
                    break
        except _ProtocolError as e:
            why = f"WebSocket protocol error: {e}"
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.send_close(e.code, str(e)[:120]), CLOSE_WAIT)
        except (OSError, EOFError, asyncio.IncompleteReadError) as e:
            why = f"the connection was lost ({type(e).__name__}{': ' + str(e) if str(e) else ''})"
        finally:
            ws.abort()
            if self._exit is None and self._broken is None:
                self._broken = (why or "the connection ended", ws.close_code)
            self._notify()

    def _control(self, data: bytes) -> None:
        try:
            msg = json.loads(data)
        except ValueError:
            logger.debug("terminal %s: a text message that is not JSON: %r", self.id, data[:200])
            return
        if not isinstance(msg, dict):
            return
        if msg.get("type") == "exit":
            self._exit = msg
            self._notify()
        elif msg.get("type") == "error":
            self.errors.append(msg)
            logger.warning("terminal %s refused a control message: %s", self.id, msg.get("message"))

    def _disconnected(self) -> SandboxPtyDisconnectedError:
        why, code = self._broken or ("the connection ended", None)
        return SandboxPtyDisconnectedError(
            f"terminal {self.id} of sandbox {self.sandbox_id}: {why} before the process reported its exit",
            close_code=code)

    def _check_open(self) -> None:
        if not self._entered or self._ws is None:
            raise SandboxStreamError("the interactive session is not open: use `async with box.open_interactive(...)`")
        if self._closed:
            raise SandboxStreamError("the interactive session is closed")

    # --- the stream's work
    async def _receive(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` of output (waiting for at least one); ``SandboxEndOfStream``
        after the exit, ``SandboxPtyDisconnectedError`` after an early end."""
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        while True:
            self._check_open()
            if self._buf:
                out = bytes(self._buf[:max_bytes])
                del self._buf[:max_bytes]
                self._notify()
                return out
            if self._exit is not None:
                raise SandboxEndOfStream("the terminal's process has exited")
            if self._broken is not None:
                raise self._disconnected()
            await self._changed()

    async def _send(self, data: Any) -> None:
        if isinstance(data, str):
            raise TypeError("the terminal takes bytes; encode text first")
        payload = bytes(data)
        self._check_open()
        if self._exit is not None:
            raise SandboxStreamError("the terminal's process has exited")
        if self._broken is not None:
            raise self._disconnected()
        ws = self._ws
        assert ws is not None
        try:
            for off in range(0, len(payload), SEND_CHUNK):
                await ws.send(OP_BINARY, payload[off:off + SEND_CHUNK])
        except OSError as e:
            if self._exit is not None:
                raise SandboxStreamError("the terminal's process has exited") from e
            if self._broken is None:
                self._broken = (f"sending failed ({e})", None)
            raise self._disconnected() from e

    async def _control_send(self, msg: Mapping[str, Any]) -> None:
        self._check_open()
        if self._exit is not None:
            return  # over: nothing to resize or signal (the daemon would ignore it too)
        if self._broken is not None:
            raise self._disconnected()
        assert self._ws is not None
        try:
            await self._ws.send(OP_TEXT, json.dumps(msg, separators=(",", ":")).encode())
        except OSError as e:
            if self._exit is not None:
                return
            if self._broken is None:
                self._broken = (f"sending failed ({e})", None)
            raise self._disconnected() from e

    # --- controls
    async def resize(self, cols: int, rows: int) -> None:
        """Set the window size (1-1000 each); the program gets ``SIGWINCH``. Does nothing
        once the process has exited."""
        c, r = _dim(cols, "cols"), _dim(rows, "rows")
        await self._control_send({"type": "resize", "cols": c, "rows": r})
        self._cols, self._rows = c, r

    async def send_signal(self, signal: Any) -> None:
        """Send a signal (``"INT"``, ``"SIGINT"``, ``2``, ``signal.SIGINT`` or a
        ``CommandSignal``) to the terminal's foreground process group, as a typed ``^C``
        would for ``INT``. Does nothing once the process has exited."""
        await self._control_send({"type": "signal", "signal": signal_value(signal)})

    async def wait(self, timeout: float | None = None) -> int:
        """Wait for the process's exit and return its code (``128 + signal`` when a signal
        ended it). Raises :class:`SandboxPtyDisconnectedError` if the connection ends first,
        :class:`SandboxTimeoutError` after ``timeout`` seconds (the process keeps running).

        Output that arrives meanwhile stays readable on the stream, up to 1 MiB; with more
        pending, this waits until the stream is read."""
        async def go() -> int:
            while True:
                if self._exit is not None:
                    return int(self._exit.get("code", -1))
                if self._broken is not None:
                    raise self._disconnected()
                self._check_open()
                await self._changed()

        if timeout is None:
            return await go()
        task = asyncio.ensure_future(go())
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
            await asyncio.wait({task})
            raise SandboxTimeoutError(f"terminal {self.id} still running after {timeout}s")
        return task.result()


class InteractiveStream:
    """The terminal's bytes, both ways (``pty.stream``); shaped like ``anyio.abc.ByteStream``.

    * ``await send(data)`` (or ``write``): bytes typed into the terminal, sent in messages
      of at most 64 KiB; returns once they are handed to the connection (TCP pushes back).
    * ``await receive(max_bytes=65536)``: the next output (at least one byte); raises
      :class:`SandboxEndOfStream` (an ``EOFError``) once the process has exited and
      everything was read. ``await read(n=-1)`` is the same but returns ``b""`` at the end
      (``n < 0``: everything until the end).
    * ``async for chunk in stream``: the output until the process exits.
    * ``await send_eof()`` types ``^D`` (end of input for a program reading the terminal
      in canonical mode); ``await aclose()`` closes the session.

    After an early end of the connection every read raises
    :class:`SandboxPtyDisconnectedError`, once the output that arrived has been read.
    """

    def __init__(self, session: InteractiveSession):
        self._s = session

    async def send(self, item: bytes | bytearray | memoryview) -> None:
        """Type ``item`` into the terminal."""
        await self._s._send(item)

    async def write(self, data: bytes | bytearray | memoryview) -> int:
        """The same as ``send()``; returns the number of bytes."""
        payload = bytes(data)
        await self._s._send(payload)
        return len(payload)

    async def send_eof(self) -> None:
        """Type ``^D`` (the terminal's end-of-input character by default)."""
        await self._s._send(b"\x04")

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """The next output, at most ``max_bytes``; :class:`SandboxEndOfStream` at the end."""
        return await self._s._receive(max_bytes)

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes as they arrive (everything until the end for ``n < 0``);
        ``b""`` at the end."""
        if n == 0:
            return b""
        if n > 0:
            try:
                return await self._s._receive(n)
            except SandboxEndOfStream:
                return b""
        parts = []
        while True:
            try:
                parts.append(await self._s._receive(1 << 20))
            except SandboxEndOfStream:
                return b"".join(parts)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._s._receive(65536)
        except SandboxEndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Close the session (the same as leaving its ``async with`` block)."""
        await self._s.aclose()

    async def __aenter__(self) -> InteractiveStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


# --- synchronous mirror -------------------------------------------------------------------------------


class SyncInteractiveStream(io.RawIOBase):
    """The terminal's bytes as a readable and writable :class:`io.RawIOBase`
    (``pty.stream`` of the synchronous API): ``read(n)`` returns what arrived (at least one
    byte, ``b""`` once the process has exited and everything was read), ``write(b)`` types
    bytes. It can be wrapped (``io.BufferedReader``, ``io.TextIOWrapper``) or handed to
    anything that consumes a raw stream. After an early end of the connection reads raise
    :class:`SandboxPtyDisconnectedError`, a :class:`ConnectionError`. ``close()`` closes
    the session."""

    def __init__(self, session: InteractiveSession, runner: _Runner):
        super().__init__()
        self._s = session
        self._r = runner

    def readable(self) -> bool:
        """Always ``True``."""
        return True

    def writable(self) -> bool:
        """Always ``True``."""
        return True

    def _check(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on a closed terminal stream")

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes as they arrive (at least one); everything until the end for
        ``size < 0``; ``b""`` at the end."""
        self._check()
        return self._r.run(self._s.stream.read(-1 if size is None else size))

    def readall(self) -> bytes:
        """Everything until the process exits."""
        return self.read(-1)

    def readinto(self, b: Any) -> int:
        """Read what arrived (at least one byte) into ``b``; ``0`` at the end."""
        self._check()
        view = memoryview(b).cast("B")
        if not len(view):
            return 0
        try:
            data = self._r.run(self._s._receive(len(view)))
        except SandboxEndOfStream:
            return 0
        view[:len(data)] = data
        return len(data)

    def write(self, b: Any) -> int:
        """Type ``b`` (bytes-like) into the terminal; returns its length."""
        self._check()
        if isinstance(b, str):
            raise TypeError("the terminal takes bytes; wrap the stream in io.TextIOWrapper for text")
        data = bytes(b)
        self._r.run(self._s._send(data))
        return len(data)

    def send(self, data: bytes) -> None:
        """The same as ``write()`` (the asynchronous API's name)."""
        self.write(data)

    def receive(self, max_bytes: int = 65536) -> bytes:
        """The asynchronous API's ``receive()``: :class:`SandboxEndOfStream` at the end."""
        self._check()
        return self._r.run(self._s._receive(max_bytes))

    def send_eof(self) -> None:
        """Type ``^D``."""
        self.write(b"\x04")

    def close(self) -> None:
        """Close the session (hangs the terminal up if the process still runs)."""
        if not self.closed:
            try:
                if not self._r.closed:
                    self._r.run(self._s.aclose())
            finally:
                super().close()

    def __del__(self) -> None:
        # never do remote I/O from the garbage collector (it may run on the loop's thread)
        with contextlib.suppress(Exception):
            io.RawIOBase.close(self)


class SyncInteractiveSession:
    """The synchronous interactive session (``with box.open_interactive("/bin/bash") as
    pty:``); see :class:`InteractiveSession`. ``pty.stream`` is a
    :class:`SyncInteractiveStream` (an :class:`io.RawIOBase`); ``resize()``,
    ``send_signal()`` and ``wait(timeout=)`` block. An early end of the connection raises
    :class:`SandboxPtyDisconnectedError` (a :class:`ConnectionError`)."""

    def __init__(self, session: InteractiveSession, runner: _Runner):
        self._a = session
        self._r = runner
        self.stream = SyncInteractiveStream(session, runner)

    id = property(lambda self: self._a.id, doc="The terminal's id.")
    info = property(lambda self: self._a.info, doc="The terminal object from its creation.")
    pid = property(lambda self: self._a.pid, doc="The process id (inside the sandbox).")
    term = property(lambda self: self._a.term, doc="The ``TERM`` the process got.")
    sandbox_id = property(lambda self: self._a.sandbox_id, doc="The sandbox it runs in.")
    session_id = property(lambda self: self._a.session_id, doc="The sandbox session it runs in.")
    cols = property(lambda self: self._a.cols, doc="The window's width.")
    rows = property(lambda self: self._a.rows, doc="The window's height.")
    exit_code = property(lambda self: self._a.exit_code, doc="The exit code once reported, else ``None``.")
    returncode = property(lambda self: self._a.returncode, doc="The same as ``exit_code``.")
    signal = property(lambda self: self._a.signal, doc="The signal that ended the process, if any.")
    closed = property(lambda self: self._a.closed, doc="``True`` once the session was left.")
    errors = property(lambda self: self._a.errors, doc="Control messages the daemon refused.")

    def __repr__(self) -> str:
        return repr(self._a).replace("<InteractiveSession", "<SyncInteractiveSession", 1)

    def open(self) -> SyncInteractiveSession:
        """Create and attach (what entering ``with`` does; then ``close()`` it)."""
        self._r.run(self._a.open())
        return self

    def __enter__(self) -> SyncInteractiveSession:
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (hangs the terminal up if the process still runs)."""
        self.stream.close()

    def resize(self, cols: int, rows: int) -> None:
        """Set the window size; the program gets ``SIGWINCH``."""
        self._r.run(self._a.resize(cols, rows))

    def send_signal(self, signal: Any) -> None:
        """Signal the terminal's foreground process group."""
        self._r.run(self._a.send_signal(signal))

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit code (:class:`SandboxTimeoutError` after ``timeout`` s)."""
        return self._r.run(self._a.wait(timeout))
