#!/usr/bin/env bash
# `pip install ./python` works offline: installs the package (with the freshly built library bundled
# next to it) into a temporary target, then imports it from elsewhere and checks it finds that
# library and drives it. Usage: python_install_test.sh PYTHON SOURCE_DIR LIBRARY
set -euo pipefail
python=$1 source=$2 library=$3
"$python" -m pip --version >/dev/null 2>&1 || { echo "SKIPPED: $python has no pip"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$source/python" "$work/source" # pip builds from a copy: the checkout stays untouched
UFORM_BUNDLE_LIBRARY=$library "$python" -m pip install --quiet --no-index --no-deps --no-cache-dir \
    --target "$work/site" "$work/source"
ls "$work/site/uform/" | grep -q '^libuform\.so' || { echo "the library was not bundled"; exit 1; }
cd "$work"
env -u UFORM_LIBRARY PYTHONPATH="$work/site" "$python" - "$work/site" <<'PYTHON'
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
