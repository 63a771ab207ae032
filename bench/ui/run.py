#!/usr/bin/env python3
"""bench/ui/run.py - how fast the dashboard shows big data: time to first render of the
executions list with 100,000 executions and of an execution with 10,000 events (its first
page of events, and scrolled down to its last event), and the bytes transferred for each
(headless Chromium, cold cache, 3 runs each; bench/ui/measure.mjs).

    python3 bench/ui/run.py [--bin build/rebuno] [--executions 100000] [--events 10000] [--identity]

--identity also loads each page without compression (Accept-Encoding: identity), to show
what gzip saves.

Fills a fresh `rebuno dev` (temp state folder) through the public API: the executions with
8 concurrent clients, the long one by claiming it and running steps until it has the
events. Prints the figures; asserts nothing (speed is measured here, not tested).
"""
import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from conftest import Kernel, local_auth  # noqa: E402  (the test suite's kernel runner)


class Conn:
    def __init__(self, port, token):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.h = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method, path, body=None, headers=None):
        self.c.request(method, path, body=json.dumps(body) if body is not None else None,
                       headers={**self.h, **(headers or {})})
        r = self.c.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data) if data else None


def fill_list(port, token, n, threads=8):
    per = n // threads

    def work(i):
        c = Conn(port, token)
        for j in range(per):
            c.call("POST", "/v0/executions", {"agent_id": "bench" if j % 3 else "other",
                                              "input": {"i": i * per + j}})
    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return per * threads


def long_execution(port, token, events):
    c = Conn(port, token)
    ex = c.call("POST", "/v0/executions", {"agent_id": "long", "input": {"task": "many steps"}})
    w = c.call("POST", "/v0/agents/long/workers", {})["worker_id"]
    claim = None
    while not claim or claim["execution"]["id"] != ex["id"]:
        claim = c.call("POST", "/v0/agents/long/claim", {"worker_id": w, "wait_seconds": 5})
    h = {"Rebuno-Dispatch-Id": claim["dispatch"]["id"], "Rebuno-Dispatch-Attempt": str(claim["dispatch"]["attempt"])}
    i = 0
    while c.call("GET", f"/v0/executions/{ex['id']}")["last_seq"] < events - 1:
        for _ in range(200):
            kind = "llm_call" if i % 5 == 0 else "tool_call"
            args = ({"messages": [{"role": "user", "content": f"step {i}: what next?"}]} if kind == "llm_call"
                    else {"path": f"src/file_{i}.py", "content": "x" * 200})
            d = c.call("POST", f"/v0/executions/{ex['id']}/steps",
                       {"kind": kind, "target": "model" if kind == "llm_call" else "write_file", "args": args}, h)
            c.call("POST", f"/v0/executions/{ex['id']}/steps/{d['step_id']}/complete",
                   {"result": {"content": f"answer {i}"} if kind == "llm_call" else {"ok": True, "bytes": 200}}, h)
            i += 1
    c.call("POST", f"/v0/executions/{ex['id']}/complete", {"output": {"steps": i}}, h)
    return ex["id"], c.call("GET", f"/v0/executions/{ex['id']}")["last_seq"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "rebuno"))
    ap.add_argument("--executions", type=int, default=100000)
    ap.add_argument("--events", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--identity", action="store_true", help="also load each page uncompressed")
    a = ap.parse_args()
    import conftest
    conftest.BIN = a.bin
    with tempfile.TemporaryDirectory(prefix="rebuno-bench-ui-") as d:
        os.environ.setdefault("XDG_CONFIG_HOME", os.path.join(d, "xdg"))
        k = Kernel(d, config="agents:\n  - name: bench\n  - name: other\n  - name: long\n")
        k.start()
        try:
            token = local_auth(k.port)["Authorization"].split(" ", 1)[1]
            t = time.time()
            long_id, last_seq = long_execution(k.port, token, a.events)
            print(f"filled: 1 execution with {last_seq} events in {time.time() - t:.1f} s", flush=True)
            t = time.time()
            n = fill_list(k.port, token, a.executions)
            print(f"filled: {n} more executions in {time.time() - t:.1f} s", flush=True)
            spec = {"url": k.url, "token": token, "runs": a.runs, "pages": [
                {"name": f"list ({n + 1} executions)", "hash": "#/executions",
                 "ready": "document.querySelectorAll('tbody tr[data-id]').length === 50"},
                {"name": "list filtered (agent=other, completed: none match)",
                 "hash": "#/executions?agent_id=other&status=completed",
                 "ready": "!!document.querySelector('td.empty')"},
                {"name": f"execution ({last_seq} events): first page shown", "hash": f"#/executions/{long_id}",
                 "ready": "document.querySelectorAll('.timeline > li').length > 0 && !!document.querySelector('.exhead')"},
                {"name": f"execution ({last_seq} events): scrolled to the end", "hash": f"#/executions/{long_id}",
                 "ready": "document.querySelectorAll('.timeline > li').length > 0",
                 "scroll": f"document.querySelector('#tl-h').textContent.includes('({last_seq} events')"},
            ]}
            if a.identity:
                spec["pages"] += [dict(p, name=p["name"] + " [identity]", identity=True) for p in spec["pages"]]
            sp = os.path.join(d, "spec.json")
            with open(sp, "w") as f:
                json.dump(spec, f)
            out = subprocess.run(["node", os.path.join(ROOT, "bench", "ui", "measure.mjs"), sp],
                                 capture_output=True, text=True, timeout=1800)
            if out.returncode:
                sys.exit(out.stderr)
            rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
            for r in rows:
                if "error" in r:
                    print(f"{r['name']} run {r['run']}: not rendered: {r['error']}; page: {r['seen']!r}")
            rows = [r for r in rows if "error" not in r]
            print(f"\n{'page':<52} {'first render ms (runs)':<26} {'bytes':>10} {'requests':>8} {'DOM nodes':>9}")
            for name in dict.fromkeys(r["name"] for r in rows):
                rs = [r for r in rows if r["name"] == name]
                ms = sorted(r["ms"] for r in rs)
                print(f"{name:<52} {'median ' + str(ms[len(ms) // 2]) + ' ' + str(ms):<26} "
                      f"{rs[-1]['bytes']:>10} {rs[-1]['requests']:>8} {rs[-1]['dom_nodes']:>9}")
        finally:
            k.stop()


if __name__ == "__main__":
    main()
