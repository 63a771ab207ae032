"""The coding agents' tools, shared by examples/coding-agent (agent.py) and
examples/coding-agent-e2b (agent.py): ``shell``, ``read_file`` and ``write_file`` run in
the current execution's sandbox, in its checkout of the repository (``WORKDIR``);
``open_pr`` calls the forge's API from the agent's process, outside the sandbox. Also the
forge's token and the network rule that has the egress proxy set it on the git host's
requests, so the token never enters a sandbox.

An agent says which sandbox and branch the current execution works on with :func:`use`
(a context variable, since an agent runs several executions at once and tool bodies run
in their handler's context).
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import json
import os
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from rebuno import ToolSet, tool
from rebuno.sandbox import NetworkPolicy, NetworkPolicyRule, NetworkPolicyTransform, SandboxPathNotFoundError

WORKDIR = "/root/repo"


@dataclass(frozen=True)
class Forge:
    """The forge: ``repo`` (``owner/name``), its git ``host`` as the sandbox sees it, its
    API as this process reaches it (``api_url``) and the CA file that verifies it."""

    repo: str
    host: str
    api_url: str
    ca: str | None = None

    def token(self) -> str:
        """The token this worker holds now (a token file is read again each time, so a
        rotated token reaches the next sandbox that is created or reopened)."""
        path = os.environ.get("FORGE_TOKEN_FILE")
        if path:
            with open(path, encoding="utf-8") as f:
                return f.read().strip()
        token = os.environ.get("FORGE_TOKEN") or os.environ.get("GITHUB_TOKEN")
        if not token:
            raise RuntimeError("set FORGE_TOKEN (or GITHUB_TOKEN, or FORGE_TOKEN_FILE)")
        return token

    def network_policy(self) -> NetworkPolicy:
        """The forge's git host only, its Authorization header set by the egress proxy."""
        credentials = base64.b64encode(f"x-access-token:{self.token()}".encode()).decode()
        return NetworkPolicy.custom({
            self.host: [NetworkPolicyRule(transform=[
                NetworkPolicyTransform(headers={"Authorization": f"Basic {credentials}"})])],
        })


_current: contextvars.ContextVar[tuple[Any, str, Forge]] = contextvars.ContextVar("coding_agent_sandbox")


def use(sandbox: Any, branch: str, forge: Forge) -> None:
    """The current execution works in ``sandbox`` (a sandbox or workspace handle: its
    ``run_command`` and ``fs``) on ``branch``, for ``forge``."""
    _current.set((sandbox, branch, forge))


@tool("shell", resources=["workspace"])
async def shell(command: str) -> str:
    """Run a shell command in the repository and return its exit code and output.

    Args:
        command: A bash command line, run in the repository's root.
    """
    result = await _current.get()[0].run_command("bash", ["-c", command], cwd=WORKDIR, kill_after=120,
                                                 capture_output=True)
    return f"exit code {result.returncode}\n{result.stdout}{result.stderr}"[-10000:]


@tool("read_file")
async def read_file(path: str) -> str:
    """Return a file's contents. The path is relative to the repository root.

    Args:
        path: The file, relative to the repository root.
    """
    try:
        return await _current.get()[0].fs.read_text(f"{WORKDIR}/{path}")
    except SandboxPathNotFoundError:
        return f"{path} does not exist"


@tool("write_file", resources=["workspace"])
async def write_file(path: str, content: str) -> str:
    """Replace a file's contents, creating it if needed. The path is relative to the repository root.

    Args:
        path: The file, relative to the repository root.
        content: The whole new contents.
    """
    await _current.get()[0].fs.write_text(f"{WORKDIR}/{path}", content)
    return f"wrote {path}"


@tool("open_pr", idempotency="at_most_once")
async def open_pr(title: str, body: str) -> str:
    """Open a pull request from the pushed branch.

    Args:
        title: The pull request's title.
        body: Its description.
    """
    _, branch, forge = _current.get()
    req = urllib.request.Request(
        f"{forge.api_url}/api/repos/{forge.repo}/pulls", method="POST",
        data=json.dumps({"title": title, "body": body, "head": branch, "base": "main"}).encode(),
        headers={"Authorization": f"Bearer {forge.token()}", "Content-Type": "application/json"})
    ctx = ssl.create_default_context(cafile=forge.ca)

    def send() -> tuple[int, dict]:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return resp.status, json.loads(resp.read())

    try:
        status, pr = await asyncio.to_thread(send)
    except urllib.error.HTTPError as e:
        return f"error: the forge answered {e.code}: {e.read().decode(errors='replace')[:300]}"
    verb = "opened" if status == 201 else "updated"
    return f"pull request #{pr['number']} {verb}: {pr['url']}"


TOOLS = ToolSet([shell, read_file, write_file, open_pr])
