"""JSON Schema from Python type hints, for OpenAI function-calling tool definitions."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any

_PRIMITIVES: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    dict: {"type": "object"},
    list: {"type": "array"},
    tuple: {"type": "array"},
    set: {"type": "array"},
    frozenset: {"type": "array"},
    bytes: {"type": "string"},
}


def type_schema(tp: Any) -> dict[str, Any]:
    """A JSON Schema for one annotation (unknown types give ``{}``: anything)."""
    if tp is inspect.Parameter.empty or tp is Any or tp is object:
        return {}
    if tp in _PRIMITIVES:
        return dict(_PRIMITIVES[tp])
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        inner = type_schema(args[0])
        for extra in args[1:]:
            if isinstance(extra, str):
                inner["description"] = extra
        return inner
    if origin in (typing.Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        schemas = [type_schema(a) for a in non_null]
        if len(non_null) < len(args):
            if len(schemas) == 1 and "type" in schemas[0] and isinstance(schemas[0]["type"], str):
                s = dict(schemas[0])
                s["type"] = [s["type"], "null"]
                return s
            schemas.append({"type": "null"})
        return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    if origin is typing.Literal:
        vals = list(args)
        lit: dict[str, Any] = {"enum": vals}
        kinds = {type(v) for v in vals}
        if len(kinds) == 1 and next(iter(kinds)) in _PRIMITIVES:
            lit["type"] = _PRIMITIVES[next(iter(kinds))]["type"]
        return lit
    if origin in (list, set, frozenset, typing.Sequence, typing.MutableSequence) or (
            origin is not None and inspect.isclass(origin) and issubclass(origin, (list, set, frozenset))):
        return {"type": "array", "items": type_schema(args[0])} if args else {"type": "array"}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": type_schema(args[0])}
        return {"type": "array", "prefixItems": [type_schema(a) for a in args],
                "minItems": len(args), "maxItems": len(args)} if args else {"type": "array"}
    if origin in (dict, typing.Mapping, typing.MutableMapping):
        s = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            s["additionalProperties"] = type_schema(args[1])
        return s
    if inspect.isclass(tp) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    if inspect.isclass(tp) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        props = {f.name: type_schema(hints.get(f.name, Any)) for f in dataclasses.fields(tp)}
        required = [f.name for f in dataclasses.fields(tp)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        return {"type": "object", "properties": props, "required": required}
    if inspect.isclass(tp) and typing.is_typeddict(tp):
        hints = _hints(tp)
        return {"type": "object", "properties": {k: type_schema(v) for k, v in hints.items()},
                "required": sorted(getattr(tp, "__required_keys__", hints.keys()))}
    return {}


def _hints(obj: Any) -> dict[str, Any]:
    """Resolved type hints; when some cannot be resolved (a local class under
    ``from __future__ import annotations``), resolve the others one by one."""
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except Exception:
        pass
    raw = dict(getattr(obj, "__annotations__", {}) or {})
    target = inspect.unwrap(obj) if callable(obj) else obj
    globalns = getattr(target, "__globals__", None) or vars(inspect.getmodule(target) or typing)
    out: dict[str, Any] = {}
    for name, ann in raw.items():
        if isinstance(ann, str):
            try:
                ann = eval(ann, dict(globalns), {})  # noqa: S307 - annotations of the user's own code
            except Exception:
                continue
        out[name] = ann
    return out


def split_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """``(description, {param: text})`` from a docstring with an optional Google-style
    ``Args:`` section."""
    if not doc:
        return "", {}
    doc = inspect.cleandoc(doc)
    m = re.search(r"^(Args|Arguments|Parameters):\s*$", doc, re.M)
    if not m:
        return doc.strip(), {}
    desc = doc[: m.start()].strip()
    params: dict[str, str] = {}
    current = None
    for line in doc[m.end():].splitlines():
        if line.strip() and not line.startswith((" ", "\t")):
            break  # next section
        pm = re.match(r"\s+(\*{0,2}\w+)\s*(\([^)]*\))?:\s*(.*)", line)
        if pm and (current is None or len(line) - len(line.lstrip()) <= 4):
            current = pm.group(1).lstrip("*")
            params[current] = pm.group(3).strip()
        elif current and line.strip():
            params[current] = (params[current] + " " + line.strip()).strip()
    return desc, params


def parameters_schema(fn: Callable[..., Any], *, skip_self: bool = True) -> dict[str, Any]:
    """The JSON Schema object of ``fn``'s parameters (defaults make them optional)."""
    sig = inspect.signature(fn)
    hints = _hints(fn)
    _, docs = split_docstring(getattr(fn, "__doc__", None))
    props: dict[str, Any] = {}
    required: list[str] = []
    for i, (name, p) in enumerate(sig.parameters.items()):
        if skip_self and i == 0 and name in ("self", "cls"):
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        s = type_schema(hints.get(name, p.annotation))
        if name in docs and docs[name]:
            s["description"] = docs[name]
        if p.default is not p.empty:
            if p.default is None or isinstance(p.default, (str, int, float, bool)):
                s.setdefault("default", p.default)
        else:
            required.append(name)
        props[name] = s
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out


def openai_tool(fn: Callable[..., Any], *, name: str | None = None, description: str | None = None,
                parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    """The OpenAI ``tools`` entry for ``fn``: ``{"type": "function", "function": {name,
    description, parameters}}``. The name is the tool id, the description the
    docstring's text before ``Args:``, the parameters come from the type hints."""
    tool_name = name or getattr(fn, "__rebuno_tool__", None) or getattr(fn, "__name__", "tool")
    desc = description if description is not None else split_docstring(getattr(fn, "__doc__", None))[0]
    if parameters is None:
        parameters = getattr(fn, "__input_schema__", None) or parameters_schema(fn)
    if not parameters:
        parameters = {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": tool_name, "description": desc or "",
                                             "parameters": parameters}}
