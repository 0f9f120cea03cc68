"""A PEP 517 / PEP 660 build backend for the `uform` binding, standard library only.

The package is pure Python over ``libuform.so`` through ctypes, so a wheel is a zip of
``uform/*.py`` plus metadata. Building it needs nothing from a package index, which is why
``pip install ./python`` works offline whether or not pip isolates the build.

A wheel bundles the engine when one is available at build time, making it platform-specific:

- ``UFORM_BUNDLE_LIBRARY=/path/to/libuform.so`` copies that file (symlinks resolved) in as
  ``uform/libuform.so``;
- otherwise any ``uform/libuform.so*`` already in the source tree is copied as it is.

Without either, the wheel is ``py3-none-any`` and finds the library at run time
(``$UFORM_LIBRARY``, or the dynamic linker's path).
"""

from __future__ import annotations

import base64
import glob
import hashlib
import io
import os
import re
import sysconfig
import tarfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "uform"
BUNDLE_VARIABLE = "UFORM_BUNDLE_LIBRARY"


def _project() -> dict:
    """`[project]` of pyproject.toml: tomllib where available, else the few keys by pattern."""
    path = os.path.join(ROOT, "pyproject.toml")
    try:
        import tomllib  # Python 3.11+

        with open(path, "rb") as file:
            return tomllib.load(file)["project"]
    except ImportError:
        text = open(path, encoding="utf-8").read()
        section = text.split("[project]", 1)[1].split("\n[", 1)[0]
        result = {}
        for key in ("name", "version", "description", "requires-python", "readme"):
            match = re.search(rf'^{re.escape(key)}\s*=\s*"([^"]*)"', section, re.MULTILINE)
            if match:
                result[key] = match.group(1)
        return result


def _metadata() -> str:
    project = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project.get('description', '')}",
    ]
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    readme = os.path.join(ROOT, project.get("readme", "README.md"))
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        lines.append("")
        lines.append(open(readme, encoding="utf-8").read())
    return "\n".join(lines) + "\n"


def _names():
    project = _project()
    name = re.sub(r"[-_.]+", "_", project["name"]).lower()
    return name, project["version"]


def _resolve(bundle: str) -> str:
    """The file `$UFORM_BUNDLE_LIBRARY` names, symlinks resolved. pip runs the backend inside the
    source tree, so a relative path is tried against the shell's directory ($PWD, which pip
    inherits), the repository root, and this directory."""
    if os.path.isabs(bundle):
        places = [bundle]
    else:
        places = [os.path.join(base, bundle) for base in (os.environ.get("PWD", ""), os.path.dirname(ROOT), ROOT) if base]
    for place in places:
        if os.path.isfile(place):
            return os.path.realpath(place)
    raise FileNotFoundError(f"${BUNDLE_VARIABLE} names {bundle}, which is not a file; tried {', '.join(places)}")


def _sources() -> list:
    """(archive name, bytes) of every file of the package, the bundled library included."""
    files = []
    for path in sorted(glob.glob(os.path.join(ROOT, PACKAGE, "*.py"))) + sorted(
        glob.glob(os.path.join(ROOT, PACKAGE, "py.typed"))
    ):
        files.append((f"{PACKAGE}/{os.path.basename(path)}", open(path, "rb").read()))
    bundle = os.environ.get(BUNDLE_VARIABLE)
    if bundle:
        real = _resolve(bundle)
        files.append((f"{PACKAGE}/libuform.so", open(real, "rb").read()))
    else:
        for path in sorted(glob.glob(os.path.join(ROOT, PACKAGE, "libuform.so*"))):
            files.append((f"{PACKAGE}/{os.path.basename(path)}", open(os.path.realpath(path), "rb").read()))
    return files


def _tag(files) -> str:
    if any(name.startswith(f"{PACKAGE}/libuform") for name, _ in files):
        platform = re.sub(r"[-.]", "_", sysconfig.get_platform())
        return f"py3-none-{platform}"
    return "py3-none-any"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(directory: str, files: list, tag: str) -> str:
    name, version = _names()
    dist_info = f"{name}-{version}.dist-info"
    wheel_name = f"{name}-{version}-{tag}.whl"
    purelib = "true" if tag.endswith("-any") else "false"
    files = list(files) + [
        (f"{dist_info}/METADATA", _metadata().encode()),
        (
            f"{dist_info}/WHEEL",
            f"Wheel-Version: 1.0\nGenerator: uform-backend\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n".encode(),
        ),
        (f"{dist_info}/top_level.txt", f"{PACKAGE}\n".encode()),
    ]
    record = [_record_line(archive_name, data) for archive_name, data in files]
    record.append(f"{dist_info}/RECORD,,")
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    stamp = time.localtime(max(time.time(), 315532800))[:6]  # zip cannot hold dates before 1980
    with zipfile.ZipFile(os.path.join(directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as archive:
        for archive_name, data in files:
            info = zipfile.ZipInfo(archive_name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o755 if archive_name.endswith(".so") else 0o644) << 16
            archive.writestr(info, data)
    return wheel_name


# PEP 517 hooks


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = _sources()
    return _write_wheel(wheel_directory, files, _tag(files))


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: a wheel holding one .pth file that puts this source tree on sys.path."""
    name, _ = _names()
    return _write_wheel(wheel_directory, [(f"__editable__.{name}.pth", (ROOT + "\n").encode())], "py3-none-any")


def build_sdist(sdist_directory, config_settings=None):
    name, version = _names()
    base = f"{name}-{version}"
    sdist_name = f"{base}.tar.gz"
    members = ["pyproject.toml", "README.md", "_build/backend.py"]
    members += [os.path.relpath(path, ROOT) for path in sorted(glob.glob(os.path.join(ROOT, PACKAGE, "*.py")))]
    members += [os.path.relpath(path, ROOT) for path in sorted(glob.glob(os.path.join(ROOT, "tests", "*")))]
    with tarfile.open(os.path.join(sdist_directory, sdist_name), "w:gz", format=tarfile.PAX_FORMAT) as archive:
        for member in members:
            path = os.path.join(ROOT, member)
            if os.path.isfile(path):
                archive.add(path, arcname=f"{base}/{member}")
        data = _metadata().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(data)
        info.mtime = int(time.time())
        archive.addfile(info, io.BytesIO(data))
    return sdist_name
