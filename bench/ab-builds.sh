#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ab-builds.sh OLD_SRC OUT_DIR - on a machine with a GPU: ecc-bench of two
# trees in one run, rounds interleaved (old, new, old, new, ...) so that a
# drift of the machine falls on both: OLD_SRC (another checkout, e.g. one
# made with `git archive REV`) against this one. Prints, per configuration,
# the median GB/s of our path in each build and new/old.
# ROUNDS (default 3) and BENCH_ARGS (default --quick) tune it; the builds
# are BUILD_DIR-old and BUILD_DIR-new (default /tmp/ecc-ab), each round's
# output BUILD_DIR-runs/; OUT_DIR gets the build logs and summary.txt.
set -euo pipefail
old_src=$(cd "$1" && pwd)
out=$2
new_src=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-/tmp/ecc-ab}
rounds=${ROUNDS:-3}
runs=$build-runs
mkdir -p "$out" "$runs"

for side in old new; do
  src=$old_src
  [ "$side" = new ] && src=$new_src
  if ! { cmake -S "$src" -B "$build-$side" -DECC_CUDA=ON -DECC_TESTS=OFF \
           -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
         cmake --build "$build-$side" -j"$(nproc)" --target ecc-bench ecc-shm; } \
       > "$out/build-$side.log" 2>&1; then
    tail -30 "$out/build-$side.log"
    exit 1
  fi
done

for r in $(seq 1 "$rounds"); do
  for side in old new; do
    echo "== round $r: $side"
    "$build-$side/bin/ecc-bench" ${BENCH_ARGS:---quick} --csv "$runs/$side-$r.csv" \
      > "$runs/$side-$r.txt" 2> "$runs/$side-$r.err"
    grep -E "every byte" "$runs/$side-$r.txt" || { tail -5 "$runs/$side-$r.err"; exit 1; }
  done
done

python3 - "$runs" "$rounds" <<'EOF' | tee "$out/summary.txt"
import csv, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rates = {}
for side in ("old", "new"):
    for r in range(1, rounds + 1):
        with open(f"{out}/{side}-{r}.csv") as f:
            for row in csv.DictReader(f):
                if row["method"] != "ours-auto":
                    continue
                key = (int(row["block_bytes"]), row["layout"], row["direction"])
                rates.setdefault(key, {}).setdefault(side, []).append(float(row["gbps"]))
print(f"ecc-bench {rounds} rounds each, interleaved; GB/s of ours-auto, medians")
print(f"{'block':>8} {'layout':<11} {'dir':<5} {'old':>7} {'new':>7} {'new/old':>8}"
      f"   old min-max   new min-max")
ratios = []
for key in sorted(rates):
    old, new = rates[key]["old"], rates[key]["new"]
    o, n = statistics.median(old), statistics.median(new)
    ratios.append(n / o)
    print(f"{key[0] // 1024:>6}Ki {key[1]:<11} {key[2]:<5} {o:7.1f} {n:7.1f} {n / o:8.3f}"
          f"   {min(old):5.1f}-{max(old):5.1f}   {min(new):5.1f}-{max(new):5.1f}")
print(f"new/old over {len(ratios)} configurations: median {statistics.median(ratios):.3f}, "
      f"min {min(ratios):.3f}, max {max(ratios):.3f}")
EOF
