#!/usr/bin/env bash
# The installed package, as a user meets it: cmake --install BUILD --prefix
# into a temporary prefix (the build directory is only read, apart from the
# install_manifest.txt cmake --install writes there), then examples/attention.c
# built against it (1) with pkg-config, shared, (2) with pkg-config --static
# against libmha.a, (3) with find_package(mha): mha::mha and
# mha::mha_static; each program must run and print the book's numbers. The
# versions must agree: mha.h, mha_version(), mha.pc, the CMake package and
# mha --version.
#   tests/install_package.sh BUILD_DIR SOURCE_DIR C_COMPILER
set -euo pipefail
build=$1 src=$2 cc=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mha_install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
version=$(sed -n 's/^#define MHA_VERSION_STRING "\(.*\)"$/\1/p' "$src/include/mha.h")
major=${version%%.*}
lib=$prefix/lib
for f in "$lib/libmha.so.$version" "$lib/libmha.so.$major" "$lib/libmha.so" "$lib/libmha.a" \
         "$prefix/include/mha.h" "$prefix/bin/mha" "$lib/pkgconfig/mha.pc" \
         "$lib/cmake/mha/mha-config.cmake" "$lib/cmake/mha/mha-config-version.cmake" \
         "$lib/cmake/mha/mha-targets.cmake" "$prefix/share/bash-completion/completions/mha"; do
  [ -e "$f" ] || fail "not installed: ${f#$prefix/}"
done
soname=$(readelf -d "$lib/libmha.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libmha.so.$major" ] || fail "SONAME '$soname', want libmha.so.$major"
# only the API leaves libmha.so
other=$(nm -D --defined-only "$lib/libmha.so.$version" | awk '$2 ~ /^[TDBR]$/ && $3 !~ /^mha_/ {print $3}')
[ -z "$other" ] || fail "libmha.so exports non-API symbols: $other"
"$prefix/bin/mha" --version | grep -q "^mha $version " || fail "mha --version: $("$prefix/bin/mha" --version)"
echo "installed $version: libmha.so ($soname), libmha.a, mha.h, mha, mha.pc, lib/cmake/mha"

run() { # name, program: must run and say it matches the book
  local out
  out=$("$2" 2>&1) || { echo "$out"; fail "$1: exit status $?"; }
  echo "$out" | grep -q "^mha $version (header $version)$" || { echo "$out"; fail "$1: version"; }
  echo "$out" | grep -q "^as in the book$" || { echo "$out"; fail "$1: numbers"; }
  echo "$1: ok"
}

# 1, 2: pkg-config
export PKG_CONFIG_PATH=$lib/pkgconfig
[ "$(pkg-config --modversion mha)" = "$version" ] || fail "pkg-config --modversion: $(pkg-config --modversion mha)"
# shellcheck disable=SC2046
"$cc" "$src/examples/attention.c" $(pkg-config --cflags --libs mha) -o "$tmp/attention_pc"
found=$(ldd "$tmp/attention_pc" | sed -n "s/^[[:space:]]*libmha.so.$major => \(.*\) (0x.*/\1/p")
[ -n "$found" ] && [ "$(readlink -f "$found")" = "$(readlink -f "$lib/libmha.so.$major")" ] ||
  { ldd "$tmp/attention_pc"; fail "pkg-config build does not find the installed libmha.so by itself"; }
run "pkg-config (libmha.so)" "$tmp/attention_pc"
static_libs=$(pkg-config --static --libs mha)
# shellcheck disable=SC2086
"$cc" "$src/examples/attention.c" $(pkg-config --cflags mha) "$lib/libmha.a" ${static_libs//-lmha/} -o "$tmp/attention_pc_static"
! ldd "$tmp/attention_pc_static" | grep -q libmha || fail "static build links libmha.so"
run "pkg-config --static (libmha.a)" "$tmp/attention_pc_static"

# 3: find_package(mha), with a clean environment for the package search
unset PKG_CONFIG_PATH
cmake -S "$src/examples" -B "$tmp/ex" -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release >"$tmp/ex.log" 2>&1 || { cat "$tmp/ex.log"; fail "find_package(mha)"; }
grep -q "mha $version from $prefix/lib/cmake/mha" "$tmp/ex.log" || { cat "$tmp/ex.log"; fail "package version or place"; }
cmake --build "$tmp/ex" >"$tmp/ex-build.log" 2>&1 || { cat "$tmp/ex-build.log"; fail "building against mha::mha"; }
run "find_package: mha::mha" "$tmp/ex/attention"
! ldd "$tmp/ex/attention_static" | grep -q libmha || fail "mha::mha_static links libmha.so"
run "find_package: mha::mha_static" "$tmp/ex/attention_static"
echo "all install checks passed"
