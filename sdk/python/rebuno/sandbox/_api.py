"""The HTTP layer of the sandbox client: ``/v1`` of ``rebuno sandboxd`` over the SDK's
asyncio transport (:mod:`rebuno._http`).

Only this module knows URLs, query strings and the error envelope. Requests are never
retried after they may have reached the service (sandboxd's 5xx do not promise that nothing
changed), only when the connection could not be opened at all (or after a ``401`` that a
new local token answers).

Every call but health carries a token: ``token=``, else ``$REBUNO_SANDBOX_TOKEN``, else
the daemon's local token (:mod:`rebuno._localauth`: sandboxd makes one at every start,
readable only by the user who started it).
"""

from __future__ import annotations

import json as _json
import os
import urllib.parse
from collections.abc import Mapping
from typing import Any

from rebuno._http import Response, StreamResponse, Transport, _Conn
from rebuno._localauth import SANDBOXD_STATE_FILE, LocalToken
from rebuno.errors import NetworkError
from rebuno.sandbox._errors import SandboxApiError, SandboxConnectionError, SandboxResponseError, api_error

DEFAULT_URL = "http://127.0.0.1:8090"
URL_ENV = "REBUNO_SANDBOX_URL"
TOKEN_ENV = "REBUNO_SANDBOX_TOKEN"
DEFAULT_TIMEOUT = 30.0
# a request that waits on purpose (run to completion, stdin back-pressure) gets this bound
LONG_TIMEOUT = 7 * 24 * 3600.0
CONNECT_RETRY_FOR = 5.0


def resolve_url(base_url: str | None) -> str:
    """``base_url``, else ``$REBUNO_SANDBOX_URL``, else ``http://127.0.0.1:8090``."""
    url = base_url or os.environ.get(URL_ENV) or DEFAULT_URL
    return url.rstrip("/")


def quote(part: str) -> str:
    """One path segment, percent-encoded."""
    return urllib.parse.quote(str(part), safe="")


class _OneShotTransport(Transport):
    """A transport that never keeps idle connections, so it is not tied to one event loop
    (used by the module-level default client, which may serve several ``asyncio.run``)."""

    def _release(self, c: _Conn) -> None:
        c.close()


class Api:
    """``/v1`` of one sandboxd. Paths are relative to ``/v1``."""

    def __init__(self, base_url: str | None = None, *, timeout: float | None = None, keepalive: bool = True,
                 token: str | None = None):
        self.base_url = resolve_url(base_url)
        cls = Transport if keepalive else _OneShotTransport
        self.timeout = timeout or DEFAULT_TIMEOUT
        token = token or os.environ.get(TOKEN_ENV) or None
        local = None if token else LocalToken(self.base_url, SANDBOXD_STATE_FILE)
        self.transport = cls(self.base_url, timeout=self.timeout, api_key=token, local_token=local)
        self.closed = False

    def _path(self, path: str, query: Mapping[str, Any] | None) -> str:
        full = "/v1" + path
        if query:
            items = []
            for k, v in query.items():
                if v is None:
                    continue
                if isinstance(v, bool):
                    v = "true" if v else "false"
                items.append((k, str(v)))
            if items:
                full += "?" + urllib.parse.urlencode(items, quote_via=urllib.parse.quote)
        return full

    def _network_error(self, e: NetworkError) -> SandboxConnectionError:
        return SandboxConnectionError(f"{e} (is `rebuno sandboxd` running at {self.base_url}? "
                                      f"set ${URL_ENV} or base_url=)", sent=e.sent)

    async def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                      json: Any = None, body: bytes | None = None, headers: Mapping[str, str] | None = None,
                      timeout: float | None = None, context: str = "") -> Response:
        """Send one request; a 4xx/5xx becomes the matching ``SandboxApiError``."""
        if self.closed:
            raise SandboxConnectionError("the sandbox client is closed")
        h = dict(headers or {})
        if body is not None and "Content-Type" not in h:
            h["Content-Type"] = "application/octet-stream"
        try:
            resp = await self.transport.request(
                method, self._path(path, query), json=json, body=body, headers=h or None, timeout=timeout,
                idempotent=method in ("GET", "HEAD"), retry_for=CONNECT_RETRY_FOR, raise_for_status=False,
                retry_statuses=False)
        except NetworkError as e:
            raise self._network_error(e) from e
        if resp.status >= 400:
            raise self.error(resp.status, resp.body, context=context)
        return resp

    async def json(self, method: str, path: str, **kw: Any) -> Any:
        """``request()`` and parse the JSON reply (``None`` for an empty body)."""
        resp = await self.request(method, path, **kw)
        if not resp.body:
            return None
        try:
            return _json.loads(resp.body)
        except ValueError as e:
            raise SandboxResponseError(f"{method} {path}: the reply is not JSON", data=resp.body[:200]) from e

    async def stream(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                     headers: Mapping[str, str] | None = None, read_timeout: float | None = 60.0,
                     context: str = "") -> StreamResponse:
        """Open a streamed reply (SSE); the caller must ``close()`` it."""
        if self.closed:
            raise SandboxConnectionError("the sandbox client is closed")
        try:
            resp = await self.transport.stream(method, self._path(path, query), headers=headers,
                                               read_timeout=read_timeout)
        except NetworkError as e:
            raise self._network_error(e) from e
        if resp.status >= 400:
            try:
                raw = await resp.read()
            finally:
                resp.close()
            raise self.error(resp.status, raw, context=context)
        return resp

    def error(self, status: int, body: bytes, *, context: str = "") -> SandboxApiError:
        """The error for a reply; a 401 also says which token was sent, or where none was found."""
        hint = ""
        if status == 401:
            local = self.transport.local_token
            hint = f"{local.hint() if local else 'sent the token given'}; or set {TOKEN_ENV} or token="
        return api_error(status, body, context=context, hint=hint)

    async def close(self) -> None:
        """Close idle connections; later calls fail with ``SandboxConnectionError``."""
        self.closed = True
        await self.transport.close()
