"""Upstream's stateful policy rules against the real kernel (issue 18): rate_limit (counted
from the store, so a restart agrees), budget (the tokens an execution's recorded LLM calls
report) and judge (a scripted OpenAI-compatible model on loopback decides; its verdict is
recorded with the step, so a replay does not ask again)."""
import http.server
import json
import subprocess
import threading

import pytest

from conftest import BIN
from upstream_agent import Signed

SECRET = "agent-secret-42"
ADMIN = "admin-key-0123456789abcdef"


def config(policy, extra=""):
    body = "\n".join("      " + line for line in policy.strip("\n").splitlines())
    return f"""{extra}
agents:
  - id: up
    secret: {SECRET}
    lease_timeout_seconds: 60
    policy: |
{body}
api_keys:
  - key: {ADMIN}
    role: admin
"""


def start(k_api, k, agent="up"):
    ex = k.ok("POST", "/v0/executions", {"agent_id": agent, "input": {}}, key=ADMIN)
    w = k_api.ok("POST", f"/v0/agents/{agent}/workers", {})["worker_id"]
    c = k_api.ok("POST", f"/v0/agents/{agent}/claim", {"worker_id": w, "wait_seconds": 5})
    assert c["execution"]["id"] == ex["id"]
    return ex["id"], (c["dispatch"]["id"], c["dispatch"]["attempt"])


def submit(api, eid, dref, target, args=None, kind="tool_call", request_id=None):
    body = {"kind": kind, "target": target, "args": args or {}}
    if request_id:
        body["request_id"] = request_id
    return api.ok("POST", f"/v0/executions/{eid}/steps", body, dispatch=dref)


RATE = """
default_action: allow
rules:
  - id: limit-search
    when: {target: web_search}
    then:
      decision: allow
      rate_limit: {max_calls: 2, window: 1h}
  - id: limit-fetch-agent
    when: {target: fetch}
    then:
      decision: allow
      rate_limit: {max_calls: 1, window: 1h, per_what: agent}
  - id: limit-global
    when: {target: page}
    then:
      decision: allow
      rate_limit: {max_calls: 1, window: 1h, per_what: global}
"""


def test_rate_limit_counts_recorded_steps(make_kernel):
    k = make_kernel(config(RATE), mode="server").start()
    api = Signed(k.port, "up", SECRET)
    eid, dref = start(api, k)
    first = submit(api, eid, dref, "web_search", {"q": 1}, request_id="rq-1")
    assert first["decision"] == "proceed"
    assert submit(api, eid, dref, "web_search", {"q": 2})["decision"] == "proceed"
    dec = submit(api, eid, dref, "web_search", {"q": 3})
    assert dec == {"decision": "rate_limited", "reason": "rate_limit_exceeded", "rule_id": "limit-search"}, dec
    events = k.ok("GET", f"/v0/executions/{eid}/events", key=ADMIN)
    limited = [e for e in events if e["type"] == "step.rate_limited"]
    assert len(limited) == 1 and limited[0]["payload"]["error"] == {"reason": "rate_limit_exceeded",
                                                                    "rule_id": "limit-search"}
    # nothing recorded for the refused call: two steps, and a replay of a recorded one still replays
    steps = k.ok("GET", f"/v0/executions/{eid}/steps", key=ADMIN)
    assert [s["args"] for s in steps] == [{"q": 1}, {"q": 2}]
    # a resend of a recorded submission (its reply was lost) is that step, not a new call
    again = submit(api, eid, dref, "web_search", {"q": 1}, request_id="rq-1")
    assert again["decision"] == "proceed" and again["step_id"] == first["step_id"], again
    # per agent: a second execution of the agent shares the fetch budget
    assert submit(api, eid, dref, "fetch")["decision"] == "proceed"
    eid2, dref2 = start(api, k)
    assert submit(api, eid2, dref2, "fetch")["decision"] == "rate_limited"
    assert submit(api, eid2, dref2, "web_search", {"q": 9})["decision"] == "proceed"  # per execution: its own
    assert submit(api, eid2, dref2, "page")["decision"] == "proceed"
    assert submit(api, eid, dref, "page")["decision"] == "rate_limited"  # global: every execution
    # the counts come from the store: a restarted kernel agrees
    k.stop()
    k.start()
    assert submit(api, eid, dref, "web_search", {"q": 4})["decision"] == "rate_limited"


BUDGET = """
default_action: allow
rules:
  - id: cap-llm
    when: {step_kind: llm_call}
    then:
      decision: allow
      budget: {max_tokens: 100}
"""


def test_budget_sums_recorded_usage(make_kernel):
    k = make_kernel(config(BUDGET), mode="server").start()
    api = Signed(k.port, "up", SECRET)
    eid, dref = start(api, k)
    path = f"/v0/executions/{eid}/steps"
    one = submit(api, eid, dref, "gpt", {"messages": [1]}, kind="llm_call")
    assert one["decision"] == "proceed"
    api.ok("POST", f"{path}/{one['step_id']}/complete",
           {"result": {"choices": [], "usage": {"prompt_tokens": 60, "completion_tokens": 20}}}, dispatch=dref)
    two = submit(api, eid, dref, "gpt", {"messages": [2]}, kind="llm_call")
    assert two["decision"] == "proceed"  # 80 < 100: runs, and crosses the line
    body = json.dumps({"usage": {"input_tokens": 15, "output_tokens": 10}})
    api.ok("POST", f"{path}/{two['step_id']}/complete", {"result": {"status": 200, "headers": {}, "body": body}},
           dispatch=dref)
    three = submit(api, eid, dref, "gpt", {"messages": [3]}, kind="llm_call")
    assert three["decision"] == "denied" and three["reason"] == "execution_token_budget_exceeded", three
    assert three["rule_id"] == "cap-llm"
    # another execution has a budget of its own
    eid2, dref2 = start(api, k)
    assert submit(api, eid2, dref2, "gpt", {}, kind="llm_call")["decision"] == "proceed"


def test_budget_on_exceed_require_approval(make_kernel):
    pol = BUDGET.replace("budget: {max_tokens: 100}", "budget: {max_tokens: 10, on_exceed: require_approval}\n"
                         "      approval_config: {approvers: [finance]}")
    k = make_kernel(config(pol), mode="server").start()
    api = Signed(k.port, "up", SECRET)
    eid, dref = start(api, k)
    one = submit(api, eid, dref, "gpt", {"m": 1}, kind="llm_call")
    api.ok("POST", f"/v0/executions/{eid}/steps/{one['step_id']}/complete",
           {"result": {"usage": {"total_tokens": 12}}}, dispatch=dref)
    two = submit(api, eid, dref, "gpt", {"m": 2}, kind="llm_call")
    assert two["decision"] == "blocked" and two["reason"] == "execution_token_budget_exceeded", two
    assert k.ok("GET", f"/v0/approvals/{two['approval_id']}", key=ADMIN)["approvers"] == ["finance"]


JUDGE = """
default_action: allow
rules:
  - id: deny-rm-root
    when:
      target: bash
      arguments:
        command: {regex: 'rm\\s+-rf\\s+/(\\s|$)'}
    then: {decision: deny}
  - id: judge-bash
    when: {target: bash}
    then:
      decision: judge
      judge:
        instructions: commands run in a disposable build container
        threshold: 0.6
      approval_config:
        approvers: [ops]
"""


class ScriptedModel:
    """An OpenAI-compatible chat completions endpoint whose answers are scripted by the
    command in the tool call it is asked about."""

    def __init__(self, answers):
        self.answers, self.asked = answers, []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                call = json.loads(req["messages"][1]["content"])
                outer.asked.append((req, call, self.headers.get("Authorization")))
                probs = outer.answers[call["arguments"]["command"]]
                if probs is None:
                    self.send_response(500)
                    self.end_headers()
                    return
                out = json.dumps({"choices": [{"message": {"role": "assistant",
                                                           "content": "```json\n" + json.dumps(probs) + "\n```"}}]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out.encode())

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1/chat/completions"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_judge_asks_the_configured_model(make_kernel):
    model = ScriptedModel({
        "ls": {"allow": 0.9, "deny": 0.05, "require_approval": 0.05},
        "curl x | sh": {"allow": 0.02, "deny": 0.95, "require_approval": 0.03},
        "git push": {"allow": 0.5, "deny": 0.1, "require_approval": 0.4},
        "broken": None,
    })
    try:
        extra = f"judge_url: {model.url}\njudge_model: jev\njudge_api_key: sk-test\n"
        k = make_kernel(config(JUDGE, extra), mode="server").start()
        api = Signed(k.port, "up", SECRET)
        eid, dref = start(api, k)
        ok = submit(api, eid, dref, "bash", {"command": "ls"})
        assert ok["decision"] == "proceed" and ok["rule_id"] == "judge-bash", ok
        req, call, auth = model.asked[0]
        assert req["model"] == "jev" and auth == "Bearer sk-test"
        assert call == {"agent_id": "up", "kind": "tool_call", "tool": "bash", "arguments": {"command": "ls"}}
        assert "disposable build container" in req["messages"][0]["content"]
        bad = submit(api, eid, dref, "bash", {"command": "curl x | sh"}, request_id="rq-9")
        assert bad["decision"] == "denied" and bad["reason"] == "judge: deny 0.95", bad
        # a deny rule above the judge decides without asking
        n = len(model.asked)
        assert submit(api, eid, dref, "bash", {"command": "rm -rf /"})["decision"] == "denied"
        assert len(model.asked) == n
        # a resend of a judged step returns what was recorded, without asking again
        again = submit(api, eid, dref, "bash", {"command": "curl x | sh"}, request_id="rq-9")
        assert again["decision"] == "denied" and again["step_id"] == bad["step_id"], again
        assert len(model.asked) == n
        # the events record the verdict's reason
        ev = k.ok("GET", f"/v0/executions/{eid}/events", key=ADMIN)
        allowed = [e for e in ev if e["type"] == "step.allowed"]
        assert allowed[0]["payload"]["reason"] == "judge: allow 0.90"
        # below the threshold, and an unusable answer: the fallback (require_approval, with the
        # rule's approvers)
        low = submit(api, eid, dref, "bash", {"command": "git push"})
        assert low["decision"] == "blocked" and "below threshold 0.60" in low["reason"], low
        ap = k.ok("GET", f"/v0/approvals/{low['approval_id']}", key=ADMIN)
        assert ap["approvers"] == ["ops"]
        k.ok("POST", f"/v0/executions/{eid}/cancel", key=ADMIN)
        eid2, dref2 = start(api, k)
        down = submit(api, eid2, dref2, "bash", {"command": "broken"})
        assert down["decision"] == "blocked" and down["reason"].startswith("judge unavailable"), down
    finally:
        model.close()


def test_judge_without_a_model_denies(make_kernel):
    k = make_kernel(config(JUDGE), mode="server").start()
    api = Signed(k.port, "up", SECRET)
    eid, dref = start(api, k)
    dec = submit(api, eid, dref, "bash", {"command": "ls"})
    assert dec["decision"] == "denied" and dec["reason"] == "judge not configured", dec


def test_unreachable_judge_falls_back(make_kernel):
    from conftest import free_port
    extra = f"judge_url: http://127.0.0.1:{free_port()}/v1/chat/completions\njudge_timeout_seconds: 2\n"
    pol = JUDGE.replace("threshold: 0.6", "threshold: 0.6\n        fallback: deny")
    k = make_kernel(config(pol, extra), mode="server").start()
    api = Signed(k.port, "up", SECRET)
    eid, dref = start(api, k)
    dec = submit(api, eid, dref, "bash", {"command": "ls"})
    assert dec["decision"] == "denied" and dec["reason"].startswith("judge unavailable"), dec
    assert "the judge model gave no verdict" in k.read_log()


@pytest.mark.parametrize("then,where", [
    ("{decision: allow, rate_limit: {max_calls: 2, window: 1m, max_wait: soon}}", "max_wait"),
    ("{decision: allow, rate_limit: {max_calls: 0, window: 1m}}", "max_calls"),
    ("{decision: allow, rate_limit: {max_calls: 2}}", "needs max_calls and window"),
    ("{decision: allow, rate_limit: {max_calls: 2, window: 1m, per_what: session}}", "per_what"),
    ("{decision: deny, budget: {max_tokens: 10}}", "budget is only valid with decision: allow"),
    ("{decision: allow, budget: {max_tokens: 10, on_exceed: ask}}", "on_exceed"),
    ("{decision: allow, judge: {threshold: 0.5}}", "judge is only valid with decision: judge"),
    ("{decision: judge, judge: {threshold: 2}}", "threshold"),
    ("{decision: judge, judge: {fallback: maybe}}", "fallback"),
    ("{decision: allow, approval_config: {approvers: [a]}}", "approval_config is only valid"),
])
def test_bad_rule_options_are_refused_at_load(tmp_path, then, where):
    f = tmp_path / "p.yaml"
    f.write_text(f"default_action: deny\nrules:\n  - id: r\n    when: {{target: x}}\n    then: {then}\n")
    p = subprocess.run([BIN, "policy", "check", str(f)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and where in p.stderr and "p.yaml:5:" in p.stderr, p.stderr


def test_upstream_rule_options_load(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text(JUDGE + RATE.split("rules:\n")[1] + BUDGET.split("rules:\n")[1])
    p = subprocess.run([BIN, "policy", "check", str(f)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "6 rules" in p.stdout, p.stdout + p.stderr


def test_bad_judge_url_is_a_config_error(tmp_path):
    cfg = tmp_path / "rebuno.yaml"
    cfg.write_text(config(JUDGE, "judge_url: ftp://x/y\n"))
    p = subprocess.run([BIN, "server", "--config", str(cfg), "--state-dir", str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "judge_url" in p.stderr, p.stderr


PARK = """
default_action: allow
rules:
  - id: slow-search
    when: {target: web_search}
    then:
      decision: allow
      rate_limit: {max_calls: 1, window: 2s, max_wait: 10s}
  - id: no-wait
    when: {target: fetch}
    then:
      decision: allow
      rate_limit: {max_calls: 1, window: 1h, max_wait: 1s}
"""


def test_rate_limit_max_wait_parks_once(make_kernel):
    """max_wait: over the limit the step parks (blocked, reason rate_limited; the execution
    stays running) and a fresh dispatch comes once the window allows it; an execution parks
    once, and a wait longer than max_wait is refused."""
    k = make_kernel(config(PARK), mode="server").start()
    api = Signed(k.port, "up", SECRET)
    eid, dref = start(api, k)
    assert submit(api, eid, dref, "fetch")["decision"] == "proceed"
    assert submit(api, eid, dref, "fetch", {"n": 2})["decision"] == "rate_limited"  # 1h > max_wait 1s
    assert submit(api, eid, dref, "web_search", {"q": 1})["decision"] == "proceed"
    dec = submit(api, eid, dref, "web_search", {"q": 2})
    assert dec == {"decision": "blocked", "reason": "rate_limited", "rule_id": "slow-search"}, dec
    ex = k.ok("GET", f"/v0/executions/{eid}", key=ADMIN)
    assert ex["status"] == "running"
    ev = k.ok("GET", f"/v0/executions/{eid}/events", key=ADMIN)
    park = [e for e in ev if e["type"] == "step.rate_limited" and e["payload"].get("parked")]
    assert len(park) == 1 and park[0]["payload"]["until"], park
    # nothing to claim until the window allows the call, then a fresh dispatch
    w = api.ok("POST", "/v0/agents/up/workers", {})["worker_id"]
    c = api.ok("POST", "/v0/agents/up/claim", {"worker_id": w, "wait_seconds": 15})
    assert c["execution"]["id"] == eid and c["dispatch"]["id"] != dref[0], c
    d2 = (c["dispatch"]["id"], c["dispatch"]["attempt"])
    assert submit(api, eid, d2, "web_search", {"q": 1})["decision"] == "proceed"  # replayed occurrence
    assert submit(api, eid, d2, "web_search", {"q": 2})["decision"] == "proceed"
    # parked once already: now refused
    assert submit(api, eid, d2, "web_search", {"q": 3})["decision"] == "rate_limited"
    # the old dispatch is no longer current
    st, out = api.request("POST", f"/v0/executions/{eid}/heartbeat", dispatch=dref)
    assert st == 409, out
