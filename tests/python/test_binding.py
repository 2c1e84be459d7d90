"""The Python binding (python/mha) against torch and the book's classes
(tests/book_modules.py): run by ctest as `python_binding` (pytest), with
MHA_LIBRARY naming the build's libmha.so and PYTHONPATH=python.

  - seeded construction equals torch's weights bit for bit, state_dict keys
    and order included, for every class;
  - eval outputs equal the book's classes within 1e-5 of max|y| on random
    configurations, with weights loaded both ways (torch -> mha, mha ->
    torch), numpy and torch tensors in and out;
  - training mode draws torch's dropout mask from the global generator;
  - backward gives torch autograd's dx and gradients (accumulating);
  - AdamW and SGD step to torch.optim's bits on equal gradients;
  - errors carry mha_last_error(); save/load; the library search;
    pip install ./python offline.
"""
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import book_modules as bm  # noqa: E402
import oracle  # noqa: E402

import mha  # noqa: E402

CLASSES = list(bm.CLASSES)
TOL = 1e-5  # of max|y|


def bits(a):
    a = np.ascontiguousarray(np.asarray(a, dtype=np.float32))
    return a.view(np.uint32)


def assert_close(got, want, what, tol=TOL, scale=0.0):
    """|got - want| <= tol * max(max|want|, scale) everywhere"""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, "%s: shape %s, want %s" % (what, got.shape, want.shape)
    scale = max(float(np.abs(want).max()) if want.size else 0.0, scale, 1e-30)
    err = float(np.abs(got.astype(np.float64) - want).max())
    assert err <= tol * scale, "%s: max error %.3g > %.0e * max|y| = %.3g" % (what, err, tol, tol * scale)


def random_config(rng, module):
    heads = rng.randint(1, 4)
    cfg = dict(d_in=rng.randint(1, 24), context_length=rng.randint(1, 20), dropout=rng.choice([0.0, 0.1, 0.5]),
               num_heads=heads, qkv_bias=rng.random() < 0.5)
    cfg["d_out"] = heads * rng.randint(1, 6) if module == "MultiHeadAttention" else rng.randint(1, 12)
    return cfg


def mha_class(module):
    return getattr(mha, module)


def construct_both(module, cfg, seed):
    tm = bm.construct(module, cfg, seed)
    kwargs = {k: cfg[k] for k in bm.ARGS[module]}
    mha.manual_seed(seed)
    return tm, mha_class(module)(**kwargs)


def inputs(module, cfg, rng, batch=None, tokens=None):
    T = tokens or rng.randint(1, cfg.get("context_length", 12) if module in bm.BATCHED else 12)
    shape = ((batch or rng.randint(1, 3)), T, cfg["d_in"]) if module in bm.BATCHED else (T, cfg["d_in"])
    return (np.random.default_rng(rng.randint(0, 1 << 30)).standard_normal(shape)).astype(np.float32)


# ---- the package ---------------------------------------------------------------

def test_version_everywhere():
    with open(os.path.join(SRC, "include", "mha.h")) as f:
        header = [l.split('"')[1] for l in f if l.startswith("#define MHA_VERSION_STRING")][0]
    assert mha.__version__ == header == mha.library_version()
    assert os.path.exists(mha.library_path)


def test_book_numbers():
    """section 3.6.2's printed output, through the Python classes"""
    mha.manual_seed(123)
    m = mha.MultiHeadAttention(3, 2, 6, 0.0, num_heads=2)
    x = np.array(bm.INPUTS, dtype=np.float32)
    y = m(np.stack([x, x]))
    want = [[.3190, .4858], [.2943, .3897], [.2856, .3593], [.2693, .3873], [.2639, .3928], [.2575, .4028]]
    assert np.abs(y[0] - want).max() < 5e-5 and np.abs(y[1] - want).max() < 5e-5
    assert isinstance(y, np.ndarray) and y.dtype == np.float32


# ---- weights -----------------------------------------------------------------------

@pytest.mark.parametrize("module", CLASSES)
def test_seeded_weights_bitwise(module):
    rng = random.Random(CLASSES.index(module))
    for seed in (123, 0, 789, -5, 2 ** 40 + 3):
        cfg = random_config(rng, module)
        tm, m = construct_both(module, cfg, seed)
        want, got = tm.state_dict(), m.state_dict()
        assert list(got) == list(want), "state_dict keys/order"
        for k in want:
            assert np.array_equal(bits(got[k]), bits(want[k].numpy())), "%s %s seed %d" % (module, k, seed)


def test_construction_continues_the_stream():
    """two modules and a torch.rand after one seed, as torch draws them"""
    torch.manual_seed(11)
    a, b, r = bm.SelfAttention_v1(3, 4), bm.CausalAttention(4, 5, 6, 0.0), torch.rand(7)
    mha.manual_seed(11)
    ma, mb, mr = mha.SelfAttention_v1(3, 4), mha.CausalAttention(4, 5, 6, 0.0), mha.rand(7)
    assert np.array_equal(bits(ma.W_key), bits(a.W_key.detach().numpy()))
    assert np.array_equal(bits(mb.W_value.weight), bits(b.W_value.weight.detach().numpy()))
    assert np.array_equal(bits(mr), bits(r.numpy()))
    # one global generator: mha's draws advance torch's
    mha.manual_seed(3)
    got = mha.randn(5, 3)
    torch.manual_seed(3)
    assert np.array_equal(bits(got), bits(torch.randn(5, 3).numpy()))


# ---- forward ---------------------------------------------------------------------------

@pytest.mark.parametrize("module", CLASSES)
def test_eval_random_configs(module):
    rng = random.Random(1000 + len(module))
    for case in range(8):
        cfg = random_config(rng, module)
        seed = rng.randint(0, 1 << 31)
        tm, m = construct_both(module, cfg, seed)
        tm.eval()
        assert m.eval() is m and not m.training
        x = inputs(module, cfg, rng)
        with torch.no_grad():
            want = tm(torch.from_numpy(x)).numpy()
        assert_close(m(x), want, "%s %s" % (module, cfg))
        # torch's weights into an mha module built from another seed, and torch tensors in and out
        mha.manual_seed(seed + 1)
        m2 = mha_class(module)(**{k: cfg[k] for k in bm.ARGS[module]}).eval()
        m2.load_state_dict(tm.state_dict())
        y2 = m2(torch.from_numpy(x))
        assert isinstance(y2, torch.Tensor) and y2.dtype == torch.float32
        assert_close(y2.numpy(), want, "%s loaded from torch" % module)
        # and mha's weights into torch
        tm2 = bm.construct(module, cfg, seed + 2).eval()
        tm2.load_state_dict(m.state_dict(as_torch=True))
        with torch.no_grad():
            assert_close(m(x), tm2(torch.from_numpy(x)).numpy(), "%s into torch" % module)


def test_modes_and_shapes():
    m = mha.CausalAttention(3, 2, 4, 0.0)
    assert m.training  # as a fresh nn.Module
    with pytest.raises(ValueError, match="b, num_tokens, d_in"):
        m(np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match="d_in is 3"):
        m(np.zeros((1, 4, 5), np.float32))
    with pytest.raises(mha.Error, match="context_length") as e:
        m(np.zeros((1, 5, 3), np.float32))
    assert e.value.status == "MHA_ERR_CONTEXT_LENGTH" and e.value.detail
    with pytest.raises(ValueError, match="num_tokens, d_in"):
        mha.SelfAttention_v2(3, 2)(np.zeros((1, 4, 3), np.float32))
    y = mha.SelfAttention_v2(3, 2)(np.zeros((4, 3)))  # float64 in: converted
    assert y.dtype == np.float32 and y.shape == (4, 2)


def test_errors_carry_the_detail():
    with pytest.raises(mha.Error) as e:
        mha.MultiHeadAttention(3, 5, 6, 0.0, num_heads=2)
    assert "d_out (5) must be divisible by num_heads (2)" in str(e.value)
    assert e.value.status == "MHA_ERR_CONFIG" and e.value.code == -2
    with pytest.raises(mha.Error, match="dropout"):
        mha.CausalAttention(3, 2, 6, 1.5)
    with pytest.raises(TypeError):
        mha.SelfAttention_v1(3.5, 2)
    with pytest.raises(mha.Error, match="MHA_ERR_IO"):
        mha.load("/nonexistent/m.safetensors")
    m = mha.MultiHeadAttention(3, 4, 6, 0.0, 2)
    with pytest.raises(mha.Error, match="no forward"):
        m.backward(np.zeros((1, 2, 4), np.float32))
    with pytest.raises(mha.Error, match="MHA_ERR_NONFINITE"):
        m(np.full((1, 2, 3), np.nan, np.float32))


# ---- dropout -------------------------------------------------------------------------------

@pytest.mark.parametrize("module", ["CausalAttention", "MultiHeadAttentionWrapper", "MultiHeadAttention"])
def test_training_dropout_is_torchs(module):
    rng = random.Random(7 + len(module))
    for case in range(4):
        cfg = random_config(rng, module)
        cfg["dropout"] = rng.choice([0.1, 0.5])
        seed = rng.randint(0, 1 << 31)
        tm, m = construct_both(module, cfg, seed)
        x = inputs(module, cfg, rng)
        state = torch.get_rng_state()  # one generator: torch's draws, then mha's again from here
        with torch.no_grad():
            want1, want2 = tm(torch.from_numpy(x)).numpy(), tm(torch.from_numpy(x)).numpy()
        torch.set_rng_state(state)
        got1, got2 = m(x), m(x)  # each draws a fresh mask, continuing the stream
        assert_close(got1, want1, "first training forward")
        assert_close(got2, want2, "second training forward")
        # reseeding: mha.manual_seed(s); m.train(); m(x) == torch.manual_seed(s); tm.train(); tm(x)
        mha.manual_seed(seed ^ 1)
        got = m.train()(x)
        torch.manual_seed(seed ^ 1)
        with torch.no_grad():
            want = tm.train()(torch.from_numpy(x)).numpy()
        assert_close(got, want, "after reseeding")


# ---- backward ----------------------------------------------------------------------------

@pytest.mark.parametrize("module", CLASSES)
def test_backward_is_autograds(module):
    rng = random.Random(99 + len(module))
    for case in range(4):
        cfg = random_config(rng, module)
        cfg["dropout"] = rng.choice([0.0, 0.3])
        seed = rng.randint(0, 1 << 31)
        tm, m = construct_both(module, cfg, seed)
        x = inputs(module, cfg, rng)
        tx = torch.from_numpy(x.copy()).requires_grad_(True)
        state = torch.get_rng_state()  # the same mask for both forwards
        ty = tm(tx)
        dy = np.random.default_rng(case).standard_normal(ty.shape).astype(np.float32)
        ty.backward(torch.from_numpy(dy))
        torch.set_rng_state(state)
        y = m(x)
        assert_close(y, ty.detach().numpy(), "y")
        dx = m.backward(dy)
        assert_close(dx, tx.grad.numpy(), "dx", tol=1e-4)
        tgrads = dict(tm.named_parameters())
        grads = m.grads()
        assert list(grads) == list(tgrads)
        # relative to the module's largest gradient: some are rounding noise
        # around 0 (W_key.bias: the softmax does not see a shift of a row)
        gmax = max(float(p.grad.abs().max()) for p in tgrads.values())
        for k, g in grads.items():
            assert_close(g, tgrads[k].grad.numpy(), "grad %s" % k, tol=1e-4, scale=gmax)
        # a second forward + backward accumulates, as autograd does
        m.zero_grad()
        assert all(not g.any() for g in m.grads().values())
        for _ in range(2):
            m(x)
            m.backward(dy)
    m.eval()  # (each training forward draws a new mask: accumulation is checked in eval mode)
    m.zero_grad()
    y = m(x)
    m.backward(dy)
    once = {k: np.array(v) for k, v in m.grads().items()}
    m(x)
    m.backward(dy)
    for k, v in m.grads().items():
        assert_close(v, 2 * once[k], "accumulated %s" % k)
    with pytest.raises(mha.Error, match="no forward"):
        m.backward(dy)  # the tape is consumed


def test_backward_torch_tensors_and_no_grad():
    mha.manual_seed(5)
    m = mha.MultiHeadAttention(4, 4, 8, 0.0, 2).eval()
    x = torch.rand(2, 8, 4)
    y = m(x)
    dx = m.backward(torch.ones_like(y))
    assert isinstance(dx, torch.Tensor) and dx.shape == x.shape
    with mha.no_grad():
        m(x)
    with pytest.raises(mha.Error, match="no forward"):
        m.backward(torch.ones_like(y))
    with torch.no_grad():
        m(x)
    with pytest.raises(mha.Error, match="no forward"):
        m.backward(torch.ones_like(y))
    m(x)
    with pytest.raises(ValueError, match="y's shape"):
        m.backward(torch.ones(2, 8, 5))


# ---- optimizers ------------------------------------------------------------------------

@pytest.mark.parametrize("name,kwargs", [
    ("AdamW", dict(lr=1e-2)),
    ("AdamW", dict(lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, amsgrad=True)),
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)),
])
def test_optimizers_step_like_torch(name, kwargs, tmp_path):
    cfg = dict(d_in=5, d_out=6, context_length=7, dropout=0.0, num_heads=3, qkv_bias=True)
    tm, m = construct_both("MultiHeadAttention", cfg, 42)
    topt = getattr(torch.optim, name)(tm.parameters(), **kwargs)
    opt = getattr(mha.optim, name)(m.parameters(), **kwargs)
    gen = np.random.default_rng(0)
    for step in range(5):
        grads = m.grads()
        for k, p in tm.named_parameters():
            g = gen.standard_normal(p.shape).astype(np.float32)
            p.grad = torch.from_numpy(g.copy())
            grads[k][...] = g
        topt.step()
        opt.step()
        if step == 2:
            topt.param_groups[0]["lr"] *= 0.5
            opt.param_groups[0]["lr"] *= 0.5
    assert opt.step_count == 5 and opt.lr == topt.param_groups[0]["lr"]
    for k, v in tm.state_dict().items():
        assert np.array_equal(bits(m.state_dict()[k]), bits(v.numpy())), "%s %s after 5 steps" % (name, k)
    # save, then a fresh optimizer resumes to the same bits
    opt.save(str(tmp_path / "opt.safetensors"))
    m.save(str(tmp_path / "m.safetensors"))
    m2 = mha.load(str(tmp_path / "m.safetensors"))
    opt2 = getattr(mha.optim, name)(m2, **kwargs)
    opt2.load(str(tmp_path / "opt.safetensors"))
    for o, mod in ((opt, m), (opt2, m2)):
        for g in mod.grads().values():
            g[...] = 0.25
        o.step()
    for k, v in m.state_dict().items():
        assert np.array_equal(bits(m2.state_dict()[k]), bits(v)), "resumed %s" % k


def test_optimizer_refuses_nonfinite_gradients():
    m = mha.SelfAttention_v2(3, 2)
    opt = mha.optim.SGD(m.parameters(), lr=0.1)
    m.grad("W_key.weight")[0, 0] = np.inf
    before = m.state_dict()
    with pytest.raises(mha.Error, match="MHA_ERR_NONFINITE"):
        opt.step()
    for k, v in m.state_dict().items():
        assert np.array_equal(v, before[k])
    with pytest.raises(TypeError):
        mha.optim.SGD([np.zeros(3)], lr=0.1)


# ---- files, parameters ---------------------------------------------------------------------

@pytest.mark.parametrize("module", CLASSES)
def test_save_load_and_attributes(module, tmp_path):
    rng = random.Random(5)
    cfg = random_config(rng, module)
    tm, m = construct_both(module, cfg, 8)
    path = str(tmp_path / "m.safetensors")
    m.save(path)
    m2 = mha.load(path)
    assert type(m2) is type(m) and m2.config == m.config and repr(m2) == repr(m)
    for k, v in m.state_dict().items():
        assert np.array_equal(v, m2.state_dict()[k])
    # attribute access as in the PyTorch classes, live
    if module == "SelfAttention_v1":
        assert m.W_query.shape == (cfg["d_in"], cfg["d_out"])
        m.W_query[0, 0] = 7.0
        assert m.state_dict()["W_query"][0, 0] == 7.0
    elif module == "MultiHeadAttentionWrapper":
        assert len(m.heads) == cfg["num_heads"]
        assert np.array_equal(m.heads[0].W_key.weight, tm.heads[0].W_key.weight.detach().numpy())
    else:
        assert np.array_equal(m.W_value.weight, tm.W_value.weight.detach().numpy())
    names = [n for n, _ in m.named_parameters()]
    assert names == [n for n, _ in tm.named_parameters()]
    with pytest.raises(AttributeError):
        m.no_such_thing


def test_load_state_dict_checks():
    m = mha.MultiHeadAttention(3, 4, 6, 0.0, 2)
    sd = m.state_dict()
    sd.pop("W_key.weight")
    sd["extra"] = np.zeros(1, np.float32)
    with pytest.raises(RuntimeError, match='Missing key.*W_key.weight'):
        m.load_state_dict(sd)
    with pytest.raises(RuntimeError, match='Unexpected key.*extra'):
        m.load_state_dict(sd)
    r = m.load_state_dict(sd, strict=False)
    assert r.missing_keys == ["W_key.weight"] and r.unexpected_keys == ["extra"]
    sd = m.state_dict()
    sd["out_proj.weight"] = np.zeros((4, 3), np.float32)
    with pytest.raises(RuntimeError, match="size mismatch for out_proj.weight"):
        m.load_state_dict(sd)


# ---- finding the library, installing the package ---------------------------------------------

def _python(code, env_extra, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("MHA_LIBRARY", "MHA_BUILD_DIR", "PYTHONPATH")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300)


def test_library_search(tmp_path):
    python_dir = os.path.dirname(os.path.dirname(mha.__file__))
    p = _python("import mha", {"PYTHONPATH": python_dir, "MHA_LIBRARY": str(tmp_path / "nope.so")}, str(tmp_path))
    assert p.returncode != 0 and "nope.so: not found" in p.stderr and "Tried" in p.stderr
    # next to the package: a copy of the package with the library beside it
    import shutil
    pkg = tmp_path / "site" / "mha"
    shutil.copytree(os.path.dirname(mha.__file__), str(pkg), ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(mha.library_path, str(pkg / "libmha.so.0"))
    p = _python("import mha; print(mha.library_path)", {"PYTHONPATH": str(tmp_path / "site")}, str(tmp_path))
    assert p.returncode == 0 and p.stdout.strip() == str(pkg / "libmha.so.0"), p.stderr
    # a build tree, named by MHA_BUILD_DIR
    os.remove(str(pkg / "libmha.so.0"))
    build = os.path.dirname(os.path.realpath(mha.library_path))
    p = _python("import mha; print(mha.library_path)", {"PYTHONPATH": str(tmp_path / "site"),
                                                         "MHA_BUILD_DIR": build}, str(tmp_path))
    assert p.returncode == 0 and p.stdout.strip().startswith(build), p.stderr


def test_pip_install_offline(tmp_path):
    """pip install ./python with no index (nothing downloadable), into a
    target directory; the installed package imports and works."""
    target = tmp_path / "site"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "-q",
                        "--target", str(target), os.path.join(SRC, "python")], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    if p.returncode != 0 and "No module named pip" in p.stderr:
        oracle.pytest_missing("python_binding", "no pip for %s (Debian's python3-pip)" % sys.executable)
    assert p.returncode == 0, p.stderr
    assert (target / "mha" / "__init__.py").exists() and list(target.glob("mha-*.dist-info"))
    code = ("import mha; mha.manual_seed(123); m = mha.MultiHeadAttention(3, 2, 6, 0.0, 2); "
            "print(mha.__file__, mha.__version__)")
    p = _python(code, {"PYTHONPATH": str(target), "MHA_LIBRARY": mha.library_path}, str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[0].startswith(str(target)) and p.stdout.split()[1] == mha.__version__


def test_torch_autograd_through_the_module():
    """a tensor that requires grad: the output is in torch's graph, and
    loss.backward() fills x.grad (and the module's grads) as the book's class"""
    cfg = dict(d_in=4, d_out=6, context_length=5, dropout=0.0, num_heads=2, qkv_bias=False)
    tm, m = construct_both("MultiHeadAttention", cfg, 21)
    x = torch.rand(2, 5, 4)
    tx, mx = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    (tm(tx) ** 2).sum().backward()
    y = m(mx)
    assert y.requires_grad and y.grad_fn is not None
    (y ** 2).sum().backward()
    assert_close(mx.grad.numpy(), tx.grad.numpy(), "x.grad", tol=1e-4)
    gmax = max(float(p.grad.abs().max()) for p in tm.parameters())
    for k, p in tm.named_parameters():
        assert_close(m.grad(k), p.grad.numpy(), "grad " + k, tol=1e-4, scale=gmax)
    y1 = m(mx)
    m(mx)
    with pytest.raises(mha.Error, match="ran forward again"):
        y1.sum().backward()
