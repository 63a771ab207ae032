"""``step()``: record a piece of local, non-deterministic work as a durable step."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from rebuno.execution import IDEMPOTENCY_MODES, in_event_loop, require_current, to_json_value


def step(name: str, fn: Callable[..., Any], args: dict[str, Any] | None = None,
         idempotency: str = "safe_to_retry", resources: list[str] | None = None) -> Any:
    """Run ``fn(**args)`` once and record its result as a ``local`` step named ``name``.

    On a re-dispatch the recorded value comes back without calling ``fn``, so use it for
    anything the rest of the run depends on that could differ the second time: finding
    or creating a sandbox (``step("find_sandbox", find_sandbox, {"session": s})``),
    loading a conversation, the current time, random choices, fresh ids. ``local``
    steps are allowed unless a policy rule matches them (by ``name`` as the target, or
    ``step_kind: local``); a denial raises :class:`~rebuno.errors.PolicyError` (unlike a
    tool, ``step()`` has no refusal string to return).

    ``fn`` may be sync or async. In async code ``await step(...)``; in a synchronous
    handler call it directly and it returns the value. ``args`` (a dict of JSON values,
    default ``{}``) is recorded and identifies the step together with ``name``; the
    result must be a JSON value. ``idempotency`` and ``resources`` as for ``@tool``.
    A failure of ``fn`` fails the step and raises :class:`~rebuno.errors.ToolError`
    (replayed the same way).
    """
    if idempotency not in IDEMPOTENCY_MODES:
        raise ValueError(f"idempotency must be one of {IDEMPOTENCY_MODES}, not {idempotency!r}")
    if args is not None and not isinstance(args, dict):
        raise TypeError("step() args must be a dict (passed to fn as keyword arguments)")
    ctx = require_current(f"step({name!r})")
    payload = to_json_value(dict(args or {}), f"step {name!r} arguments")
    call_args = dict(args or {})
    is_async = inspect.iscoroutinefunction(fn)
    if in_event_loop():
        def body() -> Any:
            if is_async:
                return fn(**call_args)
            return asyncio.to_thread(_call_sync, fn, call_args)
        return ctx.run_step("local", name, payload, idempotency, body, resources)
    return ctx.run_step_sync("local", name, payload, idempotency, lambda: _call_sync(fn, call_args),
                             resources)


def _call_sync(fn: Callable[..., Any], args: dict[str, Any]) -> Any:
    out = fn(**args)
    if inspect.isawaitable(out):  # an async callable object: run it to completion here
        return asyncio.run(_await(out))
    return out


async def _await(aw: Any) -> Any:
    return await aw
