#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build mha (and, with
# --test, to run its tests against PyTorch and, for the tokenizer, against
# the npm package gpt-3-encoder under node). Installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
test=0
[ "${1:-}" = "--test" ] && test=1
pkgs=(gcc make cmake pkg-config libcjson-dev libdnnl-dev libopenblas-dev)
if [ $test = 1 ]; then
  # chromium: the SVG pictures rendered headless (tests/svg_browser.py);
  # pytest and pip: the Python binding's tests and its offline install
  pkgs+=(python3 python3-torch python3-numpy chromium python3-pytest python3-pip)
  # valgrind: memcheck over the API and the CLI (scripts/valgrind.sh);
  # ccache: scripts/test.sh's builds share their identical objects;
  # ninja-build: their generator (fewer CPU seconds than make's)
  pkgs+=(valgrind ccache ninja-build)
  # Open MPI: mpirun -np N mha train GPTModel and its test (cli_train_mpi)
  pkgs+=(libopenmpi-dev openmpi-bin)
  # node and npm from Debian unless the machine has them already (from
  # NodeSource, say, whose nodejs package conflicts with Debian's npm).
  command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
  command -v npm >/dev/null 2>&1 || pkgs+=(npm)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The tokenizer's reference, into the git-ignored tests/.npm (no scripts
# run); tests/tokenizer_npm_diff.js finds it there. Without it that test is
# skipped, or under CI fails (tests/oracle.sh): then so does this script.
if [ $test = 1 ]; then
  enc=tests/.npm/node_modules/gpt-3-encoder
  if ! grep -qs '"version": "1.1.4"' "$enc/package.json"; then
    echo "installing: gpt-3-encoder@1.1.4 (npm) into tests/.npm"
    mkdir -p tests/.npm
    if ! npm install --prefix tests/.npm --silent --no-audit --no-fund --ignore-scripts \
        gpt-3-encoder@1.1.4 >/dev/null; then
      . tests/oracle.sh
      if why=$(oracle_required); then
        echo "deps.sh: error: npm could not install gpt-3-encoder@1.1.4 into tests/.npm, the reference of" \
          "tokenizer_npm_diff ($why: a missing oracle fails)" >&2
        exit 1
      fi
      echo "warning: npm could not install gpt-3-encoder: tokenizer_npm_diff will be skipped"
    fi
  fi
fi
