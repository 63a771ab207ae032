"""Pure-Python pieces: schemas, input binding, failure reasons, errors, decorators."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Literal

import pytest


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


def test_openai_schema_from_type_hints_and_docstring():
    from rebuno import openai_tool, tool

    @tool("write_file")
    async def write_file(path: str, content: str, mode: Literal["w", "a"] = "w", tags: list[str] | None = None,
                         where: Point | None = None, extra: dict[str, int] | None = None) -> str:
        """Replace a file's contents.

        Args:
            path: Relative to the repository root.
            content: The new text.
        """
        return "ok"

    spec = openai_tool(write_file)
    assert spec["type"] == "function"
    fn = spec["function"]
    assert fn["name"] == "write_file" and fn["description"] == "Replace a file's contents."
    props = fn["parameters"]["properties"]
    assert fn["parameters"]["required"] == ["path", "content"]
    assert props["path"] == {"type": "string", "description": "Relative to the repository root."}
    assert props["mode"] == {"enum": ["w", "a"], "type": "string", "default": "w"}
    assert props["tags"] == {"type": ["array", "null"], "items": {"type": "string"}, "default": None}
    assert props["where"] == {"type": ["object", "null"], "properties": {"x": {"type": "integer"},
                                                                         "y": {"type": "integer"}},
                              "required": ["x"], "default": None}
    assert props["extra"] == {"type": ["object", "null"], "additionalProperties": {"type": "integer"},
                              "default": None}


def test_wrap_tool_and_toolset_schemas():
    from rebuno import ToolSet, tool, wrap_tool

    @tool
    def add(a: int, b: int = 1) -> int:
        """Add."""
        return a + b

    ext = wrap_tool("ext_search", lambda args: args, description="Search the web.",
                    args_schema={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
    ts = ToolSet([add, ext])
    assert ts.names == ["add", "ext_search"] and "add" in ts and len(ts) == 2
    schemas = {s["function"]["name"]: s["function"] for s in ts.schemas}
    assert schemas["ext_search"]["parameters"]["required"] == ["q"]
    assert schemas["add"]["parameters"] == {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer", "default": 1}}, "required": ["a"]}
    assert str(ext.__signature__) == "(*, q)"
    with pytest.raises(ValueError):
        ToolSet([add, add])


def test_tool_decorator_forms_and_calls_outside_an_execution():
    from rebuno import execution, step, tool

    @tool
    async def a(x: int) -> int:
        return x

    @tool()
    async def b() -> None:
        pass

    @tool("custom", idempotency="at_most_once", resources=["workspace"])
    async def c() -> None:
        pass

    assert (a.__rebuno_tool__, b.__rebuno_tool__, c.__rebuno_tool__) == ("a", "b", "custom")
    assert c.__idempotency__ == "at_most_once" and c.__rebuno_resources__ == ["workspace"]
    assert a.__name__ == "a" and a.__doc__ is None
    with pytest.raises(ValueError):
        tool("x", idempotency="sometimes")
    async def await_a() -> int:
        return await a(1)

    with pytest.raises(RuntimeError, match="outside an active execution"):
        asyncio.run(await_a())
    with pytest.raises(RuntimeError, match="outside a running handler"):
        execution()
    with pytest.raises(AttributeError, match="must be called"):
        execution.id  # noqa: B018
    with pytest.raises(RuntimeError):
        step("s", lambda: 1)
    # from synchronous code (no running loop) outside an execution an async tool cannot
    # run at all: a clear TypeError, not a coroutine that is never awaited
    with pytest.raises(TypeError, match="async tool 'a' was called from synchronous code"):
        a(1)
    assert asyncio.iscoroutinefunction(a)  # frameworks still see an async tool


def test_input_binding():
    from rebuno._inputs import InputBinder, InputError

    async def process(task: str, session: str | None = None, n: int = 1, tags: list[str] | None = None) -> None:
        pass

    b = InputBinder(process)
    assert b.bind({"task": "t"}) == {"task": "t"}
    assert b.bind({"task": "t", "session": None, "n": 2, "tags": ["a"]})["tags"] == ["a"]
    for bad, msg in [({}, "missing required field 'task'"), ({"task": 1}, "task: expected str, got number"),
                     ({"task": "t", "n": True}, "n: expected int, got boolean"),
                     ({"task": "t", "tags": [1]}, "tags[0]: expected str, got number"),
                     ({"task": "t", "x": 1}, "unexpected field 'x'"), ([1], "must be a JSON object")]:
        with pytest.raises(InputError, match=msg.replace("[", r"\[").replace("]", r"\]")):
            b.bind(bad)

    def raw(data: dict) -> None:
        pass

    assert InputBinder(raw).bind([1, 2]) == {"data": [1, 2]}

    def anything(data) -> None:  # noqa: ANN001
        pass

    assert InputBinder(anything).bind("text") == {"data": "text"}

    def kw(task: str, **rest: Any) -> None:
        pass

    assert InputBinder(kw).bind({"task": "t", "other": 1}) == {"task": "t", "other": 1}

    def lit(mode: Literal["a", "b"]) -> None:
        pass

    with pytest.raises(InputError, match="one of"):
        InputBinder(lit).bind({"mode": "c"})


def test_failure_reasons_and_errors():
    from rebuno import (
        APIError, IndeterminateError, LeaseSuperseded, NotFoundError, PolicyError, ToolError, failure_reason,
        raise_for_refusal, refusal_message,
    )
    from rebuno.errors import Blocked, ConflictError, error_from_response

    assert failure_reason(PolicyError("not on fridays", "r1")) == "policy_denied: not on fridays"
    assert failure_reason(PolicyError("approval_timeout")) == "approval_timeout"
    assert failure_reason(ToolError("boom", tool_id="shell")) == "tool_error: shell: boom"
    assert failure_reason(KeyError("k")) == "agent_error: KeyError: 'k'"
    assert failure_reason(NotFoundError("gone", "not_found", 404)) == "agent_error: NotFoundError: gone"
    long = failure_reason(RuntimeError("é" * 5000))
    assert len(long.encode()) <= 4096 and long.endswith("...")
    ind = IndeterminateError("maybe", tool_id="charge")
    assert isinstance(ind, ToolError) and ind.indeterminate
    e = error_from_response(409, b'{"code":"lease_superseded","message":"m","details":{"field":"f"}}')
    assert isinstance(e, LeaseSuperseded) and e.field == "f"  # the kernel's envelope
    e = error_from_response(409, b'{"error":{"code":"lease_superseded","message":"m","field":"f"}}')
    assert isinstance(e, LeaseSuperseded) and e.field == "f"  # sandboxd's
    e = error_from_response(409, b'{"error":{"code":"execution_terminal","message":"over"}}')
    assert isinstance(e, ConflictError) and e.code == "execution_terminal"
    e = error_from_response(502, b"<html>bad gateway</html>")
    assert type(e) is APIError and e.code == "internal_error"
    assert refusal_message("denied", "nope") == "rebuno_refusal: denied reason=nope"
    with pytest.raises(PolicyError, match="nope"):
        raise_for_refusal(RuntimeError("HTTP 403: rebuno_refusal: denied reason=nope"))
    with pytest.raises(Blocked):
        raise_for_refusal(RuntimeError("rebuno_refusal: blocked"))
    raise_for_refusal(RuntimeError("unrelated"))  # returns


def test_refusal_is_a_string_with_details():
    import json

    from rebuno import PolicyError, Refusal

    r = Refusal("open_pr", PolicyError("needs a person", "gate", step_id="s1"))
    assert r == "open_pr not allowed. reason: needs a person"
    assert (r.tool, r.reason, r.rule_id, r.step_id) == ("open_pr", "needs a person", "gate", "s1")
    assert json.dumps({"r": r}) == '{"r": "open_pr not allowed. reason: needs a person"}'


def test_results_are_normalized_through_json():
    from rebuno.execution import to_json_value

    assert to_json_value({"t": (1, 2), 3: "x"}) == {"t": [1, 2], "3": "x"}
    with pytest.raises(TypeError, match="not JSON-serializable"):
        to_json_value({"x": object()})
    with pytest.raises(ValueError, match="not JSON-serializable"):
        to_json_value(float("nan"))


def test_every_public_name_has_a_docstring_and_type_hints():
    import inspect

    import rebuno
    import rebuno.mcp

    public = [(rebuno, n) for n in rebuno.__all__]
    public += [(rebuno.mcp, n) for n in ("wrap_mcp_tools", "wrap_mcp_tool", "flatten_result", "tool_id",
                                         "MCPToolError")]
    try:
        import httpx  # noqa: F401
    except ImportError:
        pass
    else:
        public.append((rebuno, "RebunoTransport"))
    missing: list[str] = []
    for owner, name in public:
        obj = getattr(owner, name)
        if name.startswith("__") or inspect.ismodule(obj):
            continue
        if not (getattr(obj, "__doc__", None) or "").strip():
            missing.append(name)
        members = inspect.getmembers(obj) if inspect.isclass(obj) else []
        for mname, member in members:
            if mname.startswith("_") or mname in {"args", "with_traceback", "add_note"}:
                continue
            if inspect.isfunction(member) or isinstance(member, property):
                if not (member.__doc__ or "").strip():
                    missing.append(f"{name}.{mname}")
        is_protocol = getattr(obj, "_is_protocol", False)  # typing.Protocol's generated __init__
        if inspect.isfunction(obj) or (inspect.isclass(obj) and "__init__" in vars(obj) and not is_protocol):
            fn = obj if inspect.isfunction(obj) else obj.__init__
            sig = inspect.signature(fn)
            for p in sig.parameters.values():
                if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty:
                    missing.append(f"{name}({p.name}) has no type hint")
    assert not missing, missing
