#!/usr/bin/env bash
# The Python package installs offline through its standard PEP 517 backend (setuptools.build_meta,
# python/pyproject.toml and python/setup.py), as build.sh and python/README.md say:
#   1. into a fresh virtual environment, with `pip install --no-build-isolation` and the freshly
#      built library bundled (setuptools from the environment; `wheel`, which setuptools before 70.1
#      needs, from Debian's /usr/share/python-wheels when the environment lacks it); then imports
#      it from elsewhere and checks it finds that library and drives it;
#   2. the wheel without a library is `py3-none-any`, and a wheel built after a bundled one holds no
#      stale copy;
#   3. `python -m build --no-isolation` makes a wheel and an sdist, with PYTHON or /usr/bin/python3,
#      whichever has `build` (Debian: python3-build).
# Usage: python_install_test.sh PYTHON SOURCE_DIR LIBRARY
set -euo pipefail
python=$1 source=$2 library=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$source/python" "$work/source" # pip builds from a copy: the checkout stays untouched
rm -rf "$work/source/build" "$work/source/dist" "$work/source"/*.egg-info "$work/source"/uform/libuform.so*

if ! "$python" -m venv "$work/venv" >"$work/venv.log" 2>&1 || [[ ! -x $work/venv/bin/python ]]; then
  echo "SKIPPED: $python -m venv failed (install python3-venv): $(tail -n 1 "$work/venv.log")"
  exit 77
fi
venv_python=$work/venv/bin/python
"$venv_python" -m pip --version >/dev/null 2>&1 || { echo "SKIPPED: the virtual environment has no pip"; exit 77; }
missing=()
"$venv_python" -c 'import setuptools' 2>/dev/null || missing+=(setuptools)
"$venv_python" -c 'import setuptools.command.bdist_wheel' 2>/dev/null || "$venv_python" -c 'import wheel' 2>/dev/null ||
  missing+=(wheel)
if ((${#missing[@]})); then
  # Offline, from Debian's wheels (python3-setuptools-whl, python3-wheel-whl: build.sh installs them).
  for package in "${missing[@]}"; do
    compgen -G "/usr/share/python-wheels/$package-*.whl" >/dev/null ||
      { echo "SKIPPED: the virtual environment lacks $package and /usr/share/python-wheels has none (install python3-$package-whl)"; exit 77; }
  done
  "$venv_python" -m pip install --quiet --no-index --find-links /usr/share/python-wheels "${missing[@]}"
fi

# 1. Installed with the library bundled.
UFORM_BUNDLE_LIBRARY=$library "$venv_python" -m pip install --quiet --no-index --no-deps --no-cache-dir \
    --no-build-isolation "$work/source"
site=$("$venv_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
compgen -G "$site/uform/libuform.so*" >/dev/null || { echo "the library was not bundled"; exit 1; }
cd "$work"
env -u UFORM_LIBRARY -u PYTHONPATH "$venv_python" - "$site" <<'PYTHON'
import sys
import uform

site = sys.argv[1]
library = uform.Library()
assert library.path.startswith(site), f"loaded {library.path}, not the bundled copy under {site}"
assert library.version == "0.1.0", library.version
with uform.Executor.for_ram(library, threads=1) as executor:
    seen = []
    executor.for_n(5, lambda task, thread, domain: seen.append(task))
    assert sorted(seen) == [0, 1, 2, 3, 4], seen
    assert executor.describe().threads_count == 1
print(f"installed package works: {library.path}, version {library.version}, cpu class {library.cpu_class!s}")
PYTHON

# 2. Wheels in one source tree: bundled, then not (no stale copy), each tagged for what it holds.
wheel_names() { "$venv_python" -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "$1"; }
UFORM_BUNDLE_LIBRARY=$library "$venv_python" -m pip wheel --quiet --no-index --no-deps --no-build-isolation \
    -w "$work/bundled" "$work/source"
bundled=$(ls "$work"/bundled/uform-0.1.0-py3-none-linux_*.whl) || { echo "no py3-none-linux_* wheel: $(ls "$work/bundled")"; exit 1; }
grep -qx 'uform/libuform.so' <<<"$(wheel_names "$bundled")" || { echo "the bundled wheel lacks uform/libuform.so"; exit 1; }
env -u UFORM_BUNDLE_LIBRARY "$venv_python" -m pip wheel --quiet --no-index --no-deps --no-build-isolation \
    -w "$work/pure" "$work/source"
pure=$(ls "$work"/pure/uform-0.1.0-py3-none-any.whl) || { echo "no py3-none-any wheel: $(ls "$work/pure")"; exit 1; }
if grep -q 'libuform' <<<"$(wheel_names "$pure")"; then echo "the pure wheel holds a stale library"; exit 1; fi
grep -qx 'uform/_executor.py' <<<"$(wheel_names "$pure")" || { echo "the pure wheel lacks the package"; exit 1; }
echo "wheels: $(basename "$bundled"), $(basename "$pure")"

# 3. The standard front end, with the first interpreter that has it (Debian: python3-build).
front_end=
for candidate in "$python" /usr/bin/python3; do
  if [[ -x $(command -v "$candidate") ]] && "$candidate" -c 'import build, setuptools' 2>/dev/null &&
     { "$candidate" -c 'import setuptools.command.bdist_wheel' 2>/dev/null || "$candidate" -c 'import wheel' 2>/dev/null; }; then
    front_end=$candidate
    break
  fi
done
if [[ -n $front_end ]]; then
  rm -rf "$work/source/build"
  "$front_end" -m build --no-isolation --outdir "$work/dist" "$work/source" >"$work/build.log" 2>&1 ||
    { tail -n 20 "$work/build.log"; exit 1; }
  ls "$work"/dist/uform-0.1.0.tar.gz "$work"/dist/uform-0.1.0-py3-none-any.whl >/dev/null
  echo "$front_end -m build --no-isolation: $(cd "$work/dist" && echo *)"
else
  echo "note: neither $python nor /usr/bin/python3 has 'build' with setuptools and wheel; python -m build not exercised"
fi
