"""API keys with roles; dev mode without keys serves loopback only."""
from conftest import Dispatch

ADMIN = "admin-key-0123456789abcdef"
CLIENT = "client-key-0123456789abcdef"
CODER = "coder-key-0123456789abcdef"
OTHER = "other-key-0123456789abcdef"

CONFIG = f"""
agents:
  - name: coder
  - name: other
api_keys:
  - key: {ADMIN}
    role: admin
  - key: {CLIENT}
    role: client
  - key: ${{CODER_KEY}}
    role: agent
    agent: coder
  - key: {OTHER}
    role: agent
    agent: other
"""


def test_roles(make_kernel):
    k = make_kernel(CONFIG, mode="server", env={"CODER_KEY": CODER}).start()
    assert k.request("GET", "/v0/health")[0] == 200
    st, out = k.request("GET", "/v0/executions")
    assert st == 401 and out["code"] == "unauthorized"
    st, out = k.request("GET", "/v0/executions", key="wrong-key-0123456789")
    assert st == 401
    ex = k.ok("POST", "/v0/executions", {"agent_id": "coder"}, key=CLIENT, status=201)
    # A client may not act as an agent.
    st, out = k.request("POST", "/v0/agents/coder/workers", {}, key=CLIENT)
    assert st == 403 and out["code"] == "forbidden"
    # An agent key works only for its own agent.
    st, out = k.request("POST", "/v0/agents/coder/workers", {}, key=OTHER)
    assert st == 403
    w = k.ok("POST", "/v0/agents/coder/workers", {}, key=CODER, status=201)["worker_id"]
    st, claim = k.request("POST", "/v0/agents/coder/claim", {"worker_id": w, "wait_seconds": 0}, key=CODER)
    assert st == 200 and claim["execution"]["id"] == ex["id"]
    d = Dispatch(k, claim)
    st, out = k.request("POST", f"/v0/executions/{ex['id']}/steps", {"kind": "tool_call", "target": "x"},
                        headers=d.headers, key=OTHER)
    assert st == 403
    st, out = k.request("GET", f"/v0/executions/{ex['id']}", key=OTHER)
    assert st == 403
    st, listing = k.request("GET", "/v0/executions", key=OTHER)
    assert st == 200 and listing["executions"] == []
    st, out = k.request("POST", f"/v0/executions/{ex['id']}/steps", {"kind": "tool_call", "target": "x"},
                        headers=d.headers, key=CODER)
    assert st == 200 and out["decision"] == "proceed"
    # Agents cannot decide approvals; clients and admins can list them.
    st, _ = k.request("GET", "/v0/approvals", key=CODER)
    assert st == 403
    assert k.request("GET", "/v0/approvals", key=CLIENT)[0] == 200
    assert k.request("GET", "/v0/executions", key=ADMIN)[0] == 200


def test_unset_key_variable_is_an_error(make_kernel):
    k = make_kernel(CONFIG, mode="server")
    k.env = {}
    import os
    os.environ.pop("CODER_KEY", None)
    k.start(wait=False)
    assert k.proc.wait(10) != 0
    assert "CODER_KEY" in k.read_log()


def test_no_keys_refuses_public_listen(make_kernel):
    k = make_kernel()
    k.args = ["--listen", "0.0.0.0:0"]
    k.start(wait=False)
    assert k.proc.wait(10) != 0
    assert "without API keys" in k.read_log()
