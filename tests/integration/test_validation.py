"""Every malformed input gets a 4xx with a clear JSON error and changes nothing."""
import json
import re

import pytest

from conftest import Dispatch
from test_approvals import POLICY


def snapshot(k):
    execs = k.ok("GET", "/v0/executions?limit=200")["executions"]
    return json.dumps([(e["id"], e["status"], e["last_seq"]) for e in execs])


def full_snapshot(k):
    """Every execution with its events, and every approval: what a refused request must not touch."""
    execs = k.ok("GET", "/v0/executions?limit=200")["executions"]
    events = {e["id"]: k.events(e["id"]) for e in execs}
    approvals = k.ok("GET", "/v0/approvals?status=all")
    return json.dumps([execs, events, approvals], sort_keys=True)


def assert_error(st, out, status, code, field=None):
    assert st == status, (st, out)
    assert isinstance(out, dict) and set(out) <= {"code", "message", "details"}, out
    assert out["code"] == code, out
    assert out["message"], out
    if field is not None:
        assert out.get("details", {}).get("field") == field, out


@pytest.mark.parametrize("raw,field", [
    (b"{not json", "body"),
    (b'{"agent_id": "hello", "agent_id": "x"}', "body"),     # duplicate key
    (b'[1,2]', "body"),
    (b'{"agent_id": 5}', "agent_id"),
    (b'{"agent_id": ""}', "agent_id"),
    (b'{}', "agent_id"),
    (b'{"agent_id": "hello", "colour": "red"}', "colour"),
    (b'{"agent_id": "hello", "deadline_seconds": "soon"}', "deadline_seconds"),
    (b'{"agent_id": "hello", "deadline_seconds": -1}', "deadline_seconds"),
    (b'{"agent_id": "hello", "deadline_seconds": 1.5}', "deadline_seconds"),
])
def test_bad_create_bodies(kernel, raw, field):
    before = snapshot(kernel)
    st, out = kernel.request("POST", "/v0/executions", raw=raw)
    assert_error(st, out, 400, "validation_error", field)
    assert snapshot(kernel) == before


def test_oversize_body(kernel):
    before = snapshot(kernel)
    big = b'{"agent_id": "hello", "input": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    try:
        st, out = kernel.request("POST", "/v0/executions", raw=big)
        assert_error(st, out, 413, "payload_too_large")
    except (ConnectionResetError, BrokenPipeError):
        pass  # the server may close before reading the whole body; either way nothing is stored
    assert snapshot(kernel) == before


def test_unknown_ids_and_routes(kernel):
    for path in ("/v0/executions/0192f1a0-0000-7000-8000-000000000000",
                 "/v0/executions/not-a-uuid", "/v0/approvals/0192f1a0-0000-7000-8000-000000000000",
                 "/v0/executions/0192f1a0-0000-7000-8000-000000000000/events"):
        st, out = kernel.request("GET", path)
        assert_error(st, out, 404, "not_found")
    st, out = kernel.request("GET", "/v0/nope")
    assert_error(st, out, 404, "not_found")
    st, out = kernel.request("DELETE", "/v0/executions")
    assert_error(st, out, 405, "method_not_allowed")


def test_bad_queries(kernel):
    ex = kernel.create("hello", {})
    before = full_snapshot(kernel)
    for q, field in (("limit=0", "limit"), ("limit=abc", "limit"), ("status=done", "status"),
                     ("cursor=xyz", "cursor")):
        st, out = kernel.request("GET", f"/v0/executions?{q}")
        assert_error(st, out, 400, "validation_error", field)
    # Unknown query parameters are refused like unknown body fields, naming the parameter
    # and what the route takes; so is a repeated one (every parameter is single-valued).
    e = f"/v0/executions/{ex['id']}"
    cases = [
        ("GET", "/v0/executions?bogus=1", None, "bogus", "agent_id, status, session, created_after, created_before, cursor, limit"),
        ("GET", "/v0/executions?agent_id=hello&stauts=failed", None, "stauts", "status"),
        ("GET", "/v0/executions?status=running&status=failed", None, "status", "more than once"),
        ("GET", "/v0/executions?limit=1&limit=2", None, "limit", "more than once"),
        ("GET", f"{e}/events?after_seq=0&before=9", None, "before", "after_seq, limit"),
        ("GET", f"{e}/events?after_seq=1&after_seq=2", None, "after_seq", "more than once"),
        ("GET", f"{e}/events/stream?limit=5", None, "limit", "after_seq"),
        ("GET", f"{e}/fork-points?from=1", None, "from", "after, limit"),
        ("GET", "/v0/approvals?state=pending", None, "state", "status, execution_id"),
        ("GET", "/v0/approvals?status=pending&status=granted", None, "status", "more than once"),
        ("GET", f"{e}?verbose", None, "verbose", "no query parameters"),
        ("GET", "/v0/agents?x=1", None, "x", "no query parameters"),
        ("GET", "/v0/health?probe=1", None, "probe", "no query parameters"),
        ("POST", "/v0/executions?agent_id=hello", {"agent_id": "hello"}, "agent_id", "no query parameters"),
        ("POST", f"{e}/cancel?force=1", {}, "force", "no query parameters"),
        ("POST", "/v0/agents/hello/claim?wait_seconds=0",
         {"worker_id": "0192f1a0-0000-7000-8000-000000000000"}, "wait_seconds", "no query parameters"),
    ]
    for method, path, body, field, text in cases:
        st, out = kernel.request(method, path, body)
        assert_error(st, out, 400, "validation_error", field)
        assert f'"{field}"' in out["message"] and text in out["message"], (path, out)
    assert full_snapshot(kernel) == before
    # Every parameter a route documents is still accepted.
    assert kernel.ok("GET", "/v0/executions?agent_id=hello&status=pending&session=s&limit=5")["executions"] == []
    kernel.ok("GET", f"/v0/executions?cursor={ex['id']}&limit=1")
    kernel.ok("GET", f"{e}/events?after_seq=0&limit=5")
    kernel.ok("GET", f"{e}/fork-points?after=0&limit=5")
    kernel.ok("GET", f"/v0/approvals?status=all&execution_id={ex['id']}")


def test_bad_step_submissions(kernel):
    ex = kernel.create("hello", {})
    d = Dispatch(kernel, kernel.claim("hello", kernel.worker("hello")))
    before = kernel.ok("GET", f"/v0/executions/{ex['id']}")["last_seq"]
    cases = [
        ({"kind": "shell_call", "target": "x"}, "kind"),
        ({"kind": "tool_call"}, "target"),
        ({"kind": "tool_call", "target": "x", "idempotency": "maybe"}, "idempotency"),
        ({"kind": "tool_call", "target": "x", "extra": 1}, "extra"),
        ({"kind": "tool_call", "target": "x" * 300}, "target"),
    ]
    for body, field in cases:
        st, out = d.call("POST", "/steps", body)
        assert_error(st, out, 400, "validation_error", field)
    # Missing dispatch headers
    st, out = kernel.request("POST", f"/v0/executions/{ex['id']}/steps", {"kind": "tool_call", "target": "x"})
    assert_error(st, out, 400, "validation_error", "Rebuno-Dispatch-Id")
    st, out = kernel.request("POST", f"/v0/executions/{ex['id']}/steps", {"kind": "tool_call", "target": "x"},
                             headers={"Rebuno-Dispatch-Id": d.id, "Rebuno-Dispatch-Attempt": "zero"})
    assert_error(st, out, 400, "validation_error", "Rebuno-Dispatch-Attempt")
    # Unknown step
    st, out = d.call("POST", "/steps/" + "0" * 64 + "/complete", {"result": 1})
    assert_error(st, out, 404, "not_found")
    st, out = d.call("POST", "/steps/abc/fail", {})
    assert_error(st, out, 400, "validation_error", "error")
    assert kernel.ok("GET", f"/v0/executions/{ex['id']}")["last_seq"] == before


def test_bad_claims_and_decisions(make_kernel):
    k = make_kernel(POLICY, mode="server").start()
    # A pending approval a bad decision could settle, and a queued execution a bad claim could take.
    k.create("coder", {"task": "blocked"})
    d = Dispatch(k, k.claim("coder", k.worker("coder")))
    dec = d.submit("open_pr", {"title": "x"}, idempotency="at_most_once")
    assert dec["decision"] == "blocked", dec
    k.create("coder", {"task": "queued"})
    approval = f"/v0/approvals/{dec['approval_id']}"
    w = k.worker("coder")
    before = full_snapshot(k)
    st, out = k.request("POST", "/v0/agents/coder/claim", {"worker_id": "w1"})
    assert_error(st, out, 400, "validation_error", "worker_id")
    st, out = k.request("POST", "/v0/agents/coder/claim", {"worker_id": w, "wait_seconds": 600})
    assert_error(st, out, 400, "validation_error", "wait_seconds")
    st, out = k.request("POST", "/v0/agents/coder/claim", {"worker_id": w, "wait_seconds": 0, "greedy": True})
    assert_error(st, out, 400, "validation_error", "greedy")
    st, out = k.request("POST", "/v0/agents/coder/claim", {"worker_id": w, "wait_seconds": "0"})
    assert_error(st, out, 400, "validation_error", "wait_seconds")
    for verb in ("grant", "deny"):
        st, out = k.request("POST", f"{approval}/{verb}", {})
        assert_error(st, out, 400, "validation_error", "decided_by")
        st, out = k.request("POST", f"{approval}/{verb}", {"decided_by": 5})
        assert_error(st, out, 400, "validation_error", "decided_by")
        st, out = k.request("POST", f"{approval}/{verb}", {"decided_by": "me", "why": "x"})
        assert_error(st, out, 400, "validation_error", "why")
        st, out = k.request("POST", f"{approval}/{verb}", raw=b'{"by": "me"')
        assert_error(st, out, 400, "validation_error", "body")
    st, out = k.request("POST", "/v0/approvals/0192f1a0-0000-7000-8000-000000000000/grant", {"decided_by": "me"})
    assert_error(st, out, 404, "not_found")
    assert full_snapshot(k) == before


def test_bad_policy_fails_boot_with_location(make_kernel):
    k = make_kernel("""
agents:
  - name: coder
    policy: |
      default_action: deny
      rules:
        - id: a
          when:
            targett: shell
          then:
            decision: allow
""", mode="server")
    k.start(wait=False)
    assert k.proc.wait(10) != 0
    log = k.read_log()
    assert re.search(r"rebuno\.yaml:\d+:\d+: ", log) and "targett" in log, log
    # The error says what to write instead.
    assert re.search(r'unknown key "targett".*expected one of: [^\n]*\btarget\b', log), log


def test_bad_config_key(make_kernel):
    k = make_kernel("listen: 127.0.0.1:0\nlease_timout_seconds: 5\n")
    k.start(wait=False)
    assert k.proc.wait(10) != 0
    log = k.read_log()
    assert "rebuno.yaml:2:1" in log and "lease_timout_seconds" in log, log


@pytest.mark.parametrize("name", ["evil\nagent", "bell\x07", "esc\x1b[2J", "tab\tname", "sp ace",
                                  "quo\"te", "x" * 129, "a/b"])
def test_agent_names_are_plain(kernel, name):
    """An agent name ends up in the store, the logs and operators' terminals: control
    characters, spaces, quotes and '/' are refused everywhere a name comes in, and nothing
    is registered."""
    from urllib.parse import quote
    before = full_snapshot(kernel)
    agents_before = kernel.ok("GET", "/v0/agents")
    st, out = kernel.request("POST", "/v0/executions", {"agent_id": name, "input": {}})
    assert_error(st, out, 400, "validation_error", "agent_id")
    st, out = kernel.request("GET", "/v0/executions?agent_id=" + quote(name, safe=""))
    assert_error(st, out, 400, "validation_error", "agent_id")
    if "/" not in name:  # a '/' makes another route; it can never be one segment
        seg = quote(name, safe="")
        st, out = kernel.request("POST", f"/v0/agents/{seg}/workers", {})
        assert_error(st, out, 400, "validation_error", "agent_id")
        st, out = kernel.request("POST", f"/v0/agents/{seg}/claim",
                                 {"worker_id": "0192f1a0-0000-7000-8000-000000000000"})
        assert_error(st, out, 400, "validation_error", "agent_id")
    assert full_snapshot(kernel) == before
    assert kernel.ok("GET", "/v0/agents") == agents_before
    # the names that are allowed still are
    kernel.create("team.coder:v2_a-1", {})


def test_bad_agent_name_in_config(make_kernel):
    k = make_kernel("agents:\n  - name: \"two words\"\n")
    k.start(wait=False)
    assert k.proc.wait(10) != 0
    log = k.read_log()
    assert "rebuno.yaml:2" in log and "two words" in log and "letters, digits" in log, log
