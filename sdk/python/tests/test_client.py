"""Client and SyncClient against the real kernel."""

from __future__ import annotations

import asyncio

import pytest

CONFIG = """
agents:
  - name: app
    lease_timeout_seconds: 1
    policy: |
      default_action: allow
      rules:
        - id: gate
          when: {target: risky}
          then: {decision: require_approval, reason: risky things need a person}
"""


def test_sync_client_executions_events_watch_cancel(make_kernel):
    from rebuno import ConflictError, NotFoundError, SyncClient, ValidationError

    k = make_kernel(CONFIG)
    with SyncClient(k.url) as c:
        assert c.health()
        ids = [c.create("app", {"n": i}).id for i in range(3)]
        first = c.get(ids[0])
        assert first.status == "pending" and first.input == {"n": 0} and first.agent == "app"
        assert first.dispatch is not None and first.dispatch.state == "queued"
        page = c.list(agent="app", limit=2)
        assert [e.id for e in page.executions] == ids[::-1][:2] and page.next_cursor
        rest = c.list(agent="app", limit=2, cursor=page.next_cursor)
        assert [e.id for e in rest.executions] == [ids[0]] and rest.next_cursor is None
        events = c.events(ids[0])
        assert [e.type for e in events] == ["execution.created", "dispatch.queued"]
        cancelled = c.cancel(ids[0], "not needed")
        assert cancelled.status == "cancelled" and cancelled.failure_reason == "not needed"
        watched = [e.type for e in c.watch(ids[0])]
        assert watched[-1] == "execution.cancelled" and watched[0] == "execution.created"
        assert [e.type for e in c.watch(ids[0], after=len(watched) - 1)] == ["execution.cancelled"]
        with pytest.raises(ConflictError) as ei:
            c.cancel(ids[0])
        assert ei.value.code == "conflict"  # upstream: cancelling a finished execution is a conflict
        with pytest.raises(NotFoundError):
            c.get("01a22000-0000-7000-8000-000000000000")
        with pytest.raises(ValidationError) as ve:
            c.create("app", {}, session="bad session!")
        assert ve.value.field == "session"
        s1 = c.create("app", {"n": 9}, session="s1")
        assert s1.session == "s1"
        assert [e.id for e in c.list(session="s1").executions] == [s1.id]
        assert any(a["id"] == "app" for a in c.agents())
        # upstream's typed errors: a parent that is not completed is a conflict naming the field
        with pytest.raises(ConflictError) as pe:
            c.create("app", {}, parent_execution_id=ids[1])
        assert pe.value.field == "parent_execution_id"


def test_async_client_watch_and_approvals_with_a_live_agent(make_kernel):
    from rebuno import Agent, Client, ConflictError, tool

    k = make_kernel(CONFIG)

    @tool
    async def risky(what: str) -> str:
        return f"did {what}"

    async def handler(what: str) -> dict:
        return {"result": await risky(what)}

    async def main() -> None:
        agent = Agent("app", base_url=k.url, handle_signals=False, claim_wait=1, grace_period=1)
        serving = asyncio.create_task(agent.serve(handler))
        try:
            async with Client(k.url) as c:
                ex = await c.create("app", {"what": "the thing"})
                seen: list[str] = []
                async for ev in c.watch(ex.id):
                    seen.append(ev.type)
                    if ev.type == "approval.requested":
                        (appr,) = await c.approvals(execution_id=ex.id)
                        assert appr.status == "pending" and appr.target == "risky"
                        assert appr.args == {"what": "the thing"}
                        decided = await c.approve(appr.id, by="alice", reason="fine")
                        assert decided.status == "granted" and decided.decided_by == "alice"
                        with pytest.raises(ConflictError):
                            await c.deny(appr.id, by="bob")
                assert seen[-1] == "execution.completed"
                assert "execution.blocked" in seen and "execution.resumed" in seen
                done = await c.get(ex.id)
                assert done.output == {"result": "did the thing"}
                assert (await c.wait(ex.id, timeout=5)).status == "completed"
                steps = await c.steps(ex.id)
                assert steps[0].status == "succeeded" and steps[0].approval_id
                one = await c.get_step(ex.id, steps[0].step_id)
                assert one.result == "did the thing"
                assert (await c.approvals(status=None, execution_id=ex.id))[0].status == "granted"
        finally:
            agent.stop()
            await asyncio.wait_for(serving, 10)

    asyncio.run(main())


def test_api_keys_for_agents_and_clients(make_kernel, start_agent, tmp_path):
    from conftest import wait_status

    from rebuno import ForbiddenError, SyncClient, UnauthorizedError

    agent_key, client_key = "agent-key-0123456789abcdef", "client-key-0123456789abcdef"
    k = make_kernel(f"""
agents:
  - name: basic
api_keys:
  - key: {client_key}
    role: client
  - key: {agent_key}
    role: agent
    agent: basic
""")
    work = tmp_path / "work"
    work.mkdir()
    start_agent("basic.py", k, env={"WORKDIR": str(work), "REBUNO_API_KEY": agent_key})
    with SyncClient(k.url, api_key=client_key) as c:
        ex = c.create("basic", {"task": "keys"})
        done = wait_status(c, ex.id)
        assert done.status == "completed" and done.output["loud"] == "KEYS"
    with SyncClient(k.url) as anonymous, pytest.raises(UnauthorizedError):
        anonymous.get(ex.id)
    with SyncClient(k.url, api_key=agent_key) as as_agent, pytest.raises(ForbiddenError):
        as_agent.approvals()


def test_admin_agents_policies_and_api_keys(make_kernel):
    """Upstream's admin routes through the SDK: register, policy set/get/dry run, API keys
    (a scoped key's token works, then stops when revoked), delete."""
    from rebuno import ConflictError, ForbiddenError, NotFoundError, SyncClient, UnauthorizedError

    admin = "admin-key-0123456789abcdef"
    k = make_kernel(f"""
agents:
  - name: basic
api_keys:
  - key: {admin}
    role: admin
""")
    with SyncClient(k.url, api_key=admin) as c:
        c.register_agent("late", lease_timeout_seconds=30)
        c.set_policy("late", "default_action: deny\nrules:\n  - id: ok-ls\n    when: {target: ls}\n"
                             "    then: {decision: allow}\n")
        assert c.get_policy("late")["rules"][0]["id"] == "ok-ls"
        assert "ok-ls" in c.get_agent("late")["policy_bundle"]
        rep = c.test_policy("late", [{"target": "ls", "expect": "allow"}, {"target": "rm", "expect": "allow"}])
        assert rep["failed"] == 1 and rep["results"][1]["failure"] == "deny, want allow"
        key = c.create_api_key("reader", ["agents:read"])
        with SyncClient(k.url, api_key=key["token"]) as reader:
            assert any(a["id"] == "late" for a in reader.agents())
            with pytest.raises(ForbiddenError):
                reader.list()
            c.revoke_api_key(key["id"])
            with pytest.raises(UnauthorizedError):
                reader.agents()
        assert [x["name"] for x in c.api_keys()] == ["reader"] and "revoked_at" in c.api_keys()[0]
        with pytest.raises(ConflictError):
            c.rotate_api_key(key["id"])
        ex = c.create("late", {})
        with pytest.raises(ConflictError):
            c.delete_agent("late")
        c.cancel(ex.id)
        c.delete_agent("late")
        with pytest.raises(NotFoundError):
            c.get_agent("late")


def test_requests_in_flight_when_the_kernel_restarts_all_find_its_new_local_token(make_kernel):
    """A restarted `rebuno dev` has a new local token. Several requests sent with the old
    one all get 401; each must retry with the new token, not only the first to look it up
    (a worker's heartbeat and claim are in flight together: the claim used to fail)."""
    from rebuno import Client, _localauth

    k = make_kernel(CONFIG)

    async def main() -> None:
        async with Client(k.url) as c:
            ex = await c.create("app", {"n": 1})
            old = _localauth.find(k.url, _localauth.KERNEL_STATE_FILE)[0]
            k.stop()
            k.start()  # same port and state folder, a new token
            assert _localauth.find(k.url, _localauth.KERNEL_STATE_FILE)[0] != old
            got = await asyncio.gather(*(c.get(ex.id) for _ in range(8)), return_exceptions=True)
            assert all(not isinstance(g, BaseException) and g.id == ex.id for g in got), got

    asyncio.run(main())
