"""A small OpenAI-compatible chat client whose calls are durable ``llm_call`` steps.

::

    from rebuno import ChatClient, ToolSet

    llm = ChatClient()                      # $LLM_BASE_URL, $LLM_API_KEY, $LLM_MODEL
    reply = await llm.chat([{"role": "user", "content": "hi"}])
    text = reply["choices"][0]["message"]["content"]

Inside a handler every request is submitted as a step of kind ``llm_call`` whose
target is the model name and whose args are the request body without ``stream`` /
``stream_options``. On ``proceed`` the client POSTs ``{base_url}/chat/completions``
and records the whole response JSON as the step's result; on ``replay`` it returns
the recorded response without calling the model, so a re-dispatched agent never pays
for the same request twice. Streaming responses (``stream=True``) are read as
Server-Sent Events, passed to ``on_delta`` as they arrive, and assembled (content,
tool-call deltas, finish reasons, usage) into one non-streaming ``chat.completion``
object, which is what is recorded and returned.

Outside a handler the client calls the model directly and records nothing.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

from rebuno._http import Transport, iter_sse
from rebuno.errors import LLMError, NetworkError, ToolError
from rebuno.execution import ExecutionContext, current, in_event_loop
from rebuno.tool import ToolSet

logger = logging.getLogger("rebuno.llm")

DeltaCallback = Callable[[str], Any]
_IDENTITY_DROP = ("stream", "stream_options")


def request_identity(body: dict[str, Any]) -> dict[str, Any]:
    """The step args recorded for a request body (the body without streaming flags)."""
    return {k: v for k, v in body.items() if k not in _IDENTITY_DROP}


class CompletionAssembler:
    """Builds one ``chat.completion`` object from streamed ``chat.completion.chunk``s."""

    def __init__(self) -> None:
        self.base: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}
        self.usage: Any = None

    def add(self, chunk: dict[str, Any]) -> str:
        """Fold in one chunk; returns the content text it added (for ``on_delta``)."""
        added = []
        for k in ("id", "created", "model", "system_fingerprint", "service_tier"):
            if chunk.get(k) is not None and k not in self.base:
                self.base[k] = chunk[k]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for ch in chunk.get("choices") or []:
            i = int(ch.get("index", 0) or 0)
            c = self.choices.setdefault(i, {"index": i, "role": None, "content": [], "reasoning": [],
                                            "refusal": [], "tools": {}, "finish_reason": None,
                                            "function_call": None})
            d = ch.get("delta") or {}
            if d.get("role"):
                c["role"] = d["role"]
            if d.get("content"):
                c["content"].append(d["content"])
                added.append(d["content"])
            for key, slot in (("reasoning_content", "reasoning"), ("refusal", "refusal")):
                if d.get(key):
                    c[slot].append(d[key])
            for n, tc in enumerate(d.get("tool_calls") or []):
                idx = tc.get("index", n)
                t = c["tools"].setdefault(idx, {"id": None, "type": "function",
                                                "function": {"name": "", "arguments": ""}})
                if tc.get("id"):
                    t["id"] = tc["id"]
                if tc.get("type"):
                    t["type"] = tc["type"]
                f = tc.get("function") or {}
                if f.get("name"):
                    t["function"]["name"] += f["name"]
                if f.get("arguments"):
                    t["function"]["arguments"] += f["arguments"]
            if d.get("function_call"):
                fc = c["function_call"] or {"name": "", "arguments": ""}
                fc["name"] += d["function_call"].get("name") or ""
                fc["arguments"] += d["function_call"].get("arguments") or ""
                c["function_call"] = fc
            if ch.get("finish_reason"):
                c["finish_reason"] = ch["finish_reason"]
        return "".join(added)

    def result(self) -> dict[str, Any]:
        """The assembled completion, shaped like a non-streaming response."""
        choices = []
        for i in sorted(self.choices):
            c = self.choices[i]
            msg: dict[str, Any] = {"role": c["role"] or "assistant",
                                   "content": "".join(c["content"]) if c["content"] else None}
            if c["reasoning"]:
                msg["reasoning_content"] = "".join(c["reasoning"])
            if c["refusal"]:
                msg["refusal"] = "".join(c["refusal"])
            if c["tools"]:
                msg["tool_calls"] = [c["tools"][k] for k in sorted(c["tools"])]
            if c["function_call"]:
                msg["function_call"] = c["function_call"]
            choices.append({"index": i, "message": msg, "finish_reason": c["finish_reason"]})
        out: dict[str, Any] = {"id": self.base.get("id"), "object": "chat.completion",
                               "created": self.base.get("created"), "model": self.base.get("model"),
                               "choices": choices}
        for k in ("system_fingerprint", "service_tier"):
            if k in self.base:
                out[k] = self.base[k]
        if self.usage is not None:
            out["usage"] = self.usage
        return out


class ChatClient:
    """An OpenAI-compatible ``/chat/completions`` client with recorded, replayable calls.

    Args:
        base_url: The API root, e.g. ``http://127.0.0.1:8000/v1`` (default
            ``$LLM_BASE_URL``; required).
        api_key: Sent as ``Authorization: Bearer`` (default ``$LLM_API_KEY``).
        model: Default model (default ``$LLM_MODEL``).
        timeout: Seconds for a whole non-streaming request, and the longest gap between
            two streamed chunks.
        max_retries: Retries of a call answered 429 or 5xx, or whose connection failed
            before the request was sent (back-off 1 s, 2 s, 4 s ...; ``Retry-After``
            honoured up to 30 s). A connection that fails after the request was sent is
            not retried (the model may have run it).
        headers: Extra headers for every request.
    """

    def __init__(self, base_url: str | None = None, api_key: str | None = None, model: str | None = None,
                 *, timeout: float = 120.0, max_retries: int = 2, headers: dict[str, str] | None = None):
        url = base_url or os.environ.get("LLM_BASE_URL")
        if not url:
            raise ValueError("ChatClient needs base_url= or $LLM_BASE_URL (an OpenAI-compatible API root, "
                             "e.g. http://127.0.0.1:8000/v1)")
        self.base_url = url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("LLM_API_KEY") or None
        self.model = model or os.environ.get("LLM_MODEL") or None
        self.timeout = timeout
        self.max_retries = max_retries
        self.headers = dict(headers or {})
        self._transports: dict[int, Transport] = {}

    def _transport(self) -> Transport:
        # one connection pool per event loop (a sync handler's calls run on the agent's loop)
        loop = asyncio.get_running_loop()
        t = self._transports.get(id(loop))
        if t is None:
            t = Transport(self.base_url, api_key=self.api_key, timeout=self.timeout, headers=self.headers)
            self._transports[id(loop)] = t
        return t

    # --- public API -------------------------------------------------------------------
    def _body(self, messages: list[dict[str, Any]], model: str | None,
              tools: ToolSet | list[dict[str, Any]] | None, stream: bool, params: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model or self.model, "messages": messages}
        if tools is not None:
            schemas = tools.schemas if isinstance(tools, ToolSet) else list(tools)
            if schemas:
                body["tools"] = schemas
        body.update(params)
        if stream:
            body["stream"] = True
        return body

    async def chat(self, messages: list[dict[str, Any]], *, model: str | None = None,
                   tools: ToolSet | list[dict[str, Any]] | None = None, stream: bool = False,
                   on_delta: DeltaCallback | None = None, **params: Any) -> dict[str, Any]:
        """Send a chat request; returns the completion JSON (a dict).

        ``tools`` may be a :class:`~rebuno.ToolSet` (its schemas are sent) or an OpenAI
        ``tools`` list; ``params`` go into the body as is (``temperature``,
        ``tool_choice``, ...). ``on_delta(text)`` (sync or async) gets content as it
        streams; it is not called when the call is replayed.
        """
        return await self._create(current(), self._body(messages, model, tools, stream, params), on_delta)

    async def create(self, *, on_delta: DeltaCallback | None = None, **body: Any) -> dict[str, Any]:
        """Send a raw request body (OpenAI ``chat.completions.create`` keyword arguments)."""
        return await self._create(current(), body, on_delta)

    def chat_sync(self, messages: list[dict[str, Any]], *, model: str | None = None,
                  tools: ToolSet | list[dict[str, Any]] | None = None, stream: bool = False,
                  on_delta: DeltaCallback | None = None, **params: Any) -> dict[str, Any]:
        """:meth:`chat` for synchronous handlers (the request runs on the agent's event loop)."""
        return self._sync(self._body(messages, model, tools, stream, params), on_delta)

    def create_sync(self, *, on_delta: DeltaCallback | None = None, **body: Any) -> dict[str, Any]:
        """:meth:`create` for synchronous handlers."""
        return self._sync(body, on_delta)

    def _sync(self, body: dict[str, Any], on_delta: DeltaCallback | None) -> dict[str, Any]:
        if in_event_loop():
            raise RuntimeError("chat_sync()/create_sync() are for synchronous code; use await chat() here")
        ctx = current()
        if ctx is not None:
            fut = asyncio.run_coroutine_threadsafe(self._create(ctx, body, on_delta), ctx.loop)
            return fut.result()
        return asyncio.run(self._once(body, on_delta))

    async def _once(self, body: dict[str, Any], on_delta: DeltaCallback | None) -> dict[str, Any]:
        try:
            return await self._create(None, body, on_delta)
        finally:
            await self.aclose()

    async def _create(self, ctx: ExecutionContext | None, body: dict[str, Any],
                      on_delta: DeltaCallback | None) -> dict[str, Any]:
        body = dict(body)
        if not body.get("model"):
            body["model"] = self.model
        model = body.get("model")
        if not model or not isinstance(model, str):
            raise ValueError("no model: pass model= or set $LLM_MODEL")
        if ctx is None:
            return await self._call(body, on_delta)
        target = model
        args = request_identity(body)
        try:
            proceed, value = await ctx.begin("llm_call", target, args, "safe_to_retry")
        except ToolError as e:  # a recorded failure replays
            status = e.error.get("status", 0) if isinstance(e.error, dict) else 0
            raise LLMError(f"model call failed (recorded): {e.message}", status, e.error) from None
        if not proceed:
            replayed: dict[str, Any] = value
            return replayed
        step_id = value
        ctx.steps_run += 1
        try:
            completion = await self._call(body, on_delta)
        except asyncio.CancelledError:
            raise
        except LLMError as e:
            await ctx.record_error(step_id, target, {"message": str(e), "type": "LLMError",
                                                     "status": e.status_code})
            raise
        except Exception as e:
            await ctx.record_error(step_id, target, {"message": str(e), "type": type(e).__name__})
            raise LLMError(f"model call failed: {e}") from e
        recorded: dict[str, Any] = await ctx.record(step_id, target, completion)
        return recorded

    async def run_tools(self, messages: list[dict[str, Any]], tools: ToolSet | Iterable[Callable[..., Any]],
                        *, model: str | None = None, max_turns: int = 20, **params: Any) -> list[dict[str, Any]]:
        """A minimal model/tool loop: call the model, run its ``tool_calls`` in order,
        append the results, repeat until it answers without tool calls (or
        ``max_turns`` model calls). Returns the whole conversation; the last message
        is the model's answer."""
        toolset = tools if isinstance(tools, ToolSet) else ToolSet(tools)
        convo = list(messages)
        for _ in range(max_turns):
            reply = await self.chat(convo, model=model, tools=toolset, **params)
            msg = (reply.get("choices") or [{}])[0].get("message") or {}
            kept: dict[str, Any] = {"role": msg.get("role") or "assistant", "content": msg.get("content")}
            if msg.get("tool_calls"):
                kept["tool_calls"] = msg["tool_calls"]
            convo.append(kept)
            if not msg.get("tool_calls"):
                return convo
            convo.extend(await toolset.run(msg["tool_calls"]))
        raise LLMError(f"the model was still calling tools after {max_turns} turns")

    # --- HTTP -------------------------------------------------------------------------
    async def _call(self, body: dict[str, Any], on_delta: DeltaCallback | None) -> dict[str, Any]:
        attempt = 0
        while True:
            try:
                if body.get("stream"):
                    return await self._stream(body, on_delta)
                return await self._plain(body)
            except _Retryable as r:
                if attempt >= self.max_retries:
                    raise r.error from None
                delay = r.retry_after if r.retry_after is not None else float(2 ** attempt)
                logger.info("model call: %s; retrying in %.1fs", r.error, delay)
                await asyncio.sleep(min(delay, 30.0))
                attempt += 1

    async def _plain(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            resp = await self._transport().request("POST", "/chat/completions", json=body,
                                                   idempotent=False, retry_for=0, raise_for_status=False,
                                                   retry_statuses=False)
        except NetworkError as e:
            if e.sent:
                raise LLMError(f"model endpoint: {e}") from e
            raise _Retryable(LLMError(f"model endpoint unreachable: {e}"), None) from e
        if resp.status >= 400:
            raise _error(resp.status, resp.body, resp.headers)
        try:
            data = resp.json()
        except ValueError as e:
            raise LLMError(f"model endpoint returned non-JSON: {resp.text[:200]}", resp.status) from e
        if not isinstance(data, dict):
            raise LLMError("model endpoint returned a non-object", resp.status, data)
        return data

    async def _stream(self, body: dict[str, Any], on_delta: DeltaCallback | None) -> dict[str, Any]:
        try:
            resp = await self._transport().stream("POST", "/chat/completions", json=body,
                                                  headers={"Accept": "text/event-stream"},
                                                  read_timeout=self.timeout)
        except NetworkError as e:
            if e.sent:
                raise LLMError(f"model endpoint: {e}") from e
            raise _Retryable(LLMError(f"model endpoint unreachable: {e}"), None) from e
        try:
            if resp.status >= 400:
                raise _error(resp.status, await resp.read(), resp.headers)
            ctype = resp.headers.get("content-type", "")
            if "text/event-stream" not in ctype:  # a server that ignored stream=true
                data = json.loads(await resp.read())
                if on_delta is not None:
                    for ch in data.get("choices") or []:
                        text = (ch.get("message") or {}).get("content")
                        if text:
                            await _emit(on_delta, text)
                plain: dict[str, Any] = data
                return plain
            asm = CompletionAssembler()
            async for ev in iter_sse(resp):
                data_text = ev.get("data", "")
                if data_text.strip() == "[DONE]":
                    break
                if not data_text.strip():
                    continue
                chunk = json.loads(data_text)
                if isinstance(chunk, dict) and chunk.get("error"):
                    raise LLMError(f"model stream error: {chunk['error']}", resp.status, chunk)
                added = asm.add(chunk)
                if added and on_delta is not None:
                    await _emit(on_delta, added)
            return asm.result()
        except (asyncio.TimeoutError, OSError) as e:
            raise LLMError(f"model stream broke off: {e or type(e).__name__}") from e
        finally:
            resp.close()

    async def aclose(self) -> None:
        """Close pooled connections of the current event loop."""
        t = self._transports.pop(id(asyncio.get_running_loop()), None)
        if t is not None:
            await t.close()


class _Retryable(Exception):
    def __init__(self, error: LLMError, retry_after: float | None):
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after


def _error(status: int, raw: bytes, headers: dict[str, str]) -> Exception:
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        data = None
    msg = raw.decode("utf-8", errors="replace")[:500]
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        msg = str(data["error"].get("message") or msg)
    err = LLMError(f"model endpoint answered HTTP {status}: {msg}", status, data)
    if status == 429 or status >= 500:
        retry_after = None
        try:
            retry_after = float(headers.get("retry-after", ""))
        except ValueError:
            pass
        return _Retryable(err, retry_after)
    return err


async def _emit(cb: DeltaCallback, text: str) -> None:
    out = cb(text)
    if inspect.isawaitable(out):
        await out
