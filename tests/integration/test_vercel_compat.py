"""The official @vercel/sandbox SDK (npm, pinned 3.5.0) drives sandboxd's Vercel-compatible
endpoint (issue 17, docs/vercel.md), against a real sandboxd run as root.

tests/compat/vercel/ holds the pinned package.json + package-lock.json; `npm ci` installs
them (once, from the npm registry). Each test runs one case of driver.mjs, which uses the
SDK through its public `fetch` option (rebuno-vercel.mjs rewrites https://vercel.com/api to
the local endpoint) and prints what it saw; the assertions are here. Some checks go
around the SDK to the daemon's /v1 API, to see that the SDK's view is the real state.
"""
import json
import os
import shutil
import socket
import subprocess

import pytest

from conftest import free_port, npm_ci_pinned, start_with_extra_endpoint

COMPAT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compat", "vercel")


@pytest.fixture(scope="session")
def sdk():
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("node and npm are needed for the @vercel/sandbox tests (scripts/deps.sh)")
    ver = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    if tuple(int(x) for x in ver.lstrip("v").split(".")[:3]) < (20, 18, 1):
        pytest.skip(f"@vercel/sandbox 3.5.0 needs Node >= 20.18.1 (its undici); this node is {ver}")
    return npm_ci_pinned(COMPAT, "@vercel/sandbox", "3.5.0")


@pytest.fixture
def vd(make_sandboxd, sdk):
    d, d.vercel_port = start_with_extra_endpoint(make_sandboxd, "--vercel-listen")
    return d


def run_case(d, case, timeout=180):
    env = dict(os.environ, REBUNO_VERCEL_COMPAT=f"http://127.0.0.1:{d.vercel_port}",
               REBUNO_SANDBOX_TOKEN_FILE=os.path.join(d.state, "local-token"), CI="1")
    env.pop("VERCEL_OIDC_TOKEN", None)
    p = subprocess.run(["node", "driver.mjs", case], cwd=COMPAT, env=env, capture_output=True,
                       text=True, timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"case {case} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}\n" \
                                         f"{d.read_log()[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def v1_by_name(d, name):
    return d.get(name)


def test_lifecycle_create_get_list_extend_stop_resume(vd):
    r = run_case(vd, "lifecycle")
    assert r["status"] == "running" and r["persistent"] is True
    assert r["timeout"] == 120000 and r["cwd"] == "/vercel/sandbox"
    assert r["tags"] == {"suite": "vercel", "run": r["name"]}
    # argv without a shell around it: sh ran the script; env from create; cwd the session's
    assert r["run"] == {"exit": 3, "out": "hi\n/vercel/sandbox\n", "err": "oops\n"}
    assert r["got"] == {"name": r["name"], "status": "running"}
    assert r["extended"] == 60000
    assert r["listed"] == [r["name"]] and r["name"] in r["prefixed"]
    assert r["stopped"] == "stopped" and r["afterStop"] == "stopped"
    # the stopped session answered 410, the SDK resumed: a new session, the files kept
    assert r["resumedRead"] == "kept across stop"
    assert r["sid1"] != r["sid2"] and r["sid2"].endswith("_2")
    assert r["gone"]["status"] == 404
    st, _ = vd.request("GET", f"/v1/sandboxes/{r['name']}")
    assert st == 404


def test_list_pages_sessions_update(vd):
    r = run_case(vd, "paging")
    tag = r["asc"][0][:-2]
    assert r["asc"] == [f"{tag}-0", f"{tag}-1", f"{tag}-2"]
    assert r["firstPage"] == [f"{tag}-2", f"{tag}-1"] and r["next"]  # newest first
    assert r["secondPage"] == [f"{tag}-0"] and r["secondNext"] is None
    assert r["sessions"] == ["running"]
    assert r["updated"] == {"timeout": 90000, "tags": {"page": tag, "updated": "yes"}}


def test_ndjson_stream_of_a_long_command(vd):
    r = run_case(vd, "stream")
    assert r["type"] == "application/x-ndjson"  # exactly: the SDK compares with !==
    assert r["ascii"], "the stream must be ASCII-only JSON"
    lines = r["lines"]
    assert lines[0]["command"]["exitCode"] is None
    # "first" arrived while the command was still waiting for the test to write /tmp/go
    logs = [(l["stream"], l["data"]) for l in lines[1:-1]]
    assert ("stdout", "first\n") in logs and ("stdout", "snow \u2603 done\n") in logs
    assert ("stderr", "e\n") in logs
    assert lines[-1]["command"]["exitCode"] == 0 and "durationMs" in lines[-1]["command"]
    assert r["sdk"] == {"exit": 0, "out": "line1\nline2\nline3\n", "seen": "line1\nline2\nline3\n"}


def test_detached_command_reattached_after_reconnect(vd):
    r = run_case(vd, "detached")
    assert r["exitCodeAtStart"] is None
    assert "one\ntwo\n" in r["first"]
    assert r["replay"].replace("stdout:", "") == "one\ntwo\nthree\n"  # replayed from the start
    assert r["exit"] == 7 and r["out"] == "one\ntwo\nthree\n"
    assert r["offsetType"] == "application/x-ndjson" and r["fromOffset"] == "three\n"


def test_kill_and_missing_program(vd):
    r = run_case(vd, "kill")
    assert r["term"] == 128 + 15 and r["kill"] == 128 + 9
    assert r["missing"]["exit"] == 127 and "no-such-program-here" in r["missing"]["err"]
    assert r["timedOut"] == 128 + 9  # timeoutMs: SIGKILL to the command's group


def test_files_tar_uploads_reads_mkdir(vd):
    r = run_case(vd, "files")
    assert r["same"] and r["size"] == 10240  # binary bytes through gzip'd tar, intact
    assert r["run"]["out"] == "ran\n" and r["mode"] == "755 root"  # the entry's mode kept
    assert r["long"] == "deep"  # PAX long names
    assert r["missing"] is None  # 404 -> null
    assert r["mkdir"] == 0
    assert r["mkdirAgain"]["status"] == 409
    assert r["mkdirDeep"]["status"] == 404  # not recursive, as the SDK asks
    assert r["escape"]  # ../../.. stays inside the sandbox's root
    assert r["facade"] == {"read": "via the facade", "listed": True, "size": 14, "moved": True,
                           "removed": True}


def test_users_create_as_user_sudo(vd):
    r = run_case(vd, "users")
    assert r["def"] == {"username": "root", "group": "root"}
    assert r["who"]["out"] == "alice\n" and r["home"]["out"] == "/home/alice\n"
    assert r["sudo"]["out"] == "0\n" and r["root"]["out"] == "root\n"
    assert r["again"]["name"] == "SandboxUserAlreadyExistsError"


def test_fork_inherits_configuration(vd):
    r = run_case(vd, "fork")
    assert r["vcpus"] == 2 and r["timeout"] == 90000 and r["tags"] == {"kind": "parent"}
    assert r["env"] == "parent" and r["file"] == "parent data"
    assert r["parentFile"] == "parent data"  # the fork's writes stay its own
    s = vd.get(r["name"])
    assert s["source"]["type"] == "fork" and s["resources"]["vcpus"] == 2


def test_snapshot_never_stops_and_create_from_it(vd):
    r = run_case(vd, "snapshot")
    assert r["rawStatus"] == 200 and r["sandboxStopped"] is False and "never stop" in r["note"]
    assert r["sessionStatus"] == "running" and r["statusAfter"] == "running" and r["sameSession"]
    assert r["stillRuns"] == "in the snapshot"
    assert r["restored"] == "in the snapshot" and r["sourceSnapshotId"] == r["snapId"]
    assert r["get"] == {"status": 200, "id": r["snapId"], "state": "created"} and r["listed"]
    assert r["deleted"] == "deleted" and r["createMissing"]["status"] == 404


def test_resources_vcpus_memory(vd):
    r = run_case(vd, "resources")
    assert r["vcpus"] == 2 and r["memory"] == 4096  # 2 GiB per vCPU, as Vercel's
    assert r["updated"] == 1
    assert r["bad"]["status"] == 400


def test_ports_routes_are_loopback_urls(vd):
    r = run_case(vd, "ports")
    (route,) = r["routes"]
    assert route["port"] == 3000 and route["url"].startswith("http://127.0.0.1:")


def test_image_default_and_digest(vd, tmp_path):
    tree = tmp_path / "img"
    (tree / "app").mkdir(parents=True)
    (tree / "etc").mkdir()
    (tree / "app" / "hello.txt").write_text("from the image\n")
    img = vd.ok("POST", "/v1/images", {"type": "dir", "path": str(tree)}, status=(200, 201))
    digest = img["digest"]
    os.environ["IMAGE_DIGEST"] = digest
    try:
        r = run_case(vd, "image")
    finally:
        del os.environ["IMAGE_DIGEST"]
    # "default" is the image tagged docker.io/rebuno/default:latest, else the built-in host
    assert r["image"] == "host"
    assert r["unknown"]["status"] == 404 and r["unknown"]["code"] == "image_not_found"
    assert r["absent"]["status"] == 404 and r["absent"]["code"] == "image_not_found"
    assert r["bad"]["status"] == 400
    # the sandbox reports the digest it was pinned to, has the image's files, and so do forks
    assert r["pinned"] == digest and r["forkImage"] == digest
    assert r["fromImage"] == "from the image\n"


def test_interactive_pty_over_the_cli_websocket(vd):
    r = run_case(vd, "interactive")
    assert r["url"].startswith("ws://HOST/v2/sandboxes/sessions/sbs_") and \
        r["url"].endswith("/interactive/ws")
    assert r["tokenLen"] == 64
    # the start frame's size, env and cwd; a resize; a real terminal; the exit frame
    assert r["firstSize"] and r["resized"] and r["envCwd"] and r["tty"]
    assert r["texts"] == [{"type": "exit", "code": 7, "signal": None}] and r["closeCode"] == 1000
    assert r["reuse"] == "refused" and r["badStart"] == "refused"
    assert r["killedOnClose"]
    # a stop ends an open terminal with its exit (killed) and a normal close
    assert r["started"] and r["stopClose"] == 1000
    assert r["stopTexts"][-1]["type"] == "exit" and r["stopTexts"][-1]["code"] == 137, r["stopTexts"]


def test_error_paths(vd):
    r = run_case(vd, "errors")
    assert r["getUnknown"]["status"] == 404
    assert r["dupName"]["status"] == 409
    assert r["stoppedSession"] == {"status": 410, "code": "session_stopped"}
    assert r["unknownSession"]["status"] == 404
    assert r["badField"] == {"status": 400, "field": "timeout"}  # the SDK's field name
    assert r["noauth"] == 401
    assert r["getOrCreate"].endswith("-goc")


def _get(port, path, headers):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path, headers=headers)
    r = c.getresponse()
    return r.status, json.loads(r.read() or b"null")


def test_dev_starts_the_endpoint_on_its_own_port(make_kernel):
    import time
    from conftest import local_auth
    port, vport = free_port(), free_port()
    k = make_kernel(args=["--sandboxes", "on", "--sandbox-listen", f"127.0.0.1:{port}",
                          "--sandbox-vercel-listen", f"127.0.0.1:{vport}"]).start()
    deadline = time.time() + 30
    while True:
        try:
            tok = local_auth(port, "sandboxd")
            if tok and _get(vport, "/v2/sandboxes?teamId=t", tok)[0] == 200:
                break
        except OSError:
            pass
        assert time.time() < deadline, k.read_log()
        time.sleep(0.05)
    st, out = _get(vport, "/v2/sandboxes?teamId=t", tok)
    assert st == 200 and out["pagination"] == {"count": 0, "next": None}
    assert _get(vport, "/v2/sandboxes", {"Authorization": "Bearer nope"})[0] == 401


def test_a_taken_port_costs_the_endpoint_not_the_service(make_sandboxd):
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        d = make_sandboxd(args=["--vercel-listen", f"127.0.0.1:{busy}"]).start()
        assert d.request("GET", "/v1/health")[0] == 200
        assert "Vercel-compatible endpoint cannot listen" in d.read_log()


def test_network_policy_header_transform_at_a_local_upstream(make_sandboxd, sdk, tmp_path):
    import base64
    from test_proxy import Upstream
    from test_sandbox_network import _make_pki
    if not shutil.which("nft"):
        pytest.skip("sandbox networking needs nft")
    token = "ghs_" + "VercelT0kenVercel" * 2
    rotated = "ghs_" + "R0tatedR0tated" * 2
    pki_dir = tmp_path / "pki"
    pki_dir.mkdir()
    pki = _make_pki(str(pki_dir))
    up = Upstream(pki)
    try:
        port = free_port()
        d = make_sandboxd(args=["--vercel-listen", f"127.0.0.1:{port}", "--upstream-ca", pki["ca.pem"],
                                "--upstream-override", f"github.example:443=127.0.0.1:{up.port}",
                                "--upstream-override", f"api.example:443=127.0.0.1:{up.port}"]).start()
        d.vercel_port = port
        os.environ["NET_TOKEN"], os.environ["NET_ROTATED"] = token, rotated
        try:
            r = run_case(d, "network")
        finally:
            del os.environ["NET_TOKEN"], os.environ["NET_ROTATED"]
        auths = [[v for k, v in q["headers"] if k.lower() == "authorization"] for q in up.requests
                 if q["path"] == "/vercel"]
        # the proxy replaced the sandbox's own header with the policy's, then the rotated one
        assert auths == [[token], [rotated]], auths
        assert "ok GET /vercel" in r["first"]["out"] and "ok GET /vercel" in r["second"]["out"]
        assert r["other"]["exit"] != 0
        assert r["denied"]["exit"] != 0 and r["deniedPolicy"] == "deny-all"
        # the SDK's view of the policy: the rule, with the value redacted
        assert r["policy"] == {"allow": {"github.example": [
            {"transform": [{"headers": {"Authorization": "<redacted>"}}]}]}}, r["policy"]
        for where in (r["inside"], r["rawGet"], json.dumps(r), d.read_log()):
            assert token not in where and rotated not in where
        assert r["subnets"]["status"] == 400
        # subnets {allow: every address}: a host not named reaches the upstream too, untouched
        assert r["domainOnly"]["exit"] != 0 and "ok GET /other" in r["anyOther"]["out"], r
        assert r["denyWins"]["exit"] != 0
        assert r["anyPolicy"] == {"allow": ["github.example"], "subnets": {"allow": ["0.0.0.0/0"]}}, \
            r["anyPolicy"]
        other = [q for q in up.requests if q["path"] == "/other"]
        assert len(other) == 1 and not [v for k, v in other[0]["headers"] if k.lower() == "authorization"]
        assert r["forward"]["status"] == 400
    finally:
        up.close()


def test_network_policy_subnets_at_local_upstreams(make_sandboxd, sdk, tmp_path):
    from test_sandbox_network import near_far_upstreams
    if not shutil.which("nft"):
        pytest.skip("sandbox networking needs nft")
    # two upstreams at two addresses; the overrides stand in for DNS, so those are the
    # addresses the proxy connects to and judges
    with near_far_upstreams(tmp_path) as (pki, near, far, overrides):
        port = free_port()
        d = make_sandboxd(args=["--vercel-listen", f"127.0.0.1:{port}", "--upstream-ca", pki["ca.pem"],
                                *overrides(near_names=["near.example", "203.0.113.7"],
                                           far_names=["far.example", "203.0.113.8"])]).start()
        d.vercel_port = port
        r = run_case(d, "subnets")
        # the SDK's view: the legacy response form its validator accepts
        assert r["created"] == {"allow": ["near.example", "far.example"],
                                "subnets": {"deny": ["127.0.0.1/32"]}}, r["created"]
        # subnets.deny wins over an allowed domain
        assert r["denyNear"]["exit"] != 0 and "ok GET /deny-far" in r["denyFar"]["out"], r
        # subnets.allow reaches a host no domain names; other addresses stay denied
        assert "ok GET /allow-far" in r["allowFar"]["out"] and r["allowNear"]["exit"] != 0, r
        # a name only a range allows is never looked up: the address dialled is judged
        assert r["farAtNear"]["exit"] != 0, r["farAtNear"]
        assert r["allowPolicy"] == {"allow": [], "subnets": {"allow": ["127.0.0.2"]}}, r["allowPolicy"]
        # ... and over an allowed range
        assert r["bothFar"]["exit"] != 0 and "ok GET /both-near" in r["bothNear"]["out"], r
        assert r["badV6"]["status"] == 400 and "subnets.allow[0]" in r["badV6"]["message"], r["badV6"]
        assert [q["path"] for q in near.requests] == ["/both-near"]
        assert [q["path"] for q in far.requests] == ["/deny-far", "/allow-far"]


def test_network_policy_per_request_rules_at_local_upstreams(make_sandboxd, sdk, tmp_path):
    """Issue 17: forwardURL, response and match rules through the official SDK (and the
    wire route for `response`, which SDK 3.5.0's types lack), at two local servers."""
    from test_proxy import Upstream
    from test_sandbox_network import _make_pki
    if not shutil.which("nft"):
        pytest.skip("sandbox networking needs nft")
    token = "ghs_" + "R0ut1ngT0ken" * 3
    pki_dir = tmp_path / "pki"
    pki_dir.mkdir()
    pki = _make_pki(str(pki_dir))
    up, fwd = Upstream(pki), Upstream()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    silent.setblocking(False)
    try:
        port = free_port()
        d = make_sandboxd(args=[
            "--vercel-listen", f"127.0.0.1:{port}", "--upstream-ca", pki["ca.pem"],
            "--upstream-override", f"api.example:443=127.0.0.1:{up.port}",
            "--upstream-override", f"fwd.example:80=127.0.0.1:{fwd.port}",
            "--upstream-override", f"only.example:443=127.0.0.1:{silent.getsockname()[1]}"]).start()
        d.vercel_port = port
        os.environ["NET_TOKEN"] = token
        try:
            r = run_case(d, "routing")
        finally:
            del os.environ["NET_TOKEN"]

        def out(k):
            body, _, code = r[k]["out"].rpartition("\n")
            return int(code), body.rstrip("\n")

        # the SDK reads its rules back from the legacy form (transform values redacted;
        # injection rules before forward rules, which changes nothing: transforms merge
        # whatever their place, and forward rules keep their order)
        assert r["policy"] == {"allow": {"api.example": [
            {"match": {"queryString": [{"key": {"exact": "tok"}, "value": {"exact": "yes"}}],
                       "headers": [{"key": {"exact": "x-want"}, "value": {"startsWith": "cred"}}]},
             "transform": [{"headers": {"Authorization": "<redacted>"}}]},
            {"match": {"path": {"startsWith": "/fwd/"}, "method": ["GET", "POST"]},
             "forwardURL": "http://fwd.example/base"}]}}, r["policy"]
        assert out("fwdGet") == (200, "ok GET /base/fwd/a?x=1 0")
        assert out("fwdPost") == (200, "ok POST /base/fwd/b 5")
        assert out("putPasses") == (200, "ok PUT /fwd/c 1")  # method not matched: the host
        assert out("cred") == (200, "ok GET /plain?tok=yes 0")
        assert out("noCred") == (200, "ok GET /plain?tok=no 0")
        auth = {q["path"]: [v for k, v in q["headers"] if k.lower() == "authorization"]
                for q in up.requests}
        assert auth == {"/fwd/c": [], "/plain?tok=yes": [token], "/plain?tok=no": []}, auth
        f = fwd.requests[0]
        assert ("vercel-forwarded-host", "api.example") in f["headers"]
        assert ("vercel-forwarded-path", "/fwd/a?x=1") in f["headers"]
        assert ("vercel-forwarded-scheme", "https") in f["headers"]

        # the response rule: answered by the proxy, neither server saw it
        assert r["update"]["status"] == 200
        assert r["update"]["policy"]["forwardRules"] == [
            {"domain": "api.example", "forwardURL": "http://fwd.example/all/"}]
        assert r["update"]["policy"]["responseRules"][0]["response"]["statusCode"] == 418
        code, teapot = out("teapot")
        assert code == 418 and teapot.startswith("HTTP/1.1 418"), teapot
        assert "X-Teapot: yes" in teapot and teapot.endswith("short and stout")
        assert out("canned") == (200, '{"canned":1}')
        assert out("all") == (200, "ok GET /all/other?q=1 0")
        paths = [q["path"] for q in up.requests + fwd.requests]
        assert not [p for p in paths if "answer" in p or "anything" in p], paths
        try:
            silent.accept()
            raise AssertionError("a response rule's domain was contacted")
        except BlockingIOError:
            pass
        assert r["view"] == {"allow": {"api.example": [{"forwardURL": "http://fwd.example/all/"}],
                                       "only.example": []}}, r["view"]
        assert r["bad"]["status"] == 400
        assert "statusCode" in r["bad"]["json"]["error"]["message"], r["bad"]
        for where in (json.dumps(r), d.read_log()):
            assert token not in where
    finally:
        up.close()
        fwd.close()
        silent.close()


def test_git_source_cloned_through_the_injected_credential(make_sandboxd, sdk, tmp_path):
    import base64
    from conftest import git_http_backend
    from test_proxy import Upstream
    from test_sandbox_network import _make_pki
    if not shutil.which("nft"):
        pytest.skip("sandbox networking needs nft")
    token = "ghs_" + "GitS0urceT0ken" * 2
    cred = "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()
    (tmp_path / "pki").mkdir()
    pki = _make_pki(str(tmp_path / "pki"))
    srv, work = tmp_path / "srv", tmp_path / "work"
    srv.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    (work / "README.md").write_text("cloned through the proxy\n")
    subprocess.run([*git, "-C", str(work), "add", "README.md"], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-qm", "first"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(srv / "repo.git")], check=True)
    up = Upstream(pki, handler=lambda h, body: git_http_backend(h, body, str(srv), cred))
    try:
        port = free_port()
        d = make_sandboxd(args=["--vercel-listen", f"127.0.0.1:{port}", "--upstream-ca", pki["ca.pem"],
                                "--upstream-override", f"git.example:443=127.0.0.1:{up.port}"]).start()
        d.vercel_port = port
        os.environ["NET_CRED"] = cred
        try:
            r = run_case(d, "git")
        finally:
            del os.environ["NET_CRED"]
        assert r["status"] == "running"
        assert r["readme"] == "cloned through the proxy\n"  # into the session cwd
        assert r["log"].strip().endswith("first")
        assert token not in r["config"] and "Basic" not in r["config"]
        assert r["bad"]["status"] == 400
        assert r["failed"]["status"] == 400 and r["failed"]["code"] == "source_failed"
        assert token not in d.read_log()
    finally:
        up.close()


def test_tarball_source_by_url_from_a_local_server(vd, tmp_path):
    import gzip
    import http.server
    import io
    import tarfile
    import threading

    def tar_of(members, gz=False):
        b = io.BytesIO()
        with tarfile.open(fileobj=b, mode="w:gz" if gz else "w") as t:
            for name, data, kind in members:
                ti = tarfile.TarInfo(name)
                if kind == "link":
                    ti.type, ti.linkname = tarfile.SYMTYPE, data
                    t.addfile(ti)
                else:
                    ti.size = len(data)
                    t.addfile(ti, io.BytesIO(data))
        return b.getvalue()

    binary = bytes(range(256)) * 40
    files = {
        "/good.tar.gz": tar_of([("hello.txt", b"hello from a tarball\n", "file"),
                                ("dir/bin.dat", binary, "file"),
                                ("plain/p.txt", b"plain\n", "file")], gz=True),
        "/plain.tar": tar_of([("plain/p.txt", b"not compressed\n", "file")]),
        "/dotdot.tar": tar_of([("ok.txt", b"x", "file"), ("../../escape.txt", b"out", "file")]),
        "/junk.tar.gz": gzip.compress(b"this is no tar archive" * 50),
        # a link out of the tree, then a file through it
        "/linkout.tar": tar_of([("out", "/tmp", "link"), ("out/evil", b"evil", "file")]),
    }
    got = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            got.append(self.path)
            body = files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    os.environ["TARBALL_BASE"] = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        r = run_case(vd, "tarball")
    finally:
        del os.environ["TARBALL_BASE"]
        srv.shutdown()
    assert r["status"] == "running" and r["hello"] == "hello from a tarball\n"
    assert r["bin"] == list(range(8)) + [len(binary)]
    assert r["plain"] == "plain\n" and r["plainTar"] == "not compressed\n"
    for k in ("dotdot", "missing", "notTar", "linkout"):
        assert r[k]["status"] == 400 and r[k]["code"] == "source_failed", (k, r[k])
    assert "escape" in r["dotdot"]["message"] or ".." in r["dotdot"]["message"], r["dotdot"]
    assert r["scheme"]["status"] == 400 and "file:///etc/passwd" not in got
    assert r["left"] == 0  # a failed source leaves no sandbox
    assert "404" in r["missing"]["message"]
    assert not os.path.exists("/escape.txt")
    assert not os.path.exists("/tmp/evil") or open("/tmp/evil").read() != "evil"
    # the fetched files are gone from sandboxd's state once the sources are over
    assert os.listdir(os.path.join(vd.state, "vercel-tarballs")) == []


def test_drives_and_mounts(vd):
    r = run_case(vd, "drives")
    assert r["sameId"] and r["listed"] == [r["name"]] and r["max"] == 64 << 20
    assert r["mounts"] == {"/data": {"drive": r["name"], "mode": "read-write"}}
    assert r["busy"]["status"] == 409 and r["busy"]["code"] == "drive_attached"
    assert r["read"] == "on the drive"  # committed when the writer stopped
    assert r["roWrite"] != 0  # a snapshot mount is read-only
    assert r["gone"] == 0
    assert r["badMode"]["status"] == 400


def test_hostile_input_gets_4xx_naming_the_field(vd):
    """Raw requests, not the SDK: what a hostile client can send."""
    import gzip
    import http.client
    import io
    import tarfile
    from conftest import local_auth
    tok = local_auth(vd.port, "sandboxd")

    def req(method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", vd.vercel_port, timeout=60)
        h = {"Content-Type": "application/json", **tok, **(headers or {})}
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        raw = r.read()
        ctype = r.getheader("Content-Type", "")
        c.close()
        return r.status, (json.loads(raw) if raw and ctype.startswith("application/json") else raw), ctype

    st, out, _ = req("POST", "/v3/sandboxes", {"name": "hostile", "timeout": 60000})
    assert st == 200, out
    sid = out["session"]["id"]
    base = f"/v2/sandboxes/sessions/{sid}"
    cases = [
        ("POST", "/v3/sandboxes", b"{not json", 400, None),
        ("POST", "/v3/sandboxes", b"[1,2]", 400, "body"),
        ("POST", "/v3/sandboxes", {"name": "../../etc"}, 400, "name"),
        ("POST", "/v3/sandboxes", {"env": {"A": 1}}, 400, "env"),
        ("POST", "/v3/sandboxes", {"tags": "x"}, 400, "tags"),
        ("POST", "/v3/sandboxes", {"resources": 3}, 400, "resources"),
        ("POST", "/v3/sandboxes", {"networkPolicy": {"mode": "open"}}, 400, "networkPolicy.mode"),
        ("POST", "/v3/sandboxes", {"source": {"type": "tarball", "url": "ftp://x/y.tgz"}}, 400, "source.url"),
        ("POST", "/v3/sandboxes", {"source": {"type": "tarball", "url": "http://x/a b"}}, 400, "source.url"),
        ("POST", "/v3/sandboxes", {"source": {"type": "zip", "url": "http://x/y.zip"}}, 400, "source.type"),
        ("POST", "/v3/sandboxes", {"mounts": {"/etc": {"drive": "nope"}}}, 400, "mounts"),
        ("POST", "/v3/sandboxes", b"{" + b'"a":"' + b"x" * (2 << 20) + b'"}', 413, "body"),
        ("POST", f"{base}/cmd", {"command": 5}, 400, "command"),
        ("POST", f"{base}/cmd", {"command": "ls", "args": "-la"}, 400, "args"),
        ("POST", f"{base}/cmd", {"command": "ls", "cwd": "x" * 5000}, 400, "cwd"),
        ("POST", f"{base}/cmd", {"command": "sudo", "args": ["-u", "../../root", "--", "id"]}, None, None),
        ("POST", f"{base}/fs/read", {"path": "a\u0000b"}, 400, None),  # refused as JSON
        ("POST", f"{base}/fs/read", {}, 400, "path"),
        ("POST", f"{base}/fs/mkdir", {"path": 7}, 400, "path"),
        ("POST", f"{base}/fs/write", b"plain text, not gzip", 400, "body"),
        ("POST", f"{base}/extend-timeout", {"duration": -5}, 400, "duration"),
        ("POST", f"{base}/cmd/nope/kill", {"signal": 99}, 404, None),
        ("GET", f"{base}/cmd/nope/logs?stdoutOffset=-1", None, 404, None),
        ("GET", "/v2/sandboxes?limit=100000", None, 400, "limit"),
        ("GET", "/v2/sandboxes?tags=novalue", None, 400, "tags"),
        ("GET", "/v2/sandboxes/sessions/sbs_x_999999999999999999999/cmd/x", None, 404, None),
        ("POST", "/v2/sandboxes/drives/..%2F..", {}, 400, "name"),
    ]
    for method, path, body, status, field in cases:
        st, out, _ = req(method, path, body)
        if status is None:  # a user that does not exist: 4xx, never a command as someone else
            assert 400 <= st < 500, (path, body, st, out)
            continue
        assert st == status, (method, path, str(body)[:80], st, out)
        assert isinstance(out, dict) and out["error"]["code"], out
        if field:
            assert out["error"].get("field", "").startswith(field), (path, body, out)
    # a tar that tries to leave: its names stay inside the sandbox's root (tar runs inside)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in (("../../../../escape.txt", b"x"), ("/abs.txt", b"y")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    st, out, _ = req("POST", f"{base}/fs/write", gzip.compress(buf.getvalue()),
                     {"Content-Type": "application/gzip", "x-cwd": "/tmp/../tmp"})
    assert st in (200, 400), (st, out)
    assert not os.path.exists("/escape.txt") and not os.path.exists("/tmp/escape.txt")
    st, out, _ = req("POST", f"{base}/fs/read", {"path": "/proc/../../../../etc/hostname"})
    assert st == 200 and out.strip() != open("/etc/hostname", "rb").read().strip() or st == 404
