"""Differential test of mha's chapter 4 backward (mha grad on GPTModel and
TransformerBlock files, the GPT optimizers) against torch autograd on the
book's code (tests/book_gpt.py).

  grad    random small configurations (fixed base seed): eval and
          training-mode dropout (torch.manual_seed(S); model.train()),
          qkv_bias true/false, b > 1, T = 1, targets with -100 (ignored):
          `mha grad` vs F.cross_entropy(model(idx).flatten(0, 1),
          targets.flatten()).backward(): loss within 1e-5 relative, logits
          and every parameter's gradient within 1e-4 of its max|grad|;
          TransformerBlock: y.backward(dy): y, dx and every gradient;
  hf      a Hugging Face-named file (tied head, qkv_bias): grad.tok_emb and
          grad.out_head both the tied tensor's summed gradient;
  fd      a tiny config: mha's gradients against central differences of
          the loss computed by torch in float64 on the same weights;
  threads `mha grad --threads 1|2|3` give the same bytes;
  train   AdamW (and SGD) steps on a tiny GPT over a fixed token sequence
          (tests/gpt_train_driver) vs torch.optim: the loss goes down and
          the parameters after the steps are within 1e-5 of max|param|;
  errors  missing targets, ids out of range, mismatched shapes: one line,
          exit status 1.

Usage: torch_gpt_grad_diff.py [--count N] [--bin PATH] [--driver PATH]
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402
import book_gpt as bg  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

fails = 0


def fail(msg):
    global fails
    fails += 1
    print("FAIL " + msg)


def run(cmd, timeout=600):
    p = subprocess.run([str(a) for a in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def close(got, ref, what, tol=1e-4, rel_to=None):
    """max|got - ref| <= tol * max|ref| (or rel_to); the ratio, or None on a shape mismatch."""
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        fail("%s: shape %s, want %s" % (what, got.shape, ref.shape))
        return None
    scale = max(float(np.abs(ref).max()) if rel_to is None else rel_to, 1e-30)
    err = float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max()) if ref.size else 0.0
    if not err <= tol * scale:
        fail("%s: max |diff| %.3g > %g * %.3g" % (what, err, tol, scale))
    return err / scale


def save_book(path, kind, cfg, model):
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items() if not k.endswith("att.mask")}
    meta = {"module": kind}
    for k, v in cfg.items():
        meta[k] = ("true" if v else "false") if k == "qkv_bias" else str(v)
    st.write(path, sd, meta)


def random_cfg(rng):
    """emb_dim >= 4: LayerNorm over 1 or 2 values is (all but) constant, so
    the gradients below it are rounding noise in torch as in mha."""
    heads = rng.choice([1, 2, 3, 4])
    return {"vocab_size": rng.choice([7, 50, 97, 300]), "context_length": rng.choice([4, 8, 16, 33]),
            "emb_dim": heads * rng.choice([m for m in (1, 2, 4, 8, 12) if heads * m >= 4]), "n_heads": heads,
            "n_layers": rng.choice([1, 2, 3]), "drop_rate": rng.choice([0.0, 0.1, 0.5]),
            "qkv_bias": rng.random() < 0.5}


def torch_grads(model, fn):
    model.zero_grad()
    out = fn()
    return out, {k: (p.grad.numpy().copy() if p.grad is not None else np.zeros(p.shape, np.float32))
                 for k, p in model.named_parameters()}


def compare_grads(got, ref, desc, stats, names=None):
    """Each gradient within 1e-4 of its own max|grad|; but some are zero in
    exact arithmetic: W_key.bias's (it adds q.b to every score of a row,
    which softmax ignores), and with T = 1 W_query's and W_key's (one key:
    the weights are 1 whatever the scores). What both compute there is
    rounding noise (torch's often exact zeros), measured against the largest
    gradient of the whole model instead."""
    top = max(float(np.abs(g).max()) for g in ref.values())
    for k, g in ref.items():
        key = "grad." + k
        if key not in got:
            fail("%s: no %s in the output" % (desc, key))
            continue
        noise = k.endswith("att.W_key.bias") or float(np.abs(g).max()) < 1e-6 * top
        r = close(got[key], g, "%s %s" % (desc, key), rel_to=top if noise else None)
        if r is not None and not noise:
            stats["grad"] = max(stats.get("grad", 0.0), r)
    extra = [k for k in got if k.startswith("grad.") and k[5:] not in (names or ref)]
    if extra:
        fail("%s: unexpected outputs %s" % (desc, extra))


def model_case(binary, tmp, i, cfg, B, T, train, stats, ignore=False):
    seed, train_seed = 2000 + i, 300 + i
    torch.manual_seed(seed)
    model = bg.GPTModel(cfg)
    desc = "GPTModel %s seed %d B=%d T=%d %s" % (cfg, seed, B, T, "train" if train else "eval")
    f_w = os.path.join(tmp, "w_%d.safetensors" % i)
    save_book(f_w, "GPTModel", cfg, model)
    rng = np.random.default_rng(i)
    V = cfg["vocab_size"]
    idx = rng.integers(0, V, size=(B, T))
    targets = rng.integers(0, V, size=(B, T))
    if ignore and B * T > 1:
        targets[0, 0] = -100
    dt = np.int64 if i % 2 else np.int32
    f_in = os.path.join(tmp, "in_%d.safetensors" % i)
    st.write(f_in, {"idx": idx.astype(dt), "targets": targets.astype(dt)})

    def fwd():
        if train:
            torch.manual_seed(train_seed)
            model.train()
        else:
            model.eval()
        logits = model(torch.from_numpy(idx))
        loss = F.cross_entropy(logits.flatten(0, 1), torch.from_numpy(targets).flatten())
        loss.backward()
        return loss.item(), logits.detach().numpy()

    (loss, logits), ref = torch_grads(model, fwd)
    f_out = os.path.join(tmp, "out_%d.safetensors" % i)
    extra = ["--train", "--seed", train_seed] if train else []
    rc, _, err = run([binary, "grad", f_w, "-i", f_in, "-o", f_out] + extra)
    if rc != 0:
        fail("%s: grad exit %d: %s" % (desc, rc, err.strip()))
        return
    got, meta = st.read(f_out)
    if meta.get("module") != "GPTModel":
        fail("%s: metadata %s" % (desc, meta))
    if got["loss"].shape != ():
        fail("%s: loss has shape %s, want ()" % (desc, got["loss"].shape))
    r = close(got["loss"], np.float32(loss), "%s loss" % desc, tol=1e-5)
    if r is not None:
        stats["loss"] = max(stats.get("loss", 0.0), r)
    # the taped forward's logits against torch's (mha run's are torch_gpt_diff's)
    close(got["logits"], logits, "%s logits" % desc)
    compare_grads(got, ref, desc, stats, names=list(ref) + ["out_head.weight"])
    stats["cases"] = stats.get("cases", 0) + 1


def block_case(binary, tmp, i, cfg, B, T, train, stats):
    seed, train_seed = 4000 + i, 500 + i
    torch.manual_seed(seed)
    model = bg.TransformerBlock(cfg)
    desc = "TransformerBlock %s seed %d B=%d T=%d %s" % (cfg, seed, B, T, "train" if train else "eval")
    f_w = os.path.join(tmp, "tb_%d.safetensors" % i)
    save_book(f_w, "TransformerBlock", cfg, model)
    rng = np.random.default_rng(100 + i)
    x = rng.standard_normal((B, T, cfg["emb_dim"])).astype(np.float32)
    dy = rng.standard_normal((B, T, cfg["emb_dim"])).astype(np.float32)
    f_in = os.path.join(tmp, "tb_in_%d.safetensors" % i)
    st.write(f_in, {"x": x, "dy": dy})
    xt = torch.from_numpy(x).requires_grad_(True)

    def fwd():
        if train:
            torch.manual_seed(train_seed)
            model.train()
        else:
            model.eval()
        y = model(xt)
        y.backward(torch.from_numpy(dy))
        return y.detach().numpy()

    y, ref = torch_grads(model, fwd)
    f_out = os.path.join(tmp, "tb_out_%d.safetensors" % i)
    extra = ["--train", "--seed", train_seed] if train else []
    rc, _, err = run([binary, "grad", f_w, "-i", f_in, "-o", f_out] + extra)
    if rc != 0:
        fail("%s: grad exit %d: %s" % (desc, rc, err.strip()))
        return
    got, _ = st.read(f_out)
    close(got["y"], y, "%s y" % desc)
    r = close(got["dx"], xt.grad.numpy(), "%s dx" % desc)
    if r is not None:
        stats["dx"] = max(stats.get("dx", 0.0), r)
    compare_grads(got, ref, desc, stats)
    stats["cases"] = stats.get("cases", 0) + 1


def check_hf(binary, tmp, stats):
    """A Hugging Face-named file: the head tied to wte."""
    cfg = {"vocab_size": 40, "context_length": 12, "emb_dim": 16, "n_heads": 2, "n_layers": 2,
           "drop_rate": 0.1, "qkv_bias": True}
    torch.manual_seed(11)
    model = bg.GPTModel(cfg)
    model.out_head.weight = model.tok_emb.weight
    f_w = os.path.join(tmp, "hf.safetensors")
    st.write(f_w, bg.to_hf(model.state_dict(), cfg["n_layers"], prefix="transformer."),
             {"n_heads": "2", "drop_rate": "0.1"})
    rng = np.random.default_rng(7)
    idx, targets = rng.integers(0, 40, size=(3, 9)), rng.integers(0, 40, size=(3, 9))
    f_in = os.path.join(tmp, "hf_in.safetensors")
    st.write(f_in, {"idx": idx, "targets": targets})
    for train in (False, True):
        def fwd():
            if train:
                torch.manual_seed(77)
                model.train()
            else:
                model.eval()
            logits = model(torch.from_numpy(idx))
            loss = F.cross_entropy(logits.flatten(0, 1), torch.from_numpy(targets).flatten())
            loss.backward()
            return loss.item()
        loss, ref = torch_grads(model, fwd)
        f_out = os.path.join(tmp, "hf_out.safetensors")
        rc, _, err = run([binary, "grad", f_w, "-i", f_in, "-o", f_out] + (["--train", "--seed", 77] if train else []))
        if rc != 0:
            fail("hf: grad exit %d: %s" % (rc, err.strip()))
            continue
        got, _ = st.read(f_out)
        desc = "hf tied %s" % ("train" if train else "eval")
        close(got["loss"], np.float32(loss), desc + " loss", tol=1e-5)
        # named_parameters() lists the tied tensor once, as tok_emb.weight
        ref["out_head.weight"] = ref["tok_emb.weight"]
        compare_grads(got, ref, desc, stats)
        stats["cases"] = stats.get("cases", 0) + 1


def check_fd(binary, tmp, stats):
    """mha's gradients against central differences of torch's float64 loss."""
    cfg = {"vocab_size": 11, "context_length": 6, "emb_dim": 8, "n_heads": 2, "n_layers": 2,
           "drop_rate": 0.0, "qkv_bias": True}
    torch.manual_seed(21)
    model = bg.GPTModel(cfg).eval()
    f_w = os.path.join(tmp, "fd.safetensors")
    save_book(f_w, "GPTModel", cfg, model)
    rng = np.random.default_rng(21)
    idx, targets = rng.integers(0, 11, size=(2, 5)), rng.integers(0, 11, size=(2, 5))
    f_in = os.path.join(tmp, "fd_in.safetensors")
    st.write(f_in, {"idx": idx, "targets": targets})
    f_out = os.path.join(tmp, "fd_out.safetensors")
    rc, _, err = run([binary, "grad", f_w, "-i", f_in, "-o", f_out])
    if rc != 0:
        fail("fd: grad exit %d: %s" % (rc, err.strip()))
        return
    got, _ = st.read(f_out)
    m64 = bg.GPTModel(cfg).double().eval()
    m64.load_state_dict(model.state_dict())
    params = dict(m64.named_parameters())
    it, tt = torch.from_numpy(idx), torch.from_numpy(targets).flatten()

    def loss():
        with torch.no_grad():
            return F.cross_entropy(m64(it).flatten(0, 1), tt).item()

    prng = random.Random(5)
    worst = 0.0
    for name, p in params.items():
        g = got["grad." + name].reshape(-1)
        flat = p.data.view(-1)
        for j in prng.sample(range(flat.numel()), min(4, flat.numel())):
            h, x0 = 1e-5, flat[j].item()
            flat[j] = x0 + h
            lp = loss()
            flat[j] = x0 - h
            lm = loss()
            flat[j] = x0
            fd = (lp - lm) / (2 * h)
            err = abs(fd - float(g[j]))
            worst = max(worst, err)
            if err > 1e-4 * max(1.0, abs(fd)):
                fail("fd %s[%d]: mha %.8g, finite difference %.8g" % (name, j, float(g[j]), fd))
    stats["fd"] = worst


def check_threads(binary, tmp):
    cfg = {"vocab_size": 500, "context_length": 160, "emb_dim": 192, "n_heads": 3, "n_layers": 2,
           "drop_rate": 0.1, "qkv_bias": True}
    torch.manual_seed(3)
    f_w = os.path.join(tmp, "thr.safetensors")
    save_book(f_w, "GPTModel", cfg, bg.GPTModel(cfg))
    rng = np.random.default_rng(3)
    f_in = os.path.join(tmp, "thr_in.safetensors")
    st.write(f_in, {"idx": rng.integers(0, 500, size=(4, 160)), "targets": rng.integers(0, 500, size=(4, 160))})
    outs = []
    for n in (1, 2, 3):
        f_out = os.path.join(tmp, "thr_%d.safetensors" % n)
        rc, _, err = run([binary, "grad", f_w, "-i", f_in, "-o", f_out, "--train", "--seed", 9, "--threads", n])
        if rc != 0:
            fail("threads %d: grad exit %d: %s" % (n, rc, err.strip()))
            return
        with open(f_out, "rb") as f:
            outs.append(f.read())
    if not (outs[0] == outs[1] == outs[2]):
        a, b, c = (st.read(os.path.join(tmp, "thr_%d.safetensors" % n))[0] for n in (1, 2, 3))
        bad = [k for k in a if not (np.array_equal(a[k], b[k]) and np.array_equal(a[k], c[k]))]
        fail("1, 2 and 3 threads differ in %s" % bad[:8])


def find_driver(arg):
    if arg:
        return arg
    if os.environ.get("MHA_BUILD_DIR"):
        return os.path.join(os.environ["MHA_BUILD_DIR"], "tests", "gpt_train_driver")
    return os.path.join(os.path.dirname(find_bin(None)), "tests", "gpt_train_driver")


def check_training(driver, tmp, stats):
    """AdamW (and SGD) steps on a tiny GPT: mha vs torch.optim."""
    cfg = {"vocab_size": 30, "context_length": 16, "emb_dim": 16, "n_heads": 2, "n_layers": 2,
           "drop_rate": 0.1, "qkv_bias": False}
    text = "the cat sat on the mat and the dog sat on the log"
    vocab = sorted(set(text))
    ids = np.array([vocab.index(c) for c in text], np.int64)
    idx = np.stack([ids[0:16], ids[20:36]])
    targets = np.stack([ids[1:17], ids[21:37]])
    for opt, lr, wd, steps, seed in (("AdamW", 1e-2, 0.1, 8, 42), ("AdamW", 3e-3, 0.0, 5, None), ("SGD", 0.5, 0.0, 5, 7)):
        torch.manual_seed(31)
        model = bg.GPTModel(cfg)
        f_w = os.path.join(tmp, "tr.safetensors")
        save_book(f_w, "GPTModel", cfg, model)
        meta = {"steps": str(steps), "lr": repr(lr), "weight_decay": repr(wd), "optimizer": opt}
        if seed is not None:
            meta["seed"] = str(seed)
        f_d = os.path.join(tmp, "tr_data.safetensors")
        st.write(f_d, {"idx": idx, "targets": targets}, meta)
        f_out = os.path.join(tmp, "tr_out.safetensors")
        p = subprocess.run([driver, f_w, f_d, f_out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
        desc = "train %s lr %g wd %g seed %s" % (opt, lr, wd, seed)
        if p.returncode != 0:
            fail("%s: driver exit %d: %s" % (desc, p.returncode, p.stderr.decode().strip()))
            continue
        got, _ = st.read(f_out)
        o = (torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd) if opt == "AdamW"
             else torch.optim.SGD(model.parameters(), lr=lr, weight_decay=wd))
        if seed is not None:
            torch.manual_seed(seed)
            model.train()
        else:
            model.eval()
        losses = []
        for _ in range(steps):
            o.zero_grad()
            loss = F.cross_entropy(model(torch.from_numpy(idx)).flatten(0, 1), torch.from_numpy(targets).flatten())
            loss.backward()
            o.step()
            losses.append(loss.item())
        close(got["loss"], np.array(losses, np.float32), desc + " losses", tol=1e-5)
        if not got["loss"][-1] < got["loss"][0]:
            fail("%s: the loss did not go down: %s" % (desc, got["loss"]))
        worst = 0.0
        for k, v in model.state_dict().items():
            if k.endswith("att.mask"):
                continue
            r = close(got[k], v.numpy(), "%s %s after %d steps" % (desc, k, steps), tol=1e-5)
            worst = max(worst, r or 0.0)
        stats["train"] = max(stats.get("train", 0.0), worst)
        print("%s: loss %.4f -> %.4f (torch %.4f -> %.4f), params max rel diff %.2g" %
              (desc, got["loss"][0], got["loss"][-1], losses[0], losses[-1], worst))


def check_errors(binary, tmp):
    cfg = {"vocab_size": 20, "context_length": 8, "emb_dim": 8, "n_heads": 2, "n_layers": 1,
           "drop_rate": 0.0, "qkv_bias": False}
    torch.manual_seed(1)
    f_w = os.path.join(tmp, "err.safetensors")
    save_book(f_w, "GPTModel", cfg, bg.GPTModel(cfg))
    torch.manual_seed(1)
    f_tb = os.path.join(tmp, "err_tb.safetensors")
    save_book(f_tb, "TransformerBlock", cfg, bg.TransformerBlock(cfg))
    ok = np.zeros((2, 4), np.int64)
    cases = [
        (f_w, {"idx": ok}, "no tensor 'targets'"),
        (f_w, {"targets": ok}, "no tensor 'idx'"),
        (f_w, {"idx": ok + 20, "targets": ok}, "outside the vocabulary"),
        (f_w, {"idx": ok, "targets": ok - 2}, "targets holds -2"),
        (f_w, {"idx": ok, "targets": np.zeros((2, 3), np.int64)}, "targets has shape (2, 3), idx (2, 4)"),
        (f_w, {"idx": ok, "targets": ok - 100}, "every target is -100"),
        (f_w, {"idx": np.zeros((1, 9), np.int64), "targets": np.zeros((1, 9), np.int64)}, "exceed context_length"),
        (f_w, {"idx": ok.astype(np.float32), "targets": ok}, "idx must be I64 or I32"),
        (f_tb, {"x": np.zeros((2, 3, 8), np.float32)}, "no tensor 'dy'"),
        (f_tb, {"x": np.zeros((2, 3, 8), np.float32), "dy": np.zeros((2, 4, 8), np.float32)}, "dy has shape"),
        (f_tb, {"x": np.zeros((2, 3, 8), np.float32), "dy": np.full((2, 3, 8), np.nan, np.float32)}, "dy holds NaN"),
    ]
    for k, (w, inp, want) in enumerate(cases):
        f_in = os.path.join(tmp, "err_in_%d.safetensors" % k)
        st.write(f_in, inp)
        rc, out, err = run([binary, "grad", w, "-i", f_in, "-o", os.path.join(tmp, "err_out.safetensors")])
        lines = err.strip().splitlines()
        if rc != 1 or len(lines) != 1 or want not in err or out:
            fail("error case %d (%s): exit %d, stderr %r" % (k, want, rc, err))


def find_bin(arg):
    if arg:
        return arg
    if os.environ.get("MHA_BIN"):
        return os.environ["MHA_BIN"]
    return os.path.join(HERE, "..", "build", "mha")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--bin")
    ap.add_argument("--driver")
    a = ap.parse_args()
    binary = find_bin(a.bin)
    torch.set_num_threads(1)
    stats = {}
    rng = random.Random(20261130)
    with tempfile.TemporaryDirectory() as tmp:
        # fixed shapes first: T = 1 with b > 1, a -100 target, both biases, both modes
        fixed = [({"vocab_size": 50, "context_length": 8, "emb_dim": 12, "n_heads": 3, "n_layers": 2,
                   "drop_rate": 0.1, "qkv_bias": True}, 3, 1, True),
                 ({"vocab_size": 97, "context_length": 16, "emb_dim": 16, "n_heads": 4, "n_layers": 2,
                   "drop_rate": 0.5, "qkv_bias": False}, 2, 16, True),
                 ({"vocab_size": 7, "context_length": 4, "emb_dim": 4, "n_heads": 1, "n_layers": 1,
                   "drop_rate": 0.0, "qkv_bias": False}, 1, 1, False),
                 # 192 rows of 96: several GEMM tiles, the fused epilogues on each
                 ({"vocab_size": 300, "context_length": 64, "emb_dim": 96, "n_heads": 4, "n_layers": 2,
                   "drop_rate": 0.1, "qkv_bias": True}, 3, 64, True),
                 ({"vocab_size": 300, "context_length": 64, "emb_dim": 96, "n_heads": 4, "n_layers": 2,
                   "drop_rate": 0.1, "qkv_bias": True}, 3, 64, False)]
        for i, (cfg, B, T, train) in enumerate(fixed):
            model_case(binary, tmp, i, cfg, B, T, train, stats, ignore=True)
        for i in range(len(fixed), len(fixed) + a.count):
            cfg = random_cfg(rng)
            B, T = rng.randint(1, 3), rng.randint(1, cfg["context_length"])
            model_case(binary, tmp, i, cfg, B, T, rng.random() < 0.5, stats, ignore=i % 3 == 0)
        for i in range(max(3, a.count // 2)):
            cfg = random_cfg(rng)
            B, T = rng.randint(1, 3), rng.randint(1, cfg["context_length"])
            block_case(binary, tmp, i, cfg, B, T, i % 2 == 1, stats)
        check_hf(binary, tmp, stats)
        check_fd(binary, tmp, stats)
        check_threads(binary, tmp)
        check_training(find_driver(a.driver), tmp, stats)
        check_errors(binary, tmp)
    print("cases %d; worst: loss %.2g (rel), grad %.2g, dx %.2g (of max|grad|), finite differences %.2g (abs), "
          "training %.2g (of max|param|)" % (stats.get("cases", 0), stats.get("loss", 0), stats.get("grad", 0),
                                            stats.get("dx", 0), stats.get("fd", 0), stats.get("train", 0)))
    if fails:
        print("torch_gpt_grad_diff: %d failure(s)" % fails)
        return 1
    print("torch_gpt_grad_diff: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
