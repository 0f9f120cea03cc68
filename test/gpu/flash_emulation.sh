#!/usr/bin/env bash
# Builds test/gpu/flash_emulation.cpp (the device attention kernel run on the CPU, one thread per lane)
# with the host's C++20 compiler into DIR and runs it. Exit 77 (skipped) without a C++20 compiler.
#
#   bash test/gpu/flash_emulation.sh DIR
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIR=${1:-${TMPDIR:-/tmp}}
CXX=${CXX:-c++}
mkdir -p "$DIR"
if ! command -v "$CXX" >/dev/null 2>&1; then
    echo "SKIPPED: no C++ compiler ($CXX)"
    exit 77
fi
if ! "$CXX" -std=c++20 -O2 -fno-strict-aliasing -Wall -Wextra -Wno-unknown-pragmas -Werror -pthread \
    -o "$DIR/flash_emulation" "$HERE/flash_emulation.cpp" 2>"$DIR/flash_emulation.log"; then
    if grep -q "barrier" "$DIR/flash_emulation.log" && ! grep -q "attention_flash" "$DIR/flash_emulation.log"; then
        echo "SKIPPED: $CXX has no C++20 <barrier>"; cat "$DIR/flash_emulation.log"; exit 77
    fi
    cat "$DIR/flash_emulation.log"
    exit 1
fi
exec "$DIR/flash_emulation"
