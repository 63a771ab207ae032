"""A synchronous handler with synchronous tools, an async tool and step()."""

import asyncio
import threading

from _common import effect, run

from rebuno import execution, step, tool


@tool
def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    effect("add")
    return a + b


@tool
async def double(x: int) -> dict:
    """An async tool called from the synchronous handler: it runs on the agent's loop."""
    await asyncio.sleep(0)
    effect("double")
    return {"value": 2 * x, "on_loop": threading.current_thread() is threading.main_thread()}


def load(key: str) -> dict:
    effect("load")
    return {"key": key, "value": 42, "thread": threading.current_thread().name != "MainThread"}


def process(n: int) -> dict:
    total = add(n, 2)
    doubled = double(total)
    data = step("load", load, {"key": "k"})
    return {"total": total, "doubled": doubled, "data": data, "id": execution().id,
            "handler_thread": threading.current_thread() is not threading.main_thread()}


if __name__ == "__main__":
    run("syncy", process)
