"""Upstream Rebuno's wire protocol against the real kernel (issue 18): agents written with
the standard library as upstream documents them (upstream_agent.py) are dispatched by
signed webhook and by the dispatch stream, sign their own calls (v1 HMAC), and run the
step, approval, crash/re-dispatch, session and fork scenarios; plus the routes, fields,
status codes and error shapes upstream's SDKs rely on."""
import json
import os
import subprocess
import time

import pytest

from conftest import BIN, free_port
from upstream_agent import Signed, StreamConsumer, UpstreamAgent, WebhookServer, sign_v1

CLIENT = "client-key-0123456789abcdef"
ADMIN = "admin-key-0123456789abcdef"
SECRET = "agent-secret-42"

POLICY = """
      default_action: allow
      rules:
        - id: gate-pr
          priority: 20
          when: {target: open_pr}
          then: {decision: require_approval, reason: opening a pull request needs approval}
        - id: no-rm
          priority: 10
          when: {target: rm}
          then: {decision: deny, reason: never}
"""


def config(agent, webhook_url=None, lease=2, max_attempts=5, keys=True):
    hook = f"\n    webhook_url: {webhook_url}" if webhook_url else ""
    return f"""
agents:
  - id: {agent}{hook}
    secret: {SECRET}
    lease_timeout_seconds: {lease}
    max_attempts: {max_attempts}
    policy: |{POLICY}
""" + (f"""api_keys:
  - key: {CLIENT}
    role: client
  - key: {ADMIN}
    role: admin
""" if keys else "")


def wait_for(fn, timeout=20, what="condition"):
    end = time.time() + timeout
    while time.time() < end:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def wait_status(k, eid, status, timeout=20):
    return wait_for(lambda: (lambda e: e if e["status"] == status else None)(
        k.ok("GET", f"/v0/executions/{eid}", key=CLIENT)), timeout, f"{eid} {status}")


def two_steps(ctx):
    a = ctx.step("add", {"x": 1}, lambda: 2)
    b = ctx.step("mul", {"x": a}, lambda: a * 10)
    return {"output": {"sum": b}, "state": {"turns": (ctx.previous() or {}).get("turns", 0) + 1}}


@pytest.fixture(params=["webhook", "stream"])
def upstream(request, make_kernel):
    """(kernel, agent, mode) with an upstream agent dispatched by `mode`, and a client key."""
    made = []

    def start(handler, **cfg):
        agent = UpstreamAgent(0, "up", SECRET, handler)
        hook = WebhookServer(agent, fail_first=cfg.pop("fail_first", 0)) if request.param == "webhook" else None
        k = make_kernel(config("up", hook.url if hook else None, **cfg), mode="server").start()
        agent.api.port = k.port
        made.append(hook)
        if request.param == "stream":
            c = StreamConsumer(agent)
            assert c.status == 200
            made.append(c)
        return k, agent
    start.mode = request.param
    yield start
    for m in made:
        if m:
            m.close()


def create(k, input=None, **extra):
    return k.ok("POST", "/v0/executions", {"agent_id": "up", "input": input or {}, **extra}, key=CLIENT)


def test_step_scenario(upstream):
    k, agent = upstream(two_steps)
    ex = create(k, {"n": 1})
    done = wait_status(k, ex["id"], "completed")
    assert done["output"] == {"sum": 20} and done["agent_id"] == "up" and not agent.errors
    types = [e["type"] for e in k.ok("GET", f"/v0/executions/{ex['id']}/events", key=CLIENT)]
    assert types.count("step.succeeded") == 2
    if upstream.mode == "webhook":
        assert "dispatch.acked" in types  # the webhook answered 2xx
    d = agent.dispatches[0]
    assert set(d) == {"execution_id", "dispatch_id", "dispatch_attempt", "lease_timeout_seconds"}
    assert d["dispatch_attempt"] == 1 and d["lease_timeout_seconds"] == 2


def test_approval_scenario(upstream):
    k, agent = upstream(lambda ctx: ctx.step("open_pr", {"title": "t"}, lambda: "pr-1"))
    ex = create(k)
    wait_status(k, ex["id"], "blocked")
    pending = k.ok("GET", "/v0/approvals?status=pending", key=CLIENT)
    assert isinstance(pending, list) and len(pending) == 1 and pending[0]["rule_id"] == "gate-pr"
    assert "decided_by" not in pending[0] and "rationale" not in pending[0]  # omitted, not null
    st, out = k.request("POST", f"/v0/approvals/{pending[0]['id']}/grant",
                        {"decided_by": "alice", "rationale": "ok"}, key=CLIENT)
    assert st == 204 and out is None
    done = wait_status(k, ex["id"], "completed")
    assert done["output"] == "pr-1" and not agent.errors
    st, out = k.request("POST", f"/v0/approvals/{pending[0]['id']}/deny", {"decided_by": "bob"}, key=CLIENT)
    assert st == 409 and out["code"] == "conflict"


def test_crash_and_redispatch_scenario(upstream):
    def crashy(ctx):
        a = ctx.step("add", {"x": 1}, lambda: 2)
        if ctx.attempt == 1:
            from upstream_agent import Stop
            raise Stop("the worker dies after its first step")
        return ctx.step("mul", {"x": a}, lambda: a * 10)
    k, agent = upstream(crashy)
    ex = create(k)
    done = wait_status(k, ex["id"], "completed", timeout=30)
    assert done["output"] == 20 and not agent.errors
    # the second attempt replayed the first step instead of running it again
    assert (1, "add", "proceed") in agent.log and (2, "add", "replay") in agent.log
    assert (2, "mul", "proceed") in agent.log
    attempts = sorted({d["dispatch_attempt"] for d in agent.dispatches if d["execution_id"] == ex["id"]})
    assert attempts == [1, 2]


def test_session_scenario(upstream):
    k, agent = upstream(two_steps)
    one = create(k, session="chat-1")
    two = create(k, session="chat-1")
    assert two["status"] == "pending" and "dispatch" not in two  # waits behind one; no null dispatch
    wait_status(k, one["id"], "completed")
    second = wait_status(k, two["id"], "completed")
    assert second["state"] == {"turns": 2} and second["parent_execution_id"] == one["id"]
    assert not agent.errors


def test_fork_scenario(upstream):
    k, agent = upstream(two_steps)
    ex = create(k)
    wait_status(k, ex["id"], "completed")
    events = k.ok("GET", f"/v0/executions/{ex['id']}/events", key=CLIENT)
    first_done = [e["event_seq"] for e in events if e["type"] == "step.succeeded"][0]
    fork = k.ok("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": first_done}, key=CLIENT)
    assert fork["forked_from"] == ex["id"] and fork["fork_seq"] == first_done
    done = wait_status(k, fork["id"], "completed")
    assert done["output"] == {"sum": 20}
    fork_log = [(t, d) for (att, t, d) in agent.log][2:]
    assert fork_log == [("add", "replay"), ("mul", "proceed")], agent.log


def test_failed_delivery_is_retried_and_counted(make_kernel):
    """A webhook answering 500 gets a dispatch.failed, the attempt ends as an expired lease
    would, and the next attempt (after a backoff) is delivered."""
    agent = UpstreamAgent(0, "up", SECRET, two_steps)
    hook = WebhookServer(agent, fail_first=1)
    try:
        k = make_kernel(config("up", hook.url), mode="server").start()
        agent.api.port = k.port
        ex = create(k)
        wait_status(k, ex["id"], "completed")
        ev = k.ok("GET", f"/v0/executions/{ex['id']}/events", key=CLIENT)
        failed = [e for e in ev if e["type"] == "dispatch.failed"]
        assert len(failed) == 1 and failed[0]["payload"]["attempt"] == 1
        assert "HTTP 500" in failed[0]["payload"]["error"]
        assert [d["dispatch_attempt"] for d in agent.dispatches] == [2]
        assert "webhook delivery failed" in k.read_log() and "webhook_url reachable" in k.read_log()
    finally:
        hook.close()


def test_unreachable_webhook_exhausts_attempts(make_kernel):
    port = free_port()  # nothing listens there
    k = make_kernel(config("up", f"http://127.0.0.1:{port}/hook", max_attempts=2), mode="server").start()
    ex = create(k)
    done = wait_status(k, ex["id"], "failed", timeout=30)
    assert done["failure_reason"] == "dispatch_exhausted"
    ev = k.ok("GET", f"/v0/executions/{ex['id']}/events", key=CLIENT)
    assert [e["payload"]["attempt"] for e in ev if e["type"] == "dispatch.failed"] == [1, 2]
    log = k.read_log()
    assert "webhook delivery failed" in log and f"127.0.0.1:{port}" in log
    assert "webhook_url is not reachable now" in log  # said at start, before any dispatch


@pytest.mark.parametrize("url,why", [
    ("ftp://example.com/hook", "must start with http:// or https://"),
    ("http:///nohost", "needs a host"),
    ("http://h:99999/x", "bad port"),
])
def test_bad_webhook_url_is_a_config_error(tmp_path, url, why):
    cfg = tmp_path / "rebuno.yaml"
    cfg.write_text(config("up", url))
    p = subprocess.run([BIN, "server", "--config", str(cfg), "--listen", f"127.0.0.1:{free_port()}",
                        "--state-dir", str(tmp_path / "s")], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "webhook_url" in p.stderr and why in p.stderr, p.stderr


def test_webhook_url_needs_a_secret(tmp_path):
    cfg = tmp_path / "rebuno.yaml"
    cfg.write_text("agents:\n  - id: up\n    webhook_url: http://127.0.0.1:1/x\n")
    p = subprocess.run([BIN, "dev", "--config", str(cfg), "--listen", f"127.0.0.1:{free_port()}",
                        "--state-dir", str(tmp_path / "s")], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "no secret" in p.stderr, p.stderr


def test_signatures(make_kernel):
    """With api_keys configured an agent's v1 signature is its credential; anything off is a
    401 naming the header."""
    k = make_kernel(config("up"), mode="server").start()
    api = Signed(k.port, "up", SECRET)
    ex = create(k)
    st, got = api.request("GET", f"/v0/executions/{ex['id']}")
    assert st == 200 and got["id"] == ex["id"] and None not in got.values()
    cases = [
        (lambda h: h.update({"Rebuno-Signature": "v1=" + "0" * 64}), "Rebuno-Signature"),
        (lambda h: h.update({"Rebuno-Signature": "sha256=" + "0" * 64}), "Rebuno-Signature"),
        (lambda h: h.pop("Rebuno-Timestamp"), "Rebuno-Timestamp"),
        (lambda h: h.update({"Rebuno-Agent-Id": "ghost"}), "Rebuno-Agent-Id"),
    ]
    for tamper, header in cases:
        st, out = api.request("GET", f"/v0/executions/{ex['id']}", tamper=tamper)
        assert st == 401 and out["code"] == "unauthorized" and out["details"]["field"] == header, out
    st, out = api.request("GET", f"/v0/executions/{ex['id']}", ts=int(time.time()) - 3600)
    assert st == 401 and out["details"]["field"] == "Rebuno-Timestamp"
    # the body is signed: a changed body no longer matches
    def swap_body(h):
        h["Rebuno-Signature"] = sign_v1(SECRET, "POST", "/v0/executions", int(h["Rebuno-Timestamp"]), body=b"{}")
    st, out = api.request("POST", f"/v0/executions/{ex['id']}/heartbeat", {"x": 1}, tamper=swap_body)
    assert st == 401 and out["details"]["field"] == "Rebuno-Signature"
    # an agent signature is an agent's role: no client routes
    st, out = api.request("POST", "/v0/executions", {"agent_id": "up"})
    assert st == 403 and out["code"] == "forbidden"


def test_upstream_shapes(make_kernel):
    """Routes, fields and status codes upstream's SDKs rely on."""
    k = make_kernel(config("up", lease=30), mode="server").start()
    api = Signed(k.port, "up", SECRET)
    assert k.request("GET", "/v0/ready")[1] == {"status": "ready"}
    agents = k.ok("GET", "/v0/agents", key=CLIENT)
    assert isinstance(agents, list) and agents[0]["id"] == "up" and "secret" not in agents[0]
    assert k.ok("GET", "/v0/agents/up", key=CLIENT)["dispatch"] == "pull"
    st, out = k.request("GET", "/v0/agents/nope", key=CLIENT)
    assert st == 404 and out["code"] == "not_found" and set(out) == {"code", "message", "details"}
    ex = create(k, {"q": 1})
    assert ex["agent_id"] == "up" and None not in ex.values()
    assert "failure_reason" not in ex and "session" not in ex and "fork_seq" not in ex
    listed = k.ok("GET", "/v0/executions?agent_id=up", key=CLIENT)
    assert [e["id"] for e in listed["executions"]] == [ex["id"]]
    # a long-poll claim, signed: the third dispatch mode
    w = api.ok("POST", "/v0/agents/up/workers", {})["worker_id"]
    claim = api.ok("POST", "/v0/agents/up/claim", {"worker_id": w, "wait_seconds": 5})
    dref = (claim["dispatch"]["id"], claim["dispatch"]["attempt"])
    path = f"/v0/executions/{ex['id']}"
    dec = api.ok("POST", path + "/steps", {"kind": "tool_call", "target": "rm", "args": {}}, dispatch=dref)
    assert dec["decision"] == "denied" and dec["rule_id"] == "no-rm"
    dec = api.ok("POST", path + "/steps", {"kind": "tool_call", "target": "ls", "args": {}}, dispatch=dref)
    api.ok("POST", f"{path}/steps/{dec['step_id']}/complete", {"result": ["a"]}, dispatch=dref)
    res = api.ok("POST", path + "/resources", {"key": "ws", "driver_id": "dir"}, dispatch=dref)
    assert "binding" not in res and "checkpoint_ref" not in res and res["covered"] is False
    st, out = api.request("POST", path + "/resources/checkpoints",
                          {"captures": [{"key": "ws", "generation": res["generation"], "checkpoint_ref": "cp"}]},
                          dispatch=dref)
    assert st == 200 and out["recorded"], out
    assert api.request("POST", path + "/heartbeat", dispatch=dref)[0] == 204
    steps = k.ok("GET", path + "/steps?status=terminal", key=CLIENT)
    assert isinstance(steps, list) and [s["target"] for s in steps] == ["rm", "ls"]
    events = k.ok("GET", path + "/events?after_seq=2&limit=3", key=CLIENT)
    assert [e["event_seq"] for e in events] == [3, 4, 5] and "occurred_at" in events[0]
    st, out = api.request("POST", path + "/complete", {"output": {"ok": True}}, dispatch=dref)
    assert st == 204 and out is None
    st, out = k.request("POST", path + "/cancel", None, key=CLIENT)
    assert st == 409 and out["code"] == "conflict"
    st, out = k.request("POST", "/v0/executions", {"agent": "up"}, key=CLIENT)
    assert st == 400 and out["code"] == "validation_error" and out["details"]["field"] == "agent"
    other = create(k)
    st, out = k.request("POST", f"/v0/executions/{other['id']}/cancel", None, key=CLIENT)
    assert st == 204 and out is None


def test_upstream_example_config_and_policy_load(tmp_path):
    """The shape of upstream's own example files: agents with id, webhook_url, secret and a
    policy_file whose rules carry priority (evaluated lowest first)."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "shell.yaml").write_text(
        "default_action: deny\nrules:\n"
        "  - id: approve-other\n    priority: 20\n    when: {target: shell_exec}\n"
        "    then: {decision: require_approval}\n"
        "  - id: allow-safe\n    priority: 10\n    when:\n      target: shell_exec\n"
        "      arguments: {command: {regex: '^ls'}}\n    then: {decision: allow}\n")
    cfg = tmp_path / "rebuno.dev.yaml"
    cfg.write_text("agents:\n  - id: hello\n    webhook_url: http://localhost:5000/webhook\n    secret: s1\n"
                   "  - id: shell\n    webhook_url: http://localhost:5002/webhook\n    secret: s2\n"
                   "    policy_file: policies/shell.yaml\n")
    p = subprocess.run([BIN, "policy", "check", str(tmp_path / "policies" / "shell.yaml")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr
    port = free_port()
    log = tmp_path / "kernel.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([BIN, "dev", "--config", str(cfg), "--listen", f"127.0.0.1:{port}",
                                 "--state-dir", str(tmp_path / "s")], stdout=out, stderr=out)
    try:
        wait_for(lambda: proc.poll() is not None or "kernel on" in log.read_text(), what="the kernel")
        assert proc.poll() is None, log.read_text()
        assert "agents=2" in log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)


def test_runtime_agents_policies_metrics_and_deltas(make_kernel):
    """POST /v0/agents (a webhook agent registered at run time is dispatched), POST
    /v0/policies/{agent}, GET /metrics, and live step deltas."""
    k = make_kernel(config("up", lease=30), mode="server").start()
    st, out = k.request("POST", "/v0/agents", {"id": "late", "webhook_url": "gopher://x"}, key=ADMIN)
    assert st == 400 and out["details"]["field"] == "webhook_url", out
    st, out = k.request("POST", "/v0/agents", {"id": "late", "webhook_url": "http://127.0.0.1:1/x"}, key=ADMIN)
    assert st == 400 and out["details"]["field"] == "secret", out
    assert k.request("POST", "/v0/agents", {"id": "late"}, key=CLIENT)[0] == 403  # admin only
    agent = UpstreamAgent(k.port, "late", "late-secret", lambda ctx: ctx.step("t", {}, lambda: "hi"))
    hook = WebhookServer(agent)
    try:
        view = k.ok("POST", "/v0/agents", {"id": "late", "webhook_url": hook.url, "secret": "late-secret",
                                            "lease_timeout_seconds": 30}, key=ADMIN, status=201)
        assert view["webhook_url"] == hook.url and view["dispatch"] == "webhook" and "secret" not in view
        ex = k.ok("POST", "/v0/executions", {"agent_id": "late"}, key=CLIENT)
        assert wait_status(k, ex["id"], "completed")["output"] == "hi"
    finally:
        hook.close()
    # a policy set at run time applies to the next step
    st, out = k.request("POST", "/v0/policies/up", {"bundle": "default_action: allow\nrules:\n  - id: x\n"}, key=ADMIN)
    assert st == 400 and out["details"]["field"] == "bundle", out
    st, out = k.request("POST", "/v0/policies/ghost", {"bundle": "default_action: deny\n"}, key=ADMIN)
    assert st == 404, out
    bundle = "default_action: allow\nrules:\n  - id: no-ls\n    when: {target: ls}\n    then: {decision: deny}\n"
    assert k.request("POST", "/v0/policies/up", {"bundle": bundle}, key=ADMIN)[0] == 204
    api = Signed(k.port, "up", SECRET)
    ex = create(k)
    w = api.ok("POST", "/v0/agents/up/workers", {})["worker_id"]
    claim = api.ok("POST", "/v0/agents/up/claim", {"worker_id": w, "wait_seconds": 5})
    dref = (claim["dispatch"]["id"], claim["dispatch"]["attempt"])
    path = f"/v0/executions/{ex['id']}"
    dec = api.ok("POST", path + "/steps", {"kind": "tool_call", "target": "ls", "args": {}}, dispatch=dref)
    assert dec["decision"] == "denied" and dec["rule_id"] == "no-ls"
    # deltas of a running step reach a watcher of /stream; a settled step refuses them
    dec = api.ok("POST", path + "/steps", {"kind": "llm_call", "target": "model", "args": {}}, dispatch=dref)
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", k.port, timeout=10)
    c.request("GET", path + "/stream", headers={"Authorization": f"Bearer {CLIENT}"})
    r = c.getresponse()
    assert r.status == 200
    time.sleep(0.2)
    assert api.request("POST", f"{path}/steps/{dec['step_id']}/stream", {"seq": 0, "data": "Hel"}, dispatch=dref)[0] == 204
    line = b""
    while not line.startswith(b"data:"):
        line = r.fp.readline()
    assert json.loads(line[5:]) == {"step_id": dec["step_id"], "seq": 0, "data": "Hel"}
    c.close()
    st, out = api.request("POST", f"{path}/steps/{dec['step_id']}/stream", {"seq": 1, "data": "x" * 7001}, dispatch=dref)
    assert st == 400 and out["details"]["field"] == "data"
    api.ok("POST", f"{path}/steps/{dec['step_id']}/complete", {"result": "Hello"}, dispatch=dref)
    st, out = api.request("POST", f"{path}/steps/{dec['step_id']}/stream", {"seq": 2, "data": "late"}, dispatch=dref)
    assert st == 409 and out["code"] == "conflict"
    st, text = k.request("GET", "/metrics", auth=False)
    assert st == 200 and "rebuno_up 1" in text and 'rebuno_webhook_deliveries_total{result="ok"} 1' in text, text
    assert "rebuno_step_deltas_total 1" in text


def cli(k, *args, key=ADMIN, check=True):
    env = dict(os.environ, REBUNO_URL=k.url, REBUNO_API_KEY=key)
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=60, env=env)
    if check:
        assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p


def test_cli_upstream_names(make_kernel, tmp_path):
    """exec ls --agent/--status/--limit, short id prefixes, approval grant, agent ls,
    policy set and policy test FILE --target T."""
    k = make_kernel(config("up", lease=30), mode="server").start()
    ex = create(k, {"a": 1})
    out = cli(k, "exec", "ls", "--agent", "up", "--status", "pending", "--limit", "5").stdout
    assert ex["id"] in out and "up" in out
    short = ex["id"][:13]
    got = json.loads(cli(k, "exec", "get", short, "--json").stdout)
    assert got["id"] == ex["id"]
    p = cli(k, "exec", "get", "ffff", check=False)
    assert p.returncode == 1 and "no execution id starts with ffff" in p.stderr, p.stderr
    p = cli(k, "exec", "get", "01a", check=False)
    assert p.returncode == 1 and "at least its first 4 characters" in p.stderr
    out = cli(k, "agent", "ls").stdout
    assert "up" in out and "pull" in out and "DISPATCH" in out
    assert json.loads(cli(k, "agent", "get", "up", "--json").stdout)["id"] == "up"
    # an approval, granted by the upstream verb
    api = Signed(k.port, "up", SECRET)
    w = api.ok("POST", "/v0/agents/up/workers", {})["worker_id"]
    claim = api.ok("POST", "/v0/agents/up/claim", {"worker_id": w, "wait_seconds": 5})
    dref = (claim["dispatch"]["id"], claim["dispatch"]["attempt"])
    dec = api.ok("POST", f"/v0/executions/{ex['id']}/steps", {"kind": "tool_call", "target": "open_pr",
                                                               "args": {}}, dispatch=dref)
    assert dec["decision"] == "blocked"
    out = cli(k, "approval", "grant", dec["approval_id"], "--by", "alice", "--reason", "fine").stdout
    assert out.startswith("granted ") and "by alice" in out
    ap = k.ok("GET", f"/v0/approvals/{dec['approval_id']}", key=CLIENT)
    assert ap["decided_by"] == "alice" and ap["rationale"] == "fine"
    # policy test (upstream's probe) and policy set
    pol = tmp_path / "p.yaml"
    pol.write_text("default_action: allow\nrules:\n  - id: no-ls\n    priority: 1\n    when: {target: ls}\n"
                   "    then: {decision: deny}\n")
    assert "decision=deny rule=no-ls" in cli(k, "policy", "test", str(pol), "--target", "ls").stdout
    assert "set from" in cli(k, "policy", "set", "up", str(pol)).stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("default_action: maybe\n")
    p = cli(k, "policy", "set", "up", str(bad), check=False)
    assert p.returncode == 1 and "bad.yaml:1:" in p.stderr


def test_signed_calls_need_no_local_token_in_dev(make_kernel):
    """A kernel without api_keys serves an agent's signed calls without the local token
    (upstream agents send none); an unsigned call without it is still refused."""
    k = make_kernel(config("up", keys=False)).start()
    ex = k.create("up", {})
    st, got = Signed(k.port, "up", SECRET).request("GET", f"/v0/executions/{ex['id']}")
    assert st == 200 and got["id"] == ex["id"]
    st, out = k.request("GET", f"/v0/executions/{ex['id']}", auth=False)
    assert st == 401 and out["details"]["field"] == "Authorization"
    st, out = Signed(k.port, "up", "wrong-secret").request("GET", f"/v0/executions/{ex['id']}")
    assert st == 401 and out["details"]["field"] == "Rebuno-Signature"


def test_parent_execution_id_continues_a_completed_execution(upstream):
    k, agent = upstream(two_steps)
    one = create(k, session="s-a")
    wait_status(k, one["id"], "completed")
    branch = create(k, parent_execution_id=one["id"])
    assert branch["parent_execution_id"] == one["id"] and "session" not in branch
    done = wait_status(k, branch["id"], "completed")
    assert done["state"] == {"turns": 2}  # previous() read the chosen parent's state
    st, out = k.request("POST", "/v0/executions", {"agent_id": "up", "parent_execution_id": one["id"],
                                                   "session": "s-a"}, key=CLIENT)
    assert st == 409 and out["details"]["field"] == "session", out
    st, out = k.request("POST", "/v0/executions", {"agent_id": "up",
                                                   "parent_execution_id": "01a00000-0000-7000-8000-000000000000"},
                        key=CLIENT)
    assert st == 404 and out["details"]["field"] == "parent_execution_id", out
    fresh = create(k, {"x": 1}, session="s-new", parent_execution_id=one["id"])
    assert wait_status(k, fresh["id"], "completed")["state"] == {"turns": 2}
