"""setuptools' hooks for what pyproject.toml cannot state: bundling the engine into the wheel.

The package is pure Python over ``libuform.so`` through ctypes. A wheel bundles the engine when one
is available at build time, which makes it platform-specific (``py3-none-<platform>``):

- ``UFORM_BUNDLE_LIBRARY=/path/to/libuform.so`` copies that file (symlinks resolved) in as
  ``uform/libuform.so``; a relative path is tried against the shell's directory (``$PWD``, which
  pip passes on), the repository root, and this directory;
- otherwise any ``uform/libuform.so*`` already in the source tree is copied as package data.

Without either, the wheel is ``py3-none-any`` and finds the library at run time (``$UFORM_LIBRARY``
or the dynamic linker's path). A library bundled by an earlier build never lingers in a later one.
"""

from __future__ import annotations

import glob
import os
import shutil

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:  # setuptools 70.1 and later carry bdist_wheel; before, the `wheel` package does
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # pragma: no cover - depends on the installed setuptools
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:
        bdist_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "uform"
BUNDLE_VARIABLE = "UFORM_BUNDLE_LIBRARY"


def bundle() -> str | None:
    """The file `$UFORM_BUNDLE_LIBRARY` names, symlinks resolved; None when it is unset. A name
    that is not a file fails the build, naming every place tried."""
    name = os.environ.get(BUNDLE_VARIABLE)
    if not name:
        return None
    if os.path.isabs(name):
        places = [name]
    else:
        bases = (os.environ.get("PWD", ""), os.path.dirname(HERE), HERE)
        places = [os.path.join(base, name) for base in bases if base]
    for place in places:
        if os.path.isfile(place):
            return os.path.realpath(place)
    raise FileNotFoundError(f"${BUNDLE_VARIABLE} names {name}, which is not a file; tried {', '.join(places)}")


def bundles_library() -> bool:
    """Whether the wheel will carry the engine: from `$UFORM_BUNDLE_LIBRARY` or the source tree."""
    return bundle() is not None or bool(glob.glob(os.path.join(HERE, PACKAGE, "libuform.so*")))


class BuildPy(build_py):
    """Copies the package, then the bundled library; first drops any library an earlier build
    left in the build directory."""

    def run(self):
        target = os.path.join(self.build_lib, PACKAGE)
        for stale in glob.glob(os.path.join(target, "libuform.so*")):
            os.remove(stale)
        super().run()
        library = bundle()
        if library is not None:
            for copied in glob.glob(os.path.join(target, "libuform.so*")):
                os.remove(copied)  # the named library replaces any copy from the source tree
            destination = os.path.join(target, "libuform.so")
            shutil.copyfile(library, destination)
            os.chmod(destination, 0o755)


class BundlingDistribution(Distribution):
    """A distribution that holds machine code when it bundles the engine, so the wheel's files sit
    at its root for platform-specific installs (platlib) rather than under ``.data/purelib``."""

    def has_ext_modules(self):
        return bundles_library()


commands = {"build_py": BuildPy}

if bdist_wheel is not None:

    class BdistWheel(bdist_wheel):
        """Tags a wheel that bundles the engine ``py3-none-<platform>``: it holds machine code but
        no extension module, so it suits every Python 3 on that platform."""

        def get_tag(self):
            python, abi, platform = super().get_tag()
            if self.root_is_pure:
                return python, abi, platform
            return "py3", "none", platform

    commands["bdist_wheel"] = BdistWheel

setup(cmdclass=commands, distclass=BundlingDistribution)
