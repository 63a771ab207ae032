"""What is set at run time reaches every replica on one PostgreSQL (issue 18): an agent,
its policy and its deletion made on one replica hold on another at once, and an API key
made on one works on the other."""
import time

from test_multi_replica import pg, replicas  # noqa: F401 (fixture)
from test_upstream_wire import ADMIN, CLIENT, config


def eventually(fn, timeout=10):
    end = time.time() + timeout
    while True:
        v = fn()
        if v or time.time() > end:
            return v
        time.sleep(0.05)


def test_runtime_changes_reach_other_replicas(make_kernel, pg):  # noqa: F811
    a, b = replicas(make_kernel, pg, 2, config=config("up", lease=30))
    a.ok("POST", "/v0/agents", {"id": "late"}, key=ADMIN, status=201)
    assert eventually(lambda: b.request("GET", "/v0/agents/late", key=CLIENT)[0] == 200)
    bundle = "default_action: deny\nrules:\n  - id: ok-ls\n    when: {target: ls}\n    then: {decision: allow}\n"
    assert a.request("POST", "/v0/policies/late", {"bundle": bundle}, key=ADMIN)[0] == 204
    assert eventually(lambda: b.ok("GET", "/v0/policies/late", key=CLIENT).get("bundle") == bundle)
    rep = b.ok("POST", "/v0/policies/late/test", {"cases": [{"target": "ls"}, {"target": "x"}]}, key=ADMIN)
    assert [r["decision"] for r in rep["results"]] == ["allow", "deny"]
    key = a.ok("POST", "/v0/api-keys", {"name": "r", "scopes": ["agents:read"]}, key=ADMIN, status=201)
    assert eventually(lambda: b.request("GET", "/v0/agents", key=key["token"])[0] == 200)
    assert a.request("DELETE", f"/v0/api-keys/{key['id']}", key=ADMIN)[0] == 204
    assert eventually(lambda: b.request("GET", "/v0/agents", key=key["token"])[0] == 401)
    assert a.request("DELETE", "/v0/agents/late", key=ADMIN)[0] == 204
    assert eventually(lambda: b.request("GET", "/v0/agents/late", key=CLIENT)[0] == 404)
