#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks the house style (docs/contributing.md, "Style") on every C and CUDA source of
# the tree (formatted as .clang-format says, opening with the SPDX line) and
# that scripts and build files carry the SPDX line too.
# Usage: scripts/style.sh [--fix]   (--fix rewrites the files in place)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
"$root/scripts/deps.sh" clang-format
fix=0
[ "${1:-}" = "--fix" ] && fix=1

mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu')
bad=0
for f in "${files[@]}"; do
  if [ "$(head -n 1 "$f")" != "/* SPDX-License-Identifier: Apache-2.0 */" ]; then
    echo "style.sh: $f does not open with the SPDX line" >&2
    bad=1
  fi
done
# Scripts and build files carry it too, in their own comment syntax.
while read -r f; do
  if ! head -n 2 "$f" | grep -q "SPDX-License-Identifier: Apache-2.0"; then
    echo "style.sh: $f has no SPDX line in its first two lines" >&2
    bad=1
  fi
done < <(git ls-files '*.sh' '*CMakeLists.txt' '*.cmake' '*.in' '*.py' .ci/run)
if [ $fix -eq 1 ]; then
  clang-format -i "${files[@]}"
elif ! clang-format --dry-run -Werror "${files[@]}" 2>/tmp/ecc-style.$$; then
  grep -E "^[^ ].*: (error|warning)" /tmp/ecc-style.$$ | cut -d: -f1 | sort -u |
    sed 's/^/style.sh: not formatted: /' >&2
  echo "style.sh: run scripts/style.sh --fix" >&2
  bad=1
fi
rm -f /tmp/ecc-style.$$
[ $bad -eq 0 ] && echo "style.sh: ${#files[@]} files in the house style"
exit $bad
