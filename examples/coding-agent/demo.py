#!/usr/bin/env python3
"""The project's main demo: a coding agent fixes a failing test in a sandbox and opens a
pull request on a local forge, with approvals, a second session turn and a fork.

    sudo python3 examples/coding-agent/demo.py          (or: make demo)

It starts, on free loopback ports and in a temporary folder:

1. the forge (``forge.py``: git over HTTPS with a token, a pull-request API; GitHub's role),
   with ``acme/calc`` made from ``sample-repo/`` (one failing test);
2. the scripted model (``model.py``: an OpenAI-compatible server);
3. ``rebuno dev --config rebuno.yaml``: the kernel on SQLite, and the sandbox service whose
   egress proxy sends ``github.local`` to the forge;
4. the agent (``agent.py``), with the forge's token, which never enters a sandbox.

Then it drives the story with the ``rebuno`` command, printing each command it runs:
creates the execution "The tests are failing. Fix the bug and open a pull request." in
session ``fix-tests``, shows it live, approves ``open_pr``, continues the session with
"Also add a test for the edge case." (same sandbox, same branch, same pull request), forks
the first execution at an event between two checkpoints into session ``fix-tests-fork``
(a new sandbox restored from the newest covering checkpoint, a new branch), and prints
where to look. With a terminal it then waits for Enter before stopping everything;
``--no-wait`` stops at once, ``--keep`` keeps the folder. ``--crash`` kills the agent
(SIGKILL) right after its first ``write_file`` and starts it again: the run goes on when its
lease (5 s then) expires, replaying the recorded calls, in the same sandbox.

``Stack`` (the services) and ``Story`` (the steps) are also what the end-to-end tests use.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import selectors
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "sdk" / "python"))

from rebuno import SyncClient  # noqa: E402
from rebuno.testing import free_port  # noqa: E402

PYTHON = sys.executable
AGENT = "coding-agent"
REPO = "acme/calc"
FORGE_HOST = "github.local"
TASK_FIX = "The tests are failing. Fix the bug and open a pull request."
TASK_EDGE = "Also add a test for the edge case."


def rebuno_bin() -> str:
    """``$REBUNO_BIN``, else the release build, else ``rebuno`` on ``PATH``."""
    b = os.environ.get("REBUNO_BIN")
    if b:
        return b
    built = ROOT / "build" / "rebuno"
    if built.exists():
        return str(built)
    found = shutil.which("rebuno")
    if not found:
        sys.exit("demo: no rebuno binary: run `make` first (or set REBUNO_BIN)")
    return found


@dataclass
class Proc:
    """A started service: its process and its log file."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, wait: float = 15.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


@dataclass
class Stack:
    """The forge, the model, ``rebuno dev`` (kernel + sandboxd) and the agent."""

    dir: Path
    lease_seconds: int | None = None       # None: rebuno.yaml's
    checkpoint_every: int = 2
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    procs: dict[str, Proc] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    kernel_url: str = ""
    sandbox_url: str = ""
    forge_url: str = ""
    forge_ca: str = ""
    model_url: str = ""
    # another agent over the same forge and model (examples/coding-agent-e2b): its script
    # and its kernel config (whose folder holds its policy); None: this example's
    agent_script: Path | None = None
    config_file: Path | None = None
    image_tar: str | None = None           # the default image's tarball (scripts/default-image.sh)

    # --- starting

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None,
               cwd: Path | None = None) -> Proc:
        log = self.dir / f"{name}.log"
        f = open(log, "ab")
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True)
        f.close()
        p = Proc(name, proc, log)
        self.procs[name] = p
        return p

    def _first_line(self, p: Proc, prefix: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in p.log.read_text(errors="replace").splitlines():
                if line.startswith(prefix):
                    return line
            if not p.alive():
                break
            time.sleep(0.05)
        raise RuntimeError(f"{p.name} did not start:\n{p.tail()}")

    def _wait_http(self, url: str, p: Proc, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not p.alive():
                break
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{p.name} did not answer {url}:\n{p.tail()}")

    def start(self) -> Stack:
        self.dir.mkdir(parents=True, exist_ok=True)
        forge_data = self.dir / "forge"
        fenv = {"FORGE_TOKEN": self.token}
        self.token_file = self.dir / "forge-token"   # what the agent reads on every use
        self.token_file.touch(0o600)
        self.token_file.write_text(self.token + "\n")
        subprocess.run([PYTHON, str(HERE / "forge.py"), "--data", str(forge_data), "--init-repo", REPO,
                        "--from", str(HERE / "sample-repo")], check=True, env={**os.environ, **fenv},
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        forge_addr = f"127.0.0.1:{free_port()}"   # fixed, so a restarted forge keeps it
        self.start_forge(forge_addr)

        model = self._spawn("model", [PYTHON, str(HERE / "model.py"), "--listen", "127.0.0.1:0"])
        self.model_url = self._first_line(model, "model: ").split()[1]

        config = self.config_file or HERE / "rebuno.yaml"
        if self.lease_seconds is not None:
            text = config.read_text()
            text = re.sub(r"lease_timeout_seconds: \d+", f"lease_timeout_seconds: {self.lease_seconds}", text)
            shutil.copy(config.parent / "policy.yaml", self.dir / "policy.yaml")
            config = self.dir / "rebuno.yaml"
            config.write_text(text)
        kport, sport = free_port(), free_port()
        self.kernel_url, self.sandbox_url = f"http://127.0.0.1:{kport}", f"http://127.0.0.1:{sport}"
        dev = self._spawn("rebuno-dev", [rebuno_bin(), "dev", "--config", str(config),
                                         "--listen", f"127.0.0.1:{kport}", "--sandbox-listen", f"127.0.0.1:{sport}",
                                         "--state-dir", str(self.dir / "state")],
                          {"FORGE_CA": self.forge_ca, "FORGE_ADDR": forge_addr, "REBUNO_SANDBOXES": "on"})
        self._wait_http(self.kernel_url + "/v0/health", dev)
        self._wait_http(self.sandbox_url + "/v1/health", dev)
        if self.image_tar:
            self.import_default_image()

        self.env = {
            "REBUNO_URL": self.kernel_url, "REBUNO_SANDBOX_URL": self.sandbox_url,
            "LLM_BASE_URL": self.model_url, "LLM_MODEL": "scripted-coder", "LLM_API_KEY": "unused",
            "REPO": REPO, "FORGE_HOST": FORGE_HOST, "FORGE_API_URL": self.forge_url, "FORGE_CA": self.forge_ca,
            "FORGE_TOKEN_FILE": str(self.token_file), "CHECKPOINT_EVERY": str(self.checkpoint_every),
            "PYTHONPATH": str(ROOT / "sdk" / "python"), "PYTHONUNBUFFERED": "1",
        }
        self.start_agent()
        return self

    def import_default_image(self) -> None:
        """The Debian image as this sandboxd's default (docker.io/rebuno/default:latest):
        the agent's sandboxes then run on it, not on the host's /usr."""
        t0 = time.time()
        p = subprocess.run([rebuno_bin(), "sandbox", "image", "import", str(self.image_tar), "--type",
                            "tarball", "--ref", "docker.io/rebuno/default:latest"],
                           env=dict(os.environ, REBUNO_SANDBOX_URL=self.sandbox_url),
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"importing the default image {self.image_tar} failed:\n{p.stderr}")
        print(f"  image    docker.io/rebuno/default:latest ({time.time() - t0:.1f} s to import "
              f"{self.image_tar})", flush=True)

    def start_forge(self, addr: str) -> Proc:
        forge = self._spawn("forge", [PYTHON, str(HERE / "forge.py"), "--data", str(self.dir / "forge"), "--listen",
                                      addr, "--public-url", f"https://{FORGE_HOST}"], {"FORGE_TOKEN": self.token})
        m = re.match(r"forge: (https://(\S+)) ca=(\S+)", self._first_line(forge, "forge: "))
        if not m:
            raise RuntimeError(f"forge did not start:\n{forge.tail()}")
        self.forge_url, self.forge_ca = m.group(1), m.group(3)
        return forge

    def rotate_token(self) -> str:
        """A new forge token: the forge restarts with it (the old one stops working) and
        the agent's token file holds it, so the next sandbox opened gets it."""
        old = self.procs.pop("forge")
        old.stop()
        old.log.rename(old.log.with_suffix(f".{int(time.time())}.log"))
        self.token = secrets.token_urlsafe(24)
        self.token_file.write_text(self.token + "\n")
        self.start_forge(self.forge_url.removeprefix("https://"))
        return self.token

    def start_agent(self) -> Proc:
        """(Re)start the agent process."""
        return self._spawn("agent", [PYTHON, str(self.agent_script or HERE / "agent.py")], self.env)

    def kill_agent(self) -> None:
        """SIGKILL: no goodbye to the kernel, the lease just runs out."""
        self.procs["agent"].stop(signal.SIGKILL)

    def stop(self) -> None:
        for name in ("agent", "rebuno-dev", "model", "forge"):
            if name in self.procs:
                self.procs[name].stop()

    # --- reading the forge

    def forge_api(self, path: str) -> Any:
        req = urllib.request.Request(f"{self.forge_url}/api/repos/{REPO}{path}",
                                     headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=self.forge_ca), timeout=10) as r:
            return json.loads(r.read())

    def cli(self, *args: str, echo: bool = True, check: bool = True, live: bool = False) -> str:
        """Run ``rebuno ARGS`` against this kernel; print the command (and, ``live``, its
        output as it comes)."""
        if echo:
            print(f"\n$ rebuno {' '.join(_quote(a) for a in args)}", flush=True)
        env = {**os.environ, "REBUNO_URL": self.kernel_url, "REBUNO_SANDBOX_URL": self.sandbox_url}
        if live:
            p = subprocess.run([rebuno_bin(), *args], env=env, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
            print(p.stdout, end="", flush=True)
        else:
            p = subprocess.run([rebuno_bin(), *args], env=env, text=True, capture_output=True)
            if echo:
                print(p.stdout, end="", flush=True)
        if check and p.returncode != 0:
            raise RuntimeError(f"rebuno {' '.join(args)} failed ({p.returncode}): {p.stdout}{p.stderr}")
        return p.stdout


def _quote(a: str) -> str:
    return a if re.fullmatch(r"[A-Za-z0-9_./:=@-]+", a) else "'" + a.replace("'", "'\\''") + "'"


class Story:
    """The demo's steps, each usable alone (the tests assert between them)."""

    def __init__(self, stack: Stack, echo: bool = True):
        self.s = stack
        self.echo = echo
        self.client = SyncClient(stack.kernel_url)
        self.lines: list[str] = []   # what `rebuno exec watch` printed
        self.crash_after: str | None = None  # kill the agent once this tool step succeeded

    def say(self, text: str) -> None:
        if self.echo:
            print(f"\n== {text}", flush=True)

    def create(self, task: str, session: str) -> str:
        out = self.s.cli("exec", "create", AGENT, json.dumps({"task": task}), "--session", session,
                         echo=self.echo)
        return out.split()[1]

    def wait_for(self, eid: str, states: tuple[str, ...], timeout: float = 120.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ex = self.client.get(eid)
            if ex.status in states:
                return ex
            if ex.status in ("completed", "failed", "cancelled"):
                raise RuntimeError(f"execution {eid} ended {ex.status}: {ex.failure_reason or ex.output}\n"
                                   f"agent log:\n{self.s.procs['agent'].tail()}")
            time.sleep(0.2)
        raise TimeoutError(f"execution {eid} not {states} after {timeout}s\n"
                           f"agent log:\n{self.s.procs['agent'].tail()}")

    def pending_approval(self, eid: str, timeout: float = 120.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pending = self.client.approvals(status="pending", execution_id=eid)
            if pending:
                return pending[0]
            ex = self.client.get(eid)
            if ex.status in ("completed", "failed", "cancelled"):
                raise RuntimeError(f"execution {eid} ended {ex.status} without asking for approval: "
                                   f"{ex.failure_reason or ex.output}\nagent log:\n{self.s.procs['agent'].tail()}")
            time.sleep(0.2)
        raise TimeoutError(f"no approval for {eid}\nagent log:\n{self.s.procs['agent'].tail()}")

    def approve_and_finish(self, eid: str, timeout: float = 180.0) -> Any:
        """Follow the run with ``rebuno exec watch`` and approve each approval it asks for
        (``open_pr``) with ``rebuno exec approve``; returns the completed execution."""
        if self.echo:
            print(f"\n$ rebuno exec watch {eid}", flush=True)
        env = {**os.environ, "REBUNO_URL": self.s.kernel_url}
        watch = subprocess.Popen([rebuno_bin(), "exec", "watch", eid], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        fd, pending = watch.stdout.fileno(), b""
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(fd, selectors.EVENT_READ)
                while True:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"execution {eid} did not finish in {timeout}s\n"
                                           f"agent log:\n{self.s.procs['agent'].tail()}")
                    if not sel.select(0.5):
                        continue
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        break
                    *lines, pending = (pending + chunk).split(b"\n")
                    for raw in lines:
                        self._watched(raw.decode(errors="replace") + "\n")
            if pending:
                self._watched(pending.decode(errors="replace"))
        finally:
            if watch.poll() is None:
                watch.kill()
            watch.wait(10)
            watch.stdout.close()
        ex = self.client.get(eid)
        if ex.status != "completed":
            raise RuntimeError(f"execution {eid} ended {ex.status}: {ex.failure_reason}\n"
                               f"agent log:\n{self.s.procs['agent'].tail()}")
        return ex

    def _watched(self, line: str) -> None:
        """One line of ``watch``: shown, kept, and an approval request is approved."""
        self.lines.append(line)
        if self.echo:
            print(line, end="", flush=True)
        m = re.search(r"approve with: rebuno exec approve (\S+)", line)
        if m:
            self.s.cli("exec", "approve", m.group(1), "--by", "demo", "--reason", "looks good", echo=self.echo)
        if self.crash_after and re.search(rf"step\.succeeded +tool_call {self.crash_after}\b", line):
            self.crash_after = None
            self.s.kill_agent()
            if self.echo:
                print(f"\n   ** agent.py killed (SIGKILL) after that step; started again. The kernel "
                      f"re-dispatches the run when its {self.s.lease_seconds} s lease expires, and the "
                      "new attempt replays the recorded calls **\n", flush=True)
            self.s.start_agent()

    def fork_point(self, eid: str) -> tuple[int, Any]:
        """An event strictly between two checkpoints of the workspace (after the baseline):
        the last tool step of the first such gap that has one, and the checkpoint a fork
        there restores from. (A re-dispatch adds a checkpoint of its own, so the first gap
        can hold dispatch events only.)"""
        fp = self.client.fork_points(eid)
        cps = sorted((c for c in fp.checkpoints if c["key"] == "workspace"), key=lambda c: c["covered_seq"])
        for cp, nxt in zip(cps[1:], cps[2:]):
            lo, hi = cp["covered_seq"], nxt["covered_seq"]
            candidates = [e for e in fp.events if lo < e["event_seq"] < hi and not e["covered"]
                          and e["type"] == "step.succeeded"
                          and e["target"] in ("shell", "read_file", "write_file")]
            if candidates:
                return candidates[-1]["event_seq"], cp
        raise RuntimeError(f"no uncovered tool step between two checkpoints: {cps}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", help="work folder (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--no-wait", action="store_true", help="stop everything at the end without asking")
    ap.add_argument("--crash", action="store_true",
                    help="kill the agent during the first run, to show a re-dispatch (5 s lease)")
    ap.add_argument("--image", default=os.environ.get("REBUNO_DEMO_IMAGE_TAR"),
                    help="tarball of the sandboxes' default image (scripts/default-image.sh "
                         "--build-only prints it); default: $REBUNO_DEMO_IMAGE_TAR, else the "
                         "built-in host image")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("demo: sandboxes need root (namespaces, mounts, cgroups): run it with sudo", file=sys.stderr)
        return 2
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="rebuno-demo-"))
    stack = Stack(work, lease_seconds=5 if args.crash else None, image_tar=args.image)
    try:
        print(f"demo: starting the forge, the model, rebuno dev and the agent in {work}", flush=True)
        stack.start()
        print(f"  kernel   {stack.kernel_url}\n  sandboxes {stack.sandbox_url}\n"
              f"  forge    {stack.forge_url} (as https://{FORGE_HOST} from the sandboxes)\n"
              f"  model    {stack.model_url}", flush=True)
        story = Story(stack)
        if args.crash:
            story.crash_after = "write_file"

        story.say("1. A task for the agent, in session fix-tests")
        first = story.create(TASK_FIX, "fix-tests")
        story.say("The run, live: the tools work in a sandbox; open_pr waits for approval, which the demo gives")
        ex = story.approve_and_finish(first)
        pr = stack.forge_api("/pulls")[0]
        print(f"\npull request #{pr['number']} {pr['state']}: {pr['title']} ({pr['head']} -> {pr['base']})")

        story.say("2. The next turn of the same session: same sandbox, branch and pull request")
        stack.rotate_token()
        print("(the forge token was just rotated: the reopened sandbox pushes with the new one)")
        second = story.create(TASK_EDGE, "fix-tests")
        ex2 = story.approve_and_finish(second)
        pulls = stack.forge_api("/pulls")
        print(f"\npull requests: {[(p['number'], p['head'], p['title']) for p in pulls]}")
        print(f"sandbox {ex2.output['sandbox']} on branch {ex2.output['branch']} "
              f"(first turn: {ex.output['sandbox']}, {ex.output['branch']})")

        story.say("3. Fork the first execution at an event between two checkpoints")
        stack.cli("exec", "fork-points", first)
        seq, cp = story.fork_point(first)
        out = stack.cli("exec", "fork", first, "--at", str(seq), "--session", "fix-tests-fork")
        fork = out.split()[1]
        exf = story.approve_and_finish(fork)
        print(f"\nthe fork's sandbox {exf.output['sandbox']} was restored from checkpoint {cp['checkpoint_ref']} "
              f"(seq {cp['covered_seq']}) and pushed branch {exf.output['branch']}")
        stack.cli("sandbox", "ls")

        story.say("Where to look")
        print(f"""  rebuno exec list                       (REBUNO_URL={stack.kernel_url})
  rebuno exec watch {first}
  rebuno exec get {fork}
  rebuno sandbox ls                      (REBUNO_SANDBOX_URL={stack.sandbox_url})
  curl --cacert {stack.forge_ca} -H 'Authorization: Bearer <token>' {stack.forge_url}/api/repos/{REPO}/pulls
  logs: {work}/*.log""")
        if not args.no_wait and sys.stdin.isatty():
            input("\nEverything is still running. Press Enter to stop it all. ")
        return 0
    except (RuntimeError, TimeoutError, subprocess.CalledProcessError) as e:
        print(f"\ndemo failed: {e}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)
        elif args.keep:
            print(f"kept {work}")


if __name__ == "__main__":
    sys.exit(main())
