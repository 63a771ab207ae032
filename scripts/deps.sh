#!/usr/bin/env bash
# deps.sh - install the Debian packages rebuno needs to build, run and test.
# Installs only what is missing, so it is quick on a machine that has them.
set -euo pipefail
PKGS=(build-essential pkg-config libevent-dev libhttp-parser-dev libwslay-dev libjansson-dev
      libyaml-dev libsqlite3-dev libssl-dev libseccomp-dev libcap-dev libcurl4-openssl-dev libarchive-dev
      libcriterion-dev python3 python3-pytest python3-pip python3-venv python3-httpx
      sqlite3 git openssl ca-certificates bubblewrap nftables iproute2
      btrfs-progs tmux curl cppcheck umoci skopeo busybox-static zstd docker-registry
      libpq-dev postgresql-15 mmdebstrap chromium zlib1g-dev sudo)
# libarchive-dev: unpacking image layers (tar, gzip, zstd). umoci, skopeo, busybox-static, zstd:
# self-contained test images (a static shell, zstd layers, docker archives).
# docker-registry: the real OCI registry the pull tests and bench/image_pull.py start on
# loopback (own config, storage and free port; its packaged service is not used).
# chromium: tests/integration/test_dashboard.py drives the dashboard in it (puppeteer-core
# from npm, no browser download). Node.js + npm also build the dashboard bundle (ui/).
# python3-pip/python3-venv: the SDK's offline `pip install ./sdk/python` test;
# mmdebstrap: builds the demo's Debian default image (scripts/default-image.sh) from Debian packages.
# libpq-dev: the PostgreSQL store (store: postgres://...); postgresql-15: the real server its tests
# start (initdb + pg_ctl in a temp folder), never a system service.
# zlib1g-dev: gzip of the HTTP replies (JSON, the dashboard's files) for clients that accept it.
# sudo: the built-in sandbox image's /usr is the host's, and the E2B endpoint's default user
# has passwordless sudo there (docs/e2b.md; the SDK runs `sudo ...` as that user).
# python3-httpx: the SDK's optional rebuno.http_client() and its tests (the SDK itself is stdlib only).
# nodejs/npm: the @vercel/sandbox conformance tests (tests/compat/vercel, npm ci from the
# registry). Only when there is no node at all: a newer one (the SDK wants >= 20.18.1,
# Debian 12 has 18) is left alone, and with an older one those tests skip, saying why.
command -v node >/dev/null || PKGS+=(nodejs npm)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
