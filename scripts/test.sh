#!/usr/bin/env bash
# Sets up and runs the whole test suite five (on AVX-512 CPUs six) ways:
#   1. the release build (best kernels for this CPU, oneDNN GEMMs, OpenMP),
#   2. the same build with the reference kernels forced (MHA_ISA=ref),
#      (and with the AVX2 kernels forced, MHA_ISA=avx2, on AVX-512 CPUs),
#   3. the OpenBLAS GEMM backend, run under OPENBLAS_CORETYPE=Haswell on
#      AVX2 CPUs (as some hosts set it; its kernels must not make results
#      depend on the thread count),
#   4. without OpenMP and without BLAS (portable fallbacks), with debug
#      assertions; then that build's API tour and every CLI command under
#      valgrind memcheck (scripts/valgrind.sh),
#   5. under AddressSanitizer + UndefinedBehaviorSanitizer.
# The environment is otherwise left as the user has it.
# Exits non-zero if any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test
jobs=$(nproc)
warn="-DMHA_WERROR=ON"

run() { # name, build dir, env..., -- cmake args
  local name=$1 dir=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  echo "=== $name"
  cmake -S . -B "$dir" $warn "$@" >/dev/null
  cmake --build "$dir" -j"$jobs" >/dev/null
  (cd "$dir" && env "${envs[@]}" ctest --output-on-failure -j"$jobs")
}

run "release" build-test -- -DCMAKE_BUILD_TYPE=Release
run "reference kernels (MHA_ISA=ref)" build-test MHA_ISA=ref --
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  run "AVX2 kernels on an AVX-512 CPU (MHA_ISA=avx2)" build-test MHA_ISA=avx2 --
fi
if grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
  run "OpenBLAS backend, OPENBLAS_CORETYPE=Haswell" build-test-openblas OPENBLAS_CORETYPE=Haswell -- -DCMAKE_BUILD_TYPE=Release -DMHA_BLAS=openblas
else
  run "OpenBLAS backend" build-test-openblas -- -DCMAKE_BUILD_TYPE=Release -DMHA_BLAS=openblas
fi
# RelWithDebInfo: debug assertions on, and line numbers for valgrind
run "no OpenMP, no BLAS" build-test-noomp -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMHA_OPENMP=OFF -DMHA_BLAS=builtin
echo "=== valgrind memcheck (the no-OpenMP build)"
scripts/valgrind.sh build-test-noomp
run "ASan+UBSan" build-test-asan ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMHA_SANITIZE=ON
echo "all test configurations passed"
