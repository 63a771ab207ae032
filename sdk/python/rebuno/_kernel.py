"""The agent side of the kernel API: workers, claims, steps, heartbeats, completion.

Every call on an execution carries the claim's ``Rebuno-Dispatch-Id`` and
``Rebuno-Dispatch-Attempt`` headers (:class:`DispatchLease`).
"""

from __future__ import annotations

import asyncio
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any

from rebuno._http import Transport
from rebuno.errors import NetworkError, NotFoundError
from rebuno.types import Claim, Execution, StepDecision


@dataclass(frozen=True)
class DispatchLease:
    """The dispatch a worker holds: id, attempt and lease period."""

    dispatch_id: str
    attempt: int
    timeout: float = 120.0

    @property
    def heartbeat_interval(self) -> float:
        """How often to renew the lease: ``min(lease / 3, 30 s)``."""
        return max(0.05, min(self.timeout / 3.0, 30.0))

    @property
    def headers(self) -> dict[str, str]:
        """The headers every agent call on the execution carries."""
        return {"Rebuno-Dispatch-Id": self.dispatch_id, "Rebuno-Dispatch-Attempt": str(self.attempt)}


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


class KernelAPI:
    """Agent-side calls. ``stop`` (an event set on hard shutdown) ends connection retries."""

    def __init__(self, transport: Transport, *, stop: asyncio.Event | None = None,
                 retry_for: float | None = None):
        self.t = transport
        self.stop = stop
        self.retry_for = retry_for

    async def register_worker(self, agent: str, name: str | None, *, retry_for: float | None = 2.0,
                              stop: asyncio.Event | None = None) -> dict[str, Any]:
        """``POST /v0/agents/{agent}/workers`` → ``{worker_id, agent, lease_timeout_seconds}``."""
        body = {"name": name} if name else {}
        r = await self.t.request("POST", f"/v0/agents/{_q(agent)}/workers", json=body,
                                 idempotent=True, retry_for=retry_for, stop=stop or self.stop)
        out: dict[str, Any] = r.json()
        return out

    async def claim(self, agent: str, worker_id: str, wait_seconds: int, *, retry_for: float | None = 2.0,
                    stop: asyncio.Event | None = None) -> Claim | None:
        """Long-poll for work; ``None`` when nothing arrived in time.

        A claim whose reply was lost is treated as no claim: its lease expires and the
        kernel queues the execution again (one attempt is spent).
        """
        try:
            r = await self.t.request("POST", f"/v0/agents/{_q(agent)}/claim",
                                     json={"worker_id": worker_id, "wait_seconds": wait_seconds},
                                     timeout=wait_seconds + 15, idempotent=False, retry_for=retry_for,
                                     stop=stop or self.stop)
        except NetworkError as e:
            if e.sent:
                return None
            raise
        if r.status == 204 or not r.body:
            return None
        return Claim.from_json(r.json())

    def _path(self, execution_id: str, rest: str = "") -> str:
        return f"/v0/executions/{_q(execution_id)}{rest}"

    async def submit_step(self, execution_id: str, lease: DispatchLease, *, kind: str, target: str,
                          args: Any, idempotency: str, resources: list[str] | None = None) -> StepDecision:
        """``POST /steps``. Each submission carries a fresh ``request_id``; a resend with the
        same id (the reply was lost) is the same step to the kernel, not a new occurrence, so
        the transport may retry it. ``resources`` (registered resource keys the step may
        change) is sent only when non-empty."""
        body: dict[str, Any] = {"kind": kind, "target": target, "args": args, "idempotency": idempotency,
                                "request_id": uuid.uuid4().hex}
        if resources:
            body["resources"] = resources
        r = await self.t.request("POST", self._path(execution_id, "/steps"), json=body,
                                 headers=lease.headers, idempotent=True, retry_for=self.retry_for,
                                 stop=self.stop)
        return StepDecision.from_json(r.json())

    async def finish_step(self, execution_id: str, lease: DispatchLease, step_id: str, *,
                          ok: bool, value: Any, captures: list[dict[str, Any]] | None = None,
                          capture_failures: list[dict[str, Any]] | None = None) -> StepDecision:
        """``POST /steps/{id}/complete {result}`` or ``/fail {error}`` (safe to repeat), with
        the checkpoints captured after the step (``captures`` / ``capture_failures``)."""
        path = self._path(execution_id, f"/steps/{_q(step_id)}/{'complete' if ok else 'fail'}")
        body: dict[str, Any] = {"result": value} if ok else {"error": value}
        if captures:
            body["captures"] = captures
        if capture_failures:
            body["capture_failures"] = capture_failures
        r = await self.t.request("POST", path, json=body, headers=lease.headers, idempotent=True,
                                 retry_for=self.retry_for, stop=self.stop)
        return StepDecision.from_json(r.json())

    async def register_resource(self, execution_id: str, lease: DispatchLease,
                                spec: dict[str, Any]) -> dict[str, Any]:
        """``POST /resources {key, driver_id, configuration, every_steps, on_completion,
        coverage_reuse}`` → the resource view (registering again returns the current view)."""
        r = await self.t.request("POST", self._path(execution_id, "/resources"), json=spec,
                                 headers=lease.headers, idempotent=True, retry_for=self.retry_for,
                                 stop=self.stop)
        out: dict[str, Any] = r.json()
        return out

    async def bind_resource(self, execution_id: str, lease: DispatchLease, key: str, binding: Any) -> None:
        """``POST /resources/{key}/binding {binding}`` (the same binding again is a no-op)."""
        await self.t.request("POST", self._path(execution_id, f"/resources/{_q(key)}/binding"),
                             json={"binding": binding}, headers=lease.headers, idempotent=True,
                             retry_for=self.retry_for, stop=self.stop)

    async def record_checkpoints(self, execution_id: str, lease: DispatchLease, *,
                                 captures: list[dict[str, Any]] | None = None,
                                 capture_failures: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """``POST /resources/checkpoints {captures, capture_failures}`` → ``{recorded, refused}``. Safe
        to resend after a lost reply: the kernel then lists the same reference twice."""
        body: dict[str, Any] = {}
        if captures:
            body["captures"] = captures
        if capture_failures:
            body["capture_failures"] = capture_failures
        r = await self.t.request("POST", self._path(execution_id, "/resources/checkpoints"), json=body,
                                 headers=lease.headers, idempotent=True, retry_for=self.retry_for,
                                 stop=self.stop)
        out: dict[str, Any] = r.json() or {}
        return out

    async def heartbeat(self, execution_id: str, lease: DispatchLease) -> dict[str, Any]:
        """``POST /heartbeat``: renew the lease (``204``)."""
        r = await self.t.request("POST", self._path(execution_id, "/heartbeat"), headers=lease.headers,
                                 idempotent=True, retry_for=lease.heartbeat_interval,
                                 timeout=max(5.0, lease.timeout), stop=self.stop)
        out: dict[str, Any] = r.json() or {}
        return out

    async def complete(self, execution_id: str, lease: DispatchLease, output: Any,
                       state: Any = None) -> dict[str, Any]:
        """``POST /complete {output, state?}``."""
        body: dict[str, Any] = {"output": output}
        if state is not None:
            body["state"] = state
        r = await self.t.request("POST", self._path(execution_id, "/complete"), json=body,
                                 headers=lease.headers, idempotent=True, retry_for=self.retry_for,
                                 stop=self.stop)
        out: dict[str, Any] = r.json() or {}
        return out

    async def fail(self, execution_id: str, lease: DispatchLease, error: str) -> dict[str, Any]:
        """``POST /fail {error}`` (at most 4096 bytes)."""
        r = await self.t.request("POST", self._path(execution_id, "/fail"), json={"error": error},
                                 headers=lease.headers, idempotent=True, retry_for=self.retry_for,
                                 stop=self.stop)
        out: dict[str, Any] = r.json() or {}
        return out

    async def get_execution(self, execution_id: str) -> Execution:
        """``GET /v0/executions/{id}``."""
        r = await self.t.request("GET", self._path(execution_id), retry_for=self.retry_for, stop=self.stop)
        return Execution.from_json(r.json())

    async def previous_state(self, execution_id: str, lease: DispatchLease) -> Any:
        """``GET /v0/executions/{id}/previous`` → ``state`` (``None`` without a parent, or
        from a kernel without sessions)."""
        try:
            r = await self.t.request("GET", self._path(execution_id, "/previous"), headers=lease.headers,
                                     retry_for=self.retry_for, stop=self.stop)
        except NotFoundError:
            return None
        data = r.json() or {}
        return data.get("state")
