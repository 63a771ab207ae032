"""Agents against the real kernel: completion, crash recovery, at_most_once orphans,
approvals, input binding, leases, shutdown, restarts and concurrency."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from conftest import wait_for, wait_status

CONFIG = """
agents:
  - name: durable
    lease_timeout_seconds: 1
    max_attempts: 20  # 1 s leases expire often on a loaded machine; none of these tests counts them
  - name: approver
    lease_timeout_seconds: 1
    policy: |
      default_action: allow
      rules:
        - id: gate-deploy
          when: {target: deploy}
          then:
            decision: require_approval
            reason: deploys need a person
  - name: basic
    lease_timeout_seconds: 1
    policy: |
      default_action: allow
      rules:
        - id: no-forbidden
          when: {target: forbidden}
          then: {decision: deny, reason: forbidden is off limits}
  - name: syncy
    lease_timeout_seconds: 1
  - name: barrier
    lease_timeout_seconds: 2
  - name: longtool
    lease_timeout_seconds: 2
"""


def effects(work: Path) -> list[str]:
    p = work / "effects.log"
    return [line.split()[0] for line in p.read_text().splitlines()] if p.exists() else []


def started(work: Path, marker: str) -> list[Path]:
    return list(work.glob(f"started-{marker}-*"))


def work_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return {"WORKDIR": str(work), **extra}


def test_basic_agent_completes_with_result_state_and_execution_facts(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k = make_kernel(CONFIG)
    env = work_env(tmp_path)
    start_agent("basic.py", k, env=env)
    with SyncClient(k.url) as c:
        ex = c.create("basic", {"task": "hello"})
        done = wait_status(c, ex.id)
        assert done.status == "completed", done
        out = done.output
        assert out["loud"] == "HELLO" and out["n"] == 5
        assert out["session"] == ex.id[-12:]  # derived as in the E2B document
        assert out["exec_session"] is None and out["previous"] is None
        assert out["agent"] == "basic" and out["attempt"] == 1 and out["status"] == "running"
        assert out["input"] == {"task": "hello"} and out["suspension"] is None
        assert done.state == {"last": "hello"}
        steps = c.steps(ex.id)
        assert [(s.kind, s.target, s.args, s.status) for s in steps] == [
            ("tool_call", "shout", {"text": "hello"}, "succeeded"),
            ("tool_call", "count_chars", {"text": "hello"}, "succeeded"),
        ]
        assert steps[0].result == "HELLO" and steps[1].result == 5


def test_session_turns_read_the_previous_state(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k = make_kernel(CONFIG)
    start_agent("basic.py", k, env=work_env(tmp_path))
    with SyncClient(k.url) as c:
        one = c.create("basic", {"task": "one"}, session="chat-1")
        two = c.create("basic", {"task": "two"}, session="chat-1")  # waits for the first turn
        done1 = wait_status(c, one.id)
        done2 = wait_status(c, two.id)
        assert done1.output["previous"] is None and done1.output["exec_session"] == "chat-1"
        assert done2.output["previous"] == {"last": "one"}  # the first turn's Result.state
        assert done2.parent_execution_id == one.id


def test_bad_input_tool_error_denial_and_nonjson_output_fail_with_reasons(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k = make_kernel(CONFIG)
    env = work_env(tmp_path)
    work = Path(env["WORKDIR"])
    start_agent("basic.py", k, env=env)
    with SyncClient(k.url) as c:
        cases = {
            "missing": ({}, "input_invalid: missing required field 'task'"),
            "type": ({"task": 5}, "input_invalid: task: expected str, got number"),
            "unknown": ({"task": "x", "tsak": 1}, "input_invalid: unexpected field 'tsak'"),
            "notobject": ("just text", "input_invalid: input must be a JSON object"),
            "boom": ({"task": "boom"}, "tool_error: explode: cannot handle boom"),
            "deny": ({"task": "deny"}, "policy_denied: forbidden is off limits"),
            "nonjson": ({"task": "nonjson"}, "agent_error: TypeError: the handler's output is not JSON-serializable"),
            # step() is not caught like a tool: a denied local step raises PolicyError
            "deny_step": ({"task": "deny_step"}, "policy_denied: forbidden is off limits"),
        }
        ids = {name: c.create("basic", inp).id for name, (inp, _) in cases.items()}
        for name, (_, reason) in cases.items():
            ex = wait_status(c, ids[name])
            assert ex.status == "failed", (name, ex)
            assert ex.failure_reason.startswith(reason), (name, ex.failure_reason)
        boom_steps = c.steps(ids["boom"])
        assert boom_steps[0].status == "failed"
        assert boom_steps[0].error == {"message": "cannot handle boom", "type": "RuntimeError"}
        deny_steps = c.steps(ids["deny"])
        assert deny_steps[0].status == "denied" and deny_steps[0].rule_id == "no-forbidden"
        (denied_step,) = c.steps(ids["deny_step"])
        assert (denied_step.kind, denied_step.status, denied_step.rule_id) == ("local", "denied", "no-forbidden")
        assert "forbidden-step" not in effects(work)  # its function never ran


def test_killed_worker_resumes_and_no_completed_tool_runs_twice(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k = make_kernel(CONFIG)
    env = work_env(tmp_path)
    work = Path(env["WORKDIR"])
    first = start_agent("durable.py", k, env=env)
    with SyncClient(k.url) as c:
        ex = c.create("durable", {"mode": "crash"})
        wait_for(lambda: started(work, "slow"), 15, what="the slow tool to start")
        assert effects(work) == ["fetch1", "fetch2"]
        first.kill()  # SIGKILL in the middle of `slow`
        (work / "go").touch()
        second = start_agent("durable.py", k, env=env)
        done = wait_status(c, ex.id, timeout=20)
        assert done.status == "completed", done
        assert done.output["pid"] == second.pid and done.output["attempt"] >= 2
        assert done.output["slow"] == "DONE"
        # every completed tool ran exactly once across both processes
        assert sorted(effects(work)) == ["fetch1", "fetch2", "slow"]
        # the local step's random value replayed unchanged in the second process
        tokens = {p.name: p.read_text() for p in work.glob("token-*")}
        assert len(tokens) == 2 and len(set(tokens.values())) == 1
        assert str(done.output["token"]) == tokens[f"token-{second.pid}"]
        kinds = [(s.kind, s.target, s.runs) for s in c.steps(ex.id)]
        assert kinds == [("local", "pick", 1), ("tool_call", "fetch", 1), ("tool_call", "fetch", 1),
                         ("tool_call", "slow", 2)]


def test_at_most_once_tool_orphaned_by_a_crash_is_indeterminate(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k = make_kernel(CONFIG)
    env = work_env(tmp_path)
    work = Path(env["WORKDIR"])
    first = start_agent("durable.py", k, env=env)
    with SyncClient(k.url) as c:
        ex = c.create("durable", {"mode": "at_most_once"})
        wait_for(lambda: started(work, "charge"), 15, what="the charge to start")
        first.kill()
        (work / "go").touch()
        start_agent("durable.py", k, env=env)
        done = wait_status(c, ex.id, timeout=20)
        assert done.status == "completed", done
        out = done.output
        assert out["indeterminate"] is True
        assert "may already have taken effect" in out["message"]
        assert out["retry_is_refusal"] is True and out["retry_rule"] == "__indeterminate_retry"
        assert out["retry"].startswith("charge not allowed. reason:")
        assert effects(work).count("charge-start") == 1 and "charge" not in effects(work)
        charge_steps = [s for s in c.steps(ex.id) if s.target == "charge"]
        assert charge_steps[0].status == "failed" and charge_steps[0].error["reason"] == "indeterminate"
        assert charge_steps[1].status == "denied"


def test_require_approval_blocks_then_approve_runs_the_tool_once(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k = make_kernel(CONFIG)
    env = work_env(tmp_path)
    work = Path(env["WORKDIR"])
    worker = start_agent("approval.py", k, env=env)
    with SyncClient(k.url) as c:
        # swallow=True: the handler catches every exception around the gated call, like
        # an agent framework would; execution().suspension still tells the SDK it is blocked
        ex = c.create("approver", {"env": "prod", "swallow": True})
        wait_status(c, ex.id, "blocked")
        wait_for(lambda: (work / "suspensions.log").exists(), 5, what="the handler's finally block")
        first_dispatch = (work / "suspensions.log").read_text().split()
        assert first_dispatch[1] == "Blocked"
        assert c.get(ex.id).status == "blocked"  # the swallowed Blocked did not complete it
        assert effects(work) == ["greet"]
        pending = c.approvals(execution_id=ex.id)
        assert len(pending) == 1 and pending[0].target == "deploy" and pending[0].reason == "deploys need a person"
        out = k.cli("exec", "approve", ex.id, "--by", "alice", "--reason", "ship it")
        assert "granted" in out.stdout
        done = wait_status(c, ex.id, timeout=15)
        assert done.status == "completed", done
        assert done.output == {"deployed": True, "result": "deployed to prod"}
        assert effects(work) == ["greet", "deploy"]  # greet replayed, deploy ran exactly once
        lines = (work / "suspensions.log").read_text().splitlines()
        assert len(lines) == 2 and lines[1].split()[1] == "None"
        assert lines[0].split()[0] != lines[1].split()[0]  # a new dispatch after the decision
        assert worker.alive()


def test_denied_approval_gives_the_agent_a_refusal(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k = make_kernel(CONFIG)
    env = work_env(tmp_path)
    work = Path(env["WORKDIR"])
    start_agent("approval.py", k, env=env)
    with SyncClient(k.url) as c:
        ex = c.create("approver", {"env": "prod"})
        wait_status(c, ex.id, "blocked")
        k.cli("exec", "deny", ex.id, "--by", "bob", "--reason", "not on a friday")
        done = wait_status(c, ex.id, timeout=15)
        assert done.status == "completed", done
        assert done.output["deployed"] is False
        assert done.output["refusal"] == "deploy not allowed. reason: not on a friday"
        assert done.output["reason"] == "not on a friday"
        assert "deploy" not in effects(work)


def test_sync_handler_with_sync_and_async_tools_and_step(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k = make_kernel(CONFIG)
    env = work_env(tmp_path)
    start_agent("sync_agent.py", k, env=env)
    with SyncClient(k.url) as c:
        ex = c.create("syncy", {"n": 40})
        done = wait_status(c, ex.id)
        assert done.status == "completed", done
        # the async tool called from the synchronous handler ran (on the agent's loop) and
        # returned its value, not a coroutine
        assert done.output == {"total": 42, "doubled": {"value": 84, "on_loop": True},
                               "data": {"key": "k", "value": 42, "thread": True}, "id": ex.id,
                               "handler_thread": True}
        assert [(s.kind, s.target, s.args, s.status) for s in c.steps(ex.id)] == [
            ("tool_call", "add", {"a": 40, "b": 2}, "succeeded"),
            ("tool_call", "double", {"x": 42}, "succeeded"),
            ("local", "load", {"key": "k"}, "succeeded")]
        assert effects(Path(env["WORKDIR"])) == ["add", "double", "load"]


def test_superseded_worker_stops_quietly(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k = make_kernel(CONFIG)
    env = work_env(tmp_path)
    work = Path(env["WORKDIR"])
    first = start_agent("durable.py", k, env=env)
    with SyncClient(k.url) as c:
        ex = c.create("durable", {"mode": "crash"})
        wait_for(lambda: started(work, "slow"), 15, what="the slow tool to start")
        first.proc.send_signal(signal.SIGSTOP)  # frozen: no heartbeats, the lease expires
        try:
            second = start_agent("durable.py", k, env=env)
            wait_for(lambda: (work / f"started-slow-{second.pid}").exists(), 15,
                     what="the second worker to reach slow")
        finally:
            first.proc.send_signal(signal.SIGCONT)
        # the first worker's next heartbeat gets 409 lease_superseded: it stops quietly
        wait_for(lambda: "superseded" in first.log(), 10, what="the first worker to notice")
        (work / "go").touch()
        done = wait_status(c, ex.id, timeout=15)
        assert done.status == "completed" and done.output["pid"] == second.pid
        assert first.alive()
        assert "slow" not in [line.split()[0] for line in (work / "effects.log").read_text().splitlines()
                              if line.endswith(f" {first.pid}")]
        types_ = [e.type for e in c.events(ex.id, limit=1000)]
        assert "execution.failed" not in types_ and types_.count("execution.completed") == 1


def test_cancel_stops_the_running_handler_without_failing(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k = make_kernel(CONFIG)
    env = work_env(tmp_path)
    work = Path(env["WORKDIR"])
    worker = start_agent("durable.py", k, env=env)
    with SyncClient(k.url) as c:
        ex = c.create("durable", {"mode": "crash"})
        wait_for(lambda: started(work, "slow"), 15, what="the slow tool to start")
        c.cancel(ex.id, "changed my mind")
        wait_for(lambda: "already over" in worker.log(), 10, what="the worker to stop the handler")
        ex2 = c.get(ex.id)
        assert ex2.status == "cancelled" and ex2.failure_reason == "changed my mind"
        assert "slow" not in effects(work)
        assert worker.alive()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_lets_the_running_handler_finish_then_exits(make_kernel, start_agent, tmp_path, sig):
    from rebuno import SyncClient

    k = make_kernel(CONFIG)
    env = work_env(tmp_path)
    work = Path(env["WORKDIR"])
    worker = start_agent("durable.py", k, env=env)
    with SyncClient(k.url) as c:
        ex = c.create("durable", {"mode": "crash"})
        wait_for(lambda: started(work, "slow"), 15, what="the slow tool to start")
        worker.proc.send_signal(sig)
        wait_for(lambda: f"{sig.name}: stopping" in worker.log(), 5, what="the worker to start stopping")
        later = c.create("durable", {"mode": "quick"})
        time.sleep(0.3)
        (work / "go").touch()
        assert worker.wait(15) == 0
        assert wait_status(c, ex.id).status == "completed"
        assert c.get(later.id).status == "pending"  # nothing new was claimed while stopping


def test_agent_survives_a_kernel_restart_in_the_middle_of_a_run(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k = make_kernel(CONFIG)
    env = work_env(tmp_path)
    work = Path(env["WORKDIR"])
    worker = start_agent("durable.py", k, env=env)
    with SyncClient(k.url) as c:
        ex = c.create("durable", {"mode": "crash"})
        wait_for(lambda: started(work, "slow"), 15, what="the slow tool to start")
    k.kill9()  # the kernel dies while the worker is inside a tool
    (work / "go").touch()
    time.sleep(1.5)
    k.start()  # same port, same state dir
    with SyncClient(k.url) as c:
        done = wait_status(c, ex.id, timeout=20)
        assert done.status == "completed", done
        assert done.output["pid"] == worker.pid
        # completed tools were not run again; `slow` may have run twice if its outcome
        # could not be recorded before the lease ran out (safe_to_retry)
        assert effects(work).count("fetch1") == 1 and effects(work).count("fetch2") == 1
        later = c.create("durable", {"mode": "quick"})
        assert wait_status(c, later.id).status == "completed"
    assert worker.alive()


def test_concurrency_runs_executions_at_the_same_time(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k = make_kernel(CONFIG)
    start_agent("barrier.py", k, env=work_env(tmp_path, CONCURRENCY="3", EXPECT="3"))
    with SyncClient(k.url) as c:
        ids = [c.create("barrier", {"tag": str(i)}).id for i in range(3)]
        for i in ids:
            done = wait_status(c, i, timeout=15)
            assert done.status == "completed" and done.output == {"seen": 3}, done


def test_heartbeats_keep_the_lease_through_a_tool_three_times_longer(make_kernel, start_agent, tmp_path):
    """Tools (async on the loop, sync in a worker thread) that each run ~3x the 2 s lease:
    the heartbeats keep the first dispatch's lease, so nothing is re-dispatched or re-run."""
    from rebuno import SyncClient

    k = make_kernel(CONFIG)
    env = work_env(tmp_path)
    work = Path(env["WORKDIR"])
    start_agent("long_tool.py", k, env=env)
    with SyncClient(k.url) as c:
        ex = c.create("longtool", {"seconds": 6.5})
        done = wait_status(c, ex.id, timeout=40)
        assert done.status == "completed", done
        assert done.output == {"attempt": 1, "async": "slept 6.5", "sync": "slept 6.5"}
        assert effects(work) == ["long_async", "long_sync"]
        assert [(s.target, s.runs) for s in c.steps(ex.id)] == [("long_async", 1), ("long_sync", 1)]
        types_ = [e.type for e in c.events(ex.id, limit=1000)]
        assert "dispatch.expired" not in types_ and types_.count("dispatch.claimed") == 1


AUTH_CONFIG = """
agents:
  - name: basic
  - name: other
api_keys:
  - key: client-key-0123456789abcdef
    role: client
  - key: other-key-0123456789abcdef
    role: agent
    agent: other
"""


def test_refused_api_key_at_registration_ends_the_worker(make_kernel, start_agent, tmp_path):
    """401 (no key) and 403 (another agent's key) at registration end Agent.run with the
    error instead of retrying forever."""
    import asyncio

    from rebuno import Agent, ForbiddenError, UnauthorizedError

    k = make_kernel(AUTH_CONFIG)
    worker = start_agent("basic.py", k, env=work_env(tmp_path))  # no REBUNO_API_KEY
    assert worker.wait(20) != 0
    log = worker.log()
    assert "UnauthorizedError" in log and "registering a worker at" in log and "REBUNO_API_KEY" in log

    other = start_agent("basic.py", k, env=work_env(tmp_path, REBUNO_API_KEY="other-key-0123456789abcdef"))
    assert other.wait(20) != 0
    assert "ForbiddenError" in other.log() and "agent key bound to agent 'basic'" in other.log()

    agent = Agent("basic", base_url=k.url, api_key="client-key-0123456789abcdef", handle_signals=False)

    async def handler(task: str) -> str:
        return task

    with pytest.raises(ForbiddenError) as ei:
        asyncio.run(asyncio.wait_for(agent.serve(handler), 20))
    assert ei.value.status_code == 403 and "agent basic: registering a worker" in str(ei.value)
    with pytest.raises(UnauthorizedError):
        asyncio.run(asyncio.wait_for(Agent("basic", base_url=k.url, api_key="wrong-key-0123456789abcdef",
                                           handle_signals=False).serve(handler), 20))


def test_key_revoked_while_claiming_ends_the_worker(make_kernel, start_agent, tmp_path):
    """A key that stops working later (the kernel restarted with other keys) ends the
    worker at its next claim instead of retrying forever."""
    key = "basic-key-0123456789abcdef"
    k = make_kernel(AUTH_CONFIG + f"""  - key: {key}
    role: agent
    agent: basic
""")
    worker = start_agent("basic.py", k, env=work_env(tmp_path, REBUNO_API_KEY=key))
    wait_for(lambda: "registered" in worker.log(), 15, what="the worker to register")
    k.stop()
    assert k.config_path is not None
    k.config_path.write_text(AUTH_CONFIG)  # the agent's key is gone
    k.start()
    assert worker.wait(30) != 0
    log = worker.log()
    assert "UnauthorizedError" in log and "claiming work at" in log
