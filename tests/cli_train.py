"""`mha train`: it learns, it resumes exactly, its pictures are SVG, its
errors are one line.

  1. 600 steps of the default task: the loss falls from about ln 16 = 2.77
     to below 0.2 and the held-out accuracy passes 95% (deterministic:
     the run does not depend on the thread count);
  2. 100 steps, then --resume to 200, gives the same model, optimizer and
     loss-curve files, byte for byte, as 200 steps straight (1, 2 and 3
     threads);
  3. loss.svg and attention.svg parse as XML with an <svg> root;
  4. mha run takes model.safetensors;
  5. bad settings and a resume with other settings fail with one line on
     stderr and exit status 1, and leave no directory they created.
With --sanitized (the ASan+UBSan build) step 1 runs 60 steps and does not
ask for the learning: the loop is the same, the other builds check the loss.
"""
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402

tally = st.Tally()
check = tally.check


def run(binary, *args, threads=None):
    cmd = [binary] + list(args)
    if threads:
        cmd += ["--threads", str(threads)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    sanitized = sys.argv[1:] == ["--sanitized"]
    if sys.argv[1:] and not sanitized:
        print("usage: cli_train.py [--sanitized]")
        return 2
    binary = st.find_bin(None)
    with tempfile.TemporaryDirectory(prefix="mha_train_") as tmp:
        a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
        steps = 60 if sanitized else 600
        rc, out, err = run(binary, "train", "--steps", str(steps), "--out", a, threads=1)
        check(rc == 0, "train exit %d: %s" % (rc, err))
        print(out.strip().splitlines()[-2] if out.strip() else "(no output)")
        tensors, meta = st.read(os.path.join(a, "train.safetensors"))
        loss = tensors["loss"]
        check(loss.shape == (steps,), "loss curve shape %s" % (loss.shape,))
        check(loss[:10].mean() > 2.0, "first losses %s" % loss[:10])
        held = [l for l in out.splitlines() if l.startswith("held-out")]
        if sanitized:
            print("sanitizer build: %d steps, the learning is checked by the other builds" % steps)
            check(bool(held), "no held-out line in %r" % out)
        else:
            check(loss[-20:].mean() < 0.2, "last losses mean %.4f, want < 0.2" % loss[-20:].mean())
            check(held and float(held[0].split("accuracy ")[1].split("%")[0]) > 95.0, "held-out line: %s" % held)
        check(meta.get("step") == str(steps) and meta.get("lag") == "3", "metadata %s" % meta)

        c = os.path.join(tmp, "c")
        rc, _, err = run(binary, "train", "--steps", "200", "--out", c, threads=2)
        check(rc == 0, "train 200: %s" % err)
        rc, _, err = run(binary, "train", "--steps", "100", "--out", b, threads=1)
        check(rc == 0, "train 100: %s" % err)
        rc, out2, err = run(binary, "train", "--steps", "200", "--resume", "--out", b, threads=3)
        check(rc == 0 and "resuming at step 100" in out2, "resume: %s %s" % (out2, err))
        for f in ("model.safetensors", "optimizer.safetensors", "train.safetensors"):
            check(read(os.path.join(c, f)) == read(os.path.join(b, f)),
                  "%s differs between 200 steps and 100 + resume to 200 (1, 2, 3 threads)" % f)

        # a second trainer on the directory of a running one is refused
        # (its flock, which /proc/locks lists once the first holds it)
        e = os.path.join(tmp, "e")
        first = subprocess.Popen([binary, "train", "--steps", "1000000", "--out", e, "--threads", "1"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0 = time.time()
        while first.poll() is None and time.time() - t0 < 30:
            with open("/proc/locks") as f:
                if any(ln.split()[1] == "FLOCK" and ln.split()[4] == str(first.pid) for ln in f if ln.strip()):
                    break
            time.sleep(0.02)
        rc, _, err = run(binary, "train", "--steps", "10", "--out", e)
        check(first.poll() is None and rc == 1 and err.count("\n") == 1 and "another mha train" in err,
              "a second trainer on a running one's directory: exit %d, stderr %r" % (rc, err))
        first.kill()
        first.wait()

        for f in ("loss.svg", "attention.svg"):
            try:
                root = ET.parse(os.path.join(a, f)).getroot()
                check(root.tag.endswith("svg"), "%s root %s" % (f, root.tag))
            except Exception as e:  # noqa: BLE001
                check(False, "%s: %r" % (f, e))

        xfile, yfile = os.path.join(tmp, "x.safetensors"), os.path.join(tmp, "y.safetensors")
        import numpy as np
        st.write(xfile, {"x": np.zeros((1, 24, 32), dtype=np.float32)})
        rc, _, err = run(binary, "run", os.path.join(a, "model.safetensors"), "-i", xfile, "-o", yfile)
        check(rc == 0, "mha run on the trained model: %s" % err)

        for args, what in ((["--lag", "24"], "below --tokens"), (["--emb-dim", "30"], "divisible"),
                           (["--lr", "-1"], "non-negative"), (["--steps", "0"], "out of range"),
                           (["--steps", "700", "--resume", "--out", b, "--lag", "2"], "--lag"),
                           (["--resume", "--out", os.path.join(tmp, "none")], "train.safetensors"),
                           (["--bogus"], "unknown option")):
            rc, _, err = run(binary, "train", *args)
            check(rc == 1 and err.count("\n") == 1 and what in err,
                  "train %s: exit %d, stderr %r (want one line naming %r)" % (" ".join(args), rc, err, what))
        check(not os.path.exists(os.path.join(tmp, "none")), "a refused --resume left the directory it created")
    print("%s" % ("cli_train: ok" if not tally.fails else "cli_train: %d failed" % tally.fails))
    return tally.status()


if __name__ == "__main__":
    sys.exit(main())
