"""Bind an execution's JSON input to the handler's parameters.

* A handler with one parameter that is unannotated, ``Any``, ``dict`` or
  ``dict[...]`` gets the whole input.
* Otherwise the input must be a JSON object whose fields are the handler's parameter
  names: ``process(task: str, session: str | None = None)`` takes
  ``{"task": "...", "session": "..."}``. Parameters without a default are required;
  unknown fields are refused unless the handler has ``**kwargs``. Simple annotations
  (``str``, ``int``, ``float``, ``bool``, ``list``, ``dict``, ``X | None``,
  ``list[X]``, ``dict[str, X]``, ``Literal[...]``) are checked.

A mismatch raises :class:`InputError`; the agent fails the execution with
``input_invalid: <message>`` before the handler runs.
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any


class InputError(ValueError):
    """The execution's input does not fit the handler."""


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:
        return {}


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "None"
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def check_type(value: Any, tp: Any, where: str) -> None:
    """Raise :class:`InputError` when ``value`` clearly does not fit ``tp``."""
    if tp is inspect.Parameter.empty or tp is Any or tp is object:
        return
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return check_type(value, args[0], where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return check_type(value, options[0], where)
        errors = []
        for a in options:
            try:
                check_type(value, a, where)
                return
            except InputError as e:
                errors.append(e)
        raise InputError(f"{where}: expected {' | '.join(_type_name(a) for a in args)}, "
                         f"got {_json_type(value)}")
    if origin is typing.Literal:
        if value not in args:
            raise InputError(f"{where}: expected one of {', '.join(repr(a) for a in args)}, got {value!r}")
        return
    if tp is type(None) or tp is None:
        if value is not None:
            raise InputError(f"{where}: expected null, got {_json_type(value)}")
        return
    simple = {str: str, bool: bool, list: list, dict: dict}
    if tp in simple:
        if not isinstance(value, simple[tp]):
            raise InputError(f"{where}: expected {tp.__name__}, got {_json_type(value)}")
        return
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{where}: expected int, got {_json_type(value)}")
        return
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{where}: expected float, got {_json_type(value)}")
        return
    if origin in (list, collections.abc.Sequence, collections.abc.MutableSequence):
        if not isinstance(value, list):
            raise InputError(f"{where}: expected a list, got {_json_type(value)}")
        if args:
            for i, item in enumerate(value):
                check_type(item, args[0], f"{where}[{i}]")
        return
    if origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping):
        if not isinstance(value, dict):
            raise InputError(f"{where}: expected an object, got {_json_type(value)}")
        if len(args) == 2:
            for k, item in value.items():
                check_type(item, args[1], f"{where}.{k}")
        return
    # anything else (dataclasses, custom classes): not checked


class InputBinder:
    """Maps an execution's input to the keyword arguments of ``fn``."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self.sig = inspect.signature(fn)
        hints = _hints(fn)
        self.params: list[inspect.Parameter] = []
        self.var_kw = False
        for p in self.sig.parameters.values():
            if p.kind is p.VAR_KEYWORD:
                self.var_kw = True
            elif p.kind is p.VAR_POSITIONAL:
                continue
            elif p.kind is p.POSITIONAL_ONLY:
                raise TypeError(f"handler {getattr(fn, '__name__', fn)!r}: positional-only parameter "
                                f"{p.name!r} cannot be bound from the input; make it a normal parameter")
            else:
                self.params.append(p)
        self.hints = {p.name: hints.get(p.name, p.annotation) for p in self.params}
        self.raw_param: str | None = None
        if len(self.params) == 1 and not self.var_kw:
            p = self.params[0]
            ann = self.hints[p.name]
            if ann is inspect.Parameter.empty or ann is Any or ann is dict or typing.get_origin(ann) is dict:
                self.raw_param = p.name

    def bind(self, data: Any) -> dict[str, Any]:
        """The keyword arguments for the handler; raises :class:`InputError`."""
        if self.raw_param is not None:
            return {self.raw_param: data}
        names = [p.name for p in self.params]
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise InputError(f"input must be a JSON object with the fields {', '.join(names) or '(none)'}; "
                             f"got {_json_type(data)}")
        missing = [p.name for p in self.params if p.default is p.empty and p.name not in data]
        if missing:
            fields = ", ".join(repr(m) for m in missing)
            raise InputError(f"missing required field{'s' if len(missing) > 1 else ''} {fields} "
                             f"(the handler takes: {', '.join(names)})")
        unknown = [k for k in data if k not in names]
        if unknown and not self.var_kw:
            fields = ", ".join(repr(k) for k in unknown)
            raise InputError(f"unexpected field{'s' if len(unknown) > 1 else ''} {fields} "
                             f"(the handler takes: {', '.join(names) or 'no fields'})")
        for p in self.params:
            if p.name in data:
                check_type(data[p.name], self.hints[p.name], p.name)
        return dict(data)
