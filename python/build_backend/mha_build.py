"""A PEP 517 build backend for the mha binding that needs nothing beyond
the standard library, so pip builds it offline (no setuptools download into
an isolated build environment). The package is pure Python: a wheel is
mha/*.py plus its metadata; an editable install is a .pth file pointing at
this directory.

Metadata comes from pyproject.toml's [project] table (name, description,
requires-python, dependencies) and the version from mha/_version.py.
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "mha"
TAG = "py3-none-any"
EPOCH = (1980, 1, 1, 0, 0, 0)  # reproducible archives


def _project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        text = f.read().decode("utf-8")
    try:
        import tomllib
        return tomllib.loads(text)["project"]
    except ImportError:  # Python < 3.11: the few keys used, by pattern
        body = text.split("[project]", 1)[1].split("\n[", 1)[0]
        proj = {k: v for k, v in re.findall(r'^([\w-]+)\s*=\s*"([^"]*)"', body, re.M)}
        deps = re.search(r"^dependencies\s*=\s*\[([^\]]*)\]", body, re.M)
        proj["dependencies"] = re.findall(r'"([^"]+)"', deps.group(1)) if deps else []
        return proj


def _version():
    with open(os.path.join(ROOT, PACKAGE, "_version.py")) as f:
        return re.search(r'__version__\s*=\s*"([^"]+)"', f.read()).group(1)


def _dist_info():
    return "%s-%s.dist-info" % (PACKAGE, _version())


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: %s" % p["name"], "Version: %s" % _version(),
             "Summary: %s" % p.get("description", "")]
    if p.get("requires-python"):
        lines.append("Requires-Python: %s" % p["requires-python"])
    lines += ["Requires-Dist: %s" % d for d in p.get("dependencies", [])]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _wheel_file():
    return ("Wheel-Version: 1.0\nGenerator: mha_build\nRoot-Is-Purelib: true\nTag: %s\n" % TAG).encode()


def _package_files():
    out = []
    for name in sorted(os.listdir(os.path.join(ROOT, PACKAGE))):
        if name.endswith(".py"):
            with open(os.path.join(ROOT, PACKAGE, name), "rb") as f:
                out.append(("%s/%s" % (PACKAGE, name), f.read()))
    return out


def _write_wheel(directory, files):
    """files: [(archive name, bytes)]; the dist-info and RECORD are added."""
    di = _dist_info()
    files = files + [(di + "/METADATA", _metadata()), (di + "/WHEEL", _wheel_file())]
    record = []
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(di + "/RECORD,,")
    files.append((di + "/RECORD", ("\n".join(record) + "\n").encode()))
    wheel = "%s-%s-%s.whl" % (PACKAGE, _version(), TAG)
    with zipfile.ZipFile(os.path.join(directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            info = zipfile.ZipInfo(name, EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return wheel


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, _dist_info())
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "wb") as f:
        f.write(_metadata())
    with open(os.path.join(d, "WHEEL"), "wb") as f:
        f.write(_wheel_file())
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _package_files())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [("%s_editable.pth" % PACKAGE, (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (PACKAGE, _version())
    name = base + ".tar.gz"
    members = [("pyproject.toml", None), ("build_backend/mha_build.py", None)]
    members += [(n, d) for n, d in _package_files()]
    members.append(("PKG-INFO", _metadata()))
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for rel, data in members:
            if data is None:
                with open(os.path.join(ROOT, rel), "rb") as f:
                    data = f.read()
            info = tarfile.TarInfo("%s/%s" % (base, rel))
            info.size, info.mode, info.mtime = len(data), 0o644, 315532800
            t.addfile(info, io.BytesIO(data))
    return name
