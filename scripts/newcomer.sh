#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Plays a newcomer on a clean clone of this checkout, with only what the
# README says: its two commands, then the Python package into a fresh venv
# (Debian 12's pip refuses the system Python), the README's Python example
# from that venv, and every example of examples/README.md. Any step that
# fails, or that would need a variable the README does not name, fails it.
# (The install to a prefix and the consumers built with find_package and
# pkg-config are scripts/install-check.sh's, which CI runs too.)
# Usage: scripts/newcomer.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/deps.sh" git python3-venv
say() { echo "newcomer: $*"; }
die() {
  echo "newcomer: FAILED: $*" >&2
  exit 1
}
tmp=$(mktemp -d /tmp/ecc-newcomer.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# What a newcomer's shell has: none of the project's variables.
unset ECC_HOST_LIBRARY ECC_PLUGIN_DIR ECC_CONFIG_DIR PYTHONPATH
git clone -q "$root" "$tmp/ecc" || die "git clone"
cd "$tmp/ecc"

say "the README's two commands"
scripts/demo.sh >"$tmp/demo.log" 2>&1 || die "scripts/demo.sh: $(tail -5 "$tmp/demo.log")"
grep -q "verdict: OK" "$tmp/demo.log" || die "the demo gave no OK verdict: $(tail -5 "$tmp/demo.log")"
scripts/test.sh >"$tmp/test.log" 2>&1 || die "scripts/test.sh: $(tail -20 "$tmp/test.log")"
say "demo and tests passed"

say "Python into a fresh venv, as the README says"
readme_venv=$(grep -o 'python3 -m venv [^&]*' README.md | head -1)
[ -n "$readme_venv" ] || die "the README names no venv command"
venv="$tmp/venv"
cmd=${readme_venv/\~\/ecc-venv/$venv}
# A fresh Debian 12 has one python3, /usr/bin/python3, which Debian's
# packages serve; a machine with another first on PATH runs that one.
[ -x /usr/bin/python3 ] && cmd=${cmd/#python3 //usr/bin/python3 }
$cmd >/dev/null || die "$readme_venv"
"$venv/bin/pip" install -q ./python >"$tmp/pip.log" 2>&1 || die "pip install ./python: $(cat "$tmp/pip.log")"
# No variable: the wheel carries the library it built.
sed -n '/^```python$/,/^```$/p' README.md | sed '1d;$d' >"$tmp/readme.py"
"$venv/bin/python" "$tmp/readme.py" >"$tmp/py.log" 2>&1 || die "the README's Python example: $(cat "$tmp/py.log")"
lib=$(cd "$tmp" && "$venv/bin/python" -c 'import ecc; print(ecc.library_path())')
case "$lib" in
"$venv"/*) ;;
*) die "the venv's ecc loaded $lib, not the library its wheel carries" ;;
esac
say "the README's Python example ran from the venv, on $lib"

say "the examples"
out=$(build/bin/cache_producer conf/default.ini 8 | build/bin/cache_consumer conf/default.ini) ||
  die "cache_producer | cache_consumer: $out"
grep -q "8 entries loaded, every byte as encoded" <<<"$out" || die "cache_consumer said: $out"
out=$("$venv/bin/python" examples/producer.py | "$venv/bin/python" examples/consumer.py 2>&1) ||
  die "producer.py | consumer.py: $out"
say "examples ran: $(tail -1 <<<"$out")"
say "ok"
