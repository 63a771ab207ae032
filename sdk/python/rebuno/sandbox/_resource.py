"""SandboxResource: a workspace resource driver (``rebuno.resource``) backed by sandboxes.

A coding agent's tools work in a sandbox that holds a checkout of a repository, while its
model loop runs in the agent. The kernel records which sandbox belongs to an execution
(the *binding*) and the snapshot ids of its checkpoints; sandboxd keeps the files::

    from rebuno import CheckpointPolicy, resource
    from rebuno.sandbox import SandboxResource

    workspace = await resource(
        "workspace",
        driver=SandboxResource(repo_url="https://github.local/acme/calc.git",
                               network_policy=lambda: policy_with_the_token_we_hold_now()),
        checkpoints=CheckpointPolicy(every_steps=5),
    )
    result = await workspace.run_process("bash", ["-c", "make test"], cwd=workspace.workdir,
                                         capture_output=True)

* ``create(checkpoint_ref=None)`` makes a new sandbox with a unique name, from the
  snapshot ``checkpoint_ref`` (a fork) or with a fresh ``git clone`` of ``repo_url`` run
  inside the sandbox (through its network policy), and
  checks out a branch of its own (``<branch_prefix><sandbox name>``), so forks never push
  to each other's branches. The binding is ``{"sandbox": NAME, "branch": BRANCH}``.
* ``open(binding)`` finds that sandbox again (a re-dispatch, or the next turn of a
  session), applies the network policy the worker holds *now* and resumes it; its branch
  is the one recorded. A sandbox that no longer exists fails the execution.
* ``checkpoint(handle)`` takes a snapshot. Unlike Vercel's, ours never stops the sandbox:
  running processes are frozen for the clone only.
* ``pause(handle)`` stops the sandbox (files persist, processes end), or with
  ``pause="freeze"`` freezes its processes instead (memory stays resident).

The network policy is where credentials go: a rule that sets ``Authorization`` on requests
to the forge, applied by the egress proxy, so nothing in the sandbox can read the token.
Pass a callable to have it built on every create and open (a rotated token reaches a
resumed sandbox). It never enters ``configuration``, which the kernel records.
"""

from __future__ import annotations

import inspect
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from rebuno.errors import CheckpointUnavailable
from rebuno.sandbox._aio import Sandbox, SandboxClient
from rebuno.sandbox._errors import SandboxApiError, SandboxNotFoundError
from rebuno.sandbox._models import NetworkPolicy, SandboxStatus, SnapshotSource

_NAME_PREFIX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")
_BRANCH_PREFIX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")

PolicyInput = NetworkPolicy | Callable[[], NetworkPolicy | Awaitable[NetworkPolicy]] | None


class SandboxWorkspace:
    """The handle ``resource()`` gives tools: the :class:`~rebuno.sandbox.Sandbox` (every
    attribute not defined here is the sandbox's: ``run_process``, ``fs``, ``run_command``,
    ...), plus where the checkout is and which branch it is on."""

    def __init__(self, sandbox: Sandbox, *, branch: str, workdir: str):
        self.sandbox = sandbox
        self.branch = branch
        self.workdir = workdir

    @property
    def name(self) -> str:
        """The sandbox's name (what the binding records)."""
        return self.sandbox.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sandbox, name)

    def __repr__(self) -> str:
        return f"<SandboxWorkspace {self.sandbox.name} branch={self.branch} workdir={self.workdir}>"


class SandboxResource:
    """A :class:`rebuno.resource.ResourceDriver` whose resource is a sandbox with a git
    checkout (see the module docstring).

    Args:
        repo_url: What a fresh workspace clones (inside the sandbox, over its network
            policy). ``None`` makes an empty ``workdir`` instead.
        workdir: Where the checkout lives in the sandbox.
        branch_prefix: Each new sandbox checks out ``<branch_prefix><sandbox name>``.
        name_prefix: New sandboxes are named ``<name_prefix>-<8 hex digits>``.
        network_policy: A :class:`NetworkPolicy`, or a callable (plain or async) returning
            one, applied on every create and open. Default: no network at all.
        git_author: ``(name, email)`` set as the checkout's commit identity.
        timeout: Seconds a sandbox session may run before it stops (files stay; ``open``
            resumes it). ``0`` for no limit.
        pause: ``"stop"`` (default: processes end, memory is freed) or ``"freeze"``.
        env: Environment variables of the sandbox (no secrets: they are readable inside).
        client: A :class:`SandboxClient`; default one for ``base_url`` /
            ``$REBUNO_SANDBOX_URL``.
    """

    driver_id = "rebuno-sandbox"

    def __init__(self, *, repo_url: str | None = None, workdir: str = "/root/repo",
                 branch_prefix: str = "rebuno/", name_prefix: str = "ws",
                 network_policy: PolicyInput = None, git_author: tuple[str, str] = ("rebuno agent", "agent@rebuno.local"),
                 timeout: float = 600, pause: Literal["stop", "freeze"] = "stop",
                 env: Mapping[str, str] | None = None, client: SandboxClient | None = None,
                 base_url: str | None = None):
        if not workdir.startswith("/") or "\0" in workdir or "/../" in workdir + "/":
            raise ValueError(f"workdir must be an absolute path without '..', not {workdir!r}")
        if not _BRANCH_PREFIX_RE.match(branch_prefix) or ".." in branch_prefix:
            raise ValueError(f"branch_prefix must be a valid git branch prefix, not {branch_prefix!r}")
        if not _NAME_PREFIX_RE.match(name_prefix):
            raise ValueError(f"name_prefix must be 1..40 of [A-Za-z0-9._-], not {name_prefix!r}")
        if pause not in ("stop", "freeze"):
            raise ValueError(f"pause must be 'stop' or 'freeze', not {pause!r}")
        self.repo_url = repo_url
        self.workdir = workdir
        self.branch_prefix = branch_prefix
        self.name_prefix = name_prefix
        self.git_author = git_author
        self.timeout = timeout
        self.pause_mode = pause
        self.env = dict(env or {})
        self._policy = network_policy
        self._client = client
        self._base_url = base_url

    @property
    def configuration(self) -> dict[str, Any]:
        """What the kernel records and compares on every registration (no credentials)."""
        return {"repo_url": self.repo_url, "workdir": self.workdir, "branch_prefix": self.branch_prefix}

    @property
    def client(self) -> SandboxClient:
        """The :class:`SandboxClient` this driver uses (made on first use)."""
        if self._client is None:
            self._client = SandboxClient(self._base_url)
        return self._client

    async def network_policy(self) -> NetworkPolicy | None:
        """The policy to apply now (the callable is called each time)."""
        p = self._policy
        if callable(p):
            p = p()
            if inspect.isawaitable(p):
                p = await p
        return p

    # --- the driver protocol

    async def create(self, checkpoint_ref: str | None = None) -> tuple[SandboxWorkspace, dict[str, str]]:
        """A new sandbox, from the snapshot ``checkpoint_ref`` or a fresh clone, on a branch
        of its own; returns ``(handle, {"sandbox": NAME, "branch": BRANCH})``. Raises
        :class:`~rebuno.errors.CheckpointUnavailable` when the snapshot is gone."""
        name = f"{self.name_prefix}-{secrets.token_hex(4)}"
        branch = f"{self.branch_prefix}{name}"
        policy = await self.network_policy()
        kwargs: dict[str, Any] = {"name": name, "timeout": self.timeout, "on_timeout": "stop",
                                  "metadata": {"rebuno.workspace": "1", "rebuno.branch": branch}}
        if self.env:
            kwargs["env"] = self.env
        if policy is not None:
            kwargs["network_policy"] = policy
        source = SnapshotSource(snapshot_id=checkpoint_ref) if checkpoint_ref is not None else None
        try:
            box = await self.client.create_sandbox(source=source, **kwargs)
        except SandboxApiError as e:
            if checkpoint_ref is not None and e.status_code == 404:
                raise CheckpointUnavailable(f"snapshot {checkpoint_ref} does not exist") from e
            raise
        try:
            if source is None:
                # a fresh checkout: git runs inside, through the sandbox's network policy
                if self.repo_url is not None:
                    await self._git(box, "clone", "-q", "--", self.repo_url, self.workdir, cwd="/")
                else:
                    await self._git(box, "init", "-q", self.workdir, cwd="/")
            author, email = self.git_author
            await self._git(box, "config", "user.name", author)
            await self._git(box, "config", "user.email", email)
            # -B keeps the working tree: a fork's uncommitted changes stay
            await self._git(box, "checkout", "-q", "-B", branch)
        except BaseException:
            await box.delete()
            raise
        return SandboxWorkspace(box, branch=branch, workdir=self.workdir), {"sandbox": name, "branch": branch}

    async def open(self, binding: Mapping[str, Any]) -> SandboxWorkspace:
        """The sandbox ``binding`` names, with the network policy applied again and resumed.
        Raises :class:`SandboxNotFoundError` when it no longer exists."""
        if not isinstance(binding, Mapping) or not isinstance(binding.get("sandbox"), str):
            raise ValueError(f"not a sandbox workspace binding: {binding!r}")
        try:
            box = await self.client.get_sandbox(binding["sandbox"])
        except SandboxNotFoundError as e:
            raise SandboxNotFoundError(f"sandbox {binding['sandbox']} no longer exists", status_code=404,
                                       code=e.code) from e
        policy = await self.network_policy()
        if policy is not None:
            await box.update(network_policy=policy)
        if box.status != SandboxStatus.RUNNING:
            await box.resume()
        branch = binding.get("branch") or f"{self.branch_prefix}{box.name}"
        return SandboxWorkspace(box, branch=str(branch), workdir=self.workdir)

    async def checkpoint(self, handle: SandboxWorkspace) -> str:
        """A snapshot of the sandbox (which keeps running); returns its id."""
        snap = await handle.sandbox.snapshot()
        return snap.snapshot_id

    async def pause(self, handle: SandboxWorkspace) -> None:
        """Stop the sandbox (``pause="freeze"``: freeze its processes); files persist."""
        box = handle.sandbox
        if self.pause_mode == "freeze":
            await box.refresh()
            if box.status == SandboxStatus.RUNNING:
                await box.pause()
        else:
            await box.stop()

    async def _git(self, box: Sandbox, *args: str, cwd: str | None = None) -> None:
        r = await box.run_command("git", list(args), cwd=cwd or self.workdir, capture_output=True,
                                  kill_after=120)
        if r.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)} failed ({r.returncode}): {(r.stderr or r.stdout or '')[-500:]}")
