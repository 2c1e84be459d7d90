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


# ---- training (chapter 5): torch's autograd and optimizers, or mha's own ----

TCFG = dict(CFG, drop_rate=0.2)


def _step(model, opt, x, y, set_to_none=False):
    opt.zero_grad(set_to_none=set_to_none)
    loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    opt.step()
    return loss.item()


def _pair():
    torch.manual_seed(21)
    t = bg.GPTModel(TCFG)
    torch.manual_seed(21)
    m = mha.GPTModel(TCFG)
    return t, m


def _batch(seed):
    g = np.random.default_rng(seed)
    return (torch.from_numpy(g.integers(0, TCFG["vocab_size"], (2, 12))),
            torch.from_numpy(g.integers(0, TCFG["vocab_size"], (2, 12))))


def test_parameters_are_torch_tensors_over_mhas_memory():
    t, m = _pair()
    ps = list(m.parameters())
    assert all(isinstance(p, torch.nn.Parameter) and p.requires_grad for p in ps)
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert m.pos_emb.weight.shape[0] == TCFG["context_length"] and m.to("cpu") is m
    assert m.to(torch.device("cpu")) is m and m.trf_blocks[1].att.W_query.weight.shape == (24, 24)
    with torch.no_grad():
        m.final_norm.shift.fill_(0.5)  # a write through the tensor is the model's
    assert (m.state_dict()["final_norm.shift"] == 0.5).all()
    try:
        m.to("cuda")
        assert False, "to('cuda') was accepted"
    except ValueError:
        pass


def test_torch_training_steps_like_the_book():
    t, m = _pair()
    ot = torch.optim.AdamW(t.parameters(), lr=0.0004, weight_decay=0.1)
    om = torch.optim.AdamW(m.parameters(), lr=0.0004, weight_decay=0.1)
    for step in range(4):
        x, y = _batch(step)
        state = torch.get_rng_state()
        lt = _step(t, ot, x, y)
        after = torch.get_rng_state()
        torch.set_rng_state(state)
        lm = _step(m, om, x, y, set_to_none=step % 2 == 1)
        assert abs(lt - lm) <= 1e-5 * abs(lt), (step, lt, lm)
        assert torch.equal(after, torch.get_rng_state()), "dropout drew differently"
        gmax = max(float(p.grad.abs().max()) for p in t.parameters())
        for (k, p), q in zip(t.named_parameters(), m.parameters()):
            close(q.grad.numpy(), p.grad.numpy(), tol=1e-4 * gmax / max(float(p.grad.abs().max()), 1e-30))
            # AdamW moves a parameter whose gradient is rounding noise by up
            # to lr either way: the parameters agree within that
            assert np.abs(q.detach().numpy() - p.detach().numpy()).max() <= 2 * 0.0004 * (step + 1), k
        # .grad is a view of mha's gradient buffer
        assert np.shares_memory(m.grads()["tok_emb.weight"], m.tok_emb.weight.grad.numpy())


def test_no_grad_and_eval_record_no_graph():
    _, m = _pair()
    x, _ = _batch(0)
    with torch.no_grad():
        assert not m(x).requires_grad
    assert m.eval()(x).requires_grad  # eval with grad on: a graph, as in torch
    with mha.no_grad():
        assert not m(x).requires_grad
    m.requires_grad_(False)
    assert not m(x).requires_grad
    m.requires_grad_(True)
    # two forwards, one loss: each has its own tape
    m.train()
    torch.manual_seed(1)
    (m(x).sum() + m(x).mean()).backward()
    g1 = m.tok_emb.weight.grad.clone()
    m.zero_grad()
    assert not m.tok_emb.weight.grad.any()
    torch.manual_seed(1)
    a = m(x).sum()
    b = m(x).mean()
    (a + b).backward()
    assert torch.equal(g1, m.tok_emb.weight.grad)


def test_backward_errors():
    _, m = _pair()
    x, _ = _batch(0)
    loss = m(x).sum()
    loss.backward(retain_graph=True)
    try:
        loss.backward()
        assert False, "a second backward was accepted"
    except RuntimeError as e:
        assert "second time" in str(e)
    loss = m(x).sum()
    with torch.no_grad():
        m.out_head.weight.add_(1.0)
    try:
        loss.backward()
        assert False, "a backward after an in-place change was accepted"
    except RuntimeError as e:
        assert "inplace" in str(e)


def test_mha_optim_without_torch_autograd():
    """model.loss_backward (one C call) + mha.optim.AdamW: the same losses
    as the book's model under torch.optim.AdamW"""
    t, m = _pair()
    ot = torch.optim.AdamW(t.parameters(), lr=0.0004, weight_decay=0.1)
    om = mha.optim.AdamW(m.parameters(), lr=0.0004, weight_decay=0.1)
    for step in range(3):
        x, y = _batch(step)
        state = torch.get_rng_state()
        lt = _step(t, ot, x, y)
        torch.set_rng_state(state)
        om.zero_grad()
        lm = m.loss_backward(x.numpy(), y.numpy())
        om.step()
        assert abs(lt - lm) <= 1e-5 * abs(lt), (step, lt, lm)
    for (k, p), (_, q) in zip(t.named_parameters(), m.state_dict().items()):
        assert np.abs(q - p.detach().numpy()).max() <= 2 * 0.0004 * 3, k
    # and model.backward(dlogits) on arrays
    m.eval()
    om.zero_grad()
    x, y = _batch(9)
    logits = m(x.numpy())
    assert isinstance(logits, np.ndarray)
    dl = np.random.default_rng(2).standard_normal(logits.shape).astype(np.float32)
    m.backward(dl)
    t.eval()
    t.zero_grad()
    t(x).backward(torch.from_numpy(dl))
    close(m.grads()["out_head.weight"], t.out_head.weight.grad.numpy(), tol=1e-4)
    try:
        m.backward(dl)
        assert False, "a second backward was accepted"
    except mha.Error as e:
        assert "no forward" in str(e)


def test_parameters_outlive_the_model():
    import gc
    _, m = _pair()
    ps = list(m.parameters())
    want = ps[0].detach().clone()
    del m
    gc.collect()
    assert torch.equal(ps[0].detach(), want)


def test_without_torch(tmp_path):
    """torch not importable: numpy parameters, mha's own generator
    (mha.manual_seed), loss_backward + mha.optim.AdamW; the same losses as
    the book's model in torch"""
    import subprocess
    x, y = _batch(4)
    np.save(str(tmp_path / "x.npy"), x.numpy())
    np.save(str(tmp_path / "y.npy"), y.numpy())
    code = ("import sys; sys.modules['torch'] = None\n"
            "import numpy as np, mha\n"
            "mha.manual_seed(21)\n"
            "m = mha.GPTModel(%r)\n"
            "assert all(isinstance(p, np.ndarray) for p in m.parameters())\n"
            "opt = mha.optim.AdamW(m.parameters(), lr=0.0004, weight_decay=0.1)\n"
            "x, y = np.load(sys.argv[1]), np.load(sys.argv[2])\n"
            "for _ in range(3):\n"
            "    opt.zero_grad(); print(repr(m.loss_backward(x, y))); opt.step()\n") % (TCFG,)
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    assert p.returncode == 0, p.stderr
    got = [float(v) for v in p.stdout.split()]
    torch.manual_seed(21)
    t = bg.GPTModel(TCFG)
    ot = torch.optim.AdamW(t.parameters(), lr=0.0004, weight_decay=0.1)
    for k in range(3):
        lt = _step(t, ot, x, y)
        assert abs(lt - got[k]) <= 1e-5 * abs(lt), (k, lt, got[k])
