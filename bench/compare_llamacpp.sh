#!/usr/bin/env bash
# GPT-2 124M (F32, Hugging Face names, tied head) in mha and in llama.cpp on
# the same weights, in one run: prefill of 1024 tokens and 64 decode steps,
# 2 threads by default, each side's best of 3, then the ratios; PyTorch's
# book model on the same weights beside them (bench/torch_gpt.py, under
# OMP_WAIT_POLICY=PASSIVE as issue 8 asks; NO_TORCH=1 skips it).
#   bench/compare_llamacpp.sh [DIR=/tmp/llamacpp] [THREADS=2]
# DIR gets node-llama-cpp 3.22.1 (npm; its CPU builds ship in the package)
# and the weights (bench/llamacpp/setup.sh: the book's GPTModel, seed 123,
# qkv_bias, as gpt2.gguf and gpt2_hf.safetensors). Needs node, npm and
# Debian's torch; build mha first (build/mha).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-/tmp/llamacpp}
threads=${2:-2}
mha=${MHA_BIN:-$here/../build/mha}
"$here/llamacpp/setup.sh" "$dir"
m=$("$mha" bench GPTModel --weights "$dir/gpt2_hf.safetensors" --prompt-tokens 1024 --decode 64 --rounds 3 \
      --threads "$threads" --json | tail -1)
l=$(cd "$dir" && node bench.js gpt2.gguf "$threads" 3 2>/dev/null | tail -1)
t='{}'
if [ -z "${NO_TORCH:-}" ]; then
  t=$(/usr/bin/python3 "$here/torch_gpt.py" --threads "$threads" --prompt-tokens 1024 --decode 64 --rounds 3 | tail -1)
fi
echo "mha:       $m"
echo "llama.cpp: $l"
echo "torch:     $t"
/usr/bin/python3 - "$m" "$l" "$t" <<'PY'
import json, sys
m, l, t = (json.loads(a) for a in sys.argv[1:4])
print("prefill 1024: mha %.1f tokens/s, llama.cpp %.1f -> %.2fx" % (
    m["prefill_tokens_per_s"], l["prefill_1024_tok_s"], m["prefill_tokens_per_s"] / l["prefill_1024_tok_s"]))
print("decode:       mha %.2f tokens/s, llama.cpp %.2f -> %.2fx" % (
    m["decode_tokens_per_s"], l["decode_tok_s"], m["decode_tokens_per_s"] / l["decode_tok_s"]))
print("decode / reading the weights once at %.1f GB/s (%.1f ms): %.2f; peak RSS %.0f MiB" % (
    m["stream_read_gbps"], m["weights_read_ms"], m["decode_ms_per_token"] / m["weights_read_ms"], m["peak_rss_mib"]))
if t:
    print("torch %s (book code, OMP_WAIT_POLICY=%s): prefill %.1f tokens/s (mha %.2fx), decode %.2f tokens/s "
          "without a KV cache (mha %.2fx)" % (
        t["torch"], t["omp_wait_policy"], t["prefill_tokens_per_s"],
        m["prefill_tokens_per_s"] / t["prefill_tokens_per_s"], t["decode_tokens_per_s"],
        m["decode_tokens_per_s"] / t["decode_tokens_per_s"]))
PY
