"""`rebuno dev` runs the sandbox service beside the kernel, and takes it down with it."""
import http.client
import json
import os
import signal
import time

from conftest import Sandboxd, free_port, host_mounts_mentioning, processes_mentioning


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path)
    r = c.getresponse()
    return r.status, json.loads(r.read() or b"null")


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, json.loads(r.read() or b"null")


def test_dev_starts_and_stops_the_sandbox_service(make_kernel):
    port = free_port()
    k = make_kernel(args=["--sandboxes", "on", "--sandbox-listen", f"127.0.0.1:{port}"]).start()
    deadline = time.time() + 20
    while True:
        try:
            if get(port, "/v1/health")[0] == 200:
                break
        except OSError:
            pass
        assert time.time() < deadline, k.read_log()
        time.sleep(0.05)
    st, sbx = post(port, "/v1/sandboxes", {"name": "dev-1"})
    assert st == 201, sbx
    st, out = post(port, "/v1/sandboxes/dev-1/commands", {"cmd": "echo", "args": ["hi"], "wait": True})
    assert st == 200 and out["stdout"] == "hi\n", out
    state = os.path.join(k.state_dir, "state", "sandboxes")
    assert processes_mentioning(state), "sandboxd should run as a child of rebuno dev"
    k.stop(signal.SIGTERM)
    time.sleep(0.1)
    assert not processes_mentioning(state), "sandboxd outlived rebuno dev"
    assert not host_mounts_mentioning(os.path.realpath(state))
    probe = Sandboxd(os.path.dirname(state))  # names cgroups the way sandboxd does
    probe.state = state
    left = [d for d in probe.cgroup_dirs() if os.path.exists(d)]
    assert not left, f"cgroups left behind: {left}"


def test_sandboxes_off_starts_nothing(make_kernel):
    port = free_port()
    k = make_kernel(args=["--sandboxes", "off", "--sandbox-listen", f"127.0.0.1:{port}"]).start()
    try:
        get(port, "/v1/health")
        raise AssertionError("a sandbox service answered although sandboxes are off")
    except OSError:
        pass
    assert k.request("GET", "/v0/health")[0] == 200
