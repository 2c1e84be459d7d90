#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build mha (and, with
# --test, to run its tests against PyTorch). Installs only what is missing.
set -euo pipefail
pkgs=(gcc make cmake pkg-config libcjson-dev libdnnl-dev libopenblas-dev)
if [ "${1:-}" = "--test" ]; then
  # chromium: the SVG pictures rendered headless (tests/svg_browser.py);
  # pytest and pip: the Python binding's tests and its offline install
  pkgs+=(python3 python3-torch python3-numpy chromium python3-pytest python3-pip)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
