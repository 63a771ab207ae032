"""A synchronous handler with synchronous tools and step()."""

import threading

from _common import effect, run

from rebuno import execution, step, tool


@tool
def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    effect("add")
    return a + b


def load(key: str) -> dict:
    effect("load")
    return {"key": key, "value": 42, "thread": threading.current_thread().name != "MainThread"}


def process(n: int) -> dict:
    total = add(n, 2)
    data = step("load", load, {"key": "k"})
    return {"total": total, "data": data, "id": execution().id}


if __name__ == "__main__":
    run("syncy", process)
