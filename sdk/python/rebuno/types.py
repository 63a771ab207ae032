"""Typed views of the kernel's JSON objects (see ``docs/api.md``).

Every type is a dataclass built with ``from_json``, which ignores fields it does not
know (so a newer kernel does not break an older SDK) and keeps the full object on
``raw``.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, TypeVar

_T = TypeVar("_T")


def _build(cls: type[_T], data: dict[str, Any] | None) -> _T:
    data = data or {}
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: v for k, v in data.items() if k in names and k != "raw"}
    obj = cls(**kwargs)
    obj.raw = data  # type: ignore[attr-defined]
    return obj


class ExecutionStatus(str, enum.Enum):
    """Execution statuses: ``pending → running ↔ blocked → completed | failed | cancelled``."""

    PENDING = "pending"
    RUNNING = "running"
    BLOCKED = "blocked"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Whether the status is final."""
        return self in (ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.CANCELLED)


TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})


@dataclass
class DispatchInfo:
    """The execution's current dispatch (``queued``, ``leased``, ``released`` or ``none``)."""

    id: str | None = None
    attempt: int = 0
    state: str = ""
    worker_id: str | None = None
    lease_deadline: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> DispatchInfo:
        """Build from the kernel's JSON."""
        return _build(cls, data)


@dataclass
class Execution:
    """One run of an agent."""

    id: str
    agent_id: str = ""
    session: str | None = None
    status: str = ""
    input: Any = None
    output: Any = None
    state: Any = None
    failure_reason: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    deadline_at: str | None = None
    last_seq: int = 0
    dispatch: DispatchInfo | None = None
    parent_execution_id: str | None = None
    forked_from: str | None = None
    fork_seq: int | None = None
    restoration: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Execution:
        """Build from the kernel's JSON."""
        e = _build(cls, data)
        if isinstance(data.get("dispatch"), dict):
            e.dispatch = DispatchInfo.from_json(data["dispatch"])
        return e

    @property
    def terminal(self) -> bool:
        """Whether the execution is completed, failed or cancelled."""
        return self.status in TERMINAL_STATUSES

    @property
    def agent(self) -> str:
        """Alias of ``agent_id``."""
        return self.agent_id


@dataclass
class Step:
    """A recorded step (tool call, LLM call or local step)."""

    step_id: str
    execution_id: str = ""
    kind: str = ""
    target: str = ""
    args: Any = None
    args_hash: str = ""
    occurrence: int = 0
    idempotency: str = "safe_to_retry"
    status: str = ""
    result: Any = None
    error: Any = None
    rule_id: str | None = None
    approval_id: str | None = None
    runs: int = 0
    created_at: str | None = None
    completed_at: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Step:
        """Build from the kernel's JSON."""
        return _build(cls, data)


@dataclass
class StepDecision:
    """The kernel's answer to a step submission (or to completing/failing a step)."""

    decision: str
    step_id: str | None = None
    rule_id: str | None = None
    reason: str | None = None
    approval_id: str | None = None
    result: Any = None
    error: Any = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepDecision:
        """Build from the kernel's JSON."""
        return _build(cls, data)

    @property
    def has_error(self) -> bool:
        """Whether a ``replay`` decision carries a recorded error (not a result)."""
        return "error" in self.raw and self.raw["error"] is not None


@dataclass
class Event:
    """One entry of an execution's event log."""

    execution_id: str
    event_seq: int
    type: str
    occurred_at: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Event:
        """Build from the kernel's JSON."""
        return _build(cls, data)

    @property
    def seq(self) -> int:
        """Alias of ``event_seq``."""
        return self.event_seq

    @property
    def at(self) -> str | None:
        """Alias of ``occurred_at``."""
        return self.occurred_at


@dataclass
class Approval:
    """A request for a person to allow or deny a gated step."""

    id: str
    execution_id: str = ""
    step_id: str = ""
    kind: str = ""
    target: str = ""
    args: Any = None
    status: str = ""
    rule_id: str | None = None
    reason: str | None = None
    message: str | None = None
    approvers: list[str] | None = None
    timeout_at: str | None = None
    decided_by: str | None = None
    decided_at: str | None = None
    rationale: str | None = None
    created_at: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Approval:
        """Build from the kernel's JSON."""
        return _build(cls, data)


@dataclass
class ResourceView:
    """A resource registered on an execution (``GET /v0/executions/{id}/resources``)."""

    key: str
    driver_id: str = ""
    configuration: Any = None
    every_steps: int = 0
    on_completion: bool = False
    coverage_reuse: bool = False
    registered_seq: int = 0
    generation: int = 0
    count: int = 0
    binding: Any = None
    checkpoint_ref: str | None = None
    covered: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ResourceView:
        """Build from the kernel's JSON."""
        return _build(cls, data)


@dataclass
class ForkPoints:
    """Where an execution can be forked (``GET /v0/executions/{id}/fork-points``).

    ``events``: ``[{event_seq, type, target, covered}]``, ``covered`` meaning every resource
    registered by then has a checkpoint covering that event (a fork there restores it
    exactly); ``checkpoints``: ``[{key, generation, checkpoint_ref, covered_seq,
    invalidated_seq}]``; ``resources``: ``{key: registered_seq}``.
    """

    latest_seq: int = 0
    resources: dict[str, int] = field(default_factory=dict)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ForkPoints:
        """Build from the kernel's JSON."""
        return _build(cls, data)


@dataclass
class ExecutionPage:
    """One page of ``GET /v0/executions`` (newest first)."""

    executions: list[Execution]
    next_cursor: str | None = None


@dataclass
class Claim:
    """A claimed dispatch: the execution plus the lease this worker holds."""

    execution: Execution
    dispatch_id: str
    attempt: int
    lease_timeout_seconds: float
    lease_deadline: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Claim:
        """Build from the claim reply ``{execution, dispatch}``."""
        d = data.get("dispatch") or {}
        return cls(
            execution=Execution.from_json(data["execution"]),
            dispatch_id=d["id"],
            attempt=int(d["attempt"]),
            lease_timeout_seconds=float(d.get("lease_timeout_seconds") or 120),
            lease_deadline=d.get("lease_deadline"),
        )
