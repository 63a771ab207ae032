"""Settings precedence against the real binary: flag > environment > config file > default.

Each case starts `rebuno dev` with the setting given in more and more places and checks
what the running kernel actually uses: the address it answers on (listen) and the lease
it reports and grants (lease_timeout_seconds).
"""
import http.client
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import BIN, free_port, local_auth


def clean_env(**extra):
    """The test's environment without REBUNO_* settings that would leak into the case."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REBUNO_")}
    env["REBUNO_SANDBOXES"] = "off"
    env.update(extra)
    return env


def get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=local_auth(port))
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def answers(port):
    try:
        return get(port, "/v0/health")[0] == 200
    except OSError:
        return False


class Run:
    """One `rebuno dev` process; stopped gracefully (and checked by the sanitizers)."""

    def __init__(self, tmp_path, name, file_text, env, args=()):
        self.dir = tmp_path / name
        self.dir.mkdir()
        self.config = self.dir / "rebuno.yaml"
        self.config.write_text(file_text)
        self.log_path = self.dir / "kernel.log"
        cmd = [BIN, "dev", "--config", str(self.config), "--state-dir", str(self.dir / "state"), *args]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env)

    def log(self):
        return self.log_path.read_text(errors="replace")

    def wait_port(self, port, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            assert self.proc.poll() is None, f"kernel exited with {self.proc.returncode}:\n{self.log()}"
            if answers(port):
                return
            time.sleep(0.02)
        raise AssertionError(f"kernel did not answer on port {port}:\n{self.log()}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        log = self.log()
        for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            assert marker not in log, log


@pytest.fixture
def runs():
    started = []
    yield started
    for r in started:
        r.stop()


def lease_of(port, agent="coder"):
    """The lease the kernel reports for agent, and the one a claim actually gets."""
    agents = {a["id"]: a for a in get(port, "/v0/agents")[1]}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    h = {"Content-Type": "application/json", **local_auth(port)}
    try:
        conn.request("POST", "/v0/executions", json.dumps({"agent_id": agent}), h)
        assert conn.getresponse().read()
        conn.request("POST", f"/v0/agents/{agent}/workers", "{}", h)
        worker = json.loads(conn.getresponse().read())["worker_id"]
        conn.request("POST", f"/v0/agents/{agent}/claim", json.dumps({"worker_id": worker, "wait_seconds": 0}), h)
        resp = conn.getresponse()
        claim = json.loads(resp.read())
        assert resp.status == 200, claim
    finally:
        conn.close()
    return agents[agent]["lease_timeout_seconds"], claim["dispatch"]["lease_timeout_seconds"]


def test_flag_over_env_over_file_over_default(tmp_path, runs):
    file_port, env_port, flag_port = free_port(), free_port(), free_port()
    # The agent sets no lease of its own, so it gets the global setting.
    file_text = f"listen: 127.0.0.1:{file_port}\nlease_timeout_seconds: 31\nagents:\n  - name: coder\n"
    env = clean_env(REBUNO_LISTEN=f"127.0.0.1:{env_port}", REBUNO_LEASE_TIMEOUT_SECONDS="42")

    # Default: no lease setting anywhere gives the documented 120 s. (listen is given as a
    # flag here: its default, 127.0.0.1:8080, may be taken on a test machine.)
    r = Run(tmp_path, "default", "agents:\n  - name: coder\n", clean_env(),
            args=("--listen", f"127.0.0.1:{file_port}"))
    runs.append(r)
    r.wait_port(file_port)
    assert lease_of(file_port) == (120, 120)
    r.stop()

    # File only.
    r = Run(tmp_path, "file", file_text, clean_env())
    runs.append(r)
    r.wait_port(file_port)
    assert lease_of(file_port) == (31, 31)
    assert f"kernel on http://127.0.0.1:{file_port}" in r.log()
    r.stop()

    # File + env: the environment wins.
    r = Run(tmp_path, "env", file_text, env)
    runs.append(r)
    r.wait_port(env_port)
    assert not answers(file_port)
    assert lease_of(env_port) == (42, 42)
    r.stop()

    # File + env + flags: the flags win.
    r = Run(tmp_path, "flag", file_text, env,
            args=("--listen", f"127.0.0.1:{flag_port}", "--lease-timeout-seconds", "53"))
    runs.append(r)
    r.wait_port(flag_port)
    assert not answers(file_port) and not answers(env_port)
    assert lease_of(flag_port) == (53, 53)
    r.stop()


def test_agent_lease_in_the_file_beats_the_global_setting(tmp_path, runs):
    port = free_port()
    text = "agents:\n  - name: coder\n    lease_timeout_seconds: 7\n  - name: other\n"
    r = Run(tmp_path, "agent", text, clean_env(REBUNO_LEASE_TIMEOUT_SECONDS="42"),
            args=("--listen", f"127.0.0.1:{port}", "--lease-timeout-seconds", "53"))
    runs.append(r)
    r.wait_port(port)
    assert lease_of(port, "coder") == (7, 7)
    assert lease_of(port, "other") == (53, 53)


@pytest.mark.parametrize("env,flag,want", [
    ({"REBUNO_LEASE_TIMEOUT_SECONDS": "abc"}, (),
     'environment variable REBUNO_LEASE_TIMEOUT_SECONDS: lease_timeout_seconds must be an integer '
     'between 1 and 86400 (got "abc"); fix it or unset REBUNO_LEASE_TIMEOUT_SECONDS'),
    ({"REBUNO_LEASE_TIMEOUT_SECONDS": "0"}, (), 'between 1 and 86400 (got "0")'),
    ({"REBUNO_MAX_ATTEMPTS": "5x"}, (), "environment variable REBUNO_MAX_ATTEMPTS: max_attempts must be"),
    # A bad value in the environment is an error even when a flag would override it.
    ({"REBUNO_LEASE_TIMEOUT_SECONDS": "abc"}, ("--lease-timeout-seconds", "30"), "REBUNO_LEASE_TIMEOUT_SECONDS"),
    ({}, ("--lease-timeout-seconds", "forever"),
     '--lease-timeout-seconds: lease_timeout_seconds must be an integer between 1 and 86400 (got "forever")'),
    ({"REBUNO_LISTEN": "0.0.0.0:8080"}, (), "refusing to listen on 0.0.0.0:8080 without API keys"),
])
def test_bad_env_or_flag_value_is_a_clear_error(tmp_path, env, flag, want):
    port = free_port()
    cmd = [BIN, "dev", "--state-dir", str(tmp_path / "state")]
    if "REBUNO_LISTEN" not in env:
        cmd += ["--listen", f"127.0.0.1:{port}"]
    p = subprocess.run([*cmd, *flag], env=clean_env(**env), capture_output=True, text=True, timeout=30)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.startswith("error: ") and want in p.stderr, p.stderr
    assert not answers(port)
