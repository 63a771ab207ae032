#!/usr/bin/env bash
# deps.sh - install the Debian packages rebuno needs to build, run and test.
# Installs only what is missing, so it is quick on a machine that has them.
set -euo pipefail
PKGS=(build-essential pkg-config libevent-dev libhttp-parser-dev libwslay-dev libjansson-dev
      libyaml-dev libsqlite3-dev libssl-dev libseccomp-dev libcap-dev libcurl4-openssl-dev
      libcriterion-dev python3 python3-pytest python3-pip python3-venv python3-httpx
      sqlite3 git openssl ca-certificates bubblewrap nftables iproute2
      btrfs-progs tmux curl cppcheck chromium)
# chromium: tests/integration/test_dashboard.py drives the dashboard in it (puppeteer-core
# from npm, no browser download). Node.js + npm build the dashboard bundle (ui/): Debian's
# nodejs/npm only when no node is on the PATH already (CI images bring node 20).
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || PKGS+=(nodejs npm)
# python3-pip/python3-venv: the SDK's offline `pip install ./sdk/python` test;
# python3-httpx: the SDK's optional rebuno.http_client() and its tests (the SDK itself is stdlib only).
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
