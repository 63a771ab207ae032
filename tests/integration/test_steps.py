"""Steps, replay and leases against the real kernel."""
import time

from conftest import Dispatch

SHORT_LEASE = """
agents:
  - name: fast
    lease_timeout_seconds: 1
    max_attempts: 3
"""


def run_agent(k, d, calls, side_effects):
    """Make `calls` steps like an agent would: replayed ones are not run again."""
    results = []
    for target, args in calls:
        dec = d.submit(target, args)
        if dec["decision"] == "proceed":
            side_effects.append((target, args))
            result = {"ran": target, "n": len(side_effects)}
            assert d.finish(dec["step_id"], result=result)["decision"] == "recorded"
            results.append(result)
        else:
            assert dec["decision"] == "replay", dec
            results.append(dec["result"])
    return results


def test_hello_round_trip(kernel):
    ex = kernel.create("hello", {"name": "world"})
    assert ex["status"] == "pending" and ex["dispatch"]["state"] == "queued"
    w = kernel.worker("hello")
    d = Dispatch(kernel, kernel.claim("hello", w))
    assert d.claim["execution"]["status"] == "running"
    assert d.attempt == 1
    dec = d.submit("greet", {"name": "world"})
    assert dec["decision"] == "proceed" and len(dec["step_id"]) == 64
    d.finish(dec["step_id"], result="hi world")
    st, out = d.complete({"greeting": "hi world"}, state={"turns": 1})
    assert st == 200 and out["status"] == "completed"
    got = kernel.ok("GET", f"/v0/executions/{ex['id']}")
    assert got["output"] == {"greeting": "hi world"} and got["state"] == {"turns": 1}
    types = [e["type"] for e in kernel.events(ex["id"])]
    assert types == ["execution.created", "dispatch.queued", "execution.started", "dispatch.claimed",
                     "step.proposed", "step.allowed", "step.executing", "step.succeeded",
                     "execution.completed"]
    seqs = [e["seq"] for e in kernel.events(ex["id"])]
    assert seqs == list(range(1, len(seqs) + 1))


def test_redispatch_replays_every_recorded_step(make_kernel):
    k = make_kernel(SHORT_LEASE).start()
    ex = k.create("fast", {})
    calls = [("read", {"path": "a"}), ("write", {"path": "a", "data": 1}), ("read", {"path": "a"}),
             ("shell", {"cmd": "make test"})]
    effects = []
    d1 = Dispatch(k, k.claim("fast", k.worker("fast")))
    first = run_agent(k, d1, calls[:3], effects)
    assert len(effects) == 3
    # The worker dies. After the lease expires another worker takes over.
    w2 = k.worker("fast")
    claim = k.claim("fast", w2, wait=5)
    assert claim is not None, "execution was not re-dispatched after its lease expired"
    d2 = Dispatch(k, claim)
    assert d2.id == d1.id and d2.attempt == 2
    second = run_agent(k, d2, calls, effects)
    assert second[:3] == first, "replayed results differ from the recorded ones"
    assert len(effects) == 4, f"a completed step ran twice: {effects}"
    assert d2.complete("done")[0] == 200
    # The same call twice in one dispatch is two steps (occurrence 0 and 1).
    steps = k.ok("GET", f"/v0/executions/{ex['id']}/steps")["steps"]
    reads = [s for s in steps if s["target"] == "read"]
    assert [s["occurrence"] for s in reads] == [0, 1]
    assert all(s["runs"] == 1 for s in steps)


def test_superseded_worker_is_refused(make_kernel):
    k = make_kernel(SHORT_LEASE).start()
    k.create("fast", {})
    d1 = Dispatch(k, k.claim("fast", k.worker("fast")))
    dec = d1.submit("slow_tool", {})
    d2 = Dispatch(k, k.claim("fast", k.worker("fast"), wait=5))
    assert d2.attempt == d1.attempt + 1
    st, out = d1.call("POST", f"/steps/{dec['step_id']}/complete", {"result": 1})
    assert st == 409 and out["error"]["code"] == "lease_superseded", out
    st, out = d1.call("POST", "/heartbeat")
    assert st == 409 and out["error"]["code"] == "lease_superseded"
    st, out = d1.complete("late")
    assert st == 409 and out["error"]["code"] == "lease_superseded"
    # The new holder's heartbeat renews its lease.
    st, out = d2.call("POST", "/heartbeat")
    assert st == 200 and out["lease_deadline"]


def test_heartbeat_keeps_the_lease(make_kernel):
    k = make_kernel(SHORT_LEASE).start()
    k.create("fast", {})
    d = Dispatch(k, k.claim("fast", k.worker("fast")))
    for _ in range(6):
        time.sleep(0.4)
        assert d.call("POST", "/heartbeat")[0] == 200
    assert k.claim("fast", k.worker("fast"), wait=0) is None
    assert d.complete("ok")[0] == 200


def test_at_most_once_orphan_becomes_indeterminate(make_kernel):
    k = make_kernel(SHORT_LEASE).start()
    ex = k.create("fast", {})
    d1 = Dispatch(k, k.claim("fast", k.worker("fast")))
    safe = d1.submit("shell", {"cmd": "ls"})
    once = d1.submit("open_pr", {"title": "fix"}, idempotency="at_most_once")
    assert safe["decision"] == once["decision"] == "proceed"
    # Worker dies mid-effect for both steps.
    d2 = Dispatch(k, k.claim("fast", k.worker("fast"), wait=5))
    again = d2.submit("shell", {"cmd": "ls"})
    assert again["decision"] == "proceed" and again["step_id"] == safe["step_id"]
    d2.finish(again["step_id"], result="ok")
    orphan = d2.submit("open_pr", {"title": "fix"}, idempotency="at_most_once")
    assert orphan["decision"] == "replay"
    assert orphan["error"]["reason"] == "indeterminate"
    # A fresh identical at_most_once call in the same execution is refused.
    retry = d2.submit("open_pr", {"title": "fix"}, idempotency="at_most_once")
    assert retry["decision"] == "denied" and retry["rule_id"] == "__indeterminate_retry"
    steps = {s["step_id"]: s for s in k.ok("GET", f"/v0/executions/{ex['id']}/steps")["steps"]}
    assert steps[safe["step_id"]]["runs"] == 2
    assert steps[once["step_id"]]["status"] == "failed"


def test_dispatch_exhausted(make_kernel):
    k = make_kernel(SHORT_LEASE).start()
    ex = k.create("fast", {})
    w = k.worker("fast")
    for attempt in (1, 2, 3):
        c = k.claim("fast", w, wait=5)
        assert c and c["dispatch"]["attempt"] == attempt
    deadline = time.time() + 5
    while time.time() < deadline:
        got = k.ok("GET", f"/v0/executions/{ex['id']}")
        if got["status"] == "failed":
            break
        time.sleep(0.1)
    assert got["status"] == "failed" and got["failure_reason"] == "dispatch_exhausted"
    assert k.claim("fast", w, wait=0) is None


def test_long_poll_claim_wakes_on_create(kernel):
    import threading
    w = kernel.worker("hello")
    got = {}

    def poll():
        got["claim"] = kernel.claim("hello", w, wait=10)

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.3)
    ex = kernel.create("hello", {})
    t.join(5)
    assert got["claim"]["execution"]["id"] == ex["id"]
    # An empty long-poll answers 204 after its wait.
    start = time.time()
    assert kernel.claim("hello", w, wait=1) is None
    assert time.time() - start >= 0.9


def test_terminal_execution_answers_steps(kernel):
    kernel.create("hello", {})
    d = Dispatch(kernel, kernel.claim("hello", kernel.worker("hello")))
    dec = d.submit("x", {})
    assert d.complete(1)[0] == 200
    assert d.submit("y", {})["decision"] == "execution_terminal"
    assert d.finish(dec["step_id"], result=1)["decision"] == "execution_terminal"
    st, out = d.complete(2)
    assert st == 409 and out["error"]["code"] == "execution_terminal"


def test_step_failure_is_replayed(make_kernel):
    k = make_kernel(SHORT_LEASE).start()
    k.create("fast", {})
    d1 = Dispatch(k, k.claim("fast", k.worker("fast")))
    dec = d1.submit("flaky", {"n": 1})
    d1.finish(dec["step_id"], error={"type": "ValueError", "message": "boom"})
    d2 = Dispatch(k, k.claim("fast", k.worker("fast"), wait=5))
    again = d2.submit("flaky", {"n": 1})
    assert again == {"decision": "replay", "step_id": dec["step_id"],
                     "error": {"type": "ValueError", "message": "boom"}}


def test_cancel_marks_running_steps(kernel):
    ex = kernel.create("hello", {})
    d = Dispatch(kernel, kernel.claim("hello", kernel.worker("hello")))
    dec = d.submit("long", {})
    out = kernel.ok("POST", f"/v0/executions/{ex['id']}/cancel", {"reason": "user asked"})
    assert out["status"] == "cancelled" and out["failure_reason"] == "user asked"
    step = kernel.ok("GET", f"/v0/executions/{ex['id']}/steps/{dec['step_id']}")
    assert step["status"] == "cancelled"
    st, out = kernel.request("POST", f"/v0/executions/{ex['id']}/cancel", {})
    assert st == 409 and out["error"]["code"] == "execution_terminal"


def test_deadline_cancels(kernel):
    ex = kernel.create("hello", {}, deadline_seconds=1)
    deadline = time.time() + 5
    while time.time() < deadline:
        got = kernel.ok("GET", f"/v0/executions/{ex['id']}")
        if got["status"] == "cancelled":
            break
        time.sleep(0.1)
    assert got["status"] == "cancelled" and got["failure_reason"] == "deadline_exceeded"


def test_resent_submission_is_the_same_step(kernel):
    """A submission whose reply was lost is resent with the same request_id: same step."""
    ex = kernel.create("hello", {})
    d = Dispatch(kernel, kernel.claim("hello", kernel.worker("hello")))
    body = {"kind": "tool_call", "target": "open_pr", "args": {"t": 1}, "idempotency": "at_most_once",
            "request_id": "req-1"}
    st, first = d.call("POST", "/steps", body)
    st2, again = d.call("POST", "/steps", body)             # the reply was lost; resend
    assert st == st2 == 200 and first["decision"] == again["decision"] == "proceed"
    assert again["step_id"] == first["step_id"], "a resend must not become a new occurrence"
    d.finish(first["step_id"], result="pr-1")
    st, third = d.call("POST", "/steps", body)               # resent after it settled: replay
    assert third == {"decision": "replay", "step_id": first["step_id"], "result": "pr-1"}
    # A new request id for the same call is a new occurrence.
    st, other = d.call("POST", "/steps", dict(body, request_id="req-2"))
    assert other["step_id"] != first["step_id"]
    step = kernel.ok("GET", f"/v0/executions/{ex['id']}/steps/{first['step_id']}")
    assert step["runs"] == 1 and step["status"] == "succeeded"
