#!/usr/bin/env bash
# valgrind memcheck over the library's public API and every CLI command, on
# tiny shapes, in one build without OpenMP (libgomp's thread pool is not
# valgrind's business, and its start-up is most of a tiny run's cost):
#   scripts/valgrind.sh BUILD_DIR      (cmake -DMHA_OPENMP=OFF, built)
# scripts/test.sh runs it on its no-OpenMP build (RelWithDebInfo: line
# numbers in the reports, debug assertions on). It fails on any memcheck
# error (invalid access, use of an uninitialised value, a definite or
# indirect leak), on a non-zero exit of a program, and when
# tests/test_api_tour.c does not call every function libmha.so exports.
# What runs, each under memcheck:
#   - tests/test_api_tour (every public function), with the best kernels
#     and with MHA_ISA=ref; tests/test_book (the book's numbers),
#     tests/test_modules and tests/test_backward (their error paths;
#     test_backward --quick, without its 520-row finite differences, which
#     are its own double oracle's time, and with two of its four
#     short-last-slice shapes, the reference attention's time: every
#     build's ctest runs them all);
#   - each mha command once: help, version, demo, trace (and --svg), init
#     (a module and a GPTModel), run and grad (eval and --train), train,
#     generate (KV cache and not, sampling), tokenize (and --decode), bench
#     (a module, --backward, a GPTModel);
#   - tests/torch_modules_diff.py on its first cases, with the binary
#     replaced by a valgrind wrapper ($MHA_BIN): the CLI's results checked
#     against PyTorch while memcheck watches. MHA_VALGRIND_CASES sets the
#     count (default 3; 0 skips it). Without torch for /usr/bin/python3
#     it is skipped, or under CI a failure (tests/oracle.sh).
# Valgrind cannot run AVX-512 instructions: on an AVX-512 CPU the kernels
# are capped at AVX2 (MHA_ISA=avx2; valgrind's CPUID hides AVX-512 anyway,
# this makes it explicit).
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:?usage: scripts/valgrind.sh BUILD_DIR}" && pwd)
src=$(pwd)
command -v valgrind >/dev/null || { echo "valgrind.sh: valgrind is not installed (scripts/deps.sh --test)" >&2; exit 1; }
grep -q '^MHA_OPENMP:BOOL=OFF' "$build/CMakeCache.txt" ||
  { echo "valgrind.sh: $build is an OpenMP build; configure one with -DMHA_OPENMP=OFF" >&2; exit 1; }
for f in mha tests/test_api_tour tests/test_book tests/test_modules tests/test_backward libmha.so; do
  [ -e "$build/$f" ] || { echo "valgrind.sh: $build/$f is missing (build it first)" >&2; exit 1; }
done
if grep -qw avx512f /proc/cpuinfo 2>/dev/null && [ "${MHA_ISA:-}" != ref ]; then
  export MHA_ISA=avx2
fi

vg=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect
    --show-leak-kinds=definite,indirect)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
n=0
t0=$(date +%s)

# run LABEL CMD...: CMD under memcheck, its output kept for a failure
run() {
  local label=$1; shift
  n=$((n + 1))
  local t=$EPOCHREALTIME
  if "${vg[@]}" "$@" >"$tmp/out" 2>&1 </dev/null; then
    [ -z "${MHA_VALGRIND_VERBOSE:-}" ] || awk -v a="$t" -v b="$EPOCHREALTIME" -v l="$label" 'BEGIN { printf "ok %5.1f s  %s\n", b - a, l }'
  else
    local rc=$?
    failed=$((failed + 1))
    echo "FAIL ($rc) $label: $*"
    sed 's/^/    /' "$tmp/out" | tail -40
  fi
}

# 1. the tour reaches every exported function
nm -D --defined-only "$build/libmha.so" | awk '$2 == "T" && $3 ~ /^mha_/ {print $3}' | sort >"$tmp/api"
nm -u "$build/tests/CMakeFiles/test_api_tour.dir/test_api_tour.c.o" |
  awk '$2 ~ /^mha_/ {print $2}' | sort -u >"$tmp/called"
missing=$(comm -23 "$tmp/api" "$tmp/called")
if [ -n "$missing" ] || [ ! -s "$tmp/api" ]; then
  failed=$((failed + 1))
  echo "FAIL tests/test_api_tour.c does not call:" $missing
fi

# 2. C programs
run "API tour" "$build/tests/test_api_tour"
MHA_ISA=ref run "API tour, reference kernels" "$build/tests/test_api_tour"
run "the book's numbers" "$build/tests/test_book"
run "modules: errors, workspaces, traced forward" "$build/tests/test_modules"
run "backward: errors, the tape, every kernel set" "$build/tests/test_backward" --quick

# 3. every command
mha=$build/mha
export MHA_TOKENIZER_DIR=$src/data/gpt2
run help "$mha" --help
run "help run" "$mha" help run
run version "$mha" --version
run demo "$mha" demo
run trace "$mha" trace --train --svg "$tmp/t.svg"
run "init module" "$mha" init MultiHeadAttention --d-in 4 --d-out 4 --context-length 8 --num-heads 2 \
  --dropout 0.5 --qkv-bias --seed 1 -o "$tmp/m.safetensors"
run "init GPTModel" "$mha" init GPTModel --vocab-size 50257 --context-length 8 --emb-dim 8 --n-heads 2 \
  --n-layers 2 --seed 2 -o "$tmp/gpt.safetensors"
if /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  # an input for run and grad: x (2, 5, 4) and dy (2, 5, 4)
  PYTHONPATH=$src/tests /usr/bin/python3 -c "
import numpy as np, st, sys
r = np.random.default_rng(0)
st.write(sys.argv[1], {'x': r.standard_normal((2, 5, 4)).astype(np.float32),
                       'dy': r.standard_normal((2, 5, 4)).astype(np.float32)})" "$tmp/x.safetensors"
  run "run" "$mha" run "$tmp/m.safetensors" -i "$tmp/x.safetensors" -o "$tmp/y.safetensors"
  run "run --train" "$mha" run "$tmp/m.safetensors" -i "$tmp/x.safetensors" -o "$tmp/y.safetensors" --train --seed 3
  run "grad --train" "$mha" grad "$tmp/m.safetensors" -i "$tmp/x.safetensors" -o "$tmp/g.safetensors" --train --seed 3
else
  echo "valgrind.sh: no numpy for /usr/bin/python3: run and grad not checked"
fi
run train "$mha" train --steps 3 --batch 2 --tokens 6 --emb-dim 8 --num-heads 2 --dropout 0.1 \
  --checkpoint-every 2 --out "$tmp/train"
run "train --resume" "$mha" train --steps 4 --batch 2 --tokens 6 --emb-dim 8 --num-heads 2 --dropout 0.1 \
  --checkpoint-every 2 --out "$tmp/train" --resume
run generate "$mha" generate "$tmp/gpt.safetensors" --prompt "Hi" --max-new-tokens 9 --json
run "generate, sampling, no cache" "$mha" generate "$tmp/gpt.safetensors" --ids 1,2,3 --max-new-tokens 3 \
  --no-kv-cache --temperature 0.7 --top-k 5 --seed 4
run tokenize "$mha" tokenize --json "Hello, world"
run "tokenize --decode" "$mha" tokenize --decode 15496,11,995
run bench "$mha" bench --batch 2 --tokens 9 --d-in 8 --d-out 8 --num-heads 2 --repeat 1 --warmup 0 --train
run "bench --backward" "$mha" bench --batch 1 --tokens 9 --d-in 8 --d-out 8 --num-heads 2 --repeat 1 \
  --warmup 0 --backward --philox
run "bench GPTModel" "$mha" bench GPTModel --weights "$tmp/gpt.safetensors" --prompt-tokens 6 --decode 2 --rounds 2
run "bench GPTModel --against" "$mha" bench GPTModel --weights "$tmp/gpt.safetensors" --prompt-tokens 6 --decode 2 \
  --rounds 2 --dtype bf16 --against f32

# 4. a CLI test against PyTorch with the binary under memcheck
cases=${MHA_VALGRIND_CASES:-3}
if [ "$cases" -gt 0 ] && ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  . tests/oracle.sh
  rc=0
  oracle_missing valgrind.sh "no torch for /usr/bin/python3 (Debian's python3-torch): torch_modules_diff.py not run" \
    || rc=$?
  [ $rc -eq 77 ] || failed=$((failed + 1))
elif [ "$cases" -gt 0 ]; then
  printf '#!/bin/sh\nexec %s "%s" "$@"\n' "${vg[*]}" "$mha" >"$tmp/mha-vg"
  chmod +x "$tmp/mha-vg"
  n=$((n + 1))
  if ! MHA_BIN=$tmp/mha-vg PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 tests/torch_modules_diff.py \
      --count "$cases" >"$tmp/out" 2>&1; then
    failed=$((failed + 1))
    echo "FAIL torch_modules_diff.py --count $cases under memcheck"
    tail -40 "$tmp/out" | sed 's/^/    /'
  fi
fi

echo "valgrind: $n runs, $failed failed, $(($(date +%s) - t0)) s (kernels ${MHA_ISA:-best})"
[ "$failed" -eq 0 ]
