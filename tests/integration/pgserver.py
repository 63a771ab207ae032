"""A real PostgreSQL for the tests: Debian's postgresql-15 (initdb + pg_ctl) in a temporary
folder on a free loopback port, run as an unprivileged user (nobody when the tests run as
root), stopped and removed at the end even on failure.

One server serves a whole pytest session; every kernel state folder gets a schema of its own
(schema_uri), so tests stay apart without a CREATE DATABASE each, and a kernel restarted on
the same state folder finds its data again.

From a shell (scripts/test.sh, for the C store tests):
  python3 tests/integration/pgserver.py start   prints "FOLDER URI" and leaves it running
  python3 tests/integration/pgserver.py stop FOLDER   stops that server and removes FOLDER
"""
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time


def pg_bindir():
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    return None


class PgServer:
    def __init__(self, fsync=False):
        from conftest import free_port  # noqa: E402  (the tests' port picker)
        self.bindir = pg_bindir()
        if not self.bindir:
            raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql-15 (scripts/deps.sh)")
        self.dir = tempfile.mkdtemp(prefix="rebuno-pg-")
        os.chmod(self.dir, 0o755)
        self.data = os.path.join(self.dir, "data")
        self.port = free_port()
        self.fsync = fsync
        self.kw = {}
        if os.geteuid() == 0:
            shutil.chown(self.dir, "nobody")
            self.kw = {"user": "nobody", "group": "nogroup"}
        self.started = False

    def _run(self, *args, check=True, timeout=60):
        return subprocess.run([os.path.join(self.bindir, args[0]), *args[1:]], cwd=self.dir,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                              check=check, **self.kw)

    def start(self):
        if not os.path.exists(self.data):
            self._run("initdb", "-D", self.data, "-U", "rebuno", "-E", "UTF8", "--locale=C.UTF-8",
                      "-A", "trust")
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c max_connections=200"
                f" -c fsync={'on' if self.fsync else 'off'} -c shared_buffers=32MB")
        self._run("pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "pg.log"), "-o", opts, "-w",
                  "-t", "60", "start")
        self.started = True
        return self

    def stop(self, mode="fast"):
        if self.started:
            self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop", check=False)
            self.started = False

    def restart(self, mode="fast"):
        self.stop(mode)
        self.start()

    def destroy(self):
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    @classmethod
    def running_in(cls, folder):
        """The server a `start` from the shell left in folder (one of ours, or ValueError)."""
        folder = os.path.realpath(folder)
        if not os.path.basename(folder).startswith("rebuno-pg-") or \
                not os.path.exists(os.path.join(folder, "data", "PG_VERSION")):
            raise ValueError(f"{folder} is not a folder pgserver.py started")
        s = cls.__new__(cls)
        s.bindir, s.dir, s.data = pg_bindir(), folder, os.path.join(folder, "data")
        s.kw = {"user": "nobody", "group": "nogroup"} if os.geteuid() == 0 else {}
        s.started = True
        return s

    @property
    def uri(self):
        return f"postgres://rebuno@127.0.0.1:{self.port}/postgres"

    def psql(self, sql, schema=None):
        """Run sql with psql; returns stdout (rows separated by newlines, fields by |)."""
        env = dict(os.environ, PGOPTIONS=f"-csearch_path={schema}" if schema else "")
        out = subprocess.run([os.path.join(self.bindir, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                              "-h", "127.0.0.1", "-p", str(self.port), "-U", "rebuno", "-d", "postgres",
                              "-c", sql], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=60,
                             check=True)
        return out.stdout.decode()

    def schema_for(self, key):
        """A schema named after key (a state folder), created if missing."""
        name = "k_" + hashlib.sha256(key.encode()).hexdigest()[:16]
        self.psql(f"CREATE SCHEMA IF NOT EXISTS {name}")
        return name

    def schema_uri(self, schema):
        return f"{self.uri}?options=-csearch_path%3D{schema}"


_shared = None


def shared():
    """The session's server, started on first use."""
    global _shared
    if _shared is None:
        _shared = PgServer().start()
    return _shared


def shutdown_shared():
    global _shared
    if _shared is not None:
        _shared.destroy()
        _shared = None


def main(argv):
    if argv[1:] == ["start"]:
        s = PgServer()
        try:
            s.start()
        except BaseException:
            s.destroy()
            raise
        print(s.dir, s.uri)
        return 0
    if len(argv) == 3 and argv[1] == "stop":
        PgServer.running_in(argv[2]).destroy()
        return 0
    print("usage: pgserver.py start | stop FOLDER", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # conftest's free_port
    sys.exit(main(sys.argv))
