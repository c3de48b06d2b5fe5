#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# metrics-check.sh [BUILD_DIR] - a real scrape of `eccctl metrics --listen`
# with curl, linted by promtool (Debian's prometheus package): a producer
# (eccctl demo --side producer) fills a region with a directory, the server
# joins it on a port of the kernel's choice, curl fetches /metrics, and
# `promtool check metrics` must accept it; 404 and 405 are checked too.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
"$root/scripts/deps.sh" prometheus curl

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ini=$work/metrics.ini
cat > "$ini" <<INI
[plugin]
name = shm
dir = $build/lib/ecc
log_level = error
[region]
name = metrics-check-$$
block_size = 3KiB
size = 64MiB
[engine]
type = host
[directory]
enabled = true
INI
chmod 600 "$ini"

"$build/bin/eccctl" demo --side producer --hold 60 --entries 16 --rows 64 "$ini" \
  > "$work/producer.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  "$build/bin/eccctl" stat "$ini" 2>/dev/null | grep -q "entries: *[1-9]" && break
  sleep 0.2
done
"$build/bin/eccctl" metrics --listen 127.0.0.1:0 "$ini" > "$work/server.log" 2>&1 &
pids+=($!)
url=""
for _ in $(seq 100); do
  url=$(sed -n 's/^listening on \(http:[^ ]*\)$/\1/p' "$work/server.log")
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { cat "$work/server.log" "$work/producer.log"; exit 1; }

curl -fsS -D "$work/headers" "$url" -o "$work/scrape"
grep -qi "^content-type: text/plain; version=0.0.4" "$work/headers"
grep -q "^ecc_directory_entries [1-9]" "$work/scrape" || { cat "$work/scrape"; exit 1; }
promtool check metrics < "$work/scrape"
[ "$(curl -s -o /dev/null -w '%{http_code}' "${url%/metrics}/other")" = 404 ]
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$url")" = 405 ]
echo "metrics-check: $(grep -c '^# TYPE' "$work/scrape") families scraped from $url, promtool: ok"
