#!/usr/bin/env bash
# GPT-2 (F32, Hugging Face names, tied head) in mha and in llama.cpp on the
# same weights, in one run: prefill of 1024 tokens and 64 decode steps,
# 2 threads by default, each side's best of 3, then the ratios; llama.cpp
# also on the same weights in F16 (its 16-bit figure); PyTorch's book model
# on the same weights beside them (bench/torch_gpt.py, under
# OMP_WAIT_POLICY=PASSIVE as issue 8 asks; NO_TORCH=1 skips it).
#   bench/compare_llamacpp.sh [DIR=/tmp/llamacpp] [THREADS=2] [SIZE=124M|medium|large|xl]
# DIR gets node-llama-cpp 3.22.1 (npm; its CPU builds ship in the package)
# and the 124M weights (setup.sh: the book's GPTModel, seed 123, qkv_bias,
# as gpt2.gguf, gpt2_f16.gguf and gpt2_hf.safetensors); other sizes are
# written once by bench/make_gguf_size.py (gpt2-SIZE*.gguf/.safetensors;
# medium 1.4 GB per copy, xl 6.2). setup.sh: $LLAMACPP_SETUP, default
# ../shared/bench/llamacpp/setup.sh (it writes the F16 file), else
# bench/llamacpp/setup.sh. Needs node, npm and Debian's torch; build mha
# first (build/mha).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-/tmp/llamacpp}
threads=${2:-2}
size=${3:-124M}
mha=${MHA_BIN:-$here/../build/mha}
case "$size" in
  124M) stem=gpt2 ;;
  medium|large|xl) stem=gpt2-$size ;;
  *) echo "compare_llamacpp.sh: size '$size' is not 124M, medium, large or xl" >&2; exit 1 ;;
esac
setup=${LLAMACPP_SETUP:-$here/../../shared/bench/llamacpp/setup.sh}
[ -x "$setup" ] || setup=$here/llamacpp/setup.sh
"$setup" "$dir"
/usr/bin/python3 "$here/make_gguf_size.py" "$size" "$dir"
m=$("$mha" bench GPTModel --weights "$dir/${stem}_hf.safetensors" --prompt-tokens 1024 --decode 64 --rounds 3 \
      --threads "$threads" --json | tail -1)
# the same weights held in bf16 (read F32, rounded once at load): the 16-bit figure
mb=$("$mha" bench GPTModel --weights "$dir/${stem}_hf.safetensors" --dtype bf16 --prompt-tokens 1024 --decode 64 \
      --rounds 3 --threads "$threads" --json | tail -1)
# resident memory at a decode's context (a 4-token prompt, 64 tokens): at the 1024-token prefill
# above the F32 KV cache (72 MiB for 124M) and the prefill's activations weigh on both dtypes alike
rs=$("$mha" bench GPTModel --weights "$dir/${stem}_hf.safetensors" --prompt-tokens 4 --decode 64 --rounds 1 \
      --threads "$threads" --json | tail -1)
rsb=$("$mha" bench GPTModel --weights "$dir/${stem}_hf.safetensors" --dtype bf16 --prompt-tokens 4 --decode 64 \
      --rounds 1 --threads "$threads" --json | tail -1)
# bf16 against F32 in one process, their decodes alternated round by round: the speedup
# the host's minute-to-minute swings leave out of the two runs above
ab=$("$mha" bench GPTModel --weights "$dir/${stem}_hf.safetensors" --dtype bf16 --against f32 --prompt-tokens 4 \
      --decode 64 --rounds 10 --threads "$threads" --json | tail -1)
l=$(cd "$dir" && node bench.js "$stem.gguf" "$threads" 3 2>/dev/null | tail -1)
h='{}'
[ -f "$dir/${stem}_f16.gguf" ] && h=$(cd "$dir" && node bench.js "${stem}_f16.gguf" "$threads" 3 2>/dev/null | tail -1)
t='{}'
if [ -z "${NO_TORCH:-}" ]; then
  t=$(/usr/bin/python3 "$here/torch_gpt.py" --size "$size" --threads "$threads" --prompt-tokens 1024 --decode 64 \
        --rounds 3 | tail -1)
fi
echo "GPT-2 $size, $threads threads"
echo "mha:           $m"
echo "mha bf16:      $mb"
echo "llama.cpp:     $l"
echo "llama.cpp F16: $h"
echo "torch:         $t"
/usr/bin/python3 - "$m" "$l" "$h" "$t" "$mb" "$rs" "$rsb" "$ab" <<'PY'
import json, sys
m, l, h, t, mb, rs, rsb, ab = (json.loads(a) for a in sys.argv[1:9])
print("prefill 1024: mha %.1f tokens/s, llama.cpp %.1f -> %.2fx" % (
    m["prefill_tokens_per_s"], l["prefill_1024_tok_s"], m["prefill_tokens_per_s"] / l["prefill_1024_tok_s"]))
print("decode:       mha %.2f tokens/s, llama.cpp %.2f -> %.2fx" % (
    m["decode_tokens_per_s"], l["decode_tok_s"], m["decode_tokens_per_s"] / l["decode_tok_s"]))
if h:
    print("llama.cpp F16: prefill 1024 %.1f tokens/s, decode %.2f tokens/s (mha F32 decode %.2fx that)" % (
        h["prefill_1024_tok_s"], h["decode_tok_s"], m["decode_tokens_per_s"] / h["decode_tok_s"]))
print("decode / reading the %.0f MiB a step reads at %.1f GB/s, the best of the run's reads (worst %.1f): "
      "%.2f ms -> %.2f; peak RSS %.0f MiB" % (
    m["read_mib"], m["stream_read_gbps"], m["stream_read_gbps_worst"], m["weights_read_ms"],
    m["decode_ms_per_token"] / m["weights_read_ms"], m["peak_rss_mib"]))
print("mha bf16: decode %.2f tokens/s (%.2fx mha F32's), %.2f ms/token = %.2fx reading its %.0f MiB at %.1f GB/s; "
      "prefill 1024 %.1f tokens/s; peak RSS %.0f MiB (%.2fx F32's)" % (
    mb["decode_tokens_per_s"], mb["decode_tokens_per_s"] / m["decode_tokens_per_s"], mb["decode_ms_per_token"],
    mb["decode_ms_per_token"] / mb["weights_read_ms"], mb["read_mib"], mb["stream_read_gbps"],
    mb["prefill_tokens_per_s"], mb["peak_rss_mib"], mb["peak_rss_mib"] / m["peak_rss_mib"]))
print("bf16 / F32 decode in one process, 10 rounds alternated: %.2fx (the median of the rounds' ratios), "
      "%.2fx (the best rounds: %.2f against %.2f ms/token)" % (
    ab["speedup_over_against"], ab["speedup_over_against_best"], ab["decode_ms_per_token"],
    ab["against_decode_ms_per_token"]))
print("peak RSS at a decode's context (4-token prompt, 64 decoded): F32 %.0f MiB, bf16 %.0f MiB (%.2fx)" % (
    rs["peak_rss_mib"], rsb["peak_rss_mib"], rsb["peak_rss_mib"] / rs["peak_rss_mib"]))
if h:
    print("mha bf16 / llama.cpp F16 decode: %.2fx" % (mb["decode_tokens_per_s"] / h["decode_tok_s"]))
if t:
    print("torch %s (book code, OMP_WAIT_POLICY=%s): prefill %.1f tokens/s (mha %.2fx), decode %.2f tokens/s "
          "without a KV cache (mha %.2fx)" % (
        t["torch"], t["omp_wait_policy"], t["prefill_tokens_per_s"],
        m["prefill_tokens_per_s"] / t["prefill_tokens_per_s"], t["decode_tokens_per_s"],
        m["decode_tokens_per_s"] / t["decode_tokens_per_s"]))
PY
