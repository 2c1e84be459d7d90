#!/usr/bin/env bash
# Sets up and runs the whole test suite five (on AVX-512 CPUs six) ways:
#   1. the release build (best kernels for this CPU, oneDNN GEMMs, OpenMP),
#   2. the same build with the reference kernels forced (MHA_ISA=ref),
#      without the tests that name their kernels or compute nothing through
#      them (label env-independent; also left out of run 3, with those
#      that call no GEMM, label no-gemm),
#      (and with the AVX2 kernels forced, MHA_ISA=avx2, on AVX-512 CPUs),
#   3. the OpenBLAS GEMM backend, run under OPENBLAS_CORETYPE=Haswell on
#      AVX2 CPUs (as some hosts set it; its kernels must not make results
#      depend on the thread count),
#   4. without OpenMP and without BLAS (portable fallbacks), with debug
#      assertions; then that build's API tour and every CLI command under
#      valgrind memcheck (scripts/valgrind.sh),
#   5. under AddressSanitizer + UndefinedBehaviorSanitizer.
# mpirun's test (cli_train_mpi, label whole-run) runs in the release build:
# builds 4 and 5 leave MPI out (-DMHA_MPI=OFF), where Open MPI's own
# allocations would be reported by LeakSanitizer and valgrind.
# The environment is otherwise left as the user has it (OMP_WAIT_POLICY,
# TMPDIR and ccache's CCACHE_DIR and CCACHE_BASEDIR are set only where they
# are unset, see below).
# Exits non-zero if any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test
jobs=$(nproc)
# ctest runs $jobs programs at once, each with an OpenMP team as wide as
# the machine: threads that spin while they wait (libgomp's default) take
# the cores the other program needs (measured on 2 cores: the release
# ctest 74-79 s wall spinning, 68-69 s passive). Only when the user has not
# chosen a policy; results do not depend on it.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# The tests' temporary files (every `mha ... -o` fsyncs what it writes, up
# to GPT-2 124M's 650 MB) in memory when TMPDIR is unset and /dev/shm has
# room for them (4 GiB free; a container's is often 64 MiB): 4-5 s of each
# ctest run's 60-65 s on 2 cores.
if [ -z "${TMPDIR:-}" ] && [ -w /dev/shm ] &&
   [ "$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')" -ge 4194304 ] 2>/dev/null; then
  export TMPDIR=/dev/shm
fi
warn="-DMHA_WERROR=ON"
# A compiler cache for the suite's builds, in its own directory unless the
# user has one: the OpenBLAS build's objects are the release build's but for
# its backend file (src/kernels/gemm_openblas.c), and a second run of the
# suite recompiles nothing that did not change.
launcher=(-DCMAKE_C_COMPILER_LAUNCHER=) # none (and none left from a run that had one)
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export CCACHE_DIR=${CCACHE_DIR:-$PWD/build-ccache}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} # source paths relative: build dirs share
fi

# Ninja where it is installed (scripts/deps.sh --test installs it): the
# same compiles as make's, without its per-target CMake steps (a fresh
# release build on 2 cores: 78.5 -> 64.0 CPU s, 41 -> 33 s wall). A build
# directory made before keeps its generator (CMake will not switch one).
generator=()
if command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi

# Where the time goes: each step's wall seconds and its children's CPU
# seconds (user + sys, from bash's times), printed as a table at the end.
table=()
times_file=$(mktemp)
vg_out=$(mktemp)
build_log=$(mktemp)
# The torch references no build changes (chapter 5's training runs in torch:
# cli_train_gpt, torch_book_train, whose release run also computes the
# sanitizer run's; torch's draws in torch_generator_diff; autograd's
# tensors in torch_grad_diff) are computed by the first configuration that
# needs them and read back by the later ones (tests/torch_cache.py), from
# a directory of this run's unless the user names one.
torch_cache=""
if [ -z "${MHA_TORCH_CACHE:-}" ]; then
  torch_cache=$(mktemp -d)
  export MHA_TORCH_CACHE=$torch_cache
fi
trap 'rm -f "$times_file" "$vg_out" "$vg_out.times" "$build_log"; [ -z "$torch_cache" ] || rm -rf "$torch_cache"' EXIT
children_cpu() { # file holding bash's `times`: its children's user + sys seconds
  awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] } printf "%.1f", s }' "$1"
}
cpu_s() { # sets cpu: the CPU seconds of this shell's finished children
  times >"$times_file" # not in a subshell, which would count its own
  cpu=$(children_cpu "$times_file")
}
step_t0=0 step_c0=0
step_start() { step_t0=$EPOCHREALTIME; cpu_s; step_c0=$cpu; }
step_end() { # label
  cpu_s
  table+=("$(awk -v l="$1" -v a="$step_t0" -v b="$EPOCHREALTIME" -v c="$step_c0" -v d="$cpu" \
    'BEGIN { printf "%-48s %7.0f %7.0f", l, b - a, d - c }')")
}

# Every run after the release one sets MHA_TEST_SECONDARY=1: a few tests
# then check the same code paths on fewer cases (their designed edge cases,
# not the random ones; tests/README.md lists them), the release run
# checking all of them.
# The runs that change only the environment or the GEMM backend leave out
# the tests labelled env-independent (tests/CMakeLists.txt): they name their
# kernels or compute nothing through the kernel layer, so they would repeat
# the release run bit for bit; the OpenBLAS run also those labelled no-gemm.
# The MHA_ISA runs also leave out the tests labelled isa-independent
# (cli_threads, which sets MHA_ISA itself to each ISA in turn, and
# install_package, this build's installed files).
run() { # name, build dir, labels to leave out (a regex, or ""), env..., -- cmake args
  local name=$1 dir=$2 skip=$3; shift 3
  local envs=() leave_out=()
  [ -z "$skip" ] || leave_out=(-LE "$skip")
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  echo "=== $name"
  step_start
  local gen=("${generator[@]}")
  [ ! -f "$dir/CMakeCache.txt" ] || gen=()
  cmake "${gen[@]}" -S . -B "$dir" $warn "${launcher[@]}" "$@" >/dev/null
  # the build's own output (Ninja prints the compilers' there) only if it fails
  if ! cmake --build "$dir" -j"$jobs" >"$build_log" 2>&1; then
    tail -n 60 "$build_log"
    echo "the build in $dir failed"
    exit 1
  fi
  step_end "  build $dir"
  step_start
  (cd "$dir" && env "${envs[@]}" ctest --output-on-failure -j"$jobs" "${leave_out[@]}")
  step_end "  ctest: $name"
}

run "release" build-test "" -- -DCMAKE_BUILD_TYPE=Release -DMHA_TEST_EMULATIONS=ON
run "reference kernels (MHA_ISA=ref)" build-test "env-independent|whole-run|isa-independent" MHA_ISA=ref MHA_TEST_SECONDARY=1 --
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  run "AVX2 kernels on an AVX-512 CPU (MHA_ISA=avx2)" build-test "env-independent|whole-run|isa-independent" MHA_ISA=avx2 \
    MHA_TEST_SECONDARY=1 --
fi
if grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
  run "OpenBLAS backend, OPENBLAS_CORETYPE=Haswell" build-test-openblas "env-independent|no-gemm|whole-run" OPENBLAS_CORETYPE=Haswell \
    MHA_TEST_SECONDARY=1 -- -DCMAKE_BUILD_TYPE=Release -DMHA_BLAS=openblas
else
  run "OpenBLAS backend" build-test-openblas "env-independent|no-gemm|whole-run" MHA_TEST_SECONDARY=1 -- -DCMAKE_BUILD_TYPE=Release -DMHA_BLAS=openblas
fi
# Where this CPU runs the AVX-512 kernels (the release build's mha says so,
# whatever MHA_ISA the user has set), the two builds below leave out the
# tests' emulations of them (-DMHA_TEST_EMULATIONS=OFF: tests/*_gen16.c and
# attn_avx2w32.c, 44-51 s of CPU to compile in each, and their checks):
# their tests run the real AVX-512 kernels, which the release run has
# checked bit for bit against the emulations. Elsewhere the emulations are
# how every build tests the AVX-512 bodies.
emulations=(-DMHA_TEST_EMULATIONS=ON) # said each time: a build directory remembers it
if env -u MHA_ISA build-test/mha --version | grep -q 'kernels avx512'; then
  emulations=(-DMHA_TEST_EMULATIONS=OFF)
fi
# RelWithDebInfo: debug assertions on, and line numbers for valgrind
run "no OpenMP, no BLAS" build-test-noomp "" MHA_TEST_SECONDARY=1 -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMHA_OPENMP=OFF -DMHA_BLAS=builtin -DMHA_MPI=OFF \
  "${emulations[@]}"
# valgrind.sh runs one program at a time, on one core, for two minutes:
# beside the sanitizer build and its tests, with its output held back and
# printed after them. Its CPU seconds are its own (times in its subshell);
# the ASan rows include them too, bash counts a child when it reaps it.
vg_t0=$EPOCHREALTIME
( rc=0; scripts/valgrind.sh build-test-noomp || rc=$?
  times >"$vg_out.times"; echo "valgrind_wall $vg_t0 $EPOCHREALTIME"; exit $rc ) >"$vg_out" 2>&1 &
vg_pid=$!
run "ASan+UBSan" build-test-asan "" ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    MHA_TEST_SECONDARY=1 -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMHA_SANITIZE=ON -DMHA_MPI=OFF "${emulations[@]}"
echo "=== valgrind memcheck (the no-OpenMP build; it ran beside ASan+UBSan)"
vg_rc=0
wait "$vg_pid" || vg_rc=$?
grep -v '^valgrind_wall ' "$vg_out" || true
vg_cpu=$(children_cpu "$vg_out.times" 2>/dev/null || echo 0)
table+=("$(awk -v l="  valgrind.sh build-test-noomp (beside ASan)" -v c="$vg_cpu" \
  '/^valgrind_wall / { printf "%-48s %7.0f %7.0f", l, $3 - $2, c }' "$vg_out")")
[ "$vg_rc" -eq 0 ] || { echo "valgrind.sh failed"; exit 1; }
echo "all test configurations passed"
printf '%-48s %7s %7s\n' "step" "wall s" "CPU s"
printf '%s\n' "${table[@]}"
cpu_s
awk -v t="$SECONDS" -v c="$cpu" 'BEGIN { printf "%-48s %7d %7.0f\n", "total", t, c }'
