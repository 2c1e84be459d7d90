#!/usr/bin/env bash
# bench/attn_ab.sh end to end (tests/CMakeLists.txt, the release build):
# two builds of the same AVX2 kernels agree bit for bit and both get a
# timing line (exit 0); a variant whose tunable moves the backward's key
# tiles (and so dQ's bits) is reported and fails the run (exit 1).
#   tests/attn_ab.sh SOURCE_DIR BUILD_DIR
set -u
ab=$1/bench/attn_ab.sh
export MHA_BUILD=$2
fail() { echo "$out"; echo "FAIL: $1"; exit 1; }
out=$("$ab" --avx2 --tokens 300 --heads 2 --rounds 2 a: b: 2>&1) || fail "two builds of the same kernels"
grep -q '^b .* x a$' <<< "$out" || fail "no timing line for the second build"
if out=$("$ab" --avx2 --tokens 300 --heads 2 --rounds 1 a: kb::-DMHA_ATTN_AVX2_BWD_KB=128 2>&1); then
  fail "a variant with other bits passed"
fi
grep -q '^kb .*bits differ from a' <<< "$out" || fail "the differing variant was not named"
echo "$out"
echo "attn_ab.sh: OK"
