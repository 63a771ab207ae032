#!/usr/bin/env python3
"""The coding agent of the demo: a model loop in a rebuno agent, its tools in a sandbox.

``shell``, ``read_file`` and ``write_file`` run in a sandbox that holds a checkout of the
repository (the ``workspace`` resource, :class:`rebuno.sandbox.SandboxResource`);
``open_pr`` calls the forge's API from here, outside the sandbox. Every tool call and
model call is a step the kernel checks against ``policy.yaml`` and records, so a
re-dispatched run replays them instead of running them again.

The sandbox pushes its branch through the egress proxy, which sets the forge's
``Authorization`` header: the token never enters the sandbox. The rule covers the forge's
git host only, so code in the sandbox cannot open a pull request itself, and ``open_pr``
waits for approval.

Environment (``demo.py`` sets all of it):

======================  ====================================================================
``REBUNO_URL``          the kernel (default ``http://127.0.0.1:8080``)
``REBUNO_SANDBOX_URL``  sandboxd (default ``http://127.0.0.1:8090``)
``LLM_BASE_URL``        any OpenAI-compatible server; ``LLM_MODEL``, ``LLM_API_KEY``
``REPO``                ``owner/name`` on the forge (default ``acme/calc``)
``FORGE_HOST``          the forge's git host as the sandbox sees it (default ``github.local``)
``FORGE_API_URL``       the forge as this process reaches it (``https://127.0.0.1:PORT``)
``FORGE_CA``            the CA file that verifies ``FORGE_API_URL``
``FORGE_TOKEN``         the token (or ``FORGE_TOKEN_FILE``: read again on every use)
``CHECKPOINT_EVERY``    checkpoint after every N-th workspace change (default 5; 0 = none)
======================  ====================================================================

Input: ``{"task": "..."}``. The conversation is the session's state, so the next
execution of the session continues it, in the same sandbox and on the same branch.
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

from rebuno import Agent, Blocked, ChatClient, CheckpointPolicy, Result, ToolSet, execution, previous, resource, tool
from rebuno.sandbox import (
    NetworkPolicy,
    NetworkPolicyRule,
    NetworkPolicyTransform,
    SandboxPathNotFoundError,
    SandboxResource,
)

REPO = os.environ.get("REPO", "acme/calc")
FORGE_HOST = os.environ.get("FORGE_HOST", "github.local")
FORGE_API_URL = os.environ.get("FORGE_API_URL", f"https://{FORGE_HOST}")
FORGE_CA = os.environ.get("FORGE_CA") or None
EVERY = int(os.environ.get("CHECKPOINT_EVERY", "5"))
WORKDIR = "/root/repo"
SYSTEM = (f"You are a coding agent working in a git checkout of {REPO}. Use the shell, read_file and "
          "write_file tools; paths are relative to the repository root. Commit your changes on the "
          "checked-out branch and push it, then open a pull request with open_pr.")


def forge_token() -> str:
    """The token this worker holds now (a token file is read again each time, so a
    rotated token reaches the next sandbox that is created or reopened)."""
    path = os.environ.get("FORGE_TOKEN_FILE")
    if path:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    token = os.environ.get("FORGE_TOKEN")
    if not token:
        raise RuntimeError("set FORGE_TOKEN or FORGE_TOKEN_FILE")
    return token


def network_policy() -> NetworkPolicy:
    """The forge's git host only, with the credential set by the egress proxy."""
    credentials = base64.b64encode(f"x-access-token:{forge_token()}".encode()).decode()
    return NetworkPolicy.custom({
        FORGE_HOST: [NetworkPolicyRule(transform=[
            NetworkPolicyTransform(headers={"Authorization": f"Basic {credentials}"})])],
    })


DRIVER = SandboxResource(repo_url=f"https://{FORGE_HOST}/{REPO}.git", workdir=WORKDIR,
                         network_policy=network_policy)

# The current execution's workspace. A context variable (not a global) because the agent
# runs several executions at once; tool bodies run in their handler's context.
_workspace: contextvars.ContextVar = contextvars.ContextVar("workspace")


@tool("shell", resources=["workspace"])
async def shell(command: str) -> str:
    """Run a shell command in the repository and return its exit code and output.

    Args:
        command: A bash command line, run in the repository's root.
    """
    result = await _workspace.get().run_command("bash", ["-c", command], cwd=WORKDIR, kill_after=120,
                                                capture_output=True)
    return f"exit code {result.returncode}\n{result.stdout}{result.stderr}"[-10000:]


@tool("read_file")
async def read_file(path: str) -> str:
    """Return a file's contents. The path is relative to the repository root.

    Args:
        path: The file, relative to the repository root.
    """
    try:
        return await _workspace.get().fs.read_text(f"{WORKDIR}/{path}")
    except SandboxPathNotFoundError:
        return f"{path} does not exist"


@tool("write_file", resources=["workspace"])
async def write_file(path: str, content: str) -> str:
    """Replace a file's contents, creating it if needed. The path is relative to the repository root.

    Args:
        path: The file, relative to the repository root.
        content: The whole new contents.
    """
    await _workspace.get().fs.write_text(f"{WORKDIR}/{path}", content)
    return f"wrote {path}"


@tool("open_pr", idempotency="at_most_once")
async def open_pr(title: str, body: str) -> str:
    """Open a pull request from the pushed branch.

    Args:
        title: The pull request's title.
        body: Its description.
    """
    branch = _workspace.get().branch
    req = urllib.request.Request(
        f"{FORGE_API_URL}/api/repos/{REPO}/pulls", method="POST",
        data=json.dumps({"title": title, "body": body, "head": branch, "base": "main"}).encode(),
        headers={"Authorization": f"Bearer {forge_token()}", "Content-Type": "application/json"})
    ctx = ssl.create_default_context(cafile=FORGE_CA)

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


async def process(task: str) -> Result:
    """Work on ``task`` in the session's workspace; the conversation carries over."""
    workspace = await resource("workspace", driver=DRIVER,
                               checkpoints=CheckpointPolicy(every_steps=EVERY) if EVERY > 0 else None)
    _workspace.set(workspace)
    prior = await previous() or {}
    history = list(prior.get("messages") or [{"role": "system", "content": SYSTEM}])
    messages = None
    try:
        messages = await ChatClient().run_tools([*history, {"role": "user", "content": task}], TOOLS)
    finally:
        # Stop the sandbox when the loop is done or waits for an approval; files persist.
        if messages is not None or isinstance(execution().suspension, Blocked):
            await workspace.pause()
    return Result(output={"answer": messages[-1].get("content"), "sandbox": workspace.name,
                          "branch": workspace.branch},
                  state={"messages": messages})


if __name__ == "__main__":
    Agent("coding-agent").run(process)
