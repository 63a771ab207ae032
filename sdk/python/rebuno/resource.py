"""Resources with checkpoints: :func:`resource`, :class:`CheckpointPolicy` and the driver
protocol (:class:`ResourceDriver`).

A *resource* is something outside the agent that its tools change: a sandbox, a git
checkout, a scratch directory. The kernel records where it lives (the driver's
*binding*) and references to its *checkpoints*; the driver stores the contents::

    from rebuno import CheckpointPolicy, resource, tool

    @tool("shell", resources=["workspace"])       # declares that it changes the workspace
    async def shell(command: str) -> str: ...

    async def process(task: str):
        global workspace
        workspace = await resource("workspace", driver=MyDriver(...),
                                   checkpoints=CheckpointPolicy(every_steps=5))
        ...

What happens:

* ``resource()`` registers the key with the kernel. When the kernel already has a
  binding for it (a re-dispatch of this execution, or a later turn of its session), the
  driver **reopens** it: ``driver.open(binding)``. Otherwise the driver **creates** one,
  from the checkpoint the kernel selected for a fork or fresh:
  ``driver.create(checkpoint_ref)`` returns ``(handle, binding)`` and the binding is
  recorded. A driver that cannot do either (the sandbox or snapshot is gone) raises;
  the execution then fails with ``resource_unavailable: <key>: ...`` rather than run in
  an empty resource.
* With a :class:`CheckpointPolicy` the SDK captures (``driver.checkpoint(handle)``) a
  baseline when the resource is not covered by a checkpoint yet, after every
  ``every_steps``-th live tool call or ``step()`` that declares the resource (the kernel
  counts; replays, denied calls and model calls never count), and, with
  ``on_completion``, when the handler returns. A capture that fails is recorded
  (``resource.checkpoint_failed``) and never fails the step or the run.
* Without a policy there are no checkpoints at all: re-dispatches and session turns
  still reopen the same resource, and a fork starts from a fresh one.
* While an execution has a resource, its tool calls and local steps run one at a time,
  so a capture always sees a resource no step is changing.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import re
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from rebuno.errors import (
    Blocked,
    CheckpointUnavailable,
    LeaseSuperseded,
    RateLimited,
    ResourceUnavailable,
    Terminated,
    truncate_utf8,
)
from rebuno.execution import in_event_loop, require_current, to_json_value

if TYPE_CHECKING:
    from rebuno.execution import ExecutionContext

logger = logging.getLogger("rebuno.resource")

KEY_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
MAX_REF_BYTES = 1024
_CONTROL = (Blocked, Terminated, LeaseSuperseded, RateLimited)


@dataclass(frozen=True)
class CheckpointPolicy:
    """When the SDK checkpoints a resource.

    Args:
        every_steps: Capture after every N-th live tool call or ``step()`` that declares
            the resource (``resources=[key]``). At least 1.
        on_completion: Capture when the handler returns (unless a checkpoint already
            covers the resource's current state).

    A baseline is always captured when the resource is not covered yet: newly created,
    re-dispatched after changes, or reopened in a session turn whose parent's last
    checkpoint does not cover its end (a turn, like a fork, usually starts covered by the
    checkpoint it inherits or restores).
    """

    every_steps: int = 1
    on_completion: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.every_steps, bool) or not isinstance(self.every_steps, int):
            raise TypeError(f"every_steps must be an int, not {type(self.every_steps).__name__}")
        if self.every_steps < 1:
            raise ValueError(f"every_steps must be at least 1, not {self.every_steps}")
        if not isinstance(self.on_completion, bool):
            raise TypeError("on_completion must be True or False")


class ResourceDriver(Protocol):
    """What ``resource(key, driver=...)`` needs from a driver.

    Every method may be ``def`` (run in a worker thread) or ``async def`` (awaited on the
    agent's event loop).

    Attributes:
        driver_id: A stable name for the kind of resource (``"vercel-sandbox"``). Optional:
            the driver class's ``__qualname__`` is used when it is missing. The same key
            may not be registered again with another driver.
        configuration: Optional JSON object describing the resource's setup (repository,
            image, root folder). Recorded in the kernel's event log and compared when a
            re-dispatch or a later session turn registers the key again, so it must stay
            the same across processes and **must not hold credentials** (tokens, keys,
            passwords): pass those to the driver's constructor instead.
        coverage_reuse: Optional bool (default ``False``). ``True`` says steps that do not
            declare the resource leave it unchanged, so they do not end a checkpoint's
            coverage; by default any live step does.

    Methods:
        create(checkpoint_ref=None) -> (handle, binding): Make a new resource, from the
            checkpoint ``checkpoint_ref`` when given (a fork), else fresh. ``binding`` is
            a JSON value locating it (a sandbox name, a directory) that ``open`` accepts.
            Raise :class:`~rebuno.errors.CheckpointUnavailable` when the checkpoint is
            gone.
        open(binding) -> handle: Reopen the resource a binding names. Raise (any
            exception) when it no longer exists.
        checkpoint(handle) -> checkpoint_ref: Capture an immutable copy of the current
            contents and return its reference (a non-empty string, at most 1024 bytes).
            The handle stays usable.
        pause(handle): Optional. Stop the resource while the execution waits (files
            persist); ``open`` or the next use resumes it.
    """

    def create(self, checkpoint_ref: str | None = None) -> tuple[Any, Any] | Awaitable[tuple[Any, Any]]:
        """Make a new resource; return ``(handle, binding)``."""
        ...

    def open(self, binding: Any) -> Any:
        """Reopen the resource ``binding`` names; return its handle."""
        ...

    def checkpoint(self, handle: Any) -> str | Awaitable[str]:
        """Capture the contents; return the checkpoint reference."""
        ...


def driver_id_of(driver: Any) -> str:
    """``driver.driver_id``, else the driver class's qualified name."""
    did = getattr(driver, "driver_id", None)
    if did is None or did == "":
        return type(driver).__qualname__
    if not isinstance(did, str):
        raise TypeError(f"driver_id must be a string, not {type(did).__name__}")
    return did


async def call_driver(fn: Any, *args: Any) -> Any:
    """Call a driver method: ``async def`` ones are awaited here, plain ones run in a
    worker thread (an awaitable they return is awaited)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    out = await asyncio.to_thread(fn, *args)
    if inspect.isawaitable(out):
        out = await out
    return out


def _describe(e: BaseException) -> str:
    if isinstance(e, ResourceUnavailable):
        return str(e) or type(e).__name__
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


class Resource:
    """The SDK's record of one registered resource in a dispatch."""

    def __init__(self, ctx: ExecutionContext, key: str, driver: Any, policy: CheckpointPolicy | None,
                 spec: dict[str, Any], handle: Any, binding: Any, created: bool):
        self.ctx = ctx
        self.key = key
        self.driver = driver
        self.policy = policy
        self.spec = spec
        self.handle = handle
        self.binding = binding
        self.created = created
        self.proxy = ResourceHandle(self)

    def __repr__(self) -> str:
        return f"Resource({self.key!r}, driver={self.spec['driver_id']!r}, binding={self.binding!r})"

    async def capture(self) -> str:
        """``driver.checkpoint(handle)``, checked to be a usable reference."""
        ref = await call_driver(self.driver.checkpoint, self.handle)
        if not isinstance(ref, str) or not ref:
            raise TypeError(f"{type(self.driver).__qualname__}.checkpoint() returned {ref!r}; "
                            "it must return a non-empty checkpoint reference string")
        if len(ref.encode()) > MAX_REF_BYTES:
            raise ValueError(f"checkpoint reference longer than {MAX_REF_BYTES} bytes")
        return ref

    async def capture_entry(self, generation: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Capture for ``generation``: ``(capture, None)`` or ``(None, failure)``."""
        try:
            ref = await self.capture()
        except _CONTROL:
            raise
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a failed capture never fails the run
            logger.warning("execution %s: checkpoint of %r failed: %s", self.ctx.id, self.key, _describe(e))
            return None, {"key": self.key, "generation": generation,
                          "error": truncate_utf8(_describe(e), 4096)}
        return {"key": self.key, "generation": generation, "checkpoint_ref": ref}, None

    async def capture_now(self, generation: int, why: str) -> None:
        """Capture and record it on ``POST /checkpoints`` (baseline, completion)."""
        cap, fail = await self.capture_entry(generation)
        out = await self.ctx.kernel_call(self.ctx._kernel.record_checkpoints(
            self.ctx.id, self.ctx.lease, captures=[cap] if cap else None,
            capture_failures=[fail] if fail else None))
        log_refused(self.ctx, out, why)

    async def pause(self) -> None:
        """``driver.pause(handle)`` if the driver has one, else ``handle.pause()`` if the
        handle has one, else nothing."""
        fn = getattr(self.driver, "pause", None)
        if callable(fn):
            await call_driver(fn, self.handle)
            return
        fn = getattr(self.handle, "pause", None)
        if callable(fn):
            await call_driver(fn)


def log_refused(ctx: ExecutionContext, reply: Any, why: str) -> None:
    """Log the captures the kernel refused (stale generation, a writer running, ...)."""
    refused = (reply or {}).get("refused") if isinstance(reply, dict) else None
    for r in refused or []:
        logger.warning("execution %s: %s checkpoint of %r refused by the kernel: %s", ctx.id, why,
                       r.get("key"), r.get("reason"))


class ResourceHandle:
    """What :func:`resource` returns: the driver's handle, with ``pause()`` added.

    Attribute access goes to the driver's handle (``workspace.run_process(...)``,
    ``workspace.fs.read_text(...)``); ``os.fspath(workspace)`` works when the handle is
    path-like. ``await workspace.pause()`` calls ``driver.pause(handle)`` (in a synchronous
    handler, call it without ``await``). The driver's own handle is ``driver_handle``;
    ``resource_key`` and ``resource_binding`` say which resource it is.
    """

    __slots__ = ("_rebuno_resource",)
    _rebuno_resource: Resource

    def __init__(self, res: Resource):
        object.__setattr__(self, "_rebuno_resource", res)

    @property
    def driver_handle(self) -> Any:
        """The handle the driver's ``create``/``open`` returned."""
        return self._rebuno_resource.handle

    @property
    def resource_key(self) -> str:
        """The resource's key."""
        return self._rebuno_resource.key

    @property
    def resource_binding(self) -> Any:
        """The binding recorded for the resource."""
        return self._rebuno_resource.binding

    def pause(self) -> Any:
        """Stop the resource while the execution waits (``driver.pause(handle)``)."""
        res = self._rebuno_resource
        if in_event_loop():
            return res.ctx._on_loop(res.pause())
        return res.ctx._blocking(res.pause())

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_rebuno_resource").handle, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._rebuno_resource.handle, name, value)

    def __fspath__(self) -> Any:
        return os.fspath(self._rebuno_resource.handle)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(type(self))) | set(dir(self._rebuno_resource.handle)))

    def __repr__(self) -> str:
        res = self._rebuno_resource
        return f"<resource {res.key!r} binding={res.binding!r} handle={res.handle!r}>"


def _spec(key: str, driver: Any, policy: CheckpointPolicy | None) -> dict[str, Any]:
    configuration = getattr(driver, "configuration", None)
    if configuration is None:
        configuration = {}
    configuration = to_json_value(configuration, f"resource {key!r}: the driver's configuration")
    reuse = getattr(driver, "coverage_reuse", False)
    return {"key": key, "driver_id": driver_id_of(driver), "configuration": configuration,
            "coverage_reuse": bool(reuse),
            "every_steps": policy.every_steps if policy else 0,
            "on_completion": policy.on_completion if policy else False}


async def open_resource(ctx: ExecutionContext, key: str, driver: Any,
                        checkpoints: CheckpointPolicy | None) -> ResourceHandle:
    """The body of :func:`resource` (runs on the agent's event loop)."""
    have = ctx.resources.get(key)
    if have is not None:
        if driver_id_of(driver) != have.spec["driver_id"]:
            raise ValueError(f"resource {key!r} is already open with driver {have.spec['driver_id']!r}")
        return have.proxy
    async with ctx.step_lock():
        have = ctx.resources.get(key)
        if have is not None:
            return have.proxy
        if ctx.fatal is not None:
            raise ctx.fatal
        spec = _spec(key, driver, checkpoints)
        view = await ctx.kernel_call(ctx._kernel.register_resource(ctx.id, ctx.lease, spec))
        binding = view.get("binding")
        ref = view.get("checkpoint_ref")
        created = binding is None
        try:
            if not created:
                handle = await call_driver(driver.open, binding)
            else:
                out = await call_driver(driver.create, ref)
                if not isinstance(out, tuple) or len(out) != 2:
                    raise TypeError(f"{type(driver).__qualname__}.create() must return (handle, binding), "
                                    f"not {type(out).__name__}")
                handle, binding = out
        except _CONTROL:
            raise
        except Exception as e:  # noqa: BLE001 - every driver failure fails the execution
            if not created:
                what = f"cannot reopen {json.dumps(binding, sort_keys=True)}"
            elif ref is not None:
                what = f"cannot create it from checkpoint {ref!r}"
            else:
                what = "cannot create it"
            cls = CheckpointUnavailable if isinstance(e, CheckpointUnavailable) else ResourceUnavailable
            ctx.fatal = cls(f"{what}: {_describe(e)}", key=key)
            raise ctx.fatal from e
        if created:
            if binding is None:
                raise TypeError(f"{type(driver).__qualname__}.create() returned no binding")
            binding = to_json_value(binding, f"resource {key!r}: the binding")
            await ctx.kernel_call(ctx._kernel.bind_resource(ctx.id, ctx.lease, key, binding))
            logger.info("execution %s: resource %r created%s: %s", ctx.id, key,
                        f" from checkpoint {ref}" if ref else "", json.dumps(binding))
        else:
            logger.info("execution %s: resource %r reopened: %s", ctx.id, key, json.dumps(binding))
        res = Resource(ctx, key, driver, checkpoints, spec, handle, binding, created)
        ctx.resources[key] = res
        if checkpoints is not None and not view.get("covered"):
            await res.capture_now(int(view.get("generation") or 0), "baseline")
        return res.proxy


def resource(key: str, *, driver: Any, checkpoints: CheckpointPolicy | None = None) -> Any:
    """Register the resource ``key`` for this execution and return its handle.

    ``await resource("workspace", driver=D, checkpoints=CheckpointPolicy(every_steps=5))``
    in async code; in a synchronous handler call it directly. The same key again in the
    same dispatch returns the same handle. See :mod:`rebuno.resource` and
    :class:`ResourceDriver` for what the driver provides and when checkpoints are taken.

    Args:
        key: 1..128 characters of ``[A-Za-z0-9_.-]``; what tools declare in
            ``resources=[key]``.
        driver: The :class:`ResourceDriver`.
        checkpoints: A :class:`CheckpointPolicy`, or ``None`` for no checkpoints at all
            (forks then start from a fresh resource).

    Returns:
        A :class:`ResourceHandle` forwarding to the driver's handle, with ``pause()``.

    Raises:
        ResourceUnavailable: the recorded binding could not be reopened, or the resource
            could not be created (:class:`~rebuno.errors.CheckpointUnavailable`: from its
            checkpoint). The execution fails with ``resource_unavailable: <key>: ...``
            even if the handler catches it.
    """
    if not isinstance(key, str) or not KEY_RE.match(key):
        raise ValueError(f"resource key must be 1..128 of [A-Za-z0-9_.-], not {key!r}")
    for method in ("create", "open", "checkpoint"):
        if not callable(getattr(driver, method, None)):
            raise TypeError(f"resource driver {type(driver).__qualname__} has no {method}() method")
    if checkpoints is not None and not isinstance(checkpoints, CheckpointPolicy):
        raise TypeError("checkpoints must be a CheckpointPolicy or None")
    ctx = require_current(f"resource({key!r})")
    if in_event_loop():
        return ctx._on_loop(open_resource(ctx, key, driver, checkpoints))
    return ctx._blocking(open_resource(ctx, key, driver, checkpoints))


async def capture_on_completion(ctx: ExecutionContext) -> None:
    """Before completing: capture each resource whose policy has ``on_completion`` and
    that no checkpoint covers (read from the kernel by registering again)."""
    for res in list(ctx.resources.values()):
        if res.policy is None or not res.policy.on_completion:
            continue
        async with ctx.step_lock():
            view = await ctx.kernel_call(ctx._kernel.register_resource(ctx.id, ctx.lease, res.spec))
            if view.get("covered"):
                continue
            await res.capture_now(int(view.get("generation") or 0), "completion")
