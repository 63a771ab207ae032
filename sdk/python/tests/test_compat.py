"""The upstream SDK's names (reference §10) against the real kernel: rebuno.mcp tools in
agent runs, the Client's upstream method and argument names, Agent's webhook-era
arguments, StepIDMismatch."""

from __future__ import annotations

import asyncio
import logging
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import inprocess_agent, wait_status

CONFIG = """
agents:
  - name: mcp
    lease_timeout_seconds: 1
    policy: |
      default_action: allow
      rules:
        - id: no-delete
          when: {target: gh_delete_repo}
          then: {decision: deny, reason: deleting repositories is not allowed}
  - name: app
    lease_timeout_seconds: 1
    policy: |
      default_action: allow
      rules:
        - id: gate
          when: {target: risky}
          then: {decision: require_approval, reason: risky things need a person}
"""

SEARCH_SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                 "required": ["query"]}


class FakeGitHub:
    """What an MCP client session offers: listed tools and an async call_tool."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.tools = [
            {"name": "search", "description": "Search issues.", "inputSchema": SEARCH_SCHEMA},
            {"name": "delete_repo", "description": "Delete a repository.",
             "inputSchema": {"type": "object", "properties": {"repo": {"type": "string"}}, "required": ["repo"]}},
            {"name": "fail", "description": "Always fails.", "inputSchema": {"type": "object", "properties": {}}},
        ]

    async def call_tool(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        self.calls.append((name, args))
        if name == "fail":
            return {"isError": True, "content": [{"type": "text", "text": "rate limit from upstream"}]}
        if name == "search":
            hits = [f"{args['query']}-{i}" for i in range(args.get("limit", 2))]
            return {"content": [{"type": "text", "text": h} for h in hits]}
        return {"content": [{"type": "text", "text": f"deleted {args['repo']}"}]}


def test_mcp_tools_are_durable_policy_checked_steps(make_kernel):
    from rebuno import SyncClient, ToolError, ToolSet
    from rebuno.mcp import wrap_mcp_tools

    k = make_kernel(CONFIG)
    gh = FakeGitHub()
    fs_calls: list[tuple[str, dict[str, Any]]] = []

    def fs_call(name: str, args: dict[str, Any]) -> str:  # a synchronous MCP client
        fs_calls.append((name, args))
        assert threading.current_thread() is not threading.main_thread()
        return f"contents of {args['path']}"

    fs_listing = SimpleNamespace(tools=[SimpleNamespace(
        name="read", description="Read a file.",
        inputSchema={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})])
    gh_tools = wrap_mcp_tools(gh.tools, gh.call_tool, prefix="gh")
    fs_tools = wrap_mcp_tools(fs_listing, fs_call, prefix="fs.")
    tools = ToolSet(gh_tools + fs_tools)
    assert tools.names == ["gh_search", "gh_delete_repo", "gh_fail", "fs.read"]
    assert tools.schemas[0]["function"] == {"name": "gh_search", "description": "Search issues.",
                                            "parameters": SEARCH_SCHEMA}

    def call(i: int, name: str, args: str) -> dict[str, Any]:
        return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": args}}

    async def handler(task: str) -> dict[str, Any]:
        msgs = await tools.run([
            call(0, "gh_search", '{"query": "bug", "limit": null}'),   # null is left out
            call(1, "gh_delete_repo", '{"repo": "acme/calc"}'),        # denied by the policy
            call(2, "gh_fail", "{}"),                                  # isError: the step fails
            call(3, "fs.read", '{"path": "a.txt"}'),
        ])
        direct = await gh_tools[0](query="x", limit=1)
        try:
            await gh_tools[2]()
            failed = None
        except ToolError as e:
            failed = [e.tool_id, e.message]
        return {"contents": [m["content"] for m in msgs], "direct": direct, "failed": failed}

    with inprocess_agent(k.url, "mcp", handler), SyncClient(k.url) as c:
        ex = c.create("mcp", {"task": "go"})
        done = wait_status(c, ex.id)
        assert done.status == "completed", done
        assert done.output == {
            "contents": ["bug-0\nbug-1", "gh_delete_repo not allowed. reason: deleting repositories is not allowed",
                         "error: rate limit from upstream", "contents of a.txt"],
            "direct": "x-0", "failed": ["gh_fail", "rate limit from upstream"]}
        # the denied call never reached the server; MCP names are unprefixed
        assert gh.calls == [("search", {"query": "bug"}), ("fail", {}), ("search", {"query": "x", "limit": 1}),
                            ("fail", {})]
        assert fs_calls == [("read", {"path": "a.txt"})]
        steps = c.steps(ex.id)
        assert [(s.kind, s.target, s.status) for s in steps] == [
            ("tool_call", "gh_search", "succeeded"), ("tool_call", "gh_delete_repo", "denied"),
            ("tool_call", "gh_fail", "failed"), ("tool_call", "fs.read", "succeeded"),
            ("tool_call", "gh_search", "succeeded"), ("tool_call", "gh_fail", "failed")]
        assert steps[0].args == {"query": "bug"} and steps[0].result == "bug-0\nbug-1"
        assert steps[2].error == {"message": "rate limit from upstream", "type": "MCPToolError"}


def test_mcp_tools_from_a_sync_handler_and_replay(make_kernel):
    """MCP tools are async tools: a synchronous handler calls them plainly, and a second
    dispatch replays their results without calling the server."""
    from rebuno import SyncClient, execution
    from rebuno.mcp import wrap_mcp_tool

    k = make_kernel(CONFIG)
    gh = FakeGitHub()
    search = wrap_mcp_tool(gh.tools[0], gh.call_tool, "gh")

    def handler(task: str) -> dict[str, Any]:
        hits = search(query=task)
        ctx = execution()
        if ctx.dispatch_attempt == 1:
            ctx.superseded = True  # behave as if another worker took over: the run resumes by replay
            raise RuntimeError("stop this dispatch")
        return {"hits": hits, "attempt": ctx.dispatch_attempt}

    with inprocess_agent(k.url, "mcp", handler), SyncClient(k.url) as c:
        ex = c.create("mcp", {"task": "crash"})
        done = wait_status(c, ex.id, timeout=20)
        assert done.status == "completed", done
        assert done.output == {"hits": "crash-0\ncrash-1", "attempt": 2}
        assert gh.calls == [("search", {"query": "crash"})]


def test_mcp_descriptor_validation():
    from rebuno.mcp import MCPToolError, flatten_result, tool_id, wrap_mcp_tool

    with pytest.raises(ValueError):
        wrap_mcp_tool({"description": "no name"}, lambda n, a: None)
    assert tool_id("x") == "x" and tool_id("x", "gh") == "gh_x" and tool_id("x", "gh/") == "gh/x"
    assert flatten_result({"content": [{"type": "image", "data": "AA=="}]}) == '{"type": "image", "data": "AA=="}'
    assert flatten_result({"answer": 1}) == {"answer": 1}
    with pytest.raises(MCPToolError):
        flatten_result(SimpleNamespace(content=[], isError=True))


def test_client_upstream_names(make_kernel):
    from rebuno import Client, SyncClient, tool

    k = make_kernel(CONFIG)

    @tool
    async def risky(what: str) -> str:
        return f"did {what}"

    @tool
    async def safe(what: str) -> str:
        return f"safe {what}"

    async def handler(what: str) -> dict[str, Any]:
        return {"a": await safe(what), "b": await risky(what)}

    async def main() -> None:
        async with Client(k.url) as c:
            ex = await c.create("app", {"what": "x"}, agent_version="v7")  # accepted, not sent
            for _ in range(200):
                if (await c.get(ex.id)).status == "blocked":
                    break
                await asyncio.sleep(0.05)
            (appr,) = await c.list_approvals(status="pending")
            assert (await c.get_approval(appr.id)).target == "risky"
            granted = await c.grant_approval(appr.id, decided_by="alice", rationale="fine")
            assert granted.status == "granted" and granted.decided_by == "alice"
            done = await c.wait(ex.id, timeout=15)
            assert done.status == "completed", done
            events = await c.events(ex.id, limit=1000)
            later = await c.events(ex.id, after_seq=3, limit=1000)
            assert [e.seq for e in later] == [e.seq for e in events if e.seq > 3]
            steps = await c.list_steps(ex.id)
            assert [s.target for s in steps] == ["safe", "risky"]
            assert [s.target for s in await c.list_steps(ex.id, status="succeeded")] == ["safe", "risky"]
            assert await c.list_steps(ex.id, status="denied,failed") == []
            assert len(await c.list_steps(ex.id, status="terminal")) == 2
            assert (await c.get_step(ex.id, steps[1].step_id)).approval_id == appr.id

    with inprocess_agent(k.url, "app", handler):
        asyncio.run(main())
        with SyncClient(k.url) as sc:
            ex = sc.create("app", {"what": "y"}, agent_version="v7")
            wait_status(sc, ex.id, "blocked")
            (appr,) = sc.list_approvals(status="pending")
            denied = sc.deny_approval(appr.id, decided_by="bob", rationale="not today")
            assert denied.status == "denied" and denied.decided_by == "bob"
            done = wait_status(sc, ex.id)
            assert done.status == "completed" and done.output["b"] == "risky not allowed. reason: not today"
            assert [s.status for s in sc.list_steps(ex.id, status="terminal")] == ["succeeded", "denied"]
            assert [e.seq for e in sc.events(ex.id, after_seq=2)][0] == 3
            assert sc.get_step(ex.id, sc.list_steps(ex.id)[0].step_id).result == "safe y"
            assert sc.list_approvals(status="") and sc.get_approval(appr.id).status == "denied"


def test_agent_accepts_upstream_arguments(make_kernel, caplog):
    from rebuno import Agent, ConflictError, StepIDMismatch, SyncClient
    from rebuno.errors import error_from_response

    a = Agent("app", kernel_timeout=12.5, secret="s3cret", webhook_path="/hook")
    assert a.timeout == 12.5 and a.kernel_timeout == 12.5 and a.agent_id == "app"
    assert Agent("app", timeout=7).kernel_timeout == 7
    e = error_from_response(409, b'{"error": {"code": "step_id_mismatch", "message": "stale step"}}')
    assert isinstance(e, StepIDMismatch) and isinstance(e, ConflictError) and e.message == "stale step"

    k = make_kernel(CONFIG)

    async def handler(what: str) -> str:
        return f"got {what}"

    with caplog.at_level(logging.INFO, logger="rebuno.agent"):
        with inprocess_agent(k.url, "app", handler, kernel_timeout=10, secret="s3cret", webhook_path="/hook"), \
                SyncClient(k.url) as c:
            ex = c.create("app", {"what": "it"})
            assert wait_status(c, ex.id).output == "got it"
    assert any("secret and webhook_path ignored" in r.getMessage() for r in caplog.records)
