"""A PEP 517 build backend in the standard library (no setuptools, no wheel).

``pip install ./sdk/python`` must work offline on any Python 3.11+. setuptools cannot
build a wheel without the separate ``wheel`` package (before setuptools 70.1), and an
isolated build would have to download it; this backend needs nothing: it zips the
``rebuno`` package with the metadata from ``pyproject.toml``. It implements
``build_wheel``, ``build_sdist`` and ``build_editable`` (``pip install -e``).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
PACKAGE = "rebuno"


def _project() -> dict[str, Any]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _metadata() -> str:
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p.get('description', '')}", f"Requires-Python: {p.get('requires-python', '>=3.11')}"]
    lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
    readme = ROOT / p.get("readme", "README.md")
    if readme.exists():
        lines.append("Description-Content-Type: text/markdown")
        return "\n".join(lines) + "\n\n" + readme.read_text(encoding="utf-8")
    return "\n".join(lines) + "\n"


def _files() -> list[Path]:
    out = []
    for path in sorted((ROOT / PACKAGE).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo"):
            out.append(path)
    return out


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(directory: str, entries: list[tuple[str, bytes]]) -> str:
    p = _project()
    name, version = p["name"], p["version"]
    dist_info = f"{name}-{version}.dist-info"
    entries = list(entries) + [
        (f"{dist_info}/METADATA", _metadata().encode()),
        (f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: rebuno-build\nRoot-Is-Purelib: true\n"
                               b"Tag: py3-none-any\n"),
        (f"{dist_info}/top_level.txt", f"{PACKAGE}\n".encode()),
    ]
    record = [_record_line(n, d) for n, d in entries] + [f"{dist_info}/RECORD,,"]
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    filename = f"{name}-{version}-py3-none-any.whl"
    stamp = time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")))[:6]
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in entries:
            info = zipfile.ZipInfo(n, date_time=stamp)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d)
    return filename


def get_requires_for_build_wheel(config_settings: Any = None) -> list[str]:
    """Nothing to install before building."""
    return []


get_requires_for_build_sdist = get_requires_for_build_wheel
get_requires_for_build_editable = get_requires_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None) -> str:
    """Build ``rebuno-<version>-py3-none-any.whl`` into ``wheel_directory``."""
    return _write_wheel(wheel_directory, [(p.relative_to(ROOT).as_posix(), p.read_bytes()) for p in _files()])


def build_editable(wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None) -> str:
    """Build a wheel that puts this source folder on ``sys.path`` (``pip install -e``)."""
    return _write_wheel(wheel_directory, [("_rebuno_editable.pth", f"{ROOT}\n".encode())])


def build_sdist(sdist_directory: str, config_settings: Any = None) -> str:
    """Build ``rebuno-<version>.tar.gz`` into ``sdist_directory``."""
    p = _project()
    base = f"{p['name']}-{p['version']}"
    members = [ROOT / "pyproject.toml", ROOT / "README.md", ROOT / "_rebuno_build.py", *_files()]
    filename = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path in members:
            if path.exists():
                tar.add(path, arcname=f"{base}/{path.relative_to(ROOT).as_posix()}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return filename
