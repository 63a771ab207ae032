"""Upstream Rebuno's admin surface against the real kernel (issue 18): policy dry runs
(POST /v0/policies/{agent}/test, cases and execution replay) and reading an agent's
policy back."""
import glob
import json
import os
import sqlite3

import pytest

from test_upstream_wire import ADMIN, CLIENT, SECRET, Signed, cli, config, create


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
    # upstream's range form: the agent's latest executions, oldest first
    ex2 = create(k)
    rep = k.ok("POST", "/v0/policies/up/test", {"executions": {"limit": 10}, "bundle": strict}, key=ADMIN)
    assert len(rep["results"]) == 3 and rep["failed"] == 2  # ex2 has no steps yet
    rep = k.ok("POST", "/v0/policies/up/test", {"executions": {"since": "2999-01-01T00:00:00Z"}}, key=ADMIN)
    assert rep["results"] == []
    for body, field in [({"executions": {"limit": 0}}, "limit"), ({"executions": {"since": "soon"}}, "since"),
                        ({"executions": {"x": 1}}, "x"), ({"executions": [], "cases": []}, "executions")]:
        st, out = k.request("POST", "/v0/policies/up/test", body, key=ADMIN)
        assert st == 400 and out["details"]["field"] == field, (body, out)
    assert ex2["id"]


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
    registered = k.ok("POST", "/v0/agents", {"id": "late", "webhook_url": "http://127.0.0.1:1/hook", "secret": "s3",
                                             "lease_timeout_seconds": 45}, key=ADMIN, status=201)["registered_at"]
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
    assert late["registered_at"] == registered, (late, registered)
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


def test_cli_agent_add_and_rm(kernel, tmp_path):
    """rebuno agent add FILE (upstream's manifest) and rebuno agent rm ID."""
    k = kernel
    (tmp_path / "shell.yaml").write_text("default_action: deny\nrules:\n  - id: ok-ls\n    priority: 1\n"
                                         "    when: {target: ls}\n    then: {decision: allow}\n")
    man = tmp_path / "agents.yaml"
    man.write_text("agents:\n  - id: hooked\n    webhook_url: http://127.0.0.1:1/hook\n    secret: s\n"
                   "    policy_file: shell.yaml\n  - id: plain\n")
    out = cli(k, "agent", "add", str(man)).stdout
    assert "agent hooked registered (webhook, policy set)" in out and "agent plain registered (pull)" in out
    got = k.ok("GET", "/v0/agents/hooked", key=CLIENT)
    assert got["webhook_url"] == "http://127.0.0.1:1/hook" and "ok-ls" in got["policy_bundle"]
    shown = cli(k, "agent", "get", "hooked").stdout
    assert "webhook: http://127.0.0.1:1/hook\npolicy:\n  default_action: deny\n" in shown, shown
    # a policy that does not load stops the whole file before anything is sent
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents:\n  - id: never\n    policy: |\n      default_action: maybe\n")
    p = cli(k, "agent", "add", str(bad), check=False)
    assert p.returncode == 1 and "agent never" in p.stderr and "bad.yaml:4:" in p.stderr, p.stderr
    assert k.request("GET", "/v0/agents/never", key=CLIENT)[0] == 404
    assert cli(k, "agent", "rm", "plain").stdout == "agent plain deleted\n"
    p = cli(k, "agent", "rm", "plain", check=False)
    assert p.returncode == 1 and "no agent" in p.stderr, p.stderr


def test_api_keys(kernel):
    """/v0/api-keys as upstream: the token is shown once, only its hash is kept, scopes
    decide what a key may call (write does not include read), rotate and revoke."""
    k = kernel
    st, out = k.request("POST", "/v0/api-keys", {"name": "r", "scopes": ["executions:read"]}, key=CLIENT)
    assert st == 403
    for body, field in [({"scopes": ["executions:read"]}, "name"), ({"name": "x"}, "scopes"),
                        ({"name": "x", "scopes": []}, "scopes"), ({"name": "x", "scopes": ["root"]}, "scopes"),
                        ({"name": "x", "scopes": ["executions:read"], "ttl": 1}, "ttl")]:
        st, out = k.request("POST", "/v0/api-keys", body, key=ADMIN)
        assert st == 400 and out["details"]["field"] == field, (body, out)
    reader = k.ok("POST", "/v0/api-keys", {"name": "reader", "scopes": ["executions:read"]}, key=ADMIN, status=201)
    tok = reader["token"]
    assert tok.startswith("rbk_") and reader["prefix"] == tok[:12] and reader["scopes"] == ["executions:read"]
    writer = k.ok("POST", "/v0/api-keys", {"name": "writer", "scopes": ["executions:write"]}, key=ADMIN,
                  status=201)
    ex = k.ok("POST", "/v0/executions", {"agent_id": "up"}, key=writer["token"], status=201)
    assert k.request("GET", f"/v0/executions/{ex['id']}", key=writer["token"])[0] == 403  # write is not read
    assert k.ok("GET", f"/v0/executions/{ex['id']}", key=tok)["id"] == ex["id"]
    st, out = k.request("POST", "/v0/executions", {"agent_id": "up"}, key=tok)
    assert st == 403 and "executions:write" in out["message"], out
    assert k.request("GET", "/v0/agents", key=tok)[0] == 403
    assert k.request("GET", "/v0/approvals", key=tok)[0] == 403
    # a manager key manages keys, and is no admin for the rest
    mgr = k.ok("POST", "/v0/api-keys", {"name": "m", "scopes": ["api_keys:manage"]}, key=ADMIN, status=201)
    listed = k.ok("GET", "/v0/api-keys", key=mgr["token"])
    assert [x["name"] for x in listed] == ["reader", "writer", "m"]
    assert all("token" not in x and "hash" not in x for x in listed)
    assert k.request("POST", "/v0/agents", {"id": "x"}, key=mgr["token"])[0] == 403
    # rotate: the old token stops, the new one works with the same id and scopes
    rot = k.ok("POST", f"/v0/api-keys/{reader['id']}/rotate", key=mgr["token"])
    assert rot["id"] == reader["id"] and rot["token"] != tok and rot["scopes"] == ["executions:read"]
    st, out = k.request("GET", f"/v0/executions/{ex['id']}", key=tok)
    assert st == 401 and out["code"] == "unauthorized"
    assert k.request("GET", f"/v0/executions/{ex['id']}", key=rot["token"])[0] == 200
    # revoke: repeatable, 401 after, listed with revoked_at, no rotation
    assert k.request("DELETE", f"/v0/api-keys/{reader['id']}", key=ADMIN)[0] == 204
    assert k.request("DELETE", f"/v0/api-keys/{reader['id']}", key=ADMIN)[0] == 204
    st, out = k.request("GET", f"/v0/executions/{ex['id']}", key=rot["token"])
    assert st == 401 and "revoked" in out["message"], out
    st, out = k.request("POST", f"/v0/api-keys/{reader['id']}/rotate", key=ADMIN)
    assert st == 409 and out["code"] == "conflict"
    assert k.request("DELETE", "/v0/api-keys/01a00000-0000-7000-8000-000000000000", key=ADMIN)[0] == 404
    assert "revoked_at" in [x for x in k.ok("GET", "/v0/api-keys", key=ADMIN) if x["id"] == reader["id"]][0]
    # kept across a restart, hashed
    k.stop()
    k.start()
    assert k.request("POST", "/v0/executions", {"agent_id": "up"}, key=writer["token"])[0] == 201
    assert k.request("GET", "/v0/executions", key=rot["token"])[0] == 401
    if os.environ.get("REBUNO_TEST_STORE") != "postgres":
        db = glob.glob(os.path.join(k.state_dir, "state", "*.db"))[0]
        rows = sqlite3.connect(db).execute("SELECT hash, prefix FROM api_keys").fetchall()
        assert all(len(h) == 64 and writer["token"] != h for h, _ in rows) and len(rows) == 3


def test_cli_key_commands(kernel):
    k = kernel
    made = json.loads(cli(k, "key", "create", "ci", "--scope", "executions:read,agents:read",
                          "--scope", "approvals:read").stdout)
    assert made["scopes"] == ["executions:read", "approvals:read", "agents:read"] and made["token"]
    assert k.request("GET", "/v0/agents", key=made["token"])[0] == 200
    lines = [json.loads(x) for x in cli(k, "key", "ls").stdout.splitlines()]
    assert [x["id"] for x in lines] == [made["id"]]
    rot = json.loads(cli(k, "key", "rotate", made["id"]).stdout)
    assert rot["token"] != made["token"]
    assert cli(k, "key", "revoke", made["id"]).stdout == f"revoked {made['id']}\n"
    p = cli(k, "key", "create", "x", check=False)
    assert p.returncode == 2 and "--scope" in p.stderr
    p = cli(k, "key", "create", "x", "--scope", "root", check=False)
    assert p.returncode == 1 and "not a scope" in p.stderr


def test_scoped_key_without_configured_keys(make_kernel):
    """With no api_keys in the config (the local token), a key made at run time works too,
    judged by its scopes."""
    k = make_kernel(config("up", keys=False)).start()
    made = k.ok("POST", "/v0/api-keys", {"name": "r", "scopes": ["agents:read"]}, status=201)
    assert k.request("GET", "/v0/agents", key=made["token"])[0] == 200
    assert k.request("GET", "/v0/executions", key=made["token"])[0] == 403
    assert k.request("GET", "/v0/agents", key="rbk_" + "0" * 48)[0] == 401


SHELL_POLICY = r"""default_action: deny
rules:
  - id: allow-llm
    priority: 5
    when: {step_kind: llm_call}
    then: {decision: allow}
  - id: allow-safe-shell
    priority: 10
    when:
      target: shell_exec
      arguments:
        command:
          regex: '^\s*(ls|cat|pwd|echo)(\s+[^;&|<>$`()\\]*)?\s*$'
    then: {decision: allow, reason: safe read-only command}
  - id: approve-other-shell
    priority: 20
    when: {target: shell_exec}
    then: {decision: require_approval, reason: non-safe shell command needs approval}
"""


def test_cli_policy_test_runs_the_policytest_file(tmp_path):
    """rebuno policy test FILE: upstream's .policytest.yaml beside the bundle; exit 1 with a
    readable diff on a mismatch, 0 when every case holds."""
    from conftest import BIN
    import subprocess
    (tmp_path / "shell.yaml").write_text(SHELL_POLICY)
    cases = tmp_path / "shell.policytest.yaml"
    cases.write_text("""agent_id: shell
cases:
  - name: read-only command
    target: shell_exec
    args: { command: "ls -la /tmp" }
    expect: allow
    expect_rule: allow-safe-shell
  - name: chained command
    target: shell_exec
    args: { command: "ls /tmp; rm -rf /" }
    expect: require_approval
""")
    run = lambda *a: subprocess.run([BIN, "policy", "test", *a], capture_output=True, text=True, timeout=30)
    p = run(str(tmp_path / "shell.yaml"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines() == [
        "PASS read-only command: allow (rule allow-safe-shell)",
        "PASS chained command: require_approval (rule approve-other-shell)",
        "2 cases: 2 passed, 0 failed",
        "rules no case reached: allow-llm",
    ]
    other = tmp_path / "other.yaml"
    other.write_text("cases:\n  - name: chained\n    target: shell_exec\n    args: {command: 'ls; rm -rf /'}\n"
                     "    expect: allow\n  - target: gpt\n    kind: llm_call\n    expect_rule: approve-other-shell\n")
    p = run(str(tmp_path / "shell.yaml"), "--cases", str(other))
    assert p.returncode == 1
    assert p.stdout.splitlines()[:6] == [
        "FAIL chained",
        "  - want: allow",
        "  + got:  require_approval (rule approve-other-shell: non-safe shell command needs approval)",
        "FAIL gpt",
        "  - want rule: approve-other-shell",
        "  + got rule:  allow-llm (allow)",
    ]
    assert "2 cases: 0 passed, 2 failed" in p.stdout
    # bad case files: named, with where
    for text, want in [("cases:\n  - {kind: tool_call}\n", "cases[0].target"),
                       ("cases:\n  - {target: x, expect: maybe}\n", "cases[0].expect"),
                       ("cases:\n  - {target: x, exepct: allow}\n", "cases[0].exepct"),
                       ("agent: x\ncases: []\n", 'unknown key "agent"'),
                       ("cases: [\n", "other.yaml:")]:
        other.write_text(text)
        p = run(str(tmp_path / "shell.yaml"), "--cases", str(other))
        assert p.returncode == 1 and want in p.stderr, (text, p.stderr)
    p = run(str(tmp_path / "missing.yaml"))
    assert p.returncode == 1
    p = run(str(tmp_path / "shell.yaml"), "--execution", "x")
    assert p.returncode == 2 and "--agent-id" in p.stderr


def test_cli_policy_test_replays_an_execution(kernel, tmp_path):
    k = kernel
    ex = create(k)
    api, dref = claim(k)
    path = f"/v0/executions/{ex['id']}/steps"
    api.ok("POST", path, {"kind": "tool_call", "target": "ls", "args": {}}, dispatch=dref)
    api.ok("POST", path, {"kind": "tool_call", "target": "rm", "args": {}}, dispatch=dref)
    pol = tmp_path / "strict.yaml"
    pol.write_text("default_action: deny\n")
    p = cli(k, "policy", "test", str(pol), "--execution", ex["id"], "--agent-id", "up", check=False)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAIL ls (step " in p.stdout and "  - want: allow\n  + got:  deny (rule default" in p.stdout
    assert "(recorded by rule default)" not in p.stdout and "PASS rm (step" in p.stdout
    assert "2 cases: 1 passed, 1 failed" in p.stdout


def test_store_copy_carries_runtime_agents_and_keys(make_kernel, tmp_path):
    """rebuno store copy takes the agents, policies and API keys made at run time along."""
    import subprocess
    from conftest import BIN
    src, dst = tmp_path / "src.db", tmp_path / "dst.db"
    k = make_kernel(config("up", lease=30), mode="server", args=["--store", f"sqlite:{src}"]).start()
    k.ok("POST", "/v0/agents", {"id": "late", "webhook_url": "http://127.0.0.1:1/h", "secret": "s"}, key=ADMIN,
         status=201)
    bundle = "default_action: deny\n"
    assert k.request("POST", "/v0/policies/late", {"bundle": bundle}, key=ADMIN)[0] == 204
    key = k.ok("POST", "/v0/api-keys", {"name": "r", "scopes": ["agents:read"]}, key=ADMIN, status=201)
    k.stop()
    p = subprocess.run([BIN, "store", "copy", "--from", f"sqlite:{src}", "--to", f"sqlite:{dst}"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    k2 = make_kernel(config("up", lease=30), mode="server", args=["--store", f"sqlite:{dst}"]).start()
    got = k2.ok("GET", "/v0/agents/late", key=key["token"])
    assert got["webhook_url"] == "http://127.0.0.1:1/h" and got["policy_bundle"] == bundle
