"""torch references that no build changes, computed once per run of
scripts/test.sh and read back by its later configurations.

The book's chapter 5 training runs in torch (book_train.py for
cli_train_gpt, the book's GPTModel in torch_book_train) take most of those
tests' time and give the same result whichever build of mha is being
tested; so do torch's draws that torch_generator_diff compares gen_dump's
with (and its script for gen_dump, which torch's state makes).
scripts/test.sh points MHA_TORCH_CACHE at a directory of its own
(removed when it exits): the first configuration whose test needs a
reference computes it and stores it there, under a hash of everything it
depends on (the key the test gives: the text, the configuration, the
settings; and the oracle's sources, tests/book_*.py), and the later
configurations load it. Without MHA_TORCH_CACHE (ctest or a test run by
hand) every reference is computed afresh.
"""
import fcntl
import glob
import hashlib
import os
import pickle

HERE = os.path.dirname(os.path.abspath(__file__))


def _path(d, name, key):
    h = hashlib.sha256(repr((name, key)).encode("utf-8"))
    for f in sorted(glob.glob(os.path.join(HERE, "book_*.py"))):
        with open(f, "rb") as src:
            h.update(src.read())
    return os.path.join(d, "%s-%s.pickle" % (name, h.hexdigest()[:24]))


def has(name, key):
    """Whether cached(name, key, ...) would read a stored value."""
    d = os.environ.get("MHA_TORCH_CACHE")
    return bool(d) and os.path.exists(_path(d, name, key))


def cached(name, key, compute):
    """compute()'s value (picklable), or the value stored for (name, key)
    by an earlier call with the same oracle sources."""
    d = os.environ.get("MHA_TORCH_CACHE")
    if not d:
        return compute()
    path = _path(d, name, key)
    os.makedirs(d, exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second test with this key waits for the first
        if os.path.exists(path):
            with open(path, "rb") as f:
                return pickle.load(f)
        value = compute()
        with open(path + ".tmp", "wb") as f:
            pickle.dump(value, f)
        os.replace(path + ".tmp", path)
        return value
