#!/usr/bin/env bash
# dev.sh - the main job: install what is missing, build, and run `rebuno dev` on the
# embedded default (SQLite under .rebuno/, http://127.0.0.1:8080). Extra arguments go to
# `rebuno dev` (e.g. --config examples/rebuno.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
make -j"$(nproc)" build/rebuno >/dev/null
exec build/rebuno dev "$@"
