#!/usr/bin/env bash
# demo.sh - the main job, end to end: install what is missing, build, and run the coding-agent
# demo (examples/coding-agent/demo.py) on the embedded default: the kernel on SQLite and local
# sandboxes, with a local git forge in GitHub's role and a scripted model. Needs root for the
# sandboxes (re-runs itself with sudo). Extra arguments go to demo.py (--keep, --no-wait).
# The sandboxes run on the Debian default image (scripts/default-image.sh: built once with
# mmdebstrap, about two minutes, cached in /var/cache/rebuno); REBUNO_DEMO_HOST_IMAGE=1
# keeps them on the built-in host image instead.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then exec sudo -E bash "$0" "$@"; fi
bash scripts/deps.sh
make -j"$(nproc)" build/rebuno >/dev/null
if [ "${REBUNO_DEMO_HOST_IMAGE:-0}" != 1 ] && [ -z "${REBUNO_DEMO_IMAGE_TAR:-}" ]; then
    REBUNO_DEMO_IMAGE_TAR=$(bash scripts/default-image.sh --build-only)
    export REBUNO_DEMO_IMAGE_TAR
fi
exec python3 examples/coding-agent/demo.py "$@"
