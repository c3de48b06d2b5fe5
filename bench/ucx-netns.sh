#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/ucx-netns.sh [BUILD_DIR] [ecc-ucx-bench options] - the cross-host
# benchmark between two network namespaces joined by a veth pair (root):
# iperf3 over the veth (the link's limit), then ecc-ucx-bench's server in
# one namespace and its client in the other, in the same run; the table is
# printed last. Leaves nothing behind.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
bench="$build/bin/ecc-ucx-bench"
[ -x "$bench" ] || { echo "ucx-netns.sh: $bench is missing: build with libucx-dev" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "ucx-netns.sh: needs iperf3 (apt-get install iperf3)" >&2; exit 1; }
# shellcheck source=../scripts/netns-pair.sh
. "$root/scripts/netns-pair.sh"

a="eccb-$$-a" b="eccb-$$-b" addr=169.254.99.1 port=7351
pids=()
dir=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "$dir" ] && rm -rf "$dir"  # the regions: gigabytes of tmpfs
  netns_pair_down "$a" "$b"
}
trap cleanup EXIT

netns_pair_up "$a" "$b" "$addr/24" 169.254.99.2/24

# The region files live in a private tmpfs directory per namespace.
dir=$(mktemp -d /dev/shm/ecc-ucx-bench.XXXXXX)
chmod 700 "$dir"
mkdir -m 700 "$dir/a" "$dir/b"

ip netns exec "$a" iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
pids+=($!)
sleep 0.3
iperf=$(ip netns exec "$b" iperf3 -c "$addr" -p 5299 -t 3 -J |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e9)')

fifo="$dir/ready"
mkfifo "$fifo"
ip netns exec "$a" "$bench" server "$addr:$port" --region-dir "$dir/a" "$@" > "$fifo" &
pids+=($!)
read -r _ < "$fifo"
ip netns exec "$a" "$bench" raw-server "$addr:$port" "$@" > "$fifo" &
pids+=($!)
read -r _ < "$fifo"
out=$(ip netns exec "$b" "$bench" client "$addr:$port" --region-dir "$dir/b" "$@")

echo "iperf3 over the veth: $(printf '%.3f' "$iperf") GB/s"
echo "$out" | awk -v lim="$iperf" 'NR == 1 { printf "%s %10s %15s %10s %10s\n", $0, "ecc/iperf3", "no-cache/iperf3", "raw/iperf3", "get/iperf3"; next }
  { printf "%s %9.1f%% %14.1f%% %9.1f%% %9.1f%%\n", $0, 100 * $3 / lim, 100 * $4 / lim, 100 * $5 / lim, 100 * $6 / lim }'
