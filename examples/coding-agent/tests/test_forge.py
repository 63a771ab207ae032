"""forge.py: git over HTTPS with a token, the pull-request API, input checks, TLS material."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import forge as forge_py
import pytest
from conftest import EXAMPLE, PYTHON, SAMPLE, TOKEN, Forge, basic_auth, git_env, start_server


def new_repo(forge: Forge) -> str:
    """A fresh copy of the sample repository on the forge; returns owner/name."""
    return forge.new_repo()


def clone(forge: Forge, spec: str, tmp: Path) -> Path:
    """Clone spec with the token; set a commit identity."""
    dest = tmp / spec.replace("/", "_")
    forge.git("clone", "-q", f"{forge.url}/{spec}.git", str(dest))
    forge.git("config", "user.name", "test", cwd=dest)
    forge.git("config", "user.email", "test@example.invalid", cwd=dest)
    return dest


def commit(forge: Forge, repo: Path, name: str, text: str) -> str:
    """Write a file, commit it, return the commit id."""
    (repo / name).write_text(text)
    forge.git("add", name, cwd=repo)
    forge.git("commit", "-q", "-m", f"change {name}", cwd=repo)
    return forge.git("rev-parse", "HEAD", cwd=repo).stdout.strip()


def push_branch(forge: Forge, spec: str, branch: str, tmp: Path) -> str:
    """Clone, commit on ``branch``, push it; returns the pushed commit id."""
    repo = clone(forge, spec, tmp)
    forge.git("checkout", "-q", "-b", branch, cwd=repo)
    sha = commit(forge, repo, "NOTES.md", f"notes for {branch}\n")
    forge.git("push", "-q", "origin", branch, cwd=repo)
    return sha


def test_clone_commit_push_and_branches_api(forge: Forge, tmp_path: Path) -> None:
    spec = new_repo(forge)
    repo = clone(forge, spec, tmp_path)
    assert (repo / "calc.py").read_text() == (SAMPLE / "calc.py").read_text()
    assert forge.git("log", "--format=%s", cwd=repo).stdout.split("\n")[0] == "Initial commit"
    forge.git("checkout", "-q", "-b", "rebuno/fix-tests", cwd=repo)
    sha = commit(forge, repo, "calc.py", (SAMPLE / "calc.py").read_text().replace("//", "/"))
    push = forge.git("push", "origin", "rebuno/fix-tests", cwd=repo)
    assert "rebuno/fix-tests -> rebuno/fix-tests" in push.stderr

    status, info, _ = forge.request("GET", f"/api/repos/{spec}/branches/rebuno/fix-tests")
    assert status == 200 and info == {"name": "rebuno/fix-tests", "commit": {"sha": sha, "message": "change calc.py"}}
    status, info, _ = forge.request("GET", f"/api/repos/{spec}/branches/rebuno%2Ffix-tests", auth="basic")
    assert status == 200 and info["commit"]["sha"] == sha
    status, branches, _ = forge.request("GET", f"/api/repos/{spec}/branches")
    assert status == 200 and sorted(b["name"] for b in branches) == ["main", "rebuno/fix-tests"]
    status, repo_info, _ = forge.request("GET", f"/api/repos/{spec}")
    assert status == 200 and repo_info["default_branch"] == "main"
    assert forge.request("GET", f"/api/repos/{spec}/branches/nope")[0] == 404

    # a second clone (fetch over protocol v2) sees the pushed branch
    other = tmp_path / "other"
    forge.git("clone", "-q", "-b", "rebuno/fix-tests", f"{forge.url}/{spec}", str(other))
    assert forge.git("rev-parse", "HEAD", cwd=other).stdout.strip() == sha


def test_large_push_uses_chunked_body(forge: Forge, tmp_path: Path) -> None:
    """git sends request bodies over http.postBuffer (1 MiB) with Transfer-Encoding: chunked."""
    spec = new_repo(forge)
    repo = clone(forge, spec, tmp_path)
    forge.git("checkout", "-q", "-b", "big", cwd=repo)
    (repo / "blob.bin").write_bytes(os.urandom(1536 * 1024))  # over git's 1 MiB http.postBuffer
    forge.git("add", "blob.bin", cwd=repo)
    forge.git("commit", "-q", "-m", "big", cwd=repo)
    sha = forge.git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    forge.git("push", "-q", "origin", "big", cwd=repo)
    assert forge.request("GET", f"/api/repos/{spec}/branches/big")[1]["commit"]["sha"] == sha
    assert any("git-receive-pack 200" in line and "body=chunked" in line
               for line in forge.server.log_text().splitlines())


def test_default_branch_is_protected(forge: Forge, tmp_path: Path) -> None:
    spec = new_repo(forge)
    repo = clone(forge, spec, tmp_path)
    before = forge.request("GET", f"/api/repos/{spec}/branches/main")[1]["commit"]["sha"]
    commit(forge, repo, "x.txt", "x\n")
    r = forge.git("push", "origin", "main", cwd=repo, check=False)
    assert r.returncode != 0 and "protected" in r.stderr
    assert forge.request("GET", f"/api/repos/{spec}/branches/main")[1]["commit"]["sha"] == before


def test_clone_and_push_without_token_fail(forge: Forge, tmp_path: Path) -> None:
    spec = new_repo(forge)
    r = forge.git("clone", "-q", f"{forge.url}/{spec}.git", str(tmp_path / "anon"), auth=False, check=False)
    assert r.returncode != 0 and not (tmp_path / "anon" / "calc.py").exists()
    assert "401" in r.stderr or "Authentication failed" in r.stderr or "could not read Username" in r.stderr

    repo = clone(forge, spec, tmp_path)  # with the token; the clone keeps no credentials
    forge.git("checkout", "-q", "-b", "sneaky", cwd=repo)
    commit(forge, repo, "x.txt", "x\n")
    r = forge.git("push", "origin", "sneaky", cwd=repo, auth=False, check=False)
    assert r.returncode != 0
    assert forge.request("GET", f"/api/repos/{spec}/branches/sneaky")[0] == 404

    # the same with a wrong token
    bad = "Basic " + base64.b64encode(b"x-access-token:not-the-token").decode()
    r = subprocess.run(["git", "-c", f"http.sslCAInfo={forge.ca}", "-c", f"http.extraHeader=Authorization: {bad}",
                        "push", "origin", "sneaky"], cwd=repo, env=git_env(forge.home),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0

    # the raw answers: 401 with a Basic challenge, for git and the API alike
    for path, auth in ((f"/{spec}.git/info/refs?service=git-upload-pack", None),
                       (f"/{spec}.git/info/refs?service=git-receive-pack", "Bearer wrong-token-123"),
                       (f"/api/repos/{spec}/pulls", basic_auth("wrong-token-123")),
                       (f"/api/repos/{spec}/pulls", "Basic !!!notbase64"),
                       (f"/api/repos/{spec}/pulls", f"Token {TOKEN}")):
        status, body, headers = forge.request("GET", path, auth=auth)
        assert status == 401, (path, status, body)
        assert headers["www-authenticate"] == 'Basic realm="forge"'
    status, _, _ = forge.request("POST", f"/api/repos/{spec}/pulls", {"title": "t", "head": "x"}, auth=None)
    assert status == 401
    # any user name works with the right token (as on GitHub)
    auth = "Basic " + base64.b64encode(f"someone:{TOKEN}".encode()).decode()
    assert forge.request("GET", f"/api/repos/{spec}", auth=auth)[0] == 200


def test_open_pr_create_update_list(forge: Forge, tmp_path: Path) -> None:
    spec = new_repo(forge)
    sha = push_branch(forge, spec, "rebuno/fix-tests", tmp_path)
    status, pr, headers = forge.request("POST", f"/api/repos/{spec}/pulls",
                                        {"title": "Fix average()", "body": "first", "head": "rebuno/fix-tests",
                                         "base": "main"})
    assert status == 201, pr
    assert {k: pr[k] for k in ("number", "title", "head", "base", "state", "body", "head_sha")} == {
        "number": 1, "title": "Fix average()", "head": "rebuno/fix-tests", "base": "main", "state": "open",
        "body": "first", "head_sha": sha}
    assert pr["url"].endswith(f"/{spec}/pull/1") and headers["location"] == pr["url"]

    # the same head again: the open pull request is updated (GitHub keeps one per head)
    status, again, _ = forge.request("POST", f"/api/repos/{spec}/pulls",
                                     {"title": "Fix average() and test it", "body": "second",
                                      "head": "acme:rebuno/fix-tests"}, auth="basic")
    assert status == 200, again
    assert again["number"] == 1 and again["title"] == "Fix average() and test it" and again["body"] == "second"
    assert again["created_at"] == pr["created_at"]

    other_sha = push_branch(forge, spec, "feature/other", tmp_path / "b")
    status, second, _ = forge.request("POST", f"/api/repos/{spec}/pulls", {"title": "Other", "head": "feature/other"})
    assert status == 201 and second["number"] == 2 and second["body"] == "" and second["head_sha"] == other_sha

    status, pulls, _ = forge.request("GET", f"/api/repos/{spec}/pulls")
    assert status == 200 and [(p["number"], p["title"]) for p in pulls] == [
        (1, "Fix average() and test it"), (2, "Other")]
    status, only, _ = forge.request("GET", f"/api/repos/{spec}/pulls?head=feature/other&state=all")
    assert [p["number"] for p in only] == [2]
    assert forge.request("GET", f"/api/repos/{spec}/pulls/2")[1]["title"] == "Other"
    assert forge.request("GET", f"/{spec}/pull/1")[1]["number"] == 1
    assert forge.request("GET", f"/api/repos/{spec}/pulls/9")[0] == 404

    stored = json.loads((forge.data / "pulls.json").read_text())
    assert [p["number"] for p in stored[spec]] == [1, 2]

    # re-creating the repository (next to the running forge) starts it without pull requests
    r = forge.init_repo(spec, SAMPLE, "--replace")
    assert r.returncode == 0, r.stderr
    assert forge.request("GET", f"/api/repos/{spec}/pulls")[1] == []
    assert forge.request("GET", f"/api/repos/{spec}/branches/feature/other")[0] == 404


def test_open_pr_rejects_bad_input(forge: Forge, tmp_path: Path) -> None:
    spec = new_repo(forge)
    push_branch(forge, spec, "topic", tmp_path)
    url = f"/api/repos/{spec}/pulls"
    good: dict[str, Any] = {"title": "T", "body": "B", "head": "topic", "base": "main"}
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({**good, "draft": True}, 422, "unknown field"),
        ({**good, "maintainer_can_modify": True, "x": 1}, 422, "unknown field"),
        ({k: v for k, v in good.items() if k != "title"}, 422, "title"),
        ({**good, "title": ""}, 422, "title"),
        ({**good, "title": "t" * 300}, 422, "title"),
        ({**good, "title": 5}, 422, "title"),
        ({**good, "body": ["x"]}, 422, "body"),
        ({**good, "head": "../../etc/passwd"}, 422, "head"),
        ({**good, "head": "-x"}, 422, "head"),
        ({**good, "head": "a/.hidden"}, 422, "head"),
        ({**good, "head": "topic", "base": "../main"}, 422, "base"),
        ({**good, "head": "other:topic"}, 422, "head"),
        ({**good, "head": "missing"}, 422, "does not exist"),
        ({**good, "head": "main"}, 422, "same branch"),
    ]
    for body, status, words in cases:
        got, answer, _ = forge.request("POST", url, body)
        assert got == status and words in answer["message"], (body, got, answer)
    assert forge.request("POST", url, raw=b"{not json")[0] == 400
    assert forge.request("POST", url, raw=b"[1, 2]")[0] == 400
    assert forge.request("POST", url, {**good, "body": "x" * (70 * 1024)})[0] == 413
    assert forge.request("POST", url, raw=b"{}", headers={"Transfer-Encoding": "chunked"})[0] in (400, 411)

    # path traversal and bad names in the repository part of the path
    for path in ("/api/repos/acme/..%2F..%2Fetc/pulls", "/api/repos/../calc/pulls", "/api/repos/acme/../pulls",
                 "/api/repos/acme/calc.git/pulls", "/api/repos/acme/.hidden/pulls",
                 f"/api/repos/{spec}/branches/..%2F..%2Fconfig", f"/api/repos/{spec}/branches/../../HEAD",
                 "/acme/../../etc.git/info/refs?service=git-upload-pack", "/api/repos/nobody/nothing/pulls"):
        status, _, _ = forge.request("GET", path)
        assert status == 404, path
    assert forge.request("POST", "/api/repos/../x/pulls", good)[0] == 404
    assert forge.request("GET", f"/{spec}.git/info/refs")[0] == 403  # the dumb protocol is not served
    assert forge.request("GET", f"/api/repos/{spec}/pulls?state=weird")[0] == 422
    assert forge.request("GET", f"/api/repos/{spec}/pulls")[1] == []  # nothing was created


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """forge.py's main() in this process (cheaper than a new interpreter); exit code and stderr."""
    code = forge_py.main(list(args))
    return code, capsys.readouterr().err


def test_init_repo_checks(forge: Forge, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORGE_TOKEN", TOKEN)
    data = str(forge.data)
    for spec in ("../evil", "acme/../../x", "acme", "acme/x.git", "acme/-y", "acme/.x"):
        code, err = run_cli(capsys, "--data", data, "--init-repo", spec, "--from", str(SAMPLE))
        assert code == 1 and "bad repository" in err, (spec, err)
    code, err = run_cli(capsys, "--data", data, "--init-repo", "acme/calc", "--from", str(SAMPLE))
    assert code == 1 and "already exists" in err
    code, err = run_cli(capsys, "--data", data, "--init-repo", "acme/new", "--from", str(tmp_path / "missing"))
    assert code == 1 and "not a directory" in err
    assert not (forge.data / "repos" / "evil.git").exists() and not (forge.data / "repos" / "acme" / "new.git").exists()


def test_tls_material_and_hostname(forge: Forge, tmp_path: Path) -> None:
    ca = forge.ca.read_bytes()
    cert = (forge.data / "tls" / "server.crt").read_bytes()
    key_mode = (forge.data / "tls" / "ca.key").stat().st_mode & 0o777
    assert key_mode == 0o600
    sans = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in",
                           str(forge.data / "tls" / "server.crt")], capture_output=True, text=True).stdout
    assert "DNS:github.local" in sans and "IP Address:127.0.0.1" in sans

    # a client that asks for github.local (as the egress proxy will) verifies the certificate
    ctx = ssl.create_default_context(cafile=str(forge.ca))
    with socket.create_connection(("127.0.0.1", forge.port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="github.local") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
    # a client that does not trust the CA fails its handshake (the forge logs one line)
    with socket.create_connection(("127.0.0.1", forge.port), timeout=5) as raw:
        try:
            ssl.create_default_context().wrap_socket(raw, server_hostname="github.local")
            raise AssertionError("an untrusted certificate was accepted")
        except ssl.SSLCertVerificationError:
            pass

    # a second start on the same data dir keeps the CA and the server certificate
    env = {**os.environ, "FORGE_TOKEN": TOKEN}
    again = start_server([PYTHON, str(EXAMPLE / "forge.py"), "--data", str(forge.data), "--listen", "127.0.0.1:0"],
                         "forge", tmp_path, env)
    try:
        assert f"ca={forge.ca}" in again.line
    finally:
        again.stop()
    assert forge.ca.read_bytes() == ca
    assert (forge.data / "tls" / "server.crt").read_bytes() == cert


def test_generated_token_file(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "FORGE_TOKEN"}
    data = tmp_path / "data"
    server = start_server([PYTHON, str(EXAMPLE / "forge.py"), "--data", str(data), "--listen", "127.0.0.1:0",
                           "--hostname", "forge.test"], "forge", tmp_path, env)
    try:
        token_file = data / "token"
        assert f"token-file={token_file}" in server.line and "host=forge.test" in server.line
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert token_file.read_text().strip() not in server.line + server.log_text()
    finally:
        server.stop()



def test_bad_command_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORGE_TOKEN", TOKEN)
    bad_args: list[tuple[list[str], str]] = [
        (["--listen", "nonsense"], "bad --listen"),
        (["--hostname", "bad_host!", "--listen", "127.0.0.1:0"], "bad --hostname"),
        ([], "nothing to do"),
        (["--init-repo", "a/b"], "needs --from"),
    ]
    for args, words in bad_args:
        code, err = run_cli(capsys, "--data", str(tmp_path / "d2"), *args)
        assert code == 1 and words in err, (args, err)
    monkeypatch.setenv("FORGE_TOKEN", "short")
    code, err = run_cli(capsys, "--data", str(tmp_path / "d3"), "--listen", "127.0.0.1:0")
    assert code == 1 and "8 to 512" in err
    monkeypatch.delenv("FORGE_TOKEN")
    code, err = run_cli(capsys, "--data", str(tmp_path / "d4"), "--listen", "127.0.0.1:0", "--token-file",
                        str(tmp_path / "nope"))
    assert code == 1 and "does not exist" in err


def test_log_has_one_line_per_request_and_no_token(forge: Forge) -> None:
    log = forge.server.log_text()
    assert TOKEN not in log
    assert base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode() not in log
    lines = [line for line in log.splitlines() if " /api/" in line or ".git/" in line]
    assert lines and all(line.startswith("forge: 127.0.0.1 ") for line in lines)
    assert any("git-receive-pack 200" in line for line in lines)
    assert any("401" in line and "user=-" in line for line in lines)

