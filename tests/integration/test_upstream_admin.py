"""Upstream Rebuno's admin surface against the real kernel (issue 18): policy dry runs
(POST /v0/policies/{agent}/test, cases and execution replay) and reading an agent's
policy back."""
import pytest

from test_upstream_wire import ADMIN, CLIENT, SECRET, Signed, config, create


@pytest.fixture
def kernel(make_kernel):
    return make_kernel(config("up", lease=30), mode="server").start()


def claim(k, agent="up"):
    api = Signed(k.port, agent, SECRET)
    w = api.ok("POST", f"/v0/agents/{agent}/workers", {})["worker_id"]
    c = api.ok("POST", f"/v0/agents/{agent}/claim", {"worker_id": w, "wait_seconds": 5})
    return api, (c["dispatch"]["id"], c["dispatch"]["attempt"])


def test_policy_dry_run_cases(kernel):
    k = kernel
    cases = [
        {"name": "pr", "target": "open_pr", "expect": "require_approval", "expect_rule": "gate-pr"},
        {"target": "rm", "args": {"path": "/"}, "expect": "allow"},
        {"kind": "llm_call", "target": "gpt", "expect_rule": "default"},
    ]
    rep = k.ok("POST", "/v0/policies/up/test", {"cases": cases}, key=ADMIN)
    r0, r1, r2 = rep["results"]
    # no-rm (priority 10) is evaluated before gate-pr (priority 20)
    assert r0["decision"] == "require_approval" and r0["rule_id"] == "gate-pr" and r0["pass"] is True
    assert r0["rule"] == {"id": "gate-pr", "position": 2, "priority": 20}
    assert r0["reason"] == "opening a pull request needs approval" and r0["kind"] == "tool_call"
    assert r0["agent_id"] == "up"
    assert r1["decision"] == "deny" and r1["rule"]["position"] == 1 and r1["pass"] is False
    assert r1["failure"] == "deny, want allow" and r1["args"] == {"path": "/"}
    assert r2["decision"] == "allow" and r2["rule_id"] == "default" and "rule" not in r2 and r2["pass"]
    assert rep["failed"] == 1 and "unexercised_rules" not in rep
    # a bundle given in the request is tried instead of the stored one, and stored nowhere
    bundle = "default_action: deny\nrules:\n  - id: ok-ls\n    when: {target: ls}\n    then: {decision: allow}\n" \
             "  - id: never\n    when: {target: nothing}\n    then: {decision: deny}\n"
    rep = k.ok("POST", "/v0/policies/up/test", {"bundle": bundle, "cases": [{"target": "ls"}, {"target": "x"}]},
               key=ADMIN)
    assert [(r["decision"], r["rule_id"]) for r in rep["results"]] == [("allow", "ok-ls"), ("deny", "default")]
    assert rep["unexercised_rules"] == ["never"] and rep["failed"] == 0
    pol = k.ok("GET", "/v0/policies/up", key=CLIENT)
    assert [(r["id"], r["position"], r["priority"]) for r in pol["rules"]] == [("no-rm", 1, 10), ("gate-pr", 2, 20)]
    assert pol["default_action"] == "allow" and "gate-pr" in pol["bundle"] and pol["has_policy"] is True
    assert k.ok("GET", "/v0/agents/up", key=CLIENT)["policy_bundle"] == pol["bundle"]


@pytest.mark.parametrize("body,field", [
    ({"cases": [{"target": "ls"}, {"kind": "tool_call"}]}, "cases[1].target"),
    ({"cases": [{"target": "ls", "kind": "shell"}]}, "cases[0].kind"),
    ({"cases": [{"target": "ls", "expect": "maybe"}]}, "cases[0].expect"),
    ({"cases": [{"target": "ls", "argz": {}}]}, "cases[0].argz"),
    ({"cases": [{"target": "ls", "args": [1]}]}, "cases[0].args"),
    ({"cases": ["ls"]}, "cases[0]"),
    ({"cases": {"target": "ls"}}, "cases"),
    ({}, "cases"),
    ({"bundle": "default_action: maybe\n", "cases": []}, "bundle"),
    ({"cases": [], "execution_id": "01a00000-0000-7000-8000-000000000000"}, "execution_id"),
    ({"cases": [], "extra": 1}, "extra"),
])
def test_policy_dry_run_bad_input_names_the_field(kernel, body, field):
    st, out = kernel.request("POST", "/v0/policies/up/test", body, key=ADMIN)
    assert st == 400 and out["code"] == "validation_error" and out["details"]["field"] == field, out


def test_policy_dry_run_unknown_agent_and_auth(kernel):
    st, out = kernel.request("POST", "/v0/policies/ghost/test", {"cases": []}, key=ADMIN)
    assert st == 404 and out["code"] == "not_found", out
    assert kernel.request("GET", "/v0/policies/ghost", key=ADMIN)[0] == 404
    assert kernel.request("POST", "/v0/policies/up/test", {"cases": []}, key=CLIENT)[0] == 403


def test_policy_replay_of_an_execution(kernel):
    k = kernel
    ex = create(k)
    api, dref = claim(k)
    path = f"/v0/executions/{ex['id']}/steps"
    assert api.ok("POST", path, {"kind": "tool_call", "target": "ls", "args": {"d": "/"}},
                  dispatch=dref)["decision"] == "proceed"
    assert api.ok("POST", path, {"kind": "tool_call", "target": "rm", "args": {}}, dispatch=dref)["decision"] == "denied"
    assert api.ok("POST", path, {"kind": "tool_call", "target": "open_pr", "args": {}},
                  dispatch=dref)["decision"] == "blocked"
    rep = k.ok("POST", "/v0/policies/up/test", {"execution_id": ex["id"]}, key=ADMIN)
    got = [(r["target"], r["expect"], r["decision"], r.get("was_rule"), r["pass"]) for r in rep["results"]]
    assert sorted(got) == [("ls", "allow", "allow", "default", True), ("open_pr", "require_approval",
                           "require_approval", "gate-pr", True), ("rm", "deny", "deny", "no-rm", True)]
    assert all(r["execution_id"] == ex["id"] and len(r["step_id"]) == 64 for r in rep["results"])
    # the same steps under a stricter bundle: the ones it now decides differently fail
    strict = "default_action: deny\nrules:\n  - id: no-rm\n    when: {target: rm}\n    then: {decision: deny}\n"
    rep = k.ok("POST", "/v0/policies/up/test", {"execution_id": ex["id"], "bundle": strict}, key=ADMIN)
    bad = sorted((r["target"], r["failure"]) for r in rep["results"] if not r["pass"])
    assert rep["failed"] == 2 and bad == [("ls", "deny, want allow"), ("open_pr", "deny, want require_approval")]
    st, out = k.request("POST", "/v0/policies/up/test", {"execution_id": "nope"}, key=ADMIN)
    assert st == 404 and out["details"]["field"] == "execution_id", out


def test_delete_agent(kernel):
    """DELETE /v0/agents/{id}: 409 while it has live executions, then 204; its finished
    executions stay readable; 404 once gone."""
    k = kernel
    k.ok("POST", "/v0/agents", {"id": "tmp"}, key=ADMIN, status=201)
    ex = k.ok("POST", "/v0/executions", {"agent_id": "tmp"}, key=CLIENT)
    assert k.request("DELETE", "/v0/agents/tmp", key=CLIENT)[0] == 403
    st, out = k.request("DELETE", "/v0/agents/tmp", key=ADMIN)
    assert st == 409 and out["code"] == "conflict" and "pending" in out["message"], out
    assert k.request("POST", f"/v0/executions/{ex['id']}/cancel", key=CLIENT)[0] == 204
    st, _ = k.request("DELETE", "/v0/agents/tmp", key=ADMIN)
    assert st == 204
    assert k.request("GET", "/v0/agents/tmp", key=CLIENT)[0] == 404
    assert "tmp" not in [a["id"] for a in k.ok("GET", "/v0/agents", key=CLIENT)]
    assert k.ok("GET", f"/v0/executions/{ex['id']}", key=CLIENT)["status"] == "cancelled"
    st, out = k.request("DELETE", "/v0/agents/tmp", key=ADMIN)
    assert st == 404 and out["code"] == "not_found"
    st, out = k.request("POST", "/v0/executions", {"agent_id": "tmp"}, key=CLIENT)
    assert st == 404, out


def test_runtime_agents_and_policies_survive_a_restart(kernel):
    k = kernel
    k.ok("POST", "/v0/agents", {"id": "late", "webhook_url": "http://127.0.0.1:1/hook", "secret": "s3",
                                "lease_timeout_seconds": 45}, key=ADMIN, status=201)
    k.ok("POST", "/v0/agents", {"id": "gone"}, key=ADMIN, status=201)
    bundle = "default_action: deny\nrules:\n  - id: ok-ls\n    when: {target: ls}\n    then: {decision: allow}\n"
    assert k.request("POST", "/v0/policies/late", {"bundle": bundle}, key=ADMIN)[0] == 204
    # a policy set at run time for an agent of the config file
    assert k.request("POST", "/v0/policies/up", {"bundle": bundle}, key=ADMIN)[0] == 204
    assert k.request("DELETE", "/v0/agents/gone", key=ADMIN)[0] == 204
    k.stop()
    k.start()
    late = k.ok("GET", "/v0/agents/late", key=CLIENT)
    assert late["webhook_url"] == "http://127.0.0.1:1/hook" and late["lease_timeout_seconds"] == 45
    assert late["policy_bundle"] == bundle and late["dispatch"] == "webhook"
    assert k.request("GET", "/v0/agents/gone", key=CLIENT)[0] == 404
    rep = k.ok("POST", "/v0/policies/late/test", {"cases": [{"target": "ls"}, {"target": "rm"}]}, key=ADMIN)
    assert [r["decision"] for r in rep["results"]] == ["allow", "deny"]
    # the config names "up" with a policy of its own: at start the config's wins
    assert k.ok("GET", "/v0/policies/up", key=CLIENT)["rules"][0]["id"] == "no-rm"
    # the secret came back too: the agent's signed calls are accepted
    ex = k.ok("POST", "/v0/executions", {"agent_id": "late"}, key=CLIENT)
    st, got = Signed(k.port, "late", "s3").request("GET", f"/v0/executions/{ex['id']}")
    assert st == 200 and got["id"] == ex["id"]
