"""rebuno: write durable, policy-checked AI agents for the rebuno kernel.

Every tool call, ``step()`` and model call an agent makes is a *step* the kernel checks
against the agent's policy and records; a crashed or re-dispatched agent replays the
recorded results instead of running them again. Standard library only; Python 3.11+.

Agent side: :class:`Agent`, :func:`tool`, :func:`wrap_tool`, :func:`step`,
:func:`execution`, :func:`previous`, :class:`Result`, :class:`ChatClient`,
:class:`ToolSet`, :class:`Refusal`, :func:`resource`, :class:`CheckpointPolicy`.
Application side: :class:`Client`,
:class:`SyncClient`. Errors: see :mod:`rebuno.errors`. MCP tools: :mod:`rebuno.mcp`.

:func:`http_client` and ``RebunoTransport`` (model calls through an httpx client as
recorded steps) need ``httpx``; it is imported only when they are used, so the package
itself needs nothing beyond the standard library.
"""

from typing import Any

from rebuno import types
from rebuno._schema import openai_tool
from rebuno.agent import Agent
from rebuno.client import Client, SyncClient
from rebuno.errors import (
    APIError,
    Blocked,
    CheckpointUnavailable,
    ConflictError,
    ForbiddenError,
    IndeterminateError,
    LeaseSuperseded,
    LLMError,
    NetworkError,
    NotFoundError,
    PayloadTooLarge,
    PolicyError,
    RateLimited,
    RebunoError,
    ResourceUnavailable,
    StepIDMismatch,
    Terminated,
    ToolError,
    UnauthorizedError,
    ValidationError,
    failure_reason,
    raise_for_refusal,
    refusal_message,
)
from rebuno.execution import ExecutionContext, Result, execution, previous
from rebuno.llm import ChatClient, CompletionAssembler
from rebuno.resource import CheckpointPolicy, ResourceDriver, ResourceHandle, resource
from rebuno.step import step
from rebuno.tool import Refusal, ToolSet, tool, tools_schema, wrap_tool

__version__ = "0.1.0"


def http_client(**httpx_kwargs: Any) -> Any:
    """An ``httpx.AsyncClient`` whose model calls are recorded, replayable ``llm_call``
    steps (``AsyncOpenAI(http_client=http_client())``). Needs ``httpx``: raises
    ``ImportError`` saying how to get it (or to use :class:`ChatClient`) when it is
    missing. See :mod:`rebuno.httpx_transport`."""
    from rebuno.httpx_transport import http_client as make

    return make(**httpx_kwargs)


def __getattr__(name: str) -> Any:
    """``rebuno.RebunoTransport``, imported on first use (it needs httpx)."""
    if name == "RebunoTransport":
        from rebuno.httpx_transport import RebunoTransport

        return RebunoTransport
    raise AttributeError(f"module 'rebuno' has no attribute {name!r}")


__all__ = [
    "Agent",
    "APIError",
    "Blocked",
    "ChatClient",
    "CheckpointPolicy",
    "CheckpointUnavailable",
    "Client",
    "CompletionAssembler",
    "ConflictError",
    "ExecutionContext",
    "ForbiddenError",
    "IndeterminateError",
    "LLMError",
    "LeaseSuperseded",
    "NetworkError",
    "NotFoundError",
    "PayloadTooLarge",
    "PolicyError",
    "RateLimited",
    "RebunoError",
    "Refusal",
    "ResourceDriver",
    "ResourceHandle",
    "ResourceUnavailable",
    "Result",
    "StepIDMismatch",
    "SyncClient",
    "Terminated",
    "ToolError",
    "ToolSet",
    "UnauthorizedError",
    "ValidationError",
    "execution",
    "failure_reason",
    "http_client",
    "openai_tool",
    "previous",
    "raise_for_refusal",
    "refusal_message",
    "resource",
    "step",
    "tool",
    "tools_schema",
    "types",
    "wrap_tool",
    "__version__",
]
