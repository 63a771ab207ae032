"""`rebuno store copy`: the embedded SQLite store into PostgreSQL and back, compared row by row.

A history with every kind of row (agents, executions in a session and a fork, events, steps,
step counters, approvals, resources, checkpoints) is made on SQLite, copied to a real
PostgreSQL (pgserver.py) and from there into a new SQLite file; every table must hold the
same rows in all three, and a kernel on the copy must serve the same executions and events.
"""
import json
import os
import sqlite3
import subprocess
import uuid

import pytest

import pgserver
from conftest import BIN, Dispatch
from test_sessions_forks import capture, register, run_step

POLICY = """
agents:
  - name: coder
    policy: |
      default_action: allow
      rules:
        - id: pr
          when:
            target: open_pr
          then:
            decision: require_approval
            reason: needs a look
"""

# (table, columns compared, order): every column but PostgreSQL's own step order column and
# an agent's first-seen time (the copy records when it copied the agent)
TABLES = {
    "agents": "name",
    "executions": "*",
    "events": "*",
    "steps": "step_id, execution_id, kind, target, args_hash, occurrence, idempotency, status, args, result,"
             " error, rule_id, approval_id, runs, indeterminate, created_at, completed_at, resources",
    "step_counters": "*",
    "approvals": "*",
    "resources": "*",
    "checkpoints": "*",
}


@pytest.fixture(scope="module")
def pg():
    server = pgserver.PgServer().start()
    yield server
    server.destroy()


def sqlite_rows(path, table, cols):
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    rows = [dict(r) for r in db.execute(f"SELECT {cols} FROM {table}")]
    db.close()
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


def pg_rows(pg, schema, table, cols):
    text = pg.psql(f"SELECT coalesce(json_agg(t), '[]') FROM (SELECT {cols} FROM {table}) t", schema=schema)
    return sorted(json.loads(text), key=lambda r: json.dumps(r, sort_keys=True))


def history(k):
    """Sessions, a held approval granted, resources with checkpoints, a fork, a counter."""
    ex = k.create("coder", {"task": "one"}, session="s1")
    waiting = k.create("coder", {"task": "two"}, session="s1")
    d = Dispatch(k, k.claim("coder", k.worker("coder")))
    register(d, every_steps=2)
    capture(d, "ws", 0, "cp0")
    run_step(d, "write_a", resources=["ws"])
    run_step(d, "write_b", resources=["ws"], captures_ref="cp2")
    held = d.submit("open_pr", {"title": "x"}, idempotency="at_most_once")
    assert held["decision"] == "blocked"
    k.ok("POST", f"/v0/approvals/{held['approval_id']}/grant", {"decided_by": "bob"})
    d2 = Dispatch(k, k.claim("coder", k.worker("coder"), wait=5))
    for t in ("write_a", "write_b"):
        assert d2.submit(t, {"n": t}, resources=["ws"])["decision"] == "replay"
    go = d2.submit("open_pr", {"title": "x"}, idempotency="at_most_once")
    d2.finish(go["step_id"], result={"pr": 7})
    assert d2.complete({"out": "done"})[0] == 204
    fork = k.ok("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": 5, "session": "f1"}, status=201)
    other = k.create("hello", {"unconfigured": True})  # dev mode records the agent
    return [ex["id"], waiting["id"], fork["id"], other["id"]]


def copy(src, dst):
    out = subprocess.run([BIN, "store", "copy", "--from", src, "--to", dst], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.decode()


def test_copy_round_trip_row_by_row(make_kernel, pg, tmpdir_path):
    src = os.path.join(tmpdir_path, "src.db")
    k = make_kernel(POLICY, args=["--store", f"sqlite:{src}"]).start()
    ids = history(k)
    api = {i: (k.ok("GET", f"/v0/executions/{i}"), k.events(i)) for i in ids}
    k.stop()

    schema = pg.schema_for(uuid.uuid4().hex)
    uri = pg.schema_uri(schema)
    said = copy(f"sqlite:{src}", uri)
    assert said.startswith("copied 4 executions"), said
    back = os.path.join(tmpdir_path, "back.db")
    copy(uri, f"sqlite:{back}")

    for table, cols in TABLES.items():
        a = sqlite_rows(src, table, cols)
        assert a, f"the history made no {table} rows: nothing compared"
        assert pg_rows(pg, schema, table, cols) == a, table
        assert sqlite_rows(back, table, cols) == a, table

    # A kernel on the copy serves the same executions and logs.
    k2 = make_kernel(POLICY, args=["--store", uri]).start()
    for i, (got, events) in api.items():
        assert k2.ok("GET", f"/v0/executions/{i}") == got
        assert k2.events(i) == events


def test_copy_refuses_a_target_with_executions_and_a_missing_source(make_kernel, pg, tmpdir_path):
    schema = pg.schema_for(uuid.uuid4().hex)
    uri = pg.schema_uri(schema)
    k = make_kernel(args=["--store", uri]).start()
    k.create("hello", {})
    k.stop()
    src = os.path.join(tmpdir_path, "x.db")
    k3 = make_kernel(args=["--store", f"sqlite:{src}"]).start()
    k3.stop()
    out = subprocess.run([BIN, "store", "copy", "--from", f"sqlite:{src}", "--to", uri],
                         stderr=subprocess.PIPE, timeout=60)
    assert out.returncode == 1 and b"already holds executions" in out.stderr
    out = subprocess.run([BIN, "store", "copy", "--from", "sqlite:/nonexistent/kernel.db", "--to", uri],
                         stderr=subprocess.PIPE, timeout=60)
    assert out.returncode == 1 and b"cannot read /nonexistent/kernel.db" in out.stderr
    out = subprocess.run([BIN, "store", "copy", "--from", uri], stderr=subprocess.PIPE, timeout=60)
    assert out.returncode == 2 and b"--to" in out.stderr
