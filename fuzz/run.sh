#!/bin/sh
# run.sh — one libFuzzer campaign on one target:
#
#   fuzz/run.sh TARGET SECONDS        e.g. fuzz/run.sh tokenizer 600
#
# TARGET is a fuzz/fuzz_TARGET.c (safetensors, metadata, cli_options,
# tokenizer, gpt_names). Configures and builds the libFuzzer build in
# build-fuzz (override with MHA_FUZZ_BUILD) if needed: clang, ASan + UBSan,
# single-threaded library (no OpenMP, builtin GEMM). The campaign runs at
# nice 10 on a copy of the binary (a rebuild does not disturb it), writes new
# inputs and any crash into a scratch directory (MHA_FUZZ_OUT, default
# out/fuzz/TARGET), then merges the inputs that add coverage into
# fuzz/corpus/TARGET with -merge=1 and prints the execution count from
# libFuzzer's final stats. MHA_FUZZ_RUNS=N stops after N executions instead
# of the time limit; extra libFuzzer flags go in MHA_FUZZ_FLAGS.
#
# Exit status: 0 when the campaign ended without a finding, 1 otherwise
# (the crash, leak or timeout input is in the scratch directory).
set -eu

if [ $# -ne 2 ]; then
    echo "usage: fuzz/run.sh TARGET SECONDS" >&2
    exit 2
fi
target=$1
seconds=$2
root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/fuzz/fuzz_$target.c
if [ ! -f "$src" ]; then
    echo "run.sh: no fuzz target $target ($src)" >&2
    exit 2
fi
build=${MHA_FUZZ_BUILD:-$root/build-fuzz}
out=${MHA_FUZZ_OUT:-$root/out/fuzz/$target}
corpus=$root/fuzz/corpus/$target

# small inputs keep the targets fast; gpt_names and safetensors need room
# for a header plus a few tiny tensors
case $target in
    safetensors) max_len=4096 ;;
    gpt_names) max_len=8192 ;;
    metadata) max_len=512 ;;
    *) max_len=128 ;;
esac

if [ ! -f "$build/CMakeCache.txt" ]; then
    CC=${CC:-clang} cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
        -DMHA_LIBFUZZER=ON -DMHA_OPENMP=OFF -DMHA_BLAS=builtin >/dev/null
fi
nice -n 10 cmake --build "$build" -j2 --target "fuzz_$target" >/dev/null

mkdir -p "$out/new" "$corpus"
cp "$build/fuzz/fuzz_$target" "$out/fuzz_$target"
dict=
[ -f "$root/fuzz/$target.dict" ] && dict=-dict=$root/fuzz/$target.dict
if [ -n "${MHA_FUZZ_RUNS:-}" ]; then
    limit=-runs=$MHA_FUZZ_RUNS
else
    limit=-max_total_time=$seconds
fi
log=$out/campaign.log
status=0
# shellcheck disable=SC2086  # $dict and MHA_FUZZ_FLAGS split on purpose
OMP_NUM_THREADS=1 nice -n 10 "$out/fuzz_$target" $limit -max_len=$max_len \
    -print_final_stats=1 -artifact_prefix="$out/" $dict ${MHA_FUZZ_FLAGS:-} \
    "$out/new" "$corpus" >"$log" 2>&1 || status=1

# inputs that add coverage join the committed corpus
OMP_NUM_THREADS=1 nice -n 10 "$out/fuzz_$target" -merge=1 \
    -max_len=$max_len "$corpus" "$out/new" >"$out/merge.log" 2>&1 || status=1

execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
findings=$(ls "$out" | grep -c -E '^(crash|leak|timeout|oom|slow-unit)-' || true)
echo "fuzz_$target: ${execs:-?} executions, ${rate:-?} exec/s," \
    "$findings findings, corpus $(ls "$corpus" | wc -l) files (log $log)"
exit $status
