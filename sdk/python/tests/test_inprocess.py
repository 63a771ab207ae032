"""Agents run inside the test process (Agent.serve on a background thread) against the real
kernel: tool loops, wrap_tool, refusals as strings, sync/async tool mixes."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from conftest import inprocess_agent, wait_status

CONFIG = """
agents:
  - name: loop
    lease_timeout_seconds: 1
    policy: |
      default_action: allow
      rules:
        - id: no-rm
          when:
            target: shell
            arguments:
              command: {regex: "^rm "}
          then: {decision: deny, reason: deleting is not allowed}
"""


def test_toolset_runs_model_tool_calls_with_refusals_and_errors(make_kernel):
    from rebuno import Refusal, SyncClient, ToolError, ToolSet, tool, wrap_tool

    k = make_kernel(CONFIG)
    ran: list[str] = []

    @tool
    async def shell(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return f"ran {command}"

    @tool
    def word_count(text: str) -> int:
        """Count words (a synchronous tool)."""
        return len(text.split())

    @tool
    async def broken() -> str:
        """Always fails."""
        raise ValueError("disk on fire")

    async def lookup(args: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"hits": [args["q"]] * args.get("n", 1)}

    search = wrap_tool("search", lookup, description="Search.", to_result=lambda r: r["hits"],
                       args_schema={"type": "object", "properties": {"q": {"type": "string"},
                                                                     "n": {"type": "integer"}}})

    @tool
    async def outer(path: str) -> str:
        """A tool that calls another tool."""
        return "outer:" + await shell(f"cat {path}")

    tools = ToolSet([shell, word_count, broken, search, outer])

    def call(i: int, name: str, args: str) -> dict[str, Any]:
        return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": args}}

    async def handler(task: str) -> dict[str, Any]:
        msgs = await tools.run([
            call(0, "shell", '{"command": "ls -la"}'),
            call(1, "shell", '{"command": "rm -rf /"}'),
            call(2, "word_count", '{"text": "a b c"}'),
            call(3, "broken", "{}"),
            call(4, "nope", "{}"),
            call(5, "shell", '{"cmd": "ls"}'),
            call(6, "search", '{"q": "x", "n": 2}'),
            call(7, "outer", '{"path": "README"}'),
            call(8, "shell", "not json"),
        ])
        direct = await shell("rm -rf /tmp/x")
        try:
            await broken()
            broke = None
        except ToolError as e:
            broke = [e.tool_id, e.message, bool(e.step_id)]
        return {"contents": [m["content"] for m in msgs], "ids": [m["tool_call_id"] for m in msgs],
                "direct_is_refusal": isinstance(direct, Refusal), "direct": direct, "broke": broke}

    with inprocess_agent(k.url, "loop", handler), SyncClient(k.url) as c:
        ex = c.create("loop", {"task": "go"})
        done = wait_status(c, ex.id)
        assert done.status == "completed", done
        out = done.output
        contents = out["contents"]
        assert contents[0] == "ran ls -la"
        assert contents[1] == "shell not allowed. reason: deleting is not allowed"
        assert contents[2] == "3"
        assert contents[3] == "error: disk on fire"
        assert contents[4].startswith("error: unknown tool 'nope'")
        assert contents[5].startswith("error: tool 'shell':") and "command" in contents[5]
        assert contents[6] == '["x", "x"]'
        assert contents[7] == "outer:ran cat README"
        assert contents[8].startswith("error: ")
        assert out["ids"] == [f"c{i}" for i in range(9)]
        assert out["direct_is_refusal"] and out["direct"] == "shell not allowed. reason: deleting is not allowed"
        assert out["broke"] == ["broken", "disk on fire", True]
        assert ran == ["ls -la", "cat README"]
        steps = c.steps(ex.id)
        assert [(s.target, s.status) for s in steps] == [
            ("shell", "succeeded"), ("shell", "denied"), ("word_count", "succeeded"), ("broken", "failed"),
            ("search", "succeeded"), ("outer", "succeeded"), ("shell", "succeeded"), ("shell", "denied"),
            ("broken", "failed")]
        assert steps[4].args == {"q": "x", "n": 2} and steps[4].result == ["x", "x"]


def test_two_dispatches_in_one_process_replay_identically(make_kernel):
    """A handler that loses its lease mid-run (cancelled by the test) is resumed by replay."""
    from rebuno import SyncClient, execution, step, tool

    k = make_kernel(CONFIG)
    calls: list[str] = []
    gate = threading.Event()

    @tool
    async def remember(x: int) -> int:
        calls.append(f"remember{x}")
        return x * 2

    async def handler(task: str) -> dict[str, Any]:
        a = await remember(1)
        n = await step("now", lambda: len(calls))
        if execution().dispatch_attempt == 1:
            execution().superseded = True  # behave as if another worker took over
            gate.set()
            await asyncio.sleep(30)
        return {"a": a, "n": n, "attempt": execution().dispatch_attempt}

    with inprocess_agent(k.url, "loop", handler, grace_period=0.2), SyncClient(k.url) as c:
        ex = c.create("loop", {"task": "x"})
        assert gate.wait(10)
        done = wait_status(c, ex.id, timeout=15)
        assert done.status == "completed", done
        assert done.output == {"a": 2, "n": 1, "attempt": 2}
        assert calls == ["remember1"]


def test_graceful_stop_cancels_after_the_grace_period_without_failing(make_kernel):
    from rebuno import SyncClient

    k = make_kernel(CONFIG)
    entered = threading.Event()

    async def handler(task: str) -> str:
        entered.set()
        await asyncio.sleep(60)
        return "never"

    with SyncClient(k.url) as c:
        with inprocess_agent(k.url, "loop", handler, grace_period=0.3):
            ex = c.create("loop", {"task": "x"})
            assert entered.wait(10)
        # stopped: the execution was neither completed nor failed; its lease expires
        assert c.get(ex.id).status == "running"
