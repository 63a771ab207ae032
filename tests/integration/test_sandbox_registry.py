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
        path = os.path.join(blob_store(sbx), layer["digest"][7:])
        assert os.path.getsize(path) == layer["size"]
        assert subprocess.run(["sha256sum", path], capture_output=True,
                              text=True).stdout.split()[0] == layer["digest"][7:]
    assert job["bytes_done"] == job["bytes_total"] > 300000
    assert job["image"] and job["error"] is None
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
