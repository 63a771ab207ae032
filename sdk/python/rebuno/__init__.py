"""rebuno: write durable, policy-checked AI agents for the rebuno kernel.

Every tool call, ``step()`` and model call an agent makes is a *step* the kernel checks
against the agent's policy and records; a crashed or re-dispatched agent replays the
recorded results instead of running them again. Standard library only; Python 3.11+.

Agent side: :class:`Agent`, :func:`tool`, :func:`wrap_tool`, :func:`step`,
:func:`execution`, :func:`previous`, :class:`Result`, :class:`ChatClient`,
:class:`ToolSet`, :class:`Refusal`, :func:`resource`, :class:`CheckpointPolicy`.
Application side: :class:`Client`,
:class:`SyncClient`. Errors: see :mod:`rebuno.errors`.
"""

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
    "SyncClient",
    "Terminated",
    "ToolError",
    "ToolSet",
    "UnauthorizedError",
    "ValidationError",
    "execution",
    "failure_reason",
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
