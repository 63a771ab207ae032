"""Tools: ``@tool``, ``wrap_tool``, :class:`Refusal` and :class:`ToolSet`.

Every call of a tool is a ``tool_call`` step: the kernel checks it against the
agent's policy and records it, and a re-dispatched agent gets the recorded result
back instead of running the body again.

* ``async def`` tools give a wrapper that returns an awaitable in async code
  (``await shell("ls")``); called from a synchronous handler (a worker thread with no
  event loop) it runs the call on the agent's event loop, blocks and returns the value.
  Outside an execution, synchronous callers get a ``TypeError``.
* Plain ``def`` tools give a wrapper that works both ways: called from a synchronous
  handler (which runs in a worker thread) it blocks and returns the value, running the
  body in that thread; called from async code it returns an awaitable and runs the
  body in a worker thread (``await count_lines(path)``).

A denied call does not raise by default: the tool returns a :class:`Refusal`, a ``str``
reading ``"<tool> not allowed. reason: <reason>"`` (the upstream SDK's convention),
so a model's tool loop can show it to the model and the handler can test
``isinstance(result, Refusal)``. Pass ``on_denied="raise"`` to get a
:class:`~rebuno.errors.PolicyError` instead.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar, overload

from rebuno._schema import openai_tool, split_docstring
from rebuno.errors import PolicyError, ToolError
from rebuno.execution import IDEMPOTENCY_MODES, current, in_event_loop, require_current, to_json_value

_F = TypeVar("_F", bound=Callable[..., Any])
OnDenied = Literal["refuse", "raise"]


class Refusal(str):
    """A denied tool call's result: ``"<tool> not allowed. reason: <reason>"``.

    It is a ``str`` (so it can go straight back to a model and into JSON) that also
    carries ``tool``, ``reason``, ``rule_id``, ``step_id`` and the original ``error``.
    """

    tool: str
    reason: str
    rule_id: str
    step_id: str
    error: PolicyError

    def __new__(cls, tool: str, error: PolicyError) -> Refusal:
        """Build the refusal for ``tool`` from the kernel's denial."""
        obj = super().__new__(cls, f"{tool} not allowed. reason: {error.reason}")
        obj.tool = tool
        obj.reason = error.reason
        obj.rule_id = error.rule_id
        obj.step_id = error.step_id
        obj.error = error
        return obj


def _check(idempotency: str, on_denied: str) -> None:
    if idempotency not in IDEMPOTENCY_MODES:
        raise ValueError(f"idempotency must be one of {IDEMPOTENCY_MODES}, not {idempotency!r}")
    if on_denied not in ("refuse", "raise"):
        raise ValueError(f"on_denied must be 'refuse' or 'raise', not {on_denied!r}")


def _mark_coroutine_function(fn: Callable[..., Any]) -> None:
    """Let frameworks that check ``iscoroutinefunction`` treat an async tool's wrapper as
    async (it returns a coroutine whenever an event loop runs in the calling thread)."""
    mark = getattr(inspect, "markcoroutinefunction", None)  # Python 3.12+
    if mark is not None:
        mark(fn)
    else:  # Python 3.11: asyncio.iscoroutinefunction honours this marker
        fn._is_coroutine = asyncio.coroutines._is_coroutine  # type: ignore[attr-defined]


def _make_call(tool_id: str, *, is_async: bool, idempotency: str, on_denied: str,
               prepare: Callable[..., tuple[Any, Callable[[], Any]]],
               resources: list[str] | None = None) -> Callable[..., Any]:
    """Build the callable shared by ``@tool`` and ``wrap_tool``.

    ``prepare(*args, **kwargs)`` returns ``(recorded_args, body)``; ``body()`` runs the
    tool (returns a value or an awaitable).
    """

    declared = list(resources) if resources else None

    def refuse(e: PolicyError) -> Refusal:
        if on_denied == "raise":
            raise e
        return Refusal(tool_id, e)

    if is_async:
        async def async_call(*args: Any, **kwargs: Any) -> Any:
            ctx = require_current(f"tool {tool_id!r}")
            recorded, body = prepare(*args, **kwargs)
            try:
                return await ctx.run_step("tool_call", tool_id, recorded, idempotency, body, declared)
            except PolicyError as e:
                return refuse(e)

        def call(*args: Any, **kwargs: Any) -> Any:
            if in_event_loop():
                return async_call(*args, **kwargs)
            # Synchronous code (a sync handler or sync tool in a worker thread): run the
            # call on the agent's loop, where the body and its connections belong, and wait.
            ctx = current()
            if ctx is None:
                raise TypeError(f"async tool {tool_id!r} was called from synchronous code outside an "
                                "active execution: await it from async code, or call it from a handler "
                                "started by Agent.run()")
            return asyncio.run_coroutine_threadsafe(async_call(*args, **kwargs), ctx.loop).result()
        _mark_coroutine_function(call)
        return call

    def sync_call(*args: Any, **kwargs: Any) -> Any:
        ctx = require_current(f"tool {tool_id!r}")
        recorded, body = prepare(*args, **kwargs)
        if in_event_loop():
            async def go() -> Any:
                try:
                    return await ctx.run_step("tool_call", tool_id, recorded, idempotency,
                                              lambda: asyncio.to_thread(body), declared)
                except PolicyError as e:
                    return refuse(e)
            return go()
        try:
            return ctx.run_step_sync("tool_call", tool_id, recorded, idempotency, body, declared)
        except PolicyError as e:
            return refuse(e)
    return sync_call


def _binder(fn: Callable[..., Any], tool_id: str) -> Callable[..., tuple[Any, Callable[[], Any]]]:
    sig = inspect.signature(fn)
    params = list(sig.parameters)
    skip = params[0] if params and params[0] in ("self", "cls") else None

    def prepare(*args: Any, **kwargs: Any) -> tuple[Any, Callable[[], Any]]:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"tool {tool_id!r}: {e}") from None
        bound.apply_defaults()
        recorded = {k: v for k, v in bound.arguments.items() if k != skip}
        recorded = to_json_value(recorded, f"tool {tool_id!r} arguments")
        return recorded, lambda: fn(*bound.args, **bound.kwargs)
    return prepare


def _decorate(fn: Callable[..., Any], tool_id: str | None, idempotency: str,
              resources: list[str] | None, on_denied: str) -> Callable[..., Any]:
    if not callable(fn):
        raise TypeError("@tool decorates a function")
    name = tool_id or getattr(fn, "__name__", None)
    if not name:
        raise ValueError("@tool needs a name for this callable: @tool('name')")
    is_async = inspect.iscoroutinefunction(fn)
    call = _make_call(name, is_async=is_async, idempotency=idempotency, on_denied=on_denied,
                      prepare=_binder(fn, name), resources=resources)
    wrapper = functools.wraps(fn)(call)
    wrapper.__rebuno_tool__ = name  # type: ignore[attr-defined]
    wrapper.__idempotency__ = idempotency  # type: ignore[attr-defined]
    wrapper.__rebuno_resources__ = list(resources or [])  # type: ignore[attr-defined]
    return wrapper


@overload
def tool(tool_id: _F) -> _F: ...


@overload
def tool(tool_id: str | None = None, *, idempotency: str = "safe_to_retry",
         resources: list[str] | None = None, on_denied: OnDenied = "refuse") -> Callable[[_F], _F]: ...


def tool(tool_id: Any = None, *, idempotency: str = "safe_to_retry", resources: list[str] | None = None,
         on_denied: OnDenied = "refuse") -> Any:
    """Make a function a durable, policy-checked tool.

    Usable as ``@tool``, ``@tool()``, ``@tool("name")`` or
    ``@tool("name", idempotency="at_most_once", resources=["workspace"])``.

    Args:
        tool_id: The step target the kernel and the policy see; defaults to the
            function's name.
        idempotency: ``"safe_to_retry"`` (default): a call interrupted by a worker crash
            runs again on the next dispatch. ``"at_most_once"``: an interrupted call is
            never re-run; the agent gets :class:`~rebuno.errors.IndeterminateError`.
        resources: Keys of the resources the tool may change (default none:
            ``read_file`` declares nothing, ``shell`` declares ``["workspace"]``). Sent
            with the step for the keys this execution has registered with
            :func:`rebuno.resource`; every N-th live call that declares a resource
            checkpoints it (its :class:`~rebuno.CheckpointPolicy`).
        on_denied: ``"refuse"`` (default) returns a :class:`Refusal` string when the
            call is denied; ``"raise"`` raises :class:`~rebuno.errors.PolicyError`.

    The recorded ``args`` are the bound arguments by name with defaults applied (a
    leading ``self``/``cls`` is left out); they and the result must be JSON values.
    A body exception fails the step and raises :class:`~rebuno.errors.ToolError`
    (the same error replays on a later dispatch).
    """
    _check(idempotency, on_denied)
    if callable(tool_id):
        return _decorate(tool_id, None, idempotency, resources, on_denied)
    if tool_id is not None and not isinstance(tool_id, str):
        raise TypeError("tool() takes a name string or a function")

    def decorator(fn: _F) -> _F:
        return _decorate(fn, tool_id, idempotency, resources, on_denied)  # type: ignore[return-value]
    return decorator


def _signature_from_schema(schema: dict[str, Any]) -> inspect.Signature:
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    required = set(schema.get("required", [])) if isinstance(schema, dict) else set()
    return inspect.Signature([
        inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY,
                          default=inspect.Parameter.empty if p in required else None)
        for p in props if str(p).isidentifier()
    ])


def wrap_tool(name: str, invoke: Callable[[dict[str, Any]], Any], *, description: str = "",
              args_schema: dict[str, Any] | None = None, idempotency: str = "safe_to_retry",
              to_result: Callable[[Any], Any] | None = None,
              transform_args: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
              resources: list[str] | None = None, on_denied: OnDenied = "refuse") -> Callable[..., Any]:
    """Make a durable tool out of something that is not a plain function (a framework's
    tool object, an MCP tool, a client method).

    The returned callable takes keyword arguments, records them (after
    ``transform_args``) as the step's ``args`` and calls ``invoke(args)`` (sync or
    async) when the kernel says proceed; ``to_result`` maps the raw return value to the
    JSON value that is recorded. ``description`` and ``args_schema`` (a JSON Schema
    object) describe the tool to a model (:class:`ToolSet`, ``__input_schema__``).
    Other arguments as for :func:`tool`.
    """
    _check(idempotency, on_denied)
    if not name:
        raise ValueError("wrap_tool needs a name")
    schema = args_schema or {"type": "object", "properties": {}}
    is_async = inspect.iscoroutinefunction(invoke) or inspect.iscoroutinefunction(
        getattr(invoke, "__call__", None))

    def prepare(*args: Any, **kwargs: Any) -> tuple[Any, Callable[[], Any]]:
        if args:
            raise TypeError(f"tool {name!r} takes keyword arguments only")
        recorded = transform_args(dict(kwargs)) if transform_args else dict(kwargs)
        recorded = to_json_value(recorded, f"tool {name!r} arguments")

        def body() -> Any:
            out = invoke(dict(recorded))
            convert = to_result
            if convert is None:
                return out
            if inspect.isawaitable(out):
                async def finish(conv: Callable[[Any], Any], pending: Any) -> Any:
                    return conv(await pending)
                return finish(convert, out)
            return convert(out)
        return recorded, body

    call = _make_call(name, is_async=is_async, idempotency=idempotency, on_denied=on_denied,
                      prepare=prepare, resources=resources)
    call.__name__ = name
    call.__qualname__ = name
    call.__doc__ = description or None
    call.__signature__ = _signature_from_schema(schema)  # type: ignore[attr-defined]
    call.__input_schema__ = schema  # type: ignore[attr-defined]
    call.__rebuno_tool__ = name  # type: ignore[attr-defined]
    call.__idempotency__ = idempotency  # type: ignore[attr-defined]
    call.__rebuno_resources__ = list(resources or [])  # type: ignore[attr-defined]
    return call


ToolErrors = Literal["return", "raise"]


class ToolSet:
    """Tools offered to a model in OpenAI function-calling format, and the runner for
    the model's ``tool_calls``.

    ``schemas`` is the ``tools`` request parameter (name = tool id, description = the
    docstring, parameters = JSON Schema from the type hints). :meth:`run` executes a
    message's ``tool_calls`` **one after another, in order** (so a re-dispatch submits
    the same steps in the same order) and returns the ``role: tool`` messages. Refusals
    come back as their text; a failing tool comes back as ``"error: ..."`` when
    ``tool_errors="return"`` (default) so the model can react, or raises with
    ``"raise"``. ``Blocked``/``Terminated`` always propagate.
    """

    def __init__(self, tools: Iterable[Callable[..., Any]], *, tool_errors: ToolErrors = "return"):
        self.tools: dict[str, Callable[..., Any]] = {}
        for t in tools:
            name = getattr(t, "__rebuno_tool__", None) or getattr(t, "__name__", None)
            if not name:
                raise ValueError(f"cannot name tool {t!r}")
            if name in self.tools:
                raise ValueError(f"two tools are named {name!r}")
            self.tools[name] = t
        if tool_errors not in ("return", "raise"):
            raise ValueError("tool_errors must be 'return' or 'raise'")
        self.tool_errors = tool_errors

    @property
    def names(self) -> list[str]:
        """The tool names, in the order given."""
        return list(self.tools)

    def __contains__(self, name: object) -> bool:
        return name in self.tools

    def __len__(self) -> int:
        return len(self.tools)

    @property
    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` list."""
        return [openai_tool(t, name=n) for n, t in self.tools.items()]

    def describe(self, name: str) -> str:
        """A tool's description (the docstring without its ``Args:`` section)."""
        return split_docstring(getattr(self.tools[name], "__doc__", None))[0]

    async def call(self, name: str, arguments: dict[str, Any] | str | None) -> Any:
        """Call one tool by name with a dict (or JSON text) of arguments."""
        if name not in self.tools:
            raise KeyError(f"unknown tool {name!r}; available: {', '.join(self.tools) or 'none'}")
        if isinstance(arguments, str):
            arguments = json.loads(arguments) if arguments.strip() else {}
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise TypeError("tool arguments must be a JSON object")
        out = self.tools[name](**arguments)
        if inspect.isawaitable(out):
            out = await out
        return out

    async def run(self, tool_calls: Iterable[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """Run a model message's ``tool_calls``; return one ``role: tool`` message each."""
        messages: list[dict[str, Any]] = []
        for tc in tool_calls or []:
            fn = tc.get("function") or {}
            name = fn.get("name", "")
            try:
                out = await self.call(name, fn.get("arguments"))
                content = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False)
            except PolicyError as e:
                content = str(Refusal(name, e))
            except (KeyError, TypeError, ValueError) as e:
                if self.tool_errors == "raise":
                    raise
                content = f"error: {e.args[0] if isinstance(e, KeyError) else e}"
            except ToolError as e:
                if self.tool_errors == "raise":
                    raise
                content = f"error: {e.message}"
            messages.append({"role": "tool", "tool_call_id": tc.get("id", ""), "content": content})
        return messages


def tools_schema(tools: Iterable[Callable[..., Any]]) -> list[dict[str, Any]]:
    """The OpenAI ``tools`` list for ``tools`` (shortcut for ``ToolSet(tools).schemas``)."""
    return ToolSet(tools).schemas


def is_tool(fn: Any) -> bool:
    """Whether ``fn`` was made by :func:`tool` or :func:`wrap_tool`."""
    return hasattr(fn, "__rebuno_tool__")

