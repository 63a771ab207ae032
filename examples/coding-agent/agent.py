#!/usr/bin/env python3
"""The coding agent of the demo: a model loop in a rebuno agent, its tools in a sandbox.

``shell``, ``read_file`` and ``write_file`` run in a sandbox that holds a checkout of the
repository (the ``workspace`` resource, :class:`rebuno.sandbox.SandboxResource`);
``open_pr`` calls the forge's API from here, outside the sandbox (the tools are
``sandbox_tools.py``, shared with ../coding-agent-e2b). Every tool call and
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

import os

from rebuno import Agent, Blocked, ChatClient, CheckpointPolicy, Result, execution, previous, resource
from rebuno.sandbox import SandboxResource

import sandbox_tools
from sandbox_tools import TOOLS, WORKDIR, Forge

FORGE_HOST = os.environ.get("FORGE_HOST", "github.local")
FORGE = Forge(repo=os.environ.get("REPO", "acme/calc"), host=FORGE_HOST,
              api_url=os.environ.get("FORGE_API_URL", f"https://{FORGE_HOST}"),
              ca=os.environ.get("FORGE_CA") or None)
EVERY = int(os.environ.get("CHECKPOINT_EVERY", "5"))
SYSTEM = (f"You are a coding agent working in a git checkout of {FORGE.repo}. Use the shell, read_file "
          "and write_file tools; paths are relative to the repository root. Commit your changes on the "
          "checked-out branch and push it, then open a pull request with open_pr.")

# The forge's git host only, with the credential set by the egress proxy (sandbox_tools).
DRIVER = SandboxResource(repo_url=f"https://{FORGE_HOST}/{FORGE.repo}.git", workdir=WORKDIR,
                         network_policy=FORGE.network_policy)


async def process(task: str) -> Result:
    """Work on ``task`` in the session's workspace; the conversation carries over."""
    workspace = await resource("workspace", driver=DRIVER,
                               checkpoints=CheckpointPolicy(every_steps=EVERY) if EVERY > 0 else None)
    sandbox_tools.use(workspace, workspace.branch, FORGE)
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
