#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/netns-demo.sh [PRODUCER_INI CONSUMER_INI [demo options]] - the demo
# split across two hosts, played by two network namespaces joined by a veth
# pair (needs root): `eccctl demo --side producer` in one, `--side consumer`
# in the other, then the namespaces are removed. Ends with the consumer's
# verdict line. Default: conf/across-ucx-producer.ini and
# conf/across-ucx-consumer.ini (libecc-ucx.so over TCP); with
# conf/across-shm.ini twice, the same demo runs on libecc-shm.so (the
# namespaces share the host's /dev/shm): only the INI differs.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
producer_ini="${1:-$root/conf/across-ucx-producer.ini}"
consumer_ini="${2:-$root/conf/across-ucx-consumer.ini}"
shift $(( $# >= 2 ? 2 : $# ))
eccctl="$build/bin/eccctl"
[ -x "$eccctl" ] || { echo "netns-demo.sh: build first (scripts/build.sh)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "netns-demo.sh: network namespaces need root" >&2; exit 1; }
export ECC_PLUGIN_DIR="$build/lib/ecc"
# shellcheck source=netns-pair.sh
. "$root/scripts/netns-pair.sh"

a="eccdemo-$$-a" b="eccdemo-$$-b" producer=""
cleanup() {
  [ -n "$producer" ] && kill "$producer" 2>/dev/null && wait "$producer" 2>/dev/null || true
  netns_pair_down "$a" "$b"
}
trap cleanup EXIT

netns_pair_up "$a" "$b" 169.254.77.1/24 169.254.77.2/24

fifo=$(mktemp -u /tmp/netns-demo.XXXXXX)
mkfifo -m 600 "$fifo"
ip netns exec "$a" "$eccctl" demo --side producer "$@" "$producer_ini" > "$fifo" &
producer=$!
# The producer's first line says its entries are saved and served.
exec 3< "$fifo"
rm -f "$fifo"
read -r line <&3 || line=""
echo "$line"
case "$line" in
  *"saved; serving"*) ;;
  *) cat <&3; echo "verdict: FAILED: the producer did not start"; exit 1 ;;
esac
ip netns exec "$b" "$eccctl" demo --side consumer "$@" "$consumer_ini"
