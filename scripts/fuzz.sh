#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a
# bounded time from the committed seed corpus, then prints the executions
# and crashes. Found inputs go to a scratch corpus in the build directory;
# a crash leaves its input in BUILD_DIR/artifacts/ and fails the script.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [BUILD_DIR]   (defaults: 60, build-fuzz/)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-60}"
dir="${2:-$root/build-fuzz}"
# FUZZ_TARGETS (space-separated) picks some of them.
targets=(${FUZZ_TARGETS:-fuzz_open fuzz_abi fuzz_region fuzz_probe fuzz_directory fuzz_wire fuzz_preface})

"$root/scripts/deps.sh" clang libclang-rt-14-dev
CC=clang cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DECC_FUZZ=ON \
  -DECC_TESTS=OFF -DECC_CUDA=OFF -DECC_SANITIZE= >/dev/null
cmake --build "$dir" -j"$(nproc)" --target "${targets[@]}" >/dev/null

mkdir -p "$dir/artifacts"
total_runs=0
total_crashes=0
for t in "${targets[@]}"; do
  work="$dir/corpus/$t"
  mkdir -p "$work"
  dict=()
  [ -f "$root/fuzz/$t.dict" ] && dict=(-dict="$root/fuzz/$t.dict")
  log="$dir/$t.log"
  rc=0
  # -print_funcs=0: naming a newly covered function starts a symbolizer
  # whose pipes stay open, which fuzz_open would count as leaked descriptors.
  ASAN_OPTIONS=detect_leaks=1 "$dir/fuzz/$t" "${dict[@]}" -max_total_time="$seconds" \
    -timeout=10 -print_final_stats=1 -print_funcs=0 -artifact_prefix="$dir/artifacts/$t-" \
    "$work" "$root/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  runs=${runs:-0}
  crashes=0
  if [ "$rc" -ne 0 ]; then
    crashes=1 # libFuzzer stops at the first one
    echo "fuzz.sh: $t failed (exit $rc); last lines of $log:" >&2
    tail -40 "$log" >&2
  fi
  echo "fuzz.sh: $t: ${runs} executions in ${seconds} s, ${crashes} crashes, corpus $(ls "$work" | wc -l) inputs"
  total_runs=$((total_runs + runs))
  total_crashes=$((total_crashes + crashes))
done
# A crash can leave a target's region directory behind.
find /dev/shm -maxdepth 1 -name 'eccfuzz-*' -user "$(id -u)" -exec rm -rf {} + 2>/dev/null || true
echo "fuzz.sh: total ${total_runs} executions, ${total_crashes} crashes"
[ "$total_crashes" -eq 0 ]
