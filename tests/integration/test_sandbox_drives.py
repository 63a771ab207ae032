"""Drives: named persistent file systems mounted into sandboxes (issue 6).

Covers get-or-create/get/query/delete, the single-writer rule (409 drive_attached),
snapshot-mode mounts (read-only, point in time), drive forks and their 404/409s,
mount path validation (004's rules), update(mounts=...) for the next session, and
that a sandbox fork does not inherit mounts.
"""
import pytest


def drive(d, name, **body):
    return d.ok("POST", "/v1/drives", {"name": name, **body}, status=(200, 201))


def err(d, method, path, body=None):
    st, out = d.request(method, path, body)
    return st, (out or {}).get("error", {}).get("code")


def test_drive_get_or_create_get_query_delete(sandboxd):
    d = sandboxd
    st, a = d.request("POST", "/v1/drives", {"name": "cache", "max_size_bytes": 64 << 20})
    assert st == 201 and a["name"] == "cache" and a["max_size_bytes"] == 64 << 20
    assert a["initialized"] is False and a["parent_drive_id"] is None
    st, again = d.request("POST", "/v1/drives", {"name": "cache"})
    assert st == 200 and again["id"] == a["id"]
    drive(d, "build")
    drive(d, "cache-2")
    assert d.ok("GET", "/v1/drives/cache")["id"] == a["id"]
    assert d.ok("GET", f"/v1/drives/{a['id']}")["name"] == "cache"
    assert err(d, "GET", "/v1/drives/missing") == (404, "not_found")
    names = [x["name"] for x in d.ok("GET", "/v1/drives?name=cache")["drives"]]
    assert names == ["cache", "cache-2"]
    by_name = d.ok("GET", "/v1/drives?order=name&direction=desc&limit=2")
    assert [x["name"] for x in by_name["drives"]] == ["cache-2", "cache"]
    rest = d.ok("GET", "/v1/drives?order=name&direction=desc&limit=2&cursor="
                + by_name["next_cursor"])
    assert [x["name"] for x in rest["drives"]] == ["build"] and rest["next_cursor"] is None
    assert err(d, "POST", "/v1/drives", {"name": "../x"}) == (400, "validation_error")
    assert err(d, "POST", "/v1/drives", {"name": "x", "max_size_bytes": 5}) == (400,
                                                                              "validation_error")
    d.ok("DELETE", "/v1/drives/cache", status=204)
    assert err(d, "GET", "/v1/drives/cache") == (404, "not_found")
    assert err(d, "DELETE", "/v1/drives/cache") == (404, "not_found")


def test_single_writer_snapshot_mode_and_delete_refused(sandboxd):
    d = sandboxd
    drive(d, "shared")
    d.create("a", mounts={"/cache": "shared"})
    assert d.get("a")["mounts"]["/cache"]["drive"] == "shared"
    r = d.sh("a", "echo v1 > /cache/file && stat -c %u /cache /cache/file")
    assert r["stdout"] == "0\n0\n", r
    # a second writer is refused, and nothing is created
    st, out = d.request("POST", "/v1/sandboxes", {"name": "b", "mounts": {"/c": "shared"}})
    assert st == 409 and out["error"]["code"] == "drive_attached", out
    assert d.request("GET", "/v1/sandboxes/b")[0] == 404
    # no committed data yet: a snapshot-mode mount has nothing to show
    st, out = d.request("POST", "/v1/sandboxes", {
        "name": "b", "mounts": {"/c": {"drive": "shared", "mode": "snapshot"}}})
    assert st == 409 and out["error"]["code"] == "drive_not_initialized", out
    assert err(d, "DELETE", "/v1/drives/shared") == (409, "drive_attached")
    d.ok("POST", "/v1/sandboxes/a/stop")  # commits
    assert d.ok("GET", "/v1/drives/shared")["initialized"] is True
    d.create("b", mounts={"/ro": {"drive": "shared", "mode": "snapshot"}})
    assert d.read("b", "/ro/file") == (200, b"v1\n")
    r = d.sh("b", "echo x > /ro/new")
    assert r["exit_code"] != 0 and "Read-only" in r["stderr"], r
    # the writer comes back (lazily) and changes it; the snapshot-mode view does not move
    d.sh("a", "echo v2 > /cache/file")
    assert d.read("b", "/ro/file") == (200, b"v1\n")
    assert err(d, "DELETE", "/v1/drives/shared") == (409, "drive_attached")
    d.ok("POST", "/v1/sandboxes/a/stop")
    assert err(d, "DELETE", "/v1/drives/shared") == (409, "drive_attached")  # b reads it
    d.ok("POST", "/v1/sandboxes/b/stop")
    # the writer is free again: another sandbox mounts it read-write and sees v2
    d.create("c", mounts={"/data/cache": {"drive": "shared", "mode": "rw"}})
    assert d.read("c", "/data/cache/file") == (200, b"v2\n")
    d.ok("POST", "/v1/sandboxes/c/stop")
    d.ok("DELETE", "/v1/drives/shared", status=204)
    # a sandbox whose drive is gone says so when it starts
    st, out = d.request("POST", "/v1/sandboxes/a/resume")
    assert st == 404 and out["error"]["code"] == "not_found", out


def test_drive_fork_semantics(sandboxd):
    d = sandboxd
    src = drive(d, "src", max_size_bytes=128 << 20)
    assert err(d, "POST", "/v1/drives/src/fork", {"name": "f"}) == (409, "drive_not_initialized")
    assert err(d, "POST", "/v1/drives/nope/fork", {"name": "f"}) == (404, "not_found")
    d.create("w", mounts={"/d": "src"})
    d.sh("w", "echo base > /d/x")
    d.ok("POST", "/v1/sandboxes/w/stop")
    f1 = d.ok("POST", "/v1/drives/src/fork", {"name": "f1"}, status=201)
    assert f1["parent_drive_id"] == src["id"] and f1["root_drive_id"] == src["id"]
    assert f1["max_size_bytes"] == 128 << 20 and f1["initialized"] is True
    f2 = d.ok("POST", "/v1/drives/f1/fork", {"name": "f2"}, status=201)
    assert f2["parent_drive_id"] == f1["id"] and f2["root_drive_id"] == src["id"]
    assert err(d, "POST", "/v1/drives/src/fork", {"name": "f1"}) == (409, "conflict")
    # independent data
    d.create("u1", mounts={"/d": "f1"})
    d.sh("u1", "echo f1 > /d/x")
    d.create("u2", mounts={"/d": "f2"})
    assert d.read("u2", "/d/x") == (200, b"base\n")
    d.sh("w", "cat /d/x")
    assert d.read("w", "/d/x") == (200, b"base\n")


def test_mount_paths_are_validated(sandboxd):
    d = sandboxd
    drive(d, "one")
    drive(d, "two")
    bad = [{"rel/path": "one"}, {"/": "one"}, {"/a/../b": "one"}, {"/" + "x" * 260: "one"},
           {"/a": "one", "/a/b": "two"}, {"/a": "one", "/b": "one"}, {"/proc/x": "one"},
           {"/usr": "one"}, {"/a b": "one"}, {"/a": {"drive": "one", "mode": "rx"}},
           {"/a": {"drive": "one", "extra": 1}}, "not-an-object"]
    for m in bad:
        st, out = d.request("POST", "/v1/sandboxes", {"mounts": m})
        assert st == 400 and out["error"]["code"] == "validation_error", (m, out)
    st, out = d.request("POST", "/v1/sandboxes", {"mounts": {"/a": "missing"}})
    assert st == 404 and out["error"]["code"] == "not_found"
    s = d.create("ok", mounts={"//data//./x/": "one"}, start=False)
    assert list(s["mounts"]) == ["/data/x"]
    assert d.ok("GET", "/v1/sandboxes")["sandboxes"] and d.request("GET", "/v1/sandboxes/ok")[0] == 200


def test_update_mounts_for_next_session_and_forks_do_not_inherit(sandboxd):
    d = sandboxd
    drive(d, "m")
    d.create("s")
    d.ok("PATCH", "/v1/sandboxes/s", {"mounts": {"/mnt/m": "m"}})
    assert list(d.get("s")["mounts"]) == ["/mnt/m"]
    assert d.sh("s", "mountpoint -q /mnt/m; echo $?")["stdout"] != "0\n"  # the next session
    d.ok("POST", "/v1/sandboxes/s/stop")
    assert d.sh("s", "mountpoint -q /mnt/m; echo $?")["stdout"] == "0\n"
    d.sh("s", "echo hi > /mnt/m/f")
    f = d.ok("POST", "/v1/sandboxes/s/fork", {"name": "f"}, status=201)
    assert f["mounts"] == {}
    assert d.sh("f", "mountpoint -q /mnt/m; echo $?")["stdout"] != "0\n"
    st, out = d.request("POST", "/v1/sandboxes/s/fork", {"name": "g", "mounts": {"/m": "m"}})
    assert st == 409 and out["error"]["code"] == "drive_attached"
    d.ok("PATCH", "/v1/sandboxes/s", {"mounts": {}})
    assert d.get("s")["mounts"] == {}
    d.ok("POST", "/v1/sandboxes/s/stop")
    g = d.ok("POST", "/v1/sandboxes/s/fork", {"name": "g", "mounts": {"/m": "m"}}, status=201)
    assert d.read("g", "/m/f") == (200, b"hi\n")


def test_drive_size_limit(sandboxd):
    d = sandboxd
    v = drive(d, "small", max_size_bytes=4 << 20)
    if not v["max_size_enforced"]:
        pytest.skip("no btrfs quotas on this kernel")
    d.create("q", mounts={"/q": "small"})
    r = d.sh("q", "dd if=/dev/zero of=/q/big bs=1M count=16 conv=fsync 2>&1; sync")
    assert "quota" in r["stdout"].lower() or "space" in r["stdout"].lower(), r
