#!/usr/bin/env bash
# valgrind.sh - run the integration tests against the release binary under valgrind
# (memcheck, definite/indirect leaks are errors). Slower than the ASan run; for
# checking that the daemons are valgrind-clean before a release. sandboxd cannot run
# under valgrind (its zygote clones namespaces, and valgrind supports no clone() but
# threads and fork), so the test_sandbox_* files are left out unless paths are given;
# `rebuno dev` starts its sandboxd outside valgrind. ASan covers sandboxd.
set -euo pipefail
cd "$(dirname "$0")/.."
make -j"$(nproc)" build/rebuno >/dev/null
wrap=$(mktemp)
trap 'rm -f "$wrap"' EXIT
cat > "$wrap" <<W
#!/bin/sh
exec valgrind -q --leak-check=full --show-leak-kinds=definite,indirect \
  --errors-for-leak-kinds=definite,indirect --error-exitcode=99 "$PWD/build/rebuno" "\$@"
W
chmod +x "$wrap"
if [ $# -eq 0 ] || [ "${1#-}" != "$1" ]; then set -- tests/integration --ignore-glob='*/test_sandbox_*' "$@"; fi
REBUNO_BIN="$wrap" /usr/bin/python3 -m pytest -q -p no:cacheprovider "$@"
