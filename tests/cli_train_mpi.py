"""`mpirun -np N mha train GPTModel` (issue 20), on a small configuration
with dropout on, over loopback and shared memory only:

  1. the same bits for any N: N = 1, 2 and 4 processes (--oversubscribe,
     --threads 1) and no mpirun (1, 2 and 3 threads) give identical log.json losses
     and identical model, optimizer and train.safetensors bytes; also with
     --accum 2, and with a batch of 3 over 2 processes (unequal shares);
  2. --reduce allreduce runs (its bits may depend on N: its losses are
     checked close, not equal);
  3. resume under another N: a run of 2 processes stopped after one epoch
     and resumed with 4 ends with the uninterrupted run's files;
  4. a killed rank: SIGKILL to rank 1 mid-run makes mpirun exit non-zero
     within 10 s, the last checkpoint stays whole, and --resume without
     mpirun continues it to the uninterrupted run's bits;
  5. a batch smaller than the processes is refused with one line.
Needs mpirun (Debian's openmpi-bin); registered only when mha is built with
MPI (-DMHA_MPI).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402

tally = st.Tally()
check = tally.check


MHA = os.environ.get("MHA_BIN") or st.find_bin()
MPIRUN = os.environ.get("MHA_MPIRUN") or shutil.which("mpirun")
VERDICT = os.path.join(HERE, "..", "data", "the-verdict.txt")
FILES = ("model.safetensors", "optimizer.safetensors", "train.safetensors")
CFG = ["--emb-dim", "64", "--n-layers", "2", "--n-heads", "2", "--context-length", "32", "--drop-rate", "0.1",
       "--batch", "4", "--eval-freq", "3", "--sample-tokens", "8", "--seed", "7"]


def mpirun(n):
    a = [MPIRUN, "--oversubscribe", "-np", str(n)]
    if os.geteuid() == 0:
        a.insert(1, "--allow-run-as-root")
    return a


def train(out, np_=0, extra=(), ok=True, threads=None):
    cmd = (mpirun(np_) if np_ else []) + [MHA, "train", "GPTModel", "--text", SMALL, "--out", out, "--json"] + CFG
    cmd += list(extra)
    cmd += ["--threads", str(threads or (1 if np_ else 2))]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if ok and p.returncode != 0:
        print("FAIL %s: %s" % (" ".join(cmd), p.stderr.decode()[-2000:]), flush=True)
        sys.exit(1)
    return p


def files_of(d):
    return {f: open(os.path.join(d, f), "rb").read() for f in FILES}


def losses(d):
    with open(os.path.join(d, "log.json")) as f:
        return [(r["step"], r["train_loss"], r["val_loss"]) for r in json.load(f)["log"]]


def same(a, b, what):
    fa, fb = files_of(a), files_of(b)
    for f in FILES:
        check(fa[f] == fb[f], "%s: %s differs" % (what, f))
    check(losses(a) == losses(b), "%s: log.json's losses differ:\n%s\n%s" % (what, losses(a), losses(b)))


def main():
    global SMALL
    if not MPIRUN:
        print("FAIL mpirun not found: apt-get install openmpi-bin (scripts/deps.sh --test installs it)")
        return 1
    tmp = tempfile.mkdtemp(prefix="mha-mpi-")
    SMALL = os.path.join(tmp, "small.txt")
    with open(VERDICT, encoding="utf-8") as f, open(SMALL, "w", encoding="utf-8") as g:
        g.write(f.read()[:3000])
    ep = ["--epochs", "2"]

    # 1. the same bits for N = none, 1, 2, 4
    ref = os.path.join(tmp, "ref")
    p_ref = train(ref, 0, ep)
    check(len(losses(ref)) >= 3, "the reference run logged %d rows" % len(losses(ref)))
    for n in (1, 2, 4):
        d = os.path.join(tmp, "np%d" % n)
        t0 = time.time()
        p = train(d, n, ep)
        if n == 2:
            p_np2 = p
        last = json.loads(p.stdout.decode().splitlines()[-1])
        check(last.get("ranks") == n, "np %d: --json says ranks %s" % (n, last.get("ranks")))
        same(ref, d, "np %d against no mpirun" % n)
        print("np %d: the same bits as the single process (%.1f s)" % (n, time.time() - t0), flush=True)
    # the thread count changes no bit either: 1 and 3 threads without mpirun
    for th in (1, 3):
        d = os.path.join(tmp, "threads%d" % th)
        train(d, 0, ep, threads=th)
        same(ref, d, "%d threads against 2" % th)
    # the printed lines too (rank 0 alone prints): those two runs' stdout
    check(p_ref.stdout.decode().splitlines()[:-1] == p_np2.stdout.decode().splitlines()[:-1],
          "np 2 printed other lines than no mpirun")
    # --accum 2, and an uneven share (batch 3 over 2)
    for extra, n, what in ((["--accum", "2"], 2, "--accum 2"), (["--batch", "3"], 2, "batch 3 over 2")):
        a, b = os.path.join(tmp, "a_" + what.replace(" ", "_")), os.path.join(tmp, "b_" + what.replace(" ", "_"))
        train(a, 0, ep + extra)
        train(b, n, ep + extra)
        same(a, b, what)
        print("%s: the same bits with %d processes" % (what, n), flush=True)
    acc = losses(os.path.join(tmp, "a_--accum_2"))
    check(len(acc) >= 1 and acc != losses(ref), "--accum 2 changed nothing")

    # 2. --reduce allreduce: runs, and lands near the tree's losses
    d = os.path.join(tmp, "allreduce")
    train(d, 2, ep + ["--reduce", "allreduce"])
    la, lr = losses(d), losses(ref)
    check(len(la) == len(lr) and all(abs(x[1] - y[1]) < 1e-3 and abs(x[2] - y[2]) < 1e-3 for x, y in zip(la, lr)),
          "--reduce allreduce's losses are not near the tree's: %s / %s" % (la, lr))
    p = train(d, 0, ["--resume", "--epochs", "3", "--reduce", "tree"], ok=False)
    check(p.returncode == 1 and b"--reduce allreduce" in p.stderr, "resume with another --reduce: %s" % p.stderr)

    # 3. resume under another N
    d = os.path.join(tmp, "resume")
    train(d, 2, ["--epochs", "1"])
    train(d, 4, ["--epochs", "2", "--resume"])
    same(ref, d, "np 2 for an epoch, resumed with np 4")
    print("resumed under another N: the same bits", flush=True)

    # 4. a killed rank
    d = os.path.join(tmp, "killed")
    cmd = mpirun(2) + [MHA, "train", "GPTModel", "--text", SMALL, "--out", d, "--threads", "1", "--save-every",
                       "1", "--epochs", "40"] + CFG
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    victim = None
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(os.path.join(d, "train.safetensors")) and victim is None:
            victim = rank_pid(d, 1)
            if victim:
                time.sleep(0.3)  # mid-step, mid-checkpoint perhaps
                t_kill = time.time()
                os.kill(victim, signal.SIGKILL)
                break
        time.sleep(0.05)
    check(victim is not None, "no rank 1 to kill was found")
    if victim is not None:
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = None
        waited = time.time() - t_kill
        check(rc is not None and rc != 0 and waited < 10,
              "after rank 1 was killed mpirun exited %s after %.1f s (want non-zero within 10 s)" % (rc, waited))
        print("killed rank 1: mpirun exited %s after %.1f s" % (rc, waited), flush=True)
        # the checkpoint is whole: resumed without mpirun to epoch 2 it is the reference
        p = train(d, 0, ["--epochs", "2", "--resume"], ok=False)
        if p.returncode == 0:
            same(ref, d, "killed at a step of epoch <= 2, resumed without mpirun")
        else:
            # killed past epoch 2: the files must still load and continue
            check(b"adds none" in p.stderr or p.returncode == 0, "resume after the kill: %s" % p.stderr.decode())
    proc.stderr.close()

    # 5. more processes than windows in a batch
    p = train(os.path.join(tmp, "toomany"), 4, ep + ["--batch", "2"], ok=False)
    check(p.returncode != 0 and b"--batch 2 is smaller than the 4 processes" in p.stderr,
          "--batch 2 under 4 processes: %s" % p.stderr.decode()[-500:])

    shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (tally.passes, tally.fails))
    return tally.status()


def rank_pid(out, rank):
    """The pid of the process of this run (--out) whose rank is `rank`."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().split(b"\0")
            if out.encode() not in cmd or not cmd[0].endswith(b"mha"):
                continue
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
            if ("OMPI_COMM_WORLD_RANK=%d" % rank).encode() in env:
                return int(pid)
        except OSError:
            continue
    return None


if __name__ == "__main__":
    sys.exit(main())
