#!/usr/bin/python3
"""Differential test: mha's generator (via tests/gen_dump) against PyTorch.

Run with Debian's /usr/bin/python3 (python3-torch 1.13.1). The gen_dump
binary is $MHA_BUILD_DIR/tests/gen_dump.

Every case is replayed in PyTorch and by gen_dump, and every float is compared
bit for bit. With no arguments the script checks the AVX2 variant in this
process (torch's default dispatch on an AVX2 machine) and then re-runs itself
with ATEN_CPU_CAPABILITY=default against gen_dump's DEFAULT variant; torch
reads that variable only at start-up, hence the child process.

After most cases both sides also take a few raw 32-bit draws, so a wrong
draw count shows up as a mismatch even when the values matched.

Under scripts/test.sh torch's side of each variant (the script for gen_dump
and torch's outputs, which no build changes) is computed by the first
configuration and read back by the later ones (tests/torch_cache.py),
which then neither import torch nor start the child.

Exit status: 0 when everything matched, 1 on any mismatch or error.
"""
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402,F401  (on import: malloc keeps freed memory, st.keep_freed_memory)
import torch_cache  # noqa: E402

torch = None  # imported by reference() when torch_cache holds no value

RANDINT_RANGE = 2**32 - 1  # torch.randint range that still uses random()


# --------------------------------------------------------------------------
# Cases: a list of (command for gen_dump, function producing torch's lines).
# Each torch function returns a list of numpy arrays, one per output line of
# gen_dump (uint32 bit patterns, or uint64 for random64).
# --------------------------------------------------------------------------

def bits(t):
    return t.detach().contiguous().view(-1).numpy().view(np.uint32).copy()


def t_seed(s):
    torch.manual_seed(s)
    return []


def t_random(n):
    # random() % (2^32 - 1): equal to the raw word unless it is 2^32 - 1;
    # gen_dump's words get the same reduction before the comparison.
    v = torch.randint(0, RANDINT_RANGE, (n,), dtype=torch.int64)
    return [v.numpy().astype(np.uint64)]


def t_random64(n):
    # int64 random_() is random64() % 2^63 (the top bit is lost).
    v = torch.empty(n, dtype=torch.int64).random_()
    return [v.numpy().astype(np.uint64)]


def t_int64(n):
    # A DataLoader iterator's _base_seed: one scalar int64 random_() each.
    return [np.array([torch.empty((), dtype=torch.int64).random_().item() for _ in range(n)],
                     dtype=np.uint64)]


def t_randperm(n, s):
    # A shuffling RandomSampler: its seed drawn from the global generator,
    # the permutation from a fresh generator seeded with it.
    if s == "draw":
        s = int(torch.empty((), dtype=torch.int64).random_().item())
    return [torch.randperm(n, generator=torch.Generator().manual_seed(s)).numpy().astype(np.uint64)]


def t_state():
    return [torch.get_rng_state().numpy().copy()]


def t_setstate(b):
    torch.set_rng_state(torch.from_numpy(np.frombuffer(b, dtype=np.uint8).copy()))
    return []


def t_uniform(n, a, b):
    return [bits(torch.empty(n).uniform_(a, b))]


def t_normal(n, m, s):
    return [bits(torch.empty(n).normal_(m, s))]


def t_randn(n):
    return [bits(torch.randn(n))]


def ramp(n):
    return torch.tensor([((i % 97) - 48) * 0.125 for i in range(n)], dtype=torch.float32)


def t_dropout(n, p, use_ramp):
    x = ramp(n) if use_ramp else torch.ones(n)
    d = torch.nn.Dropout(p)
    d.train()
    return [bits(d(x))]


def t_linear(i, o, bias):
    lin = torch.nn.Linear(i, o, bias=bool(bias))
    out = [bits(lin.weight)]
    if bias:
        out.append(bits(lin.bias))
    return out


def t_embedding(num, dim, pad):
    emb = torch.nn.Embedding(num, dim, padding_idx=pad if pad >= 0 else None)
    return [bits(emb.weight)]


class Cases:
    def __init__(self):
        self.items = []  # (label, command, torch thunk, kind)

    def add(self, label, cmd, thunk, kind="f32"):
        self.items.append((label, cmd, thunk, kind))

    def seed(self, s):
        self.add("seed %d" % s, "seed %d" % s, lambda: t_seed(s), "none")

    def random(self, n=2, label="draw count"):
        self.add("%s: random %d" % (label, n), "random %d" % n, lambda: t_random(n), "u32")

    def random64(self, n):
        self.add("random64 %d" % n, "random64 %d" % n, lambda: t_random64(n), "u64")

    def int64(self, n):
        self.add("int64 random_() x%d" % n, "int64 %d" % n, lambda: t_int64(n), "u64")

    def randperm(self, n, s="draw"):
        self.add("randperm(%d) seed %s" % (n, s), "randperm %d %s" % (n, s),
                 lambda: t_randperm(n, s), "u64")

    def state(self):
        self.add("get_rng_state()", "state", t_state, "bytes")

    def setstate(self, b):
        self.add("set_rng_state()", "setstate " + b.hex(), lambda: t_setstate(b), "none")

    def uniform(self, n, a, b):
        self.add("uniform_(%r, %r) n=%d" % (a, b, n), "uniform %d %r %r" % (n, a, b),
                 lambda: t_uniform(n, a, b))

    def normal(self, n, m, s):
        self.add("normal_(%r, %r) n=%d" % (m, s, n), "normal %d %r %r" % (n, m, s),
                 lambda: t_normal(n, m, s))

    def randn(self, n):
        self.add("randn(%d)" % n, "randn %d" % n, lambda: t_randn(n))

    def dropout(self, n, p, use_ramp=False):
        name = "dropout_ramp" if use_ramp else "dropout"
        self.add("%s(p=%r) n=%d" % (name, p, n), "%s %d %r" % (name, n, p),
                 lambda: t_dropout(n, p, use_ramp))

    def linear(self, i, o, bias):
        self.add("Linear(%d, %d, bias=%s)" % (i, o, bool(bias)), "linear %d %d %d" % (i, o, bias),
                 lambda: t_linear(i, o, bias))

    def embedding(self, num, dim, pad=-1):
        self.add("Embedding(%d, %d, padding_idx=%d)" % (num, dim, pad),
                 "embedding %d %d %d" % (num, dim, pad), lambda: t_embedding(num, dim, pad))


SIZES = [1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 32, 33, 47, 100, 1000, 4099]
SEEDS = [123, 0, 1, 42, 789, 2**32 + 5, -5, -1, -(2**63), 2**63, 2**64 - 1]


def build_cases():
    c = Cases()

    # Raw words and random64 (order of the two halves) for several seeds,
    # including the seed forms torch accepts: negatives (two's complement),
    # >= 2^32 (only the low 32 bits count), 2^63, 2^64 - 1.
    for s in SEEDS:
        c.seed(s)
        c.random(10, "raw")
        c.random64(4)
        c.random(700, "raw across a twist")

    # What torch 1.13's DataLoader draws: the iterator's _base_seed, a
    # RandomSampler's seed and its randperm; then the stream goes on.
    for s in (123, 0, -5, 2**63):
        c.seed(s)
        c.int64(3)
        for n in (0, 1, 2, 3, 9, 10, 17, 100, 1000):
            c.randperm(n)
        c.randperm(9, 12345)
        c.randperm(700, 2**62 + 3)
        c.random()

    # The state in torch's bytes: after seeding, mid-stream, across a twist,
    # with a cached normal; and set from torch's bytes (the draws go on).
    for s in (123, 2**63, -5):
        c.seed(s)
        c.state()
        c.random(3, "raw")
        c.state()
        c.randn(1)
        c.state()
        c.random(700, "raw across a twist")
        c.state()
    torch.manual_seed(77)
    torch.randn(3)
    torch.empty(650).random_()
    mid = torch.get_rng_state().numpy().tobytes()
    c.seed(1)
    c.setstate(mid)
    c.state()
    c.randn(1)
    c.random(5, "after set_rng_state")
    c.uniform(20, -1.0, 1.0)

    # Uniform with ordinary and odd bounds over all the sizes.
    bounds = [(0.0, 1.0), (-0.37, 1.91), (-3.3, 7.77), (1e-8, 2.5), (-2.0, -1.0),
              (-1e6, 1e-6), (0.1, 0.1), (-0.5773502691896257, 0.5773502691896257),
              (1.0 / 3.0, 2.0 / 3.0)]
    for k, (a, b) in enumerate(bounds):
        c.seed(SEEDS[k % len(SEEDS)])
        for n in SIZES:
            c.uniform(n, a, b)
        c.random()
    c.seed(7)
    c.uniform(100000, -0.37, 1.91)
    c.random()

    # randn over all the sizes, each from a fresh seed and in one long
    # sequence (scalar-path calls leave the double cache for the next one).
    for s in (123, 0, 2**32 + 5, -5, 2**63):
        c.seed(s)
        for n in SIZES:
            c.randn(n)
        c.random()
    for n in SIZES:
        c.seed(123)
        c.randn(n)
        c.random()

    # Empty tensors draw nothing (and keep the cache).
    c.seed(5)
    c.randn(5)
    c.randn(0)
    c.uniform(0, -1.0, 1.0)
    c.dropout(0, 0.5)
    c.randn(1)
    c.random()

    # The double-normal cache: carried across calls, untouched by the block
    # path and by other distributions, scaled by the consuming call.
    c.seed(123)
    for n in (5, 3, 20, 1, 2, 7, 16, 1, 1, 9, 15, 1):
        c.randn(n)
    c.random()
    c.seed(11)
    c.randn(5)
    c.uniform(3, -1.0, 1.0)
    c.dropout(5, 0.5)
    c.linear(3, 2, 1)
    c.randn(40)
    c.normal(1, 0.5, 2.0)
    c.normal(3, -1.25, 0.3)
    c.random()
    c.seed(11)
    c.randn(5)
    c.seed(11)  # manual_seed clears the cache
    c.randn(1)
    c.random()

    # normal_ with other mean/std, block and scalar paths.
    c.seed(123)
    for n, m, s in [(40, 0.5, 2.0), (7, 0.5, 2.0), (1000, 0.3, 1.7), (9, 0.3, 1.7),
                    (17, -3.0, 0.01), (33, 1e3, 1e-3), (16, 0.0, 0.0), (4099, -0.1, 5.5)]:
        c.normal(n, m, s)
    c.random()
    # Many scalar-path (double) samples: 400 x 15 with mean 0.3, std 1.7.
    c.seed(321)
    for _ in range(400):
        c.normal(15, 0.3, 1.7)
    c.random()

    # Dropout (training mode), ones and a ramp with negative values.
    for k, p in enumerate((0.1, 0.5, 0.9, 0.0, 1.0, 0.25, 1e-9, 0.999999)):
        c.seed(SEEDS[k % len(SEEDS)])
        for n in (1, 5, 36, 72, 100, 1000, 4099):
            c.dropout(n, p)
            c.dropout(n, p, use_ramp=True)
        c.random()

    # nn.Linear: weight then bias, bias=False draws no bias.
    c.seed(123)
    for i in list(range(1, 34)) + [47, 64, 100, 255, 256, 511, 768, 999, 1000]:
        for o, bias in ((1, 1), (3, 0), (7, 1)):
            c.linear(i, o, bias)
    c.random()
    for s, (i, o, bias) in zip((123, 789, 0, -5),
                               [(3, 2, 0), (3, 2, 0), (768, 768, 1), (1000, 1000, 0)]):
        c.seed(s)
        c.linear(i, o, bias)
        c.random()
    # Every fan-in 1..1000 (the kaiming bound in double, then cast).
    c.seed(2024)
    for i in range(1, 1001):
        c.linear(i, 2, i % 2)
    c.random()
    c.seed(123)
    c.linear(768, 3072, 1)
    c.random()
    # The book's MultiHeadAttention(3, 2, 6, 0.0, 2) parameters in order.
    c.seed(123)
    for i, o, bias in ((3, 2, 0), (3, 2, 0), (3, 2, 0), (2, 2, 1)):
        c.linear(i, o, bias)
    c.random()

    # nn.Embedding, including padding_idx and a 2-element tail.
    c.seed(123)
    for num, dim, pad in [(6, 3, -1), (50, 8, -1), (4, 4, -1), (3, 5, -1), (6, 3, 2),
                          (10, 7, 0), (1, 1, -1), (1, 15, -1), (2, 8, 1), (1000, 64, 999),
                          (5, 0, -1), (0, 4, -1), (50257, 16, -1)]:
        c.embedding(num, dim, pad)
        c.random()
    return c


# --------------------------------------------------------------------------
# Running and comparing
# --------------------------------------------------------------------------

def parse_line(line, kind):
    line = line.strip()
    if not line:
        return np.zeros(0, dtype=np.uint64 if kind != "f32" else np.uint32)
    # fixed-width hex words (%08x, %016x) separated by spaces, which
    # bytes.fromhex skips: millions of values, no per-word Python objects
    if kind == "u64":
        return np.frombuffer(bytes.fromhex(line), dtype=">u8").astype(np.uint64)
    if kind == "bytes":
        return np.frombuffer(bytes.fromhex(line), dtype=np.uint8).copy()
    raw = np.frombuffer(bytes.fromhex(line), dtype=">u4").astype(np.uint32)
    return raw.astype(np.uint64) if kind == "u32" else raw


def reduce_c(arr, kind):
    """gen_dump's raw words as torch can observe them (see t_random*)."""
    if kind == "u32":
        return arr % np.uint64(RANDINT_RANGE)
    if kind == "u64":
        return arr & np.uint64(2**63 - 1)
    return arr


def reference_key(variant):
    with open(os.path.abspath(__file__), encoding="utf-8") as f:
        return (variant, f.read())  # the cases are this file's


def reference(variant):
    """torch's side of the variant: {"error": why} or {"script": gen_dump's
    input, "cases": [(label, kind, [torch's arrays])]}."""
    def compute():
        global torch
        import torch
        cap = [l for l in torch.__config__.show().splitlines() if "CPU capability" in l]
        cap = cap[0].split(":")[-1].strip() if cap else "?"
        # torch 1.13 names the default capability "NO AVX".
        want_cap = ("DEFAULT", "NO AVX") if variant == "default" else ("AVX2",)
        if cap not in want_cap:
            return {"error": "torch dispatches to %s, expected %s" % (cap, " or ".join(want_cap))}
        torch.set_num_threads(1)
        cases = build_cases().items
        script = "variant %s\n" % variant + "\n".join(cmd for _, cmd, _, _ in cases) + "\n"
        return {"script": script, "cases": [(label, kind, thunk()) for label, _, thunk, kind in cases]}
    return torch_cache.cached("torch_generator_diff", reference_key(variant), compute)


def run(variant):
    build = os.environ.get("MHA_BUILD_DIR")
    if not build:
        print("torch_generator_diff: MHA_BUILD_DIR is not set")
        return 1
    exe = os.path.join(build, "tests", "gen_dump")
    t0 = time.time()
    ref = reference(variant)
    if "error" in ref:
        print("torch_generator_diff[%s]: %s" % (variant, ref["error"]))
        return 1
    script = ref["script"]
    proc = subprocess.run([exe], input=script.encode(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    if proc.returncode != 0:
        print("torch_generator_diff[%s]: gen_dump failed (%d): %s" %
              (variant, proc.returncode, proc.stderr.decode(errors="replace")))
        return 1
    lines = proc.stdout.decode().split("\n")
    pos = 0
    n_cases = n_values = n_bad_cases = n_bad_values = 0
    for label, kind, expected in ref["cases"]:
        for exp in expected:
            if pos >= len(lines):
                print("FAIL %s: gen_dump output ended early" % label)
                return 1
            got = reduce_c(parse_line(lines[pos], kind), kind)
            pos += 1
            n_cases += 1
            n_values += exp.size
            if got.shape != exp.shape:
                n_bad_cases += 1
                print("FAIL [%s] %s: %d values, torch has %d" % (variant, label, got.size,
                                                                 exp.size))
                continue
            bad = np.nonzero(got != exp)[0]
            if bad.size:
                n_bad_cases += 1
                n_bad_values += bad.size
                i = bad[0]
                print("FAIL [%s] %s: %d of %d differ; first [%d]: mha 0x%x torch 0x%x" %
                      (variant, label, bad.size, exp.size, i, int(got[i]), int(exp[i])))
    if any(l.strip() for l in lines[pos:]):
        print("FAIL [%s]: gen_dump printed %d extra lines" % (variant, len(lines) - pos))
        n_bad_cases += 1
    print("torch_generator_diff[%s]: %d outputs (%d values) compared, %d outputs "
          "(%d values) differ, %.1f s" % (variant, n_cases, n_values, n_bad_cases,
                                           n_bad_values, time.time() - t0))
    return 0 if n_bad_cases == 0 else 1


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--variant":
        return run(sys.argv[2])
    rc = run("avx2")
    if torch_cache.has("torch_generator_diff", reference_key("default")):
        rc |= run("default")  # torch's side read back: no torch to start
    else:
        env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
        child = subprocess.run([sys.executable, os.path.abspath(__file__), "--variant", "default"],
                               env=env)
        rc |= child.returncode
    print("torch_generator_diff: %s" % ("all matched" if rc == 0 else "MISMATCH"))
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
