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
    """CPU, memory and process limits of a sandbox.

    ``vcpus`` is a CFS quota (1-64), ``memory`` is in MiB (64-262144), ``pids`` the most
    processes (16-65536). ``None`` leaves the server's default (1 vCPU, 2048 MiB, 1024 pids)
    or, in ``update()``, the current value.
    """

    vcpus: int | None = None
    memory: int | None = None
    pids: int | None = None

    def to_api(self) -> dict[str, int]:
        """The ``resources`` object of the API (unset fields left out)."""
        return {k: v for k, v in (("vcpus", self.vcpus), ("memory", self.memory), ("pids", self.pids))
                if v is not None}

    @classmethod
    def from_api(cls, data: Mapping[str, Any] | None) -> SandboxResources:
        """Build from the API's ``resources`` object."""
        data = data or {}
        return cls(vcpus=data.get("vcpus"), memory=data.get("memory"), pids=data.get("pids"))


@dataclasses.dataclass(frozen=True)
class SandboxUsage(_Model):
    """Live figures of a sandbox's session (cgroup counters)."""

    memory_bytes: int | None = None
    memory_peak_bytes: int | None = None
    pids: int | None = None
    oom_kills: int | None = None
    cgroup: str | None = None


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

    @classmethod
    def from_api(cls, d: Mapping[str, Any], *, region: str | None = None) -> SandboxInfo:
        """Build from the API's sandbox object."""
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
                                                            "oom_kills", "cgroup")})
            if isinstance(usage, Mapping) else None,
            region=region,
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


# --- inputs of features that are not available yet ------------------------------------------


@dataclasses.dataclass(frozen=True)
class SnapshotSource(_Model):
    """Create a sandbox from a snapshot. Snapshots are not implemented by sandboxd yet:
    passing one raises ``NotImplementedError``."""

    snapshot_id: str
    type: str = "snapshot"


@dataclasses.dataclass(frozen=True)
class GitSource(_Model):
    """Create a sandbox from a Git repository (not implemented yet: ``NotImplementedError``)."""

    url: str
    revision: str | None = None
    depth: int | None = None
    username: str | None = None
    password: str | None = None
    type: str = "git"


@dataclasses.dataclass(frozen=True)
class TarballSource(_Model):
    """Create a sandbox from a tarball URL (not implemented yet: ``NotImplementedError``)."""

    url: str
    type: str = "tarball"


SandboxSource: TypeAlias = GitSource | TarballSource | SnapshotSource


class NetworkPolicy(_Model):
    """A network egress policy. Sandboxes have loopback only for now; network policies come
    with a later issue, so passing one raises ``NotImplementedError``. The object keeps
    whatever it was built with, read-only."""

    def __init__(self, *args: Any, **kwargs: Any):
        object.__setattr__(self, "_args", tuple(args))
        object.__setattr__(self, "_kwargs", MappingProxyType(dict(kwargs)))

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __repr__(self) -> str:
        parts = [repr(a) for a in self._args] + [f"{k}={v!r}" for k, v in self._kwargs.items()]
        return f"NetworkPolicy({', '.join(parts)})"

    def model_dump(self, *, mode: Literal["python", "json"] | str = "python",
                   exclude_none: bool = False) -> dict[str, Any]:
        """The arguments the policy was built with."""
        out: dict[str, Any] = dict(self._kwargs)
        if self._args:
            out["args"] = list(self._args)
        return {k: _dump(v, mode, exclude_none) for k, v in out.items() if not (exclude_none and v is None)}


@dataclasses.dataclass(frozen=True)
class DriveMount(_Model):
    """Mount a Drive (not implemented yet: ``NotImplementedError``)."""

    drive: str
    mode: str = "read-write"


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
