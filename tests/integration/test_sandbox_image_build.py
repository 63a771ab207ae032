"""Image builds from a recipe (issue 14): POST /v1/images {"type": "build"} over a base
image imported from an OCI layout (busybox-static, oci_fixtures.py): RUN in a sandbox of
the daemon, COPY from a context folder, ENV, WORKDIR, USER; the result is an image like
any other (layers, config, digest) and a sandbox made from it sees the result. A step
already built reuses its layer; a deleted file becomes a whiteout; a failing RUN ends the
build with its exit code and output tail and no image; COPY never leaves its context.
"""
import io
import json
import os
import tarfile
import time
import urllib.parse

import pytest

from oci_fixtures import Layout, base_layer


def quote(ref):
    return urllib.parse.quote(ref, safe="")


def base_image(d, tmp):
    src = os.path.join(tmp, "base-layout")
    lay = Layout(src)
    lay.add(lay.image([(base_layer([("data", "d", None), ("data/old", "f", "old\n")]),
                        "gzip")], {"Env": ["PATH=/bin"]}), ref_name="v1")
    st, img = d.request("POST", "/v1/images",
                        {"type": "oci-layout", "path": src, "ref": "example.test/base:v1"})
    assert st == 201, img
    return img


def build(d, recipe, context=None, ref=None, expect="done"):
    body = {"type": "build", "recipe": recipe}
    if context:
        body["context"] = context
    if ref:
        body["ref"] = ref
    st, job = d.request("POST", "/v1/images", body)
    assert st == 202, job
    assert job["type"] == "build" and job["status"] == "building"
    deadline = time.time() + 120
    while job["status"] == "building":
        assert time.time() < deadline, job
        time.sleep(0.1)
        job = d.ok("GET", "/v1/images/builds/" + job["id"])
    assert job["status"] == expect, json.dumps(job, indent=1)
    return job


def sse(d, path):
    """The events of a stream that ends: [(event, data)]."""
    st, raw = d.request("GET", path)
    assert st == 200, raw
    events, ev, data = [], None, []
    for line in raw.decode().split("\n"):
        if line.startswith("event: "):
            ev = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and ev:
            events.append((ev, "\n".join(data)))
            ev, data = None, []
    return events


def test_build_run_copy_env_workdir_user_then_a_sandbox_sees_it(make_sandboxd, tmpdir_path):
    d = make_sandboxd().start()
    base = base_image(d, tmpdir_path)
    ctx = os.path.join(tmpdir_path, "ctx")
    os.makedirs(os.path.join(ctx, "app", "sub"))
    with open(os.path.join(ctx, "app", "main.txt"), "w") as f:
        f.write("main\n")
    with open(os.path.join(ctx, "app", "sub", "deep.txt"), "w") as f:
        f.write("deep\n")
    with open(os.path.join(ctx, "one.txt"), "w") as f:
        f.write("one\n")
    recipe = """# a comment
FROM example.test/base:v1
ENV GREETING=hello WHO="the world"
RUN echo "$GREETING $WHO" > /greeting && \\
    rm /data/old && mkdir -m 777 /pub
COPY app /srv/app
COPY one.txt /srv/
WORKDIR /srv/app
RUN ["sh", "-c", "pwd > here; id -u >> here"]
USER app
RUN id -u > /pub/uid
"""
    job = build(d, recipe, ctx, ref="example.test/built:v1")
    assert [s["status"] for s in job["steps"]] == ["done"] * 9, job["steps"]
    assert job["steps"][3]["layer"].startswith("sha256:")
    img = job["image"]
    assert img["references"] == ["example.test/built:v1"]
    assert img["source"]["type"] == "build"
    assert len(img["layers"]) == 1 + 5, "\n".join(job["log"])  # base, RUN, COPY, COPY, RUN, RUN
    assert img["layers"][0] == base["layers"][0]
    assert img["config"]["workdir"] == "/srv/app" and img["config"]["user"] == "app"
    assert "GREETING=hello" in img["config"]["env"] and "WHO=the world" in img["config"]["env"]
    assert any("STEP 3/9: RUN" in l for l in job["log"]), job["log"]
    assert d.ok("GET", "/v1/images/" + quote("example.test/built:v1"))["digest"] == img["digest"]
    # no sandbox of the build is left, and the image of the steps in between is not listed
    assert d.ok("GET", "/v1/sandboxes")["sandboxes"] == []
    digests = [i["digest"] for i in d.ok("GET", "/v1/images")["images"]]
    assert sorted(digests) == sorted([base["digest"], img["digest"]]), digests

    s = d.create("from-build", image="example.test/built:v1")
    assert s["image"] == "example.test/built@" + img["digest"]
    r = d.run("from-build", "sh", ["-c",
              "cat /greeting; test -e /data/old || echo old-gone; cat /srv/app/main.txt "
              "/srv/app/sub/deep.txt /srv/one.txt /srv/app/here; pwd; id -u; echo $WHO; "
              "cat /pub/uid; ls -ld /srv/app/main.txt | cut -c1-10; stat -c %u /srv/one.txt"])
    assert r["exit_code"] == 0, r
    assert r["stdout"] == ("hello the world\nold-gone\nmain\ndeep\none\n/srv/app\n0\n"
                           "/srv/app\n1000\nthe world\n1000\n-rw-r--r--\n0\n"), r

    # the same recipe again: every RUN is cached, COPY layers are there already; same image
    again = build(d, recipe, ctx, ref="example.test/built:v2")
    assert again["image"]["digest"] == img["digest"]
    # its size: the base's plus each layer tar the build added, the same when cached
    assert img["size_bytes"] > base["size_bytes"] + 1024
    assert again["image"]["size_bytes"] == img["size_bytes"]
    runs = [s for s in again["steps"] if s["instruction"].startswith(("RUN", "COPY"))]
    assert all(s.get("cached") for s in runs), again["steps"]
    assert sum("(cached)" in l for l in again["log"]) == 3, again["log"]
    # a change in the context makes that COPY new, and the steps after it run again
    with open(os.path.join(ctx, "one.txt"), "w") as f:
        f.write("two\n")
    third = build(d, recipe, ctx)
    assert not third["steps"][5].get("cached") and not third["steps"][7].get("cached")
    assert third["steps"][3].get("cached")
    assert third["image"]["digest"] != img["digest"]


def test_a_deleted_file_is_a_whiteout_in_its_layer(make_sandboxd, tmpdir_path):
    d = make_sandboxd().start()
    base_image(d, tmpdir_path)
    job = build(d, "FROM example.test/base:v1\nRUN rm /data/old && rm -r /home/app\n")
    layer = job["image"]["layers"][-1]
    cands = [os.path.join(r, layer.split(":")[1]) for r, _, _ in os.walk(d.state)
             if r.endswith("/layers")]
    path = next(p for p in cands if os.path.isdir(p))
    st = os.lstat(os.path.join(path, "data", "old"))  # an overlayfs whiteout: 0/0 char dev
    import stat as S
    assert S.S_ISCHR(st.st_mode) and st.st_rdev == 0
    assert S.S_ISCHR(os.lstat(os.path.join(path, "home", "app")).st_mode)
    d.create("wh", image=job["image"]["digest"])
    r = d.run("wh", "sh", ["-c", "ls /data; test -e /home/app || echo gone"])
    assert r["stdout"] == "gone\n", r


def test_a_failing_run_ends_the_build_with_its_exit_code_and_output(make_sandboxd, tmpdir_path):
    d = make_sandboxd().start()
    base_image(d, tmpdir_path)
    before = d.ok("GET", "/v1/images")["images"]
    job = build(d, "FROM example.test/base:v1\nRUN echo made > /x\n"
                   "RUN echo to-stdout; echo to-stderr >&2; exit 7\nRUN echo never\n",
                ref="example.test/broken:v1", expect="failed")
    e = job["error"]
    assert e["code"] == "build_failed" and e["exit_code"] == 7 and e["field"] == "recipe", e
    assert "line 3" in e["message"] and "to-stderr" in e["message"], e
    assert [s["status"] for s in job["steps"]] == ["done", "done", "failed", "pending"]
    assert job["image"] is None
    assert d.ok("GET", "/v1/images")["images"] == before
    st, _ = d.request("GET", "/v1/images/" + quote("example.test/broken:v1"))
    assert st == 404
    assert d.ok("GET", "/v1/sandboxes")["sandboxes"] == []


def test_copy_never_leaves_its_context_and_bad_recipes_are_400(make_sandboxd, tmpdir_path):
    d = make_sandboxd().start()
    base_image(d, tmpdir_path)
    ctx = os.path.join(tmpdir_path, "ctx")
    os.makedirs(ctx)
    os.symlink("/etc", os.path.join(ctx, "etc-link"))
    with open(os.path.join(ctx, "ok"), "w") as f:
        f.write("ok\n")
    for src in ("../ctx/ok", "/etc/passwd", "etc-link/passwd", "etc-link", "missing"):
        job = build(d, f"FROM example.test/base:v1\nCOPY {src} /x\n", ctx, expect="failed")
        assert job["error"]["status"] == 400 and job["error"]["field"] == "recipe", job
        assert src.split("/")[0] in job["error"]["message"] or "context" in job["error"]["message"]
    for recipe, word in (("RUN echo\n", "FROM"), ("FROM example.test/base:v1\nADD x y\n", "ADD"),
                         ("FROM example.test/base:v1\nCOPY --chown=1 a b\n", "flags"),
                         ("FROM example.test/nope:v1\n", "nope"),
                         ("FROM host\nRUN true\n", "host"),
                         ("FROM example.test/base:v1\nWORKDIR /../..\n", None)):
        st, out = d.request("POST", "/v1/images", {"type": "build", "recipe": recipe,
                                                   "context": ctx})
        if word is None:  # refused when the step runs
            assert st == 202
            continue
        assert st in (400, 404), out
        assert word in out["error"]["message"], out
    st, out = d.request("POST", "/v1/images", {"type": "build", "recipe": "FROM scratch\n",
                                               "context": "relative/dir"})
    assert st == 400 and out["error"]["field"] == "context", out
    st, out = d.request("POST", "/v1/images", {"type": "build", "recipe": "x" * (300 << 10)})
    assert st == 400 and out["error"]["field"] == "recipe", out
    # FROM scratch with COPY only: an image of that one file
    job = build(d, "FROM scratch\nCOPY ok /ok\n", ctx)
    assert len(job["image"]["layers"]) == 1


def test_build_stream_sends_log_lines_then_done(make_sandboxd, tmpdir_path):
    d = make_sandboxd().start()
    base_image(d, tmpdir_path)
    st, job = d.request("POST", "/v1/images", {"type": "build",
                                               "recipe": "FROM example.test/base:v1\n"
                                                         "RUN echo streamed-line\n"})
    assert st == 202
    events = sse(d, "/v1/images/builds/" + job["id"] + "/stream")
    names = [e for e, _ in events]
    assert names[0] == "progress" and names[-1] == "done", names
    lines = [json.loads(data)["line"] for e, data in events if e == "log"]
    assert "streamed-line" in lines, lines
    assert json.loads(events[-1][1])["image"]["digest"].startswith("sha256:")


def test_cli_image_build(make_sandboxd, tmpdir_path):
    import subprocess
    from conftest import BIN
    d = make_sandboxd().start()
    base_image(d, tmpdir_path)
    ctx = os.path.join(tmpdir_path, "cli-ctx")
    os.makedirs(ctx)
    with open(os.path.join(ctx, "f"), "w") as f:
        f.write("from-cli\n")
    recipe = os.path.join(tmpdir_path, "Recipe")
    with open(recipe, "w") as f:
        f.write("FROM example.test/base:v1\nCOPY f /f\nRUN echo step-output; cat /f > /g\n")
    env = dict(os.environ, REBUNO_SANDBOX_URL=d.url)
    p = subprocess.run([BIN, "sandbox", "image", "build", "-f", recipe, ctx, "--ref",
                        "example.test/cli:v1"], capture_output=True, env=env, timeout=120)
    assert p.returncode == 0, p
    digest = p.stdout.decode().strip()
    assert digest.startswith("sha256:") and b"step-output" in p.stderr and b"STEP 3/3" in p.stderr
    assert d.ok("GET", "/v1/images/" + quote("example.test/cli:v1"))["digest"] == digest
    # again: every step is cached, over before the stream opens; the log is still printed
    p = subprocess.run([BIN, "sandbox", "image", "build", "-f", recipe, ctx], capture_output=True,
                       env=env, timeout=120)
    assert p.returncode == 0 and p.stdout.decode().strip() == digest, p
    assert b"(cached)" in p.stderr and b"STEP 3/3" in p.stderr, p
    with open(recipe, "w") as f:
        f.write("FROM example.test/base:v1\nRUN exit 5\n")
    p = subprocess.run([BIN, "sandbox", "image", "build", "-f", recipe, "--json"],
                       capture_output=True, env=env, timeout=120)
    assert p.returncode != 0
    e = json.loads(p.stdout or p.stderr)
    assert e["error"]["code"] == "build_failed", e
    p = subprocess.run([BIN, "sandbox", "image", "build", ctx], capture_output=True, env=env)
    assert p.returncode == 2 and b"-f RECIPE" in p.stderr, p


def test_a_build_interrupted_by_a_stop_leaves_nothing(make_sandboxd, tmpdir_path):
    d = make_sandboxd().start()
    base = base_image(d, tmpdir_path)
    st, job = d.request("POST", "/v1/images", {"type": "build", "ref": "example.test/cut:v1",
                                               "recipe": "FROM example.test/base:v1\n"
                                                         "RUN echo a > /a\nRUN sleep 60\n"})
    assert st == 202
    deadline = time.time() + 60
    while not any(s["name"].startswith("build-") and s["name"].endswith("-3")
                  for s in d.ok("GET", "/v1/sandboxes")["sandboxes"]):
        assert time.time() < deadline
        time.sleep(0.1)
    assert d.stop() == 0  # the build fails (shutting down); the daemon exits cleanly
    d.start()
    assert d.ok("GET", "/v1/sandboxes")["sandboxes"] == []
    assert [i["digest"] for i in d.ok("GET", "/v1/images")["images"]] == [base["digest"]]
    st, _ = d.request("GET", "/v1/images/" + quote("example.test/cut:v1"))
    assert st == 404
    st, _ = d.request("GET", "/v1/images/builds/" + job["id"])
    assert st == 404  # jobs live in memory
    # the first RUN's layer is still cached
    again = build(d, "FROM example.test/base:v1\nRUN echo a > /a\n")
    assert again["steps"][1].get("cached"), again


def test_run_sandboxes_take_the_builds_network_policy(make_sandboxd, tmpdir_path):
    d = make_sandboxd().start()
    base_image(d, tmpdir_path)
    st, job = d.request("POST", "/v1/images", {"type": "build", "network_policy": "bogus",
                                               "recipe": "FROM example.test/base:v1\nRUN true\n"})
    assert st == 202, job
    while job["status"] == "building":
        time.sleep(0.1)
        job = d.ok("GET", "/v1/images/builds/" + job["id"])
    assert job["status"] == "failed" and job["error"]["field"].startswith("network_policy"), job
    assert d.ok("GET", "/v1/sandboxes")["sandboxes"] == []
    job = build(d, "FROM example.test/base:v1\nRUN echo ok > /ok\n")  # default: deny-all
    st, job2 = d.request("POST", "/v1/images", {"type": "build", "network_policy": "allow-all",
                                                "recipe": "FROM example.test/base:v1\n"
                                                          "RUN echo net > /net\n"})
    assert st == 202
    while job2["status"] == "building":
        time.sleep(0.1)
        job2 = d.ok("GET", "/v1/images/builds/" + job2["id"])
    assert job2["status"] == "done", job2
