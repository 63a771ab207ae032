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
    st, out = d.call("POST", "/resources/checkpoints", {"captures": [{"key": key, "generation": generation,
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
    assert b["status"] == "pending" and b.get("dispatch") is None
    assert "execution.waiting" in [e["type"] for e in kernel.events(b["id"])]
    d = claim(kernel)
    assert d.exec_id == a["id"]
    assert kernel.claim("coder", kernel.worker("coder"), wait=0) is None, "second turn started too early"
    assert kernel.ok("GET", f"/v0/executions/{a['id']}/previous").get("state") is None
    assert d.complete({"answer": 1}, state={"messages": ["hi"]})[0] == 204
    d2 = claim(kernel)
    assert d2.exec_id == b["id"]
    prev = kernel.ok("GET", f"/v0/executions/{b['id']}/previous")
    assert prev == {"state": {"messages": ["hi"]}, "parent_execution_id": a["id"]}
    assert kernel.ok("GET", f"/v0/executions/{b['id']}")["parent_execution_id"] == a["id"]
    # Without state, previous() falls back to the output.
    assert d2.complete({"answer": 2})[0] == 204
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
    assert view.get("binding") is None and view["covered"] is False
    st, _ = d.call("POST", "/resources/ws/binding", {"binding": {"sandbox": "sbx-1"}})
    assert st == 204
    st, out = d.call("POST", "/resources/ws/binding", {"binding": {"sandbox": "other"}})
    assert st == 409 and out["code"] == "conflict"
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
    assert st == 400 and out["details"]["field"] == "resources"


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
    events = {e["event_seq"]: e for e in fp["events"]}
    # Between the two checkpoints (after write_a started): not covered, restores cp0.
    a_exec = [e["event_seq"] for e in fp["events"] if e["type"] == "step.executing" and e["target"] == "write_a"][0]
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
    b_done = [e["event_seq"] for e in fp["events"] if e["type"] == "step.succeeded" and e["target"] == "write_b"][0]
    fork = kernel.ok("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": b_done}, status=201)
    d = claim(kernel)
    assert d.exec_id == fork["id"]
    view = register(d)
    assert view.get("binding") is None and view["checkpoint_ref"] == "cp2" and view["count"] == 2
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
        assert st == status and out["details"]["field"] == field, (body, out)
    kernel.create("coder", {}, session="taken")
    st, out = kernel.request("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": 1, "session": "taken"})
    assert st == 409 and out["details"]["field"] == "session"


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
    mid = [e["event_seq"] for e in fp["events"] if e["type"] == "step.succeeded" and e["target"] == "write_a"][0]
    out = cli(kernel, "exec", "fork", first["id"], "--at", str(mid), "--session", "fix-tests-fork").stdout
    assert out.startswith("forked ") and "from checkpoint cp0" in out and "copied results may" in out
    fork_id = out.split()[1]
    got = cli(kernel, "exec", "get", fork_id).stdout
    assert "forked:" in got and first["id"] in got and "cp0" in got
    events = cli(kernel, "exec", "events", fork_id).stdout.splitlines()
    i = [n for n, l in enumerate(events) if "execution.forked" in l][0]
    assert first["id"] in events[i] and f"at seq {mid}" in events[i]
    cp0_seq = [c for c in fp["checkpoints"] if c["checkpoint_ref"] == "cp0"][0]["covered_seq"]
    assert events[i + 1] == (f"        ws: from checkpoint cp0 (seq {cp0_seq}, earlier than the fork point: "
                             "copied results may describe changes it lacks)")
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
    # The source's checkpoints taken by the fork point are copied; cp2 covers the fork point, so
    # it stays open and covers the fork's start (no second record of it), until the first live step.
    cps = {c["checkpoint_ref"]: c for c in ffp["checkpoints"]}
    assert [c["checkpoint_ref"] for c in ffp["checkpoints"]] == ["cp0", "cp2"]
    assert cps["cp0"]["invalidated_seq"] is not None and cps["cp2"]["invalidated_seq"] is None
    restored = [e["payload"] for e in kernel.events(fork["id"]) if e["type"] == "resource.checkpointed"
                and e["payload"].get("restored")]
    assert [p["checkpoint_ref"] for p in restored] == ["cp2"] and restored[0]["source_covered_seq"] == at
    dec = d.submit("write_x", {}, resources=["ws"])
    assert dec["decision"] == "proceed"
    assert register(d)["covered"] is False, "a live change ends the restored coverage"


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


# --- forks of forks ------------------------------------------------------------------------

def copied_events(k, eid):
    """{fork seq: source seq} of a fork's copied events."""
    return {e["event_seq"]: e["payload"]["copied_from_seq"] for e in k.events(eid) if "copied_from_seq" in e["payload"]}


def test_fork_of_a_fork_at_copied_events_restores_like_the_source(kernel):
    ex = build_history(kernel)
    src_fp = kernel.ok("GET", f"/v0/executions/{ex['id']}/fork-points")
    src_cps = {c["checkpoint_ref"]: c for c in src_fp["checkpoints"]}
    last = kernel.ok("GET", f"/v0/executions/{ex['id']}")["last_seq"]
    # The first fork, at the source's end: after write_d, which cp2 no longer covers.
    f1 = kernel.ok("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": last}, status=201)
    assert f1["restoration"] == {"ws": {"checkpoint_ref": "cp2", "checkpoint_seq": src_cps["cp2"]["covered_seq"],
                                        "covered": False}}
    events = kernel.events(f1["id"])
    # The fork's first event records its origin and restoration; execution.forked too.
    assert events[0]["type"] == "execution.created" and events[1]["type"] == "execution.forked"
    created = events[0]["payload"]
    assert (created["forked_from"], created["fork_seq"], created["restoration"]) == (ex["id"], last,
                                                                                      f1["restoration"])
    assert events[1]["payload"] == {"source_execution_id": ex["id"], "fork_seq": last,
                                    "restoration": f1["restoration"]}
    # The resource exists from the fork's beginning, before the copied steps.
    assert [e["type"] for e in events[2:4]] == ["resource.registered", "resource.initialized"]
    fp = kernel.ok("GET", f"/v0/executions/{f1['id']}/fork-points")
    assert fp["resources"] == {"ws": 3}
    copied = copied_events(kernel, f1["id"])
    assert len(copied) == 16 and min(copied) > 4  # 4 steps x proposed/allowed/executing/succeeded
    # fork-points marks a copied event covered exactly when its source event is.
    src_cov = {e["event_seq"]: e["covered"] for e in src_fp["events"]}
    cov = {e["event_seq"]: e["covered"] for e in fp["events"]}
    assert {s: cov[s] for s in copied} == {s: src_cov[c] for s, c in copied.items()}
    assert 0 < sum(cov[s] for s in copied) < len(copied), "some copied events covered, some not"
    # Forking the fork at a copied event restores what forking the source there restores.
    f1_cps = {(c["checkpoint_ref"], c["generation"]): c for c in fp["checkpoints"]}
    for seq, src_seq in sorted(copied.items()):
        via_fork = kernel.ok("POST", f"/v0/executions/{f1['id']}/fork", {"at_seq": seq}, status=201)["restoration"]
        direct = kernel.ok("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": src_seq}, status=201)["restoration"]
        assert via_fork.keys() == direct.keys() == {"ws"}, (seq, via_fork)
        got, want = via_fork["ws"], direct["ws"]
        assert (got["checkpoint_ref"], got["covered"]) == (want["checkpoint_ref"], want["covered"]), (seq, src_seq)
        # checkpoint_seq is in the first fork's numbering: the copied checkpoint's covered_seq
        assert got["checkpoint_seq"] in [c["covered_seq"] for c in fp["checkpoints"]
                                         if c["checkpoint_ref"] == got["checkpoint_ref"]]
        assert got["checkpoint_seq"] <= seq
    # The right checkpoints at the telling points: after write_b (cp2 covers it), after write_a
    # (between the checkpoints: cp0, uncovered).
    by_src = {c: s for s, c in copied.items()}
    src_events = {e["event_seq"]: e for e in src_fp["events"]}
    b_done = [s for s, e in src_events.items() if e["type"] == "step.succeeded" and e["target"] == "write_b"][0]
    a_done = [s for s, e in src_events.items() if e["type"] == "step.succeeded" and e["target"] == "write_a"][0]
    at_b = kernel.ok("POST", f"/v0/executions/{f1['id']}/fork", {"at_seq": by_src[b_done]}, status=201)
    assert at_b["restoration"]["ws"] == {"checkpoint_ref": "cp2", "checkpoint_seq": by_src[b_done], "covered": True}
    at_a = kernel.ok("POST", f"/v0/executions/{f1['id']}/fork", {"at_seq": by_src[a_done]}, status=201)
    assert at_a["restoration"]["ws"]["checkpoint_ref"] == "cp0" and not at_a["restoration"]["ws"]["covered"]
    # The copies: cp0 and cp2 closed where the source closed them; cp2 recorded once more as
    # covering the fork from the end of the copies, because the fork point was not covered.
    # (in a generation of its own: the copies keep theirs).
    assert sorted(f1_cps) == [("cp0", 0), ("cp2", 2), ("cp2", 3)]
    assert f1_cps[("cp0", 0)]["invalidated_seq"] is not None and f1_cps[("cp2", 2)]["invalidated_seq"] is not None
    assert f1_cps[("cp2", 3)]["invalidated_seq"] is None and f1_cps[("cp2", 3)]["covered_seq"] > max(copied)
    # So the fork's own start is covered, and a fork of it there restores cp2 as covering.
    f1_last = kernel.ok("GET", f"/v0/executions/{f1['id']}")["last_seq"]
    assert cov[f1_last] is True
    at_end = kernel.ok("POST", f"/v0/executions/{f1['id']}/fork", {"at_seq": f1_last}, status=201)
    assert at_end["restoration"]["ws"] == {"checkpoint_ref": "cp2", "checkpoint_seq": f1_cps[("cp2", 3)]["covered_seq"],
                                           "covered": True}
    # The first fork's agent creates the resource from cp2, already covered: no baseline needed.
    d = claim(kernel)
    assert d.exec_id == f1["id"]
    view = register(d)
    assert view["checkpoint_ref"] == "cp2" and view["covered"] and view["generation"] == 3 and view["count"] == 4
    # The CLI marks the same events covered.
    from test_cli import cli
    marks = {}
    for line in cli(kernel, "exec", "fork-points", f1["id"]).stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "*" and parts[1].isdigit():
            marks[int(parts[1])] = True
        elif len(parts) >= 2 and parts[0].isdigit() and "." in parts[1]:
            marks[int(parts[0])] = False
    assert {s: marks[s] for s in copied} == {s: cov[s] for s in copied}


def test_fork_of_a_fork_of_a_fork_keeps_the_coverage(kernel):
    """Copies of copies: the second fork's copied events are covered as the source's were."""
    ex = build_history(kernel)
    src_fp = kernel.ok("GET", f"/v0/executions/{ex['id']}/fork-points")
    src_cov = {e["event_seq"]: e["covered"] for e in src_fp["events"]}
    last = kernel.ok("GET", f"/v0/executions/{ex['id']}")["last_seq"]
    f1 = kernel.ok("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": last}, status=201)
    f1_last = kernel.ok("GET", f"/v0/executions/{f1['id']}")["last_seq"]
    f2 = kernel.ok("POST", f"/v0/executions/{f1['id']}/fork", {"at_seq": f1_last}, status=201)
    assert f2["restoration"]["ws"]["checkpoint_ref"] == "cp2" and f2["restoration"]["ws"]["covered"]
    to_f1, to_src = copied_events(kernel, f2["id"]), copied_events(kernel, f1["id"])
    assert len(to_f1) == 16
    cov = {e["event_seq"]: e["covered"] for e in kernel.ok("GET", f"/v0/executions/{f2['id']}/fork-points")["events"]}
    assert {s: cov[s] for s in to_f1} == {s: src_cov[to_src[c]] for s, c in to_f1.items()}


# --- session turns inherit coverage ----------------------------------------------------------

def test_session_turn_starts_covered_by_the_parents_last_checkpoint(kernel):
    one = kernel.create("coder", {}, session="cov")
    d = claim(kernel)
    register(d, every_steps=1)
    capture(d, "ws", 0, "cp-base")
    d.call("POST", "/resources/ws/binding", {"binding": {"dir": "w1"}})
    run_step(d, "write_a", resources=["ws"], captures_ref="cp-a")  # due: covers turn 1's end
    d.complete("one")
    two = kernel.create("coder", {}, session="cov")
    events = kernel.events(two["id"])
    inherited = [e for e in events if e["type"] == "resource.checkpointed"]
    assert len(inherited) == 1 and inherited[0]["payload"]["checkpoint_ref"] == "cp-a"
    assert inherited[0]["payload"]["inherited_from"] == one["id"] and inherited[0]["payload"]["generation"] == 0
    d2 = claim(kernel)
    view = register(d2, every_steps=1)
    assert view["binding"] == {"dir": "w1"} and view["covered"] is True, "no baseline needed"
    # A fork of turn 2 before its first checkpoint restores turn 1's last one, covering.
    claimed = [e["event_seq"] for e in kernel.events(two["id"]) if e["type"] == "dispatch.claimed"][0]
    fork = kernel.ok("POST", f"/v0/executions/{two['id']}/fork", {"at_seq": claimed}, status=201)
    assert fork["restoration"]["ws"]["checkpoint_ref"] == "cp-a" and fork["restoration"]["ws"]["covered"]
    kernel.ok("POST", f"/v0/executions/{fork['id']}/cancel", {})
    # A live change ends it, as for any checkpoint.
    run_step(d2, "write_b", resources=["ws"])
    assert register(d2)["covered"] is False
    d2.complete("two")
    # When the parent's last checkpoint does not cover its end, the next turn starts uncovered.
    three = kernel.create("coder", {}, session="cov")
    assert "resource.checkpointed" not in [e["type"] for e in kernel.events(three["id"])]
    d3 = claim(kernel)
    assert d3.exec_id == three["id"] and register(d3)["covered"] is False


# --- orphans of a dead worker ---------------------------------------------------------------

SHORT_LEASE = """
agents:
  - name: coder
    lease_timeout_seconds: 1
"""


def test_redispatch_baseline_is_not_refused_by_the_dead_workers_step(make_kernel):
    k = make_kernel(SHORT_LEASE).start()
    ex = k.create("coder", {})
    d1 = claim(k)
    register(d1, every_steps=5)
    capture(d1, "ws", 0, "cp0")
    dec = d1.submit("hold", {}, resources=["ws"])          # the worker dies while this runs
    assert dec["decision"] == "proceed"
    d2 = Dispatch(k, k.claim("coder", k.worker("coder"), wait=5))
    assert d2.attempt == 2
    view = register(d2)
    assert not view["covered"]
    # The re-dispatch's baseline: the orphan from attempt 1 is not an active writer.
    out = capture(d2, "ws", view["generation"], "cp-redispatch")
    assert out["refused"] == [] and out["recorded"][0]["key"] == "ws"
    # Once this attempt resubmits it, the step runs again and is a writer.
    again = d2.submit("hold", {}, resources=["ws"])
    assert again["decision"] == "proceed" and again["step_id"] == dec["step_id"]
    gen = again["resources"][0]["generation"]
    assert capture(d2, "ws", gen, "mid")["refused"] == [{"key": "ws", "reason": "writers_active"}]
    d2.call("POST", f"/steps/{again['step_id']}/complete", {"result": "held"})
    assert capture(d2, "ws", gen, "after")["refused"] == []
    failed = [e["payload"] for e in k.events(ex["id"]) if e["type"] == "resource.checkpoint_failed"]
    assert failed == [{"key": "ws", "generation": gen, "error": "writers_active"}]


# --- the CLI ------------------------------------------------------------------------------------

def plain_last(k, ex):
    return k.ok("GET", f"/v0/executions/{ex['id']}")["last_seq"]


def test_cli_watch_shows_a_forks_restoration(kernel):
    from test_cli import cli
    ex = build_history(kernel)
    fp = kernel.ok("GET", f"/v0/executions/{ex['id']}/fork-points")
    cps = {c["checkpoint_ref"]: c["covered_seq"] for c in fp["checkpoints"]}
    # The fork registers a second resource and checkpoints it with a long ref; a fork of the
    # fork lists both, the long ref whole.
    long_ref = "snapshot-" + "x" * 150
    at = cps["cp2"]
    fork = kernel.ok("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": at}, status=201)
    d = claim(kernel)
    assert d.exec_id == fork["id"]
    register(d, key="cache", every_steps=1)
    capture(d, "cache", 0, long_ref)
    d.complete("done")
    fork2 = kernel.ok("POST", f"/v0/executions/{fork['id']}/fork",
                      {"at_seq": kernel.ok("GET", f"/v0/executions/{fork['id']}")["last_seq"]}, status=201)
    kernel.ok("POST", f"/v0/executions/{fork2['id']}/cancel", {"reason": "enough"})
    p = cli(kernel, "exec", "watch", fork2["id"], check=False, timeout=20)
    assert p.returncode == 1, (p.stdout, p.stderr)  # cancelled
    lines = p.stdout.splitlines()
    i = [n for n, l in enumerate(lines) if "execution.forked" in l][0]
    assert fork["id"] in lines[i] and "at seq" in lines[i]
    f_cps = {c["checkpoint_ref"]: c["covered_seq"]
             for c in kernel.ok("GET", f"/v0/executions/{fork['id']}/fork-points")["checkpoints"]}
    assert lines[i + 1:i + 3] == [
        f"        ws: from checkpoint cp2 (seq {f_cps['cp2']}, covers the fork point)",
        f"        cache: from checkpoint {long_ref} (seq {f_cps[long_ref]}, covers the fork point)"]
    assert "execution.cancelled" in p.stdout and f"execution {fork2['id']} cancelled: enough" in p.stdout
    created = [l for l in lines if "execution.created" in l][0]
    assert "forked from" in created and "checkpoint_ref" not in created  # its input, not the restoration
    # exec events prints the same lines; a fresh resource says so.
    plain = kernel.create("coder", {})
    d = claim(kernel)
    register(d, every_steps=0)
    run_step(d, "write_a", resources=["ws"])
    d.complete("done")
    fresh = kernel.ok("POST", f"/v0/executions/{plain['id']}/fork", {"at_seq": plain_last(kernel, plain)},
                      status=201)
    assert fresh["restoration"]["ws"].get("checkpoint_ref") is None
    out = cli(kernel, "exec", "events", fresh["id"]).stdout.splitlines()
    i = [n for n, l in enumerate(out) if "execution.forked" in l][0]
    assert out[i + 1] == "        ws: fresh (no checkpoint at or before the fork point)"


def test_cli_fork_points_pages_through_long_histories(kernel):
    from test_cli import cli
    import json as _json
    ex = kernel.create("coder", {})
    d = claim(kernel)
    # 4 events a step: more than the kernel's largest page (10000), so one request cannot do
    for i in range(2510):
        dec = d.submit("step", {"i": i})
        d.finish(dec["step_id"], result=i)
    d.complete("done")
    last = kernel.ok("GET", f"/v0/executions/{ex['id']}")["last_seq"]
    assert last > 10000
    fp = _json.loads(cli(kernel, "exec", "fork-points", ex["id"], "--json").stdout)
    assert [e["event_seq"] for e in fp["events"]] == list(range(1, last + 1)) and fp["latest_seq"] == last
    text = cli(kernel, "exec", "fork-points", ex["id"]).stdout.splitlines()
    seqs = [int(l.split()[1 if l.lstrip().startswith("*") else 0]) for l in text[text.index(
        next(l for l in text if l.startswith("events"))) + 1:]]
    assert seqs == list(range(1, last + 1))
