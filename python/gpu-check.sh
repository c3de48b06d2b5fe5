#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python client on a GPU machine: the GPU tests, which must run there
# (ECC_GPU_REQUIRED=1 turns their skips into failures), then the load benchmark.
# Usage: python/gpu-check.sh [BUILD_DIR]   (python3 with torch, cupy, numpy, pytest)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
export ECC_HOST_LIBRARY="${ECC_HOST_LIBRARY:-$build/lib/libecc-host.so}"
if [ ! -f "$ECC_HOST_LIBRARY" ]; then
  echo "gpu-check.sh: $ECC_HOST_LIBRARY does not exist: build first (scripts/build.sh $build)" >&2
  exit 1
fi
export PYTHONDONTWRITEBYTECODE=1
py="${PYTHON:-python3}"
cd "$root"
echo "== Python client: GPU tests =="
ECC_GPU_REQUIRED=1 "$py" -m pytest -v -p no:cacheprovider python/tests/test_gpu.py
echo "== Python client: load benchmark =="
"$py" python/bench.py
