#!/usr/bin/env bash
# demo.sh - the main job, end to end: install what is missing, build, and run the coding-agent
# demo (examples/coding-agent/demo.py) on the embedded default: the kernel on SQLite and local
# sandboxes, with a local git forge in GitHub's role and a scripted model. Needs root for the
# sandboxes (re-runs itself with sudo). Extra arguments go to demo.py (--keep, --no-wait).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then exec sudo -E bash "$0" "$@"; fi
bash scripts/deps.sh
make -j"$(nproc)" build/rebuno >/dev/null
exec python3 examples/coding-agent/demo.py "$@"
