#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/ucx-loopback.sh [BUILD_DIR] [ecc-ucx-bench options] - ecc-ucx-bench's
# server, raw sender and client on one host over TCP on the loopback, with
# no namespaces and no iperf3 (bench/ucx-netns.sh measures between two
# network namespaces, against iperf3). With a GPU the client adds its
# device-memory columns. Leaves nothing behind.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
bench="$build/bin/ecc-ucx-bench"
[ -x "$bench" ] || { echo "ucx-loopback.sh: $bench is missing: build with libucx-dev" >&2; exit 1; }
port=$((7400 + $$ % 500))
pids=()
dir=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "$dir" ] && rm -rf "$dir"
}
trap cleanup EXIT
dir=$(mktemp -d /dev/shm/ecc-ucx-loop.XXXXXX)
chmod 700 "$dir"
mkdir -m 700 "$dir/a" "$dir/b"
fifo="$dir/ready"
mkfifo "$fifo"
"$bench" server "127.0.0.1:$port" --region-dir "$dir/a" "$@" > "$fifo" &
pids+=($!)
read -r _ < "$fifo"
"$bench" raw-server "127.0.0.1:$port" "$@" > "$fifo" &
pids+=($!)
read -r _ < "$fifo"
"$bench" client "127.0.0.1:$port" --region-dir "$dir/b" "$@"
