"""MCP tools as durable rebuno tools: ``wrap_mcp_tools`` and ``wrap_mcp_tool``.

::

    from rebuno.mcp import wrap_mcp_tools

    listed = await session.list_tools()              # any MCP client
    tools = wrap_mcp_tools(listed.tools, session.call_tool, prefix="github")
    convo = await llm.run_tools(messages, tools)     # each call is a tool_call step

A thin layer over :func:`rebuno.wrap_tool`: this module speaks no MCP itself (no
dependency); it takes the tool descriptors an MCP client listed and the function that
calls a tool, and returns one durable, policy-checked tool per descriptor. Every call is
a ``tool_call`` step whose target is ``<prefix>_<name>`` and whose args are the call's
arguments with ``None`` values left out (models often fill optional fields with
``null``, which MCP servers tend to reject); a replay returns the recorded result without
calling the server.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Iterable
from typing import Any

from rebuno.tool import OnDenied, wrap_tool

McpCall = Callable[[str, dict[str, Any]], Any]
_SEPARATORS = ("_", ".", "-", "/", ":")


class MCPToolError(Exception):
    """An MCP tool answered with ``isError: true``; the step fails with its text."""


def _field(obj: Any, *names: str) -> Any:
    for n in names:
        if isinstance(obj, dict):
            if n in obj:
                return obj[n]
        elif hasattr(obj, n):
            return getattr(obj, n)
    return None


def _content_text(item: Any) -> str:
    if _field(item, "type") == "text":
        return str(_field(item, "text") or "")
    if isinstance(item, dict):
        return json.dumps(item, ensure_ascii=False)
    dump = getattr(item, "model_dump", None)  # pydantic objects of the mcp package
    if callable(dump):
        return json.dumps(dump(mode="json"), ensure_ascii=False)
    return str(item)


def flatten_result(result: Any) -> Any:
    """The value recorded for an MCP ``CallToolResult``.

    A result with ``content`` (a dict or an object, as the ``mcp`` package returns) becomes
    its text: one text item is returned as is, several are joined with newlines, and
    non-text items appear as JSON. ``isError: true`` raises :class:`MCPToolError`, so the
    step fails. Anything else (a plain value from your own ``call``) is returned as is.
    """
    content = _field(result, "content")
    if not isinstance(content, list):
        return result
    texts = [_content_text(item) for item in content]
    text = texts[0] if len(texts) == 1 else "\n".join(texts)
    if _field(result, "isError", "is_error"):
        raise MCPToolError(text or "the MCP tool reported an error")
    return text


def tool_id(name: str, prefix: str = "") -> str:
    """``<prefix>_<name>``; no ``_`` is added when ``prefix`` is empty or already ends in a
    separator (``_ . - / :``)."""
    if not prefix:
        return name
    return f"{prefix}{name}" if prefix.endswith(_SEPARATORS) else f"{prefix}_{name}"


def wrap_mcp_tool(descriptor: Any, call: McpCall, prefix: str = "", *, idempotency: str = "safe_to_retry",
                  resources: list[str] | None = None, on_denied: OnDenied = "refuse",
                  to_result: Callable[[Any], Any] | None = None) -> Callable[..., Any]:
    """One durable tool for one MCP tool.

    Args:
        descriptor: The tool as an MCP client lists it: a dict or object with ``name``,
            ``description`` and ``inputSchema`` (JSON Schema of the arguments).
        call: ``call(name, arguments)`` calls the tool on the server, with the MCP name
            (without the prefix); ``def`` or ``async def`` (or a ``def`` returning an
            awaitable, such as ``session.call_tool``). A plain ``def`` runs in a worker
            thread; awaitables run on the agent's event loop.
        prefix: Prepended to the step target and tool name (see :func:`tool_id`), so tools
            of several servers do not collide and a policy can match ``github_*``.
        idempotency, resources, on_denied: As for :func:`rebuno.tool`.
        to_result: Maps the raw result to the recorded JSON value (default
            :func:`flatten_result`).

    The returned tool is an async tool taking keyword arguments (``await
    gh_search(query="x")``; from a synchronous handler, a plain call). It carries the
    descriptor's description and schema, so :class:`rebuno.ToolSet` offers it to a model
    as the server described it.
    """
    name = _field(descriptor, "name")
    if not name or not isinstance(name, str):
        raise ValueError(f"an MCP tool descriptor needs a name: {descriptor!r}")
    description = _field(descriptor, "description") or ""
    schema = _field(descriptor, "inputSchema", "input_schema") or {"type": "object", "properties": {}}
    if not isinstance(schema, dict):
        raise TypeError(f"MCP tool {name!r}: inputSchema must be a JSON Schema object")
    is_async = inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(getattr(call, "__call__", None))

    async def invoke(args: dict[str, Any]) -> Any:
        if is_async:
            out = call(name, args)
        else:
            out = await asyncio.to_thread(call, name, args)
        if inspect.isawaitable(out):
            out = await out
        return out

    def strip_none(args: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in args.items() if v is not None}

    return wrap_tool(tool_id(name, prefix), invoke, description=str(description), args_schema=schema,
                     idempotency=idempotency, to_result=to_result or flatten_result,
                     transform_args=strip_none, resources=resources, on_denied=on_denied)


def wrap_mcp_tools(descriptors: Iterable[Any], call: McpCall, prefix: str = "", *,
                   idempotency: str = "safe_to_retry", resources: list[str] | None = None,
                   on_denied: OnDenied = "refuse",
                   to_result: Callable[[Any], Any] | None = None) -> list[Callable[..., Any]]:
    """:func:`wrap_mcp_tool` for each descriptor (a ``ListToolsResult`` is accepted too:
    its ``tools`` are used). Returns the tools in the order listed."""
    listed = _field(descriptors, "tools")
    items = listed if isinstance(listed, list) else list(descriptors)
    return [wrap_mcp_tool(d, call, prefix, idempotency=idempotency, resources=resources,
                          on_denied=on_denied, to_result=to_result) for d in items]
