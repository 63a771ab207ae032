"""Helpers for tests and local development: :class:`DirectoryWorkspace`, a resource driver
that needs no sandbox, and :func:`free_port`.

Each workspace is a directory under ``root/workspaces``; a checkpoint is a full copy
of it under ``root/snapshots`` (copy on checkpoint, never changed afterwards)::

    root/
      workspaces/ws-1a2b3c4d5e6f/      a live workspace (the binding names it)
      snapshots/cp-9f8e7d6c5b4a/       a checkpoint (the checkpoint_ref names it)
      paused/ws-1a2b3c4d5e6f           one line per pause()

It is a real driver for tests, local development and examples (see
``examples/python/workspace_agent.py``); it is not isolation: tools run with the
agent's own permissions::

    from rebuno import CheckpointPolicy, resource
    from rebuno.testing import DirectoryWorkspace

    workspace = await resource("workspace", driver=DirectoryWorkspace("/tmp/ws"),
                               checkpoints=CheckpointPolicy(every_steps=5))
    workspace.write_text("notes.txt", "hello")
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from rebuno.errors import CheckpointUnavailable, ResourceUnavailable

def free_port() -> int:
    """A loopback port to hand a server we start. Picked below the kernel's ephemeral
    range (net.ipv4.ip_local_port_range), because a port the kernel handed out for a
    bind to port 0 can be handed out again to the server's own helpers (sandboxd's egress
    proxy and DNS bind port 0), which then hold it when the server binds it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(10000, max(low, 10001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a crowded range: any free port
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class DirectoryHandle:
    """An open directory workspace: ``path`` and a few helpers. Paths given to the
    helpers are relative to the workspace and may not leave it."""

    def __init__(self, path: Path, name: str):
        self.path = path
        self.name = name

    def __fspath__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"DirectoryHandle({str(self.path)!r})"

    def resolve(self, rel: str) -> Path:
        """The absolute path of ``rel`` inside the workspace (``ValueError`` outside it)."""
        p = (self.path / rel).resolve()
        root = self.path.resolve()
        if p != root and root not in p.parents:
            raise ValueError(f"{rel!r} is outside the workspace")
        return p

    def exists(self, rel: str) -> bool:
        """Whether ``rel`` exists."""
        return self.resolve(rel).exists()

    def read_text(self, rel: str) -> str:
        """A file's text (``FileNotFoundError`` when missing)."""
        return self.resolve(rel).read_text()

    def write_text(self, rel: str, content: str) -> None:
        """Replace a file's text, creating it (and its folders) if needed."""
        p = self.resolve(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)

    def files(self) -> list[str]:
        """Every file, relative to the workspace, sorted."""
        return sorted(str(p.relative_to(self.path)) for p in self.path.rglob("*") if p.is_file())

    async def run(self, command: str, timeout: float = 120.0) -> tuple[int, str]:
        """Run a shell command in the workspace: ``(exit code, stdout+stderr)``."""
        proc = await asyncio.create_subprocess_shell(
            command, cwd=str(self.path), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except asyncio.TimeoutError:
            proc.kill()
            out, _ = await proc.communicate()
            return -1, out.decode(errors="replace") + f"\ntimed out after {timeout:.0f}s"
        return proc.returncode if proc.returncode is not None else -1, out.decode(errors="replace")


class DirectoryWorkspace:
    """A resource driver whose workspaces are directories (see :mod:`rebuno.testing`).

    Args:
        root: Where workspaces, snapshots and pause markers live. Workers that may
            reopen each other's workspaces must see the same ``root``.
        seed: A directory copied into every fresh workspace (like a fresh checkout);
            default: fresh workspaces are empty.
        coverage_reuse: Passed to the kernel: ``True`` says only steps that declare
            the workspace change it.

    The binding is ``{"dir": "<name>"}`` and a checkpoint reference is the snapshot's
    name. ``open`` raises :class:`~rebuno.errors.ResourceUnavailable` when the
    directory is gone and ``create`` raises
    :class:`~rebuno.errors.CheckpointUnavailable` when the snapshot is, so the
    execution fails instead of running in an empty directory. ``configuration`` is
    ``{"root": ..., "seed": ...}`` (no credentials).
    """

    driver_id = "rebuno.directory"

    def __init__(self, root: str | os.PathLike[str], *, seed: str | os.PathLike[str] | None = None,
                 coverage_reuse: bool = False):
        self.root = Path(root).resolve()
        self.seed = Path(seed).resolve() if seed is not None else None
        self.coverage_reuse = coverage_reuse
        self.configuration: dict[str, Any] = {"root": str(self.root)}
        if self.seed is not None:
            self.configuration["seed"] = str(self.seed)

    @property
    def workspaces(self) -> Path:
        """The folder holding the live workspaces."""
        return self.root / "workspaces"

    @property
    def snapshots(self) -> Path:
        """The folder holding the checkpoints."""
        return self.root / "snapshots"

    def workspace_path(self, binding: Any) -> Path:
        """The directory a binding names (``ValueError`` for a malformed binding)."""
        name = binding.get("dir") if isinstance(binding, dict) else None
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(f"not a directory workspace binding: {binding!r}")
        return self.workspaces / name

    def snapshot_path(self, checkpoint_ref: str) -> Path:
        """The directory of a checkpoint (``ValueError`` for a malformed reference)."""
        if not isinstance(checkpoint_ref, str) or not _NAME_RE.match(checkpoint_ref):
            raise ValueError(f"not a directory checkpoint reference: {checkpoint_ref!r}")
        return self.snapshots / checkpoint_ref

    def create(self, checkpoint_ref: str | None = None) -> tuple[DirectoryHandle, dict[str, str]]:
        """A new workspace: a copy of the snapshot ``checkpoint_ref``, else of ``seed``,
        else empty."""
        name = f"ws-{uuid.uuid4().hex[:12]}"
        dest = self.workspaces / name
        self.workspaces.mkdir(parents=True, exist_ok=True)
        if checkpoint_ref is not None:
            src = self.snapshot_path(checkpoint_ref)
            if not src.is_dir():
                raise CheckpointUnavailable(f"snapshot {checkpoint_ref} does not exist ({src})")
            shutil.copytree(src, dest, symlinks=True)
        elif self.seed is not None:
            shutil.copytree(self.seed, dest, symlinks=True)
        else:
            dest.mkdir()
        return DirectoryHandle(dest, name), {"dir": name}

    def open(self, binding: Any) -> DirectoryHandle:
        """Reopen the workspace ``binding`` names."""
        path = self.workspace_path(binding)
        if not path.is_dir():
            raise ResourceUnavailable(f"workspace directory {path} does not exist")
        return DirectoryHandle(path, path.name)

    def checkpoint(self, handle: DirectoryHandle) -> str:
        """Copy the workspace to a new snapshot; return its name."""
        ref = f"cp-{uuid.uuid4().hex[:12]}"
        self.snapshots.mkdir(parents=True, exist_ok=True)
        tmp = self.snapshots / f".tmp-{ref}"
        shutil.copytree(handle.path, tmp, symlinks=True)
        os.rename(tmp, self.snapshots / ref)  # appears complete or not at all
        return ref

    def pause(self, handle: DirectoryHandle) -> None:
        """Record that the workspace was paused (a directory has nothing to stop)."""
        marks = self.root / "paused"
        marks.mkdir(parents=True, exist_ok=True)
        with open(marks / handle.name, "a") as f:
            f.write(f"{time.time():.3f} {os.getpid()}\n")

    def pauses(self, binding_or_handle: Any) -> int:
        """How many times the workspace was paused."""
        name = binding_or_handle.name if isinstance(binding_or_handle, DirectoryHandle) else \
            self.workspace_path(binding_or_handle).name
        p = self.root / "paused" / name
        return len(p.read_text().splitlines()) if p.exists() else 0
