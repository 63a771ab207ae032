"""rebuno.sandbox: the Python client of ``rebuno sandboxd`` (asynchronous API).

The shape follows the Vercel Sandbox Python SDK, so code written for ``vercel.sandbox``
runs with its imports changed (``from vercel import sandbox`` -> ``from rebuno import
sandbox``, ``from vercel.api import session`` -> ``from rebuno.sandbox import session``)::

    import subprocess
    from rebuno import sandbox
    from rebuno.sandbox import session

    async with session():
        async with sandbox.create_sandbox() as instance:
            result = await instance.run_command("echo", ["hello"], capture_output=True)
            server = await instance.create_command("cat", stdin=subprocess.PIPE)
            await server.stdin.send(b"ping\\n")
            print(await server.stdout.readline())
            print(await server.communicate())

The synchronous mirror is :mod:`rebuno.sandbox.sync`. The service URL is ``base_url=``,
else ``$REBUNO_SANDBOX_URL``, else ``http://127.0.0.1:8090``. Standard library only.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

from rebuno.sandbox._aio import (
    Command,
    CommandStdin,
    CreateSandboxOperation,
    Drive,
    Sandbox,
    SandboxBinaryReader,
    SandboxBinaryWriter,
    SandboxClient,
    SandboxFilesystem,
    SandboxFilesystemBatch,
    SandboxRuntimeSession,
    SandboxTextReader,
    SandboxTextWriter,
    SandboxUser,
    Snapshot,
    TextReader,
)
from rebuno.sandbox._interactive import InteractiveSession, InteractiveStream
from rebuno.sandbox._errors import (
    SandboxApiError,
    SandboxCleanupError,
    SandboxCommandError,
    SandboxCommandNotFoundError,
    SandboxConnectionError,
    SandboxEndOfStream,
    SandboxError,
    SandboxFileExistsError,
    SandboxFilesystemError,
    SandboxIsADirectoryError,
    SandboxLimitError,
    SandboxNotFoundError,
    SandboxPathNotFoundError,
    SandboxPermissionError,
    SandboxPtyDisconnectedError,
    SandboxResponseError,
    SandboxSessionEndedError,
    SandboxSessionPausedError,
    SandboxStateError,
    SandboxStdinClosedError,
    SandboxStreamError,
    SandboxTimeoutError,
    SandboxUserAlreadyExistsError,
    SandboxUserNotFoundError,
)
from rebuno.sandbox._models import (
    CURRENT_REGION,
    CommandSignal,
    CommandStatus,
    CompletedCommand,
    DirectoryEntry,
    DriveInfo,
    DriveMount,
    DriveQuery,
    DriveQueryByCreatedAt,
    DriveQueryByName,
    DriveQueryByUpdatedAt,
    DurationInput,
    GitSource,
    ImageSource,
    NetworkPolicy,
    NetworkPolicyResponse,
    NetworkPolicyRule,
    NetworkPolicyTransform,
    RegionInput,
    SandboxInfo,
    SandboxQuery,
    SandboxResources,
    SandboxServiceOptions,
    SandboxSessionInfo,
    SandboxSource,
    SandboxStatus,
    SandboxUsage,
    SandboxUserInfo,
    SnapshotInfo,
    SnapshotSource,
    TarballSource,
)
from rebuno.sandbox._protocols import (
    SandboxExecution,
    SandboxFilesystemOperations,
    SyncSandboxExecution,
    SyncSandboxFilesystemOperations,
)
from rebuno.sandbox._resource import SandboxResource, SandboxWorkspace
from rebuno.sandbox._session import SandboxSession, current_async_client, session


def _module_level(name: str) -> Callable[..., Any]:
    """A module-level function calling ``SandboxClient.<name>`` on the ambient client."""
    meth = getattr(SandboxClient, name)
    sig = inspect.signature(meth)
    sig = sig.replace(parameters=list(sig.parameters.values())[1:])

    if inspect.iscoroutinefunction(meth):
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            return await getattr(current_async_client(), name)(*args, **kwargs)
        fn: Callable[..., Any] = call_async
    else:
        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(current_async_client(), name)(*args, **kwargs)
        fn = call
    functools.update_wrapper(fn, meth)
    del fn.__wrapped__  # type: ignore[attr-defined]
    fn.__signature__ = sig  # type: ignore[attr-defined]
    fn.__qualname__ = name
    fn.__module__ = __name__
    fn.__doc__ = (meth.__doc__ or "") + "\n\n(Module-level: uses the ambient ``session()`` client.)"
    return fn


create_sandbox = _module_level("create_sandbox")
get_sandbox = _module_level("get_sandbox")
resume_sandbox = _module_level("resume_sandbox")
get_or_create_sandbox = _module_level("get_or_create_sandbox")
list_sandboxes = _module_level("list_sandboxes")
delete_sandbox = _module_level("delete_sandbox")
fork_sandbox = _module_level("fork_sandbox")
get_or_create_drive = _module_level("get_or_create_drive")
get_drive = _module_level("get_drive")
fork_drive = _module_level("fork_drive")
delete_drive = _module_level("delete_drive")
query_drives = _module_level("query_drives")
get_snapshot = _module_level("get_snapshot")
query_snapshots = _module_level("query_snapshots")
delete_snapshot = _module_level("delete_snapshot")


def query_sandboxes(*, query: SandboxQuery | None = None, metadata: Any = None, tags: Any = None,
                    state: Any = None, page_size: int | None = None,
                    cursor: str | None = None) -> AsyncIterator[Sandbox]:
    """Iterate over sandboxes (``async for``) with the given metadata and state; see
    :meth:`SandboxClient.query_sandboxes`. Uses the ambient ``session()`` client."""
    return current_async_client().query_sandboxes(query=query, metadata=metadata, tags=tags, state=state,
                                                  page_size=page_size, cursor=cursor)


# The former "process" names (deprecated aliases).
Process = Command
CompletedProcess = CompletedCommand
ProcessStatus = CommandStatus
ProcessSignal = CommandSignal
ProcessStdin = CommandStdin

from rebuno.sandbox import sync  # noqa: E402  (the synchronous mirror; imports the private modules only)
from rebuno.sandbox.sync import (  # noqa: E402
    SyncCommand,
    SyncCommandStdin,
    SyncDrive,
    SyncInteractiveSession,
    SyncInteractiveStream,
    SyncSandbox,
    SyncSandboxClient,
    SyncSandboxFilesystem,
    SyncSandboxRuntimeSession,
    SyncSandboxUser,
    SyncSnapshot,
    SyncTextReader,
)

SyncProcess = SyncCommand
SyncProcessStdin = SyncCommandStdin

__all__ = [
    "SandboxResource",
    "SandboxWorkspace",
    "CURRENT_REGION",
    "Command",
    "CommandSignal",
    "CommandStatus",
    "CommandStdin",
    "CompletedCommand",
    "CompletedProcess",
    "CreateSandboxOperation",
    "DirectoryEntry",
    "Drive",
    "DriveInfo",
    "DriveMount",
    "DriveQuery",
    "DriveQueryByCreatedAt",
    "DriveQueryByName",
    "DriveQueryByUpdatedAt",
    "DurationInput",
    "GitSource",
    "ImageSource",
    "InteractiveSession",
    "InteractiveStream",
    "NetworkPolicy",
    "NetworkPolicyResponse",
    "NetworkPolicyRule",
    "NetworkPolicyTransform",
    "Process",
    "ProcessSignal",
    "ProcessStatus",
    "ProcessStdin",
    "RegionInput",
    "Sandbox",
    "SandboxApiError",
    "SandboxBinaryReader",
    "SandboxBinaryWriter",
    "SandboxCleanupError",
    "SandboxClient",
    "SandboxCommandError",
    "SandboxCommandNotFoundError",
    "SandboxConnectionError",
    "SandboxEndOfStream",
    "SandboxError",
    "SandboxExecution",
    "SandboxFileExistsError",
    "SandboxFilesystem",
    "SandboxFilesystemBatch",
    "SandboxFilesystemError",
    "SandboxFilesystemOperations",
    "SandboxInfo",
    "SandboxIsADirectoryError",
    "SandboxLimitError",
    "SandboxNotFoundError",
    "SandboxPathNotFoundError",
    "SandboxPermissionError",
    "SandboxPtyDisconnectedError",
    "SandboxQuery",
    "SandboxResources",
    "SandboxResponseError",
    "SandboxRuntimeSession",
    "SandboxServiceOptions",
    "SandboxSession",
    "SandboxSessionEndedError",
    "SandboxSessionInfo",
    "SandboxSessionPausedError",
    "SandboxSource",
    "SandboxStateError",
    "SandboxStatus",
    "SandboxStdinClosedError",
    "SandboxStreamError",
    "SandboxTextReader",
    "SandboxTextWriter",
    "SandboxTimeoutError",
    "SandboxUsage",
    "SandboxUser",
    "SandboxUserAlreadyExistsError",
    "SandboxUserInfo",
    "SandboxUserNotFoundError",
    "Snapshot",
    "SnapshotInfo",
    "SnapshotSource",
    "SyncCommand",
    "SyncCommandStdin",
    "SyncDrive",
    "SyncInteractiveSession",
    "SyncInteractiveStream",
    "SyncProcess",
    "SyncProcessStdin",
    "SyncSandbox",
    "SyncSandboxClient",
    "SyncSandboxExecution",
    "SyncSandboxFilesystem",
    "SyncSandboxFilesystemOperations",
    "SyncSandboxRuntimeSession",
    "SyncSandboxUser",
    "SyncSnapshot",
    "SyncTextReader",
    "TarballSource",
    "TextReader",
    "create_sandbox",
    "delete_drive",
    "delete_sandbox",
    "delete_snapshot",
    "fork_drive",
    "fork_sandbox",
    "get_drive",
    "get_or_create_drive",
    "get_or_create_sandbox",
    "get_sandbox",
    "get_snapshot",
    "list_sandboxes",
    "query_drives",
    "query_sandboxes",
    "query_snapshots",
    "resume_sandbox",
    "session",
    "sync",
]
