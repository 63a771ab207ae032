"""Structural types for code that runs commands and touches files without caring whether it
was given a sandbox, a session or a user handle."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from typing import IO, Any, Protocol, TextIO, runtime_checkable

from rebuno.sandbox._models import CompletedCommand, DirectoryEntry, DurationInput


@runtime_checkable
class SandboxFilesystemOperations(Protocol):
    """File operations of ``Sandbox.fs``, ``SandboxRuntimeSession.fs`` and ``SandboxUser.fs``."""

    async def read_bytes(self, path: Any, *, cwd: Any = None) -> bytes:
        """The whole file as bytes."""
        ...

    async def read_text(self, path: Any, *, cwd: Any = None, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The whole file as text."""
        ...

    async def write_bytes(self, path: Any, data: bytes, *, cwd: Any = None, mode: int | None = None) -> None:
        """Replace the file's content."""
        ...

    async def write_text(self, path: Any, text: str, *, cwd: Any = None, encoding: str = "utf-8",
                         errors: str = "strict", mode: int | None = None) -> None:
        """Replace the file's content with text."""
        ...

    async def mkdir(self, path: Any, *, cwd: Any = None, recursive: bool = True) -> None:
        """Create a directory."""
        ...

    async def exists(self, path: Any, *, cwd: Any = None) -> bool:
        """Whether the path exists."""
        ...

    async def is_file(self, path: Any, *, cwd: Any = None) -> bool:
        """Whether the path is a regular file."""
        ...

    async def is_dir(self, path: Any, *, cwd: Any = None) -> bool:
        """Whether the path is a directory."""
        ...

    async def listdir(self, path: Any = ".", *, cwd: Any = None) -> list[DirectoryEntry]:
        """The entries of a directory."""
        ...

    async def remove(self, path: Any, *, cwd: Any = None, recursive: bool = False, missing_ok: bool = False) -> None:
        """Remove an entry."""
        ...

    async def rename(self, source: Any, destination: Any, *, cwd: Any = None) -> None:
        """Rename an entry."""
        ...

    def open(self, path: Any, mode: str = "r", **kwargs: Any) -> Any:
        """A sequential file handle."""
        ...

    def batch(self, *, cwd: Any = None) -> Any:
        """Staged writes uploaded together."""
        ...


@runtime_checkable
class SandboxExecution(Protocol):
    """Commands and files on a sandbox, a session or a user (asynchronous)."""

    @property
    def fs(self) -> SandboxFilesystemOperations:
        """The file operations."""
        ...

    async def run_command(self, cmd: str, args: Sequence[str] | None = None, *, cwd: str | None = None,
                          env: Mapping[str, str] | None = None, sudo: bool = False,
                          kill_after: DurationInput = None, check: bool = False,
                          stdout: TextIO | IO[bytes] | int | None = None,
                          stderr: TextIO | IO[bytes] | int | None = None, capture_output: bool = False,
                          input: str | bytes | None = None) -> CompletedCommand:
        """Run a command to completion."""
        ...

    async def create_command(self, cmd: str, args: Sequence[str] | None = None, *, cwd: str | None = None,
                             env: Mapping[str, str] | None = None, sudo: bool = False,
                             kill_after: DurationInput = None, stdin: int | None = None,
                             stdout: int = subprocess.PIPE, stderr: int = subprocess.PIPE) -> Any:
        """Start a command and return its handle."""
        ...


@runtime_checkable
class SyncSandboxFilesystemOperations(Protocol):
    """File operations of the synchronous handles' ``fs``."""

    def read_bytes(self, path: Any, *, cwd: Any = None) -> bytes:
        """The whole file as bytes."""
        ...

    def read_text(self, path: Any, *, cwd: Any = None, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The whole file as text."""
        ...

    def write_bytes(self, path: Any, data: bytes, *, cwd: Any = None, mode: int | None = None) -> None:
        """Replace the file's content."""
        ...

    def write_text(self, path: Any, text: str, *, cwd: Any = None, encoding: str = "utf-8",
                   errors: str = "strict", mode: int | None = None) -> None:
        """Replace the file's content with text."""
        ...

    def mkdir(self, path: Any, *, cwd: Any = None, recursive: bool = True) -> None:
        """Create a directory."""
        ...

    def exists(self, path: Any, *, cwd: Any = None) -> bool:
        """Whether the path exists."""
        ...

    def is_file(self, path: Any, *, cwd: Any = None) -> bool:
        """Whether the path is a regular file."""
        ...

    def is_dir(self, path: Any, *, cwd: Any = None) -> bool:
        """Whether the path is a directory."""
        ...

    def listdir(self, path: Any = ".", *, cwd: Any = None) -> list[DirectoryEntry]:
        """The entries of a directory."""
        ...

    def remove(self, path: Any, *, cwd: Any = None, recursive: bool = False, missing_ok: bool = False) -> None:
        """Remove an entry."""
        ...

    def rename(self, source: Any, destination: Any, *, cwd: Any = None) -> None:
        """Rename an entry."""
        ...

    def open(self, path: Any, mode: str = "r", **kwargs: Any) -> Any:
        """A sequential file handle."""
        ...

    def batch(self, *, cwd: Any = None) -> Any:
        """Staged writes uploaded together."""
        ...


@runtime_checkable
class SyncSandboxExecution(Protocol):
    """Commands and files on a sandbox, a session or a user (synchronous)."""

    @property
    def fs(self) -> SyncSandboxFilesystemOperations:
        """The file operations."""
        ...

    def run_command(self, cmd: str, args: Sequence[str] | None = None, *, cwd: str | None = None,
                    env: Mapping[str, str] | None = None, sudo: bool = False, kill_after: DurationInput = None,
                    check: bool = False, stdout: TextIO | IO[bytes] | int | None = None,
                    stderr: TextIO | IO[bytes] | int | None = None, capture_output: bool = False,
                    input: str | bytes | None = None) -> CompletedCommand:
        """Run a command to completion."""
        ...

    def create_command(self, cmd: str, args: Sequence[str] | None = None, *, cwd: str | None = None,
                       env: Mapping[str, str] | None = None, sudo: bool = False, kill_after: DurationInput = None,
                       stdin: int | None = None, stdout: int = subprocess.PIPE,
                       stderr: int = subprocess.PIPE) -> Any:
        """Start a command and return its handle."""
        ...
