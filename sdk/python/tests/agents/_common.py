"""Shared bits of the test agents: a work folder for side-effect logs and markers."""

import asyncio
import os
from pathlib import Path

from rebuno import Agent

WORK = Path(os.environ.get("WORKDIR", "."))


def effect(name: str) -> None:
    """Append one line to the on-disk side-effect log (what really ran, across processes)."""
    with open(WORK / "effects.log", "a") as f:
        f.write(f"{name} {os.getpid()}\n")


def effects() -> list[str]:
    """The names in the side-effect log."""
    p = WORK / "effects.log"
    return [line.split()[0] for line in p.read_text().splitlines()] if p.exists() else []


def note(name: str, text: str) -> None:
    """Append a line to WORK/<name>."""
    with open(WORK / name, "a") as f:
        f.write(text + "\n")


async def wait_go(marker: str, go: str = "go", timeout: float = 30.0) -> None:
    """Touch started-<marker>-<pid>, then wait until WORK/<go> exists."""
    (WORK / f"started-{marker}-{os.getpid()}").touch()
    for _ in range(int(timeout / 0.02)):
        if (WORK / go).exists():
            return
        await asyncio.sleep(0.02)
    raise TimeoutError(f"{go} never appeared")


def run(default_name: str, process, **kw) -> None:
    """Run the agent named $AGENT_NAME (or default_name)."""
    Agent(os.environ.get("AGENT_NAME", default_name),
          concurrency=int(os.environ.get("CONCURRENCY", "2")),
          grace_period=float(os.environ.get("GRACE", "10")),
          claim_wait=5, **kw).run(process)
