"""`rebuno sandbox ...` against a real sandboxd: create, ls, get, exec (streamed, exit
code passed through, stdin with -i), cp both ways, stop/pause/resume/rm, --json (results,
cp's summary, and errors as the API's error object), --region."""
import json
import os
import shutil
import re
import subprocess

from conftest import BIN


def cli(d, *args, check=True, input=None, timeout=60):
    env = dict(os.environ, REBUNO_SANDBOX_URL=d.url if d else "http://127.0.0.1:9")
    p = subprocess.run([BIN, "sandbox", *args], capture_output=True, env=env, timeout=timeout,
                       input=input)
    if check:
        assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
    return p


def test_cli_round_trip(sandboxd, tmp_path):
    out = cli(sandboxd, "create", "c1", "--meta", "team=a", "--env", "GREETING=hi",
              "--memory", "512", "--timeout", "600").stdout.decode()
    assert out.startswith("created c1 (") and out.rstrip().endswith("running")
    j = json.loads(cli(sandboxd, "create", "c2", "--no-start", "--json").stdout)
    assert j["name"] == "c2" and j["state"] == "stopped"
    assert j["allow_privilege_escalation"] is False
    j3 = json.loads(cli(sandboxd, "create", "c3", "--allow-privilege-escalation", "--json").stdout)
    assert j3["allow_privilege_escalation"] is True
    cli(sandboxd, "rm", "c3")
    ls = cli(sandboxd, "ls").stdout.decode()
    assert "c1" in ls and "c2" in ls and '{"team":"a"}' in ls
    only = json.loads(cli(sandboxd, "ls", "--state", "stopped", "--json").stdout)
    assert [s["name"] for s in only] == ["c2"]
    got = cli(sandboxd, "get", "c1").stdout.decode()
    assert "512 MiB" in got and "600000 ms" in got

    p = cli(sandboxd, "exec", "c1", "--", "sh", "-c", 'echo "$GREETING"; echo oops >&2; exit 5',
            check=False)
    assert (p.returncode, p.stdout, p.stderr) == (5, b"hi\n", b"oops\n")
    p = cli(sandboxd, "exec", "c1", "-i", "--", "wc", "-c", input=b"x" * 3000000)
    assert p.stdout.strip() == b"3000000"
    p = cli(sandboxd, "exec", "c1", "--json", "--", "echo", "j")
    assert json.loads(p.stdout)["stdout"] == "j\n"

    src = tmp_path / "in.bin"
    data = os.urandom(9 << 20)
    src.write_bytes(data)
    cli(sandboxd, "cp", str(src), "c1:/root/in.bin")
    cli(sandboxd, "cp", "c1:/root/in.bin", str(tmp_path / "out.bin"))
    assert (tmp_path / "out.bin").read_bytes() == data
    assert cli(sandboxd, "cp", "c1:/etc/hostname", "-").stdout == b"c1\n"
    p = cli(sandboxd, "cp", "c1:/nope", str(tmp_path / "x"), check=False)
    assert p.returncode == 1 and b"no such file" in p.stderr

    for action, state in (("pause", "paused"), ("resume", "running"), ("stop", "stopped")):
        assert cli(sandboxd, action, "c1").stdout.decode() == f"c1 {state}\n"
        assert sandboxd.get("c1")["state"] == state
    cli(sandboxd, "rm", "c1")
    p = cli(sandboxd, "get", "c1", check=False)
    assert p.returncode == 1 and b"no sandbox" in p.stderr


def test_cli_errors(sandboxd):
    p = cli(None, "ls", check=False)
    assert p.returncode == 1 and b"cannot reach sandboxd" in p.stderr
    p = cli(sandboxd, "exec", "x", check=False)
    assert p.returncode == 2
    p = cli(sandboxd, "create", "--meta", "novalue", check=False)
    assert p.returncode == 2 and b"KEY=VALUE" in p.stderr
    p = cli(sandboxd, "frobnicate", check=False)
    assert p.returncode == 2
    p = cli(sandboxd, "create", "bad name", check=False)
    assert p.returncode == 1 and b"name" in p.stderr


def test_cli_images(sandboxd, tmp_path):
    tree = tmp_path / "img"
    (tmp_path / "img" / "app").mkdir(parents=True)
    (tree / "app" / "hello.txt").write_text("from the image\n")
    (tree / "bin").mkdir()  # images are self-contained: they bring their tools
    shutil.copy("/bin/busybox", tree / "bin" / "busybox")
    os.symlink("busybox", tree / "bin" / "cat")
    cwd = os.getcwd()
    os.chdir(tmp_path)       # a relative path is made absolute for the daemon
    try:
        out = cli(sandboxd, "image", "import", "img").stdout.decode()
    finally:
        os.chdir(cwd)
    digest = out.split()[0]
    assert digest.startswith("sha256:") and f"dir {tree}" in out, out
    assert digest in cli(sandboxd, "images").stdout.decode()
    listed = cli(sandboxd, "image", "ls").stdout.decode()
    assert listed.startswith("default: host\n") and digest in listed, listed
    assert json.loads(cli(sandboxd, "image", "get", digest, "--json").stdout)["layers"] == [digest]
    cli(sandboxd, "create", "im", "--image", digest)
    assert cli(sandboxd, "exec", "im", "--", "cat", "/app/hello.txt").stdout == b"from the image\n"
    p = cli(sandboxd, "image-rm", digest, check=False)
    assert p.returncode == 1 and b"is used by a sandbox" in p.stderr, p.stderr
    cli(sandboxd, "rm", "im")
    assert cli(sandboxd, "image", "rm", digest).stdout.decode() == f"{digest} deleted\n"
    assert cli(sandboxd, "image", "gc").stdout.decode() == "0 layer(s) removed\n"
    assert json.loads(cli(sandboxd, "images", "--json").stdout)["images"] == []
    p = cli(sandboxd, "image", "import", str(tmp_path / "missing"), check=False)
    assert p.returncode == 1 and b"cannot use" in p.stderr and b"No such file" in p.stderr
    p = cli(sandboxd, "image", "import", check=False)
    assert p.returncode == 2 and b"give a host folder or tarball" in p.stderr


def json_error(p, rc):
    """The --json error of a failed run: one line of stderr, nothing on stdout."""
    assert p.returncode == rc, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == b"", p.stdout
    lines = p.stderr.decode().splitlines()
    assert len(lines) == 1, p.stderr
    return json.loads(lines[0])["error"]


def test_cli_json_errors(sandboxd, tmp_path):
    # an error from sandboxd: its error object, with the HTTP status
    e = json_error(cli(sandboxd, "get", "nope", "--json", check=False), 1)
    assert e["code"] == "sandbox_not_found" and e["status"] == 404 and "nope" in e["message"]
    e = json_error(cli(sandboxd, "create", "bad name", "--json", check=False), 1)
    assert (e["code"], e["field"], e["status"]) == ("validation_error", "name", 400)
    e = json_error(cli(sandboxd, "--json", "rm", "nope", check=False), 1)
    assert e["code"] == "sandbox_not_found"
    e = json_error(cli(sandboxd, "exec", "nope", "--json", "--", "true", check=False), 1)
    assert e["code"] == "sandbox_not_found"
    # not from sandboxd: no status
    e = json_error(cli(None, "ls", "--json", check=False), 1)
    assert e["code"] == "unreachable" and "cannot reach sandboxd" in e["message"]
    assert "status" not in e
    # usage errors (exit 2), also when --json comes after what could not be parsed
    e = json_error(cli(sandboxd, "create", "--meta", "novalue", "--json", check=False), 2)
    assert "KEY=VALUE" in e["message"]
    e = json_error(cli(sandboxd, "ls", "--bogus", "--json", check=False), 2)
    assert "--bogus" in e["message"] and "status" not in e
    for args in (("frobnicate",), (), ("exec", "x"), ("get",)):
        e = json_error(cli(sandboxd, *args, "--json", check=False), 2)
        assert e["code"] == "validation_error" and e["message"], args
    # a copy that fails, both ways
    cli(sandboxd, "create", "je")
    e = json_error(cli(sandboxd, "cp", "je:/nope", str(tmp_path / "x"), "--json", check=False), 1)
    assert e["status"] == 404 and "no such file" in e["message"]
    e = json_error(cli(sandboxd, "cp", str(tmp_path / "missing"), "je:/root/x", "--json",
                       check=False), 1)
    assert e["code"] == "local_file" and "status" not in e
    # without --json: text, as before
    p = cli(sandboxd, "get", "nope", check=False)
    assert p.returncode == 1 and p.stderr.startswith(b"error: ") and p.stdout == b""


def test_cli_json_errors_of_snapshots_drives_and_images(sandboxd, tmp_path):
    """The snapshot, drive and image commands report failures like the others."""
    env = dict(os.environ, REBUNO_SANDBOX_URL=sandboxd.url)

    def drive(*args):
        return subprocess.run([BIN, "drive", *args], capture_output=True, env=env, timeout=60)

    e = json_error(drive("get", "nope", "--json"), 1)
    assert e["status"] == 404 and "nope" in e["message"]
    e = json_error(drive("get", "--json"), 2)
    assert e["code"] == "validation_error" and "which drive" in e["message"] and "status" not in e
    e = json_error(drive("frobnicate", "x", "--json"), 2)
    assert "unknown action" in e["message"]
    e = json_error(drive("ls", "--bogus", "--json"), 2)
    assert "--bogus" in e["message"]
    e = json_error(cli(sandboxd, "snapshot", "nope", "--json", check=False), 1)
    assert e["code"] == "sandbox_not_found" and e["status"] == 404
    e = json_error(cli(sandboxd, "snapshot-rm", "--json", check=False), 2)
    assert "which sandbox" in e["message"]
    e = json_error(cli(sandboxd, "image", "import", str(tmp_path / "missing"), "--json",
                       check=False), 1)
    assert e["code"] == "local_file" and "status" not in e
    e = json_error(cli(sandboxd, "image-rm", "sha256:" + "0" * 64, "--json", check=False), 1)
    assert e["status"] == 404
    # without --json: text
    p = drive("get", "nope")
    assert p.returncode == 1 and p.stderr.startswith(b"error: ") and p.stdout == b""


def test_cli_cp_json_summary_and_region(sandboxd, tmp_path):
    j = json.loads(cli(sandboxd, "create", "rg", "--region", "eu-west-1", "--json").stdout)
    assert j["region"] == "eu-west-1"
    assert re.search(r"^region\s+eu-west-1$", cli(sandboxd, "get", "rg").stdout.decode(), re.M)
    cli(sandboxd, "create", "rg2", "--no-start")
    assert re.search(r"^region\s+local$", cli(sandboxd, "get", "rg2").stdout.decode(), re.M)
    assert json.loads(cli(sandboxd, "get", "rg2", "--json").stdout)["region"] == "local"
    e = json_error(cli(sandboxd, "create", "rg3", "--region", "EU_1", "--json", check=False), 1)
    assert e["field"] == "region"

    src = tmp_path / "in.bin"
    data = os.urandom(100_000)
    src.write_bytes(data)
    p = cli(sandboxd, "cp", str(src), "rg:/root/in.bin", "--json")
    assert json.loads(p.stdout) == {"source": str(src), "destination": "rg:/root/in.bin",
                                    "bytes": 100_000}
    assert p.stderr == b""
    p = cli(sandboxd, "--json", "cp", "rg:/root/in.bin", str(tmp_path / "out.bin"))
    assert json.loads(p.stdout) == {"source": "rg:/root/in.bin",
                                    "destination": str(tmp_path / "out.bin"), "bytes": 100_000}
    assert (tmp_path / "out.bin").read_bytes() == data
    # to stdout: the file is stdout, the summary goes to stderr
    p = cli(sandboxd, "cp", "rg:/root/in.bin", "-", "--json")
    assert p.stdout == data
    assert json.loads(p.stderr) == {"source": "rg:/root/in.bin", "destination": "-",
                                    "bytes": 100_000}
    p = cli(sandboxd, "cp", "-", "rg:/root/empty", "--json", input=b"")
    assert json.loads(p.stdout) == {"source": "-", "destination": "rg:/root/empty", "bytes": 0}
    assert sandboxd.read("rg", "/root/empty") == (200, b"")


def test_cli_oci_image_by_reference(sandboxd, tmp_path):
    """`image import` of an OCI layout with --ref, `create --image REF`, `image get REF`,
    and `image rm REF` (issue 14)."""
    from oci_fixtures import Layout, base_layer
    lay = Layout(str(tmp_path / "layout"))
    desc = lay.image([(base_layer([("etc/motd", "f", "oci via cli\n")]), "gzip")],
                     {"Env": ["PATH=/bin"]})
    lay.add(desc)
    out = cli(sandboxd, "image", "import", str(tmp_path / "layout"), "--ref", "team/tool:v1")
    text = out.stdout.decode()
    assert text.startswith(f"docker.io/team/tool@{desc['digest']}  ") and "oci-layout" in text, text
    assert "  tag docker.io/team/tool:v1\n" in text, text
    got = json.loads(cli(sandboxd, "image", "get", "team/tool:v1", "--json").stdout)
    assert got["digest"] == desc["digest"]
    cli(sandboxd, "create", "o1", "--image", "team/tool:v1")
    assert cli(sandboxd, "exec", "o1", "--", "cat", "/etc/motd").stdout == b"oci via cli\n"
    assert json.loads(cli(sandboxd, "get", "o1", "--json").stdout)["image"] == \
        f"docker.io/team/tool@{desc['digest']}"
    p = cli(sandboxd, "image", "get", "team/nope:v1", check=False)
    assert p.returncode == 1 and b"team/nope:v1" in p.stderr, p.stderr
    cli(sandboxd, "rm", "o1")
    assert cli(sandboxd, "image", "rm", "team/tool:v1").stdout == b"team/tool:v1 deleted\n"
