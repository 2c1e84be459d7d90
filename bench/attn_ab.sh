#!/usr/bin/env bash
# Fused attention kernels, several builds side by side in one process
# (bench/attn_ab.c): each VARIANT compiles attn_fwd_body.h and
# attn_bwd_body.h for one ISA with its own name, flags and source tree, and
# one program times them all, round after round, on one thread. Use it to
# tell a kernel change or a tunable (attn_tunables.h) from the host's
# noise, which moves bench_attn_core by 3-5% between runs; two copies of
# the same build differ by 0.5-2.5% here. Exits non-zero when a variant's
# output differs from the first's in any bit.
#
#   bench/attn_ab.sh [--avx2] [--fwd] [--tokens T] [--heads N] [--rounds R] [--contig]
#                    VARIANT...
#   VARIANT: NAME[:SRCDIR[:CFLAGS]]
#     NAME    a C identifier (the kernels become mha__attn_fwd_NAME, ...)
#     SRCDIR  a tree holding src/ and include/ (default: this repository),
#             e.g. a patched copy
#     CFLAGS  e.g. -DMHA_ATTN_AVX512_BWD_NP=1 (a tunable's override)
#   --avx2    the AVX2 bodies (default AVX-512, on an AVX-512 CPU)
#   --fwd     time the forward (default the backward)
#   --tokens  T (default 1024), --heads N GPT-2 heads (default 24; 12 per
#             batch element), --rounds R (default 15)
#   --contig  the backward also with Q and dO as contiguous per-head copies
# Needs a built library: MHA_BUILD (default build) with libmha.a and mha.pc.
# Example: the backward's q-block of 1 panel against 2, and a copy of the
# same build (the noise):
#   bench/attn_ab.sh np2: np1::-DMHA_ATTN_AVX512_BWD_NP=1 np2b:
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=${MHA_BUILD:-$repo/build}
isa=avx512 mode=bwd tokens=1024 heads=24 rounds=15 contig=
while [ $# -gt 0 ]; do
  case "$1" in
    --avx2) isa=avx2 ;;
    --fwd) mode=fwd ;;
    --tokens) tokens=${2:?--tokens needs a value}; shift ;;
    --heads) heads=${2:?--heads needs a value}; shift ;;
    --rounds) rounds=${2:?--rounds needs a value}; shift ;;
    --contig) contig=contig ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    -*) echo "attn_ab.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
[ $# -ge 1 ] || { echo "attn_ab.sh: name at least one VARIANT (see --help)" >&2; exit 2; }
if [ ! -f "$build/libmha.a" ] || [ ! -f "$build/mha.pc" ]; then
  echo "attn_ab.sh: no libmha.a and mha.pc in $build (build first, or set MHA_BUILD)" >&2; exit 1
fi
if [ $isa = avx512 ]; then
  grep -q avx512vl /proc/cpuinfo ||
    { echo "attn_ab.sh: this CPU lacks AVX-512; use --avx2" >&2; exit 1; }
  isaflags="-mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma -mf16c"
  tune=ATTN_TUNE_AVX512 layer=simd_avx512.h
else
  grep -qw avx2 /proc/cpuinfo || { echo "attn_ab.sh: this CPU lacks AVX2" >&2; exit 1; }
  isaflags="-mavx2 -mfma -mf16c" tune=ATTN_TUNE_AVX2 layer=simd_avx2.h
fi
cc=${CC:-cc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '#define %s\n#include "%s"\n#include "attn_tunables.h"\n#include "attn_fwd_body.h"\n#include "attn_bwd_body.h"\n' \
  $tune $layer > "$work/variant.c"
objs=() names=""
for spec in "$@"; do
  IFS=: read -r name src flags <<< "$spec"
  src=${src:-$repo}
  [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || { echo "attn_ab.sh: '$name' is not a C identifier" >&2; exit 2; }
  [ -d "$src/src/kernels" ] || { echo "attn_ab.sh: $src has no src/kernels" >&2; exit 1; }
  # shellcheck disable=SC2086 # the flags are words
  $cc -DMHA_BUILDING_LIBRARY=1 -I"$src/include" -I"$src/src" -I"$src/src/kernels" -O2 -DNDEBUG \
    -ffp-contract=off -fno-math-errno -std=gnu11 $isaflags -DMHA_KSFX="$name" ${flags:-} \
    -c "$work/variant.c" -o "$work/$name.o"
  objs+=("$work/$name.o") names="$names X($name)"
done
echo "#define ATTN_AB_VARS(X)$names" > "$work/attn_ab_vars.h"
libs=$(PKG_CONFIG_PATH=$build pkg-config --static --libs-only-l mha | sed 's/-lmha//')
# shellcheck disable=SC2086
$cc -O2 -std=gnu11 -fopenmp -I"$work" -I"$repo/src" -I"$repo/include" "$here/attn_ab.c" "${objs[@]}" \
  "$build/libmha.a" $libs -o "$work/attn_ab"
OMP_NUM_THREADS=1 "$work/attn_ab" "$tokens" "$heads" "$rounds" $mode $contig
