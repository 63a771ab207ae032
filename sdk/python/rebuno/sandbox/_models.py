"""Read-only data objects, enums and option types of the sandbox client.

Returned data (command results, directory entries, resources, users) are frozen dataclasses
with a pydantic-like ``model_dump(mode="python" | "json")`` so results can go straight into a
JSON response. Assigning to a field raises ``dataclasses.FrozenInstanceError`` (an
``AttributeError``).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import signal as signal_module
import subprocess
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

# --- helpers ------------------------------------------------------------------------


class _Omitted:
    """The "argument not given" marker, distinct from ``None``."""

    _instance: _Omitted | None = None

    def __new__(cls) -> _Omitted:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<omitted>"

    def __bool__(self) -> bool:
        return False


OMITTED: Any = _Omitted()


def _dump(value: Any, mode: str, exclude_none: bool) -> Any:
    if isinstance(value, _Model):
        return value.model_dump(mode=mode, exclude_none=exclude_none)
    if isinstance(value, enum.Enum):
        return value.value if mode == "json" else value
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z") if mode == "json" else value
    if isinstance(value, timedelta):
        return value.total_seconds() if mode == "json" else value
    if isinstance(value, Mapping):
        return {str(k) if mode == "json" else k: _dump(v, mode, exclude_none) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_dump(v, mode, exclude_none) for v in value]
        return items if mode == "json" or isinstance(value, list) else tuple(items)
    if isinstance(value, bytes) and mode == "json":
        return value.decode("utf-8", errors="replace")
    return value


class _Model:
    """Mixin for the frozen dataclasses: ``model_dump``, ``model_dump_json``, ``model_copy``."""

    def model_dump(self, *, mode: Literal["python", "json"] | str = "python",
                   exclude_none: bool = False) -> dict[str, Any]:
        """The fields as a dict. ``mode="json"`` gives only JSON types (datetimes as RFC 3339
        strings, enums as their values, tuples as lists)."""
        if mode not in ("python", "json"):
            raise ValueError("mode must be 'python' or 'json'")
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name.startswith("_"):
                continue
            v = getattr(self, f.name)
            if exclude_none and v is None:
                continue
            out[f.name] = _dump(v, mode, exclude_none)
        return out

    def model_dump_json(self, *, indent: int | None = None, exclude_none: bool = False) -> str:
        """``model_dump(mode="json")`` serialized as a JSON string."""
        return json.dumps(self.model_dump(mode="json", exclude_none=exclude_none), indent=indent)

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> Any:
        """A copy with the fields in ``update`` replaced (the original is read-only)."""
        return dataclasses.replace(self, **dict(update or {}))  # type: ignore[type-var]


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 string from the API as an aware ``datetime`` (``None`` stays ``None``)."""
    if not value:
        return None
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


DurationInput: TypeAlias = int | float | timedelta | None


def duration_ms(value: Any, name: str = "duration") -> int | None:
    """Seconds (``int``/``float``) or a ``timedelta`` as whole milliseconds (``None`` stays)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number of seconds or a timedelta")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)):
        seconds = float(value)
    else:
        raise TypeError(f"{name} must be a number of seconds or a timedelta, not {type(value).__name__}")
    if seconds < 0:
        raise ValueError(f"{name} must not be negative")
    return int(round(seconds * 1000))


# --- enums --------------------------------------------------------------------------


class SandboxStatus(str, enum.Enum):
    """The state of a sandbox: ``running``, ``paused`` (frozen, memory kept) or ``stopped``
    (no session, files kept)."""

    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"


class CommandStatus(str, enum.Enum):
    """The state of a command: ``starting``, ``running``, ``exited`` or ``failed`` (it could
    not start)."""

    STARTING = "starting"
    RUNNING = "running"
    EXITED = "exited"
    FAILED = "failed"


class CommandSignal(str, enum.Enum):
    """Signal names accepted by ``Command.send_signal`` (numbers and ``signal.Signals`` work too)."""

    HUP = "HUP"
    INT = "INT"
    QUIT = "QUIT"
    ABRT = "ABRT"
    KILL = "KILL"
    USR1 = "USR1"
    USR2 = "USR2"
    PIPE = "PIPE"
    ALRM = "ALRM"
    TERM = "TERM"
    CHLD = "CHLD"
    CONT = "CONT"
    STOP = "STOP"
    TSTP = "TSTP"
    TTIN = "TTIN"
    TTOU = "TTOU"
    WINCH = "WINCH"

    @property
    def number(self) -> int:
        """The signal's number on Linux."""
        return int(getattr(signal_module, "SIG" + self.value))


def signal_value(sig: Any) -> int | str:
    """Normalize ``int | "TERM" | "SIGTERM" | signal.Signals | CommandSignal`` for the API."""
    if isinstance(sig, CommandSignal):
        return sig.value
    if isinstance(sig, signal_module.Signals):
        return int(sig)
    if isinstance(sig, bool):
        raise TypeError("signal must be a name or a number")
    if isinstance(sig, int):
        return sig
    if isinstance(sig, str):
        name = sig.upper()
        return name[3:] if name.startswith("SIG") else name
    raise TypeError(f"signal must be a name or a number, not {type(sig).__name__}")


# --- regions --------------------------------------------------------------------------


class _CurrentRegion:
    """The ``CURRENT_REGION`` sentinel type."""

    _instance: _CurrentRegion | None = None

    def __new__(cls) -> _CurrentRegion:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "CURRENT_REGION"


CURRENT_REGION: Any = _CurrentRegion()
"""Place the sandbox in "the current region": ``$REBUNO_REGION``, else ``$VERCEL_REGION``,
else no region (a rebuno host is one region, so this only changes what is recorded)."""

RegionInput: TypeAlias = str | _CurrentRegion | None


def resolve_region(region: Any) -> str | None:
    """``CURRENT_REGION`` read from the environment now; strings pass through unchanged."""
    if region is CURRENT_REGION:
        value = os.environ.get("REBUNO_REGION")
        if value is None:
            value = os.environ.get("VERCEL_REGION")
        return value
    if region is None or isinstance(region, str):
        return region
    raise TypeError("region must be a string, CURRENT_REGION or None")


# --- configuration and results --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SandboxResources(_Model):
    """CPU, memory, process, open-file and disk limits of a sandbox.

    ``vcpus`` is a CFS quota (1-64), ``memory`` is in MiB (64-262144), ``pids`` the most
    processes (16-65536), ``nofile`` the most open files per process (64-1048576; ``pids x
    nofile`` may be at most a quarter of the host's ``fs.file-max``), ``disk_mb`` the quota
    of the sandbox's files in MiB (64 to the store's size; enforced where
    ``SandboxInfo.disk_enforced``). ``None`` leaves the server's default (1 vCPU, 2048 MiB,
    1024 pids, 1024 files or fewer on a small host, a quarter of the store up to 10 GiB) or,
    in ``update()``, the current value.
    """

    vcpus: int | None = None
    memory: int | None = None
    pids: int | None = None
    nofile: int | None = None
    disk_mb: int | None = None

    _FIELDS = ("vcpus", "memory", "pids", "nofile", "disk_mb")

    def to_api(self) -> dict[str, int]:
        """The ``resources`` object of the API (unset fields left out)."""
        return {k: getattr(self, k) for k in self._FIELDS if getattr(self, k) is not None}

    @classmethod
    def from_api(cls, data: Mapping[str, Any] | None) -> SandboxResources:
        """Build from the API's ``resources`` object."""
        data = data or {}
        return cls(**{k: data.get(k) for k in cls._FIELDS})


@dataclasses.dataclass(frozen=True)
class SandboxUsage(_Model):
    """Live figures of a sandbox's session (cgroup counters)."""

    memory_bytes: int | None = None
    memory_peak_bytes: int | None = None
    pids: int | None = None
    oom_kills: int | None = None
    cgroup: str | None = None
    cpu_usage_us: int | None = None  # cpu time used since the session started
    disk_bytes: int | None = None  # what the sandbox's own tree holds (where quotas are enforced)


@dataclasses.dataclass(frozen=True)
class SandboxSessionInfo(_Model):
    """One session (a running init with its namespaces) of a sandbox."""

    id: str
    started_at: datetime | None = None


@dataclasses.dataclass(frozen=True)
class SandboxInfo(_Model):
    """A sandbox's state as the API returned it (``Sandbox.info``)."""

    id: str
    name: str
    status: SandboxStatus
    metadata: Mapping[str, str]
    env_keys: tuple[str, ...]
    resources: SandboxResources
    timeout_ms: int | None
    on_timeout: str
    image: str | None
    created_at: datetime | None
    updated_at: datetime | None
    expires_at: datetime | None
    session: SandboxSessionInfo | None
    stopped_at: datetime | None = None
    stop_reason: str | None = None
    usage: SandboxUsage | None = None
    region: str | None = None
    network_policy: NetworkPolicy | None = None
    network_id: str | None = None
    ports: tuple[int, ...] = ()
    host_ports: Mapping[int, int] = dataclasses.field(default_factory=dict)
    network: Mapping[str, Any] | None = None
    mounts: Mapping[str, DriveMount] = dataclasses.field(default_factory=dict)
    source: Mapping[str, Any] | None = None
    snapshot_expiration_ms: int | None = None
    disk_enforced: bool | None = None  # the store enforces resources.disk_mb (btrfs quotas)
    allow_privilege_escalation: bool = False  # setuid programs (sudo) work inside

    @classmethod
    def from_api(cls, d: Mapping[str, Any], *, region: str | None = None) -> SandboxInfo:
        """Build from the API's sandbox object (``region`` stands in if it has none)."""
        sess = d.get("session")
        usage = d.get("usage")
        try:
            status = SandboxStatus(d.get("state"))
        except ValueError:
            status = SandboxStatus.STOPPED
        return cls(
            id=d["id"], name=d["name"], status=status,
            metadata=MappingProxyType(dict(d.get("metadata") or {})),
            env_keys=tuple(d.get("env_keys") or ()),
            resources=SandboxResources.from_api(d.get("resources")),
            timeout_ms=d.get("timeout_ms"), on_timeout=d.get("on_timeout") or "stop",
            image=d.get("image"), created_at=parse_time(d.get("created_at")),
            updated_at=parse_time(d.get("updated_at")), expires_at=parse_time(d.get("expires_at")),
            session=SandboxSessionInfo(id=sess["id"], started_at=parse_time(sess.get("started_at")))
            if isinstance(sess, Mapping) else None,
            stopped_at=parse_time(d.get("stopped_at")), stop_reason=d.get("stop_reason"),
            usage=SandboxUsage(**{k: usage.get(k) for k in ("memory_bytes", "memory_peak_bytes", "pids",
                                                            "oom_kills", "cgroup", "cpu_usage_us",
                                                            "disk_bytes")})
            if isinstance(usage, Mapping) else None,
            region=d.get("region") or region,
            network_policy=NetworkPolicy.from_api(d.get("network_policy")),
            network_id=d.get("network_id"),
            ports=tuple(p["port"] for p in d.get("ports") or () if isinstance(p, Mapping)),
            host_ports=MappingProxyType({p["port"]: p["host_port"] for p in d.get("ports") or ()
                                         if isinstance(p, Mapping) and p.get("host_port")}),
            network=MappingProxyType(dict(d["network"])) if isinstance(d.get("network"), Mapping) else None,
            mounts=MappingProxyType({p: DriveMount.from_api(m) for p, m in (d.get("mounts") or {}).items()
                                     if isinstance(m, Mapping)}),
            source=MappingProxyType(dict(d["source"])) if isinstance(d.get("source"), Mapping) else None,
            snapshot_expiration_ms=d.get("snapshot_expiration_ms"),
            disk_enforced=d.get("disk_enforced"),
            allow_privilege_escalation=d.get("allow_privilege_escalation") is True,
        )


@dataclasses.dataclass(frozen=True)
class CompletedCommand(_Model):
    """The result of ``run_command()``, shaped like :class:`subprocess.CompletedProcess`.

    ``args`` is the whole argv (``(cmd, *args)``). ``stdout``/``stderr`` are text when captured
    (``capture_output=True`` or ``subprocess.PIPE``), else ``None``; invalid UTF-8 is replaced.
    ``returncode`` is the exit status; a command killed by a signal has ``128 + signal`` and
    ``signal`` set (``"KILL"`` with ``timed_out=True`` after ``kill_after``).
    """

    id: str
    name: str
    args: tuple[str, ...]
    returncode: int
    stdout: str | None = None
    stderr: str | None = None
    cwd: str | None = None
    user: str | None = None
    session_id: str | None = None
    sandbox_id: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    signal: str | None = None
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def exit_code(self) -> int:
        """The same as ``returncode``."""
        return self.returncode

    def check_returncode(self) -> None:
        """Raise :class:`subprocess.CalledProcessError` if ``returncode`` is not 0."""
        if self.returncode:
            raise subprocess.CalledProcessError(self.returncode, list(self.args), self.stdout, self.stderr)


@dataclasses.dataclass(frozen=True)
class DirectoryEntry(_Model):
    """One file system entry (``fs.listdir()``, ``fs.stat()``).

    ``type`` is ``file``, ``directory``, ``symlink``, ``fifo``, ``socket``, ``char_device``,
    ``block_device`` or ``unknown``; ``mode`` the permission bits as an int; ``uid``/``gid``
    as seen inside the sandbox; ``target`` set only for symlinks.
    """

    name: str
    path: str
    type: str
    size: int = 0
    mode: int = 0
    uid: int | None = None
    gid: int | None = None
    mtime: datetime | None = None
    target: str | None = None

    @property
    def is_file(self) -> bool:
        """``True`` for a regular file."""
        return self.type == "file"

    @property
    def is_dir(self) -> bool:
        """``True`` for a directory."""
        return self.type == "directory"

    @property
    def is_symlink(self) -> bool:
        """``True`` for a symbolic link."""
        return self.type == "symlink"

    @classmethod
    def from_api(cls, d: Mapping[str, Any], parent: str | None = None) -> DirectoryEntry:
        """Build from the API's entry object (``parent`` fills ``path`` for list entries)."""
        name = d.get("name") or ""
        path = d.get("path")
        if not path:
            path = (parent.rstrip("/") + "/" + name) if parent else name
        mode = d.get("mode")
        try:
            mode_int = int(mode, 8) if isinstance(mode, str) else int(mode or 0)
        except ValueError:
            mode_int = 0
        return cls(name=name, path=path, type=d.get("type") or "unknown", size=int(d.get("size") or 0),
                   mode=mode_int, uid=d.get("uid"), gid=d.get("gid"), mtime=parse_time(d.get("mtime")),
                   target=d.get("target"))


@dataclasses.dataclass(frozen=True)
class SandboxUserInfo(_Model):
    """A Linux account inside a sandbox (``create_user`` / ``SandboxUser.info()``)."""

    username: str
    uid: int
    gid: int
    home_dir: str
    shell: str | None = None
    groups: tuple[int, ...] = ()

    @classmethod
    def from_api(cls, d: Mapping[str, Any]) -> SandboxUserInfo:
        """Build from the API's user object."""
        return cls(username=d["username"], uid=int(d["uid"]), gid=int(d["gid"]), home_dir=d["home_dir"],
                   shell=d.get("shell"), groups=tuple(d.get("groups") or ()))


@dataclasses.dataclass(frozen=True)
class SandboxQuery(_Model):
    """Which sandboxes ``query_sandboxes()`` returns: every given ``metadata`` key with the
    same value, and a state among ``state`` (all states when ``None``). Sandboxes come in
    creation order."""

    metadata: Mapping[str, str] | None = None
    state: tuple[SandboxStatus, ...] | None = None


@dataclasses.dataclass(frozen=True)
class SandboxServiceOptions(_Model):
    """Options of a standalone client or an ambient ``session()``.

    ``region`` is recorded on sandboxes created without an explicit region (a rebuno host is
    one region). ``base_url`` overrides ``$REBUNO_SANDBOX_URL`` / ``http://127.0.0.1:8090``;
    ``timeout`` bounds an ordinary request in seconds (long waits size their own).
    """

    region: Any = None
    base_url: str | None = None
    timeout: float | None = None


# --- sources: where a new sandbox's files come from ------------------------------------------


def _host_path(value: Any, name: str) -> str:
    """An absolute host path (or ``file://`` URL) without ``.``/``..`` components."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a host path or a file:// URL")
    path = value[len("file://"):] if value.startswith("file://") else value
    if not path.startswith("/") or "\0" in path or any(c in (".", "..") for c in path.split("/")):
        raise ValueError(f"{name} must be an absolute host path (or file:// URL) without . or .. "
                         f"components, not {value!r}")
    return path


@dataclasses.dataclass(frozen=True)
class SnapshotSource(_Model):
    """Create a sandbox from a snapshot (``Sandbox.snapshot()``): its files and image are
    restored into the new sandbox. A missing or expired snapshot raises
    :class:`SandboxApiError` with ``status_code == 404`` and ``code == "snapshot_not_found"``
    (and nothing is created)."""

    snapshot_id: str
    type: str = "snapshot"

    def to_api(self) -> dict[str, Any]:
        """The source as the API takes it."""
        if not isinstance(self.snapshot_id, str) or not self.snapshot_id:
            raise ValueError("SnapshotSource.snapshot_id must be a non-empty string")
        return {"type": "snapshot", "snapshot_id": self.snapshot_id}


@dataclasses.dataclass(frozen=True)
class GitSource(_Model):
    """Create a sandbox from a Git repository: ``git clone [--branch B] [--depth N] -- URL
    PATH`` runs inside the new sandbox, as its root, and the create call returns once the
    clone is in place (a failed clone raises ``SandboxApiError`` 400 ``source_failed`` and
    creates nothing).

    ``url`` is an ``https://``, ``http://``, ``git://``, ``ssh://`` or ``user@host:path`` URL
    (cloned over the sandbox's network, under its ``network_policy``), or an absolute host
    path / ``file://`` URL of a repository on this machine (copied in, so ``depth`` works).
    ``revision`` (alias ``branch``) is a branch or tag name, as ``git clone --branch`` takes
    it (not a commit id). ``path`` is where the clone goes inside (default ``/workspace``).
    ``username``/``password`` are not supported: give a private host's credentials to the
    egress proxy instead (``network_policy=NetworkPolicy.custom({...})`` header transforms),
    so they never enter the sandbox.
    """

    url: str
    revision: str | None = None
    depth: int | None = None
    username: str | None = None
    password: str | None = None
    branch: str | None = None
    path: str | None = None
    type: str = "git"

    def to_api(self) -> dict[str, Any]:
        """The source as the API takes it (``revision`` becomes ``branch``)."""
        url = os.fspath(self.url) if isinstance(self.url, os.PathLike) else self.url
        if not isinstance(url, str) or not url:
            raise ValueError("GitSource.url must be a non-empty string")
        if self.username is not None or self.password is not None:
            raise not_implemented("GitSource username/password",
                                  "give the host's credentials to the egress proxy with "
                                  "network_policy=NetworkPolicy.custom({...}) header transforms")
        if self.revision is not None and self.branch is not None and self.revision != self.branch:
            raise ValueError("GitSource: pass revision= or branch=, not two different values")
        out: dict[str, Any] = {"type": "git", "url": url}
        branch = self.revision if self.revision is not None else self.branch
        if branch is not None:
            out["branch"] = branch
        if self.depth is not None:
            if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 1:
                raise ValueError("GitSource.depth must be a positive integer")
            out["depth"] = self.depth
        if self.path is not None:
            out["path"] = os.fspath(self.path)
        return out


@dataclasses.dataclass(frozen=True)
class TarballSource(_Model):
    """Create a sandbox from a tarball (gzip, xz, bzip2, zstd or plain), extracted at ``path``
    (default ``/workspace``) inside the new sandbox by ``tar`` running there.

    sandboxd reads the archive from this host: ``url`` is an absolute host path or a
    ``file://`` URL. It does not download archives (``http(s)://`` raises
    ``NotImplementedError``): download the file first, or write it into a sandbox and use
    ``fs`` calls.
    """

    url: str
    path: str | None = None
    type: str = "tarball"

    def to_api(self) -> dict[str, Any]:
        """The source as the API takes it (the host path goes in ``file``)."""
        url = os.fspath(self.url) if isinstance(self.url, os.PathLike) else self.url
        if isinstance(url, str) and url.split("://", 1)[0] in ("http", "https") and "://" in url:
            raise not_implemented("TarballSource with an http(s) URL",
                                  "sandboxd reads the archive from a host path or file:// URL")
        out: dict[str, Any] = {"type": "tarball", "file": _host_path(url, "TarballSource.url")}
        if self.path is not None:
            out["path"] = os.fspath(self.path)
        return out


@dataclasses.dataclass(frozen=True)
class ImageSource(_Model):
    """Create a sandbox from an image: ``"default"`` or an imported ``"sha256:<hex>"`` (the
    same as ``create_sandbox(image=...)``; if both are given they must agree)."""

    image: str = "default"
    type: str = "image"

    def to_api(self) -> dict[str, Any]:
        """The source as the API takes it."""
        if not isinstance(self.image, str) or not self.image:
            raise ValueError("ImageSource.image must be a non-empty string")
        return {"type": "image", "image": self.image}


SandboxSource: TypeAlias = GitSource | TarballSource | SnapshotSource | ImageSource


def source_api(source: Any) -> dict[str, Any]:
    """A ``source=`` argument as the API takes it: a source object, a :class:`Snapshot`
    handle (anything with a ``snapshot_id``), or the API's JSON object."""
    if isinstance(source, (SnapshotSource, GitSource, TarballSource, ImageSource)):
        return source.to_api()
    if isinstance(source, Mapping):
        if not isinstance(source.get("type"), str):
            raise ValueError('a source mapping needs a "type" (snapshot, git, tarball or image)')
        return dict(source)
    snap_id = getattr(source, "snapshot_id", None)
    if isinstance(snap_id, str):
        return SnapshotSource(snapshot_id=snap_id).to_api()
    raise TypeError("source must be SnapshotSource, GitSource, TarballSource, ImageSource or a Snapshot, "
                    f"not {type(source).__name__}")


@dataclasses.dataclass(frozen=True)
class SnapshotInfo(_Model):
    """A snapshot as the API returned it (``Snapshot.info``).

    ``status`` is ``created`` (snapshots are taken synchronously). ``expires_at`` is
    ``None`` for a snapshot that never expires; ``size_bytes`` is always ``None`` (sandboxd
    does not report it).
    """

    id: str
    sandbox_id: str | None
    sandbox_name: str | None = None
    name: str | None = None
    image: str | None = None
    status: str = "created"
    created_at: datetime | None = None
    expires_at: datetime | None = None
    expiration_ms: int | None = None
    size_bytes: int | None = None

    @classmethod
    def from_api(cls, d: Mapping[str, Any]) -> SnapshotInfo:
        """Build from the API's snapshot object."""
        return cls(id=d["id"], sandbox_id=d.get("sandbox_id"), sandbox_name=d.get("sandbox_name"),
                   name=d.get("name"), image=d.get("image"), status=d.get("status") or "created",
                   created_at=parse_time(d.get("created_at")), expires_at=parse_time(d.get("expires_at")),
                   expiration_ms=d.get("expiration_ms"), size_bytes=d.get("size_bytes"))


def _redacted(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: "<redacted>" for k in headers}


@dataclasses.dataclass(frozen=True, repr=False)
class NetworkPolicyTransform(_Model):
    """Headers the egress proxy sets on every request to a domain, outside the sandbox.

    A header the sandbox sent with the same name (any case) is replaced, never duplicated.
    The values (credentials) never enter the sandbox; ``repr()`` and the sandbox's own
    ``network_policy`` show ``"<redacted>"`` instead of them.
    """

    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.headers, Mapping):
            raise TypeError("headers must be a mapping of header name to value")
        for k, v in self.headers.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("header names and values must be strings")
        object.__setattr__(self, "headers", MappingProxyType(dict(self.headers)))

    def to_api(self) -> dict[str, Any]:
        """The transform as the API takes it: ``{"headers": {...}}``."""
        return {"headers": dict(self.headers)}

    def __repr__(self) -> str:
        return f"NetworkPolicyTransform(headers={_redacted(self.headers)!r})"


@dataclasses.dataclass(frozen=True, repr=False)
class NetworkPolicyResponse(_Model):
    """What the egress proxy answers, itself, to a request a rule matches: nothing is
    contacted. ``status_code`` 200-599; ``content_type`` defaults to text/plain for a body."""

    status_code: int
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    body: str | None = None
    content_type: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.status_code, bool) or not isinstance(self.status_code, int):
            raise TypeError("status_code must be an integer")
        if not isinstance(self.headers, Mapping):
            raise TypeError("headers must be a mapping of header name to value")
        object.__setattr__(self, "headers", MappingProxyType(dict(self.headers)))

    def to_api(self) -> dict[str, Any]:
        """``{"statusCode": n, "headers"?, "body"?, "contentType"?}``."""
        out: dict[str, Any] = {"statusCode": self.status_code}
        if self.headers:
            out["headers"] = dict(self.headers)
        if self.body is not None:
            out["body"] = self.body
        if self.content_type is not None:
            out["contentType"] = self.content_type
        return out

    @classmethod
    def from_api(cls, d: Mapping[str, Any]) -> NetworkPolicyResponse:
        """Build from the API's ``response`` object."""
        return cls(status_code=d.get("statusCode", 0), headers=d.get("headers") or {},
                   body=d.get("body"), content_type=d.get("contentType"))


@dataclasses.dataclass(frozen=True, repr=False)
class NetworkPolicyRule(_Model):
    """What the egress proxy does for one allowed domain: ``transform`` is a list of
    :class:`NetworkPolicyTransform` (merged in order; a later header of the same name wins).
    A domain with no rules (``[]``) is allowed and passed through untouched.

    The headers are set only inside HTTPS; a plain HTTP (port 80) request to the domain is
    refused with 403, so a credential never crosses the network in cleartext, unless
    ``plain_http=True`` asks for them there too.

    Per-request rules (docs/proxy.md): ``match`` limits a rule to some requests, as the API
    takes it (``{"path": {"startsWith": "/v1/"}, "method": ["POST"], "queryString": [...],
    "headers": [{"key": {"exact": "x-api-key"}}]}``); instead of ``transform`` a rule may
    carry ``forward_url`` (the request is sent there, its path appended) or ``response``
    (a :class:`NetworkPolicyResponse` the proxy answers with). Every matching transform
    sets its headers; the first matching forward or response rule decides."""

    transform: Sequence[NetworkPolicyTransform] = ()
    plain_http: bool = False
    match: Mapping[str, Any] | None = None
    forward_url: str | None = None
    response: NetworkPolicyResponse | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.plain_http, bool):
            raise TypeError("plain_http must be True or False")
        if isinstance(self.transform, (str, bytes, Mapping)) or not isinstance(self.transform, Sequence):
            raise TypeError("transform must be a list of NetworkPolicyTransform")
        items = []
        for t in self.transform:
            if isinstance(t, Mapping):
                t = NetworkPolicyTransform(headers=t.get("headers") or {})
            if not isinstance(t, NetworkPolicyTransform):
                raise TypeError("transform must contain NetworkPolicyTransform objects")
            items.append(t)
        object.__setattr__(self, "transform", tuple(items))
        if self.match is not None and not isinstance(self.match, Mapping):
            raise TypeError("match must be a mapping as the API takes it")
        if self.forward_url is not None and not isinstance(self.forward_url, str):
            raise TypeError("forward_url must be a string")
        if isinstance(self.response, Mapping):
            object.__setattr__(self, "response", NetworkPolicyResponse.from_api(self.response))
        if self.response is not None and not isinstance(self.response, NetworkPolicyResponse):
            raise TypeError("response must be a NetworkPolicyResponse")
        if sum(1 for x in (self.transform, self.forward_url, self.response) if x) > 1:
            raise ValueError("a rule takes one of transform, forward_url or response")

    def to_api(self) -> dict[str, Any]:
        """The rule as the API takes it: ``{"transform": [{"headers": {...}}, ...]}``
        (and ``"plain_http": true`` when set), or ``{"forwardURL": ...}`` or
        ``{"response": {...}}``, with ``"match"`` when set."""
        out: dict[str, Any] = {}
        if self.match is not None:
            out["match"] = dict(self.match)
        if self.forward_url is not None:
            out["forwardURL"] = self.forward_url
        elif self.response is not None:
            out["response"] = self.response.to_api()
        else:
            out["transform"] = [t.to_api() for t in self.transform]
        if self.plain_http:
            out["plain_http"] = True
        return out

    @classmethod
    def from_api(cls, d: Mapping[str, Any]) -> NetworkPolicyRule:
        """Build from one rule of the API's policy (header values come back redacted)."""
        return cls(transform=d.get("transform") or (), plain_http=d.get("plain_http", False),
                   match=d.get("match"), forward_url=d.get("forwardURL"), response=d.get("response"))

    def __repr__(self) -> str:
        extra = ", plain_http=True" if self.plain_http else ""
        if self.match is not None:
            extra += f", match={dict(self.match)!r}"
        if self.forward_url is not None:
            return f"NetworkPolicyRule(forward_url={self.forward_url!r}{extra})"
        if self.response is not None:
            return f"NetworkPolicyRule(response=NetworkPolicyResponse(status_code=" \
                   f"{self.response.status_code}){extra})"
        return f"NetworkPolicyRule(transform={list(self.transform)!r}{extra})"


_MODES = ("allow-all", "deny-all", "custom")


@dataclasses.dataclass(frozen=True, repr=False)
class NetworkPolicy(_Model):
    """A sandbox's network egress policy, enforced outside the sandbox by the egress proxy.

    * ``NetworkPolicy.allow_all()``: every host, bytes untouched;
    * ``NetworkPolicy.deny_all()``: nothing (the default for new sandboxes);
    * ``NetworkPolicy.custom({"*": [], "github.com": [NetworkPolicyRule(transform=[
      NetworkPolicyTransform(headers={"Authorization": "Basic ..."})])]})``: only the listed
      domains (``"*.example.com"`` covers subdomains, ``"*"`` any other host without rules);
      a domain's header rules are applied by terminating TLS with the sandbox's own CA.
    * ``NetworkPolicy.custom({"github.com": []}, subnets={"allow": ["203.0.113.0/24"],
      "deny": ["10.0.0.0/8"]})``: IPv4 address ranges beside the domains, judged on the
      address the proxy connects to (``"precedence": "deny"``, the default, lets a denied
      range win over every allow; ``"allow"`` lets an allowed domain or range win). The
      daemon validates them (docs/sandbox-api.md, Network).

    Pass it to ``create_sandbox(network_policy=...)`` or ``Sandbox.update(network_policy=...)``
    (applied live: connections no longer allowed are closed). The strings ``"allow-all"`` and
    ``"deny-all"`` and the API's JSON map are accepted there too.
    """

    mode: str = "deny-all"
    rules: Mapping[str, Sequence[NetworkPolicyRule]] | None = None
    subnets: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}")
        if self.mode != "custom":
            if self.rules or self.subnets:
                raise ValueError("rules and subnets are only for a custom policy: use NetworkPolicy.custom({...})")
            object.__setattr__(self, "rules", None)
            object.__setattr__(self, "subnets", None)
            return
        if self.subnets is not None:
            object.__setattr__(self, "subnets", _subnets(self.subnets))
        if not isinstance(self.rules, Mapping):
            raise TypeError("a custom policy is a mapping of domain to a list of NetworkPolicyRule")
        out: dict[str, tuple[NetworkPolicyRule, ...]] = {}
        for domain, rules in self.rules.items():
            if not isinstance(domain, str) or not domain:
                raise TypeError("domains must be non-empty strings")
            if isinstance(rules, (str, bytes, Mapping)) or not isinstance(rules, Sequence):
                raise TypeError(f"{domain}: the rules must be a list (use [] to allow it untouched)")
            items = []
            for r in rules:
                if isinstance(r, Mapping):
                    r = NetworkPolicyRule.from_api(r)
                if not isinstance(r, NetworkPolicyRule):
                    raise TypeError(f"{domain}: rules must be NetworkPolicyRule objects")
                items.append(r)
            out[domain] = tuple(items)
        object.__setattr__(self, "rules", MappingProxyType(out))

    @classmethod
    def allow_all(cls) -> NetworkPolicy:
        """Every host is reachable (through the proxy, bytes untouched)."""
        return cls(mode="allow-all")

    @classmethod
    def deny_all(cls) -> NetworkPolicy:
        """No egress at all (the default)."""
        return cls(mode="deny-all")

    @classmethod
    def custom(cls, rules: Mapping[str, Sequence[NetworkPolicyRule]],
               subnets: Mapping[str, Any] | None = None) -> NetworkPolicy:
        """Only the listed domains: ``{"*": [], "github.com": [NetworkPolicyRule(...)]}``, and
        the address ranges of ``subnets`` (``{"allow": [...], "deny": [...], "precedence": ...}``)."""
        return cls(mode="custom", rules=rules, subnets=subnets)

    def to_api(self) -> Any:
        """The policy as the API takes it: ``"allow-all"``, ``"deny-all"``, a map, or
        ``{"allow": map, "subnets": {...}}`` when it has address ranges."""
        if self.mode != "custom":
            return self.mode
        domains = {d: [r.to_api() for r in rules] for d, rules in (self.rules or {}).items()}
        if self.subnets is None:
            return domains
        sn = {k: (list(v) if k != "precedence" else v) for k, v in self.subnets.items()}
        return {"allow": domains, "subnets": sn}

    @classmethod
    def from_api(cls, value: Any) -> NetworkPolicy | None:
        """Build from a sandbox's ``network_policy`` (header values come back redacted)."""
        if value is None:
            return None
        if isinstance(value, str):
            return cls(mode=value) if value in ("allow-all", "deny-all") else None
        if isinstance(value, Mapping):
            mode = value.get("mode")
            if isinstance(mode, str) and mode in ("allow-all", "deny-all"):
                return cls(mode=mode)
            subnets = value.get("subnets")
            if not isinstance(subnets, Mapping):
                subnets = None  # a bare map may name a host "subnets"
            allow = value.get("allow", {} if subnets is not None else value)
            if isinstance(allow, list):
                allow = {d: [] for d in allow}
            try:
                return cls.custom(allow, subnets=subnets)
            except (TypeError, ValueError):
                return None
        return None

    def __repr__(self) -> str:
        if self.mode != "custom":
            return f"NetworkPolicy.{self.mode.replace('-', '_')}()"
        extra = f", subnets={dict(self.subnets)!r}" if self.subnets is not None else ""
        return f"NetworkPolicy.custom({dict(self.rules or {})!r}{extra})"


def _subnets(value: Any) -> Mapping[str, Any]:
    """``subnets`` checked for shape (lists of strings, a precedence string); the daemon
    checks the ranges themselves and names a bad one in its 400."""
    if not isinstance(value, Mapping):
        raise TypeError('subnets is a mapping: {"allow": [CIDR], "deny": [CIDR], "precedence": "deny"}')
    out: dict[str, Any] = {}
    for k, v in value.items():
        if k == "precedence":
            if v not in ("deny", "allow"):
                raise ValueError('subnets precedence is "deny" or "allow"')
            out[k] = v
        elif k in ("allow", "deny"):
            if isinstance(v, (str, bytes)) or not isinstance(v, Sequence) or \
                    not all(isinstance(x, str) for x in v):
                raise TypeError(f"subnets {k} must be a list of CIDR strings")
            out[k] = tuple(v)
        else:
            raise ValueError(f"subnets has allow, deny and precedence, not {k!r}")
    return MappingProxyType(out)


def network_policy_api(value: Any) -> Any:
    """A ``network_policy=`` argument as the API takes it (a NetworkPolicy, ``"allow-all"``,
    ``"deny-all"`` or the JSON map)."""
    if isinstance(value, NetworkPolicy):
        return value.to_api()
    if isinstance(value, str):
        if value not in ("allow-all", "deny-all"):
            raise ValueError('network_policy must be a NetworkPolicy, "allow-all", "deny-all" or a map')
        return value
    if isinstance(value, Mapping):
        return {k: ([r.to_api() if isinstance(r, NetworkPolicyRule) else r for r in v]
                    if isinstance(v, (list, tuple)) else v) for k, v in value.items()}
    raise TypeError('network_policy must be a NetworkPolicy, "allow-all", "deny-all" or a map')


def ports_api(ports: Any) -> list[int]:
    """A ``ports=`` argument as the API takes it: a list of port numbers."""
    if isinstance(ports, (str, bytes)) or not isinstance(ports, Sequence):
        raise TypeError("ports must be a list of port numbers")
    out = []
    for p in ports:
        if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 65535:
            raise ValueError(f"{p!r} is not a port number (1-65535)")
        out.append(p)
    return out


# --- drives ---------------------------------------------------------------------------------

_DRIVE_MODES = {"read-write": "rw", "rw": "rw", "snapshot": "snapshot"}
MOUNT_PATH_MAX = 256


def drive_ref(drive: Any) -> str:
    """A Drive given as a name, an id or a Drive handle, as the name or id the API takes."""
    if isinstance(drive, str):
        if not drive:
            raise ValueError("a drive name must not be empty")
        return drive
    ref = getattr(drive, "_drive_ref", None)
    if callable(ref):
        return str(ref())
    raise TypeError(f"a drive must be a name, an id or a Drive, not {type(drive).__name__}")


@dataclasses.dataclass(frozen=True)
class DriveMount(_Model):
    """One mount of a Drive: ``DriveMount("cache")`` (read-write) or
    ``DriveMount("shared-source", mode="snapshot")`` (a read-only, point-in-time view of the
    drive's committed data as of the session's start; ``drive.snapshot()`` builds it).

    ``drive`` is the drive's name or id (a Drive handle is accepted and stored by name);
    ``mode`` is ``"read-write"`` (alias ``"rw"``) or ``"snapshot"``. In a sandbox's
    ``mounts`` the server's view also fills ``drive_id``.
    """

    drive: str
    mode: str = "read-write"
    drive_id: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "drive", drive_ref(self.drive))
        if self.mode not in _DRIVE_MODES:
            raise ValueError(f"DriveMount.mode must be 'read-write' or 'snapshot', not {self.mode!r}")
        object.__setattr__(self, "mode", "read-write" if self.mode == "rw" else self.mode)

    def to_api(self) -> dict[str, str]:
        """The mount as the API takes it: ``{"drive": ..., "mode": "rw" | "snapshot"}``."""
        return {"drive": self.drive, "mode": _DRIVE_MODES[self.mode]}

    @classmethod
    def from_api(cls, d: Mapping[str, Any]) -> DriveMount:
        """Build from a sandbox's ``mounts`` entry (``{"drive_id", "drive", "mode"}``)."""
        mode = d.get("mode") or "rw"
        return cls(drive=d.get("drive") or d.get("drive_id") or "?",
                   mode=mode if mode in _DRIVE_MODES else "read-write", drive_id=d.get("drive_id"))


def mount_path(path: Any) -> str:
    """A mount point canonicalized (repeated and trailing slashes and ``.`` dropped) and
    checked: absolute, no ``..`` or NUL, not ``/``, at most 256 characters."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"mounts: a mount path must be a string or PurePosixPath, not {type(path).__name__}")
    if "\0" in path:
        raise ValueError(f"mounts: mount path {path!r} must not contain NUL")
    if not path.startswith("/"):
        raise ValueError(f"mounts: mount path {path!r} must be absolute")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"mounts: mount path {path!r} must not contain ..")
    canon = "/" + "/".join(parts)
    if canon == "/":
        raise ValueError(f"mounts: mount path {path!r} must not be /")
    if len(canon) > MOUNT_PATH_MAX:
        raise ValueError(f"mounts: mount path {canon[:40]!r}... is longer than {MOUNT_PATH_MAX} characters")
    return canon


def mounts_api(mounts: Mapping[Any, Any]) -> dict[str, dict[str, str]]:
    """A ``mounts=`` argument as the API takes it, validated as sandboxd does: canonical
    absolute paths that do not overlap, each drive at most once. Values are a drive name or
    id, a Drive handle, a :class:`DriveMount` or ``{"drive": ..., "mode": ...}``."""
    if not isinstance(mounts, Mapping):
        raise TypeError("mounts must be a mapping of mount path to drive")
    out: dict[str, dict[str, str]] = {}
    seen: dict[str, str] = {}
    for raw, value in mounts.items():
        path = mount_path(raw)
        if isinstance(value, DriveMount):
            m = value
        elif isinstance(value, Mapping):
            unknown = set(value) - {"drive", "mode"}
            if unknown or "drive" not in value:
                raise ValueError(f"mounts: {path}: a mapping needs 'drive' and may have 'mode', "
                                 f"not {sorted(unknown) or 'no drive'}")
            m = DriveMount(value["drive"], mode=value.get("mode") or "read-write")
        else:
            m = DriveMount(value)
        for other in out:
            if other == path or other.startswith(path + "/") or path.startswith(other + "/"):
                raise ValueError(f"mounts: mount paths {other} and {path} overlap")
        if m.drive in seen:
            raise ValueError(f"mounts: drive {m.drive!r} is mounted twice ({seen[m.drive]} and {path}); "
                             "each drive may appear once")
        seen[m.drive] = path
        out[path] = m.to_api()
    return out


@dataclasses.dataclass(frozen=True)
class DriveInfo(_Model):
    """A Drive as the API returned it (``Drive.info``).

    ``initialized`` is ``False`` until a sandbox that mounts the drive read-write stops
    (that commits its data; ``committed_at`` says when). ``attached_to`` is the sandbox
    that mounts it read-write now (``{"sandbox_id", "sandbox_name", "mode"}``) or ``None``;
    ``snapshot_mounts`` counts live read-only mounts. ``parent_drive_id`` is the drive it
    was forked from and ``root_drive_id`` the first drive of that line (``None`` when not a
    fork).
    """

    id: str
    name: str
    region: str | None = None
    max_size_bytes: int | None = None
    max_size_enforced: bool = False
    created_at: datetime | None = None
    updated_at: datetime | None = None
    initialized: bool = False
    committed_at: datetime | None = None
    parent_drive_id: str | None = None
    root_drive_id: str | None = None
    attached_to: Mapping[str, Any] | None = None
    snapshot_mounts: int = 0

    @classmethod
    def from_api(cls, d: Mapping[str, Any]) -> DriveInfo:
        """Build from the API's drive object."""
        att = d.get("attached_to")
        return cls(id=d["id"], name=d["name"], region=d.get("region"), max_size_bytes=d.get("max_size_bytes"),
                   max_size_enforced=bool(d.get("max_size_enforced")), created_at=parse_time(d.get("created_at")),
                   updated_at=parse_time(d.get("updated_at")), initialized=bool(d.get("initialized")),
                   committed_at=parse_time(d.get("committed_at")), parent_drive_id=d.get("parent_drive_id"),
                   root_drive_id=d.get("root_drive_id"),
                   attached_to=MappingProxyType(dict(att)) if isinstance(att, Mapping) else None,
                   snapshot_mounts=int(d.get("snapshot_mounts") or 0))


def _direction(value: str) -> str:
    if value not in ("asc", "desc"):
        raise ValueError(f"direction must be 'asc' or 'desc', not {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class DriveQueryByCreatedAt(_Model):
    """``query_drives(DriveQueryByCreatedAt(direction="asc"))``: drives by creation time,
    optionally only names starting with ``name_prefix``."""

    direction: Literal["asc", "desc"] = "asc"
    name_prefix: str | None = None

    def to_query(self) -> dict[str, Any]:
        """The list query string."""
        return {"order": "created_at", "direction": _direction(self.direction), "name": self.name_prefix or None}


@dataclasses.dataclass(frozen=True)
class DriveQueryByUpdatedAt(_Model):
    """``query_drives(DriveQueryByUpdatedAt(direction="desc"))``: drives by last change
    (a commit updates it), optionally only names starting with ``name_prefix``."""

    direction: Literal["asc", "desc"] = "desc"
    name_prefix: str | None = None

    def to_query(self) -> dict[str, Any]:
        """The list query string."""
        return {"order": "updated_at", "direction": _direction(self.direction), "name": self.name_prefix or None}


@dataclasses.dataclass(frozen=True)
class DriveQueryByName(_Model):
    """``query_drives(DriveQueryByName(name_prefix="cache"))``: drives by name, optionally
    only names starting with ``name_prefix``."""

    name_prefix: str | None = None
    direction: Literal["asc", "desc"] = "asc"

    def to_query(self) -> dict[str, Any]:
        """The list query string."""
        return {"order": "name", "direction": _direction(self.direction), "name": self.name_prefix or None}


DriveQuery: TypeAlias = DriveQueryByCreatedAt | DriveQueryByUpdatedAt | DriveQueryByName


def not_implemented(feature: str, what: str = "") -> NotImplementedError:
    """The error raised when code uses a feature sandboxd does not have yet."""
    detail = f" ({what})" if what else ""
    return NotImplementedError(
        f"{feature} is not supported by rebuno sandboxd yet{detail}; it is planned for a later issue "
        "(see docs/sandbox.md, 'Not done yet')")


def check_str_seq(args: Sequence[str] | None, name: str = "args") -> list[str]:
    """Validate a command's arguments: a sequence of strings, never one string."""
    if args is None:
        return []
    if isinstance(args, (str, bytes)):
        raise TypeError(f"{name} must be a list of strings, not a single string "
                        "(nothing goes through a shell: pass ['-c', script] to bash)")
    out = []
    for a in args:
        if isinstance(a, os.PathLike):
            a = os.fspath(a)
        if not isinstance(a, str):
            raise TypeError(f"{name} must contain strings, got {type(a).__name__}")
        out.append(a)
    return out
