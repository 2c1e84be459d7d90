"""`mha tokenize`: known ids and text, stdin, --json, round trips through
pipes, where it finds the tokenizer files, and every invalid invocation as
exit status 1 with one non-empty line on stderr naming the problem and
nothing on stdout.

Usage: cli_tokenize.py [--bin PATH] [-v]   (binary: $MHA_BIN, else --bin,
else ../build*/mha). Needs python3 only (no torch).
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "data", "gpt2")


class Suite:
    def __init__(self, binary, verbose):
        self.bin = binary
        self.verbose = verbose
        self.passed = 0
        self.failed = 0

    def run(self, args, stdin=b"", env=None):
        e = dict(os.environ)
        e.pop("MHA_TOKENIZER_DIR", None)
        e.update(env or {})
        p = subprocess.run([self.bin, "tokenize"] + args, input=stdin, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=e, timeout=60)
        return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")

    def check(self, name, cond, detail=""):
        if cond:
            self.passed += 1
            if self.verbose:
                print("ok   %s" % name)
        else:
            self.failed += 1
            print("FAIL %s %s" % (name, detail))

    def ok(self, name, args, want, stdin=b"", env=None):
        """Exit 0, stdout == want (bytes), stderr empty."""
        rc, out, err = self.run(args, stdin, env)
        self.check(name, rc == 0 and out == want and err == "",
                   "rc=%d out=%r err=%r (wanted %r)" % (rc, out[:200], err, want[:200]))
        return out

    def error(self, name, args, keyword, stdin=b"", env=None):
        """Exit 1, nothing on stdout, one line on stderr matching keyword."""
        rc, out, err = self.run(args, stdin, env)
        lines = err.split("\n")
        one_line = len(lines) == 2 and lines[1] == "" and lines[0].startswith("mha: error: ")
        self.check(name, rc == 1 and out == b"" and one_line and
                   re.search(keyword, err, re.IGNORECASE) is not None,
                   "rc=%d out=%r err=%r (wanted /%s/)" % (rc, out[:100], err, keyword))


def run_all(s):
    v = ["--vocab", DATA]
    # ---- encoding ------------------------------------------------------------
    s.ok("Hello, I am", ["Hello, I am"], b"15496,11,314,716\n")
    s.ok("the default files (source tree)", ["Hello, I am"], b"15496,11,314,716\n")
    s.ok("--vocab", v + ["Hello, I am"], b"15496,11,314,716\n")
    s.ok("$MHA_TOKENIZER_DIR", ["Hello"], b"15496\n", env={"MHA_TOKENIZER_DIR": DATA})
    s.ok("--json", ["--json", "Hello, I am"], b"[15496,11,314,716]\n")
    s.ok("empty text", [""], b"\n")
    s.ok("empty --json", ["--json", ""], b"[]\n")
    s.ok("stdin, final newline included", ["-"], b"15496,11,314,716,198\n", stdin=b"Hello, I am\n")
    s.ok("stdin, NUL bytes", ["-"], b"64,188,65\n", stdin=b"a\0b")
    s.ok("-- before a text beginning with -", ["--", "-5 and --json"],
         b"12,20,290,1377,17752\n")
    s.ok("emoji", ["\U0001F917"], b"8582,97,245\n")
    s.ok("--help", ["--help"], s.run(["--help"])[1])
    rc, out, _ = s.run(["--help"])
    s.check("--help says usage", rc == 0 and b"usage: mha tokenize" in out)

    # ---- decoding ------------------------------------------------------------
    s.ok("--decode", ["--decode", "15496,11,314,716"], b"Hello, I am\n")
    s.ok("--decode -n", ["--decode", "-n", "15496,11,314,716"], b"Hello, I am")
    s.ok("--decode blanks", ["--decode", " 15496 , 11,\t314 ,716 "], b"Hello, I am\n")
    s.ok("--decode a JSON array", ["--decode", "[15496, 11]"], b"Hello,\n")
    s.ok("--decode nothing", ["--decode", ""], b"\n")
    s.ok("--decode []", ["--decode", "[ ]"], b"\n")
    s.ok("--decode stdin", ["--decode", "-"], b"Hello, I am\n", stdin=b"15496,11,314,716\n")
    s.ok("--decode half an emoji: the bytes", ["--decode", "-n", "8582"], b"\xf0\x9f")
    s.ok("--decode --json", ["--decode", "--json", "15496,11,198,1"], b'"Hello,\\n\\""\n')
    s.ok("--decode --json half an emoji: U+FFFD", ["--decode", "--json", "8582,1"],
         '"\ufffd\\""\n'.encode())
    s.ok("--decode 0 and 50256", ["--decode", "-n", "0,50256"], b"!<|endoftext|>")
    s.ok("--decode leading zeros", ["--decode", "-n", "007"], b"(")

    # ---- round trips through pipes -------------------------------------------
    texts = ["caf\u00e9 \u65e5\u672c \U0001F468\u200d\U0001F469 \u0645\u0631\u062d\u0628\u0627 "
             "it's IT'S  two  spaces\n\n\ttab\n".encode(), bytes(range(1, 128))]
    for t in texts:
        ids = s.run(["-"], stdin=t)[1]
        s.ok("round trip %r" % t[:20], ["--decode", "-n", "-"], t, stdin=ids)
        ids = s.run(["--json", "-"], stdin=t)[1]
        s.ok("round trip --json %r" % t[:20], ["--decode", "-n", "-"], t, stdin=ids)

    # ---- errors --------------------------------------------------------------
    s.error("no text", [], r"no text")
    s.error("no ids", ["--decode"], r"no ids")
    s.error("two texts", ["a", "b"], r"more than one")
    s.error("unknown option", ["--bogus", "x"], r"unknown option '--bogus'")
    s.error("-n without --decode", ["-n", "x"], r"-n goes with --decode")
    s.error("--vocab without a value", ["--vocab"], r"--vocab needs")
    s.error("invalid UTF-8 argument", ["-"], r"not valid UTF-8 at byte 1", stdin=b"a\xffb")
    s.error("truncated UTF-8", ["-"], r"not valid UTF-8 at byte 3", stdin=b"abc\xe2\x82")
    s.error("surrogate", ["-"], r"not valid UTF-8 at byte 0", stdin=b"\xed\xa0\x80")
    s.error("overlong", ["-"], r"not valid UTF-8 at byte 2", stdin=b"ab\xc0\xaf")
    s.error("empty item", ["--decode", "1,,2"], r"item 2 of 3 is empty")
    s.error("trailing comma", ["--decode", "1,2,"], r"item 3 of 3 is empty")
    s.error("leading comma", ["--decode", ",1"], r"item 1 of 2 is empty")
    s.error("only a comma", ["--decode", ","], r"empty")
    s.error("junk", ["--decode", "1,2x"], r"item 2 \('2x'\) is not a token id")
    s.error("negative id", ["--decode", "-1"], r"unknown option|not a token id")
    s.error("negative id after --", ["--decode", "--", "-1"], r"item 1 \('-1'\) is not a token id")
    s.error("sign", ["--decode", "+5"], r"not a token id")
    s.error("hex", ["--decode", "0x10"], r"not a token id")
    s.error("space inside an id", ["--decode", "15 496"], r"not a token id")
    s.error("id out of range", ["--decode", "15496,50257"], r"item 2 \('50257'\) is out of range \[0, 50256\]")
    s.error("huge id", ["--decode", "99999999999999999999"], r"out of range")
    s.error("unclosed [", ["--decode", "[1,2"], r"without a closing")
    s.error("junk on stdin shown escaped", ["--decode", "-"], r"\\x01", stdin=b"1,\x01\n")
    s.error("--vocab missing dir", ["--vocab", "/nonexistent-mha", "x"],
            r"--vocab: /nonexistent-mha/encoder.json: no such file")
    s.error("$MHA_TOKENIZER_DIR missing dir", ["x"], r"MHA_TOKENIZER_DIR: /nonexistent-mha",
            env={"MHA_TOKENIZER_DIR": "/nonexistent-mha"})
    with tempfile.TemporaryDirectory(prefix="mha_tok_") as tmp:
        shutil.copy(os.path.join(DATA, "encoder.json"), tmp)
        with open(os.path.join(DATA, "vocab.bpe"), "rb") as f:
            bpe = f.read()
        with open(os.path.join(tmp, "vocab.bpe"), "wb") as f:
            f.write(bpe.replace(b"\n", b"\r\n"))
        s.error("CRLF vocab.bpe", ["--vocab", tmp, "x"], r"vocab.bpe line 2: carriage return")
        with open(os.path.join(tmp, "vocab.bpe"), "wb") as f:
            f.write(bpe[:-1])
        s.error("vocab.bpe without its last newline", ["--vocab", tmp, "x"], r"no newline")
        with open(os.path.join(tmp, "vocab.bpe"), "wb") as f:
            f.write(bpe)
        with open(os.path.join(tmp, "encoder.json"), "w") as f:
            f.write("{}")
        s.error("empty encoder.json", ["--vocab", tmp, "x"], r"encoder.json: 0 tokens")
        os.unlink(os.path.join(tmp, "encoder.json"))
        s.error("no encoder.json", ["--vocab", tmp, "x"], r"encoder.json: no such file")


def find_bin(explicit):
    if explicit:
        return explicit
    if os.environ.get("MHA_BIN"):
        return os.environ["MHA_BIN"]
    for b in sorted(glob.glob(os.path.join(os.path.dirname(HERE), "build*", "mha"))):
        if os.access(b, os.X_OK):
            return b
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=None)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    binary = find_bin(a.bin)
    if not binary or not os.access(binary, os.X_OK):
        print("error: no mha binary (set MHA_BIN or --bin)")
        print("0 passed, 1 failed")
        return 1
    s = Suite(binary, a.verbose)
    run_all(s)
    print("%d passed, %d failed" % (s.passed, s.failed))
    return 1 if s.failed else 0


if __name__ == "__main__":
    sys.exit(main())
