"""Sessions, resources with checkpoints, and forks, at the HTTP level."""
from conftest import Dispatch


def claim(k, agent="coder"):
    c = k.claim(agent, k.worker(agent), wait=2)
    assert c is not None, "nothing to claim"
    return Dispatch(k, c)


def register(d, key="ws", every_steps=2, **extra):
    st, view = d.call("POST", "/resources", {"key": key, "driver_id": "dir", "configuration": {"root": "/tmp"},
                                             "every_steps": every_steps, **extra})
    assert st == 200, view
    return view


def capture(d, key, generation, ref):
    st, out = d.call("POST", "/checkpoints", {"captures": [{"key": key, "generation": generation,
                                                            "checkpoint_ref": ref}]})
    assert st == 200, out
    return out


def run_step(d, target, key="ws", captures_ref=None, **kw):
    dec = d.submit(target, {"n": target}, **kw)
    assert dec["decision"] == "proceed", dec
    body = {"result": target}
    due = [r for r in dec.get("resources") or [] if r["due"]]
    if due and captures_ref:
        body["captures"] = [{"key": r["key"], "generation": r["generation"], "checkpoint_ref": captures_ref}
                            for r in due]
    st, out = d.call("POST", f"/steps/{dec['step_id']}/complete", body)
    assert st == 200 and out["decision"] == "recorded", out
    return dec, out


def test_session_turns_wait_and_read_previous(kernel):
    a = kernel.create("coder", {"task": "one"}, session="s1")
    b = kernel.create("coder", {"task": "two"}, session="s1")
    assert b["status"] == "pending" and b["dispatch"] is None
    assert "execution.waiting" in [e["type"] for e in kernel.events(b["id"])]
    d = claim(kernel)
    assert d.exec_id == a["id"]
    assert kernel.claim("coder", kernel.worker("coder"), wait=0) is None, "second turn started too early"
    assert kernel.ok("GET", f"/v0/executions/{a['id']}/previous")["state"] is None
    assert d.complete({"answer": 1}, state={"messages": ["hi"]})[0] == 200
    d2 = claim(kernel)
    assert d2.exec_id == b["id"]
    prev = kernel.ok("GET", f"/v0/executions/{b['id']}/previous")
    assert prev == {"state": {"messages": ["hi"]}, "parent_execution_id": a["id"]}
    assert kernel.ok("GET", f"/v0/executions/{b['id']}")["parent_execution_id"] == a["id"]
    # Without state, previous() falls back to the output.
    assert d2.complete({"answer": 2})[0] == 200
    c = kernel.create("coder", {"task": "three"}, session="s1")
    claim(kernel)
    assert kernel.ok("GET", f"/v0/executions/{c['id']}/previous")["state"] == {"answer": 2}
    listing = kernel.ok("GET", "/v0/executions?session=s1")["executions"]
    assert [e["id"] for e in listing] == [c["id"], b["id"], a["id"]]


def test_failed_turn_is_not_a_parent(kernel):
    a = kernel.create("coder", {}, session="s2")
    d = claim(kernel)
    d.complete("first", state={"n": 1})
    b = kernel.create("coder", {}, session="s2")
    d = claim(kernel)
    d.call("POST", "/fail", {"error": "agent_error: boom"})
    c = kernel.create("coder", {}, session="s2")
    claim(kernel)
    assert kernel.ok("GET", f"/v0/executions/{c['id']}/previous")["parent_execution_id"] == a["id"]
    assert b["id"] != a["id"]


def test_session_turn_inherits_resource_binding(kernel):
    kernel.create("coder", {}, session="s3")
    d = claim(kernel)
    view = register(d)
    assert view["binding"] is None and view["covered"] is False
    st, _ = d.call("POST", "/resources/ws/binding", {"binding": {"sandbox": "sbx-1"}})
    assert st == 204
    st, out = d.call("POST", "/resources/ws/binding", {"binding": {"sandbox": "other"}})
    assert st == 409 and out["error"]["code"] == "conflict"
    d.complete("done")
    kernel.create("coder", {}, session="s3")
    d2 = claim(kernel)
    view = register(d2)
    assert view["binding"] == {"sandbox": "sbx-1"} and view["generation"] == 0 and not view["covered"]
    st, out = d2.call("POST", "/resources", {"key": "ws", "driver_id": "other"})
    assert st == 409


def test_checkpoint_cadence_and_coverage(kernel):
    ex = kernel.create("coder", {})
    d = claim(kernel)
    register(d, every_steps=2)
    capture(d, "ws", 0, "cp-base")                             # baseline
    assert register(d)["covered"] is True
    first, _ = run_step(d, "write_a", resources=["ws"])
    assert first["resources"] == [{"key": "ws", "generation": 1, "due": False}]
    second, out = run_step(d, "write_b", resources=["ws"], captures_ref="cp-2")
    assert second["resources"] == [{"key": "ws", "generation": 2, "due": True}]
    assert out["captures"]["recorded"][0]["key"] == "ws"
    view = register(d)
    assert view["covered"] and view["count"] == 2
    # A step that declares nothing still ends coverage (no coverage_reuse) but does not count.
    third, _ = run_step(d, "read_file")
    assert third["resources"] == []
    view = register(d)
    assert not view["covered"] and view["count"] == 2 and view["generation"] == 3
    refused = capture(d, "ws", 1, "stale")["refused"]
    assert refused == [{"key": "ws", "reason": "stale_generation"}]
    assert capture(d, "nope", 0, "x")["refused"] == [{"key": "nope", "reason": "unknown_resource"}]
    # A running step that does not declare the resource does not block a capture.
    dec = d.submit("write_c", {"n": 3})
    assert capture(d, "ws", 4, "while-running")["refused"] == []
    types = [e["type"] for e in kernel.events(ex["id"])]
    assert types.count("resource.checkpointed") == 3 and "resource.checkpoint_failed" in types
    assert dec["decision"] == "proceed"


def test_capture_refused_while_a_writer_runs(kernel):
    kernel.create("coder", {})
    d = claim(kernel)
    register(d, every_steps=1)
    dec = d.submit("write", {"x": 1}, resources=["ws"])
    gen = dec["resources"][0]["generation"]
    assert capture(d, "ws", gen, "mid")["refused"] == [{"key": "ws", "reason": "writers_active"}]
    st, out = d.call("POST", "/steps", {"kind": "tool_call", "target": "w", "resources": ["undeclared"]})
    assert st == 400 and out["error"]["field"] == "resources"


def build_history(k):
    """baseline cp0 | write_a write_b (cp2 after b) | write_c write_d (no checkpoint)."""
    ex = k.create("coder", {"task": "fix"})
    d = claim(k)
    register(d, every_steps=2)
    capture(d, "ws", 0, "cp0")
    run_step(d, "write_a", resources=["ws"])
    run_step(d, "write_b", resources=["ws"], captures_ref="cp2")
    run_step(d, "write_c", resources=["ws"])
    run_step(d, "write_d", resources=["ws"])
    d.complete("done")
    return ex


def test_fork_points_and_restoration(kernel):
    ex = build_history(kernel)
    fp = kernel.ok("GET", f"/v0/executions/{ex['id']}/fork-points")
    assert fp["resources"] == {"ws": fp["resources"]["ws"]}
    refs = {c["checkpoint_ref"]: c for c in fp["checkpoints"]}
    assert set(refs) == {"cp0", "cp2"}
    events = {e["seq"]: e for e in fp["events"]}
    # Between the two checkpoints (after write_a started): not covered, restores cp0.
    a_exec = [e["seq"] for e in fp["events"] if e["type"] == "step.executing" and e["target"] == "write_a"][0]
    mid = a_exec + 1
    assert events[mid]["covered"] is False
    fork = kernel.ok("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": mid, "session": "fork-1"}, status=201)
    assert fork["forked_from"] == ex["id"] and fork["fork_seq"] == mid
    assert fork["restoration"]["ws"] == {"checkpoint_ref": "cp0", "checkpoint_seq": refs["cp0"]["covered_seq"],
                                         "covered": False}
    # Right after cp2 was taken: covered by cp2.
    at = refs["cp2"]["covered_seq"]
    assert events[at]["covered"] is True
    fork2 = kernel.ok("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": at}, status=201)
    assert fork2["restoration"]["ws"]["checkpoint_ref"] == "cp2" and fork2["restoration"]["ws"]["covered"]
    forked = [e for e in kernel.events(fork2["id"]) if e["type"] == "execution.forked"][0]
    assert forked["payload"]["restoration"] == fork2["restoration"]


def test_fork_replays_settled_steps_then_runs_live(kernel):
    ex = build_history(kernel)
    fp = kernel.ok("GET", f"/v0/executions/{ex['id']}/fork-points")
    b_done = [e["seq"] for e in fp["events"] if e["type"] == "step.succeeded" and e["target"] == "write_b"][0]
    fork = kernel.ok("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": b_done}, status=201)
    d = claim(kernel)
    assert d.exec_id == fork["id"]
    view = register(d)
    assert view["binding"] is None and view["checkpoint_ref"] == "cp2" and view["count"] == 2
    for target in ("write_a", "write_b"):
        dec = d.submit(target, {"n": target}, resources=["ws"])
        assert dec["decision"] == "replay" and dec["result"] == target
    dec = d.submit("write_c", {"n": "write_c"}, resources=["ws"])
    assert dec["decision"] == "proceed", "a step after the fork point must run live"
    # at_most_once effects in a fork need approval.
    eff = d.submit("open_pr", {"title": "x"}, idempotency="at_most_once")
    assert eff["decision"] == "blocked" and eff["rule_id"] == "__fork_effect"


def test_fork_validation(kernel):
    ex = build_history(kernel)
    last = kernel.ok("GET", f"/v0/executions/{ex['id']}")["last_seq"]
    for body, field, status in (({"at_seq": 0}, "at_seq", 400), ({"at_seq": last + 1}, "at_seq", 400),
                                ({}, "at_seq", 400), ({"at_seq": 1, "session": "bad name"}, "session", 400)):
        st, out = kernel.request("POST", f"/v0/executions/{ex['id']}/fork", body)
        assert st == status and out["error"]["field"] == field, (body, out)
    kernel.create("coder", {}, session="taken")
    st, out = kernel.request("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": 1, "session": "taken"})
    assert st == 409 and out["error"]["field"] == "session"


def test_cli_session_and_fork(kernel):
    from test_cli import cli
    import json as _json
    first = _json.loads(cli(kernel, "exec", "create", "coder", '{"task": "a"}', "--session", "fix-tests", "--json").stdout)
    second = _json.loads(cli(kernel, "exec", "create", "coder", '{"task": "b"}', "--session", "fix-tests",
                             "--json").stdout)
    assert first["session"] == second["session"] == "fix-tests" and second["status"] == "pending"
    d = claim(kernel)
    register(d, every_steps=2)
    capture(d, "ws", 0, "cp0")
    run_step(d, "write_a", resources=["ws"])
    run_step(d, "write_b", resources=["ws"], captures_ref="cp2")
    run_step(d, "write_c", resources=["ws"])
    d.complete("done", state={"turn": 1})
    points = cli(kernel, "exec", "fork-points", first["id"]).stdout
    assert "cp0" in points and "cp2" in points and "step.executing" in points
    fp = kernel.ok("GET", f"/v0/executions/{first['id']}/fork-points")
    mid = [e["seq"] for e in fp["events"] if e["type"] == "step.succeeded" and e["target"] == "write_a"][0]
    out = cli(kernel, "exec", "fork", first["id"], "--at", str(mid), "--session", "fix-tests-fork").stdout
    assert out.startswith("forked ") and "from checkpoint cp0" in out and "copied results may" in out
    fork_id = out.split()[1]
    got = cli(kernel, "exec", "get", fork_id).stdout
    assert "forked:" in got and first["id"] in got and "cp0" in got
    events = cli(kernel, "exec", "events", fork_id).stdout
    forked = [l for l in events.splitlines() if "execution.forked" in l][0]
    assert first["id"] in forked and f"at seq {mid}" in forked and "cp0" in forked
    p = cli(kernel, "exec", "fork", first["id"], check=False)
    assert p.returncode == 2 and "--at SEQ is required" in p.stderr
    # The second turn of the session was admitted when the first completed.
    assert kernel.ok("GET", f"/v0/executions/{second['id']}")["dispatch"]["state"] == "queued"


def test_resend_keeps_due_and_capture_resend_is_recorded_once(kernel):
    ex = kernel.create("coder", {})
    d = claim(kernel)
    register(d, every_steps=1)
    body = {"kind": "tool_call", "target": "w", "args": {}, "resources": ["ws"], "request_id": "r1"}
    st, first = d.call("POST", "/steps", body)
    st, again = d.call("POST", "/steps", body)          # reply lost, resent
    assert again["resources"] == first["resources"] == [{"key": "ws", "generation": 1, "due": True}]
    d.call("POST", f"/steps/{first['step_id']}/complete", {"result": 1})
    once = capture(d, "ws", 1, "cp-1")
    twice = capture(d, "ws", 1, "cp-1")                  # reply lost, resent
    assert once["recorded"] == twice["recorded"]
    types = [e["type"] for e in kernel.events(ex["id"])]
    assert types.count("resource.checkpointed") == 1


def test_fork_starts_covered_by_the_restored_checkpoint(kernel):
    ex = build_history(kernel)
    fp = kernel.ok("GET", f"/v0/executions/{ex['id']}/fork-points")
    at = [c for c in fp["checkpoints"] if c["checkpoint_ref"] == "cp2"][0]["covered_seq"]
    fork = kernel.ok("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": at}, status=201)
    d = claim(kernel)
    view = register(d)
    assert view["checkpoint_ref"] == "cp2" and view["covered"] is True, "no baseline needed after a restore"
    ffp = kernel.ok("GET", f"/v0/executions/{fork['id']}/fork-points")
    assert [c["checkpoint_ref"] for c in ffp["checkpoints"]] == ["cp2"]


def test_policy_can_allow_effects_in_forks(make_kernel):
    k = make_kernel("""
agents:
  - name: coder
    policy: |
      default_action: allow
      rules:
        - id: prs-in-forks
          when: {target: open_pr, forked: true}
          then: {decision: allow, reason: forks open their own PRs}
""").start()
    ex = build_history(k)
    fork = k.ok("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": 3}, status=201)
    d = claim(k)
    assert d.exec_id == fork["id"]
    pr = d.submit("open_pr", {"title": "x"}, idempotency="at_most_once")
    assert pr["decision"] == "proceed" and pr["rule_id"] == "prs-in-forks"
    other = d.submit("deploy", {}, idempotency="at_most_once")
    assert other["decision"] == "blocked" and other["rule_id"] == "__fork_effect"
