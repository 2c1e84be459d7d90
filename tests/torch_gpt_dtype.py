"""16-bit weights for inference (`--dtype bf16|f16`) against PyTorch.

For a book GPTModel (untied, qkv_bias), a Hugging Face-named one (tied
head, Conv1D weights transposed at load) and a TransformerBlock:
  rounding  `mha convert --dtype bf16|f16` writes each matrix as torch's
            w.to(torch.bfloat16) / w.half() bits, the vectors F32 as they were;
  exact     `mha run --dtype D` equals the book's torch model whose matrices
            were rounded the same way (F32 arithmetic on the rounded weights:
            within 1e-4 of max|logits|, as the F32 path against torch), and
            equals, bit for bit, mha's F32 run of the converted file (the
            widening is exact and the tiles the same), at 1 and 2 threads;
  file      --dtype D on the converted file equals --dtype D on the F32 file;
  error     max|logits_D - logits_F32| / max|logits_F32| on these random
            weights, printed and bounded (bf16 < 2e-2, f16 < 3e-3);
  decode    `mha generate --dtype D` with and without the KV cache (the GEMV
            and the GEMM tiles) gives the greedy ids of torch's rounded model;
Then bad input: a weight beyond F16's range, an unknown dtype, --dtype on a
chapter 3 module, converting a file onto itself; one line, status 1.

Usage: torch_gpt_dtype.py [--bin PATH]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402
import book_gpt as bg  # noqa: E402
import torch  # noqa: E402

fails = 0


def fail(msg):
    global fails
    fails += 1
    print("FAIL " + msg, flush=True)


def run(cmd, timeout=600):
    p = subprocess.run([str(a) for a in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def must(cmd):
    rc, out, err = run(cmd)
    if rc != 0:
        fail("%s: exit %d: %s" % (" ".join(str(c) for c in cmd[:4]), rc, err.strip()))
    return rc == 0, out


TORCH_DT = {"bf16": torch.bfloat16, "f16": torch.float16}
ST_DT = {"bf16": "BF16", "f16": "F16"}


def read_raw(path):
    """name -> (dtype string, uint16 / float32 array) from a safetensors file (BF16 as raw bits)."""
    with open(path, "rb") as f:
        buf = f.read()
    n = int.from_bytes(buf[:8], "little")
    header = json.loads(buf[8:8 + n])
    data = buf[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        dt = {"BF16": "<u2", "F16": "<u2", "F32": "<f4"}[info["dtype"]]
        out[name] = (info["dtype"], np.frombuffer(data[b:e], dtype=dt).reshape(info["shape"]))
    return out


def bits16(t, dtype):
    """torch's 16-bit bits of an F32 tensor, as uint16."""
    return t.detach().to(TORCH_DT[dtype]).view(torch.int16).numpy().view(np.uint16)


def rounded_model(model, dtype, kind):
    """A copy of the book model with every matrix rounded to dtype and back (vectors kept)."""
    cfg = model.cfg
    r = (bg.GPTModel(cfg) if kind == "GPTModel" else bg.TransformerBlock(cfg)).eval()
    r.load_state_dict(model.state_dict())
    with torch.no_grad():
        for name, p in r.named_parameters():
            if p.dim() == 2:
                p.copy_(p.to(TORCH_DT[dtype]).float())
    if kind == "GPTModel" and model.out_head.weight is model.tok_emb.weight:
        r.out_head.weight = r.tok_emb.weight
    return r


def bitwise(a, b):
    return a.shape == b.shape and (a.view(np.uint32) == b.view(np.uint32)).all()


def check_model(binary, tmp, label, kind, model, f_w, inp, x, outname, stats, hf=False):
    with torch.no_grad():
        ref32 = model(x).numpy()
    scale = float(np.abs(ref32).max())
    for dtype in ("bf16", "f16"):
        what = "%s %s" % (label, dtype)
        f_c = os.path.join(tmp, "%s_%s.safetensors" % (label, dtype))
        ok, _ = must([binary, "convert", f_w, "-o", f_c, "--dtype", dtype])
        if not ok:
            continue
        # rounding: torch's bits for each matrix, the vectors as they were
        raw = read_raw(f_c)
        sd = model.state_dict()
        for name, t in sd.items():
            if name.endswith("att.mask"):
                continue
            if name not in raw:
                fail("%s: convert lost %s" % (what, name))
                continue
            dt, a = raw[name]
            if t.dim() == 2:
                if dt != ST_DT[dtype] or not (a == bits16(t, dtype)).all():
                    fail("%s: %s is %s, not torch's %s bits" % (what, name, dt, dtype))
            elif dt != "F32" or not (a == t.detach().numpy()).all():
                fail("%s: vector %s changed (%s)" % (what, name, dt))
        rmodel = rounded_model(model, dtype, kind)
        with torch.no_grad():
            ref = rmodel(x).numpy()
        outs = {}
        for src, f in (("f32file", f_w), ("16file", f_c)):
            for threads in (1, 2):
                f_out = os.path.join(tmp, "out.safetensors")
                ok, _ = must([binary, "run", f, "-i", inp, "-o", f_out, "--dtype", dtype, "--threads", threads])
                if ok:
                    outs[(src, threads)] = st.read(f_out)[0][outname]
        f_out = os.path.join(tmp, "out.safetensors")
        ok, _ = must([binary, "run", f_c, "-i", inp, "-o", f_out, "--threads", 2])  # F32 on the rounded weights
        widened = st.read(f_out)[0][outname] if ok else None
        if len(outs) < 4 or widened is None:
            continue
        got = outs[("f32file", 2)]
        err_ref = float(np.abs(got.astype(np.float64) - ref).max()) / scale
        if not err_ref <= 1e-4:
            fail("%s: vs torch on the rounded weights: %.3g of max|logits|" % (what, err_ref))
        for k, v in outs.items():
            if not bitwise(v, got):
                fail("%s: %s at %d threads differs in bits from the F32 file at 2 threads" % (what, k[0], k[1]))
        if not bitwise(widened, got):
            fail("%s: differs in bits from mha's F32 run of the converted file" % what)
        err = float(np.abs(got.astype(np.float64) - ref32).max()) / scale
        bound = 2e-2 if dtype == "bf16" else 3e-3
        print("%-26s max|%s - f32| / max|f32| = %.2e (torch's rounded model: %.2e)" % (what, dtype, err, err_ref))
        stats[what] = err
        if not err <= bound:
            fail("%s: error %.3g against the F32 logits exceeds %g" % (what, err, bound))
        if kind == "GPTModel" and not hf:
            check_generate(binary, what, f_w, dtype, rmodel)


def check_generate(binary, what, f_w, dtype, rmodel):
    prompt = [3, 1, 4, 1, 5]
    n_new = rmodel.pos_emb.weight.shape[0] + 4  # past the context: the window is cropped and refed
    with torch.no_grad():
        want = bg.generate_text_simple(rmodel, torch.tensor([prompt]), n_new, rmodel.pos_emb.weight.shape[0])
    want = want[0].tolist()
    for extra in ([], ["--no-kv-cache"]):
        ok, out = must([binary, "generate", f_w, "--ids", ",".join(map(str, prompt)), "--max-new-tokens", n_new,
                        "--dtype", dtype, "--json"] + extra)
        if not ok:
            continue
        ids = json.loads(out.strip().splitlines()[-1])["ids"]
        if ids != want:
            fail("%s generate %s: %s, torch's rounded model %s" % (what, extra, ids, want))


def check_errors(binary, tmp, f_w):
    big = os.path.join(tmp, "big.safetensors")
    t, meta = st.read(f_w)
    t = dict(t)
    w = t["trf_blocks.0.ff.layers.0.weight"].copy()
    w[1, 2] = 7.0e4
    t["trf_blocks.0.ff.layers.0.weight"] = w
    st.write(big, t, meta)
    inp = os.path.join(tmp, "in_gpt.safetensors")
    cases = [
        ("f16 overflow", [binary, "run", big, "-i", inp, "-o", os.path.join(tmp, "x.safetensors"), "--dtype", "f16"],
         "beyond f16's range"),
        ("convert f16 overflow", [binary, "convert", big, "-o", os.path.join(tmp, "x.safetensors"), "--dtype", "f16"],
         "beyond f16's range"),
        ("unknown dtype", [binary, "generate", f_w, "--ids", "1", "--dtype", "int8"], "not a weight dtype"),
        ("convert onto itself", [binary, "convert", f_w, "-o", f_w, "--dtype", "bf16"], "WEIGHTS itself"),
        ("convert without dtype", [binary, "convert", f_w, "-o", os.path.join(tmp, "y.safetensors")], "--dtype"),
        ("grad --dtype", [binary, "grad", f_w, "-i", inp, "-o", os.path.join(tmp, "x.safetensors"), "--dtype", "bf16"],
         "unknown option"),
    ]
    mod = os.path.join(tmp, "mha.safetensors")
    if must([binary, "init", "MultiHeadAttention", "--d-in", 4, "--d-out", 4, "--context-length", 4, "--num-heads", 2, "--seed", 1,
             "-o", mod])[0]:
        cases.append(("module --dtype", [binary, "run", mod, "-i", inp, "-o", os.path.join(tmp, "x.safetensors"),
                                         "--dtype", "bf16"], "modules run in f32"))
    before = open(f_w, "rb").read()
    for name, cmd, want in cases:
        rc, out, err = run(cmd)
        lines = [l for l in err.strip().splitlines() if l]
        if rc != 1 or len(lines) != 1 or want not in err:
            fail("%s: exit %d, stderr %r (want one line with %r)" % (name, rc, err.strip()[:200], want))
    if open(f_w, "rb").read() != before:
        fail("a refused convert changed its input")
    # the 16-bit model trains nowhere: bench --train-step and train take no --dtype
    rc, _, err = run([binary, "bench", "GPTModel", "--train-step", "--dtype", "bf16"])
    if rc != 1:
        fail("bench --train-step --dtype: exit %d (%s)" % (rc, err.strip()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=None)
    args = ap.parse_args()
    binary = args.bin or st.find_bin()
    stats = {}
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(11)
        # a book GPTModel, untied, qkv_bias
        cfg = {"vocab_size": 300, "context_length": 24, "emb_dim": 64, "n_heads": 4, "n_layers": 2,
               "drop_rate": 0.1, "qkv_bias": True}
        torch.manual_seed(7)
        model = bg.GPTModel(cfg).eval()
        model.cfg = cfg
        f_w = os.path.join(tmp, "gpt.safetensors")
        sd = {k: v.detach().numpy() for k, v in model.state_dict().items() if not k.endswith("att.mask")}
        meta = {"module": "GPTModel"}
        meta.update({k: ("true" if v else "false") if k == "qkv_bias" else str(v) for k, v in cfg.items()})
        st.write(f_w, sd, meta)
        idx = rng.integers(0, cfg["vocab_size"], size=(3, 19)).astype(np.int64)
        inp = os.path.join(tmp, "in_gpt.safetensors")
        st.write(inp, {"idx": idx})
        check_model(binary, tmp, "GPTModel", "GPTModel", model, f_w, inp, torch.from_numpy(idx), "logits", stats)

        # Hugging Face names, tied head
        cfg_h = dict(cfg, drop_rate=0.0, emb_dim=96, n_heads=3)
        torch.manual_seed(8)
        hmodel = bg.GPTModel(cfg_h).eval()
        hmodel.out_head.weight = hmodel.tok_emb.weight
        hmodel.cfg = cfg_h
        f_h = os.path.join(tmp, "hf.safetensors")
        st.write(f_h, bg.to_hf(hmodel.state_dict(), cfg_h["n_layers"]), {"format": "pt", "n_heads": "3"})
        check_model(binary, tmp, "GPTModel(HF, tied)", "GPTModel", hmodel, f_h, inp, torch.from_numpy(idx), "logits",
                    stats, hf=True)

        # a TransformerBlock
        cfg_b = {"emb_dim": 48, "context_length": 16, "n_heads": 2, "drop_rate": 0.0, "qkv_bias": False}
        torch.manual_seed(9)
        block = bg.TransformerBlock(cfg_b).eval()
        block.cfg = cfg_b
        f_b = os.path.join(tmp, "block.safetensors")
        sd = {k: v.detach().numpy() for k, v in block.state_dict().items() if not k.endswith("att.mask")}
        meta = {"module": "TransformerBlock"}
        meta.update({k: ("true" if v else "false") if k == "qkv_bias" else str(v) for k, v in cfg_b.items()})
        st.write(f_b, sd, meta)
        xb = rng.standard_normal((2, 16, 48)).astype(np.float32)
        inp_b = os.path.join(tmp, "in_block.safetensors")
        st.write(inp_b, {"x": xb})
        check_model(binary, tmp, "TransformerBlock", "TransformerBlock", block, f_b, inp_b, torch.from_numpy(xb), "y",
                    stats)

        check_errors(binary, tmp, f_w)
    print("torch_gpt_dtype: %s" % ("%d failure(s)" % fails if fails else "all passed"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
