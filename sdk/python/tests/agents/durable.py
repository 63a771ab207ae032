"""Crash-recovery agent: two quick tools, one that waits for a go-file, an at_most_once
tool, and a local step whose random value must replay unchanged."""

import os
import random

from _common import WORK, effect, run, wait_go

from rebuno import IndeterminateError, Refusal, execution, step, tool


@tool
async def fetch(n: int) -> int:
    """Pretend to fetch item n."""
    effect(f"fetch{n}")
    return n * 10


@tool
async def slow(x: str) -> str:
    """Wait for the test's go-file, then finish."""
    await wait_go("slow")
    effect("slow")
    return x.upper()


@tool(idempotency="at_most_once")
async def charge(amount: int) -> str:
    """Charge a card: must never run twice."""
    effect("charge-start")
    await wait_go("charge")
    effect("charge")
    return f"charged {amount}"


async def process(mode: str) -> dict:
    token = await step("pick", lambda: random.randint(0, 10**9))
    (WORK / f"token-{os.getpid()}").write_text(str(token))
    a = await fetch(1)
    b = await fetch(2)
    out = {"a": a, "b": b, "token": token, "pid": os.getpid(), "attempt": execution().dispatch_attempt}
    if mode == "crash":
        out["slow"] = await slow("done")
    elif mode == "at_most_once":
        try:
            out["charge"] = await charge(5)
            out["indeterminate"] = False
        except IndeterminateError as e:
            retry = await charge(5)  # the kernel refuses a retry of an unknown outcome
            out.update(indeterminate=e.indeterminate, message=str(e), retry=retry,
                       retry_is_refusal=isinstance(retry, Refusal),
                       retry_rule=getattr(retry, "rule_id", None))
    return out


if __name__ == "__main__":
    run("durable", process)
