"""The current execution: ``execution()``, ``Result``, ``previous()`` and the step engine.

One :class:`ExecutionContext` exists per claimed dispatch. It lives in a
:class:`contextvars.ContextVar`, so every tool call, ``step()`` and model call made by
the handler (including from threads started with :func:`asyncio.to_thread`, which
copies the context) finds it without being passed around.

How a step runs (:meth:`ExecutionContext.run_step`):

1. submit ``{kind, target, args, idempotency}``; the kernel assigns the step id and
   decides;
2. ``proceed``: run the body, then record its JSON result (``complete``) or its error
   (``fail``); ``replay``: return the recorded result (or raise the recorded error)
   without running the body; ``denied``: raise :class:`~rebuno.errors.PolicyError`;
   ``blocked`` / ``execution_blocked``: set ``suspension = Blocked(...)`` and raise it;
   ``execution_terminal``: set ``suspension = Terminated()`` and raise it.

With resources registered (:func:`rebuno.resource`), tool calls and local steps run one
at a time (an asyncio lock; a step called from inside another step's body does not wait),
and a ``proceed`` decision lists the declared resources as ``{key, generation, due}``:
after the body (success or failure) each ``due`` resource is checkpointed and the
captures (or capture failures) go with the step's complete/fail call.

Results must be JSON values. A live result is passed through ``json.dumps``/``loads``
before it is returned, so the live run and every replay see the same value (tuples
become lists, non-string keys become strings). A result that is not JSON-serializable
(or contains NaN/Infinity) fails the step with a ``TypeError``/``ValueError`` message
and raises :class:`~rebuno.errors.ToolError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from rebuno._kernel import DispatchLease, KernelAPI
from rebuno.errors import (
    Blocked,
    ConflictError,
    IndeterminateError,
    LeaseSuperseded,
    NetworkError,
    PolicyError,
    RateLimited,
    RebunoError,
    ResourceUnavailable,
    Terminated,
    ToolError,
)
from rebuno.types import StepDecision

if TYPE_CHECKING:
    from rebuno.resource import Resource

logger = logging.getLogger("rebuno.execution")

_T = TypeVar("_T")

IDEMPOTENCY_MODES = ("safe_to_retry", "at_most_once")
STEP_KINDS = ("tool_call", "llm_call", "local")
_CONTROL = (Blocked, Terminated, LeaseSuperseded, RateLimited)
_UNSET: Any = object()


class DispatchLost(LeaseSuperseded):
    """The SDK lost track of this dispatch (a step submission may or may not have been
    recorded because the connection failed mid-request). The handler stops quietly and
    heartbeats stop, so the lease expires and the execution is dispatched again; the
    new attempt replays consistently from the start."""

    def __init__(self, message: str = "lost the connection in the middle of a step submission"):
        super().__init__(message, code="dispatch_lost", status_code=0)


@dataclass
class Result:
    """What a handler may return to record both its ``output`` and a ``state`` for the
    next turn of its session (read there with :func:`previous`). Any other return
    value is recorded as the output."""

    output: Any = None
    state: Any = None


def to_json_value(value: Any, what: str = "result") -> Any:
    """Round-trip ``value`` through JSON; raise ``TypeError``/``ValueError`` with a clear
    message when it is not a JSON value."""
    try:
        return json.loads(json.dumps(value, allow_nan=False, ensure_ascii=False))
    except (TypeError, ValueError) as e:
        raise type(e)(f"{what} is not JSON-serializable: {e}") from None


class ExecutionContext:
    """The handler's view of one claimed dispatch (returned by ``execution()``).

    Attributes: ``id``, ``agent`` (alias ``agent_id``), ``input``, ``status``,
    ``session``, ``parent_execution_id``, ``dispatch_id``, ``dispatch_attempt``,
    ``lease_timeout`` and ``suspension`` (``Blocked``/``Terminated`` instance or ``None``).
    """

    def __init__(self, *, kernel: KernelAPI, execution_id: str, agent: str, input: Any,
                 lease: DispatchLease, status: str = "running", session: str | None = None,
                 parent_execution_id: str | None = None, loop: asyncio.AbstractEventLoop | None = None):
        self._kernel = kernel
        self.id = execution_id
        self.agent = agent
        self.input = input
        self.status = status
        self.session = session
        self._lease = lease
        self.suspension: Blocked | Terminated | None = None
        self.superseded = False
        self.stopping = False
        self.loop = loop or asyncio.get_running_loop()
        self.parent_execution_id = parent_execution_id
        self.steps_run = 0
        self.steps_replayed = 0
        self._previous: Any = _UNSET
        # resource key -> rebuno.resource.Resource, filled by resource(). Steps send only the
        # declared keys that are registered here.
        self.resources: dict[str, Resource] = {}
        # A resource that could not be opened: the execution fails with it, whatever the
        # handler does afterwards.
        self.fatal: ResourceUnavailable | None = None
        self._due: dict[str, list[dict[str, Any]]] = {}
        self._lock = asyncio.Lock()

    # --- read-only facts --------------------------------------------------------
    @property
    def agent_id(self) -> str:
        """Alias of ``agent``."""
        return self.agent

    @property
    def dispatch_id(self) -> str:
        """The claimed dispatch's id (new after every approval decision)."""
        return self._lease.dispatch_id

    @property
    def dispatch_attempt(self) -> int:
        """The claim's attempt number (grows with every lease expiry)."""
        return self._lease.attempt

    @property
    def lease(self) -> DispatchLease:
        """The lease this worker holds."""
        return self._lease

    @property
    def lease_timeout(self) -> float:
        """The agent's lease period in seconds."""
        return self._lease.timeout

    def __repr__(self) -> str:
        return (f"ExecutionContext(id={self.id!r}, agent={self.agent!r}, dispatch_id={self.dispatch_id!r}, "
                f"attempt={self.dispatch_attempt}, suspension={self.suspension!r})")

    # --- previous turn ----------------------------------------------------------
    async def previous(self) -> Any:
        """The parent turn's ``state`` (else its ``output``) in this execution's session,
        from ``GET /v0/executions/{id}/previous``; ``None`` for a first turn or without a
        session. Read once per dispatch and cached (a parent never changes)."""
        if self._previous is _UNSET:
            self._previous = await self._on_loop(self._kernel.previous_state(self.id, self._lease))
        return self._previous

    # --- plumbing ---------------------------------------------------------------
    async def _on_loop(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Await ``coro`` on the agent's loop (where its connections live)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover
            running = None
        if running is self.loop:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def _blocking(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the agent's loop from a worker thread and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def _check_alive(self) -> None:
        if self.fatal is not None:
            raise self.fatal
        if self.superseded:
            raise LeaseSuperseded("this dispatch was superseded; another worker owns the execution")
        if isinstance(self.suspension, Terminated):
            raise self.suspension
        if self.stopping:
            raise LeaseSuperseded("the worker is stopping; the execution resumes on its next dispatch",
                                  code="worker_stopping", status_code=0)

    def _kernel_error(self, e: Exception) -> Exception:
        """Map an error of an agent call to what the handler should see."""
        if isinstance(e, LeaseSuperseded):
            self.superseded = True
            return e
        if isinstance(e, ConflictError) and e.code == "execution_terminal":
            self.suspension = Terminated(e.message)
            return self.suspension
        if isinstance(e, ConflictError) and "blocked" in e.message:
            self.suspension = Blocked("execution is blocked on an approval")
            return self.suspension
        if isinstance(e, NetworkError) and e.sent:
            self.superseded = True
            return DispatchLost(f"lost the connection to the kernel mid-request ({e}); "
                                "leaving the execution to the next dispatch")
        return e

    async def kernel_call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Await an agent call on this execution, mapping its errors like a step's."""
        try:
            self._check_alive()
        except BaseException:
            coro.close()
            raise
        try:
            return await coro
        except (RebunoError, OSError) as e:
            raise self._kernel_error(e) from e

    @contextlib.asynccontextmanager
    async def step_lock(self) -> AsyncIterator[None]:
        """Hold the execution's step lock (reentrant within one step's body)."""
        if _holding.get() is self:
            yield
            return
        await self._on_loop(self._lock.acquire())
        token = _holding.set(self)
        try:
            yield
        finally:
            _holding.reset(token)
            self._release_lock()

    def _release_lock(self) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self._lock.release()
        else:
            self.loop.call_soon_threadsafe(self._lock.release)

    def _needs_lock(self, kind: str) -> bool:
        return kind != "llm_call" and bool(self.resources) and _holding.get() is not self

    async def _capture_due(self, step_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Checkpoint the resources the proceed decision said are due after this step."""
        captures: list[dict[str, Any]] = []
        failures: list[dict[str, Any]] = []
        for view in self._due.pop(step_id, None) or []:
            key, generation = str(view.get("key")), int(view.get("generation") or 0)
            res = self.resources.get(key)
            if res is None:  # pragma: no cover - the kernel only lists declared, registered keys
                failures.append({"key": str(key), "generation": generation,
                                 "error": "the resource is not open in this dispatch"})
                continue
            cap, fail = await res.capture_entry(generation)
            if cap:
                captures.append(cap)
            if fail:
                failures.append(fail)
        return captures, failures

    def declared(self, resources: list[str] | None) -> list[str] | None:
        """The declared resource keys this execution has registered (sent with a step)."""
        if not resources or not self.resources:
            return None
        keys = [r for r in resources if r in self.resources]
        return keys or None

    async def submit(self, kind: str, target: str, args: Any, idempotency: str,
                     resources: list[str] | None = None) -> StepDecision:
        """Submit a step and return the raw decision (no interpretation)."""
        self._check_alive()
        try:
            return await self._kernel.submit_step(self.id, self._lease, kind=kind, target=target,
                                                  args=args, idempotency=idempotency,
                                                  resources=self.declared(resources))
        except (RebunoError, OSError) as e:
            raise self._kernel_error(e) from e

    def _interpret(self, dec: StepDecision, target: str) -> tuple[bool, Any]:
        """``(True, step_id)`` for proceed; ``(False, result)`` for a replayed result;
        raises for everything else."""
        d = dec.decision
        if d == "proceed":
            due = [v for v in (dec.raw.get("resources") or []) if isinstance(v, dict) and v.get("due")]
            if due and dec.step_id:
                self._due[dec.step_id] = due
            return True, dec.step_id
        if d == "replay":
            self.steps_replayed += 1
            if dec.has_error:
                raise recorded_error(dec.error, target, dec.step_id or "")
            return False, dec.result
        if d == "denied":
            raise PolicyError(dec.reason or "policy_denied", dec.rule_id, target=target,
                              step_id=dec.step_id or "")
        if d == "blocked":
            self.suspension = Blocked(dec.reason or "awaiting_approval", approval_id=dec.approval_id,
                                      step_id=dec.step_id, target=target)
            raise self.suspension
        if d == "execution_blocked":
            self.suspension = Blocked("the execution is blocked on another step's approval", target=target)
            raise self.suspension
        if d == "execution_terminal":
            self.suspension = Terminated("the execution is already over")
            raise self.suspension
        if d == "rate_limited":
            raise RateLimited(dec.reason or "rate_limit_exceeded")
        raise RebunoError(f"unexpected step decision {d!r}")

    async def _finish(self, step_id: str, target: str, ok: bool, value: Any,
                      captures: list[dict[str, Any]] | None = None,
                      capture_failures: list[dict[str, Any]] | None = None) -> Any:
        try:
            dec = await self._kernel.finish_step(self.id, self._lease, step_id, ok=ok, value=value,
                                                 captures=captures, capture_failures=capture_failures)
        except (RebunoError, OSError) as e:
            raise self._kernel_error(e) from e
        if captures or capture_failures:
            from rebuno.resource import log_refused

            log_refused(self, dec.raw.get("captures"), "step")
        if dec.decision == "recorded":
            return value
        if dec.decision == "replay":  # already settled by an earlier report: the record wins
            if dec.has_error:
                raise recorded_error(dec.error, target, step_id)
            return dec.result
        if dec.decision == "execution_terminal":
            self.suspension = Terminated("the execution is already over")
            raise self.suspension
        raise RebunoError(f"unexpected reply to a step outcome: {dec.decision!r}")

    async def begin(self, kind: str, target: str, args: Any, idempotency: str,
                    resources: list[str] | None = None) -> tuple[bool, Any]:
        """Submit and interpret: ``(True, step_id)`` to run the body, ``(False, result)`` to replay."""
        dec = await self._on_loop(self.submit(kind, target, args, idempotency, resources))
        return self._interpret(dec, target)

    async def record(self, step_id: str, target: str, result: Any,
                     captures: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None) -> Any:
        """Record a successful outcome (with the step's checkpoint ``captures``: a
        ``(captures, failures)`` pair); returns the value the handler should see."""
        caps, fails = captures or ([], [])
        return await self._on_loop(self._finish(step_id, target, True, result, caps, fails))

    async def record_error(self, step_id: str, target: str, error: dict[str, Any],
                           captures: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None) -> None:
        """Record a failed outcome (best effort; control-flow errors propagate)."""
        caps, fails = captures or ([], [])
        try:
            await self._on_loop(self._finish(step_id, target, False, error, caps, fails))
        except _CONTROL:
            raise
        except ToolError:
            pass
        except Exception:
            logger.exception("could not record the failure of step %s", step_id)

    # --- the step engine --------------------------------------------------------
    async def run_step(self, kind: str, target: str, args: Any, idempotency: str,
                       body: Callable[[], Any], resources: list[str] | None = None) -> Any:
        """Run ``body`` as a recorded step (async path). ``body()`` may return a value or
        an awaitable; synchronous bodies should already be wrapped to run in a thread."""
        if not self._needs_lock(kind):
            return await self._run_step(kind, target, args, idempotency, body, resources)
        async with self.step_lock():
            return await self._run_step(kind, target, args, idempotency, body, resources)

    async def _run_step(self, kind: str, target: str, args: Any, idempotency: str,
                        body: Callable[[], Any], resources: list[str] | None) -> Any:
        proceed, value = await self.begin(kind, target, args, idempotency, resources)
        if not proceed:
            return value
        step_id = value
        self.steps_run += 1
        try:
            try:
                result = body()
                if inspect.isawaitable(result):
                    result = await result
                result = to_json_value(result)
            except _CONTROL:
                raise
            except asyncio.CancelledError:
                raise
            except Exception as e:
                caps = await self._on_loop(self._capture_due(step_id))
                await self.record_error(step_id, target, error_object(e), caps)
                raise ToolError(str(e), tool_id=target, step_id=step_id, error=error_object(e)) from e
            caps = await self._on_loop(self._capture_due(step_id))
            return await self.record(step_id, target, result, caps)
        finally:
            self._due.pop(step_id, None)

    def run_step_sync(self, kind: str, target: str, args: Any, idempotency: str,
                      body: Callable[[], Any], resources: list[str] | None = None) -> Any:
        """Run ``body`` as a recorded step from a worker thread (sync path): the kernel
        calls go through the agent's loop, the body runs in the calling thread."""
        if not self._needs_lock(kind):
            return self._run_step_sync(kind, target, args, idempotency, body, resources)
        self._blocking(self._lock.acquire())
        token = _holding.set(self)
        try:
            return self._run_step_sync(kind, target, args, idempotency, body, resources)
        finally:
            _holding.reset(token)
            self.loop.call_soon_threadsafe(self._lock.release)

    def _run_step_sync(self, kind: str, target: str, args: Any, idempotency: str,
                       body: Callable[[], Any], resources: list[str] | None) -> Any:
        proceed, value = self._blocking(self.begin(kind, target, args, idempotency, resources))
        if not proceed:
            return value
        step_id = value
        self.steps_run += 1
        try:
            try:
                result = to_json_value(body())
            except _CONTROL:
                raise
            except Exception as e:
                caps = self._blocking(self._capture_due(step_id))
                self._blocking(self.record_error(step_id, target, error_object(e), caps))
                raise ToolError(str(e), tool_id=target, step_id=step_id, error=error_object(e)) from e
            caps = self._blocking(self._capture_due(step_id))
            return self._blocking(self.record(step_id, target, result, caps))
        finally:
            self._due.pop(step_id, None)

    # --- heartbeats -------------------------------------------------------------
    async def heartbeat_loop(self, owner: asyncio.Task[Any] | None) -> None:
        """Renew the lease every ``min(lease/3, 30 s)`` until cancelled. Losing the lease
        (or the execution ending) cancels ``owner`` so the handler stops."""
        interval = self._lease.heartbeat_interval
        while True:
            await asyncio.sleep(interval)
            if self.superseded:
                return
            try:
                await self._kernel.heartbeat(self.id, self._lease)
            except LeaseSuperseded:
                self.superseded = True
                logger.info("execution %s: lease superseded; stopping this dispatch", self.id)
                if owner is not None:
                    owner.cancel()
                return
            except ConflictError as e:
                if e.code == "execution_terminal":
                    if self.suspension is None:
                        self.suspension = Terminated(e.message)
                    logger.info("execution %s ended elsewhere (%s); stopping the handler", self.id, e.message)
                    if owner is not None:
                        owner.cancel()
                    return
                logger.warning("heartbeat for %s: %s", self.id, e)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                logger.warning("heartbeat for %s failed: %s", self.id, e)


def error_object(e: BaseException) -> dict[str, Any]:
    """The JSON recorded as a failed step's ``error``."""
    return {"message": str(e) or type(e).__name__, "type": type(e).__name__}


def recorded_error(error: Any, target: str, step_id: str) -> ToolError:
    """The exception a recorded step error replays as."""
    if isinstance(error, dict):
        message = str(error.get("message") or error.get("reason") or json.dumps(error))
        if error.get("reason") == "indeterminate":
            return IndeterminateError(message, tool_id=target, step_id=step_id, error=error)
    else:
        message = str(error)
    return ToolError(message, tool_id=target, step_id=step_id, error=error)


# --- the current execution ------------------------------------------------------------

_current: contextvars.ContextVar[ExecutionContext | None] = contextvars.ContextVar(
    "rebuno_execution", default=None)
# The execution whose step lock the current step holds (so a step run from inside another
# step's body does not wait for itself).
_holding: contextvars.ContextVar[ExecutionContext | None] = contextvars.ContextVar(
    "rebuno_step_lock", default=None)


class _ExecutionAccessor:
    """``execution()`` returns the current :class:`ExecutionContext`.

    It must be called: ``execution().id``, ``execution().suspension``. Calling it
    outside a handler raises ``RuntimeError``.
    """

    __slots__ = ()

    def __call__(self) -> ExecutionContext:
        ctx = _current.get()
        if ctx is None:
            raise RuntimeError("execution() called outside a running handler "
                               "(tools and steps run inside Agent.run(handler))")
        return ctx

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"rebuno.execution must be called: use execution().{name}")

    def __repr__(self) -> str:
        return "<rebuno.execution accessor; call it: execution()>"


execution = _ExecutionAccessor()


def current() -> ExecutionContext | None:
    """The current execution context, or ``None`` outside a handler."""
    return _current.get()


def require_current(what: str) -> ExecutionContext:
    """The current context, or a ``RuntimeError`` naming ``what`` was called outside one."""
    ctx = _current.get()
    if ctx is None:
        raise RuntimeError(f"{what} called outside an active execution: tools, step() and model calls "
                           "run inside a handler started by Agent.run(). From your own threads, run "
                           "the code with contextvars.copy_context() or asyncio.to_thread.")
    return ctx


def set_current(ctx: ExecutionContext | None) -> contextvars.Token[ExecutionContext | None]:
    """Make ``ctx`` current (used by the agent and by tests)."""
    return _current.set(ctx)


def reset_current(token: contextvars.Token[ExecutionContext | None]) -> None:
    """Undo :func:`set_current`."""
    _current.reset(token)


def in_event_loop() -> bool:
    """Whether the calling thread is running an asyncio event loop."""
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


def previous() -> Awaitable[Any] | Any:
    """The previous turn's ``state`` (else its output) in this execution's session:
    ``await previous()`` in async code, a plain call in a synchronous handler. ``None``
    for a session's first turn or an execution without a session."""
    ctx = require_current("previous()")
    if in_event_loop():
        return ctx.previous()
    return ctx._blocking(ctx.previous())
