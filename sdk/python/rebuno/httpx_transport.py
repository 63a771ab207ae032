"""``http_client()`` and ``RebunoTransport``: model calls made through httpx as ``llm_call`` steps.

::

    from openai import AsyncOpenAI
    from rebuno import http_client

    llm = AsyncOpenAI(http_client=http_client())   # any library that takes an httpx.AsyncClient

This is the one part of the SDK that is not standard library: it needs ``httpx`` (Debian:
``python3-httpx``), imported only when ``rebuno.http_client`` or
``rebuno.RebunoTransport`` is used. Without httpx, use :class:`rebuno.ChatClient`.

Inside a handler, a request whose body is a JSON object with a string at ``model_field``
(default ``"model"``) is submitted as an ``llm_call`` step: target = that string, args =
the whole body. On ``proceed`` the request goes out through the inner transport and the
response is recorded as ``{status, headers: {content-type}, body}`` (``body`` is the text;
a body that is not UTF-8 is recorded as ``body_base64`` instead). On ``replay`` that
record is turned back into the response, so a re-dispatched agent never sends the same
model request twice. The caller gets the response rebuilt from the record in both cases
(status, content type and body; other headers are dropped, and a compressed body arrives
decoded), so a live run and its replay look the same.

Streaming responses (``text/event-stream``) are passed to the caller chunk by chunk as
they arrive, and the whole text is recorded when the stream ends (or when the caller
closes it early: what it read is what is recorded). A replay streams the recorded text
back. Error statuses are recorded and replayed like any response (the provider
library's own retries then replay the same way); a transport failure (connection
refused, timeout) fails the step and replays as the same httpx exception.

A denied step answers ``403`` with ``{"error": {"type": "rebuno_refusal", "message":
"rebuno_refusal: denied reason=..."}}`` (``blocked``, ``execution_terminal``: ``403``;
``lease_superseded``: ``409``; ``rate_limited``: ``429``) instead of raising inside the
provider library, which would retry; the agent turns the provider's error back into
``PolicyError``/``Blocked``/... (:func:`rebuno.raise_for_refusal`), and ``Blocked`` is on
``execution().suspension`` already. Requests outside a handler, requests without a JSON
object body and bodies without a string ``model_field`` pass through unrecorded.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from rebuno.errors import (
    REFUSAL_TYPE,
    Blocked,
    LeaseSuperseded,
    LLMError,
    PolicyError,
    RateLimited,
    Terminated,
    ToolError,
    refusal_message,
)
from rebuno.execution import ExecutionContext, current

HTTPX_MISSING = ("rebuno.http_client() and rebuno.RebunoTransport need httpx, which is not installed for "
                 "this Python. Install it (Debian: `apt-get install python3-httpx`), or use rebuno.ChatClient, "
                 "the SDK's standard-library OpenAI-compatible client, whose calls are recorded the same way.")

try:
    import httpx
except ImportError as _e:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(HTTPX_MISSING) from _e

logger = logging.getLogger("rebuno.httpx")

_REPLAY_CHUNK = 4096
# Arguments of httpx.AsyncClient that configure its default transport; with our transport
# in its place they go to the inner transport instead (the client would ignore them).
_TRANSPORT_ARGS = ("verify", "cert", "http1", "http2", "limits")


def _refusal(e: Exception) -> tuple[int, str, str]:
    if isinstance(e, Blocked):
        return 403, "blocked", ""
    if isinstance(e, Terminated):
        return 403, "execution_terminal", ""
    if isinstance(e, LeaseSuperseded):
        return 409, "lease_superseded", ""
    if isinstance(e, RateLimited):
        return 429, "rate_limited", e.reason
    assert isinstance(e, PolicyError)
    return 403, "denied", e.reason


def _is_event_stream(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "text/event-stream"


def _error_of(e: BaseException) -> dict[str, str]:
    """The recorded error of a transport failure: its message and exception type."""
    return {"message": str(e) or type(e).__name__, "type": type(e).__name__}


def _record(status: int, content_type: str, data: bytes) -> dict[str, Any]:
    rec: dict[str, Any] = {"status": status, "headers": {"content-type": content_type}}
    try:
        rec["body"] = data.decode("utf-8")
    except UnicodeDecodeError:
        rec["body_base64"] = base64.b64encode(data).decode("ascii")
    return rec


def _parts(record: Any) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body bytes of a recorded response."""
    if not isinstance(record, dict):
        return 200, {"content-type": "application/json"}, json.dumps(record).encode()
    status = int(record.get("status") or 200)
    headers = {str(k): str(v) for k, v in (record.get("headers") or {}).items()}
    headers.setdefault("content-type", "application/json")
    if "body_base64" in record:
        data = base64.b64decode(record["body_base64"])
    else:
        body = record.get("body", "")
        data = body.encode("utf-8") if isinstance(body, str) else json.dumps(body).encode("utf-8")
    return status, headers, data


class _ReplayStream(httpx.AsyncByteStream):
    """Recorded bytes handed out in chunks, so a replayed stream is still a stream."""

    def __init__(self, data: bytes):
        self._data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i in range(0, len(self._data), _REPLAY_CHUNK):
            yield self._data[i:i + _REPLAY_CHUNK]

    async def aclose(self) -> None:
        pass


def _rebuild(request: httpx.Request, record: Any) -> httpx.Response:
    status, headers, data = _parts(record)
    if _is_event_stream(headers.get("content-type", "")):
        return httpx.Response(status, headers=headers, stream=_ReplayStream(data), request=request)
    return httpx.Response(status, headers=headers, content=data, request=request)


def _replayed_error(request: httpx.Request, e: ToolError) -> Exception:
    """The exception a recorded transport failure replays as."""
    err = e.error if isinstance(e.error, dict) else {}
    cls = getattr(httpx, str(err.get("type") or ""), None)
    if isinstance(cls, type) and issubclass(cls, httpx.TransportError):
        return cls(e.message, request=request)
    return LLMError(f"model call failed (recorded): {e.message}")


class _TeeStream(httpx.AsyncByteStream):
    """Passes the live body on chunk by chunk and records the whole when it ends."""

    def __init__(self, ctx: ExecutionContext, step_id: str, target: str, resp: httpx.Response,
                 content_type: str):
        self._ctx = ctx
        self._step_id = step_id
        self._target = target
        self._resp = resp
        self._content_type = content_type
        self._chunks: list[bytes] = []
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._resp.aiter_bytes():  # decoded: no content-encoding left
                # keep it before yielding: a consumer that stops after this chunk never resumes us
                self._chunks.append(chunk)
                yield chunk
        except asyncio.CancelledError:
            raise
        except Exception as e:
            await self._finish(error=e)
            raise
        await self._finish()

    async def aclose(self) -> None:
        try:
            await self._finish()
        finally:
            await self._resp.aclose()

    async def _finish(self, *, error: Exception | None = None) -> None:
        if self._done:
            return
        self._done = True
        if error is not None:
            await self._ctx.record_error(self._step_id, self._target,
                                         {"message": str(error) or type(error).__name__,
                                          "type": type(error).__name__})
            return
        await self._ctx.record(self._step_id, self._target,
                               _record(self._resp.status_code, self._content_type, b"".join(self._chunks)))


class RebunoTransport(httpx.AsyncBaseTransport):
    """An httpx async transport that records model calls as durable ``llm_call`` steps.

    Args:
        inner: The transport that really sends requests (default
            ``httpx.AsyncHTTPTransport()``).
        model_field: The top-level field of a JSON request body that names the model;
            its value is the step's target.

    See the module documentation for what is recorded and how it replays.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None, *, model_field: str = "model"):
        self._inner = inner if inner is not None else httpx.AsyncHTTPTransport()
        self.model_field = model_field

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` as a recorded step (or replay it); see the class documentation."""
        ctx = current()
        if ctx is None:
            return await self._inner.handle_async_request(request)
        payload = await self._json_body(request)
        target = payload.get(self.model_field) if payload is not None else None
        if not isinstance(target, str) or not target:
            logger.debug("%s %s: no JSON body with a %r string; not recorded", request.method, request.url,
                         self.model_field)
            return await self._inner.handle_async_request(request)
        try:
            proceed, value = await ctx.begin("llm_call", target, payload, "safe_to_retry")
        except (Blocked, Terminated, LeaseSuperseded, PolicyError, RateLimited) as e:
            status, decision, reason = _refusal(e)
            return httpx.Response(status, json={"error": {"type": REFUSAL_TYPE,
                                                          "message": refusal_message(decision, reason)}},
                                  request=request)
        except ToolError as e:  # the recorded call failed in the transport: fail the same way
            raise _replayed_error(request, e) from None
        if not proceed:
            return _rebuild(request, value)
        step_id: str = value
        ctx.steps_run += 1
        try:
            resp = await self._inner.handle_async_request(request)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            await ctx.record_error(step_id, target, _error_of(e))
            raise
        resp.request = request
        content_type = resp.headers.get("content-type", "application/json")
        if resp.status_code < 400 and _is_event_stream(content_type):
            tee = _TeeStream(ctx, step_id, target, resp, content_type)
            return httpx.Response(resp.status_code, headers={"content-type": content_type}, stream=tee,
                                  request=request)
        try:
            data = await resp.aread()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            await ctx.record_error(step_id, target, _error_of(e))
            raise
        finally:
            await resp.aclose()
        recorded = await ctx.record(step_id, target, _record(resp.status_code, content_type, data))
        return _rebuild(request, recorded)

    @staticmethod
    async def _json_body(request: httpx.Request) -> dict[str, Any] | None:
        raw = await request.aread()
        if not raw:
            return None
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return None
        return body if isinstance(body, dict) else None

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self._inner.aclose()


def http_client(*, model_field: str = "model", **httpx_kwargs: Any) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` whose model calls are durable ``llm_call`` steps.

    Pass it to a provider library (``AsyncOpenAI(http_client=http_client())``) or use it
    directly. ``httpx_kwargs`` go to ``httpx.AsyncClient`` (``base_url``, ``timeout``,
    ``headers`` ...); ``transport=`` becomes the inner transport, ``verify``, ``cert``,
    ``http1``, ``http2`` and ``limits`` configure the default inner transport, and the
    transports of ``mounts=`` are wrapped too. ``proxies=`` is refused (its transports
    would bypass the recording): pass ``transport=httpx.AsyncHTTPTransport(proxy=...)``.
    Proxy environment variables are not applied (httpx skips them when a transport is
    given).
    """
    if "proxies" in httpx_kwargs or "app" in httpx_kwargs:
        raise TypeError("http_client(): proxies=/app= would bypass the recording; pass "
                        "transport=httpx.AsyncHTTPTransport(proxy=...) instead")
    inner = httpx_kwargs.pop("transport", None)
    transport_args = {k: httpx_kwargs.pop(k) for k in _TRANSPORT_ARGS if k in httpx_kwargs}
    if inner is None:
        if "trust_env" in httpx_kwargs:
            transport_args["trust_env"] = httpx_kwargs["trust_env"]
        inner = httpx.AsyncHTTPTransport(**transport_args)
    elif transport_args:
        raise TypeError(f"http_client(): {', '.join(transport_args)} configure the default transport; "
                        "set them on the transport= you pass instead")
    mounts = httpx_kwargs.pop("mounts", None)
    if mounts:
        httpx_kwargs["mounts"] = {k: RebunoTransport(t, model_field=model_field) if t is not None else None
                                  for k, t in mounts.items()}
    return httpx.AsyncClient(transport=RebunoTransport(inner, model_field=model_field), **httpx_kwargs)
