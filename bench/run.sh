#!/usr/bin/env bash
# bench/run.sh - run the benchmarks (what `make bench` does after building): the kernel,
# then the sandboxes (as root), the egress proxy and image pulls (as root).
#
#   bash bench/run.sh [build/bench/kernel options]     e.g. --quick, --seconds 5, --agents 1,32
#   BENCH_ARGS="--quick" make bench
#
# Needs build/rebuno and build/bench/kernel (`make build/rebuno build/bench/kernel`).
# The report goes to stdout and to build/bench/kernel.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=build/bench/kernel
if [[ ! -x $bin || ! -x build/rebuno ]]; then
    echo "bench/run.sh: build first: make build/rebuno $bin" >&2
    exit 2
fi
if [[ $# -eq 0 && -n ${BENCH_ARGS:-} ]]; then
    read -r -a args <<<"$BENCH_ARGS"
    set -- "${args[@]}"
fi

out=build/bench/kernel.txt
"$bin" --bin build/rebuno "$@" | tee "$out.tmp"
mv "$out.tmp" "$out"
echo
echo "bench/run.sh: report saved to $out"

# The sandbox benchmark needs root (sandboxd does) and bwrap to compare against. Its state
# goes on a tmpfs: this VM's root ext4 has no journal and slows down erratically after many
# deletions (shared/reference/machine-probes.md), which would measure the disk, not us.
if [[ -x build/bench/sandbox && $(id -u) -eq 0 ]] && command -v bwrap >/dev/null; then
    tmp=$(mktemp -d)
    mount -t tmpfs -o size=2g tmpfs "$tmp"
    trap 'umount -l "$tmp" 2>/dev/null; rmdir "$tmp" 2>/dev/null' EXIT
    build/bench/sandbox --bin build/rebuno --state-dir "$tmp/state" | tee build/bench/sandbox.txt
    echo "bench/run.sh: report saved to build/bench/sandbox.txt"
else
    echo "bench/run.sh: skipped the sandbox benchmark (needs root, bwrap and build/bench/sandbox)"
fi

# The egress proxy: passthrough and injection beside a direct connection (and mitmproxy
# when mitmdump is installed). --quick here: the full run takes minutes.
if [[ -x build/bench/proxy ]]; then
    build/bench/proxy --bin build/rebuno --quick | tee build/bench/proxy.txt
    echo "bench/run.sh: report saved to build/bench/proxy.txt"
else
    echo "bench/run.sh: skipped the proxy benchmark (build/bench/proxy is missing)"
fi

# Image pulls (issue 14): a loopback docker-registry, skopeo beside sandboxd's pull.
if [[ $(id -u) -eq 0 && -x /usr/bin/docker-registry && -x /usr/bin/skopeo ]]; then
    /usr/bin/python3 bench/image_pull.py --runs 3 | tee build/bench/image_pull.txt
    echo "bench/run.sh: report saved to build/bench/image_pull.txt"
else
    echo "bench/run.sh: skipped the image pull benchmark (needs root, docker-registry, skopeo)"
fi

# The Vercel-compatible endpoint through the official SDK beside the /v1 Python client
# (root, node; the SDK is installed by npm ci in tests/compat/vercel when missing).
if [[ $(id -u) -eq 0 ]] && command -v node >/dev/null && command -v npm >/dev/null; then
    bash bench/vercel_compat.sh | tee build/bench/vercel_compat.txt
    echo "bench/run.sh: report saved to build/bench/vercel_compat.txt"
else
    echo "bench/run.sh: skipped the Vercel-compatible endpoint benchmark (needs root and node)"
fi
