"""`pip install ./sdk/python` works offline, with and without build isolation (the build
backend is standard library only, so there is nothing to download)."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import PYTHON, SDK


@pytest.mark.parametrize("isolation", [True, False], ids=["isolated", "no-build-isolation"])
def test_pip_install_offline(tmp_path, isolation):
    if subprocess.run([PYTHON, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        pytest.skip("pip is not installed for this interpreter (scripts/deps.sh installs python3-pip)")
    target = tmp_path / "site"
    cmd = [PYTHON, "-m", "pip", "install", "--no-index", "--quiet", "--disable-pip-version-check",
           "--target", str(target), str(SDK)]
    if not isolation:
        cmd.insert(4, "--no-build-isolation")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    q = subprocess.run([PYTHON, "-c", "import rebuno; print(rebuno.__file__); print(rebuno.__version__)"],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=30)
    assert q.returncode == 0, q.stderr
    assert q.stdout.splitlines() == [str(target / "rebuno" / "__init__.py"), "0.1.0"]
    assert (target / "rebuno" / "py.typed").exists()
    assert not (target / "tests").exists() and not (target / "_rebuno_build.py").exists()
    assert not (SDK / "build").exists()  # nothing built in the source tree
