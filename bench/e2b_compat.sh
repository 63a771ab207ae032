#!/usr/bin/env bash
# bench/e2b_compat.sh - the E2B-compatible endpoint beside /v1 (issue 16): create -> first
# output, and a command's round trip, through the official e2b SDK (bench/e2b_compat.mjs)
# and through the project's /v1 Python client (bench/e2b_compat_v1.py), against one
# sandboxd, each with internet off (/v1's default) and on (E2B's default); prints medians,
# the ratios (aim: the SDK within 1.2x of /v1) and E2B's published ~0.44 s create for scale.
#
#   bash bench/e2b_compat.sh [ROUNDS [CMDS]]      as root; default 5 rounds, 20 commands each
#
# Needs build/rebuno, node, and the SDK installed (npm ci in tests/compat/e2b, which this
# does when it is missing). State goes on a tmpfs (see bench/run.sh for why).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5} cmds=${2:-20}
[[ -x build/rebuno ]] || { echo "bench/e2b_compat.sh: build first: make build/rebuno" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "bench/e2b_compat.sh: needs root (sandboxd does)" >&2; exit 2; }
[[ -d tests/compat/e2b/node_modules/e2b ]] ||
    (cd tests/compat/e2b && npm ci --no-audit --no-fund >/dev/null)

source bench/lib_sandboxd.sh
sandboxd_start --e2b-listen
export REBUNO_E2B_COMPAT=http://127.0.0.1:$p2

# warm-up (the first sandbox builds the default image), then each client, both settings
python3 bench/e2b_compat_v1.py 1 1 >/dev/null
e0=$(node bench/e2b_compat.mjs "$rounds" "$cmds" 0)
v0=$(python3 bench/e2b_compat_v1.py "$rounds" "$cmds" deny-all)
e1=$(node bench/e2b_compat.mjs "$rounds" "$cmds" 1)
v1=$(python3 bench/e2b_compat_v1.py "$rounds" "$cmds" allow-all)
raw=$(python3 bench/e2b_compat_raw.py "$cmds")
python3 - "$e0" "$v0" "$e1" "$v1" "$rounds" "$cmds" "$raw" <<'PY'
import json, statistics, sys
e0, v0, e1, v1 = (json.loads(a) for a in sys.argv[1:5])
raw = json.loads(sys.argv[7])
med = statistics.median
print(f"E2B-compatible endpoint vs /v1 ({sys.argv[5]} sandboxes, {sys.argv[6]} commands each; median ms)")
print(f"{'':34}{'create->first output':>22}{'command round trip':>20}")
for r in (e0, v0, e1, v1):
    print(f"{r['client']:34}{med(r['create']):>22.1f}{med(r['rtt']):>20.2f}")
print(f"{'plain HTTP, envd Start':34}{'':>22}{med(raw['raw']):>20.2f}")
print(f"{'plain HTTP, /v1 commands':34}{'':>22}{med(raw['rawV1']):>20.2f}")
print(f"{'ratio plain HTTP Start / v1':34}{'':>22}{med(raw['raw']) / med(raw['rawV1']):>20.2f}")
for name, e, v in (("internet off", e0, v0), ("internet on", e1, v1)):
    cr, rr = med(e["create"]) / med(v["create"]), med(e["rtt"]) / med(v["rtt"])
    print(f"{'ratio SDK / v1, ' + name + ' (aim <= 1.2)':34}{cr:>22.2f}{rr:>20.2f}")
print(f"{'E2B published create':34}{440.0:>22.1f}{'':>20}   (ours, SDK, internet on: "
      f"{440.0 / med(e1['create']):.1f}x that speed)")
PY
