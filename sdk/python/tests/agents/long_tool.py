"""Tools that run several times the agent's lease: heartbeats must keep the lease."""

import asyncio
import time

from _common import effect, run

from rebuno import execution, tool


@tool
async def long_async(seconds: float) -> str:
    """Sleep on the event loop."""
    await asyncio.sleep(seconds)
    effect("long_async")
    return f"slept {seconds}"


@tool
def long_sync(seconds: float) -> str:
    """Sleep in a worker thread."""
    time.sleep(seconds)
    effect("long_sync")
    return f"slept {seconds}"


async def process(seconds: float) -> dict:
    a = await long_async(seconds)
    s = await long_sync(seconds)
    return {"attempt": execution().dispatch_attempt, "async": a, "sync": s}


if __name__ == "__main__":
    run("longtool", process)
