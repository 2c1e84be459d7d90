"""Minimal safetensors reader/writer for the tests (numpy based).

Format: 8-byte little-endian header length N, then N bytes of UTF-8 JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{str: str}}, then the raw little-endian tensor bytes; offsets are relative to
the end of the header. There is no safetensors package on this machine, so
this is written from the format description.
"""
import json
import struct

import numpy as np

DTYPES = {
    "BOOL": np.dtype("bool"),
    "U8": np.dtype("<u1"),
    "I8": np.dtype("<i1"),
    "I16": np.dtype("<i2"),
    "U16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "I32": np.dtype("<i4"),
    "U32": np.dtype("<u4"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I64": np.dtype("<i8"),
    "U64": np.dtype("<u8"),
}
_NAMES = {v: k for k, v in DTYPES.items()}


def keep_freed_memory():
    """glibc's malloc in this process keeps what is freed (trim threshold
    1 GiB) and serves blocks up to 32 MiB (its ceiling) from the heap, not
    from a fresh mmap each: torch's per-step tensors (a batch's logits over
    the 50257-word vocabulary, 26 MiB) otherwise fault in new zeroed pages
    at every step. Measured on 2 cores: cli_train_gpt + torch_book_train
    72 -> 49 CPU s (sys 24 -> 11). This process only: the mha processes the
    tests start get glibc's defaults, as a user's do. Called on import; a
    no-op where malloc is not glibc's (or is ASan's, which ignores it)."""
    import ctypes
    import sys
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
    mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD (also ends glibc's dynamic threshold)


keep_freed_memory()


def _as_numpy(t):
    """numpy array from a numpy array or a torch tensor (detached, CPU)."""
    if hasattr(t, "detach"):
        t = t.detach().cpu().contiguous().numpy()
    return np.ascontiguousarray(t)


def dtype_name(a):
    for name, d in DTYPES.items():
        if a.dtype == d:
            return name
    raise ValueError("unsupported dtype %s" % a.dtype)


def serialize(tensors, metadata=None, align=8):
    """bytes of a safetensors file. tensors: iterable of (name, array) or a
    dict (insertion order = file order); metadata: dict of str -> str or None.
    The header is padded with spaces to a multiple of `align` bytes, as the
    reference implementation does."""
    items = list(tensors.items()) if isinstance(tensors, dict) else list(tensors)
    header = {}
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks = []
    off = 0
    for name, t in items:
        if isinstance(t, tuple) and t[0] == "BF16":  # ("BF16", float32 array): truncated to bfloat16 bits
            a = np.ascontiguousarray(t[1], dtype=np.float32)
            dt, b = "BF16", (a.view(np.uint32) >> 16).astype("<u2").tobytes(order="C")
        else:
            a = _as_numpy(t)
            dt = dtype_name(a)
            b = a.astype(DTYPES[dt], copy=False).tobytes(order="C")
        header[name] = {"dtype": dt, "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        chunks.append(b)
        off += len(b)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    if align > 1 and len(hb) % align:
        hb += b" " * (align - len(hb) % align)
    return struct.pack("<Q", len(hb)) + hb + b"".join(chunks)


def raw_file(header_bytes, data=b"", header_len=None):
    """A file from raw header bytes (for corruption tests); header_len
    overrides the length prefix."""
    if isinstance(header_bytes, (dict, list)):
        header_bytes = json.dumps(header_bytes).encode("utf-8")
    n = len(header_bytes) if header_len is None else header_len
    return struct.pack("<Q", n) + header_bytes + data


def write(path, tensors, metadata=None):
    with open(path, "wb") as f:
        f.write(serialize(tensors, metadata))


def parse(buf):
    """(tensors, metadata, header): tensors is a dict name -> numpy array in
    file (offset) order; metadata a dict or None; header the raw JSON object.
    Validates what the tests rely on and raises ValueError otherwise."""
    if len(buf) < 8:
        raise ValueError("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > len(buf) - 8:
        raise ValueError("header length %d beyond end of file" % n)
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    data = buf[8 + n:]
    metadata = header.get("__metadata__")
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        entries.append((b, e, name, info))
    entries.sort()
    pos = 0
    tensors = {}
    for b, e, name, info in entries:
        if b != pos or e < b or e > len(data):
            raise ValueError("bad data_offsets for %s" % name)
        dt = DTYPES[info["dtype"]]
        shape = tuple(int(s) for s in info["shape"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if count * dt.itemsize != e - b:
            raise ValueError("size mismatch for %s" % name)
        tensors[name] = np.frombuffer(data[b:e], dtype=dt).reshape(shape).copy()
        pos = e
    if pos != len(data):
        raise ValueError("trailing bytes after the data")
    return tensors, metadata, header


def read(path):
    """(tensors, metadata) of a file; see parse()."""
    with open(path, "rb") as f:
        t, m, _ = parse(f.read())
    return t, m


def header(path):
    """The JSON header of a file, read without its data (for files too big
    to parse whole); raises ValueError unless the last tensor ends at the
    end of the file."""
    import os
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError("file shorter than 8 bytes")
        (n,) = struct.unpack("<Q", head)
        h = json.loads(f.read(n).decode("utf-8"))
    end = max((info["data_offsets"][1] for k, info in h.items() if k != "__metadata__"), default=0)
    if 8 + n + end != os.path.getsize(path):
        raise ValueError("the data does not end at the end of the file")
    return h


def find_bin(cli=None):
    """The mha binary: $MHA_BIN (set by ctest), then cli, then build*/mha."""
    import glob
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("MHA_BIN"):
        return os.environ["MHA_BIN"]
    if cli:
        return cli
    for p in sorted(glob.glob(os.path.join(here, "..", "build*", "mha"))):
        if os.access(p, os.X_OK):
            return os.path.abspath(p)
    return None


def cli_env():
    """The environment for the mha CLI's processes: this one's, but where
    ctest preloads the ASan runtime into Python with leak checks off (a
    sanitizer build's MHA_PY_ENV, tests/CMakeLists.txt), the CLI, which
    links the runtime itself, runs without the preload and with
    MHA_CLI_ASAN_OPTIONS (leak checks on, as in every other CLI test)."""
    import os
    env = dict(os.environ)
    if "MHA_CLI_ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] = env["MHA_CLI_ASAN_OPTIONS"]
        env.pop("LD_PRELOAD", None)
    return env


def secondary():
    """True in scripts/test.sh's runs after the release one (it sets
    MHA_TEST_SECONDARY=1 for the forced kernels, OpenBLAS, no-OpenMP and
    sanitizer runs): tests that take it check the same code paths on fewer
    cases there (each says which), the release run checking all of them."""
    import os
    return os.environ.get("MHA_TEST_SECONDARY", "") == "1"


class Tally:
    """A test's checks, counted: check(cond, msg) prints "FAIL msg" when cond
    is false; status() is the exit status (1 on any failure)."""

    def __init__(self):
        self.passes = 0
        self.fails = 0

    def check(self, cond, msg):
        if cond:
            self.passes += 1
        else:
            self.fails += 1
            print("FAIL " + str(msg), flush=True)

    def status(self):
        return 1 if self.fails else 0
