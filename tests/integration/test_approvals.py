"""Policy decisions and the approval flow (grant, deny, expiry)."""
import time

from conftest import Dispatch

POLICY = """
agents:
  - name: coder
    lease_timeout_seconds: 30
    policy: |
      default_action: deny
      rules:
        - id: allow-llm
          when:
            step_kind: llm_call
          then:
            decision: allow
        - id: allow-sandbox
          when:
            targets: [shell, read_file, write_file]
          then:
            decision: allow
        - id: open-pr
          when:
            target: open_pr
          then:
            decision: require_approval
            reason: opening a pull request needs approval
        - id: quick
          when:
            target: deploy
          then:
            decision: require_approval
            reason: deploys expire fast
            approval:
              timeout: 1s
              approvers: [alice]
"""


def start(make_kernel):
    k = make_kernel(POLICY, mode="server").start()
    return k


def blocked_execution(k, target="open_pr"):
    ex = k.create("coder", {"task": "fix"})
    d = Dispatch(k, k.claim("coder", k.worker("coder")))
    assert d.submit("shell", {"command": "make test"})["decision"] == "proceed"
    dec = d.submit(target, {"title": "Fix"}, idempotency="at_most_once")
    assert dec["decision"] == "blocked", dec
    return ex, d, dec


def test_policy_decisions(make_kernel):
    k = start(make_kernel)
    k.create("coder", {})
    d = Dispatch(k, k.claim("coder", k.worker("coder")))
    assert d.submit("chat", {"model": "m"}, kind="llm_call")["rule_id"] == "allow-llm"
    assert d.submit("read_file", {"path": "x"})["rule_id"] == "allow-sandbox"
    denied = d.submit("rm_rf", {})
    assert denied["decision"] == "denied" and denied["rule_id"] == "default"
    # local steps need no rule even with default_action: deny
    assert d.submit("find_sandbox", {}, kind="local")["decision"] == "proceed"
    # a denied step is denied again on resubmission
    assert d.submit("rm_rf", {})["decision"] == "denied"


def test_unknown_agent_in_server_mode(make_kernel):
    k = start(make_kernel)
    st, out = k.request("POST", "/v0/executions", {"agent_id": "nobody"})
    assert st == 404 and out["details"]["field"] == "agent_id"


def test_grant_resumes_and_step_runs_once(make_kernel):
    k = start(make_kernel)
    ex, d, dec = blocked_execution(k)
    got = k.ok("GET", f"/v0/executions/{ex['id']}")
    assert got["status"] == "blocked" and got["dispatch"]["state"] == "released"
    # While blocked nothing new may start (a second identical call is a new occurrence).
    assert d.submit("open_pr", {"title": "Fix"}, idempotency="at_most_once")["decision"] == "execution_blocked"
    assert d.submit("shell", {"command": "ls"})["decision"] == "execution_blocked"
    approvals = k.ok("GET", f"/v0/approvals?execution_id={ex['id']}")
    assert len(approvals) == 1 and approvals[0]["target"] == "open_pr"
    assert approvals[0]["reason"] == "opening a pull request needs approval"
    st, out = k.request("POST", f"/v0/approvals/{dec['approval_id']}/grant", {"decided_by": "bob", "rationale": "looks good"})
    assert st == 204 and out is None
    out = k.ok("GET", f"/v0/approvals/{dec['approval_id']}")
    assert out["status"] == "granted" and out["decided_by"] == "bob" and out["rationale"] == "looks good"
    st, out = k.request("POST", f"/v0/approvals/{dec['approval_id']}/deny", {"decided_by": "eve"})
    assert st == 409 and out["code"] == "conflict"
    # The resumed execution is dispatched again; replay up to the held call, which proceeds.
    d2 = Dispatch(k, k.claim("coder", k.worker("coder"), wait=5))
    assert d2.id != d.id
    assert d2.submit("shell", {"command": "make test"})["decision"] == "proceed"  # never finished: re-run
    go = d2.submit("open_pr", {"title": "Fix"}, idempotency="at_most_once")
    assert go["decision"] == "proceed" and go["step_id"] == dec["step_id"]
    d2.finish(go["step_id"], result={"pr": 1})
    st, _ = d.call("POST", "/heartbeat")
    assert st == 409  # the old dispatch is superseded
    assert d2.complete("done")[0] == 204
    types = [e["type"] for e in k.events(ex["id"])]
    for t in ("step.awaiting_approval", "approval.requested", "execution.blocked", "approval.granted",
              "step.allowed", "execution.resumed"):
        assert t in types, t


def test_deny_gives_a_refusal(make_kernel):
    k = start(make_kernel)
    ex, d, dec = blocked_execution(k)
    k.ok("POST", f"/v0/approvals/{dec['approval_id']}/deny", {"decided_by": "bob", "rationale": "not now"})
    assert k.ok("GET", f"/v0/executions/{ex['id']}")["status"] == "running"
    d2 = Dispatch(k, k.claim("coder", k.worker("coder"), wait=5))
    d2.submit("shell", {"command": "make test"})
    res = d2.submit("open_pr", {"title": "Fix"}, idempotency="at_most_once")
    assert res["decision"] == "denied" and res["reason"] == "not now"


def test_expiry_denies_and_resumes(make_kernel):
    k = start(make_kernel)
    ex, d, dec = blocked_execution(k, target="deploy")
    deadline = time.time() + 5
    while time.time() < deadline:
        a = k.ok("GET", f"/v0/approvals/{dec['approval_id']}")
        if a["status"] != "pending":
            break
        time.sleep(0.1)
    assert a["status"] == "expired"
    d2 = Dispatch(k, k.claim("coder", k.worker("coder"), wait=5))
    d2.submit("shell", {"command": "make test"})
    res = d2.submit("deploy", {"title": "Fix"}, idempotency="at_most_once")
    assert res["decision"] == "denied" and res["reason"] == "approval_timeout"


def test_approvers_are_enforced(make_kernel):
    k = start(make_kernel)
    ex, d, dec = blocked_execution(k, target="deploy")
    st, out = k.request("POST", f"/v0/approvals/{dec['approval_id']}/grant", {"decided_by": "mallory"})
    assert st == 403 and out["details"]["field"] == "by"


def test_cancel_expires_pending_approval(make_kernel):
    k = start(make_kernel)
    ex, d, dec = blocked_execution(k)
    k.ok("POST", f"/v0/executions/{ex['id']}/cancel", {})
    assert k.ok("GET", f"/v0/approvals/{dec['approval_id']}")["status"] == "expired"
