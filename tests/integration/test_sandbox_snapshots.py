"""Snapshots, forks and restores of sandboxes (issue 6), against a real sandboxd.

The daemon keeps sandbox trees in a btrfs loop image it makes itself (--storage auto);
one test runs the copy fallback. A snapshot never stops the sandbox: a process that
keeps writing is frozen for the clone only, so each snapshot holds a whole number of
its lines and the process goes on counting.
"""
import json
import re
import time

import pytest


def snap(d, ref, **body):
    return d.ok("POST", f"/v1/sandboxes/{ref}/snapshots", body, status=201)


def restore(d, name, snapshot_id, **fields):
    return d.create(name, source={"type": "snapshot", "snapshot_id": snapshot_id}, **fields)


def text(d, ref, path):
    st, out = d.read(ref, path)
    assert st == 200, (st, out)
    return out.decode()


WRITER = r"""
import os, time
fd = os.open('/root/count.log', os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
i = 0
while True:
    os.write(fd, b'%d\n' % i)   # one write per line
    i += 1
    if i % 50 == 0:
        time.sleep(0.001)
"""


def check_lines(content):
    assert content.endswith("\n"), content[-40:]
    nums = [int(x) for x in content.splitlines()]
    assert nums == list(range(len(nums))), "a gap or a torn line"
    return len(nums)


def check_live_lines(content):
    """The live file is read while the writer appends: a write that straddles a page
    boundary may be seen half done, so a trailing partial line is dropped here.
    Snapshots get the strict check_lines: the freeze makes them whole."""
    return check_lines(content[: content.rfind("\n") + 1])


def test_snapshot_while_a_process_writes_is_consistent_and_never_stops(sandboxd):
    d = sandboxd
    d.create("w", timeout_ms=0)
    cmd = d.ok("POST", "/v1/sandboxes/w/commands", {"cmd": "python3", "args": ["-c", WRITER]},
               status=201)
    time.sleep(0.5)
    counts, frozen = [], []
    for i in range(4):
        before = check_live_lines(text(d, "w", "/root/count.log"))
        s = snap(d, "w")
        frozen.append(float(d.last_headers["X-Rebuno-Frozen-Ms"]))
        assert d.get("w")["state"] == "running"
        r = restore(d, f"r{i}", s["id"])
        n = check_lines(text(d, f"r{i}", "/root/count.log"))
        assert n >= before
        counts.append(n)
        time.sleep(0.2)
        after = check_live_lines(text(d, "w", "/root/count.log"))
        assert after > n, "the writer stopped"
        d.ok("DELETE", f"/v1/sandboxes/r{i}", status=204)
    assert counts == sorted(counts) and counts[-1] > counts[0]
    # the same process still runs: never stopped, never restarted
    c = d.ok("GET", f"/v1/sandboxes/w/commands/{cmd['id']}")
    assert c["status"] == "running" and c["pid"] == cmd["pid"]
    assert max(frozen) < 500, frozen  # a freeze of the clone only, not seconds


def test_snapshot_of_paused_and_stopped_sandboxes_keeps_their_state(sandboxd):
    d = sandboxd
    d.create("p")
    d.write("p", "/root/a.txt", b"one")
    d.ok("POST", "/v1/sandboxes/p/pause")
    s1 = snap(d, "p")
    assert d.get("p")["state"] == "paused"
    d.ok("POST", "/v1/sandboxes/p/stop")
    d.write("p", "/root/a.txt", b"two")  # lazily resumes
    d.ok("POST", "/v1/sandboxes/p/stop")
    s2 = snap(d, "p")
    assert d.get("p")["state"] == "stopped"
    restore(d, "p1", s1["id"])
    restore(d, "p2", s2["id"], start=False)
    assert d.get("p2")["state"] == "stopped"
    assert text(d, "p1", "/root/a.txt") == "one"
    assert text(d, "p2", "/root/a.txt") == "two"
    assert d.get("p1")["source"] == {"type": "snapshot", "snapshot_id": s1["id"],
                                     "sandbox_id": d.get("p")["id"]}


def test_fork_tree_three_levels_with_independent_changes(sandboxd):
    d = sandboxd
    d.create("root", env={"K": "v"}, metadata={"team": "a"}, timeout_ms=600000,
             on_timeout="pause", resources={"vcpus": 1, "memory": 512, "pids": 256},
             snapshot_expiration_ms=3600000)
    r = d.sh("root", "useradd -m alice && echo mine > /home/alice/own && chown alice: "
                     "/home/alice/own && echo root > /root/level && mkdir -p /srv/x && "
                     "echo gone > /srv/x/del")
    assert r["exit_code"] == 0, r
    t0 = time.time()
    c1 = d.ok("POST", "/v1/sandboxes/root/fork", {"name": "c1"}, status=201)
    c2 = d.ok("POST", "/v1/sandboxes/root/fork",
              {"name": "c2", "resources": {"vcpus": 2}, "metadata": {"team": "b"}}, status=201)
    # inherited configuration, overrides only where passed
    for c in (c1, c2):
        assert c["env_keys"] == ["K"] and c["timeout_ms"] == 600000
        assert c["on_timeout"] == "pause" and c["image"] == d.get("root")["image"]
        assert c["snapshot_expiration_ms"] == 3600000 and c["mounts"] == {}
        assert c["source"]["type"] == "fork" and c["source"]["sandbox_name"] == "root"
    assert c1["metadata"] == {"team": "a"} and c2["metadata"] == {"team": "b"}
    inherited = {"memory": 512, "pids": 256, "nofile": d.get("root")["resources"]["nofile"],
                 "disk_mb": d.get("root")["resources"]["disk_mb"]}
    assert c1["resources"] == {"vcpus": 1, **inherited}
    assert c2["resources"] == {"vcpus": 2, **inherited}
    assert d.sh("c1", "echo $K")["stdout"] == "v\n"

    d.sh("c1", "echo c1 > /root/level; rm /srv/x/del; echo c1 > /root/c1-only")
    g = d.ok("POST", "/v1/sandboxes/c1/fork", {"name": "g"}, status=201)
    d.sh("g", "echo g > /root/level; echo g > /root/g-only")
    gg = d.ok("POST", "/v1/sandboxes/g/fork", {"name": "gg"}, status=201)
    assert g["source"]["sandbox_name"] == "c1" and gg["source"]["sandbox_name"] == "g"
    d.sh("gg", "echo gg > /root/level")
    d.sh("root", "echo root2 > /root/level")
    d.sh("c2", "echo c2 > /root/level")

    expect = {"root": "root2", "c1": "c1", "c2": "c2", "g": "g", "gg": "gg"}
    for name, level in expect.items():
        assert text(d, name, "/root/level").strip() == level, name
    ls = {n: d.sh(n, "ls /root /srv/x | sort | tr '\\n' ' '")["stdout"] for n in expect}
    assert "c1-only" in ls["c1"] and "c1-only" in ls["g"] and "c1-only" in ls["gg"]
    assert "c1-only" not in ls["root"] and "c1-only" not in ls["c2"]
    assert "g-only" in ls["g"] and "g-only" in ls["gg"] and "g-only" not in ls["c1"]
    assert "del" in ls["root"] and "del" in ls["c2"] and "del" not in ls["g"]  # whiteouts
    # owners survive the clones: alice's files are alice's in every generation
    for name in expect:
        r = d.sh(name, "stat -c '%U %u' /home/alice/own")
        assert r["stdout"] == "alice 1000\n", (name, r)
        r = d.sh(name, "echo more >> ~/own && id -un", user="alice")
        assert r["stdout"] == "alice\n" and r["exit_code"] == 0, (name, r)
    assert time.time() - t0 < 30


def test_restore_after_daemon_restart(make_sandboxd):
    d = make_sandboxd().start()
    d.create("src")
    d.write("src", "/root/data", b"v1")
    s1 = snap(d, "src", expiration_ms=0)
    d.stop()
    d.start()
    assert [x["id"] for x in d.ok("GET", "/v1/snapshots")["snapshots"]] == [s1["id"]]
    restore(d, "after-restart", s1["id"])
    assert text(d, "after-restart", "/root/data") == "v1"
    # kill -9: the snapshot taken just before survives; the next start reaps the dead
    # daemon's mount of the store (daemons.h) and mounts it again
    d.write("src", "/root/data", b"v2")
    s2 = snap(d, "src")
    d.kill9()
    d.start()
    if 'storage="btrfs (loop image' in d.read_log():
        assert re.search(r'msg="reaped a dead sandboxd" .* store=[1-9]', d.read_log())
    restore(d, "after-kill", s2["id"])
    assert text(d, "after-kill", "/root/data") == "v2"
    f = d.ok("POST", "/v1/sandboxes/after-kill/fork", {"name": "fork-after-kill"}, status=201)
    assert text(d, f["name"], "/root/data") == "v2"


def test_snapshot_list_get_delete_and_not_found(sandboxd):
    d = sandboxd
    d.create("a")
    d.create("b")
    sa, sb = snap(d, "a"), snap(d, "b")
    assert [x["id"] for x in d.ok("GET", "/v1/snapshots")["snapshots"]] == [sa["id"], sb["id"]]
    assert [x["id"] for x in d.ok("GET", "/v1/snapshots?sandbox=b")["snapshots"]] == [sb["id"]]
    page = d.ok("GET", "/v1/snapshots?limit=1")
    assert len(page["snapshots"]) == 1 and page["next_cursor"] == sa["id"]
    assert d.ok("GET", f"/v1/snapshots/{sa['id']}")["sandbox_name"] == "a"
    d.ok("DELETE", f"/v1/snapshots/{sa['id']}", status=204)
    for method in ("GET", "DELETE"):
        st, out = d.request(method, f"/v1/snapshots/{sa['id']}")
        assert st == 404 and out["error"]["code"] == "snapshot_not_found", out
    st, out = d.request("POST", "/v1/sandboxes",
                        {"name": "x", "source": {"type": "snapshot", "snapshot_id": sa["id"]}})
    assert st == 404 and out["error"]["code"] == "snapshot_not_found", out
    assert out["error"]["field"] == "source.snapshot_id"
    st, _ = d.request("GET", "/v1/sandboxes/x")
    assert st == 404
    # a snapshot outlives its sandbox
    d.ok("DELETE", "/v1/sandboxes/b", status=204)
    restore(d, "b2", sb["id"])
    st, out = d.request("POST", "/v1/sandboxes/nope/snapshots", {})
    assert st == 404 and out["error"]["code"] == "sandbox_not_found"
    st, out = d.request("POST", "/v1/sandboxes/a/snapshots", {"expiration_ms": 5})
    assert st == 400 and out["error"]["field"] == "expiration_ms"


def test_snapshot_names_listed_validated_and_kept_by_an_older_store(make_sandboxd):
    """A snapshot's optional name is stored with it (sandboxd.db), shown in get and list,
    filtered on with ?name=; a store made before names existed is given the column."""
    import sqlite3
    d = make_sandboxd().start()
    d.create("a")
    named, plain = snap(d, "a", name="release/v1.0"), snap(d, "a")
    assert named["name"] == "release/v1.0" and plain["name"] is None
    got = d.ok("GET", "/v1/snapshots?name=release/v1.0")["snapshots"]
    assert [x["id"] for x in got] == [named["id"]]
    assert d.ok("GET", "/v1/snapshots?name=nope")["snapshots"] == []
    for bad in ("", "has space", "-leading", "x" * 129, 5):
        st, out = d.request("POST", "/v1/sandboxes/a/snapshots", {"name": bad})
        assert st == 400 and out["error"]["field"] == "name", (bad, out)
    # an older daemon's table has no name column: the next start adds it, rows keep theirs
    d.stop()
    db = sqlite3.connect(f"{d.state}/sandboxd.db")
    db.execute("ALTER TABLE snapshots DROP COLUMN name")
    db.commit()
    db.close()
    d.start()
    assert [x["name"] for x in d.ok("GET", "/v1/snapshots")["snapshots"]] == [None, None]
    again = snap(d, "a", name="after-migration")
    d.stop()
    d.start()
    assert d.ok("GET", f"/v1/snapshots/{again['id']}")["name"] == "after-migration"


def test_snapshot_expiration(sandboxd):
    d = sandboxd
    d.create("e", snapshot_expiration_ms=0)
    never = snap(d, "e")
    assert never["expiration_ms"] == 0 and never["expires_at"] is None
    short = snap(d, "e", expiration_ms=1000)
    assert short["expires_at"] is not None
    d.ok("PATCH", "/v1/sandboxes/e", {"snapshot_expiration_ms": 1000})
    inherited = snap(d, "e")
    assert inherited["expiration_ms"] == 1000
    time.sleep(2.3)
    ids = [x["id"] for x in d.ok("GET", "/v1/snapshots")["snapshots"]]
    assert ids == [never["id"]]
    for s in (short, inherited):
        st, out = d.request("GET", f"/v1/snapshots/{s['id']}")
        assert st == 404
        st, out = d.request("POST", "/v1/sandboxes",
                            {"source": {"type": "snapshot", "snapshot_id": s["id"]}})
        assert st == 404 and out["error"]["code"] == "snapshot_not_found"
    # the daemon's default applies when neither says otherwise
    d.create("f")
    assert snap(d, "f")["expiration_ms"] == 30 * 24 * 3600 * 1000


def test_copy_storage_fallback(make_sandboxd):
    d = make_sandboxd(args=["--storage", "copy"]).start()
    assert 'storage="copy' in d.read_log()
    d.create("a")
    d.sh("a", "useradd -m bob && echo hi > /home/bob/x && chown bob /home/bob/x && "
              "rm /etc/motd 2>/dev/null; mkdir -p /w && echo 1 > /w/f && ln -s /w/f /w/l")
    s = snap(d, "a")
    d.sh("a", "echo 2 > /w/f")
    restore(d, "b", s["id"])
    r = d.sh("b", "cat /w/l; stat -c %U /home/bob/x; test -e /etc/motd && echo motd || echo none")
    assert r["stdout"] == "1\nbob\nnone\n", r
    f = d.ok("POST", "/v1/sandboxes/a/fork", {"name": "c"}, status=201)
    assert d.sh(f["name"], "cat /w/f")["stdout"] == "2\n"


def test_cli_snapshots_forks_and_drives(sandboxd):
    import os
    import subprocess
    from conftest import BIN

    def cli(*args, check=True):
        env = dict(os.environ, REBUNO_SANDBOX_URL=sandboxd.url)
        p = subprocess.run([BIN, *args], capture_output=True, env=env, timeout=60)
        if check:
            assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
        return p

    sandboxd.create("cli-src")
    s = json.loads(cli("sandbox", "snapshot", "cli-src", "--expiration", "0", "--json").stdout)
    assert s["sandbox_name"] == "cli-src" and s["expires_at"] is None
    assert s["id"] in cli("sandbox", "snapshots", "cli-src").stdout.decode()
    n = json.loads(cli("sandbox", "snapshot", "cli-src", "--name", "cli-named", "--json").stdout)
    assert n["name"] == "cli-named"
    named = cli("sandbox", "snapshots", "--name", "cli-named").stdout.decode()
    assert named.startswith(n["id"]) and named.rstrip().endswith("name cli-named"), named
    assert named.count("\n") == 1
    cli("sandbox", "snapshot-rm", n["id"])
    out = cli("sandbox", "fork", "cli-src", "cli-fork").stdout.decode()
    assert out.startswith("cli-fork ") and "forked from cli-src" in out
    assert sandboxd.get("cli-fork")["source"]["type"] == "fork"
    cli("sandbox", "snapshot-rm", s["id"])
    assert cli("sandbox", "snapshots").stdout == b""
    assert "max 64 MiB  empty" in cli("drive", "create", "d1", "--max-size",
                                      str(64 << 20)).stdout.decode()
    assert "d1" in cli("drive", "ls").stdout.decode()
    p = cli("drive", "fork", "d1", "d2", check=False)
    assert p.returncode == 1 and b"no committed data" in p.stderr
    assert json.loads(cli("drive", "get", "d1", "--json").stdout)["name"] == "d1"
    cli("drive", "rm", "d1")
    p = cli("drive", "get", "d1", check=False)
    assert p.returncode == 1 and b"no drive" in p.stderr


def test_fork_inherits_the_network_policy_and_takes_overrides(sandboxd):
    d = sandboxd
    pol = {"git.example": [{"transform": [{"headers": {"Authorization": "Bearer secret-1"}}]}]}
    d.create("netsrc", network_policy=pol)
    same = d.ok("POST", "/v1/sandboxes/netsrc/fork", {"name": "netsame"}, status=201)
    assert same["network_policy"] == d.get("netsrc")["network_policy"]
    assert "secret-1" not in json.dumps(same)          # header values are never shown
    other = d.ok("POST", "/v1/sandboxes/netsrc/fork", {"name": "netother", "network_policy": "deny-all"},
                 status=201)
    assert other["network_policy"] == "deny-all"
    assert d.get("netsrc")["network_policy"] == same["network_policy"]   # the source keeps its own
    r = d.request("POST", "/v1/sandboxes/netsrc/fork", {"name": "netbad", "network_policy": 5})
    assert r[0] == 400 and r[1]["error"]["field"].startswith("network_policy"), r
    r = d.request("POST", "/v1/sandboxes", {"name": "tb", "source": {"type": "tarball", "url": "/tmp/x.tgz"}})
    assert r[0] == 400 and "url" in r[1]["error"]["message"], r
