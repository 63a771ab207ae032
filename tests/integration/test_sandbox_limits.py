"""sandboxd limits: fork bombs and memory bombs are contained by the sandbox's
cgroup without harming the daemon or other sandboxes; one sandbox cannot take the
host's ptys from the others (issue 13, #13)."""
import os
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
# Issue 13: what one tenant can take from the others.
# ---------------------------------------------------------------------------

ENOSPC = 28


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
