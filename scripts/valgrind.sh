#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the shim's open/use/close loop (tests/valgrind/loop.c) under valgrind
# memcheck: every cycle opens a connector, moves an entry both ways and
# closes it. Fails on any memory error or leak, or on a file left behind.
# Usage: scripts/valgrind.sh [BUILD_DIR] [CYCLES]   (defaults: build/, 1000)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/build}"
cycles="${2:-1000}"
"$root/scripts/deps.sh" valgrind
"$root/scripts/build.sh" "$dir"
cmake --build "$dir" --target ecc_open_loop >/dev/null

# The loop checks its own region directory after every cycle; here the
# whole of /dev/shm is searched too for anything it could have made.
leftovers() {
  find /dev/shm -maxdepth 2 \( -name 'eccloop-*' -o -name 'ecc-loop.region*' \) 2>/dev/null | sort
}
before="$(leftovers)"
start=$(date +%s)
valgrind --tool=memcheck --leak-check=full \
  --show-leak-kinds=definite,indirect,possible \
  --errors-for-leak-kinds=definite,indirect,possible \
  --error-exitcode=1 --quiet \
  "$dir/tests/ecc_open_loop" "$cycles"
end=$(date +%s)
after="$(leftovers)"
if [ "$before" != "$after" ]; then
  echo "valgrind.sh: left in /dev/shm:" >&2
  comm -13 <(echo "$before") <(echo "$after") >&2
  exit 1
fi
echo "valgrind.sh: $cycles cycles under memcheck: 0 errors, 0 leaks, nothing left in /dev/shm ($((end - start)) s)"
