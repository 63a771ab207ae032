"""Concurrency agent: each execution waits until $EXPECT executions have arrived."""

import asyncio
import os

from _common import WORK, run

from rebuno import execution, tool


@tool
async def arrive(tag: str) -> int:
    """Arrive at the barrier and wait for the others."""
    (WORK / f"arrived-{execution().id}").touch()
    want = int(os.environ.get("EXPECT", "3"))
    for _ in range(500):
        n = len(list(WORK.glob("arrived-*")))
        if n >= want:
            return n
        await asyncio.sleep(0.02)
    raise TimeoutError("the others never arrived")


async def process(tag: str) -> dict:
    return {"seen": await arrive(tag)}


if __name__ == "__main__":
    run("barrier", process)
