#!/usr/bin/env bash
# default-image.sh - the demo's default sandbox image: Debian bookworm made with mmdebstrap
# from Debian packages (git, python3, bash, coreutils, useradd, setpriv, GNU find, getent,
# CA certificates, sudo), cached as one tarball, and imported into a running sandboxd as
# docker.io/rebuno/default:latest (one layer). Each half is skipped when done already.
#
#   scripts/default-image.sh [--build-only] [--rebuno BIN]
#
# The tarball is $REBUNO_IMAGE_CACHE (default /var/cache/rebuno)/default-bookworm.tar,
# built once (root; the Debian mirror of /etc/apt/sources.list). The import talks to the
# sandboxd of `rebuno sandbox` (the usual client configuration: REBUNO_SANDBOX_URL ...),
# and is skipped when that daemon already has the reference.
set -euo pipefail
cd "$(dirname "$0")/.."
REF=docker.io/rebuno/default:latest
CACHE=${REBUNO_IMAGE_CACHE:-/var/cache/rebuno}
TAR=$CACHE/default-bookworm.tar
PKGS=git,python3,bash,coreutils,passwd,util-linux,findutils,libc-bin,ca-certificates,sudo,procps,less
MIRROR=${REBUNO_DEBIAN_MIRROR:-http://deb.debian.org/debian}
BIN=build/rebuno
BUILD_ONLY=0
while [ $# -gt 0 ]; do
    case "$1" in
    --build-only) BUILD_ONLY=1 ;;
    --rebuno) BIN=$2; shift ;;
    -h | --help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "default-image.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done

if [ ! -s "$TAR" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "default-image.sh: building $TAR needs root (sudo $0)" >&2
        exit 1
    fi
    command -v mmdebstrap >/dev/null || { echo "default-image.sh: mmdebstrap is missing (bash scripts/deps.sh)" >&2; exit 1; }
    mkdir -p "$CACHE"
    t0=$(date +%s)
    echo "default-image.sh: building Debian bookworm with mmdebstrap into $TAR (once) ..." >&2
    # --variant=apt: essential packages + apt; docs, man pages and apt lists are left out,
    # and so are device nodes (no image layer may hold one: the sandbox gets its own /dev).
    mmdebstrap --variant=apt --include="$PKGS" \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
        --aptopt='Acquire::Retries "3"' --skip=output/dev \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
        --format=tar bookworm "$TAR.tmp" "$MIRROR" >&2
    mv "$TAR.tmp" "$TAR"
    echo "default-image.sh: built in $(($(date +%s) - t0)) s ($(du -h "$TAR" | cut -f1))" >&2
fi
[ "$BUILD_ONLY" = 1 ] && { echo "$TAR"; exit 0; }

if "$BIN" sandbox image get "$REF" >/dev/null 2>&1; then
    echo "default-image.sh: $REF is there already" >&2
    exit 0
fi
"$BIN" sandbox image import "$TAR" --type tarball --ref "$REF"
