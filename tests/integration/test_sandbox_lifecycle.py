"""sandboxd lifecycle: create, get, list/query, update, stop/pause/resume, lazy resume,
sessions, timeouts, delete, and surviving daemon restarts (graceful and kill -9)."""
import json
import os
import time
import urllib.parse


def test_create_get_list_delete(sandboxd):
    sb = sandboxd.create("alpha", metadata={"team": "a", "env": "dev"}, env={"FOO": "bar"},
                         resources={"vcpus": 1, "memory": 512}, timeout_ms=60000)
    assert sb["name"] == "alpha" and sb["state"] == "running"
    res = dict(sb["resources"])
    assert 64 <= res.pop("nofile") <= 1024 and res.pop("disk_mb") > 0  # host-derived defaults
    assert res == {"vcpus": 1, "memory": 512, "pids": 1024}
    assert sb["env_keys"] == ["FOO"] and sb["session"]["id"]
    assert sb["usage"]["pids"] >= 1
    assert sandboxd.get("alpha")["id"] == sb["id"]
    assert sandboxd.get(sb["id"])["name"] == "alpha"
    sandboxd.create("beta", metadata={"team": "b"})
    st, err = sandboxd.request("POST", "/v1/sandboxes", {"name": "alpha"})
    assert st == 409 and err["error"]["code"] == "name_taken"

    names = lambda q="": [s["name"] for s in sandboxd.ok("GET", "/v1/sandboxes" + q)["sandboxes"]]
    assert names() == ["alpha", "beta"]
    meta = urllib.parse.quote(json.dumps({"team": "a"}))
    assert names(f"?metadata={meta}") == ["alpha"]
    sandboxd.ok("POST", "/v1/sandboxes/beta/stop")
    assert names("?state=stopped") == ["beta"]
    assert names("?state=running,paused") == ["alpha"]
    page = sandboxd.ok("GET", "/v1/sandboxes?limit=1")
    assert [s["name"] for s in page["sandboxes"]] == ["alpha"] and page["next_cursor"]
    page2 = sandboxd.ok("GET", f"/v1/sandboxes?limit=1&cursor={page['next_cursor']}")
    assert [s["name"] for s in page2["sandboxes"]] == ["beta"]

    sandboxd.ok("DELETE", "/v1/sandboxes/alpha", status=204)
    st, err = sandboxd.request("GET", "/v1/sandboxes/alpha")
    assert st == 404 and err["error"]["code"] == "sandbox_not_found"
    assert not os.path.exists(os.path.join(sandboxd.state, "sandboxes", sb["id"]))


def test_validation_errors(sandboxd):
    cases = [
        ({"name": "bad name"}, "name"),
        ({"name": "-x"}, "name"),
        ({"name": "x" * 64}, "name"),
        ({"name": "0192f1a0-0000-7000-8000-000000000000"}, "name"),
        ({"metadata": {"k": 1}}, "metadata"),
        ({"metadata": {"bad key": "v"}}, "metadata"),
        ({"env": {"1X": "v"}}, "env"),
        ({"resources": {"vcpus": 0}}, "vcpus"),
        ({"resources": {"memory": 1}}, "memory"),
        ({"resources": {"gpus": 1}}, "gpus"),
        ({"timeout_ms": -1}, "timeout_ms"),
        ({"on_timeout": "explode"}, "on_timeout"),
        ({"image": "Ubuntu 24.04!"}, "image"),
        ({"surprise": True}, "surprise"),
    ]
    for body, field in cases:
        st, err = sandboxd.request("POST", "/v1/sandboxes", body)
        assert st == 400, (body, st, err)
        assert err["error"]["code"] == "validation_error", err
        assert field in (err["error"]["field"] + err["error"]["message"]), (body, err)
    st, err = sandboxd.request("POST", "/v1/sandboxes", raw=b"{not json", headers={})
    assert st == 400
    assert sandboxd.ok("GET", "/v1/sandboxes")["sandboxes"] == []


def test_stop_pause_resume_and_files_survive(sandboxd):
    sandboxd.create("box")
    sandboxd.write("box", "/root/keep.txt", b"kept")
    first = sandboxd.get("box")["session"]["id"]
    r = sandboxd.sh("box", "sleep 1000 & echo $!")
    bg = r["stdout"].strip()

    assert sandboxd.ok("POST", "/v1/sandboxes/box/pause")["state"] == "paused"
    assert sandboxd.get("box")["session"]["id"] == first  # same session, frozen
    assert sandboxd.ok("POST", "/v1/sandboxes/box/resume")["state"] == "running"
    r = sandboxd.sh("box", f"kill -0 {bg} && echo alive")
    assert r["stdout"] == "alive\n"  # memory and processes kept across pause

    st = sandboxd.ok("POST", "/v1/sandboxes/box/stop")
    assert st["state"] == "stopped" and st["session"] is None and st["stop_reason"] == "stopped"
    sb = sandboxd.ok("POST", "/v1/sandboxes/box/resume")
    assert sb["state"] == "running" and sb["session"]["id"] != first
    r = sandboxd.sh("box", f"cat /root/keep.txt; kill -0 {bg} 2>/dev/null || echo gone")
    assert r["stdout"] == "keptgone\n"  # files kept, processes ended


def test_lazy_resume_and_pinned_sessions(sandboxd):
    sandboxd.create("lazy")
    sandboxd.ok("POST", "/v1/sandboxes/lazy/stop")
    # a command resumes a stopped sandbox
    assert sandboxd.run("lazy", "echo", ["up"])["stdout"] == "up\n"
    sess = sandboxd.get("lazy")["session"]["id"]
    # a file call resumes a paused one (thaw, same session)
    sandboxd.ok("POST", "/v1/sandboxes/lazy/pause")
    sandboxd.write("lazy", "/tmp/f", b"x")
    assert sandboxd.get("lazy")["state"] == "running"
    assert sandboxd.get("lazy")["session"]["id"] == sess
    # a pinned session never resumes
    body = {"cmd": "true", "wait": True, "session": sess}
    assert sandboxd.request("POST", "/v1/sandboxes/lazy/commands", body)[0] == 200
    sandboxd.ok("POST", "/v1/sandboxes/lazy/pause")
    st, err = sandboxd.request("POST", "/v1/sandboxes/lazy/commands", body)
    assert st == 409 and err["error"]["code"] == "session_paused"
    sandboxd.ok("POST", "/v1/sandboxes/lazy/stop")
    st, err = sandboxd.request("POST", "/v1/sandboxes/lazy/commands", body)
    assert st == 409 and err["error"]["code"] == "session_ended"
    st, _ = sandboxd.request("GET", f"/v1/sandboxes/lazy/files/stat?path=/&session={sess}")
    assert st == 409
    assert sandboxd.get("lazy")["state"] == "stopped"
    # create without starting: the first call starts it
    sandboxd.create("cold", start=False)
    assert sandboxd.get("cold")["state"] == "stopped"
    assert sandboxd.run("cold", "true")["exit_code"] == 0


def test_timeout_stop_pause_and_extend(sandboxd):
    sandboxd.create("t-stop", timeout_ms=700)
    sandboxd.create("t-pause", timeout_ms=700, on_timeout="pause")
    sandboxd.create("t-ext", timeout_ms=700)
    sandboxd.ok("POST", "/v1/sandboxes/t-ext/extend", {"duration_ms": 60000})
    time.sleep(1.5)
    s = sandboxd.get("t-stop")
    assert s["state"] == "stopped" and s["stop_reason"] == "timeout"
    assert sandboxd.get("t-pause")["state"] == "paused"
    assert sandboxd.get("t-ext")["state"] == "running"
    # resume keeps the configured timeout (not a default): it expires again
    r = sandboxd.ok("POST", "/v1/sandboxes/t-pause/resume")
    assert r["timeout_ms"] == 700 and r["expires_at"]
    time.sleep(1.2)
    assert sandboxd.get("t-pause")["state"] == "paused"
    # the timeout can be changed
    sandboxd.ok("PATCH", "/v1/sandboxes/t-ext", {"timeout_ms": 0, "metadata": {"x": "y"}})
    s = sandboxd.get("t-ext")
    assert s["expires_at"] is None and s["metadata"] == {"x": "y"}
    st, err = sandboxd.request("POST", "/v1/sandboxes/t-stop/extend", {"duration_ms": 1000})
    assert st == 409


def test_restart_graceful_and_kill9_keep_files(make_sandboxd):
    d = make_sandboxd().start()
    d.create("keep", metadata={"k": "v"})
    d.create("paused-one")
    d.write("keep", "/root/data.txt", b"important")
    d.sh("keep", "mkdir -p /opt/app && echo built > /opt/app/out && useradd -m bob 2>/dev/null; true")
    d.ok("POST", "/v1/sandboxes/paused-one/pause")
    sid = d.get("keep")["id"]
    d.stop()  # graceful: sessions end, files stay
    assert not any(os.path.exists(x) for x in d.cgroup_dirs())
    d.start()
    s = d.get("keep")
    assert s["state"] == "stopped" and s["stop_reason"] == "daemon_shutdown"
    assert s["metadata"] == {"k": "v"} and s["id"] == sid
    assert d.read("keep", "/root/data.txt") == (200, b"important")

    # kill -9 with running sandboxes: they come back stopped, files intact, no leftovers
    d.sh("keep", "echo more >> /root/data.txt; sleep 1000 &")
    d.ok("POST", "/v1/sandboxes/paused-one/resume")
    d.ok("POST", "/v1/sandboxes/paused-one/pause")
    d.kill9()
    d.start()
    for name in ("keep", "paused-one"):
        s = d.get(name)
        assert s["state"] == "stopped" and s["stop_reason"] == "daemon_restart", s
    assert d.read("keep", "/root/data.txt") == (200, b"importantmore\n")
    assert d.sh("keep", "cat /opt/app/out")["stdout"] == "built\n"
    assert d.ok("GET", "/v1/sandboxes?state=running")["sandboxes"][0]["name"] == "keep"
    # no process of the old sessions survived: only the new init and this command
    r = d.sh("keep", "ps -e --no-headers | wc -l")
    assert int(r["stdout"]) <= 4, r


def test_region_is_recorded(make_sandboxd):
    d = make_sandboxd().start()
    assert d.create("r1", region="eu-west-1")["region"] == "eu-west-1"
    assert d.create("r2", start=False)["region"] == "local"      # none given: "local"
    assert d.get("r1")["region"] == "eu-west-1"
    listed = {s["name"]: s["region"] for s in d.ok("GET", "/v1/sandboxes")["sandboxes"]}
    assert listed == {"r1": "eu-west-1", "r2": "local"}
    for bad in ("EU", "eu_west", "eu west", "", "x" * 33, "é", 5, ["a"]):
        st, err = d.request("POST", "/v1/sandboxes", {"name": "bad", "region": bad})
        assert st == 400 and err["error"]["field"] == "region", (bad, st, err)
    assert d.create("r3", region="x" * 32, start=False)["region"] == "x" * 32
    # it cannot be changed, and a fork keeps its source's
    st, err = d.request("PATCH", "/v1/sandboxes/r1", {"region": "us-east-1"})
    assert st == 400 and err["error"]["field"] == "region"
    assert d.ok("POST", "/v1/sandboxes/r1/fork", {"name": "r1-fork"})["region"] == "eu-west-1"
    d.stop()
    d.start()
    assert d.get("r1")["region"] == "eu-west-1" and d.get("r2")["region"] == "local"


def test_state_folder_from_before_regions_opens(make_sandboxd):
    """A sandboxd.db made before sandboxes had `ext` (schema 1) or `region` (schema 2)
    is upgraded in place when the daemon starts, its sandboxes kept."""
    import sqlite3
    d = make_sandboxd().start()
    d.create("old", start=False, metadata={"k": "v"})
    d.sh("old", "echo kept > /root/f")
    d.stop()
    db_path = os.path.join(d.state, "sandboxd.db")
    for version, columns in (("2", ("region",)), ("1", ("region", "ext"))):
        db = sqlite3.connect(db_path)
        for c in columns:
            db.execute(f"ALTER TABLE sandboxes DROP COLUMN {c}")
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))
        db.commit()
        db.close()
        d.start()
        s = d.get("old")
        assert s["region"] == "local" and s["metadata"] == {"k": "v"}, s
        if version == "2":  # (dropping `ext` loses where its files are: schema 1 had none)
            assert d.sh("old", "cat /root/f")["stdout"] == "kept\n"
        d.stop()
        db = sqlite3.connect(db_path)
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("3",)
        cols = [r[1] for r in db.execute("PRAGMA table_info(sandboxes)")]
        db.close()
        assert "ext" in cols and "region" in cols


def test_cgroup_v2_without_controllers_refuses_to_start(make_sandboxd):
    """--cgroup v2 on a hierarchy without the memory, pids and cpu controllers (this
    machine's hybrid one) would run sandboxes without limits: the daemon refuses."""
    try:
        with open("/sys/fs/cgroup/unified/cgroup.controllers") as f:
            have = f.read().split()
    except OSError:
        import pytest
        pytest.skip("no hybrid unified hierarchy here")
    if {"memory", "pids", "cpu"} <= set(have):
        import pytest
        pytest.skip("this v2 hierarchy has the controllers")
    d = make_sandboxd(args=["--cgroup", "v2"])
    d.start(wait=False)
    try:
        rc = d.proc.wait(60)
    finally:
        d.stop()
    log = d.read_log()
    assert rc != 0, log
    assert "lacks the memory, pids, cpu controllers" in log and "--cgroup v1" in log, log
    assert not os.path.exists(f"/sys/fs/cgroup/unified/{d.cgroup_name}")


def test_refused_limit_changes_nothing(sandboxd):
    """A new limit the kernel refuses for the running session (v1: a memory limit below
    what it uses) fails the update and leaves the sandbox as it was."""
    sandboxd.create("shrink", resources={"memory": 512})
    cg = sandboxd.get("shrink")["usage"]["cgroup"]
    if not cg.startswith("v1:"):
        import pytest
        pytest.skip("v2 enforces a lower memory.max by reclaiming or OOM-killing")
    limit_file = f"/sys/fs/cgroup/memory{cg[3:]}/memory.limit_in_bytes"
    sandboxd.ok("POST", "/v1/sandboxes/shrink/commands", {
        "cmd": "python3", "args": ["-c", "import time\nx = bytearray(200 << 20)\n"
                                   "x[::4096] = b'1' * (len(x) // 4096)\n"
                                   "open('/tmp/ready', 'w').close()\ntime.sleep(3600)"]})
    r = sandboxd.sh("shrink", "for i in $(seq 600); do test -e /tmp/ready && exit 0; sleep 0.1; done;"
                    " exit 1")
    assert r["exit_code"] == 0
    st, err = sandboxd.request("PATCH", "/v1/sandboxes/shrink", {"resources": {"memory": 64},
                                                                 "metadata": {"m": "x"}})
    assert st == 409 and err["error"]["code"] == "busy", (st, err)
    assert "memory" in err["error"]["message"]
    s = sandboxd.get("shrink")
    assert s["resources"]["memory"] == 512 and s["metadata"] == {}
    assert int(open(limit_file).read()) == 512 << 20
    sandboxd.ok("PATCH", "/v1/sandboxes/shrink", {"resources": {"memory": 1024}})
    assert int(open(limit_file).read()) == 1024 << 20
