"""Pulling images from a real OCI registry (issue 14, part B).

A Debian docker-registry on loopback (plain HTTP, TLS with our own CA, token auth with
a token server of ours) receives images pushed by skopeo from OCI layouts built here;
sandboxd pulls them through POST /v1/images {"type":"pull"} and its job stream. The
error paths: unknown reference (404), a corrupt blob in the registry's storage (digest
mismatch), no credentials (401), a registry answering 429/500 or stalling (a small
server of ours: the real one will not do that on demand), a full disk (507).
"""
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import threading

import pytest

from conftest import local_auth
from registry_fixture import FakeRegistry, Layout, Registry, TokenServer

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/usr/bin/docker-registry")
    or not os.path.exists("/usr/bin/skopeo"),
    reason="needs root, docker-registry and skopeo")


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="rebuno-reg-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def registries(workdir):
    made = []

    def make(tls=False, token=False):
        root = tempfile.mkdtemp(dir=workdir)
        ts = TokenServer(tempfile.mkdtemp(dir=workdir)) if token else None
        if ts:
            made.append(ts)
        r = Registry(root, tls=tls, token=ts)
        made.append(r)
        return r

    yield make
    for m in reversed(made):
        m.stop()


@pytest.fixture
def fakes():
    made = []

    def make(mode):
        f = FakeRegistry(mode)
        made.append(f)
        return f

    yield make
    for f in made:
        f.stop()


def read_stream(sbx, job_id, timeout=120):
    """The events of a job's SSE stream until it ends: [(event, data), ...]."""
    conn = http.client.HTTPConnection("127.0.0.1", sbx.port, timeout=timeout)
    conn.request("GET", f"/v1/images/jobs/{job_id}/stream",
                 headers=local_auth(sbx.port, "sandboxd"))
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    assert resp.getheader("Content-Type", "").startswith("text/event-stream")
    events, ev, data = [], None, []
    while True:
        line = resp.fp.readline()
        if not line:
            break
        line = line.decode().rstrip("\r\n")
        if line.startswith("event:"):
            ev = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif line == "" and (ev or data):
            events.append((ev, json.loads("\n".join(data))))
            ev, data = None, []
    conn.close()
    return events


def pull(sbx, ref, expect="done"):
    """Start a pull, follow its stream; returns (job at the end, events)."""
    st, job = sbx.request("POST", "/v1/images", {"type": "pull", "ref": ref})
    assert st == 202, (st, job)
    assert job["type"] == "pull" and job["id"]
    events = read_stream(sbx, job["id"])
    assert events, "the stream sent nothing"
    last_ev, last = events[-1]
    assert last_ev == expect, (last_ev, last)
    for ev, _ in events[:-1]:
        assert ev == "progress"
    return last, events


def simple_layout(d, tag="v1", size=0, layers=None):
    lay = Layout(d)
    layers = layers or [
        [("etc", "dir"), ("etc/os-release", b"ID=test\n"), ("bin", "dir"),
         ("bin/tool", b"#!/bin/sh\necho base\n")],
        [("app", "dir"), ("app/data.bin", os.urandom(size) if size else b"data\n")],
    ]
    desc = lay.image(layers)
    lay.tag(desc, tag)
    return lay, desc


def layer_dir(sbx, digest):
    """Where sandboxd unpacked a layer: the layer store on its storage (store/layers)."""
    return os.path.join(sbx.state, "store", "layers", digest[7:])


def blob_store(sbx):
    return os.path.join(sbx.state, "blobs", "sha256")


def test_pull_plain_http_stores_verified_blobs(make_sandboxd, registries, workdir):
    reg = registries()
    lay, desc = simple_layout(os.path.join(workdir, "img"), size=300000)
    reg.push(lay.path, "v1", "team/tool:v1")
    sbx = make_sandboxd(["--registry-http", reg.host]).start()
    job, events = pull(sbx, f"{reg.host}/team/tool:v1")
    assert job["status"] == "done"
    assert job["ref"] == f"{reg.host}/team/tool:v1"
    assert job["manifest_digest"].startswith("sha256:")
    assert len(job["layers"]) == 2
    for layer in job["layers"]:
        assert layer["done"] == layer["size"] and not layer["cached"]
        # unpacked into the layer store, so the compressed blob is not kept twice
        assert os.path.isdir(layer_dir(sbx, layer["digest"]))
        assert not os.path.exists(os.path.join(blob_store(sbx), layer["digest"][7:]))
    # the manifest and the config stay in the blob store, verified
    manifest = json.load(open(os.path.join(lay.path, "blobs", "sha256", desc["digest"][7:])))
    for d in (desc["digest"], manifest["config"]["digest"]):
        path = os.path.join(blob_store(sbx), d[7:])
        assert subprocess.run(["sha256sum", path], capture_output=True,
                              text=True).stdout.split()[0] == d[7:]
    assert job["bytes_done"] == job["bytes_total"] > 300000
    assert job["image"] and job["error"] is None
    img = job["image"]
    assert img["digest"] == job["manifest_digest"]
    assert img["layers"] == [layer["digest"] for layer in job["layers"]]
    assert img["source"] == {"type": "registry", "path": job["ref"]}
    assert job["ref"] in img["references"]
    assert [i["digest"] for i in sbx.ok("GET", "/v1/images")["images"]] == [img["digest"]]
    # unpacked into the shared layer store, with a skeleton of its own
    top = layer_dir(sbx, job["layers"][1]["digest"])
    assert os.path.getsize(os.path.join(top, "app", "data.bin")) == 300000
    base = layer_dir(sbx, job["layers"][0]["digest"])
    assert open(os.path.join(base, "bin", "tool")).read() == "#!/bin/sh\necho base\n"
    assert os.path.isdir(os.path.join(sbx.state, "images", img["digest"][7:]))
    # nothing half-made is left: no temp files, no layout of the pull
    assert os.listdir(os.path.join(sbx.state, "blobs", "tmp")) == []
    assert [n for n in os.listdir(os.path.join(sbx.state, "pulls"))] == []
    # the job stays readable
    again = sbx.ok("GET", f"/v1/images/jobs/{job['id']}")
    assert again["status"] == "done"
    # a second pull downloads nothing: every blob is in the store
    job2, _ = pull(sbx, f"{reg.host}/team/tool:v1")
    assert job2["id"] != job["id"]
    assert all(layer["cached"] for layer in job2["layers"])
    for layer in job["layers"]:
        assert reg.blob_gets(layer["digest"]) == 1


def write_auth(workdir, host, user, password):
    import base64
    p = os.path.join(workdir, "auth.json")
    with open(p, "w") as f:
        json.dump({"auths": {host: {"auth": base64.b64encode(f"{user}:{password}".encode())
                                    .decode()}}}, f)
    return p


def test_pull_tls_with_the_daemons_ca(make_sandboxd, registries, workdir):
    reg = registries(tls=True)
    lay, _ = simple_layout(os.path.join(workdir, "img"))
    reg.push(lay.path, "v1", "tls/img:v1")
    # without the CA: the certificate is not trusted, and the error says which registry
    plain = make_sandboxd().start()
    job, _ = pull(plain, f"{reg.host}/tls/img:v1", expect="error")
    assert job["status"] == "failed"
    assert reg.host in job["error"]["message"]
    assert job["error"]["status"] == 502
    sbx = make_sandboxd(["--registry-ca", reg.ca_crt]).start()
    job, _ = pull(sbx, f"{reg.host}/tls/img:v1")
    assert len(job["layers"]) == 2


def test_pull_token_auth(make_sandboxd, registries, workdir):
    reg = registries(token=True)
    ts = reg.token
    lay, _ = simple_layout(os.path.join(workdir, "img"))
    reg.push(lay.path, "v1", "private/img:v1", creds=f"{ts.user}:{ts.password}")
    # no credentials: the token server says 401; the error names the registry and the fix
    anon = make_sandboxd(["--registry-http", reg.host]).start()
    job, _ = pull(anon, f"{reg.host}/private/img:v1", expect="error")
    err = job["error"]
    assert err["status"] == 401 and err["code"] == "registry_unauthorized", err
    assert reg.host in err["message"] and "401" in err["message"]
    assert "--registry-auth" in err["message"]
    # wrong credentials: 401 too
    bad = write_auth(tempfile.mkdtemp(dir=workdir), reg.host, ts.user, "wrong")
    sbx = make_sandboxd(["--registry-http", reg.host, "--registry-auth", bad]).start()
    job, _ = pull(sbx, f"{reg.host}/private/img:v1", expect="error")
    assert job["error"]["status"] == 401
    # the right ones from the daemon's auth.json: bearer token, then the blobs
    good = write_auth(tempfile.mkdtemp(dir=workdir), reg.host, ts.user, ts.password)
    issued = ts.issued
    sbx = make_sandboxd(["--registry-http", reg.host, "--registry-auth", good]).start()
    job, _ = pull(sbx, f"{reg.host}/private/img:v1")
    assert len(job["layers"]) == 2
    assert ts.issued == issued + 1  # one token for the whole pull


def test_pull_unknown_reference_is_404(make_sandboxd, registries):
    reg = registries()
    sbx = make_sandboxd(["--registry-http", reg.host]).start()
    job, _ = pull(sbx, f"{reg.host}/nobody/here:v9", expect="error")
    err = job["error"]
    assert err["status"] == 404 and err["code"] == "image_not_found", err
    assert f"{reg.host}/nobody/here:v9" in err["message"]
    # bad references are refused before any job, naming the field
    for bad in ["", "UPPER/case", "a//b", "x@sha256:123", "../etc", "a:" + "t" * 200]:
        st, out = sbx.request("POST", "/v1/images", {"type": "pull", "ref": bad})
        assert st == 400 and out["error"]["field"] == "ref", (bad, st, out)
    st, out = sbx.request("POST", "/v1/images", {"type": "pull"})
    assert st == 400 and out["error"]["field"] == "ref"
    st, out = sbx.request("POST", "/v1/images", {"type": "pull", "ref": "a", "path": "/x"})
    assert st == 400 and out["error"]["field"] == "path"
    st, out = sbx.request("GET", "/v1/images/jobs/nope")
    assert st == 404 and out["error"]["code"] == "job_not_found"


def test_pull_digest_mismatch_leaves_nothing(make_sandboxd, registries, workdir):
    reg = registries()
    lay, desc = simple_layout(os.path.join(workdir, "img"), size=50000)
    reg.push(lay.path, "v1", "bad/img:v1")
    manifest = json.load(open(os.path.join(lay.path, "blobs", "sha256", desc["digest"][7:])))
    big = manifest["layers"][1]["digest"]
    path = reg.blob_data_path(big)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    with open(path, "wb") as f:
        f.write(data)
    sbx = make_sandboxd(["--registry-http", reg.host]).start()
    job, _ = pull(sbx, f"{reg.host}/bad/img:v1", expect="error")
    err = job["error"]
    assert err["code"] == "digest_mismatch" and err["status"] == 502, err
    assert big in err["message"] and reg.host in err["message"]
    assert not os.path.exists(os.path.join(blob_store(sbx), big[7:]))
    assert os.listdir(os.path.join(sbx.state, "blobs", "tmp")) == []
    assert os.listdir(os.path.join(sbx.state, "pulls")) == []
    assert sbx.ok("GET", "/v1/images")["images"] == []
    # pinned by digest: the manifest itself is checked against the reference
    job, _ = pull(sbx, f"{reg.host}/bad/img@{desc['digest']}", expect="error")
    assert job["error"]["code"] == "digest_mismatch"
    other = "sha256:" + "0" * 64
    job, _ = pull(sbx, f"{reg.host}/bad/img@{other}", expect="error")
    assert job["error"]["status"] == 404


@pytest.mark.parametrize("status", [429, 500])
def test_pull_registry_error_status(make_sandboxd, fakes, status):
    fake = fakes(("status", status))
    sbx = make_sandboxd(["--registry-http", fake.host]).start()
    job, _ = pull(sbx, f"{fake.host}/x/y:z", expect="error")
    err = job["error"]
    assert err["status"] == 502 and err["code"] == "registry_error", err
    assert fake.host in err["message"] and f"HTTP {status}" in err["message"], err
    assert "test says no" in err["message"]


def test_pull_stalling_registry_times_out(make_sandboxd, fakes, workdir):
    layer = {"mediaType": "application/vnd.oci.image.layer.v1.tar",
             "digest": "sha256:" + "a" * 64, "size": 1 << 20}
    cfg = {"mediaType": "application/vnd.oci.image.config.v1+json",
           "digest": "sha256:" + "b" * 64, "size": 1000}
    manifest = json.dumps({"schemaVersion": 2,
                           "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": cfg, "layers": [layer]}).encode()
    fake = fakes(("stall", manifest, cfg["digest"], cfg["size"]))
    sbx = make_sandboxd(["--registry-http", fake.host, "--registry-stall-timeout", "5"]).start()
    st, job = sbx.request("POST", "/v1/images", {"type": "pull", "ref": f"{fake.host}/slow/img:v1"})
    assert st == 202
    # while the registry stalls, the daemon serves other requests (the pull is on a worker)
    import time
    end = time.time() + 10
    while sbx.ok("GET", f"/v1/images/jobs/{job['id']}")["status"] != "downloading":
        assert time.time() < end
        time.sleep(0.05)
    assert sbx.request("GET", "/v1/health")[0] == 200
    assert sbx.request("GET", "/v1/images")[0] == 200
    # answered during the stall, not after it: the pull is still waiting on the registry
    assert sbx.ok("GET", f"/v1/images/jobs/{job['id']}")["status"] == "downloading"
    events = read_stream(sbx, job["id"])
    assert events[-1][0] == "error"
    job = events[-1][1]
    err = job["error"]
    assert err["status"] == 504 and err["code"] == "registry_timeout", err
    assert fake.host in err["message"]
    assert os.listdir(os.path.join(sbx.state, "blobs", "tmp")) == []


def test_concurrent_pulls_download_once(make_sandboxd, registries, workdir):
    reg = registries()
    lay, desc = simple_layout(os.path.join(workdir, "img"), size=4 << 20)
    reg.push(lay.path, "v1", "conc/img:v1")
    reg.push(lay.path, "v1", "conc/img:v2")  # the same image under another tag
    sbx = make_sandboxd(["--registry-http", reg.host]).start()
    refs = [f"{reg.host}/conc/img:v1"] * 3 + [f"{reg.host}/conc/img:v2"] * 2
    jobs = [None] * len(refs)

    def start(i):
        jobs[i] = sbx.request("POST", "/v1/images", {"type": "pull", "ref": refs[i]})

    ts = [threading.Thread(target=start, args=(i,)) for i in range(len(refs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(st == 202 for st, _ in jobs), jobs
    ids = {j["id"] for _, j in jobs}
    assert len(ids) <= 2  # one job per reference while it runs
    for i in ids:
        ev = read_stream(sbx, i)
        assert ev[-1][0] == "done", ev[-1]
    manifest = json.load(open(os.path.join(lay.path, "blobs", "sha256", desc["digest"][7:])))
    for layer in manifest["layers"] + [manifest["config"]]:
        assert reg.blob_gets(layer["digest"]) == 1, layer


def test_pull_index_picks_linux_amd64_and_zstd_layers(make_sandboxd, registries, workdir):
    reg = registries()
    lay = Layout(os.path.join(workdir, "multi"))
    amd = lay.image([[("which", b"amd64\n")], [("more", b"x" * 1000)]], arch="amd64")
    arm = lay.image([[("which", b"arm64\n")]], arch="arm64")
    lay.tag_index([arm, amd], "latest")
    reg.push_index(lay.path, "multi/img:latest")
    sbx = make_sandboxd(["--registry-http", reg.host]).start()
    job, _ = pull(sbx, f"{reg.host}/multi/img:latest")
    assert job["manifest_digest"] == amd["digest"]
    assert job["index_digest"] and job["index_digest"] != amd["digest"]
    assert len(job["layers"]) == 2
    # an index without linux/amd64
    lay2 = Layout(os.path.join(workdir, "armonly"))
    lay2.tag_index([lay2.image([[("which", b"arm\n")]], arch="arm64")], "latest")
    reg.push_index(lay2.path, "arm/only:latest")
    job, _ = pull(sbx, f"{reg.host}/arm/only:latest", expect="error")
    assert job["error"]["code"] == "platform_not_found" and job["error"]["status"] == 404
    # zstd: skopeo recompresses the layers on the way in
    lay3, _ = simple_layout(os.path.join(workdir, "z"))
    reg.push(lay3.path, "v1", "z/img:v1", zstd=True)
    job, _ = pull(sbx, f"{reg.host}/z/img:v1")
    assert all(layer["media_type"].endswith("+zstd") for layer in job["layers"]), job["layers"]


def test_pull_multi_layer_with_whiteouts(make_sandboxd, registries, workdir):
    reg = registries()
    lay = Layout(os.path.join(workdir, "wh"))
    desc = lay.image([
        [("a", "dir"), ("a/gone", b"old\n"), ("a/keep", b"keep\n"), ("b", "dir"),
         ("b/old1", b"1"), ("b/old2", b"2")],
        [("a", "dir"), ("a/.wh.gone", b""), ("b", "dir"), ("b/.wh..wh..opq", b""),
         ("b/new", b"new\n")],
        [("c", "dir"), ("c/link", ("link", "../a/keep"))],
    ])
    lay.tag(desc, "v1")
    reg.push(lay.path, "v1", "wh/img:v1")
    sbx = make_sandboxd(["--registry-http", reg.host]).start()
    job, events = pull(sbx, f"{reg.host}/wh/img:v1")
    assert len(job["layers"]) == 3
    l2 = layer_dir(sbx, job["layers"][1]["digest"])
    st = os.lstat(os.path.join(l2, "a", "gone"))  # an overlay whiteout: char device 0/0
    import stat
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
    assert not os.path.exists(os.path.join(l2, "a", ".wh.gone"))
    assert os.getxattr(os.path.join(l2, "b"), "trusted.overlay.opaque") == b"y"
    assert open(os.path.join(l2, "b", "new")).read() == "new\n"
    l3 = layer_dir(sbx, job["layers"][2]["digest"])
    assert os.readlink(os.path.join(l3, "c", "link")) == "../a/keep"
    # progress went up layer by layer and ended complete
    done = [e[1]["bytes_done"] for e in events]
    assert done == sorted(done)
    assert events[-1][1]["bytes_done"] == events[-1][1]["bytes_total"]


def test_second_pull_of_an_image_sharing_base_layers_fetches_only_the_new_one(
        make_sandboxd, registries, workdir):
    reg = registries()
    base_layers = [[("base", "dir"), ("base/big", os.urandom(1 << 20))],
                   [("mid", "dir"), ("mid/f", os.urandom(1 << 18))]]
    lay = Layout(os.path.join(workdir, "share"))
    d1 = lay.image(base_layers)
    lay.tag(d1, "one")
    d2 = lay.image(base_layers + [[("top", "dir"), ("top/new", b"only me\n" * 1000)]])
    lay.tag(d2, "two")
    reg.push(lay.path, "one", "share/img:one")
    reg.push(lay.path, "two", "share/img:two")
    sbx = make_sandboxd(["--registry-http", reg.host]).start()
    j1, _ = pull(sbx, f"{reg.host}/share/img:one")
    j2, _ = pull(sbx, f"{reg.host}/share/img:two")
    assert [layer["cached"] for layer in j2["layers"]] == [True, True, False]
    new = j2["layers"][2]["size"]
    # what moved: the new layer, the config and the manifest, nothing of the base
    assert new <= j2["bytes_fetched"] < new + 4096, j2
    assert j1["bytes_fetched"] > 1 << 20


def test_full_disk_during_pull_is_507_and_leaves_no_image(make_sandboxd, registries, workdir):
    reg = registries()
    lay, _ = simple_layout(os.path.join(workdir, "img"), size=24 << 20)  # incompressible
    reg.push(lay.path, "v1", "big/img:v1")
    sbx = make_sandboxd(["--registry-http", reg.host, "--storage", "copy"])
    os.makedirs(sbx.state)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", sbx.state],
                   check=True)
    try:
        sbx.start()
        job, _ = pull(sbx, f"{reg.host}/big/img:v1", expect="error")
        err = job["error"]
        assert err["status"] == 507 and err["code"] == "no_space", err
        assert os.listdir(os.path.join(sbx.state, "blobs", "tmp")) == []
        assert os.listdir(os.path.join(sbx.state, "pulls")) == []
        assert sbx.ok("GET", "/v1/images")["images"] == []
        # the daemon goes on working, and says so
        assert sbx.request("GET", "/v1/health")[0] == 200
        sbx.stop()
    finally:
        sbx.stop()
        subprocess.run(["umount", "-l", sbx.state], capture_output=True)


def test_cli_image_pull(make_sandboxd, registries, workdir):
    from conftest import BIN
    reg = registries()
    lay, desc = simple_layout(os.path.join(workdir, "img"), size=100000)
    reg.push(lay.path, "v1", "cli/img:v1")
    sbx = make_sandboxd(["--registry-http", reg.host]).start()
    url = ["--url", sbx.url]
    r = subprocess.run([BIN, "sandbox", "image", "pull", f"{reg.host}/cli/img:v1", *url],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == desc["digest"]
    # not a terminal: plain lines, the last one complete
    lines = r.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("done:") and "layers 2/2" in lines[-1], r.stderr
    r = subprocess.run([BIN, "sandbox", "image", "pull", f"{reg.host}/cli/img:v1", "--json",
                        *url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    job = json.loads(r.stdout)
    assert job["status"] == "done" and all(layer["cached"] for layer in job["layers"])
    # failure: the job's error, exit 1
    r = subprocess.run([BIN, "sandbox", "image", "pull", f"{reg.host}/cli/none:v1", *url],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "no image" in r.stderr and reg.host in r.stderr, r.stderr
    r = subprocess.run([BIN, "sandbox", "image", "pull", *url], capture_output=True, text=True)
    assert r.returncode == 2 and "REF" in r.stderr


def test_python_client_pull_image(make_sandboxd, registries, workdir):
    import asyncio
    from rebuno.sandbox import SandboxApiError, SandboxClient, SyncSandboxClient
    reg = registries()
    lay, desc = simple_layout(os.path.join(workdir, "img"), size=200000)
    reg.push(lay.path, "v1", "py/img:v1")
    sbx = make_sandboxd(["--registry-http", reg.host]).start()
    seen = []
    with SyncSandboxClient(sbx.url) as c:
        img = c.pull_image(f"{reg.host}/py/img:v1", on_progress=seen.append)
        assert img["digest"] == desc["digest"]
        assert img["source"] == {"type": "registry", "path": f"{reg.host}/py/img:v1"}
        assert seen and seen[-1]["status"] == "done"
        assert seen[-1]["bytes_done"] == seen[-1]["bytes_total"] > 200000
        with pytest.raises(SandboxApiError) as ei:
            c.pull_image(f"{reg.host}/py/missing:v1")
        assert ei.value.status == 404 and ei.value.code == "image_not_found"

    async def run():
        calls = []

        async def progress(job):
            calls.append(job["status"])

        async with SandboxClient(sbx.url) as ac:
            img = await ac.pull_image(f"{reg.host}/py/img:v1", on_progress=progress)
        return img, calls

    img, calls = asyncio.run(run())
    assert img["digest"] == desc["digest"] and calls[-1] == "done"


def test_sandbox_runs_on_a_pulled_image(make_sandboxd, registries, workdir):
    """End to end: push, pull, create a sandbox from the reference, run the image's own
    binary (a static busybox), see the image's files and none of the host's /usr."""
    reg = registries()
    lay = Layout(os.path.join(workdir, "bb"))
    bb = open("/bin/busybox", "rb").read()
    desc = lay.image([
        [("bin", "dir"), ("bin/busybox", ("exec", bb)), ("bin/sh", ("link", "busybox")),
         ("etc", "dir"), ("etc/os-release", b"ID=pulled\n")],
        [("etc", "dir"), ("etc/.wh.os-release", b""), ("etc/motd", b"from layer 2\n")],
    ], compress=True)
    lay.tag(desc, "v1")
    reg.push(lay.path, "v1", "bb/img:v1")
    sbx = make_sandboxd(["--registry-http", reg.host]).start()
    job, _ = pull(sbx, f"{reg.host}/bb/img:v1")
    box = sbx.create("pulled", image=f"{reg.host}/bb/img:v1")
    assert desc["digest"] in box["image"], box["image"]
    out = sbx.run("pulled", "/bin/busybox", ["sh", "-c",
                  "cat /etc/motd; test -e /etc/os-release && echo os; test -e /usr/bin/python3 && echo hostusr; echo end"])
    assert out["stdout"] == "from layer 2\nend\n", out
    sbx.ok("DELETE", "/v1/sandboxes/pulled", status=(200, 204))


def test_rebuno_dev_passes_the_registry_settings(make_kernel, registries, workdir):
    """sandbox_registry_http / _auth / _ca are `rebuno dev` settings for its sandboxd."""
    import time
    from conftest import free_port
    reg = registries(token=True)
    ts = reg.token
    lay, desc = simple_layout(os.path.join(workdir, "img"))
    reg.push(lay.path, "v1", "dev/img:v1", creds=f"{ts.user}:{ts.password}")
    auth = write_auth(workdir, reg.host, ts.user, ts.password)
    port = free_port()
    k = make_kernel(args=["--sandboxes", "on", "--sandbox-listen", f"127.0.0.1:{port}",
                          "--sandbox-registry-http", reg.host,
                          "--sandbox-registry-auth", auth]).start()

    class Dev:  # enough of Sandboxd for pull()
        pass
    dev = Dev()
    dev.port = port
    from conftest import Sandboxd
    dev.request = lambda *a, **kw: Sandboxd.request(dev, *a, **kw)
    end = time.time() + 20
    while True:
        try:
            if dev.request("GET", "/v1/health")[0] == 200:
                break
        except OSError:
            pass
        assert time.time() < end, k.read_log()
        time.sleep(0.05)
    job, _ = pull(dev, f"{reg.host}/dev/img:v1")
    assert job["image"]["digest"] == desc["digest"]


@pytest.mark.parametrize("evil", ["dotdot", "absolute", "device", "hardlink_out"])
def test_pull_refuses_hostile_layers(make_sandboxd, registries, workdir, evil):
    import io
    import tarfile
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:
        ti = tarfile.TarInfo("ok")
        ti.size = 2
        t.addfile(ti, io.BytesIO(b"ok"))
        if evil == "dotdot":
            ti = tarfile.TarInfo("a/../../escape")
            ti.size = 1
            t.addfile(ti, io.BytesIO(b"x"))
        elif evil == "absolute":
            ti = tarfile.TarInfo("/etc/evil")
            ti.size = 1
            t.addfile(ti, io.BytesIO(b"x"))
        elif evil == "device":
            ti = tarfile.TarInfo("dev-sda")
            ti.type = tarfile.BLKTYPE
            ti.devmajor, ti.devminor = 8, 0
            t.addfile(ti)
        else:
            ti = tarfile.TarInfo("link")
            ti.type = tarfile.LNKTYPE
            ti.linkname = "../../etc/shadow"
            t.addfile(ti)
    reg = registries()
    lay = Layout(os.path.join(workdir, evil))
    lay.tag(lay.image([out.getvalue()]), "v1")
    reg.push(lay.path, "v1", f"evil/{evil.replace('_', '-')}:v1")
    sbx = make_sandboxd(["--registry-http", reg.host]).start()
    job, _ = pull(sbx, f"{reg.host}/evil/{evil.replace('_', '-')}:v1", expect="error")
    err = job["error"]
    assert err["code"] == "invalid_image" and err["status"] == 502, err
    assert reg.host in err["message"]
    assert sbx.ok("GET", "/v1/images")["images"] == []
    assert not os.path.exists(os.path.join(workdir, "escape"))
    store = os.path.join(sbx.state, "store", "layers")
    assert [n for n in os.listdir(store) if not n.startswith(".")] == []


def test_blob_redirects_are_followed_without_the_token(make_sandboxd, workdir):
    from registry_fixture import RedirectingRegistry
    lay, desc = simple_layout(os.path.join(workdir, "img"), size=10000)
    fake = RedirectingRegistry(lay.path)
    try:
        sbx = make_sandboxd(["--registry-http", fake.host]).start()
        job, _ = pull(sbx, f"{fake.host}/r/x:v1")
        assert job["image"]["digest"] == desc["digest"]
        assert len(fake.blob_auth) == 3  # config + 2 layers, each from the blob server
        assert fake.blob_auth == [""] * 3, "the registry's token followed a redirect"
        assert f"Bearer {fake.TOKEN}" in fake.registry_auth
    finally:
        fake.stop()


@pytest.mark.parametrize("case", ["too_big", "schema1", "not_json", "unknown_layer_type"])
def test_pull_refuses_bad_manifests(make_sandboxd, fakes, case):
    oci = "application/vnd.oci.image.manifest.v1+json"
    cfg = {"mediaType": "application/vnd.oci.image.config.v1+json",
           "digest": "sha256:" + "b" * 64, "size": 10}
    if case == "too_big":
        body = json.dumps({"schemaVersion": 2, "mediaType": oci, "config": cfg, "layers": [],
                           "annotations": {"pad": "x" * (5 << 20)}}).encode()
        ct, code = oci, "registry_error"
    elif case == "schema1":
        body = json.dumps({"schemaVersion": 1, "name": "x/y", "tag": "z", "fsLayers": []}).encode()
        ct, code = "application/vnd.docker.distribution.manifest.v1+prettyjws", None
    elif case == "not_json":
        body, ct, code = b"<html>hello</html>", "text/html", None
    else:
        layer = {"mediaType": "application/x-not-a-layer",
                 "digest": "sha256:" + "c" * 64, "size": 10}
        body = json.dumps({"schemaVersion": 2, "mediaType": oci, "config": cfg,
                           "layers": [layer]}).encode()
        ct, code = oci, "invalid_image"
    fake = fakes(("manifest", body, ct))
    sbx = make_sandboxd(["--registry-http", fake.host]).start()
    job, _ = pull(sbx, f"{fake.host}/x/y:z", expect="error")
    err = job["error"]
    assert err["status"] == 502, err
    if code:
        assert err["code"] == code, err
    assert fake.host in err["message"], err
    assert not any("/blobs/" in p for p in fake.requests)  # nothing fetched after it
