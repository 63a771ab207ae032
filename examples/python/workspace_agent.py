"""An agent whose tools work in a workspace resource, with checkpoints, sessions and forks.

    build/rebuno dev --config examples/python/rebuno.yaml
    PYTHONPATH=sdk/python python3 examples/python/workspace_agent.py
    build/rebuno exec create workspace '{"actions": [
        {"tool": "write_file", "args": {"path": "notes.txt", "content": "one\\n"}},
        {"tool": "shell", "args": {"command": "echo two >> notes.txt"}},
        {"tool": "read_file", "args": {"path": "notes.txt"}}]}' --session demo
    build/rebuno exec fork-points <id>
    build/rebuno exec fork <id> --at <seq> --session demo-fork

The workspace is a directory (``rebuno.testing.DirectoryWorkspace``, under
``$WORKSPACE_ROOT``, default ``./.rebuno-workspaces``): a real resource driver that needs
no sandbox. ``shell`` and ``write_file`` declare that they change it; ``read_file``
declares nothing. With ``CheckpointPolicy(every_steps=2)`` the SDK copies the directory to
a snapshot when the workspace is created, after every 2nd ``shell``/``write_file`` call,
and on completion. A re-dispatch or the next turn of the session reopens the same
directory; a fork starts from a copy of the snapshot that covers the fork point (or the
newest earlier one). ``$CHECKPOINT_EVERY=0`` turns checkpoints off: forks then start from
an empty directory.

Input: ``{"actions": [{"tool": ..., "args": {...}}, ...]}`` runs the tool calls in order.
With ``LLM_BASE_URL`` and ``LLM_MODEL`` set (any OpenAI-compatible server),
``{"task": "..."}`` lets a model use the tools instead; the conversation is kept in the
session's state, so the next turn continues it.
"""

import contextvars
import os

from rebuno import Agent, Blocked, ChatClient, CheckpointPolicy, Result, ToolSet, execution, previous, resource, tool
from rebuno.testing import DirectoryWorkspace

DRIVER = DirectoryWorkspace(os.environ.get("WORKSPACE_ROOT", ".rebuno-workspaces"))
EVERY = int(os.environ.get("CHECKPOINT_EVERY", "2"))

# The current execution's workspace. A context variable (not a global) because the agent
# runs several executions at once; tool bodies run in their handler's context.
_workspace: contextvars.ContextVar = contextvars.ContextVar("workspace")


@tool("shell", resources=["workspace"])
async def shell(command: str) -> str:
    """Run a shell command in the workspace and return its exit code and output.

    Args:
        command: One shell command line.
    """
    code, output = await _workspace.get().run(command, timeout=120)
    return f"exit code {code}\n{output}"[-10000:]


@tool("read_file")
async def read_file(path: str) -> str:
    """Return a file's contents.

    Args:
        path: Relative to the workspace.
    """
    ws = _workspace.get()
    return ws.read_text(path) if ws.exists(path) else f"{path} does not exist"


@tool("write_file", resources=["workspace"])
async def write_file(path: str, content: str) -> str:
    """Replace a file's contents, creating it if needed.

    Args:
        path: Relative to the workspace.
        content: The new text.
    """
    _workspace.get().write_text(path, content)
    return f"wrote {path}"


TOOLS = ToolSet([shell, read_file, write_file])


async def process(actions: list[dict] | None = None, task: str | None = None) -> Result:
    """Run ``actions`` (or let a model work on ``task``) in the session's workspace."""
    workspace = await resource("workspace", driver=DRIVER,
                               checkpoints=CheckpointPolicy(every_steps=EVERY) if EVERY > 0 else None)
    _workspace.set(workspace)
    prior = await previous() or {}
    results: list = []
    messages = list(prior.get("messages") or [])
    finished = False
    try:
        if task:
            if not messages:
                messages = [{"role": "system", "content": "You work in a project folder through the shell, "
                                                          "read_file and write_file tools. Be brief."}]
            messages = await ChatClient().run_tools([*messages, {"role": "user", "content": task}], TOOLS)
            results.append(messages[-1].get("content"))
        for action in actions or []:
            results.append(await TOOLS.call(action["tool"], action.get("args") or {}))
        finished = True
    finally:
        # Stop the workspace when the work is done or waits for an approval.
        if finished or isinstance(execution().suspension, Blocked):
            await workspace.pause()
    return Result(output={"results": results, "files": workspace.files(), "workspace": workspace.name},
                  state={"messages": messages, "turns": int(prior.get("turns") or 0) + 1})


if __name__ == "__main__":
    Agent("workspace").run(process)
