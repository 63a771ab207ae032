#!/usr/bin/python3
"""bench/image_pull.py - pulling an image from a loopback registry (issue 14).

Builds a 3-layer image of about 100 MB (incompressible data, gzip layers), pushes it to a
Debian docker-registry on loopback (its own config and storage under a temp dir), then:

1. `skopeo copy docker://... dir:DIR` of it: the reference (downloads and verifies blobs);
2. `rebuno sandboxd` (release build, fresh state) pulls it: POST /v1/images {"type":"pull"}
   and its SSE stream; printed are the time until the download ends (the job turns
   `installing`: every blob fetched, verified and fsynced) and until the image is
   installed (layers unpacked into the layer store as well), each as a ratio to skopeo;
3. a second image sharing the first's three layers plus one small new one is pulled by
   the same daemon: printed are the bytes that moved (aim: only the new layer).

Run as root: `sudo bench/image_pull.py [--mb 100] [--runs 3]` (make build/rebuno first).
Prints figures and ratios; asserts nothing about time. Leaves nothing behind.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
os.environ.setdefault("REBUNO_SANDBOXES", "off")
from conftest import free_port, local_auth  # noqa: E402
from registry_fixture import Layout, Registry  # noqa: E402

REBUNO = os.environ.get("REBUNO_BIN") or os.path.join(ROOT, "build", "rebuno")


def start_sandboxd(root, reg_host):
    port = free_port()
    state = os.path.join(root, "state")
    log = open(os.path.join(root, "sandboxd.log"), "ab")
    p = subprocess.Popen([REBUNO, "sandboxd", "--listen", f"127.0.0.1:{port}", "--state-dir", state,
                          "--network", "off", "--registry-http", reg_host], stdout=log, stderr=log)
    end = time.time() + 30
    while time.time() < end:
        if p.poll() is not None:
            raise SystemExit("sandboxd exited; see " + log.name)
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/v1/health")
            if c.getresponse().status == 200:
                return p, port, log
        except OSError:
            time.sleep(0.05)
    raise SystemExit("sandboxd did not start")


def stop(p, log):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    log.close()


def pull(port, ref):
    """(seconds until the stream said the download ended, seconds until done, the job)."""
    h = {"Content-Type": "application/json", **local_auth(port, "sandboxd")}
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/images", body=json.dumps({"type": "pull", "ref": ref}), headers=h)
    r = c.getresponse()
    job = json.loads(r.read())
    assert r.status == 202, job
    c.request("GET", f"/v1/images/jobs/{job['id']}/stream", headers=h)
    r = c.getresponse()
    t_dl, ev, data = None, None, []
    final = None
    while final is None:
        line = r.fp.readline()
        if not line:
            break
        line = line.decode().rstrip("\r\n")
        if line.startswith("event:"):
            ev = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif line == "" and data:
            j = json.loads("\n".join(data))
            if t_dl is None and j["status"] in ("installing", "done"):
                t_dl = time.perf_counter() - t0
            if ev in ("done", "error"):
                final = j
            ev, data = None, []
    t_done = time.perf_counter() - t0
    c.close()
    if not final or final["status"] != "done":
        raise SystemExit(f"pull failed: {final and final.get('error')}")
    return t_dl or t_done, t_done, final


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=100, help="image size in MB (default 100)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each, best kept (default 3)")
    a = ap.parse_args()
    if os.geteuid() != 0 or not os.access(REBUNO, os.X_OK):
        raise SystemExit("run as root after `make build/rebuno`")
    work = tempfile.mkdtemp(prefix="rebuno-bench-pull-")
    os.environ.setdefault("XDG_CONFIG_HOME", os.path.join(work, "config"))
    reg = None
    try:
        reg = Registry(tempfile.mkdtemp(dir=work))
        lay = Layout(os.path.join(work, "layout"))
        per = a.mb * 1_000_000 // 3
        base = [[("l%d" % i, "dir"), ("l%d/data" % i, os.urandom(per))] for i in range(3)]
        lay.tag(lay.image(base), "one")
        lay.tag(lay.image(base + [[("new", "dir"), ("new/f", os.urandom(200_000))]]), "two")
        reg.push(lay.path, "one", "bench/img:one")
        reg.push(lay.path, "two", "bench/img:two")
        ref1, ref2 = f"{reg.host}/bench/img:one", f"{reg.host}/bench/img:two"

        sk = []
        for _ in range(a.runs):
            out = os.path.join(work, "skopeo-dir")
            shutil.rmtree(out, ignore_errors=True)
            t0 = time.perf_counter()
            subprocess.run(["skopeo", "copy", "--quiet", "--insecure-policy", "--src-tls-verify=false",
                            f"docker://{ref1}", f"dir:{out}"], check=True)
            sk.append(time.perf_counter() - t0)
        shutil.rmtree(os.path.join(work, "skopeo-dir"), ignore_errors=True)

        dl, tot, second = [], [], None
        for i in range(a.runs):
            root = tempfile.mkdtemp(dir=work)
            p, port, log = start_sandboxd(root, reg.host)
            try:
                t_dl, t_done, job = pull(port, ref1)
                dl.append(job["download_ms"] / 1000)  # the daemon's own measure
                tot.append(t_done)
                if i == 0:
                    second = pull(port, ref2)[2]
            finally:
                stop(p, log)
                subprocess.run(["umount", "-l", os.path.join(root, "state", "store")],
                               capture_output=True)
            shutil.rmtree(root, ignore_errors=True)
        s = min(sk)
        size = job["bytes_total"]
        print(f"image: 3 layers, {size / 1e6:.1f} MB (gzip, incompressible), registry on loopback")
        print(f"skopeo copy docker:// -> dir:      {s:.3f} s  (best of {a.runs})")
        print(f"rebuno pull, download + verify:    {min(dl):.3f} s  = {min(dl) / s:.2f}x skopeo"
              "  (download_ms)")
        print(f"rebuno pull, installed (unpacked): {min(tot):.3f} s  = {min(tot) / s:.2f}x skopeo")
        new = [layer for layer in second["layers"] if not layer["cached"]]
        print(f"second image sharing 3 base layers: fetched {second['bytes_fetched']} bytes "
              f"(new layer {sum(layer['size'] for layer in new)} bytes, "
              f"{len(second['layers']) - len(new)} of {len(second['layers'])} layers cached)")
    finally:
        if reg:
            reg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
