#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu-check.sh OUT_DIR - on a machine with a GPU: build with CUDA, run the
# GPU tests, the benchmark, the demo, then the GPU tests again under
# compute-sanitizer memcheck and racecheck. Logs and the CSV go to OUT_DIR
# (seven files: the device tool brings back at most eight);
# the benchmark's table is printed last. BENCH_ARGS (e.g. --quick) goes to
# ecc-bench, BENCH=0 skips it; SANITIZE_TIMEOUT bounds each sanitizer run
# (seconds).
set -u -o pipefail
out=${1:-gpu-check-out}
build=${BUILD_DIR:-/tmp/ecc-gpu-build}
mkdir -p "$out"
status=0

nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current \
  --format=csv | tee "$out/machine.log"
# The benchmark's regions need a few GiB of /dev/shm.
if [ "$(df --output=avail -k /dev/shm | tail -1)" -lt 8000000 ]; then
  mount -o remount,size=16G /dev/shm || echo "warning: /dev/shm is small"
fi
df -h /dev/shm | tail -1

echo "== build"
if ! { cmake -S . -B "$build" -DECC_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
       cmake --build "$build" -j"$(nproc)"; } > "$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  exit 1
fi
grep -iE "warning" "$out/build.log" | head -20

echo "== GPU tests"
# test_ucx_gpu is built where UCX is found (pkg-config ucx).
gpu_tests="test_cuda_engine"
[ -x "$build/tests/test_ucx_gpu" ] && gpu_tests="$gpu_tests test_ucx_gpu"
for t in $gpu_tests; do
  echo "-- $t" | tee -a "$out/tests.log"
  timeout 300 "$build/tests/$t" --verbose --jobs 2 >> "$out/tests.log" 2>&1 || status=1
done
grep -E "^-- |^\[(FAIL|SKIP)|Synthesis" "$out/tests.log"
grep -B2 -A8 -E "^\[FAIL" "$out/tests.log" | head -60

if [ "${BENCH:-1}" != 0 ]; then
  echo "== benchmark"
  timeout 400 "$build/bin/ecc-bench" --csv "$out/bench.csv" ${BENCH_ARGS:-} \
    2> "$out/bench.err" > "$out/bench.txt" || status=1
  tail -5 "$out/bench.err"
else
  echo "(benchmark skipped: BENCH=0)" > "$out/bench.txt"
fi

echo "== demo (engine auto)"
ECC_PLUGIN_DIR="$build/lib/ecc" timeout 120 "$build/bin/eccctl" demo conf/default.ini \
  > "$out/demo.log" 2>&1 || status=1
tail -3 "$out/demo.log"
cat "$out/demo.log" >> "$out/machine.log"
rm -f "$out/demo.log"

# memcheck also runs the ucx client's held loads; racecheck looks at the
# copy kernels, which test_cuda_engine drives.
for run in "memcheck $gpu_tests" "racecheck test_cuda_engine"; do
  read -r tool tests <<< "$run"
  for t in $tests; do
    echo "== compute-sanitizer $tool $t"
    echo "== $tool $t" >> "$out/sanitize.log"
    timeout "${SANITIZE_TIMEOUT:-200}" compute-sanitizer --tool "$tool" --target-processes all \
      --error-exitcode 99 "$build/tests/$t" --jobs 1 > "$out/$tool.tmp" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    echo "$tool exit $rc"
    grep -E "ERROR SUMMARY|Synthesis" "$out/$tool.tmp" | sort | uniq -c
    cat "$out/$tool.tmp" >> "$out/sanitize.log"
    rm -f "$out/$tool.tmp"
  done
done

cat "$out/bench.txt"
exit $status
