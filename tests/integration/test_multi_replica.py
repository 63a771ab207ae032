"""Several kernel replicas on one PostgreSQL form one deployment.

A real PostgreSQL (pgserver.py) for this module; each test gets a schema of its own and 2-3
`rebuno server` processes on it. What one process made implicit must hold across them:
gap-free seq whoever appends, one winner per claim/step/approval, long-polls and SSE woken
by other replicas' commits, re-dispatch after a replica dies, 503 (never a wrong 2xx) while
the database restarts, and nothing acknowledged lost.
"""
import json
import os
import re
import threading
import time
import uuid

import pytest

import pgserver
from conftest import Dispatch, free_port
from test_events import read_sse

POLICY = """
agents:
  - name: coder
    lease_timeout_seconds: 30
    policy: |
      default_action: allow
      rules:
        - id: open-pr
          when:
            target: open_pr
          then:
            decision: require_approval
            reason: opening a pull request needs approval
"""


@pytest.fixture(scope="module")
def pg():
    server = pgserver.PgServer().start()
    yield server
    server.destroy()


def replicas(make_kernel, pg, n, config=POLICY, mode="server", extra=()):
    uri = pg.schema_uri(pg.schema_for(uuid.uuid4().hex))
    ks = [make_kernel(config, mode=mode, args=["--store", uri, *extra]) for _ in range(n)]
    for k in ks:
        k.start()
    return ks


UUIDISH = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{64}")


def normalised(events):
    """The log without what differs between runs: ids, times, deadlines."""
    ids = {}

    def norm(v, key=""):
        if isinstance(v, dict):
            return {k: norm(x, k) for k, x in sorted(v.items())}
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, str):
            if key.endswith("_at") or "deadline" in key:
                return "<time>"
            return UUIDISH.sub(lambda m: ids.setdefault(m.group(0), f"<id{len(ids)}>"), v)
        if isinstance(v, (int, float)) and (key.endswith("_at") or "deadline" in key):
            return "<time>"
        return v

    return [(e["event_seq"], e["type"], norm(e.get("payload", e.get("data")))) for e in events]


def scenario(a, b, c):
    """Created on a, claimed through b, steps alternately on a and b, approved on c."""
    ex = a.create("coder", {"task": "fix"})
    claim = b.claim("coder", b.worker("coder"))
    da, db = Dispatch(a, claim), Dispatch(b, claim)
    s1 = da.submit("shell", {"command": "make test"})
    assert s1["decision"] == "proceed"
    db.finish(s1["step_id"], result={"ok": True})
    s2 = db.submit("read_file", {"path": "README"})
    da.finish(s2["step_id"], result="text")
    held = da.submit("open_pr", {"title": "Fix"}, idempotency="at_most_once")
    assert held["decision"] == "blocked", held
    c.ok("POST", f"/v0/approvals/{held['approval_id']}/grant", {"decided_by": "bob", "rationale": "fine"})
    claim2 = a.claim("coder", a.worker("coder"), wait=5)
    assert claim2 is not None
    da2, db2 = Dispatch(a, claim2), Dispatch(b, claim2)
    assert db2.submit("shell", {"command": "make test"})["decision"] == "replay"  # recorded: replayed
    go = da2.submit("open_pr", {"title": "Fix"}, idempotency="at_most_once")
    assert go["decision"] == "proceed" and go["step_id"] == held["step_id"]
    db2.finish(go["step_id"], result={"pr": 1})
    assert da2.complete({"done": True})[0] == 204
    return ex["id"]


def test_alternating_replicas_build_the_log_one_replica_builds(make_kernel, pg):
    a, b, c = replicas(make_kernel, pg, 3)
    multi = scenario(a, b, c)
    (solo,) = replicas(make_kernel, pg, 1)
    single = scenario(solo, solo, solo)
    logs = [k.events(multi) for k in (a, b, c)]
    assert logs[0] == logs[1] == logs[2]  # every replica reads the same log
    assert [e["event_seq"] for e in logs[0]] == list(range(1, len(logs[0]) + 1))
    assert normalised(logs[0]) == normalised(solo.events(single))


def test_long_poll_on_one_replica_wakes_for_work_queued_on_another(make_kernel, pg):
    a, b = replicas(make_kernel, pg, 2)
    w = a.worker("coder")
    got = {}

    def poll():
        got["claim"] = a.claim("coder", w, wait=30)

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.5)  # let the claim park on a
    ex = b.create("coder", {})
    t.join(35)
    # Nothing on a polls the database for queued work: only b's NOTIFY can end the wait
    # with the execution before the 30 s run out (a timed-out wait answers 204 -> None).
    assert got["claim"] is not None and got["claim"]["execution"]["id"] == ex["id"]


def test_sse_on_one_replica_streams_what_another_appends(make_kernel, pg):
    a, b = replicas(make_kernel, pg, 2)
    ex = b.create("coder", {})
    frames = {}

    def watch():
        frames["all"] = read_sse(a.port, f"/v0/executions/{ex['id']}/events/stream", timeout=30)

    t = threading.Thread(target=watch)
    t.start()
    time.sleep(0.3)
    d = Dispatch(b, b.claim("coder", b.worker("coder")))
    for i in range(10):
        d.finish(d.submit("t", {"i": i})["step_id"], result=i)
    d.complete("ok")
    t.join(30)
    assert not t.is_alive(), "the stream on a did not end after b's terminal event"
    seqs = [int(f["id"]) for f in frames["all"]]
    assert seqs == [e["event_seq"] for e in b.events(ex["id"])]
    assert frames["all"][-1]["event"] == "execution.completed"


def test_list_stream_on_one_replica_tells_what_another_changes(make_kernel, pg):
    """The dashboard's live list (GET /v0/executions/stream) hears other replicas' commits
    through the NOTIFY path; counts and the time filter read the shared table."""
    from test_exec_list import Sse
    a, b = replicas(make_kernel, pg, 2)
    s = Sse(a.port, "/v0/executions/stream?agent_id=coder")
    try:
        assert s.next() == ("ready", {})
        ex = b.create("coder", {})
        ev, row = s.next(timeout=20)
        assert ev == "execution" and row["id"] == ex["id"] and row["status"] == "pending"
        b.ok("POST", f"/v0/executions/{ex['id']}/cancel", {})
        while s.next(timeout=20)[1]["status"] != "cancelled":
            pass
    finally:
        s.close()
    c = a.ok("GET", f"/v0/executions/counts?agent_id=coder&created_after={ex['created_at']}")
    assert c["total"] == 1 and c["counts"]["cancelled"] == 1, c
    assert [x["id"] for x in a.ok("GET", f"/v0/executions?created_before={ex['created_at']}")["executions"]] == []


def test_one_claim_wins_across_replicas(make_kernel, pg):
    ks = replicas(make_kernel, pg, 3, config=None, mode="dev")
    ids = {ks[0].create("racer", {"i": i})["id"] for i in range(30)}
    claimed, lock = [], threading.Lock()

    def worker(k):
        w = k.worker("racer")
        while True:
            c = k.claim("racer", w)
            if c is None:
                return
            with lock:
                claimed.append(c["execution"]["id"])

    threads = [threading.Thread(target=worker, args=(k,)) for k in ks for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(claimed) == sorted(ids)  # each exactly once


# --- kill -9 of one replica under 32 agents ---------------------------------------------------

class Acks:
    def __init__(self):
        self.lock = threading.Lock()
        self.execs, self.proceeds, self.completed = set(), set(), set()
        self.results = {}
        self.effects = []  # (exec_id, step_id) of every at_most_once effect an agent performed
        self.errors = []


def agent_loop(k, agent, acks, stop, rounds=None):
    """A simulated agent on replica k; every 2xx is remembered. Returns on stop or error."""
    try:
        w = k.worker(agent)
        n = 0
        while not stop.is_set() and (rounds is None or n < rounds):
            n += 1
            ex = k.create(agent, {"agent": agent})
            with acks.lock:
                acks.execs.add(ex["id"])
            c = k.claim(agent, w, wait=10)
            if c is None:
                continue
            d = Dispatch(k, c)
            with acks.lock:
                acks.execs.add(d.exec_id)
            for i in range(3):
                dec = d.submit("tool", {"i": i})
                if dec["decision"] == "proceed":
                    with acks.lock:
                        acks.proceeds.add(dec["step_id"])
                    d.finish(dec["step_id"], result={"i": i})
                    with acks.lock:
                        acks.results[dec["step_id"]] = {"i": i}
            eff = d.submit("charge_card", {"amount": 5}, idempotency="at_most_once")
            if eff["decision"] == "proceed":
                with acks.lock:
                    acks.effects.append((d.exec_id, eff["step_id"]))
                d.finish(eff["step_id"], result={"charged": 5})
            st, _ = d.complete({"done": agent})
            if st == 200:
                with acks.lock:
                    acks.completed.add(d.exec_id)
    except (OSError, AssertionError, TypeError, KeyError) as e:
        acks.errors.append(repr(e))


def check_acks(k, acks):
    for ex_id in acks.execs:
        got = k.ok("GET", f"/v0/executions/{ex_id}")
        seqs = [e["event_seq"] for e in k.events(ex_id)]
        assert seqs == list(range(1, len(seqs) + 1)), f"gap in {ex_id}: {seqs}"
        if ex_id in acks.completed:
            assert got["status"] == "completed", got
    steps = {}
    for ex_id in acks.execs:
        for s in k.ok("GET", f"/v0/executions/{ex_id}/steps"):
            steps[s["step_id"]] = s
    for step_id in acks.proceeds:
        assert step_id in steps, f"acknowledged step {step_id} was lost"
    for step_id, result in acks.results.items():
        assert steps[step_id]["status"] == "succeeded" and steps[step_id]["result"] == result
    effect_steps = [s for _, s in acks.effects]
    assert len(effect_steps) == len(set(effect_steps)), "an at_most_once effect ran twice"


LEASE_CONFIG = """
agents:
""" + "".join(f"  - name: a{i}\n    lease_timeout_seconds: 2\n" for i in range(32))


def test_kill9_one_replica_under_32_agents(make_kernel, pg):
    a, b = replicas(make_kernel, pg, 2, config=LEASE_CONFIG)
    acks = Acks()
    stop_a, stop_b = threading.Event(), threading.Event()
    threads = [threading.Thread(target=agent_loop, args=(a if i % 2 else b, f"a{i}", acks,
                                                         stop_a if i % 2 else stop_b)) for i in range(32)]
    for t in threads:
        t.start()
    time.sleep(2.0)
    a.kill9()  # its agents die with it (same box), mid-dispatch
    stop_a.set()
    time.sleep(0.5)
    stop_b.set()
    for t in threads:
        t.join(30)
    assert len(acks.execs) > 32, "the load did not run long enough to test anything"
    before = set(acks.execs)
    # The dead replica's agents come back on b: after their leases expire (2 s), b's sweep
    # re-queues the executions they held and the new workers finish them.
    leftovers = [e for e in before if b.ok("GET", f"/v0/executions/{e}")["status"] not in ("completed",)]
    assert leftovers, "a held no execution when it died: nothing to re-dispatch"
    rescue = threading.Event()
    end = time.time() + 60
    while time.time() < end:
        rt = [threading.Thread(target=agent_loop, args=(b, f"a{i}", acks, rescue, 1)) for i in range(32)]
        for t in rt:
            t.start()
        for t in rt:
            t.join(60)
        if all(b.ok("GET", f"/v0/executions/{e}")["status"] == "completed" for e in leftovers):
            break
    for e in leftovers:
        got = b.ok("GET", f"/v0/executions/{e}")
        assert got["status"] == "completed", got
    redispatched = [e for e in leftovers if any(ev["type"] == "dispatch.expired" for ev in b.events(e))]
    assert redispatched, "no execution of the dead replica was re-dispatched after its lease expired"
    check_acks(b, acks)


# --- PostgreSQL restarts under load -------------------------------------------------------------

def test_postgres_restart_under_load(make_kernel, pg):
    a, b = replicas(make_kernel, pg, 2, config=None, mode="dev")
    acks = Acks()
    bad = []
    stop = threading.Event()

    def loop(k, agent):
        while not stop.is_set():
            try:
                agent_loop(k, agent, acks, stop, rounds=1)
            except Exception as e:  # noqa: BLE001
                bad.append(repr(e))

    # Every answer during the outage must be a 2xx (acknowledged: checked later) or a 503
    # with a JSON error body; agent_loop's asserts turn anything else into acks.errors.
    statuses = []
    orig = a.request.__func__

    def watched(self, *args, **kw):
        st, out = orig(self, *args, **kw)
        statuses.append((st, out))
        return st, out

    for k in (a, b):
        k.request = watched.__get__(k)
    threads = [threading.Thread(target=loop, args=((a, b)[i % 2], f"p{i}")) for i in range(8)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    pg.restart("fast")
    time.sleep(1.5)
    stop.set()
    for t in threads:
        t.join(60)
    for k in (a, b):
        del k.request
    unavailable = [out for st, out in statuses if st == 503]
    others = [(st, out) for st, out in statuses if st >= 300 and st not in (503, 409)]
    assert unavailable, "the restart did not reach any request (nothing tested)"
    assert all(isinstance(o, dict) and o["code"].startswith("storage_") for o in unavailable), \
        unavailable[:3]
    assert not others, others[:5]
    # Both replicas recover by themselves.
    for k in (a, b):
        end = time.time() + 20
        while True:
            st, _ = k.request("POST", "/v0/executions", {"agent_id": "after"})
            if st == 201 or time.time() > end:
                break
            time.sleep(0.2)
        assert st == 201
    check_acks(a, acks)
    # The listeners reconnected too: a long-poll on a is woken by b's commit again.
    w = a.worker("woken")
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("c", a.claim("woken", w, wait=30)))
    t.start()
    time.sleep(1.5)  # past the listener's reconnect delay, and the claim parked
    ex = b.create("woken", {})
    t.join(35)
    assert got["c"] is not None and got["c"]["execution"]["id"] == ex["id"]


# --- bad stores ---------------------------------------------------------------------------------

def test_unreachable_database_stops_startup_naming_host_and_fix(make_kernel):
    port = free_port()  # nothing listens there
    k = make_kernel(args=["--store", f"postgres://rebuno:hunter2@127.0.0.1:{port}/postgres"])
    k.start(wait=False)
    assert k.proc.wait(30) != 0
    log = k.read_log()
    assert f"127.0.0.1 port {port}" in log and "REBUNO_STORE" in log, log
    assert "hunter2" not in log  # never the password


def test_database_of_a_newer_schema_is_refused(make_kernel, pg):
    schema = pg.schema_for(uuid.uuid4().hex)
    k = make_kernel(args=["--store", pg.schema_uri(schema)]).start()
    k.stop()
    pg.psql("UPDATE meta SET value = '999' WHERE key = 'schema_version'", schema=schema)
    k2 = make_kernel(args=["--store", pg.schema_uri(schema)])
    k2.start(wait=False)
    assert k2.proc.wait(30) != 0
    assert "schema 999" in k2.read_log() and "newer" in k2.read_log()


def test_unknown_store_scheme_is_refused(make_kernel):
    k = make_kernel(args=["--store", "mysql://x@y/z"])
    k.start(wait=False)
    assert k.proc.wait(30) != 0
    assert "postgres://" in k.read_log()


# --- clients given several replicas ---------------------------------------------------------------

KEYS_CONFIG = """
api_keys:
  - key: admin-key-for-the-replica-tests
    role: admin
agents:
  - name: coder
"""


def test_sdk_and_cli_fail_over_between_replicas(make_kernel, pg):
    import subprocess
    import sys

    from conftest import BIN
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
    from rebuno import SyncClient

    a, b = replicas(make_kernel, pg, 2, config=KEYS_CONFIG)
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: the client must move on
    urls = f"{dead},{a.url},{b.url}"
    key = "admin-key-for-the-replica-tests"
    with SyncClient(urls, key) as c:
        ex = c.create("coder", {"n": 1})
        a.kill9()  # the replica it was talking to dies
        assert c.get(ex.id).status == "pending"
        assert c.create("coder", {"n": 2}).status == "pending"
    env = dict(os.environ, REBUNO_URL=f"{dead},{a.url},{b.url}", REBUNO_API_KEY=key)
    out = subprocess.run([BIN, "exec", "--json", "get", ex.id], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    assert json.loads(out.stdout)["id"] == ex.id


SWEEP_CONFIG = """
agents:
  - name: sleepy
    lease_timeout_seconds: 1
    max_attempts: 100
    policy: |
      default_action: allow
      rules:
        - id: ask
          when:
            target: deploy
          then:
            decision: require_approval
            reason: quick
            approval:
              timeout: 1s
"""


def test_sweeps_on_every_replica_expire_each_lease_and_approval_once(make_kernel, pg):
    ks = replicas(make_kernel, pg, 3, config=SWEEP_CONFIG)
    w = ks[0].worker("sleepy")
    leased = []
    for i in range(12):
        ks[i % 3].create("sleepy", {"i": i})
        leased.append(Dispatch(ks[0], ks[1].claim("sleepy", w)))
    held = []
    for i in range(6):
        ex = ks[2].create("sleepy", {"approval": i})
        d = Dispatch(ks[2], ks[2].claim("sleepy", w))
        dec = d.submit("deploy", {"i": i}, idempotency="at_most_once")
        assert dec["decision"] == "blocked"
        held.append((ex["id"], dec["approval_id"]))
    # nobody heartbeats: every replica's sweep sees the same expired leases and approvals
    end = time.time() + 20
    while time.time() < end:
        done = all(any(e["type"] == "dispatch.expired" for e in ks[0].events(d.exec_id)) for d in leased) and \
            all(ks[0].ok("GET", f"/v0/approvals/{a}")["status"] == "expired" for _, a in held)
        if done:
            break
        time.sleep(0.2)
    time.sleep(0.5)  # let every replica sweep again, past the expiry
    for d in leased:
        events = ks[0].events(d.exec_id)
        expired = [e for e in events if e["type"] == "dispatch.expired" and e["payload"]["attempt"] == 1]
        assert len(expired) == 1, [e["type"] for e in events]  # the first lease expired once
        seqs = [e["event_seq"] for e in events]
        assert seqs == list(range(1, len(seqs) + 1))
    for ex_id, approval_id in held:
        types = [e["type"] for e in ks[0].events(ex_id)]
        assert types.count("approval.expired") == 1, types


def test_store_setting_env_and_flag_select_the_same_database(make_kernel, pg):
    uri = pg.schema_uri(pg.schema_for(uuid.uuid4().hex))
    by_config = make_kernel(f"store: {uri}\n").start()
    by_env = make_kernel(env={"REBUNO_STORE": uri}).start()
    by_flag = make_kernel(args=["--store", uri]).start()
    ex = by_config.create("hello", {})
    assert by_env.ok("GET", f"/v0/executions/{ex['id']}")["id"] == ex["id"]
    assert by_flag.ok("GET", f"/v0/executions/{ex['id']}")["id"] == ex["id"]
    assert "store postgres://" in by_env.read_log()
