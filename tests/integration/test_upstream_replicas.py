"""What is set at run time reaches every replica on one PostgreSQL (issue 18): an agent,
its policy and its deletion made on one replica hold on another at once, and an API key
made on one works on the other at once, and one revoked or rotated there is refused at once;
per-agent and global rate limits let exactly max_calls through however the replicas race."""
import re
import threading
import time

from test_multi_replica import pg, replicas  # noqa: F401 (fixture)
from test_policy_rules import ADMIN as RULES_ADMIN, SECRET as RULES_SECRET, config as rules_config
from test_upstream_wire import ADMIN, CLIENT, config
from upstream_agent import Signed


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
    assert a.request("DELETE", "/v0/agents/late", key=ADMIN)[0] == 204
    assert eventually(lambda: b.request("GET", "/v0/agents/late", key=CLIENT)[0] == 404)


def unknown_keys(k):
    """(read, refused_unread) of rebuno_unknown_api_keys_total on kernel k."""
    st, text = k.request("GET", "/metrics", auth=False)
    assert st == 200, text
    got = [int(re.search(rf'rebuno_unknown_api_keys_total{{result="{r}"}} (\d+)', text).group(1))
           for r in ("read", "refused_unread")]
    return tuple(got)


def test_api_keys_hold_on_every_replica_at_once(make_kernel, pg):  # noqa: F811
    """No waiting for the other replica to hear of it: each judges a run-time key as the
    store has it. Every assertion here is the first request after the change."""
    a, b = replicas(make_kernel, pg, 2, config=config("up", lease=30))
    for i in range(20):  # made on A, used on B at once (20 times: no luck in the timing)
        key = a.ok("POST", "/v0/api-keys", {"name": f"r{i}", "scopes": ["agents:read"]}, key=ADMIN, status=201)
        st, body = b.request("GET", "/v0/agents", key=key["token"])
        assert st == 200, (i, st, body)
        assert a.request("DELETE", f"/v0/api-keys/{key['id']}", key=ADMIN)[0] == 204
        st, body = b.request("GET", "/v0/agents", key=key["token"])
        assert st == 401 and body["details"]["field"] == "Authorization", (i, st, body)
    # rotated on A: the old token is refused on B at once, the new one accepted
    key = a.ok("POST", "/v0/api-keys", {"name": "rot", "scopes": ["agents:read"]}, key=ADMIN, status=201)
    assert b.request("GET", "/v0/agents", key=key["token"])[0] == 200  # B knows the old token now
    new = a.ok("POST", f"/v0/api-keys/{key['id']}/rotate", key=ADMIN)
    assert b.request("GET", "/v0/agents", key=key["token"])[0] == 401
    assert b.request("GET", "/v0/agents", key=new["token"])[0] == 200
    # a flood of made-up tokens is refused, and costs the store at most 100 reads a second;
    # one seen before costs none; the real key still works on both replicas afterwards
    read0, unread0 = unknown_keys(b)
    t0 = time.monotonic()
    for i in range(300):
        st, _ = b.request("GET", "/v0/agents", key="rbk_" + f"{i:048x}")
        assert st == 401
    seconds = time.monotonic() - t0
    read, unread = unknown_keys(b)
    assert read - read0 + unread - unread0 == 300
    assert read - read0 <= 100 * (int(seconds) + 2), (read - read0, seconds)
    assert b.request("GET", "/v0/agents", key="rbk_" + f"{7:048x}")[0] == 401
    assert unknown_keys(b) == (read, unread + 1)  # remembered: refused unread
    assert b.request("GET", "/v0/agents", key="rbk_short")[0] == 401
    assert unknown_keys(b) == (read, unread + 1)  # not a token at all: never looked up
    assert b.request("GET", "/v0/agents", key=new["token"])[0] == 200
    assert a.request("GET", "/v0/agents", key=new["token"])[0] == 200


ROUNDS, RACERS, LIMIT = 6, 24, 3


def rate_policy():
    rules = "".join(f"""  - id: lim-{scope}-{i}
    when: {{target: {scope}-{i}}}
    then:
      decision: allow
      rate_limit: {{max_calls: {LIMIT}, window: 1h, per_what: {scope}}}
""" for scope in ("agent", "global") for i in range(ROUNDS))
    return "default_action: allow\nrules:\n" + rules


def test_rate_limit_is_exact_across_replicas(make_kernel, pg):  # noqa: F811
    """Agent and global limits count every replica's steps: RACERS executions, spread over
    three replicas, submit the same limited call at once, round after round; exactly LIMIT
    of each round proceed (without serialising the decision, two replicas each saw
    LIMIT - 1 and both let one through)."""
    ks = replicas(make_kernel, pg, 3, config=rules_config(rate_policy()))
    apis = [Signed(k.port, "up", RULES_SECRET) for k in ks]
    runs = []
    for i in range(RACERS):
        k, api = ks[i % 3], apis[i % 3]
        k.ok("POST", "/v0/executions", {"agent_id": "up", "input": {}}, key=RULES_ADMIN)
        w = api.ok("POST", "/v0/agents/up/workers", {})["worker_id"]
        c = api.ok("POST", "/v0/agents/up/claim", {"worker_id": w, "wait_seconds": 5})
        runs.append((c["execution"]["id"], (c["dispatch"]["id"], c["dispatch"]["attempt"])))
    for scope in ("agent", "global"):
        for rnd in range(ROUNDS):
            gate = threading.Barrier(2 * RACERS)
            got = [None] * (2 * RACERS)

            def racer(i, target=f"{scope}-{rnd}"):
                # the first RACERS submit the limited call; as many more submit an unlimited
                # one beside them on the same executions through another replica, so limited
                # decisions also come late in a replica's batch, and a batch holding a limit's
                # lock meets execution rows another replica holds
                eid, dref = runs[i % RACERS]
                gate.wait()
                st, out = apis[(i + i // RACERS) % 3].request("POST", f"/v0/executions/{eid}/steps",
                                              {"kind": "tool_call", "target": target if i < RACERS else "free",
                                               "args": {"round": f"{scope}-{rnd}"}}, dispatch=dref)
                got[i] = out["decision"] if st == 200 else (st, out)

            threads = [threading.Thread(target=racer, args=(i,)) for i in range(2 * RACERS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert got[RACERS:] == ["proceed"] * RACERS, got
            assert sorted(set(map(str, got[:RACERS]))) == ["proceed", "rate_limited"], got
            assert got[:RACERS].count("proceed") == LIMIT, (scope, rnd, got)
    # what the agent was told is what was recorded: LIMIT steps per rule in the store
    steps = [s for eid, _ in runs for s in ks[0].ok("GET", f"/v0/executions/{eid}/steps", key=RULES_ADMIN)]
    for scope in ("agent", "global"):
        for rnd in range(ROUNDS):
            assert sum(s["target"] == f"{scope}-{rnd}" for s in steps) == LIMIT
