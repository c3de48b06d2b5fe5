#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs a build into a temporary prefix and uses it as a user would: the
# layout, eccctl from the install, a consumer project built both ways
# (find_package + ecc::host, and pkg-config) that moves an entry through the
# installed plugin, the example plugin built from the installed header, one
# version everywhere, the manual pages (they render without a warning and
# cover every function and option), and the layout of prefix /usr
# (configurations in /etc/ecc), staged with DESTDIR.
# Usage: scripts/install-check.sh [BUILD_DIR]   (default: build/, built already)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
start=$(date +%s)
"$root/scripts/deps.sh" groff-base # groff, for the manual pages

say() { echo "install-check: $*"; }
die() {
  echo "install-check: FAILED: $*" >&2
  exit 1
}
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
# Runs a command, which must succeed and print the text.
expect_out() { # TEXT COMMAND...
  local text="$1"
  shift
  "$@" >"$tmp/out" 2>&1 || die "$*: $(cat "$tmp/out")"
  grep -qF "$text" "$tmp/out" || die "$*: '$text' missing from: $(cat "$tmp/out")"
}

[ -f "$build/CMakeCache.txt" ] || die "$build is not a configured build directory"
version=$(sed -n 's/^project(ecc VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
[ -n "$version" ] || die "no project(ecc VERSION ...) line in CMakeLists.txt"
cfg_prefix=$(cache CMAKE_INSTALL_PREFIX)
libdir=$(cache CMAKE_INSTALL_LIBDIR)
sysconfdir=$(cache CMAKE_INSTALL_SYSCONFDIR)
docdir=$(cache CMAKE_INSTALL_DOCDIR) # empty unless set: GNUInstallDirs derives it
docdir=${docdir:-share/doc/ecc}
mandir=$(cache CMAKE_INSTALL_MANDIR)
mandir=${mandir:-share/man}
# For these prefixes GNUInstallDirs puts the configurations outside the
# prefix (/etc, /etc/opt): an install to another prefix would write there.
case "$cfg_prefix" in
/ | /usr | /opt/*) die "$build is configured for prefix $cfg_prefix; configure it for another" ;;
esac

tmp=$(mktemp -d /tmp/ecc-install-check.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
region_dir="/dev/shm/ecc-$(id -u)"
unset ECC_PLUGIN_DIR # the installed library must find its plugins by itself

# ---- the install ---------------------------------------------------------

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log"
outside=$(grep -v "^$prefix/" "$build/install_manifest.txt" || true)
[ -z "$outside" ] || die "installed outside $prefix: $outside"
expect=(bin/eccctl "$libdir/libecc-host.so" "$libdir/libecc-host.so.${version%%.*}"
  "$libdir/libecc-host.so.$version" "$libdir/ecc/libecc-shm.so"
  "$libdir/cmake/ecc/eccConfig.cmake" "$libdir/cmake/ecc/eccConfigVersion.cmake"
  "$libdir/cmake/ecc/eccTargets.cmake" "$libdir/pkgconfig/ecc.pc"
  "$mandir/man1/eccctl.1" "$mandir/man3/ecc_host.3")
expect+=("$docdir/LICENSE" "$docdir/examples/minimal_host.c" "$docdir/examples/minimal_plugin.c")
for h in ecc_host.h ecc_plugin.h ecc_plugin_v1.h ecc_common.h; do expect+=("include/ecc/$h"); done
for f in "$root"/conf/*.ini; do expect+=("etc/ecc/$(basename "$f")"); done
for f in "${expect[@]}"; do
  [ -e "$prefix/$f" ] || die "the install lacks $f"
done
say "installed $(wc -l <"$build/install_manifest.txt") files under the prefix, ${#expect[@]} checked by name"

# ---- eccctl from the install ---------------------------------------------

eccctl="$prefix/bin/eccctl"
got=$("$eccctl" --version)
[ "$got" = "eccctl $version" ] || die "eccctl --version printed '$got', CMakeLists.txt says $version"
help=$("$eccctl" --help)
confdir="$cfg_prefix/$sysconfdir/ecc"
grep -qF "eccctl demo $confdir/default.ini" <<<"$help" ||
  die "eccctl --help does not name the configurations in $confdir: $help"
! grep -qF "conf/" <<<"$help" || die "eccctl --help names the source tree: $help"
for f in "$prefix"/etc/ecc/*.ini; do
  expect_out "$f: ok (" "$eccctl" check "$f"
done
expect_out "plugin:         $prefix/$libdir/ecc/libecc-shm.so" "$eccctl" info "$prefix/etc/ecc/default.ini"
grep -qF "version:        $version" "$tmp/out" || die "plugin version: $(cat "$tmp/out")"
say "eccctl $version: --help names $confdir; check passes on every installed INI; the installed plugin loads"

# ---- a consumer project, both ways ---------------------------------------

run_consumer() { # how, binary
  local region="ic$$-$1"
  "$2" "$prefix/etc/ecc/default.ini" "$region" >"$tmp/$1.out" 2>&1 ||
    die "the consumer built with $1 failed: $(cat "$tmp/$1.out")"
  [ ! -e "$region_dir/ecc-$region.region" ] || die "the consumer left its region behind"
  say "$1: $(cat "$tmp/$1.out")"
}

cmake -S "$root/tests/install" -B "$tmp/with-cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$tmp/cmake.log" 2>&1 ||
  die "configuring the consumer with find_package failed: $(cat "$tmp/cmake.log")"
grep -qF "ecc $version: plugins in $prefix/$libdir/ecc, configurations in $prefix/etc/ecc" \
  "$tmp/cmake.log" || die "find_package(ecc) gave other values: $(cat "$tmp/cmake.log")"
cmake --build "$tmp/with-cmake" >"$tmp/build.log" 2>&1 ||
  die "building the consumer with ecc::host failed: $(cat "$tmp/build.log")"
run_consumer cmake "$tmp/with-cmake/ecc_consumer"

export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
pc() { # pkg-config's answer without the blank it may end with
  local out
  out=$(pkg-config "$@" ecc)
  echo "${out% }"
}
[ "$(pc --modversion)" = "$version" ] || die "pkg-config --modversion ecc: $(pc --modversion)"
[ "$(pc --cflags)" = "-I$prefix/include/ecc" ] || die "pkg-config --cflags ecc: $(pc --cflags)"
[ "$(pc --libs)" = "-L$prefix/$libdir -lecc-host" ] || die "pkg-config --libs ecc: $(pc --libs)"
[ "$(pc --variable=plugindir)" = "$prefix/$libdir/ecc" ] || die "plugindir: $(pc --variable=plugindir)"
# shellcheck disable=SC2046 # the flags are words
cc -std=c11 -Wall -Wextra -Werror $(pc --cflags) -DCONSUMER_VERSION="\"$(pc --modversion)\"" \
  -DCONSUMER_PLUGIN_DIR="\"$(pc --variable=plugindir)\"" "$root/tests/install/consumer.c" \
  -o "$tmp/consumer-pc" $(pc --libs) -Wl,-rpath,"$(pc --variable=libdir)" ||
  die "building the consumer with pkg-config failed"
run_consumer pkg-config "$tmp/consumer-pc"

# ---- a plugin built from the installed ABI header alone ------------------

plugins="$tmp/plugins"
mkdir -m 0755 "$plugins"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror -shared -fPIC -fvisibility=hidden $(pc --cflags) \
  "$prefix/$docdir/examples/minimal_plugin.c" -o "$plugins/libecc-minimal.so" -lpthread ||
  die "the installed minimal_plugin.c does not build against the installed headers"
exports=$(nm -D --defined-only "$plugins/libecc-minimal.so" | awk '{print $3}')
[ "$exports" = ecc_plugin_v1 ] || die "the minimal plugin exports: $exports"
printf '[plugin]\nname = minimal\ndir = %s\n[minimal]\nblocks = 8\n' "$plugins" >"$tmp/minimal.ini"
chmod 0644 "$tmp/minimal.ini"
expect_out ": ok (minimal: 8 blocks of 4096 B" "$eccctl" check "$tmp/minimal.ini"
expect_out "blocks:       8 x 4096 B" "$eccctl" info --open "$tmp/minimal.ini"
say "examples/minimal_plugin.c, installed, builds from include/ecc/ alone, exports only its table, and eccctl check and info --open use it"

# ---- the manual pages ----------------------------------------------------

man="$prefix/$mandir"
pages=0
for page in "$man"/man?/*; do
  # From the top of the tree, where a page that sources another finds it.
  warnings=$(cd "$man" && groff -man -ww -z -Tutf8 "${page#"$man"/}" 2>&1)
  [ -z "$warnings" ] || die "${page#"$man"/} does not render cleanly: $warnings"
  pages=$((pages + 1))
done
functions=$(sed -n 's/^\(int\|size_t\|const char\) \**\(ecc_[a-z_]*\)(.*/\2/p' "$prefix/include/ecc/ecc_host.h")
for fn in $functions; do
  [ -f "$man/man3/$fn.3" ] || die "man $fn finds no page"
  grep -qE "^\.SS .*\b$fn\(\)" "$man/man3/ecc_host.3" || die "ecc_host(3) has no section on $fn()"
done
commands=$("$eccctl" --help | sed -n '/^commands:/,/^$/s/^  \([a-z]*\) .*/\1/p')
options=0
for cmd in $commands; do
  for opt in $("$eccctl" "$cmd" --help | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
    roff=${opt//-/\\-}
    grep -qF -- "$roff" "$man/man1/eccctl.1" || die "eccctl(1) does not document $cmd $opt"
    options=$((options + 1))
  done
done
say "$pages manual pages render without a warning; ecc_host(3) covers the $(wc -w <<<"$functions") functions of ecc_host.h, eccctl(1) the $options options of $(wc -w <<<"$commands") commands"

# ---- prefix /usr, staged with DESTDIR (no build: the files only) ---------

cmake -S "$root" -B "$tmp/build-usr" -DCMAKE_INSTALL_PREFIX=/usr -DECC_TESTS=OFF -DECC_CUDA=OFF \
  >"$tmp/usr.log" 2>&1 || die "configuring for prefix /usr failed: $(cat "$tmp/usr.log")"
stage="$tmp/stage"
for component in config development man; do
  DESTDIR="$stage" cmake --install "$tmp/build-usr" --component "$component" >>"$tmp/usr.log"
done
for f in "$root"/conf/*.ini; do
  [ -f "$stage/etc/ecc/$(basename "$f")" ] || die "prefix /usr: $(basename "$f") is not in /etc/ecc"
done
[ ! -e "$stage/usr/etc" ] || die "prefix /usr: something went to /usr/etc"
usr_libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$tmp/build-usr/CMakeCache.txt")
usr_pc="$stage/usr/$usr_libdir/pkgconfig/ecc.pc"
for line in prefix=/usr configdir=/etc/ecc; do
  grep -qxF "$line" "$usr_pc" || die "prefix /usr: ecc.pc lacks '$line': $(cat "$usr_pc")"
done
grep -qF 'set(ECC_CONFIG_DIR "/etc/ecc")' "$stage/usr/$usr_libdir/cmake/ecc/eccConfig.cmake" ||
  die "prefix /usr: eccConfig.cmake does not set ECC_CONFIG_DIR to /etc/ecc"
grep -qF '#define ECC_INSTALL_CONFIG_DIR "/etc/ecc"' "$tmp/build-usr/generated/ecc_build_info.h" ||
  die "prefix /usr: eccctl would name another configuration directory"
say "prefix /usr: configurations in /etc/ecc, none in /usr/etc; ecc.pc, eccConfig.cmake and eccctl say so"

say "OK ($(($(date +%s) - start)) s)"
