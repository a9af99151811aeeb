#!/usr/bin/env bash
# Issue 25's CI-sized density benchmark: `rkube bench density` (upstream's load-test shape on
# simulated nodes, in one `rkube server`) at 1,000 nodes and 30,000 pods, created by Deployments at
# 100 pods/s, then rolled, scaled to half and back. Prints the SLI table, the server's RSS and CPU,
# and `SLOs: met` or `SLOs: missed: ...`; timeline.csv and density.png go to OUT. A benchmark, not
# a test: it takes ~20 minutes on 2 cores.
#
# Usage: scripts/bench-density.sh [NODES=1000] [PODS=30000] [RATE=100] [extra `rkube bench density` flags...]
#   e.g. scripts/bench-density.sh 1000 10000 100 --churn=false
# Build first: cargo build --release -p rkube. Env: OUT (default density-out), RKUBE (the binary).
set -euo pipefail
nodes=${1:-1000}
pods=${2:-30000}
rate=${3:-100}
shift $(( $# < 3 ? $# : 3 ))
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${RKUBE:-$root/target/release/rkube}
echo "rkube bench density: $nodes nodes, $pods pods, $rate pods/s; commit $(git -C "$root" rev-parse --short HEAD);" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
exec "$bin" bench density --nodes "$nodes" --pods "$pods" --rate "$rate" --out "${OUT:-density-out}" "$@"
