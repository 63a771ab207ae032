"""Exceptions raised by the SDK, and the helpers that turn them into failure reasons.

Hierarchy::

    RebunoError
    ├── NetworkError                 the kernel (or a model endpoint) could not be reached
    ├── APIError                     the kernel answered with an error envelope
    │   ├── ValidationError          400 validation_error
    │   ├── UnauthorizedError        401
    │   ├── ForbiddenError           403
    │   ├── NotFoundError            404
    │   ├── ConflictError            409 conflict / execution_terminal
    │   │   └── StepIDMismatch       409 step_id_mismatch (upstream name; our kernel never sends it)
    │   ├── PayloadTooLarge          413
    │   ├── PolicyError              a step was denied (policy, approver, indeterminate retry)
    │   └── LeaseSuperseded          409 lease_superseded: another worker owns the run now
    ├── ToolError                    a tool/step body failed (now or in a recorded run)
    │   └── IndeterminateError       an at_most_once call was interrupted: it may have happened
    ├── LLMError                     a model endpoint answered with an error
    ├── RateLimited
    ├── Blocked                      the execution waits for an approval: unwind the handler
    ├── Terminated                   the execution is over (completed, failed, cancelled)
    └── ResourceUnavailable          a resource could not be reopened or created
        └── CheckpointUnavailable    the checkpoint a resource is restored from is gone

``Blocked``, ``Terminated`` and ``LeaseSuperseded`` are control-flow signals: the agent
catches them around the handler and ends the dispatch quietly. Because agent frameworks
sometimes catch every exception, the SDK also records the signal on
``execution().suspension`` before raising it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any


class RebunoError(Exception):
    """Base class of every exception the SDK raises."""


class NetworkError(RebunoError):
    """A connection-level failure (refused, reset, timed out).

    ``sent`` is ``True`` when the request may have reached the server before the
    failure, so a non-idempotent call must not simply be repeated.
    """

    def __init__(self, message: str, *, sent: bool = False):
        super().__init__(message)
        self.sent = sent


class APIError(RebunoError):
    """The kernel answered with an error: ``{"error": {code, message, field}}``."""

    def __init__(self, message: str, code: str = "internal_error", status_code: int = 500,
                 field: str | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.status_code = status_code
        self.field = field

    def __str__(self) -> str:
        where = f", field {self.field}" if self.field else ""
        return f"[{self.code}] {self.message} (HTTP {self.status_code}{where})"


class ValidationError(APIError):
    """400 ``validation_error``: a field is missing, of the wrong type or out of bounds."""


class UnauthorizedError(APIError):
    """401: missing or unknown API key."""


class ForbiddenError(APIError):
    """403: the key's role may not do this (or the approver is not listed)."""


class NotFoundError(APIError):
    """404: unknown execution, step, approval, agent or route."""


class ConflictError(APIError):
    """409: the object is not in a state that allows this (``conflict``, ``execution_terminal``)."""


class StepIDMismatch(ConflictError):
    """409 ``step_id_mismatch``: a step outcome named a step the kernel does not expect.

    The upstream SDK's name, kept so code that catches it runs unchanged. Our kernel
    assigns step ids itself and answers a stale outcome with ``replay`` or
    ``execution_terminal``, so it never sends this code; it maps here if one does.
    """


class PayloadTooLarge(APIError):
    """413: the request body is over the kernel's 1 MiB cap."""


class PolicyError(APIError):
    """A step was denied: by a policy rule, by an approver, or as a retry of an
    ``at_most_once`` call whose earlier outcome is unknown.

    ``reason`` is the rule's (or approver's) reason, ``rule_id`` the rule that decided.
    """

    def __init__(self, message: str, rule_id: str | None = "", *, target: str = "", step_id: str = ""):
        super().__init__(message, code="policy_denied", status_code=403)
        self.reason = message
        self.rule_id = rule_id or ""
        self.target = target
        self.step_id = step_id

    def __str__(self) -> str:
        return self.reason


class LeaseSuperseded(APIError):
    """This worker's dispatch attempt is no longer current (409 ``lease_superseded``).

    Another worker owns the execution now (or will once the lease expires). The SDK
    stops the handler quietly and does not fail the execution.
    """

    def __init__(self, message: str = "dispatch lease superseded", code: str = "lease_superseded",
                 status_code: int = 409, field: str | None = None):
        super().__init__(message, code, status_code, field)


class ToolError(RebunoError):
    """A tool or ``step()`` body failed, now or in the recorded run being replayed.

    ``error`` is the recorded error object (``{"message": ..., "type": ...}``);
    ``indeterminate`` is ``True`` for an interrupted ``at_most_once`` call (see
    :class:`IndeterminateError`).
    """

    def __init__(self, message: str, tool_id: str = "", step_id: str = "", retryable: bool = False,
                 *, error: Any = None, indeterminate: bool = False):
        super().__init__(message)
        self.message = message
        self.tool_id = tool_id
        self.step_id = step_id
        self.retryable = retryable
        self.error = error
        self.indeterminate = indeterminate

    def __str__(self) -> str:
        return f"{self.tool_id}: {self.message}" if self.tool_id else self.message


class IndeterminateError(ToolError):
    """An ``at_most_once`` call started in an earlier dispatch and its worker died
    before reporting: the effect **may or may not have happened**. Check the real
    state before continuing; calling the same tool with the same arguments again is
    refused by the kernel (``__indeterminate_retry``).
    """

    def __init__(self, message: str, tool_id: str = "", step_id: str = "", *, error: Any = None):
        super().__init__(message, tool_id, step_id, False, error=error, indeterminate=True)


class LLMError(RebunoError):
    """A model endpoint answered with an error (after retries for 429/5xx)."""

    def __init__(self, message: str, status_code: int = 0, body: Any = None):
        super().__init__(message)
        self.status_code = status_code
        self.body = body


class RateLimited(RebunoError):
    """A step was refused by a rate limit (reserved: the kernel has no rate limits yet)."""

    def __init__(self, reason: str = "rate_limit_exceeded"):
        super().__init__(reason)
        self.reason = reason


class Blocked(RebunoError):
    """The execution is waiting for an approval: the handler must unwind.

    Raised by a tool call whose step needs approval (``approval_id`` and ``reason``
    set), or by any new step while the execution is blocked. The agent ends the
    dispatch without completing or failing the execution; once the approval is
    decided the kernel dispatches it again and the handler replays up to the gated
    call. Also stored on ``execution().suspension`` before it is raised.
    """

    def __init__(self, reason: str = "", *, approval_id: str | None = None, step_id: str | None = None,
                 target: str | None = None):
        super().__init__(f"step blocked: {reason}" if reason else "step blocked")
        self.reason = reason
        self.approval_id = approval_id
        self.step_id = step_id
        self.target = target


class Terminated(RebunoError):
    """The execution is already completed, failed or cancelled: the handler must stop."""

    def __init__(self, message: str = "execution is terminal"):
        super().__init__(message)


class ResourceUnavailable(RebunoError):
    """A resource (``await resource(key, driver=...)``) could not be reopened from its
    recorded binding or created from its checkpoint. The execution fails with
    ``resource_unavailable: <key>: <why>``; it never continues in an empty resource.

    Drivers may raise it (or any exception) from ``open``/``create``; the SDK raises it
    from :func:`rebuno.resource` with ``key`` set.
    """

    def __init__(self, message: str = "", key: str = ""):
        super().__init__(message)
        self.key = key
        self.message = message

    def __str__(self) -> str:
        return self.message


class CheckpointUnavailable(ResourceUnavailable):
    """The checkpoint a resource should be created from no longer exists (a deleted
    snapshot). A driver raises it from ``create(checkpoint_ref)``; the execution fails
    with ``resource_unavailable: <key>: ...``."""


# --- kernel error envelopes -------------------------------------------------------

_ERROR_BY_CODE: dict[str, type[APIError]] = {
    "validation_error": ValidationError,
    "unauthorized": UnauthorizedError,
    "forbidden": ForbiddenError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "execution_terminal": ConflictError,
    "step_id_mismatch": StepIDMismatch,
    "lease_superseded": LeaseSuperseded,
    "payload_too_large": PayloadTooLarge,
}

_ERROR_BY_STATUS: dict[int, type[APIError]] = {
    400: ValidationError, 401: UnauthorizedError, 403: ForbiddenError, 404: NotFoundError,
    409: ConflictError, 413: PayloadTooLarge,
}


def error_from_response(status: int, body: bytes) -> APIError:
    """Translate an error response into an exception: the kernel's ``{code, message,
    details: {field}}``, or the sandbox daemon's ``{"error": {code, message, field}}``."""
    code, message, field = "", "", None
    try:
        data = json.loads(body) if body else None
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            code = str(err.get("code") or err.get("type") or "")
            message = str(err.get("message") or "")
            field = err.get("field") or None
            details = err.get("details")
            if not field and isinstance(details, dict):
                field = details.get("field") or None
        elif isinstance(err, str):
            message = err
    if not message:
        message = body.decode("utf-8", errors="replace")[:500] or f"HTTP {status}"
    if not code:
        code = "internal_error" if status >= 500 else f"http_{status}"
    cls: type[APIError] = _ERROR_BY_CODE.get(code) or _ERROR_BY_STATUS.get(status) or APIError
    return cls(message, code=code, status_code=status, field=field)


# --- refusals and failure reasons ---------------------------------------------------

REFUSAL_TYPE = "rebuno_refusal"
_REFUSAL_RE = re.compile(rf"{REFUSAL_TYPE}: (\w+)(?: reason=(.*))?")
_TOKEN_RE = re.compile(r"[a-z0-9_]+")
_DEFAULT_REASON = {"denied": "policy_denied", "rate_limited": "rate_limit_exceeded"}
MAX_FAILURE_BYTES = 4096


def refusal_message(decision: str, reason: str = "") -> str:
    """The marker a refused LLM call carries in an HTTP error body
    (``rebuno_refusal: <decision>[ reason=<why>]``), for LLM gateways."""
    msg = f"{REFUSAL_TYPE}: {decision}"
    if reason:
        msg += f" reason={reason}"
    return msg


def _causes(exc: BaseException | None, limit: int = 10) -> Iterator[BaseException]:
    for _ in range(limit):
        if exc is None:
            return
        yield exc
        exc = exc.__cause__ or exc.__context__


def raise_for_refusal(exc: BaseException) -> None:
    """Re-raise a refusal carried in a provider error as its control-flow exception.

    A gateway that refuses an LLM call answers with ``rebuno_refusal: <decision>``;
    call this on the error the provider library raised to get ``Blocked``,
    ``Terminated``, ``LeaseSuperseded``, ``PolicyError`` or ``RateLimited`` back.
    Returns silently for anything else.
    """
    for e in _causes(exc):
        m = _REFUSAL_RE.search(str(e))
        if not m:
            continue
        decision = m.group(1)
        reason = (m.group(2) or "").rstrip("'\"} \n") or _DEFAULT_REASON.get(decision, decision)
        if decision in ("blocked", "execution_blocked"):
            raise Blocked(reason) from exc
        if decision == "execution_terminal":
            raise Terminated(reason) from exc
        if decision == "lease_superseded":
            raise LeaseSuperseded() from exc
        if decision == "denied":
            raise PolicyError(reason) from exc
        if decision == "rate_limited":
            raise RateLimited(reason) from exc
        return


def truncate_utf8(text: str, limit: int = MAX_FAILURE_BYTES) -> str:
    """Cut ``text`` to at most ``limit`` UTF-8 bytes without splitting a character."""
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    cut = raw[: limit - 3].decode("utf-8", errors="ignore")
    return cut + "..."


def failure_reason(exc: BaseException) -> str:
    """The ``failure_reason`` text recorded when ``exc`` fails an execution.

    Everything before the first colon is a stable token: ``policy_denied`` (or a bare
    kernel reason such as ``approval_timeout``), ``tool_error``, ``agent_error``,
    ``resource_unavailable`` or ``input_invalid``. The result is at most 4096 UTF-8 bytes.
    """
    if isinstance(exc, PolicyError):
        reason = exc.reason
        text = reason if _TOKEN_RE.fullmatch(reason or "") else f"policy_denied: {reason}"
    elif isinstance(exc, RateLimited):
        text = str(exc)
    elif isinstance(exc, ToolError):
        text = f"tool_error: {exc}"
    elif isinstance(exc, ResourceUnavailable):
        text = f"resource_unavailable: {exc.key}: {exc.message}" if exc.key else f"resource_unavailable: {exc}"
    elif isinstance(exc, APIError):
        text = f"agent_error: {type(exc).__name__}: {exc.message}"
    else:
        text = f"agent_error: {type(exc).__name__}: {exc}"
    return truncate_utf8(text)
