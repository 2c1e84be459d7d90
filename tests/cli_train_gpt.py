"""`mha train GPTModel` against the book's chapter 5 code in torch 1.13
(tests/book_train.py), on small random configurations:

  1. the printed log and samples: every logged loss within 1e-4 of torch's
     (the --json values are full floats), every sample the same text, the
     printed lines equal (two configurations: dropout, qkv_bias, batch 3,
     a partial validation batch, another seed, ratio and start context);
  2. --json's last line and log.json carry the keys the issue names; loss.svg
     is XML; mha generate on model.safetensors with temperature and top-k
     gives what the book's generate gives after torch.manual_seed(123);
  3. resume: a run stopped after one epoch and resumed, and a run killed
     (SIGKILL) mid-epoch while it saves every step and resumed, end with the
     files of an uninterrupted run byte for byte; 1 and 2 threads the same;
     a second trainer on the directory of a running one is refused;
  4. bad input: one line on stderr, exit status 1, nothing overwritten, no
     empty --out directory left behind.
With --sanitized (the ASan+UBSan build) the second configuration and the
generate check are left out: the code paths are the first one's; and its
runs train 2 epochs, not 3 (the resumed and the killed run too), checked
against the first 2 epochs of torch's 3-epoch run (the same reference the
other builds use: the book's loop has no schedule, its first epochs do not
depend on how many follow), every code path of the third epoch being the
second's.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402
import torch_cache  # noqa: E402

tally = st.Tally()
check = tally.check


MHA = os.environ.get("MHA_BIN") or st.find_bin()
VERDICT = os.path.join(HERE, "..", "data", "the-verdict.txt")
FILES = ("model.safetensors", "optimizer.safetensors", "train.safetensors")


def run_mha(*args, ok=True):
    p = subprocess.run([MHA] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=st.cli_env())
    if ok and p.returncode != 0:
        print("FAIL mha %s: %s" % (" ".join(args), p.stderr.decode()), flush=True)
        sys.exit(1)
    return p


def torch_run(text, cfg, extra):
    """book_train.py's output; under scripts/test.sh computed by the first
    configuration that asks and read back by the later ones (torch_cache)."""
    args = [sys.executable, os.path.join(HERE, "book_train.py"), text, "--cfg", json.dumps(cfg), "--json"] + extra
    with open(text, encoding="utf-8") as f:
        key = (f.read(), cfg, extra)
    out = torch_cache.cached("book_train", key, lambda: subprocess.run(
        args, stdout=subprocess.PIPE, check=True).stdout.decode()).splitlines()
    return out[:-1], json.loads(out[-1])


def cfg_args(cfg):
    a = []
    for k, v in cfg.items():
        a += ["--" + k.replace("_", "-"), str(v).lower() if isinstance(v, bool) else str(v)]
    return a


def first_epochs(lines, want, n):
    """torch's printed lines and --json object cut to its first n epochs: a
    line per logged row, then the epoch's sample."""
    log = [r for r in want["log"] if r["epoch"] <= n]
    return lines[:len(log) + n], dict(want, log=log, samples=want["samples"][:n])


def compare(name, text, cfg, extra, out, epochs=None):
    """mha against torch's run with `extra`; with `epochs`, mha trains that
    many and is checked against the start of torch's run."""
    t0 = time.time()
    want_lines, want = torch_run(text, cfg, extra)
    run_extra = extra
    if epochs is not None:
        want_lines, want = first_epochs(want_lines, want, epochs)
        i = extra.index("--epochs")
        run_extra = extra[:i + 1] + [str(epochs)] + extra[i + 2:]
    t1 = time.time()
    p = run_mha("train", "GPTModel", "--text", text, "--out", out, "--json", *(cfg_args(cfg) + run_extra))
    lines = p.stdout.decode().splitlines()
    got = json.loads(lines[-1])
    check(lines[:-1] == want_lines, "%s: printed lines differ:\n%s\nvs torch\n%s" %
          (name, "\n".join(lines[:-1]), "\n".join(want_lines)))
    check(len(got["log"]) == len(want["log"]), "%s: %d log rows, torch %d" % (name, len(got["log"]),
                                                                           len(want["log"])))
    worst = 0.0
    for g, w in zip(got["log"], want["log"]):
        for k in ("epoch", "step", "tokens_seen"):
            check(g[k] == w[k], "%s: %s %s, torch %s" % (name, k, g[k], w[k]))
        for k in ("train_loss", "val_loss"):
            worst = max(worst, abs(g[k] - w[k]))
    check(worst <= 1e-4, "%s: a loss is %.3g from torch's" % (name, worst))
    check(got["samples"] == want["samples"], "%s: samples differ: %s vs %s" % (name, got["samples"],
                                                                              want["samples"]))
    for k in ("train_s", "tokens_per_s", "step_ms_median", "peak_rss_mib"):
        # a JSON number: %.17g writes a whole one without a point (peak_rss_mib
        # is one whenever the peak is a whole MiB), which json reads as an int
        v = got.get(k)
        check(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, "%s: --json %s = %r" % (name, k, v))
    with open(os.path.join(out, "log.json")) as f:
        logged = json.load(f)
    check(logged["log"] == got["log"] and logged["samples"] == got["samples"],
          "%s: log.json is not the --json object" % name)
    try:
        root = ET.parse(os.path.join(out, "loss.svg")).getroot()
        check(root.tag.endswith("svg"), "%s: loss.svg root is %s" % (name, root.tag))
    except ET.ParseError as e:
        check(False, "%s: loss.svg: %s" % (name, e))
    print("%s: %d log rows, largest loss difference %.2g, %d samples equal (torch %.1f s, mha %.1f s)" %
          (name, len(got["log"]), worst, len(got["samples"]), t1 - t0, time.time() - t1), flush=True)
    return got


def generate_vs_torch(model_path):
    import torch
    from book_gpt import GPTModel, generate
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
    if os.environ.get("MHA_BUILD_DIR") and not os.environ.get("MHA_LIBRARY"):
        os.environ["MHA_LIBRARY"] = os.path.join(os.environ["MHA_BUILD_DIR"], "libmha.so")
    import mha.tokenizer
    tensors, meta = st.read(model_path)
    cfg = {k: int(meta[k]) for k in ("vocab_size", "context_length", "emb_dim", "n_heads", "n_layers")}
    cfg.update(drop_rate=float(meta["drop_rate"]), qkv_bias=meta["qkv_bias"] == "true")
    m = GPTModel(cfg)
    m.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=False)
    m.eval()
    tok = mha.tokenizer.get_encoding("gpt2")
    torch.manual_seed(123)
    idx = torch.tensor([tok.encode("Every effort moves you")])
    want = tok.decode(generate(m, idx, 15, cfg["context_length"], temperature=1.4, top_k=25)[0].tolist())
    p = run_mha("generate", model_path, "--prompt", "Every effort moves you", "--max-new-tokens", "15",
            "--temperature", "1.4", "--top-k", "25", "--seed", "123")
    got = p.stdout.decode().rstrip("\n")
    check(got == want, "generate: %r, torch %r" % (got, want))


def same_files(a, b, what):
    for f in FILES:
        with open(os.path.join(a, f), "rb") as x, open(os.path.join(b, f), "rb") as y:
            check(x.read() == y.read(), "%s: %s differs" % (what, f))


def main():
    tmp = tempfile.mkdtemp(prefix="mha-train-gpt-")
    small = os.path.join(tmp, "small.txt")
    with open(VERDICT) as f:
        text = f.read()
    with open(small, "w") as f:
        f.write(text[:3000])
    cfg1 = {"emb_dim": 64, "n_heads": 2, "n_layers": 2, "context_length": 32, "drop_rate": 0.1}
    ex1 = ["--epochs", "3", "--eval-freq", "3"]
    sanitized = "--sanitized" in sys.argv
    epochs = 2 if sanitized else 3
    compare("GPT E64 L2 C32 drop 0.1", small, cfg1, ex1, os.path.join(tmp, "a"), epochs=2 if sanitized else None)
    cfg2 = {"emb_dim": 48, "n_heads": 4, "n_layers": 3, "context_length": 24, "drop_rate": 0.2, "qkv_bias": True}
    ex2 = ["--epochs", "2", "--eval-freq", "4", "--eval-iter", "2", "--batch", "3", "--train-ratio", "0.8",
           "--seed", "7", "--start-context", "I had always", "--lr", "0.001"]
    if not sanitized:
        compare("GPT E48 L3 H4 C24 qkv drop 0.2 batch 3", small, cfg2, ex2, os.path.join(tmp, "b"))
        generate_vs_torch(os.path.join(tmp, "a", "model.safetensors"))

    # resume: after one epoch; killed mid-epoch; threads
    base = ["--text", small] + cfg_args(cfg1) + ["--eval-freq", "3"]
    r = os.path.join(tmp, "r")
    run_mha("train", "GPTModel", "--out", r, "--epochs", "1", *base)
    run_mha("train", "GPTModel", "--out", r, "--epochs", str(epochs), "--resume", "--threads", "1")
    same_files(os.path.join(tmp, "a"), r, "resumed after epoch 1")
    k = os.path.join(tmp, "k")
    proc = subprocess.Popen([MHA, "train", "GPTModel", "--out", k, "--epochs", str(epochs), "--save-every", "1"] + base,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=st.cli_env())
    t0 = time.time()
    while time.time() - t0 < 60 and proc.poll() is None:
        try:
            with open(os.path.join(k, "log.json")) as f:
                if len(json.load(f)["log"]) >= 2:
                    break
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    # while it runs, a second trainer on its directory is refused (the
    # directory's lock), and the running one goes on untouched
    alive = proc.poll() is None  # it has epochs left: the kill below needs it alive too
    busy = run_mha("train", "GPTModel", "--out", k, "--epochs", str(epochs), "--resume", ok=False)
    err = busy.stderr.decode()
    check(not alive or (busy.returncode == 1 and err.count("\n") == 1 and
                        "another mha train is writing to this directory" in err),
          "a second trainer on a running run's directory: status %d, stderr %r" % (busy.returncode, err))
    time.sleep(0.3)  # somewhere inside a step or a save
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    check(killed, "the run to kill ended before it could be killed")
    run_mha("train", "GPTModel", "--out", k, "--epochs", str(epochs), "--resume", "--threads", "2")
    same_files(os.path.join(tmp, "a"), k, "killed mid-epoch and resumed")
    left = sorted(f for f in os.listdir(k) if ".next" in f or ".tmp" in f or "commit" in f)
    check(not left, "temporary files left in the run directory: %s" % left)

    # bad input: one line on stderr, status 1, nothing overwritten
    short = os.path.join(tmp, "short.txt")
    with open(short, "w") as f:
        f.write("Every effort moves you.")
    empty = os.path.join(tmp, "empty.txt")
    open(empty, "w").close()
    a = os.path.join(tmp, "a")
    before = {f: open(os.path.join(a, f), "rb").read() for f in FILES}
    small_cfg = cfg_args(cfg1)
    bad = [
        (["--text", short] + small_cfg, "has 4 tokens; one window of --context-length 32 needs 33"),
        (["--text", small, "--train-ratio", "0.995"] + small_cfg, "validation text has"),
        (["--text", empty] + small_cfg, "empty"),
        (["--text", os.path.join(tmp, "missing.txt")] + small_cfg, "cannot open"),
        (["--text", small, "--batch", "0"] + small_cfg, "--batch"),
        (["--text", small, "--train-ratio", "1"] + small_cfg, "--train-ratio"),
        (["--text", small, "--train-ratio", "0"] + small_cfg, "--train-ratio"),
        (["--text", small, "--batch", "100"] + small_cfg, "fewer than one --batch of 100"),
        (["--text", small, "--weights", os.path.join(a, "model.safetensors"), "--context-length", "64"],
         "above the model's context: pos_emb has 32 rows"),
        (["--text", small, "--out", a] + small_cfg, "a run is there"),
        (["--out", a, "--resume", "--batch", "4"], "has --batch 2, not 4"),
        (["--out", a, "--resume", "--n-layers", "3"], "another configuration"),
        (["--out", a, "--resume", "--text", short], "not the text"),
        (["--out", os.path.join(tmp, "none"), "--resume"], "holds no run"),
        (["--text", small, "--lr", "1e30", "--save-every", "1"] + small_cfg, "the training loss is nan"),
        (["--bogus"], "unknown option"),
        (["--text", small, "--accum", "0"] + small_cfg, "--accum: 0 is out of range"),
        (["--text", small, "--reduce", "ring"] + small_cfg, "--reduce: 'ring' is not tree or allreduce"),
        (["--out", a, "--resume", "--accum", "2"], "has --accum 1, not 2"),
        (["--out", a, "--resume", "--reduce", "allreduce"], "has --reduce tree, not allreduce"),
    ]
    for args, want in bad:
        if "--out" not in args:
            args = args + ["--out", os.path.join(tmp, "bad")]
        p = run_mha("train", "GPTModel", *args, ok=False)
        err = p.stderr.decode()
        check(p.returncode == 1 and err.count("\n") == 1 and want in err,
              "mha train GPTModel %s: status %d, stderr %r (want %r)" % (" ".join(args), p.returncode, err, want))
        bad_dir = os.path.join(tmp, "bad")
        check(not os.path.isdir(bad_dir) or os.listdir(bad_dir),
              "mha train GPTModel %s left an empty directory" % " ".join(args))
        subprocess.run(["rm", "-rf", os.path.join(tmp, "bad")])
    check(not os.path.exists(os.path.join(tmp, "none")), "--resume created the directory it did not find")
    after = {f: open(os.path.join(a, f), "rb").read() for f in FILES}
    check(before == after, "a refused command changed the run's files")
    subprocess.run(["rm", "-rf", tmp])
    print("cli_train_gpt: %s" % ("OK" if tally.fails == 0 else "%d FAILED" % tally.fails))
    return tally.status()


if __name__ == "__main__":
    sys.exit(main())
