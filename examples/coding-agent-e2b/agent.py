#!/usr/bin/env python3
"""The coding agent of the E2B document (../shared/spec 001), as written there, with
``rebuno.sandbox`` in the place of its ``e2b`` calls, one for one.

The model loop runs in this rebuno agent; ``shell``, ``read_file`` and ``write_file`` run in
a sandbox that holds a checkout of the repository; ``open_pr`` calls the forge's API from
here (the tools are ../coding-agent/sandbox_tools.py, the demo's). The document's shape,
kept step by step:

- the session's sandbox is found by metadata (or created) inside ``step("find_sandbox")``,
  so a re-dispatch replays the recorded id;
- every dispatch reconnects to it (``connect``: resume), and sets the network rule that
  injects the forge token at the egress proxy on every connect, so the sandbox never holds
  the token and a resumed one gets the token this worker holds now;
- the session is the input's, or derived from the execution id (``execution().id[-12:]``);
- the conversation is loaded and saved as steps (files in ``sessions/`` beside the agent);
- the sandbox is paused when a call waits for approval (``Blocked``) and when the run ends;
- ``open_pr`` is ``at_most_once`` and the policy holds it for approval.

=========================  ==========================================  ============================================
001 (``e2b``)              here (``rebuno.sandbox``)                   note
=========================  ==========================================  ============================================
``AsyncSandbox.list(       ``client.list_sandboxes(metadata=...,       a stopped sandbox (after a daemon restart) is
SandboxQuery(...))``       state=[running, paused, stopped])``         found too: resuming it keeps its files
``AsyncSandbox.create(     ``client.create_sandbox(timeout=600,
timeout=600, metadata,     metadata=..., on_timeout="pause")``
lifecycle=pause)``
``AsyncSandbox.connect(    ``client.get_sandbox(id=...)`` +            a missing sandbox raises, so the run fails
id, timeout=600)``         ``resume()`` + ``update(timeout=600)``      rather than going on in an empty one
``sandbox.update_network(  ``sandbox.update(network_policy=...)``      header transform at the egress proxy
{"rules": ...})``
``sandbox.files.read /     ``sandbox.fs.read_text / write_text``
write``
``sandbox.commands.run``   ``sandbox.run_command("bash", ["-c", ...])``
``sandbox.pause()``        ``sandbox.pause()``                         frozen, memory kept (docs/e2b.md)
=========================  ==========================================  ============================================

Code written for E2B's own SDK runs against this machine unchanged through sandboxd's
E2B-compatible endpoint instead (docs/e2b.md); the Python ``e2b`` package is not installed
here, so this example speaks ``/v1``.

Environment: ``REBUNO_URL``, ``REBUNO_SANDBOX_URL``, ``LLM_BASE_URL``/``LLM_MODEL``/
``LLM_API_KEY``, ``REPO`` (``owner/name``), ``FORGE_HOST`` (the git host as the sandbox
sees it), ``FORGE_API_URL``, ``FORGE_CA``, ``FORGE_TOKEN`` or ``FORGE_TOKEN_FILE``,
``SESSIONS_DIR`` (default ``sessions/`` beside this file).

Input: ``{"task": "...", "session": "..."?}``; output ``{"answer", "session", "sandbox",
"branch"}``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from rebuno import Agent, Blocked, ChatClient, execution, step
from rebuno.sandbox import SandboxClient

# the tools and the forge's network rule are the coding-agent demo's (one copy of them)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "coding-agent"))
import sandbox_tools  # noqa: E402
from sandbox_tools import TOOLS, WORKDIR, Forge  # noqa: E402

FORGE_HOST = os.environ.get("FORGE_HOST", "github.com")
FORGE = Forge(repo=os.environ.get("REPO", "acme/calc"), host=FORGE_HOST,
              api_url=os.environ.get("FORGE_API_URL", f"https://api.{FORGE_HOST}"),
              ca=os.environ.get("FORGE_CA") or None)
SESSIONS = Path(os.environ.get("SESSIONS_DIR") or Path(__file__).resolve().parent / "sessions")
TIMEOUT = 600  # seconds, as 001's create and connect

_client: SandboxClient | None = None


def sandboxes() -> SandboxClient:
    """The sandbox client ($REBUNO_SANDBOX_URL; sandboxd's local token is found as the CLI
    finds it), made on first use, on the agent's loop."""
    global _client
    if _client is None:
        _client = SandboxClient()
    return _client


# ---------------------------------------------------------------- find the sandbox

async def find_sandbox(session: str) -> str:
    found = await sandboxes().list_sandboxes(metadata={"session": session},
                                        state=["running", "paused", "stopped"], limit=1)
    if found:
        return found[0].id
    sandbox = await sandboxes().create_sandbox(timeout=TIMEOUT, metadata={"session": session},
                                          on_timeout="pause", destroy=False,
                                          network_policy=FORGE.network_policy())
    return sandbox.id


async def connect(sandbox_id: str, branch: str):
    """001's ``AsyncSandbox.connect(sandbox_id, timeout=600)`` and ``update_network`` (the
    forge's git host, its Authorization header set by the egress proxy, outside the
    sandbox): resume it, give it the token held now, and make sure it holds the checkout
    on the branch."""
    sandbox = await sandboxes().get_sandbox(id=sandbox_id)
    await sandbox.resume()
    await sandbox.update(timeout=TIMEOUT, network_policy=FORGE.network_policy())
    if not await sandbox.fs.exists(f"{WORKDIR}/.git"):
        # a new sandbox (or one whose first clone did not finish): clone, then the branch
        await sandbox.run_command("rm", ["-rf", WORKDIR])
        r = await sandbox.run_command("git", ["clone", "-q", f"https://{FORGE_HOST}/{FORGE.repo}.git", WORKDIR],
                                      capture_output=True, kill_after=120)
        if r.returncode != 0:
            raise RuntimeError(f"git clone failed: {r.stderr}")
        await sandbox.run_command("git", ["checkout", "-q", "-B", branch], cwd=WORKDIR)
        await sandbox.run_command("git", ["config", "user.email", "agent@rebuno.local"], cwd=WORKDIR)
        await sandbox.run_command("git", ["config", "user.name", "rebuno agent"], cwd=WORKDIR)
    return sandbox


# ---------------------------------------------------------------- the conversation

def load_conversation(session: str) -> list:
    try:
        return json.loads((SESSIONS / f"{session}.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []


def save_conversation(session: str, messages: list) -> str:
    SESSIONS.mkdir(parents=True, exist_ok=True)
    tmp = SESSIONS / f".{session}.json.tmp"
    tmp.write_text(json.dumps(messages), encoding="utf-8")
    tmp.replace(SESSIONS / f"{session}.json")
    return "saved"


def system_prompt(branch: str) -> str:
    return (f"You are a coding agent working in a git checkout of {FORGE.repo}. Use the shell, read_file and "
            "write_file tools; paths are relative to the repository root. Commit your changes on the "
            "branch below and push it, then open a pull request with open_pr.\n"
            f"branch: {branch}")


# ---------------------------------------------------------------- the handler

async def process(task: str, session: str | None = None) -> dict:
    session = session or execution().id[-12:]
    branch = f"rebuno/{session}"
    sandbox_id = await step("find_sandbox", find_sandbox, {"session": session})
    sandbox = await connect(sandbox_id, branch)
    sandbox_tools.use(sandbox, branch, FORGE)
    history = await step("load_conversation", load_conversation, {"session": session})
    history = history or [{"role": "system", "content": system_prompt(branch)}]
    result = None
    try:
        result = await ChatClient().run_tools([*history, {"role": "user", "content": task}], TOOLS)
    finally:
        if result is not None or isinstance(execution().suspension, Blocked):
            await sandbox.pause()
    await step("save_conversation", save_conversation, {"session": session, "messages": result})
    return {"answer": result[-1].get("content"), "session": session, "sandbox": sandbox_id,
            "branch": branch}


if __name__ == "__main__":
    Agent(os.environ.get("AGENT_NAME", "e2b")).run(process)
