"""A small asyncio HTTP/1.1 client (standard library only).

Used for the kernel API and for OpenAI-compatible model endpoints. It speaks
HTTP/1.1 over ``asyncio`` streams (TLS through :mod:`ssl` for ``https://``), keeps a
few idle keep-alive connections per host, understands ``Content-Length`` and
chunked bodies, and can hand back a streaming body for Server-Sent Events.

Cancelling a request (for example a long-poll claim on shutdown) closes its socket
at once, which is why this is built on asyncio streams and not on ``http.client``
in a thread.

Retry rules (:meth:`Transport.request`):

* the connection could not be opened (refused, unreachable, DNS, connect timeout):
  nothing was sent, so every request is retried with exponential back-off
  (0.1 s doubling to 5 s, with jitter) until ``retry_for`` seconds have passed
  (``None``: until :meth:`Transport.close` or cancellation);
* the request was sent and no complete response came back: retried the same way
  only when the caller says the request is idempotent; otherwise
  :class:`~rebuno.errors.NetworkError` with ``sent=True`` is raised, because the
  server may have acted on it;
* a reused keep-alive connection that the server had already closed fails before
  any response byte arrives: retried once at once on a fresh connection;
* ``500``/``502``/``503``/``504``: retried up to three times (the kernel's
  ``internal_error`` guarantees nothing was changed);
* ``401`` when the transport sent a daemon's local token (:mod:`rebuno._localauth`) and
  finds a new one (the daemon restarted): sent again once with it.

Several URLs (``"http://a:8080,http://b:8080"``: kernel replicas sharing one PostgreSQL):
the transport talks to one at a time and moves to the next when a connection cannot be
opened (nothing was sent, so any request may go elsewhere), trying each once before it
backs off; a request already sent is never resent to another replica unless it is
idempotent, by the rules above.
"""

from __future__ import annotations

import asyncio
import json as _json
import logging
import random
import ssl
import time
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rebuno._localauth import LocalToken
from rebuno.errors import NetworkError, error_from_response

logger = logging.getLogger("rebuno.http")

USER_AGENT = "rebuno-python/0.1"
_IDLE_KEEP_SECONDS = 20.0
_MAX_IDLE_PER_HOST = 8
_RETRY_STATUSES = (500, 502, 503, 504)


class _ConnectFailed(OSError):
    """The TCP/TLS connection could not be opened: nothing was sent."""


class _SendFailed(OSError):
    """The request went out (or may have) but no complete response came back."""

    def __init__(self, message: str, *, fresh: bool, got_bytes: bool):
        super().__init__(message)
        self.fresh = fresh
        self.got_bytes = got_bytes


@dataclass
class Response:
    """A complete HTTP response."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON (``None`` for an empty body)."""
        if not self.body:
            return None
        return _json.loads(self.body)

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (invalid bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = field(default_factory=time.monotonic)
    reused: bool = False

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # pragma: no cover - best effort
            pass


class StreamResponse:
    """A response whose body is read incrementally (``Transport.stream``)."""

    def __init__(self, status: int, headers: dict[str, str], conn: _Conn, chunked: bool,
                 length: int | None, read_timeout: float | None):
        self.status = status
        self.headers = headers
        self._conn = conn
        self._chunked = chunked
        self._left = length
        self._chunk_left = 0
        self._eof = False
        self._read_timeout = read_timeout
        self._buf = b""

    async def _read_raw(self) -> bytes:
        r = self._conn.reader
        if self._eof:
            return b""
        if self._chunked:
            if self._chunk_left == 0:
                line = await r.readline()
                if not line:
                    self._eof = True
                    return b""
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    # trailers until the blank line
                    while True:
                        t = await r.readline()
                        if t in (b"\r\n", b"\n", b""):
                            break
                    self._eof = True
                    return b""
                self._chunk_left = size
            data = await r.read(self._chunk_left)
            if not data:
                self._eof = True
                return b""
            self._chunk_left -= len(data)
            if self._chunk_left == 0:
                await r.readline()  # CRLF after the chunk
            return data
        if self._left is not None:
            if self._left <= 0:
                self._eof = True
                return b""
            data = await r.read(min(self._left, 65536))
            if not data:
                self._eof = True
                return b""
            self._left -= len(data)
            return data
        data = await r.read(65536)
        if not data:
            self._eof = True
        return data

    async def read_chunk(self) -> bytes:
        """The next piece of the body, ``b""`` at the end."""
        if self._read_timeout is None:
            return await self._read_raw()
        return await asyncio.wait_for(self._read_raw(), self._read_timeout)

    async def read(self) -> bytes:
        """The rest of the body."""
        parts = [self._buf]
        self._buf = b""
        while True:
            c = await self.read_chunk()
            if not c:
                break
            parts.append(c)
        return b"".join(parts)

    async def iter_lines(self) -> AsyncIterator[str]:
        """Yield the body line by line (without the line ending), as text."""
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                yield line.rstrip(b"\r").decode("utf-8", errors="replace")
            c = await self.read_chunk()
            if not c:
                if self._buf:
                    line, self._buf = self._buf, b""
                    yield line.rstrip(b"\r").decode("utf-8", errors="replace")
                return
            self._buf += c

    def close(self) -> None:
        """Close the underlying connection (a streamed connection is never reused)."""
        self._conn.close()


async def iter_sse(resp: StreamResponse) -> AsyncIterator[dict[str, str]]:
    """Parse a Server-Sent Events body into ``{"id", "event", "data"}`` dicts.

    Comment lines (``: keep-alive``) are skipped; multi-line ``data`` fields are
    joined with ``\\n`` as the SSE specification says.
    """
    ev: dict[str, str] = {}
    data: list[str] = []
    async for line in resp.iter_lines():
        if line == "":
            if data or ev:
                ev["data"] = "\n".join(data)
                yield ev
            ev, data = {}, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name in ("id", "event", "retry"):
            ev[name] = value
    if data:
        ev["data"] = "\n".join(data)
        yield ev


class Transport:
    """HTTP/1.1 client for one base URL (``http://host:port`` or ``https://...``).

    ``api_key`` is sent as ``Authorization: Bearer <key>``; without one, ``local_token``'s
    token is (found on first use, and again after a ``401``). ``timeout`` bounds a whole
    request (connect, send, complete response) unless a call passes its own.
    """

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 35.0,
                 headers: Mapping[str, str] | None = None, local_token: LocalToken | None = None):
        self._urls = [x.strip().rstrip("/") for x in base_url.split(",") if x.strip()]
        if not self._urls:
            raise ValueError(f"bad URL {base_url!r}: expected http://host[:port][/prefix]")
        for url in self._urls:
            u = urllib.parse.urlsplit(url)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise ValueError(f"bad URL {url!r}: expected http://host[:port][/prefix]"
                                 " (several: separated by commas)")
        self.base_url = ",".join(self._urls)
        self._cur = -1
        self._use(0)
        self.timeout = timeout
        self.default_headers: dict[str, str] = {"User-Agent": USER_AGENT}
        if api_key:
            self.default_headers["Authorization"] = f"Bearer {api_key}"
        if headers:
            self.default_headers.update(headers)
        self.local_token = None if "Authorization" in self.default_headers else local_token
        self._closed = False

    def _use(self, i: int) -> None:
        """Talk to URL i from now on (its own keep-alive connections)."""
        if i == self._cur:
            return
        for c in getattr(self, "_idle", []):
            c.close()
        self._idle: list[_Conn] = []
        self._cur = i
        u = urllib.parse.urlsplit(self._urls[i])
        self.url = self._urls[i]
        self.scheme = u.scheme
        self.host = u.hostname or ""
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/")
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if u.scheme == "https" else None

    def _fail_over(self, err: Exception) -> None:
        if len(self._urls) > 1:
            nxt = (self._cur + 1) % len(self._urls)
            logger.info("%s; trying %s", err, self._urls[nxt])
            self._use(nxt)

    # --- connections -------------------------------------------------------
    async def _connect(self, timeout: float | None) -> _Conn:
        now = time.monotonic()
        while self._idle:
            c = self._idle.pop()
            if now - c.idle_since > _IDLE_KEEP_SECONDS or c.reader.at_eof() or c.writer.is_closing():
                c.close()
                continue
            c.reused = True
            return c
        try:
            coro = asyncio.open_connection(self.host, self.port, ssl=self._ssl,
                                           server_hostname=self.host if self._ssl else None)
            reader, writer = await asyncio.wait_for(coro, timeout)
        except asyncio.TimeoutError as e:
            raise _ConnectFailed(f"connecting to {self.host}:{self.port} timed out") from e
        except OSError as e:
            raise _ConnectFailed(f"cannot connect to {self.host}:{self.port}: {e.strerror or e}") from e
        return _Conn(reader, writer)

    def _release(self, c: _Conn) -> None:
        if self._closed or len(self._idle) >= _MAX_IDLE_PER_HOST:
            c.close()
            return
        c.idle_since = time.monotonic()
        c.reused = False
        self._idle.append(c)

    async def close(self) -> None:
        """Close idle connections; later requests fail fast."""
        self._closed = True
        for c in self._idle:
            c.close()
        self._idle.clear()

    # --- one exchange ------------------------------------------------------
    def _encode(self, method: str, path: str, body: bytes | None, headers: Mapping[str, str] | None) -> bytes:
        h = dict(self.default_headers)
        if headers:
            h.update({k: v for k, v in headers.items() if v is not None})
        if self.local_token is not None and "Authorization" not in h:
            token = self.local_token.get()
            if token:
                h["Authorization"] = f"Bearer {token}"
        host = self.host if self.port in (80, 443) else f"{self.host}:{self.port}"
        lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {host}"]
        if body is not None:
            h.setdefault("Content-Type", "application/json")
            h["Content-Length"] = str(len(body))
        elif method in ("POST", "PUT", "PATCH"):
            h["Content-Length"] = "0"
        for k, v in h.items():
            if "\r" in k or "\n" in k or "\r" in str(v) or "\n" in str(v):
                raise ValueError(f"header {k!r} contains a line break")
            lines.append(f"{k}: {v}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")

    async def _head(self, c: _Conn) -> tuple[int, dict[str, str]]:
        while True:
            status_line = await c.reader.readline()
            if not status_line:
                raise EOFError("connection closed before a response")
            parts = status_line.decode("latin-1").split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/"):
                raise ValueError(f"bad status line {status_line!r}")
            status = int(parts[1])
            headers: dict[str, str] = {}
            while True:
                line = await c.reader.readline()
                if line in (b"\r\n", b"\n"):
                    break
                if not line:
                    raise EOFError("connection closed in the response headers")
                k, _, v = line.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip()
            if 100 <= status < 200:
                continue  # 100 Continue and friends
            return status, headers

    async def _exchange(self, method: str, path: str, body: bytes | None,
                        headers: Mapping[str, str] | None, timeout: float | None,
                        stream: bool, read_timeout: float | None) -> Response | StreamResponse:
        data = self._encode(method, path, body, headers)
        deadline = None if timeout is None else time.monotonic() + timeout
        c = await self._connect(timeout)
        got = False
        try:
            c.writer.write(data)
            await c.writer.drain()
            remaining = None if deadline is None else max(0.001, deadline - time.monotonic())
            status, hdrs = await asyncio.wait_for(self._head(c), remaining)
            got = True
            chunked = "chunked" in hdrs.get("transfer-encoding", "").lower()
            length = None if chunked or "content-length" not in hdrs else int(hdrs["content-length"])
            no_body = method == "HEAD" or status in (204, 304)
            if no_body:
                length, chunked = 0, False
            sr = StreamResponse(status, hdrs, c, chunked, length, read_timeout)
            if stream:
                return sr
            remaining = None if deadline is None else max(0.001, deadline - time.monotonic())
            payload = await asyncio.wait_for(sr.read(), remaining)
        except asyncio.CancelledError:
            c.close()
            raise
        except (OSError, EOFError, ValueError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            c.close()
            what = "timed out" if isinstance(e, asyncio.TimeoutError) else (str(e) or type(e).__name__)
            raise _SendFailed(f"{method} {path}: {what}", fresh=not c.reused, got_bytes=got) from e
        keep = hdrs.get("connection", "").lower() != "close" and (length is not None or chunked)
        if keep:
            self._release(c)
        else:
            c.close()
        return Response(status, hdrs, payload)

    def _token_now(self) -> str | None:
        """The local token the next request sends (``None`` when it sends none)."""
        return self.local_token.get() if self.local_token is not None else None

    def token_changed(self, headers: Mapping[str, str] | None, sent: str | None) -> bool:
        """After a 401: whether the local token (if that is what was sent) is now another
        than ``sent``, the one held when the request went out. Another request in flight
        may have found the daemon's new token first, so this compares with ``sent``, not
        with what the last lookup saw."""
        if self.local_token is None or (headers and headers.get("Authorization")):
            return False
        self.local_token.refresh()
        now = self.local_token.get()
        return now is not None and now != sent

    # --- public ------------------------------------------------------------
    async def request(self, method: str, path: str, *, json: Any = None, body: bytes | None = None,
                      headers: Mapping[str, str] | None = None, timeout: float | None = None,
                      idempotent: bool | None = None, retry_for: float | None = 30.0,
                      raise_for_status: bool = True, stop: asyncio.Event | None = None,
                      retry_statuses: bool = True) -> Response:
        """Send one request and return the complete response.

        ``json`` is serialized compactly; ``idempotent`` defaults to ``True`` for GET.
        With ``raise_for_status`` (default) a 4xx/5xx becomes the matching
        :class:`~rebuno.errors.APIError` subclass. ``stop``, when set, ends the
        connection retries early with :class:`~rebuno.errors.NetworkError`.
        ``retry_statuses=False`` turns off the retries of 5xx answers.
        """
        if json is not None:
            body = _json.dumps(json, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        if idempotent is None:
            idempotent = method in ("GET", "HEAD")
        timeout = self.timeout if timeout is None else timeout
        started = time.monotonic()
        delay = 0.1
        server_retries = 0
        stale_retry_used = False
        token_retry_used = False
        moved = 0  # replicas tried since the last back-off
        while True:
            if self._closed:
                raise NetworkError("transport closed")
            try:
                sent_token = self._token_now()
                got = await self._exchange(method, path, body, headers, timeout, False, None)
                assert isinstance(got, Response)
                resp = got
            except _ConnectFailed as e:
                err: Exception = e
                self._fail_over(e)
                if moved + 1 < len(self._urls):
                    moved += 1
                    continue  # nothing was sent: the next replica, at once
                moved = 0
            except _SendFailed as e:
                if not e.fresh and not e.got_bytes and not stale_retry_used:
                    stale_retry_used = True  # a keep-alive connection the server had closed
                    continue
                if not idempotent:
                    raise NetworkError(f"{e} (the request may have been received)", sent=True) from e
                err = e
            else:
                if retry_statuses and resp.status in _RETRY_STATUSES and server_retries < 3:
                    server_retries += 1
                    await asyncio.sleep(0.2 * server_retries)
                    continue
                if resp.status == 401 and not token_retry_used and self.token_changed(headers, sent_token):
                    token_retry_used = True  # refused before anything was done
                    continue
                if raise_for_status and resp.status >= 400:
                    raise error_from_response(resp.status, resp.body)
                return resp
            # connection-level failure: back off and try again
            if stop is not None and stop.is_set():
                raise NetworkError(str(err)) from err
            if retry_for is not None and time.monotonic() - started > retry_for:
                raise NetworkError(f"{err} (gave up after {retry_for:g}s)") from err
            logger.debug("%s; retrying in %.1fs", err, delay)
            if stop is not None:
                try:
                    await asyncio.wait_for(stop.wait(), delay * (1 + random.random() * 0.25))
                except asyncio.TimeoutError:
                    pass
            else:
                await asyncio.sleep(delay * (1 + random.random() * 0.25))
            delay = min(delay * 2, 5.0)

    async def stream(self, method: str, path: str, *, json: Any = None,
                     headers: Mapping[str, str] | None = None, connect_timeout: float | None = None,
                     read_timeout: float | None = 60.0) -> StreamResponse:
        """Send a request and return as soon as the response headers arrive.

        The caller reads the body with :meth:`StreamResponse.iter_lines` (or
        :func:`iter_sse`) and must call :meth:`StreamResponse.close`. No retries (but
        on a stale keep-alive connection, and after a ``401`` that a new local token
        answers): the caller owns reconnection. ``read_timeout`` bounds the gap between
        reads.
        """
        body = None
        if json is not None:
            body = _json.dumps(json, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        stale_retry_used = token_retry_used = False
        moved = 0
        while True:
            try:
                sent_token = self._token_now()
                r = await self._exchange(method, path, body, headers,
                                         connect_timeout or self.timeout, True, read_timeout)
            except _ConnectFailed as e:
                self._fail_over(e)
                if moved + 1 < len(self._urls):
                    moved += 1
                    continue
                raise NetworkError(str(e)) from e
            except _SendFailed as e:
                if not stale_retry_used and not e.fresh and not e.got_bytes:
                    stale_retry_used = True
                    continue
                raise NetworkError(str(e), sent=True) from e
            assert isinstance(r, StreamResponse)
            if r.status == 401 and not token_retry_used and self.token_changed(headers, sent_token):
                token_retry_used = True
                r.close()
                continue
            return r
