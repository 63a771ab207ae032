"""`rebuno dev` runs the sandbox service beside the kernel, and takes it down with it."""
import http.client
import json
import os
import signal
import time

from conftest import Sandboxd, free_port, host_mounts_mentioning, local_auth, processes_mentioning


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path, headers=local_auth(port, "sandboxd"))
    r = c.getresponse()
    return r.status, json.loads(r.read() or b"null")


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, body=json.dumps(body),
              headers={"Content-Type": "application/json", **local_auth(port, "sandboxd")})
    r = c.getresponse()
    return r.status, json.loads(r.read() or b"null")


def wait_for_sandboxd(port, k):
    deadline = time.time() + 20
    while True:
        try:
            if get(port, "/v1/health")[0] == 200:
                return
        except OSError:
            pass
        assert time.time() < deadline, k.read_log()
        time.sleep(0.05)


def test_dev_starts_and_stops_the_sandbox_service(make_kernel):
    port = free_port()
    k = make_kernel(args=["--sandboxes", "on", "--sandbox-listen", f"127.0.0.1:{port}"]).start()
    wait_for_sandboxd(port, k)
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


def test_dev_passes_the_upstream_settings_to_sandboxd(make_kernel, tmp_path):
    """sandbox_upstream_ca and sandbox_upstream_overrides (the coding-agent demo's forge)
    reach sandboxd's egress proxy as --upstream-ca and one --upstream-override per item."""
    import subprocess
    ca = tmp_path / "ca.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", str(tmp_path / "ca.key"), "-out", str(ca), "-days", "1",
                    "-subj", "/CN=test ca"], check=True, capture_output=True)
    port = free_port()
    k = make_kernel(args=["--sandboxes", "on", "--sandbox-listen", f"127.0.0.1:{port}"],
                    env={"REBUNO_SANDBOX_UPSTREAM_CA": str(ca),
                         "REBUNO_SANDBOX_UPSTREAM_OVERRIDES": "github.local=127.0.0.1:9443, git.example:80=127.0.0.1:9080"}
                    ).start()
    wait_for_sandboxd(port, k)
    state = os.path.join(k.state_dir, "state", "sandboxes")
    pid = min(p for p in processes_mentioning(state) if b"sandboxd" in open(f"/proc/{p}/cmdline", "rb").read())
    argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    assert argv[argv.index(b"--upstream-ca") + 1] == str(ca).encode()
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == b"--upstream-override"]
    assert overrides == [b"github.local=127.0.0.1:9443", b"git.example:80=127.0.0.1:9080"]
    k.stop(signal.SIGTERM)


def test_dev_refuses_a_malformed_upstream_override(make_kernel):
    k = make_kernel(args=["--sandboxes", "on", "--sandbox-listen", f"127.0.0.1:{free_port()}",
                          "--sandbox-upstream-overrides", "github.local"])
    k.start(wait=False)
    assert k.proc.wait(20) != 0
    log = k.read_log()
    assert "sandbox_upstream_overrides" in log and "HOST=ADDR:PORT" in log, log
