"""The ambient client used by the module-level functions (``rebuno.sandbox.create_sandbox``,
``rebuno.sandbox.sync.create_sandbox``, ...).

Inside ``async with session():`` the asynchronous functions use that session's client,
inside ``with session():`` the synchronous ones use its synchronous client; the client is
closed when the block ends. Outside any session a process-wide default client for the
current URL (``$REBUNO_SANDBOX_URL`` or ``http://127.0.0.1:8090``) is used. Standalone
clients (``SandboxClient``, ``SyncSandboxClient``) never read or change this.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Sequence
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any

from rebuno.sandbox._aio import SandboxClient
from rebuno.sandbox._api import resolve_url
from rebuno.sandbox._models import SandboxServiceOptions

if TYPE_CHECKING:
    from rebuno.sandbox.sync import SyncSandboxClient

_async_client: ContextVar[SandboxClient | None] = ContextVar("rebuno_sandbox_async_client", default=None)
_sync_client: ContextVar[Any] = ContextVar("rebuno_sandbox_sync_client", default=None)
_defaults: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


def current_async_client() -> SandboxClient:
    """The active session's client, else the default one for the current URL."""
    c = _async_client.get()
    if c is not None:
        return c
    url = resolve_url(None)
    with _lock:
        c = _defaults.get(("async", url))
        if c is None or c.closed:
            # no keep-alive: the default client may serve several event loops (asyncio.run)
            c = SandboxClient(url, _keepalive=False)
            _defaults[("async", url)] = c
    return c


def current_sync_client() -> SyncSandboxClient:
    """The active session's synchronous client, else the default one for the current URL."""
    c = _sync_client.get()
    if c is not None:
        return c
    from rebuno.sandbox.sync import SyncSandboxClient

    url = resolve_url(None)
    with _lock:
        c = _defaults.get(("sync", url))
        if c is None or c.closed:
            if not any(k[0] == "sync" for k in _defaults):
                atexit.register(_close_sync_defaults)
            c = SyncSandboxClient(url)
            _defaults[("sync", url)] = c
    return c


def _close_sync_defaults() -> None:
    with _lock:
        clients = [c for k, c in _defaults.items() if k[0] == "sync"]
    for c in clients:
        try:
            c.close()
        except Exception:
            pass


def _pick_options(service_options: Any) -> SandboxServiceOptions | None:
    if service_options is None:
        return None
    if isinstance(service_options, SandboxServiceOptions):
        return service_options
    if isinstance(service_options, Sequence):
        for o in service_options:
            if isinstance(o, SandboxServiceOptions):
                return o
        return None
    raise TypeError("service_options must be SandboxServiceOptions or a list of them")


class SandboxSession:
    """An ambient client scope (``session()``): ``async with`` for the asynchronous
    functions, ``with`` for the synchronous ones. Entering returns the scope's client."""

    def __init__(self, *, base_url: str | None = None, service_options: Any = None):
        self._base_url = base_url
        self._options = _pick_options(service_options)
        self._client: Any = None
        self._token: Token[Any] | None = None

    async def __aenter__(self) -> SandboxClient:
        if self._client is not None:
            raise RuntimeError("this session() is already active")
        self._client = SandboxClient(self._base_url, options=self._options)
        self._token = _async_client.set(self._client)
        return self._client

    async def __aexit__(self, *exc: Any) -> None:
        client, self._client = self._client, None
        if self._token is not None:
            _async_client.reset(self._token)
            self._token = None
        if client is not None:
            await client.aclose()

    def __enter__(self) -> SyncSandboxClient:
        from rebuno.sandbox.sync import SyncSandboxClient

        if self._client is not None:
            raise RuntimeError("this session() is already active")
        self._client = SyncSandboxClient(self._base_url, options=self._options)
        self._token = _sync_client.set(self._client)
        return self._client

    def __exit__(self, *exc: Any) -> None:
        client, self._client = self._client, None
        if self._token is not None:
            _sync_client.reset(self._token)
            self._token = None
        if client is not None:
            client.close()


def session(*, base_url: str | None = None, service_options: Any = None) -> SandboxSession:
    """An ambient client for the module-level functions: ``async with session():`` (or
    ``with session():`` for ``rebuno.sandbox.sync``). ``service_options`` is a
    :class:`SandboxServiceOptions` (or a list holding one): its ``region`` is recorded on new
    sandboxes, its ``base_url`` picks the service."""
    return SandboxSession(base_url=base_url, service_options=service_options)
