"""sandboxd limits: fork bombs and memory bombs are contained by the sandbox's
cgroup without harming the daemon or other sandboxes; one sandbox cannot take the
store's space, the host's file table or its ptys from the others, and stopping one
does not hold up the daemon (issue 13, #10-#13)."""
import os
import threading
import time


def test_fork_bomb_is_contained(sandboxd):
    sandboxd.create("bomb", resources={"pids": 64})
    sandboxd.create("bystander")
    t0 = time.time()
    # the sleep outlives the time limit, so the command always ends by timing out
    r = sandboxd.sh("bomb", "b(){ b|b & }; b; sleep 30", timeout_ms=3000)
    assert r["timed_out"], r
    u = sandboxd.get("bomb")["usage"]
    assert u["pids"] <= 64
    # the daemon and the other sandbox are fine meanwhile
    assert sandboxd.run("bystander", "echo", ["fine"])["stdout"] == "fine\n"
    assert sandboxd.ok("GET", "/v1/health")["status"] == "ok"
    # stopping clears the bomb completely; the sandbox works again after
    sandboxd.ok("POST", "/v1/sandboxes/bomb/stop")
    assert sandboxd.run("bomb", "echo", ["recovered"])["stdout"] == "recovered\n"
    assert time.time() - t0 < 60


def test_memory_bomb_is_contained(sandboxd):
    sandboxd.create("hog", resources={"memory": 128})
    sandboxd.create("neighbour")
    r = sandboxd.run("hog", "python3", ["-c", "x = bytearray(600 << 20); print('survived')"],
                     timeout_ms=60000)
    assert "survived" not in r["stdout"]
    assert r["signal"] == "KILL" or r["exit_code"] != 0
    s = sandboxd.get("hog")
    if s["state"] == "running":
        assert s["usage"]["oom_kills"] >= 1
        assert s["usage"]["memory_bytes"] <= 128 << 20
    assert sandboxd.run("neighbour", "echo", ["ok"])["stdout"] == "ok\n"
    assert sandboxd.run("hog", "echo", ["still-usable"])["stdout"] == "still-usable\n"


def test_limits_apply_and_update(sandboxd):
    sandboxd.create("lim", resources={"vcpus": 2, "memory": 256, "pids": 100})
    cg = sandboxd.get("lim")["usage"]["cgroup"].split(":", 1)[1]
    base = "/sys/fs/cgroup"
    assert int(open(f"{base}/memory{cg}/memory.limit_in_bytes").read()) == 256 << 20
    assert open(f"{base}/pids{cg}/pids.max").read().strip() == "100"
    assert open(f"{base}/cpu{cg}/cpu.cfs_quota_us").read().strip() == "200000"
    sandboxd.ok("PATCH", "/v1/sandboxes/lim", {"resources": {"memory": 512, "pids": 200}})
    assert int(open(f"{base}/memory{cg}/memory.limit_in_bytes").read()) == 512 << 20
    assert open(f"{base}/pids{cg}/pids.max").read().strip() == "200"
    # inside, /tmp is a tmpfs capped at the memory limit
    r = sandboxd.sh("lim", "df -k --output=size /tmp | tail -1")
    assert int(r["stdout"]) <= 512 * 1024


# ---------------------------------------------------------------------------
# Issue 13: what one tenant can take from the others (#10-#13).
# ---------------------------------------------------------------------------

EDQUOT, ENOSPC, EMFILE = 122, 28, 24

# Writes MiB of zeros to PATH (argv) in 1 MiB writes, fsync, prints "written <MiB> <errno>".
FILL = r"""
import os, sys
path, mb = sys.argv[1], int(sys.argv[2])
chunk, n, err = b"\0" * (1 << 20), 0, 0
try:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # may itself be ENOSPC
    while n < mb:
        os.write(fd, chunk)
        n += 1
    os.fsync(fd)
except OSError as e:
    err = e.errno
print("written", n, err)
"""


def fill(d, ref, path, mb):
    r = d.run(ref, "python3", ["-c", FILL, path, str(mb)], timeout_ms=120000)
    assert r["exit_code"] == 0, r
    _, n, err = r["stdout"].split()
    return int(n), int(err)


def test_disk_quota_per_sandbox_live_and_for_forks_and_restores(sandboxd):
    d = sandboxd
    hog = d.create("hog", resources={"disk_mb": 64})
    assert hog["resources"]["disk_mb"] == 64 and hog["disk_enforced"] is True
    # the default is a quarter of the store (32 GiB by default), at most 10 GiB
    assert d.create("neighbour")["resources"]["disk_mb"] == 8192
    # past its quota a write fails inside with EDQUOT ("Disk quota exceeded")...
    n, err = fill(d, "hog", "/root/a", 200)
    assert err == EDQUOT and 32 <= n <= 64, (n, err)
    r = d.sh("hog", "echo more >> /root/a")
    assert r["exit_code"] != 0 and "Disk quota exceeded" in r["stderr"], r
    # ...and the neighbour keeps working
    assert fill(d, "neighbour", "/root/b", 100) == (100, 0)
    # usage shows what the tree holds (its qgroup's bytes, once the writes are committed)
    d.sh("neighbour", "sync")
    used = d.get("neighbour")["usage"]["disk_bytes"]
    assert 100 << 20 <= used < 110 << 20, used
    # PATCH applies at once, to the running session's tree
    assert d.ok("PATCH", "/v1/sandboxes/hog", {"resources": {"disk_mb": 256}})[
        "resources"]["disk_mb"] == 256
    assert fill(d, "hog", "/root/c", 100) == (100, 0)
    # a fork inherits the limit but has a quota of its own: the extents it shares with
    # its source stay charged to the source, so it may write a whole quota more
    f = d.ok("POST", "/v1/sandboxes/hog/fork", {"name": "hog-fork"}, status=201)
    assert f["resources"]["disk_mb"] == 256 and f["disk_enforced"] is True
    assert fill(d, "hog-fork", "/root/d", 200) == (200, 0)
    n, err = fill(d, "hog-fork", "/root/e", 200)
    assert err == EDQUOT and n < 100, (n, err)
    # a restore gets the limit it asks for
    snap = d.ok("POST", "/v1/sandboxes/hog/snapshots", {}, status=201)
    rest = d.create("hog-restored", source={"type": "snapshot", "snapshot_id": snap["id"]},
                    resources={"disk_mb": 64})
    assert rest["resources"]["disk_mb"] == 64
    n, err = fill(d, "hog-restored", "/root/f", 200)
    assert err == EDQUOT and n <= 64, (n, err)
    # bounds: at least 64 MiB, at most the store's size
    for bad in (10, 1 << 20):
        st, out = d.request("POST", "/v1/sandboxes", {"resources": {"disk_mb": bad}})
        assert st == 400 and out["error"]["field"] == "disk_mb", (bad, st, out)
    st, out = d.request("PATCH", "/v1/sandboxes/hog", {"resources": {"disk_mb": 1}})
    assert st == 400 and d.get("hog")["resources"]["disk_mb"] == 256, out


def test_disk_mb_with_the_copy_backend_is_not_enforced(make_sandboxd):
    d = make_sandboxd(["--storage", "copy"]).start()
    s = d.create("c", resources={"disk_mb": 64})
    assert s["resources"]["disk_mb"] == 64 and s["disk_enforced"] is False
    assert d.create("c2")["disk_enforced"] is False
    assert "disk_bytes" not in d.get("c")["usage"]  # not measured there


def listing(path):
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def test_a_full_store_answers_507_and_leaves_nothing_half_made(make_sandboxd):
    d = make_sandboxd(["--storage-size", str(512 << 20)]).start()
    d.create("keep")
    snap = d.ok("POST", "/v1/sandboxes/keep/snapshots", {}, status=201)
    # tenants at their default quota (a quarter of the store) fill it together: quotas
    # may add up to more than the store
    hogs = [f"hog{i}" for i in range(5)]
    for h in hogs:
        d.create(h)
    errs = [fill(d, h, "/root/x", 128)[1] for h in hogs]
    assert ENOSPC in errs, errs
    store, state = os.path.join(d.state, "store"), d.state
    before = (listing(f"{store}/fs"), listing(f"{state}/sandboxes"),
              [s["id"] for s in d.ok("GET", "/v1/sandboxes")["sandboxes"]])
    attempts = [
        ("POST", "/v1/sandboxes", {"name": "new"}),
        ("POST", "/v1/sandboxes/keep/fork", {"name": "forked"}),
        ("POST", "/v1/sandboxes", {"name": "restored",
                                   "source": {"type": "snapshot", "snapshot_id": snap["id"]}}),
    ]
    for method, path, body in attempts:
        st, out = d.request(method, path, body)
        assert st == 507 and out["error"]["code"] == "no_space", (path, st, out)
        assert "delete" in out["error"]["message"], out
    after = (listing(f"{store}/fs"), listing(f"{state}/sandboxes"),
             [s["id"] for s in d.ok("GET", "/v1/sandboxes")["sandboxes"]])
    assert after == before
    # a snapshot needs (almost) no data space: it is taken, or refused the same way
    snaps = listing(f"{store}/snapshots")
    st, out = d.request("POST", "/v1/sandboxes/keep/snapshots", {})
    assert st == 201 or (st == 507 and out["error"]["code"] == "no_space"
                         and listing(f"{store}/snapshots") == snaps), (st, out)
    # the others still work; once space is freed, creating works again
    assert d.run("keep", "echo", ["alive"])["stdout"] == "alive\n"
    for h in hogs:
        assert d.sh(h, "rm -f /root/x && sync")["exit_code"] == 0
    end = time.time() + 30  # btrfs hands freed extents back at its next commit
    while (st := d.request("POST", "/v1/sandboxes", {"name": "new"})[0]) == 507 and \
            time.time() < end:
        time.sleep(0.2)
    assert st == 201 and d.get("new")["state"] == "running"


def test_open_files_are_limited_per_sandbox(sandboxd):
    d = sandboxd
    s = d.create("files")
    # not the daemon's own limit: pids x nofile stays within a quarter of the host's file
    # table, and nothing inside can raise it
    r = d.sh("files", "ulimit -n; ulimit -Hn; ulimit -n 100000 2>/dev/null && echo raised")
    soft, hard = map(int, r["stdout"].split())
    file_max = int(open("/proc/sys/fs/file-max").read())
    assert soft == hard <= 1024 and s["resources"]["pids"] * hard <= file_max // 4, r
    n = s["resources"]["nofile"]
    assert n == soft
    # opening past it fails with EMFILE inside; the host is untouched
    r = d.run("files", "python3", ["-c", """
import os
fds = []
try:
    while len(fds) < 1 << 20:
        fds.append(os.open('/dev/null', os.O_RDONLY))
except OSError as e:
    print(len(fds), e.errno)
"""])
    opened, err = map(int, r["stdout"].split())
    assert err == EMFILE and n - 8 <= opened < n, r
    with open("/dev/null") as f:
        assert f.fileno() >= 0
    # PATCH reaches the processes already running, and the next ones
    bg = d.ok("POST", "/v1/sandboxes/files/commands", {"cmd": "sleep", "args": ["60"]},
              status=201)
    d.ok("PATCH", "/v1/sandboxes/files", {"resources": {"nofile": 128}})
    limits = d.sh("files", f"grep 'open files' /proc/{bg['pid']}/limits")["stdout"].split()
    assert limits[3:5] == ["128", "128"], limits
    assert d.sh("files", "ulimit -n")["stdout"] == "128\n"
    # too much of the file table for one sandbox is refused, naming the field
    st, out = d.request("PATCH", "/v1/sandboxes/files",
                        {"resources": {"pids": 65536, "nofile": 1 << 20}})
    assert st == 400 and out["error"]["field"] == "nofile", out
    assert "fs.file-max" in out["error"]["message"]
    if 65536 * 128 > file_max // 4:  # more processes with the same nofile: pids is named
        st, out = d.request("PATCH", "/v1/sandboxes/files", {"resources": {"pids": 65536}})
        assert st == 400 and out["error"]["field"] == "pids", out
    assert d.get("files")["resources"]["pids"] == 1024
    st, out = d.request("POST", "/v1/sandboxes", {"resources": {"nofile": 10}})
    assert st == 400 and out["error"]["field"] == "nofile", out


PTY_HOG = r"""
import os, sys
ptys = []
try:
    while len(ptys) < int(sys.argv[1]):
        ptys.append(os.openpty())
except OSError as e:
    print(len(ptys), e.errno, flush=True)
else:
    print(len(ptys), 0, flush=True)
sys.stdin.read()  # hold them until stdin closes
"""


def test_ptys_are_capped_per_sandbox(sandboxd):
    d = sandboxd
    d.create("ptys")
    # stop well short of the host's pool whatever happens (the cap is 128)
    c = d.ok("POST", "/v1/sandboxes/ptys/commands",
             {"cmd": "python3", "args": ["-c", PTY_HOG, "160"], "stdin": "pipe"}, status=201)
    out = d.ok("GET", f"/v1/sandboxes/ptys/commands/{c['id']}/output?stream=stdout&wait_ms=20000")
    count, err = map(int, out.split())
    assert (count, err) == (128, ENOSPC), out
    # while the sandbox holds all of its own, the host's ptmx still works
    a, b = os.openpty()
    os.close(a)
    os.close(b)
    d.ok("POST", f"/v1/sandboxes/ptys/commands/{c['id']}/stdin?close=true", raw=b"")
    assert d.ok("GET", f"/v1/sandboxes/ptys/commands/{c['id']}/wait")["exit_code"] == 0


def test_stopping_a_sandbox_with_dirty_pages_does_not_hold_up_others(sandboxd):
    d = sandboxd
    d.create("writer", resources={"memory": 4096}, timeout_ms=0)
    d.create("other")
    # about 1.5 GB written and not flushed: the stop's unmount has to write it back
    r = d.sh("writer", "dd if=/dev/zero of=/root/big bs=1M count=1500 2>&1 | tail -1",
             timeout_ms=120000)
    assert r["exit_code"] == 0, r
    dirty_kb = int(open("/proc/meminfo").read().split("Dirty:")[1].split()[0])
    assert dirty_kb > 256 << 10, f"only {dirty_kb} kB dirty: nothing for the stop to flush"
    first_session = d.get("writer")["session"]["id"]
    done = {}

    def call(key, method, path, body=None):
        st, out = d.request(method, path, body)
        done[key] = (time.monotonic(), st, out)

    stop = threading.Thread(target=call, args=("stop", "POST", "/v1/sandboxes/writer/stop"))
    stop.start()
    time.sleep(0.1)  # the stop is under way (its write-back takes seconds)
    # a call on the stopping sandbox itself waits for the stop, then resumes it
    same = threading.Thread(target=call, args=(
        "same", "POST", "/v1/sandboxes/writer/commands",
        {"cmd": "stat", "args": ["-c", "%s", "/root/big"], "wait": True}))
    same.start()
    call("health", "GET", "/v1/health")
    call("cmd", "POST", "/v1/sandboxes/other/commands",
         {"cmd": "echo", "args": ["served"], "wait": True})
    stop.join(60)
    same.join(60)
    t_stop, st, out = done["stop"]
    assert st == 200 and out["state"] == "stopped", out
    assert done["health"][1] == 200 and done["health"][0] < t_stop
    assert done["cmd"][2]["stdout"] == "served\n" and done["cmd"][0] < t_stop
    # it ran in a new session, after the stop (not a client-side clock: the two threads'
    # timestamps race by a few ms once both replies are in)
    _, st, out = done["same"]
    assert st == 200 and out["stdout"] == f"{1500 << 20}\n", out
    assert out["session_id"] != first_session, (out, first_session)
    assert d.get("writer")["state"] == "running"
