"""An agent working in a directory workspace resource (rebuno.testing.DirectoryWorkspace).

Input: ``{"writes": [names], "every": N or null, "read": bool, "hold": bool,
"on_completion": bool}``. It registers the workspace (``every: null`` → no checkpoint
policy), writes each name as a file (``write_file`` declares the workspace), optionally
reads each back (``read_file`` declares nothing), optionally runs ``hold`` (declares the
workspace and waits for the test's go-file) and returns what it saw. Every tool body
that really runs appends to WORK/effects.log.
"""

import os

from _common import WORK, effect, run, wait_go

from rebuno import Blocked, CheckpointPolicy, Result, execution, previous, resource, tool
from rebuno.testing import DirectoryWorkspace

DRIVER = DirectoryWorkspace(WORK / "wsroot")
workspace = None  # the current execution's workspace (CONCURRENCY=1)


@tool("write_file", resources=["workspace"])
async def write_file(path: str, content: str) -> str:
    """Replace a file's contents."""
    effect(f"write:{path}")
    workspace.write_text(path, content)
    return f"wrote {path}"


@tool("read_file")
async def read_file(path: str) -> str:
    """Return a file's contents."""
    effect(f"read:{path}")
    return workspace.read_text(path) if workspace.exists(path) else f"{path} does not exist"


@tool("hold", resources=["workspace"])
async def hold_workspace() -> str:
    """Wait for the test's go-file (a long-running change to the workspace)."""
    effect("hold-start")
    await wait_go("hold")
    workspace.write_text("held", "yes")
    effect("hold")
    return "held"


async def process(writes: list[str], every: int | None = 2, read: bool = False, hold: bool = False,
                  on_completion: bool = True) -> Result:
    global workspace
    policy = CheckpointPolicy(every_steps=every, on_completion=on_completion) if every else None
    workspace = await resource("workspace", driver=DRIVER, checkpoints=policy)
    (WORK / f"opened-{os.getpid()}").write_text(workspace.name)
    prior = await previous()
    done = False
    try:
        for name in writes:
            await write_file(name, f"{name}\n")
            if read:
                await read_file(name)
        if hold:
            await hold_workspace()
        done = True
    finally:
        if done or isinstance(execution().suspension, Blocked):
            await workspace.pause()
    return Result(output={"dir": workspace.name, "files": workspace.files(), "prior": prior,
                          "pid": os.getpid(), "attempt": execution().dispatch_attempt},
                  state={"files": workspace.files(), "dir": workspace.name})


if __name__ == "__main__":
    os.environ.setdefault("CONCURRENCY", "1")
    run("ws", process)
