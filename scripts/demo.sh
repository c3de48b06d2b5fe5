#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the project and runs the main job on the shipped default config:
# a producer and a consumer process sharing one region, every byte checked.
# Usage: scripts/demo.sh [CONFIG] [demo options...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
config="${1:-$root/conf/default.ini}"
shift || true
"$root/scripts/build.sh" "$root/build"
exec "$root/build/bin/eccctl" demo "$config" "$@"
