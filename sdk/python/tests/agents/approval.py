"""Approval agent: `deploy` needs approval by policy; the handler records what
execution().suspension said at the end of every dispatch."""

import os

from _common import effect, note, run

from rebuno import Refusal, execution, tool


@tool
async def greet(name: str) -> str:
    """Say hi."""
    effect("greet")
    return f"hi {name}"


@tool("deploy", idempotency="at_most_once")
async def deploy(env: str) -> str:
    """Deploy to env."""
    effect("deploy")
    return f"deployed to {env}"


async def process(env: str, swallow: bool = False) -> dict:
    await greet(env)
    result = None
    try:
        if swallow:
            try:  # like an agent framework that catches every exception in its loop
                result = await deploy(env)
            except Exception as e:  # noqa: BLE001
                result = f"swallowed {type(e).__name__}"
        else:
            result = await deploy(env)
    finally:
        s = execution().suspension
        note("suspensions.log", f"{execution().dispatch_id} {type(s).__name__ if s else None} {os.getpid()}")
    if isinstance(result, Refusal):
        return {"deployed": False, "refusal": str(result), "reason": result.reason, "rule": result.rule_id}
    return {"deployed": True, "result": result}


if __name__ == "__main__":
    run("approver", process)
