# SPDX-License-Identifier: Apache-2.0
# scripts/netns-pair.sh - sourced by the scripts that play two hosts with two
# network namespaces joined by a veth pair (bench/ucx-netns.sh,
# scripts/netns-demo.sh). Needs root and ip(8).
#   netns_pair_up A B ADDR_A ADDR_B   makes them (ADDR_* with their prefix
#                                     length, e.g. 169.254.77.1/24) and waits
#                                     until both ends report their carrier
#   netns_pair_down A B               removes them and the veth pair with them

netns_pair_up() {
  local a=$1 b=$2
  ip netns add "$a"
  ip netns add "$b"
  ip link add va netns "$a" type veth peer name vb netns "$b"
  ip -n "$a" link set lo up
  ip -n "$b" link set lo up
  ip -n "$a" link set va up
  ip -n "$b" link set vb up
  ip -n "$a" addr add "$3" dev va
  ip -n "$b" addr add "$4" dev vb
  # The carrier shows some 20-50 ms after the links are set up, and UCX
  # takes only devices that are up when it starts.
  local _
  for _ in $(seq 300); do
    [ "$(ip netns exec "$a" cat /sys/class/net/va/operstate)" = up ] &&
      [ "$(ip netns exec "$b" cat /sys/class/net/vb/operstate)" = up ] && return 0
    sleep 0.01
  done
  echo "netns-pair.sh: the veth pair did not come up" >&2
  return 1
}

netns_pair_down() {
  ip netns del "$1" 2>/dev/null || true
  ip netns del "$2" 2>/dev/null || true
}
