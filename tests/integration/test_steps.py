"""Steps, replay and leases against the real kernel."""
import datetime
import time

from conftest import Dispatch

SHORT_LEASE = """
agents:
  - name: fast
    lease_timeout_seconds: 1
    max_attempts: 3
"""

# Long enough that a loaded test machine does not stall a 0.3 s loop past it.
TWO_SECOND_LEASE = """
agents:
  - name: steady
    lease_timeout_seconds: 2
    max_attempts: 3
"""


def parse_time(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ")


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
    assert st == 204 and out is None
    got = kernel.ok("GET", f"/v0/executions/{ex['id']}")
    assert got["output"] == {"greeting": "hi world"} and got["state"] == {"turns": 1}
    types = [e["type"] for e in kernel.events(ex["id"])]
    assert types == ["execution.created", "dispatch.queued", "execution.started", "dispatch.claimed",
                     "step.proposed", "step.allowed", "step.executing", "step.succeeded",
                     "execution.completed"]
    seqs = [e["event_seq"] for e in kernel.events(ex["id"])]
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
    assert d2.complete("done")[0] == 204
    # The same call twice in one dispatch is two steps (occurrence 0 and 1).
    steps = k.ok("GET", f"/v0/executions/{ex['id']}/steps")
    reads = [s for s in steps if s["target"] == "read"]
    assert [s["occurrence"] for s in reads] == [0, 1]
    assert all(s["runs"] == 1 for s in steps)


def test_superseded_worker_is_refused(make_kernel):
    k = make_kernel(SHORT_LEASE).start()
    ex = k.create("fast", {})
    d1 = Dispatch(k, k.claim("fast", k.worker("fast")))
    dec = d1.submit("slow_tool", {})
    d2 = Dispatch(k, k.claim("fast", k.worker("fast"), wait=5))
    assert d2.attempt == d1.attempt + 1
    before = (k.events(ex["id"]), k.ok("GET", f"/v0/executions/{ex['id']}/steps"))
    # Every agent call of the old attempt is refused, and none of them changes anything.
    refused = [
        ("POST", f"/steps/{dec['step_id']}/complete", {"result": 1}),
        ("POST", f"/steps/{dec['step_id']}/fail", {"error": "boom"}),
        ("POST", "/steps", {"kind": "tool_call", "target": "another_tool", "args": {}}),
        ("POST", "/steps", {"kind": "tool_call", "target": "slow_tool", "args": {}}),
        ("POST", "/heartbeat", None),
        ("POST", "/fail", {"error": "agent_error: too late"}),
        ("POST", "/complete", {"output": "late"}),
    ]
    for method, path, body in refused:
        st, out = d1.call(method, path, body)
        assert st == 409 and out["code"] == "lease_superseded", (path, st, out)
        assert out["details"]["field"] == "Rebuno-Dispatch-Attempt", out
    assert (k.events(ex["id"]), k.ok("GET", f"/v0/executions/{ex['id']}/steps")) == before
    got = k.ok("GET", f"/v0/executions/{ex['id']}")
    assert got["status"] == "running" and got["dispatch"]["attempt"] == d2.attempt
    # The new holder's heartbeat renews its lease.
    st, out = d2.call("POST", "/heartbeat")
    assert st == 204 and out is None


def test_heartbeat_keeps_the_lease(make_kernel):
    k = make_kernel(SHORT_LEASE).start()
    k.create("fast", {})
    d = Dispatch(k, k.claim("fast", k.worker("fast")))
    for _ in range(6):
        time.sleep(0.4)
        assert d.call("POST", "/heartbeat")[0] == 204
    assert k.claim("fast", k.worker("fast"), wait=0) is None
    assert d.complete("ok")[0] == 204


def test_step_submissions_renew_the_lease(make_kernel):
    """Step submissions alone (no heartbeat, no step completion) keep the lease: the same
    attempt works on for more than two lease periods and nobody else can claim it."""
    k = make_kernel(TWO_SECOND_LEASE).start()
    ex = k.create("steady", {})
    d = Dispatch(k, k.claim("steady", k.worker("steady")))
    other = k.worker("steady")
    first = deadline = parse_time(d.claim["dispatch"]["lease_deadline"])
    start = time.monotonic()
    i = 0
    while time.monotonic() - start < 5:
        time.sleep(0.3)
        assert d.submit("tick", {"i": i})["decision"] == "proceed"
        i += 1
        view = k.ok("GET", f"/v0/executions/{ex['id']}")["dispatch"]
        assert view["attempt"] == d.attempt == 1 and view["state"] == "leased", view
        # The kernel stores a renewal once it moves the deadline by a quarter of the lease
        # (at most 1 s), so the stored deadline moves in steps, never back.
        renewed = parse_time(view["lease_deadline"])
        assert renewed >= deadline, (i, renewed, deadline)
        deadline = renewed
    assert time.monotonic() - start > 2 * 2, "the loop must outlast two lease periods"
    # ~5 s of submissions moved the deadline by about as much (less one renewal step).
    assert deadline - first >= datetime.timedelta(seconds=3), (first, deadline)
    assert k.claim("steady", other, wait=0) is None
    types = [e["type"] for e in k.events(ex["id"])]
    assert "dispatch.expired" not in types and types.count("dispatch.claimed") == 1
    st, out = d.complete("done")
    assert st == 204 and k.ok("GET", f"/v0/executions/{ex['id']}")["status"] == "completed"


def test_default_lease_is_120_seconds(kernel):
    """Without lease_timeout_seconds anywhere in the config, a lease is 2 minutes."""
    w = kernel.worker("hello")
    reg = kernel.ok("POST", "/v0/agents/hello/workers", {}, status=201)
    assert reg["lease_timeout_seconds"] == 120
    agents = {a["id"]: a for a in kernel.ok("GET", "/v0/agents")}
    assert agents["hello"]["lease_timeout_seconds"] == 120
    ex = kernel.create("hello", {})
    claim = kernel.claim("hello", w)
    assert claim["dispatch"]["lease_timeout_seconds"] == 120
    claimed = [e for e in kernel.events(ex["id"]) if e["type"] == "dispatch.claimed"][0]
    lease = parse_time(claim["dispatch"]["lease_deadline"]) - parse_time(claimed["occurred_at"])
    assert lease == datetime.timedelta(seconds=120), lease
    # A heartbeat renews it by the same 2 minutes.
    d = Dispatch(kernel, claim)
    st, out = d.call("POST", "/heartbeat")
    assert st == 204
    view = kernel.ok("GET", f"/v0/executions/{ex['id']}")
    renewed = parse_time(view["dispatch"]["lease_deadline"]) - parse_time(view["updated_at"])
    assert renewed == datetime.timedelta(seconds=120), renewed


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
    steps = {s["step_id"]: s for s in k.ok("GET", f"/v0/executions/{ex['id']}/steps")}
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
    assert d.complete(1)[0] == 204
    assert d.submit("y", {})["decision"] == "execution_terminal"
    assert d.finish(dec["step_id"], result=1)["decision"] == "execution_terminal"
    st, out = d.complete(2)
    assert st == 409 and out["code"] == "execution_terminal"


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
    st, out = kernel.request("POST", f"/v0/executions/{ex['id']}/cancel", {"reason": "user asked"})
    assert st == 204 and out is None
    out = kernel.ok("GET", f"/v0/executions/{ex['id']}")
    assert out["status"] == "cancelled" and out["failure_reason"] == "user asked"
    step = kernel.ok("GET", f"/v0/executions/{ex['id']}/steps/{dec['step_id']}")
    assert step["status"] == "cancelled"
    st, out = kernel.request("POST", f"/v0/executions/{ex['id']}/cancel", {})
    assert st == 409 and out["code"] == "conflict"


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


def test_claim_registers_an_unknown_worker(kernel):
    """Workers live in memory: a claim with a well-formed worker id the kernel has not seen
    registers it for the claimed agent, as if POST /workers had been called."""
    wid = "0192f1a0-0000-7000-8000-00000000beef"
    ex = kernel.create("hello", {})
    claim = kernel.claim("hello", wid)
    assert claim is not None and claim["execution"]["id"] == ex["id"]
    assert claim["execution"]["dispatch"]["worker_id"] == wid
    claimed = [e for e in kernel.events(ex["id"]) if e["type"] == "dispatch.claimed"]
    assert [e["payload"]["worker_id"] for e in claimed] == [wid]
    agents = {a["id"]: a for a in kernel.ok("GET", "/v0/agents")}
    assert agents["hello"]["workers"] == 1
    # It is now hello's worker: claiming for another agent with it is refused.
    st, out = kernel.request("POST", "/v0/agents/other/claim", {"worker_id": wid, "wait_seconds": 0})
    assert st == 409 and out["code"] == "conflict" and out["details"]["field"] == "worker_id", out
    assert Dispatch(kernel, claim).complete("ok")[0] == 204


def test_worker_survives_a_kernel_restart(make_kernel):
    """The kernel forgets its workers when it restarts; their next claim re-registers them,
    so a running agent keeps working across the restart without registering again."""
    k = make_kernel().start()
    w = k.worker("hello")
    ex = k.create("hello", {})
    assert k.stop() == 0
    k.start()
    assert k.ok("GET", "/v0/agents")[0]["workers"] == 0
    claim = k.claim("hello", w)
    assert claim is not None and claim["execution"]["id"] == ex["id"] and claim["dispatch"]["attempt"] == 1
    d = Dispatch(k, claim)
    d.finish(d.submit("greet", {})["step_id"], result="hi")
    assert d.complete("ok")[0] == 204


def test_view_attempt_is_the_last_claimed_one(make_kernel):
    """dispatch.attempt in the execution view counts claims made (0 before the first);
    a dispatch.queued event carries the attempt the next claim will get."""
    k = make_kernel(SHORT_LEASE).start()
    ex = k.create("fast", {})
    assert k.ok("GET", f"/v0/executions/{ex['id']}")["dispatch"] | {"id": None} == \
        {"id": None, "attempt": 0, "state": "queued"}  # absent fields are omitted, not null
    queued = [e["payload"]["attempt"] for e in k.events(ex["id"]) if e["type"] == "dispatch.queued"]
    assert queued == [1]
    c1 = k.claim("fast", k.worker("fast"))
    assert c1["dispatch"]["attempt"] == 1
    assert k.ok("GET", f"/v0/executions/{ex['id']}")["dispatch"]["attempt"] == 1
    # The lease expires: queued again for attempt 2 while the view still says 1.
    deadline = time.time() + 10
    while time.time() < deadline:
        view = k.ok("GET", f"/v0/executions/{ex['id']}")["dispatch"]
        if view["state"] == "queued":
            break
        time.sleep(0.1)
    assert view["state"] == "queued" and view["attempt"] == 1, view
    queued = [e["payload"]["attempt"] for e in k.events(ex["id"]) if e["type"] == "dispatch.queued"]
    assert queued == [1, 2]
    c2 = k.claim("fast", k.worker("fast"))
    assert c2["dispatch"]["attempt"] == 2 == k.ok("GET", f"/v0/executions/{ex['id']}")["dispatch"]["attempt"]
