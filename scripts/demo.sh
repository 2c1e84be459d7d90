#!/usr/bin/env bash
# Sets up (Debian packages, CMake build) and runs the book's demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target mha_cli >/dev/null
exec build/mha demo
