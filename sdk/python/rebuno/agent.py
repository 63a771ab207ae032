"""``Agent``: the worker process that claims an agent's executions and runs the handler.

::

    from rebuno import Agent, tool

    @tool
    async def greet(name: str) -> str:
        \"\"\"Say hello.\"\"\"
        return f"hello, {name}"

    async def process(name: str) -> dict:
        return {"greeting": await greet(name)}

    Agent("hello").run(process)

The agent registers a worker, claims work by long-poll, runs up to ``concurrency``
executions at once, renews each lease in the background, and ends each dispatch in
one of these ways:

* the handler returns: ``complete {output, state?}`` (a :class:`~rebuno.Result`
  gives both), after the completion checkpoints of its resources;
* the handler raises: ``fail`` with a ``failure_reason`` (``tool_error: ...``,
  ``policy_denied: ...``, ``agent_error: <Type>: ...``); an input that does not fit
  the handler fails with ``input_invalid: ...`` before it runs, and a resource that
  cannot be reopened or restored with ``resource_unavailable: <key>: ...`` (even if the
  handler caught the error);
* the execution blocks on an approval (``Blocked``), ends elsewhere
  (``Terminated``), or another worker took over (``LeaseSuperseded``): the dispatch
  ends quietly; the kernel re-dispatches when there is something to do.

SIGINT/SIGTERM stop claiming and let running handlers finish for up to
``grace_period`` seconds; then they are cancelled. Executions are never failed on
shutdown: their leases expire and another worker resumes them by replay. A second
signal cancels at once; a third exits immediately.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rebuno._http import Transport
from rebuno._inputs import InputBinder, InputError
from rebuno._kernel import DispatchLease, KernelAPI
from rebuno._localauth import KERNEL_STATE_FILE, LocalToken
from rebuno.errors import (
    APIError,
    Blocked,
    ConflictError,
    ForbiddenError,
    LeaseSuperseded,
    NetworkError,
    PolicyError,
    RateLimited,
    ResourceUnavailable,
    Terminated,
    ToolError,
    UnauthorizedError,
    failure_reason,
    raise_for_refusal,
    truncate_utf8,
)
from rebuno.execution import ExecutionContext, Result, reset_current, set_current, to_json_value
from rebuno.resource import capture_on_completion
from rebuno.types import Claim

logger = logging.getLogger("rebuno.agent")

DEFAULT_URL = "http://127.0.0.1:8080"


def kernel_url(base_url: str | None = None) -> str:
    """``base_url``, else ``$REBUNO_URL``, else ``http://127.0.0.1:8080``."""
    return (base_url or os.environ.get("REBUNO_URL") or DEFAULT_URL).rstrip("/")


def kernel_api_key(api_key: str | None = None) -> str | None:
    """``api_key``, else ``$REBUNO_API_KEY``, else ``None`` (then the kernel's local token)."""
    return api_key if api_key is not None else (os.environ.get("REBUNO_API_KEY") or None)


def kernel_transport(base_url: str, api_key: str | None, timeout: float) -> Transport:
    """A transport to the kernel that sends ``api_key``, or else the kernel's local token
    (:mod:`rebuno._localauth`: a kernel with no ``api_keys`` makes one at every start).
    ``base_url`` may list several replicas separated by commas (see :class:`Transport`); a
    local token belongs to one kernel, so replicas need ``api_keys``."""
    local = None if api_key or "," in base_url else LocalToken(base_url, KERNEL_STATE_FILE)
    return Transport(base_url, api_key=api_key, timeout=timeout, local_token=local)


class Agent:
    """A worker for one agent name.

    Args:
        name: The agent name executions are created for (``rebuno exec create NAME``).
        base_url: The kernel (default ``$REBUNO_URL``, else ``http://127.0.0.1:8080``).
        api_key: Sent as ``Authorization: Bearer`` (default ``$REBUNO_API_KEY``, else the
            kernel's local token, found as :mod:`rebuno._localauth` says).
        concurrency: How many executions run at once in this process.
        claim_wait: Long-poll seconds per claim (0..60).
        grace_period: Seconds running handlers get to finish after SIGINT/SIGTERM.
        worker_name: A label for this worker in the event log (default host:pid).
        timeout: Seconds one kernel request may take (``kernel_timeout`` is the
            upstream SDK's name for it).
        handle_signals: Install SIGINT/SIGTERM handlers in :meth:`run`/:meth:`serve`
            (only possible on the main thread).
        secret, webhook_path: Accepted for compatibility with the webhook-based upstream
            SDK and ignored (logged once when the worker starts): this agent claims work
            from the kernel by long-poll, so nothing calls it back.

    A kernel that refuses the API key when the worker registers (401/403), or later when
    it claims, ends :meth:`run`/:meth:`serve` with
    :class:`~rebuno.errors.UnauthorizedError`/:class:`~rebuno.errors.ForbiddenError`
    instead of retrying: a wrong key does not fix itself.
    """

    def __init__(self, name: str, *, base_url: str | None = None, api_key: str | None = None,
                 concurrency: int = 4, claim_wait: int = 20, grace_period: float = 30.0,
                 worker_name: str | None = None, timeout: float = 35.0, handle_signals: bool = True,
                 kernel_timeout: float | None = None, secret: str | None = None,
                 webhook_path: str | None = None):
        if not name:
            raise ValueError("Agent needs a name")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 0 <= claim_wait <= 60:
            raise ValueError("claim_wait must be 0..60 seconds")
        self.name = name
        self.base_url = kernel_url(base_url)
        self.api_key = kernel_api_key(api_key)
        self._local_token: LocalToken | None = None
        self.concurrency = concurrency
        self.claim_wait = claim_wait
        self.grace_period = grace_period
        self.worker_name = worker_name or f"{socket.gethostname()}:{os.getpid()}"
        self.timeout = kernel_timeout if kernel_timeout is not None else timeout
        self.handle_signals = handle_signals
        self._ignored = [n for n, v in (("secret", secret), ("webhook_path", webhook_path)) if v is not None]
        self._fatal: APIError | None = None
        self.worker_id: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._hard_stop: asyncio.Event | None = None
        self._signals = 0
        self._running: dict[asyncio.Task[None], ExecutionContext | None] = {}
        self._cancelling = False
        self._stop_requested = False
        self.completed = 0
        self.failed = 0

    @property
    def agent_id(self) -> str:
        """Alias of ``name`` (the upstream SDK's name)."""
        return self.name

    @property
    def kernel_timeout(self) -> float:
        """Alias of ``timeout`` (the upstream SDK's name)."""
        return self.timeout

    # --- running --------------------------------------------------------------------
    def run(self, handler: Callable[..., Any], *, host: str | None = None, port: int | None = None) -> None:
        """Run the worker until SIGINT/SIGTERM (blocking).

        ``host``/``port`` are accepted for compatibility with the webhook-based upstream
        SDK and ignored: this agent pulls work from the kernel, it serves nothing.
        """
        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        if host is not None or port is not None:
            logger.info("host/port are ignored: this agent claims work from the kernel at %s", self.base_url)
        loop = asyncio.new_event_loop()
        # sync handlers and sync tools called from async code run in these threads
        loop.set_default_executor(ThreadPoolExecutor(max_workers=max(16, 4 * self.concurrency),
                                                     thread_name_prefix="rebuno-worker"))
        try:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self.serve(handler))
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()  # does not wait for stuck synchronous handlers' threads

    def stop(self) -> None:
        """Ask the worker to stop gracefully (thread-safe; like SIGTERM). Called before
        :meth:`serve` starts, it makes ``serve`` return at once."""
        self._stop_requested = True
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    def _on_signal(self, signame: str) -> None:
        self._signals += 1
        assert self._stop is not None and self._hard_stop is not None
        if self._signals == 1:
            logger.info("%s: stopping; %d running execution(s) get up to %.0fs to finish "
                        "(signal again to stop now)", signame, len(self._running), self.grace_period)
            self._stop.set()
        elif self._signals == 2:
            logger.warning("%s: cancelling running handlers now; their leases will expire and "
                           "another worker resumes them", signame)
            self._stop.set()
            self._hard_stop.set()
        else:
            logger.warning("%s: exiting immediately", signame)
            os._exit(130)

    async def serve(self, handler: Callable[..., Any]) -> None:
        """Run the worker on the current event loop until :meth:`stop` or a signal."""
        binder = InputBinder(handler)  # fail fast on a handler that cannot be bound
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._hard_stop = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        installed: list[signal.Signals] = []
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    self._loop.add_signal_handler(sig, self._on_signal, sig.name)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError):  # pragma: no cover
                    pass
        if self._ignored:
            logger.info("%s ignored: this agent claims work from the kernel by long-poll and serves no "
                        "webhook", " and ".join(self._ignored))
        self._fatal = None
        transport = kernel_transport(self.base_url, self.api_key, self.timeout)
        self._local_token = transport.local_token
        kernel = KernelAPI(transport, stop=self._hard_stop, retry_for=None)
        try:
            if await self._register(kernel):
                await self._claim_loop(kernel, handler, binder)
            await self._drain()
            if self._fatal is not None:
                raise self._fatal
        finally:
            for sig in installed:
                self._loop.remove_signal_handler(sig)
            await transport.close()
            logger.info("worker %s stopped (%d completed, %d failed)", self.worker_id or "-",
                        self.completed, self.failed)

    async def _wait_stop(self, delay: float) -> bool:
        assert self._stop is not None
        try:
            await asyncio.wait_for(self._stop.wait(), delay)
            return True
        except asyncio.TimeoutError:
            return False

    async def _register(self, kernel: KernelAPI) -> bool:
        assert self._stop is not None
        delay, warned = 0.2, False
        while not self._stop.is_set():
            try:
                data = await kernel.register_worker(self.name, self.worker_name, retry_for=2.0, stop=self._stop)
                self.worker_id = data["worker_id"]
                logger.info("agent %s: worker %s registered at %s (lease %ss, concurrency %d)", self.name,
                            self.worker_id, self.base_url, data.get("lease_timeout_seconds"), self.concurrency)
                return True
            except NetworkError as e:
                if not warned:
                    logger.warning("cannot reach the kernel at %s (%s); retrying", self.base_url, e)
                    warned = True
            except (UnauthorizedError, ForbiddenError) as e:
                raise self._refused("registering a worker", e) from e
            except APIError as e:
                logger.error("registering a worker for agent %s failed: %s; retrying", self.name, e)
            if await self._wait_stop(delay):
                break
            delay = min(delay * 2, 5.0)
        return False

    def _refused(self, what: str, e: APIError) -> APIError:
        """The error that ends the worker when the kernel refuses its key (raised out of
        :meth:`serve`, not logged: the caller renders it)."""
        local = self._local_token
        key = "the API key" if self.api_key else (local.hint() if local else "no API key")
        hint = ("set REBUNO_API_KEY (or api_key=) to an agent key for this agent" if not self.api_key else
                f"it must be an agent key bound to agent {self.name!r} (or an admin key)")
        msg = f"agent {self.name}: {what} at {self.base_url} was refused with {key}: {e.message}; {hint}"
        return type(e)(msg, code=e.code, status_code=e.status_code, field=e.field)

    async def _claim_loop(self, kernel: KernelAPI, handler: Callable[..., Any], binder: InputBinder) -> None:
        assert self._stop is not None and self.worker_id is not None
        slots = asyncio.Semaphore(self.concurrency)
        stop_wait = asyncio.ensure_future(self._stop.wait())
        delay, down = 0.2, False
        try:
            while not self._stop.is_set():
                acquire = asyncio.ensure_future(slots.acquire())
                await asyncio.wait({acquire, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if not acquire.done():
                    acquire.cancel()
                    await asyncio.gather(acquire, return_exceptions=True)
                    break
                if self._stop.is_set():
                    slots.release()
                    break
                claim_task = asyncio.ensure_future(self._claim(kernel))
                await asyncio.wait({claim_task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if not claim_task.done():
                    claim_task.cancel()  # closes the long-poll socket at once
                    await asyncio.gather(claim_task, return_exceptions=True)
                    slots.release()
                    break
                try:
                    claim = claim_task.result()
                    if down:
                        logger.info("kernel at %s is reachable again", self.base_url)
                    down, delay = False, 0.2
                except Exception as e:  # noqa: BLE001 - the claim loop must survive anything
                    slots.release()
                    if isinstance(e, (UnauthorizedError, ForbiddenError)):
                        # the key was revoked or changed under us: stop claiming, let the
                        # running executions finish, then end serve() with the error
                        self._fatal = self._refused("claiming work", e)
                        logger.warning("the kernel refused this worker's claim (HTTP %d); stopping after %d "
                                       "running execution(s) finish", e.status_code, len(self._running))
                        self._stop.set()
                        break
                    if isinstance(e, NetworkError):
                        if not down:
                            logger.warning("cannot reach the kernel at %s (%s); retrying", self.base_url, e)
                            down = True
                    else:
                        logger.error("claim failed: %s", e)
                    if await self._wait_stop(delay):
                        break
                    delay = min(delay * 2, 5.0)
                    continue
                if claim is None:
                    slots.release()
                    continue
                task = asyncio.create_task(self._dispatch(kernel, handler, binder, claim),
                                           name=f"rebuno-{claim.execution.id}",
                                           context=contextvars.copy_context())
                self._running[task] = None

                def done(t: asyncio.Task[None]) -> None:
                    self._running.pop(t, None)
                    slots.release()
                task.add_done_callback(done)
        finally:
            stop_wait.cancel()
            await asyncio.gather(stop_wait, return_exceptions=True)

    async def _claim(self, kernel: KernelAPI) -> Claim | None:
        assert self.worker_id is not None
        return await kernel.claim(self.name, self.worker_id, self.claim_wait, retry_for=2.0, stop=self._stop)

    async def _drain(self) -> None:
        assert self._hard_stop is not None
        if not self._running:
            return
        tasks = list(self._running)
        hard = asyncio.ensure_future(self._hard_stop.wait())
        deadline = asyncio.get_running_loop().time() + self.grace_period
        try:
            while not hard.done():
                left = [t for t in tasks if not t.done()]
                remaining = deadline - asyncio.get_running_loop().time()
                if not left or remaining <= 0:
                    break
                await asyncio.wait([*left, hard], timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hard.cancel()
            await asyncio.gather(hard, return_exceptions=True)
        left = [t for t in tasks if not t.done()]
        if left:
            logger.warning("cancelling %d handler(s) that did not finish; their leases expire and the "
                           "executions resume elsewhere by replay", len(left))
            self._cancelling = True
            for t in left:
                ctx = self._running.get(t)
                if ctx is not None:
                    ctx.stopping = True
                t.cancel()
            await asyncio.wait(left, timeout=5.0)

    # --- one dispatch -------------------------------------------------------------------
    async def _dispatch(self, kernel: KernelAPI, handler: Callable[..., Any], binder: InputBinder,
                        claim: Claim) -> None:
        ex = claim.execution
        lease = DispatchLease(claim.dispatch_id, claim.attempt, claim.lease_timeout_seconds)
        ctx = ExecutionContext(kernel=kernel, execution_id=ex.id, agent=self.name, input=ex.input,
                               lease=lease, status=ex.status, session=ex.session,
                               parent_execution_id=ex.parent_execution_id)
        me = asyncio.current_task()
        if me is not None:
            self._running[me] = ctx
        token = set_current(ctx)
        logger.info("execution %s: claimed (dispatch %s attempt %d)", ex.id, claim.dispatch_id, claim.attempt)
        heartbeat = asyncio.create_task(ctx.heartbeat_loop(me))
        outcome: tuple[str, Any] = ("none", None)
        try:
            try:
                kwargs = binder.bind(ex.input)
            except InputError as e:
                outcome = ("fail", f"input_invalid: {e}")
            else:
                try:
                    if inspect.iscoroutinefunction(handler):
                        out = await handler(**kwargs)
                    else:
                        out = await asyncio.to_thread(handler, **kwargs)
                    if inspect.isawaitable(out):
                        out = await out
                    outcome = ("ok", out)
                    if ctx.resources and ctx.suspension is None and ctx.fatal is None:
                        await self._completion_checkpoints(ctx)
                except asyncio.CancelledError:
                    if not (ctx.superseded or ctx.suspension is not None or ctx.stopping or self._cancelling):
                        raise
                    outcome = ("cancelled", None)
                except Exception as e:  # noqa: BLE001 - every handler error ends the dispatch
                    outcome = ("error", e)
        finally:
            heartbeat.cancel()
            reset_current(token)
        await asyncio.gather(heartbeat, return_exceptions=True)
        await self._finish(kernel, ctx, lease, outcome)

    async def _completion_checkpoints(self, ctx: ExecutionContext) -> None:
        """Capture the resources with ``on_completion`` that no checkpoint covers, while
        the lease is still being renewed. A failure is logged; it never fails the run (a
        lost lease or an execution that ended elsewhere is noticed by ``_finish``)."""
        try:
            await capture_on_completion(ctx)
        except (Blocked, Terminated, LeaseSuperseded, ResourceUnavailable) as e:
            logger.info("execution %s: completion checkpoints stopped (%s)", ctx.id, type(e).__name__)
        except Exception as e:  # noqa: BLE001
            logger.warning("execution %s: completion checkpoints failed: %s", ctx.id, e)

    async def _finish(self, kernel: KernelAPI, ctx: ExecutionContext, lease: DispatchLease,
                      outcome: tuple[str, Any]) -> None:
        kind, value = outcome
        eid = ctx.id
        if ctx.superseded:
            logger.info("execution %s: dispatch superseded; another worker owns it now", eid)
            return
        if isinstance(ctx.suspension, Blocked):
            b = ctx.suspension
            logger.info("execution %s: waiting for approval%s (%s); dispatch ends", eid,
                        f" {b.approval_id}" if b.approval_id else "", b.reason or "blocked")
            return
        if isinstance(ctx.suspension, Terminated):
            logger.info("execution %s: already over (%s); dispatch ends", eid, ctx.suspension)
            return
        if kind == "cancelled":
            logger.info("execution %s: handler stopped before finishing; it resumes on the next dispatch", eid)
            return
        if ctx.fatal is not None:  # a resource could not be opened, whatever the handler did next
            logger.warning("execution %s failed: %s", eid, failure_reason(ctx.fatal))
            await self._report(kernel, ctx, lease, fail=failure_reason(ctx.fatal))
            return
        if kind == "error":
            e = value
            if isinstance(e, (Blocked, Terminated, LeaseSuperseded)):
                logger.info("execution %s: dispatch ends (%s)", eid, type(e).__name__)
                return
            try:
                raise_for_refusal(e)
            except (Blocked, Terminated, LeaseSuperseded) as signal_:
                logger.info("execution %s: dispatch ends (%s)", eid, type(signal_).__name__)
                return
            except (PolicyError, RateLimited) as refused:
                e = refused
            if isinstance(e, (PolicyError, ToolError, RateLimited)):
                logger.warning("execution %s failed: %s", eid, failure_reason(e))
            else:
                logger.error("execution %s: handler raised", eid, exc_info=e)
            await self._report(kernel, ctx, lease, fail=failure_reason(e))
            return
        if kind == "fail":
            logger.warning("execution %s: %s", eid, value)
            await self._report(kernel, ctx, lease, fail=value)
            return
        output, state = value, None
        if isinstance(value, Result):
            output, state = value.output, value.state
        try:
            output = to_json_value(output, "the handler's output")
            state = to_json_value(state, "the handler's state") if state is not None else None
        except (TypeError, ValueError) as e:
            await self._report(kernel, ctx, lease, fail=failure_reason(e))
            return
        await self._report(kernel, ctx, lease, output=output, state=state, complete=True)

    async def _report(self, kernel: KernelAPI, ctx: ExecutionContext, lease: DispatchLease, *,
                      fail: str | None = None, output: Any = None, state: Any = None,
                      complete: bool = False) -> None:
        try:
            if complete:
                await kernel.complete(ctx.id, lease, output, state)
                self.completed += 1
                logger.info("execution %s: completed (%d steps run, %d replayed)", ctx.id, ctx.steps_run,
                            ctx.steps_replayed)
            else:
                await kernel.fail(ctx.id, lease, truncate_utf8(fail or "agent_error"))
                self.failed += 1
        except LeaseSuperseded:
            logger.info("execution %s: dispatch superseded before it could report", ctx.id)
        except ConflictError as e:
            logger.info("execution %s: not reported (%s)", ctx.id, e.message)
        except (NetworkError, APIError) as e:
            logger.error("execution %s: could not report the outcome (%s); the lease will expire and the "
                         "next dispatch replays to the same point", ctx.id, e)
