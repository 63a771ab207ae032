"""The smallest rebuno agent: greets through a durable tool.

    build/rebuno dev --config examples/python/rebuno.yaml
    PYTHONPATH=sdk/python python3 examples/python/hello.py
    build/rebuno exec create hello '{"name": "world"}'
"""

from rebuno import Agent, execution, tool


@tool
async def greet(name: str) -> str:
    """Return a greeting for name."""
    return f"hello, {name}"


async def process(name: str = "world") -> dict:
    """Greet ``name``; the greeting is a recorded tool call."""
    greeting = await greet(name)
    return {"greeting": greeting, "execution": execution().id}


if __name__ == "__main__":
    Agent("hello").run(process)
