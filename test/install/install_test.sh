#!/usr/bin/env bash
# shellcheck disable=SC2015 # `check && check || fail` fails when either check does, as meant
# Installs a built tree into a temporary prefix, then builds and runs test/install/consumer against
# it four ways: find_package with the shared and the static library, pkg-config with the shared
# library and, through Libs.private, the static one. Checks the layout and each program's output.
#
# usage: install_test.sh BUILD_DIR CMAKE C_COMPILER GENERATOR VERSION [SANITIZE]
set -euo pipefail

build=$1 cmake=$2 cc=$3 generator=$4 version=$5 sanitize=${6:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/uform-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

# Sanitized libraries need their runtime in the programs that load them.
# shellcheck disable=SC2054 # a comma inside one flag
case $sanitize in
  address) flags=(-fsanitize=address,undefined) ;;
  thread) flags=(-fsanitize=thread) ;;
  *) flags=() ;;
esac

fail() { echo "install test: $*" >&2; exit 1; }

"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }

# The layout: GNUInstallDirs may pick lib or lib64 or lib/<multiarch>; find where the libraries went.
libdir=$(dirname "$(find "$prefix" -name libuform.a -print -quit)")
[[ -d $libdir && $libdir != . ]] || fail "no libuform.a under $prefix"
major=${version%%.*}
for file in "$prefix/include/uform.h" "$libdir/libuform.a" "$libdir/libuform.so.$version" \
            "$libdir/cmake/uform/uformConfig.cmake" "$libdir/cmake/uform/uformConfigVersion.cmake" \
            "$libdir/cmake/uform/uformTargets.cmake" "$libdir/pkgconfig/uform.pc" "$prefix/bin/uform"; do
  [[ -f $file ]] || fail "missing $file"
done
[[ $(readlink "$libdir/libuform.so") == "libuform.so.$major" ]] || fail "libuform.so is not a link to libuform.so.$major"
[[ $(readlink "$libdir/libuform.so.$major") == "libuform.so.$version" ]] || fail "libuform.so.$major is not a link to libuform.so.$version"
cmp -s "$prefix/include/uform.h" "$here/../../include/uform.h" || fail "the installed uform.h differs from include/uform.h"
[[ $("$prefix/bin/uform" --version) == "uform $version" ]] || fail "bin/uform --version says '$("$prefix/bin/uform" --version)'"
echo "layout: ok ($prefix: include, ${libdir#"$prefix/"}, bin)"

# Checks a consumer's output: the version, a named CPU class, and the sum of a blocking call.
check_run() {
  local name=$1 binary=$2 output
  output=$("$binary") || fail "$name: the consumer failed"
  grep -qx "version=$version" <<<"$output" || fail "$name: no version=$version in: $output"
  grep -q '^cpu_class=[a-z0-9_]*$' <<<"$output" && ! grep -qx 'cpu_class=invalid' <<<"$output" ||
    fail "$name: no CPU class in: $output"
  grep -qx 'sum=500500' <<<"$output" || fail "$name: no sum=500500 in: $output"
  echo "$name: ok ($(tr '\n' ' ' <<<"$output"))"
}

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

# find_package, shared and static.
for variant in shared static; do
  static=OFF; [[ $variant == static ]] && static=ON
  "$cmake" -S "$here/consumer" -B "$tmp/cmake-$variant" -G "$generator" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_PREFIX_PATH="$prefix" -DUFORM_CONSUMER_STATIC=$static -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_C_FLAGS="${flags[*]:-}" -DCMAKE_EXE_LINKER_FLAGS="${flags[*]:-}" >"$tmp/cmake-$variant.log" 2>&1 ||
    { cat "$tmp/cmake-$variant.log" >&2; fail "find_package $variant: configure failed"; }
  "$cmake" --build "$tmp/cmake-$variant" >>"$tmp/cmake-$variant.log" 2>&1 ||
    { cat "$tmp/cmake-$variant.log" >&2; fail "find_package $variant: build failed"; }
  if [[ $variant == shared ]]; then
    needed "$tmp/cmake-$variant/consumer" | grep -qx "libuform.so.$major" || fail "find_package shared: not linked to libuform.so.$major"
  else
    ! needed "$tmp/cmake-$variant/consumer" | grep -q libuform || fail "find_package static: still needs a libuform.so"
  fi
  check_run "find_package $variant" "$tmp/cmake-$variant/consumer"
done

# pkg-config: `cc $(pkg-config --cflags --libs uform)`, and the archive with Libs.private.
export PKG_CONFIG_PATH=$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
pkg-config --exists --print-errors "uform = $version" || fail "pkg-config does not find uform $version"
[[ $(pkg-config --modversion uform) == "$version" ]] || fail "pkg-config --modversion says $(pkg-config --modversion uform)"
static_libs=$(pkg-config --static --libs uform)
for library in -luform -lnuma -ldnnl -lpthread -ldl -lm; do
  grep -qw -- "$library" <<<"$static_libs" || fail "pkg-config --static --libs lacks $library: $static_libs"
done
# shellcheck disable=SC2046 # word splitting of pkg-config's flags is the point
"$cc" "${flags[@]}" -o "$tmp/pc-shared" "$here/consumer/consumer.c" $(pkg-config --cflags --libs uform) ||
  fail "pkg-config shared: build failed"
needed "$tmp/pc-shared" | grep -qx "libuform.so.$major" || fail "pkg-config shared: not linked to libuform.so.$major"
LD_LIBRARY_PATH=$(pkg-config --variable=libdir uform)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} check_run "pkg-config shared" "$tmp/pc-shared"
# The README's command as a newcomer types it: PKG_CONFIG_PATH exported (set for `cc` alone, the
# $(pkg-config ...) inside would not see it) and an rpath, so the program runs without LD_LIBRARY_PATH.
# shellcheck disable=SC2046 # word splitting of pkg-config's flags is the point
"$cc" "${flags[@]}" -o "$tmp/pc-readme" "$here/consumer/consumer.c" $(pkg-config --cflags --libs uform) \
  -Wl,-rpath,"$(pkg-config --variable=libdir uform)" || fail "pkg-config with an rpath: build failed"
# (LD_LIBRARY_PATH keeps only what the caller had, never the prefix: machines whose dependencies
# live outside the loader's default path, like the GPU hosts' unpacked packages, still run it.)
check_run "pkg-config with an rpath, no LD_LIBRARY_PATH to the prefix" "$tmp/pc-readme"
# shellcheck disable=SC2046,SC2086 # the same, with the archive named instead of -luform
"$cc" "${flags[@]}" -o "$tmp/pc-static" "$here/consumer/consumer.c" $(pkg-config --cflags uform) \
  ${static_libs/-luform/-l:libuform.a} || fail "pkg-config static: build failed"
! needed "$tmp/pc-static" | grep -q libuform || fail "pkg-config static: still needs a libuform.so"
check_run "pkg-config static" "$tmp/pc-static"

echo "install test: ok"
