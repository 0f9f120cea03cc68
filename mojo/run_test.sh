#!/usr/bin/env bash
# Runs one piece of the Mojo package's suite for ctest, with the pinned toolchain that build.sh
# installs into the build tree ($UFORM_MOJO_VENV, by default <build>/mojo-venv).
#
#   run_test.sh package              precompile mojo/uform into $UFORM_MOJO_OUT/uform.mojoc
#   run_test.sh test FILE.mojo       compile FILE against that package, then run it
#   run_test.sh conformance          the reference's items against `mojo doc` of the package
#
# Environment (set by mojo/CMakeLists.txt): UFORM_LIBRARY (the libuform.so under test),
# UFORM_MOJO_VENV, UFORM_MOJO_OUT (where packages and test binaries go), UFORM_SANITIZE, and for
# sanitizer builds UFORM_MOJO_PRELOAD (the runtime preloaded into the test binaries).
# Without a toolchain it exits 77 (ctest's SKIP) naming why, unless CI=1 or UFORM_REQUIRE_MOJO=1,
# where a missing toolchain fails the test.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${UFORM_MOJO_VENV:?UFORM_MOJO_VENV is not set}
out=${UFORM_MOJO_OUT:?UFORM_MOJO_OUT is not set}
mojo=$venv/bin/mojo
mode=${1:?usage: run_test.sh package|test FILE|conformance}

skip() { # skip MESSAGE: SKIP for ctest, or a failure where the toolchain is required
  if [[ ${CI:-} == 1 || ${UFORM_REQUIRE_MOJO:-} == 1 ]]; then
    echo "FAILED: $1 (CI=1 or UFORM_REQUIRE_MOJO=1 requires the Mojo suite to run)"
    exit 1
  fi
  echo "SKIPPED: $1"
  exit 77
}

if [[ ! -x $mojo ]]; then
  reason="no Mojo toolchain at $mojo"
  [[ -s $venv.reason ]] && reason+=": $(cat "$venv.reason")"
  skip "$reason; ./build.sh test installs mojo==1.2.0 there from PyPI"
fi
version=$("$mojo" --version 2>&1) || skip "$mojo does not run: $version"
export MODULAR_HOME=${MODULAR_HOME:-$out/modular-home} # keeps the toolchain's caches in the build tree
mkdir -p "$out/bin" "$MODULAR_HOME"

quiet() { # runs a toolchain command, dropping its note that crash reporting is unavailable
  local output status
  output=$("$@" 2>&1)
  status=$?
  [[ -n $output ]] && grep -v 'Crashpad' <<<"$output"
  return $status
}

package() { # precompiles the package when any of its sources is newer than the last precompile
  local target=$out/uform.mojoc
  if [[ -f $target ]] && [[ -z $(find "$here/uform" -name '*.mojo' -newer "$target" -print -quit) ]]; then
    return 0
  fi
  # A lock, so parallel ctest runs precompile once.
  (
    flock 9
    mkdir -p "$out/.precompile" && quiet "$mojo" precompile "$here/uform" -o "$out/.precompile/uform.mojoc" && mv "$out/.precompile/uform.mojoc" "$target"
  ) 9>"$out/.package.lock"
}

case $mode in
  package)
    package || { echo "FAILED: mojo precompile $here/uform"; exit 1; }
    echo "precompiled $here/uform into $out/uform.mojoc with $version"
    ;;
  test)
    file=${2:?usage: run_test.sh test FILE.mojo}
    name=$(basename "$file" .mojo)
    package || { echo "FAILED: mojo precompile $here/uform"; exit 1; }
    # The fake-GPU variant of a test builds the same source: its own binary, so the two never
    # overwrite each other's while one runs (ctest -j runs them at once).
    binary=$out/bin/$name${FAKE_CUDA_DEVICES:+-fake-gpu}
    quiet "$mojo" build -I "$out" "$file" -o "$binary" || { echo "FAILED: mojo build $file"; exit 1; }
    if [[ -n ${UFORM_SANITIZE:-} ]]; then
      if [[ -z ${UFORM_MOJO_PRELOAD:-} || ! -f ${UFORM_MOJO_PRELOAD:-} ]]; then
        skip "the $UFORM_SANITIZE-instrumented libuform.so needs its sanitizer runtime preloaded into the Mojo test binary, and the compiler names none"
      fi
      # The sanitizer runtime must own the address space from the start; where the Mojo runtime's
      # own reservations collide with the sanitizer's layout (ThreadSanitizer refuses the Mojo
      # runtime's 1 GiB reservation: "mmap at bad address"), the binary cannot run under it at all.
      # That is a limit of the toolchain, not of the engine, and skips even where CI requires Mojo.
      output=$(LD_PRELOAD=$UFORM_MOJO_PRELOAD "$binary" 2>&1)
      status=$?
      printf '%s\n' "$output"
      if [[ $status != 0 ]] && grep -qE 'ThreadSanitizer: mmap at bad address|Shadow memory range interleaves|ThreadSanitizer: unexpected memory mapping|AddressSanitizer failed to allocate' <<<"$output"; then
        echo "SKIPPED: the $UFORM_SANITIZE sanitizer runtime ($UFORM_MOJO_PRELOAD) cannot be loaded into a Mojo program: the Mojo runtime's memory reservations collide with the sanitizer's address-space layout; the C and Python suites cover the engine under this sanitizer"
        exit 77
      fi
      exit $status
    fi
    exec "$binary"
    ;;
  conformance)
    python=${UFORM_PYTHON:-python3}
    exec "$python" "$here/tools/conformance.py" --mojo "$mojo" --reference "${UFORM_REFERENCE:-$here/reference_items.json}" \
      --package "$here/uform" --out "$out"
    ;;
  *) echo "usage: run_test.sh package|test FILE|conformance" >&2; exit 2 ;;
esac
