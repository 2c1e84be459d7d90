"""The Python binding's chapter 4 classes (mha.GPTModel, mha.TransformerBlock)
against the book's PyTorch code (tests/book_gpt.py): seeded weights bit for
bit, eval and training-mode outputs, greedy generation, save/load, a Hugging
Face-named file."""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import book_gpt as bg  # noqa: E402
import st  # noqa: E402

import mha  # noqa: E402

CFG = {"vocab_size": 97, "context_length": 16, "emb_dim": 24, "n_heads": 3, "n_layers": 2, "drop_rate": 0.1,
       "qkv_bias": True}


def bits(a):
    return np.ascontiguousarray(np.asarray(a, np.float32)).view(np.uint32)


def close(got, want, tol=1e-5):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= tol * max(np.abs(want).max(), 1e-30)


def test_seeded_weights_and_outputs():
    for cls, tcls in ((mha.GPTModel, bg.GPTModel), (mha.TransformerBlock, bg.TransformerBlock)):
        mha.manual_seed(7)
        m = cls(CFG)
        torch.manual_seed(7)
        t = tcls(CFG)
        sd = {k: v for k, v in t.state_dict().items() if not k.endswith("att.mask")}
        got = m.state_dict()
        assert list(got) == list(sd)
        for k in sd:
            assert (bits(got[k]) == bits(sd[k].numpy())).all(), k
        assert m.numel() == sum(p.numel() for p in t.parameters())
        if cls is mha.GPTModel:
            x = np.random.default_rng(1).integers(0, CFG["vocab_size"], size=(2, 11))
            xt = torch.from_numpy(x)
        else:
            x = np.random.default_rng(1).standard_normal((2, 11, CFG["emb_dim"])).astype(np.float32)
            xt = torch.from_numpy(x)
        m.eval(), t.eval()
        with torch.no_grad():
            close(m(x), t(xt).numpy())
            out = m(xt)
            assert isinstance(out, torch.Tensor)
            # training mode: the same masks from the same seed
            m.train(), t.train()
            mha.manual_seed(99)
            a = m(x)
            torch.manual_seed(99)
            close(a, t(xt).numpy())


def test_generate_and_files(tmp_path):
    cfg = dict(CFG, drop_rate=0.0)
    mha.manual_seed(3)
    m = mha.GPTModel(cfg).eval()
    torch.manual_seed(3)
    t = bg.GPTModel(cfg).eval()
    prompt = [[5, 17, 60]]
    want = bg.generate_text_simple(t, torch.tensor(prompt), 20, cfg["context_length"]).numpy()
    for cache in (True, False):
        assert (m.generate(prompt, 20, use_cache=cache) == want).all()
    torch.manual_seed(11)
    want = bg.generate(t, torch.tensor(prompt), 8, cfg["context_length"], temperature=0.8, top_k=10).numpy()
    assert (m.generate(prompt, 8, temperature=0.8, top_k=10, seed=11) == want).all()
    path = str(tmp_path / "gpt.safetensors")
    m.save(path)
    again = mha.load(path)
    assert isinstance(again, mha.GPTModel)
    x = np.array(prompt)
    assert (bits(again.eval()(x)) == bits(m(x))).all()
    # Hugging Face names (tied head)
    t.out_head.weight = t.tok_emb.weight
    hf = str(tmp_path / "hf.safetensors")
    st.write(hf, bg.to_hf(t.state_dict(), cfg["n_layers"]), {"n_heads": str(cfg["n_heads"])})
    h = mha.load(hf).eval()
    with torch.no_grad():
        close(h(x), t(torch.from_numpy(x)).numpy())
    m2 = mha.GPTModel(cfg)
    m2.load_state_dict(t.state_dict())
    with torch.no_grad():
        close(m2.eval()(x), t(torch.from_numpy(x)).numpy())


def test_errors():
    m = mha.GPTModel(dict(CFG)).eval()
    try:
        m(np.array([[1, 200]]))
        assert False, "an id outside the vocabulary was accepted"
    except mha.Error as e:
        assert "vocabulary" in str(e)
    try:
        mha.GPTModel(dict(CFG, n_heads=5))
        assert False
    except mha.Error as e:
        assert "divisible" in str(e)
