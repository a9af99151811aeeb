#!/usr/bin/env bash
# Where the memory per pod goes (issue 25 item 2): the density workload against the components as
# separate processes (`rkube apiserver`, `rkube scheduler`, `rkube controller-manager`, `rkube sim`),
# the same code `rkube server` runs in one process, so each one's RSS is its own. Samples every
# process's RSS each second and prints a markdown table of each one's RSS before the workload, at
# its peak and at the end, and the peak growth per pod.
#
# Usage: scripts/density-components.sh [NODES=1000] [PODS=10000] [RATE=100] [extra bench flags...]
#   e.g. scripts/density-components.sh 1000 5000 100 --churn=false
# Build first: cargo build --release -p rkube. Env: RKUBE (the binary), OUT (kept output dir).
set -euo pipefail
nodes=${1:-1000}
pods=${2:-10000}
rate=${3:-100}
shift $(( $# < 3 ? $# : 3 ))
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${RKUBE:-$root/target/release/rkube}
dir=$(mktemp -d)
out=${OUT:-$dir/out}
mkdir -p "$out"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir/data"; }
trap cleanup EXIT

"$bin" apiserver --data-dir "$dir/data" --secure-port 0 >"$out/apiserver.log" 2>&1 &
api=$!; pids+=("$api")
for _ in $(seq 300); do grep -q "serving on" "$out/apiserver.log" 2>/dev/null && break; sleep 0.2; done
grep -q "serving on" "$out/apiserver.log" || { cat "$out/apiserver.log"; exit 1; }
kc=$dir/data/admin.kubeconfig
"$bin" scheduler --kubeconfig "$kc" >"$out/scheduler.log" 2>&1 &
sched=$!; pids+=("$sched")
"$bin" controller-manager --kubeconfig "$kc" >"$out/controller-manager.log" 2>&1 &
cm=$!; pids+=("$cm")
"$bin" sim --nodes "$nodes" --kubeconfig "$kc" >"$out/sim.log" 2>&1 &
sim=$!; pids+=("$sim")
for _ in $(seq 600); do grep -q "nodes registered" "$out/sim.log" 2>/dev/null && break; sleep 0.5; done
grep -q "nodes registered" "$out/sim.log" || { cat "$out/sim.log"; exit 1; }

names=(apiserver scheduler controller-manager sim)
procs=("$api" "$sched" "$cm" "$sim")
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# One line per second: time and each process's RSS in KiB.
(
  while true; do
    line=$(date +%s)
    for p in "${procs[@]}"; do line="$line $(rss "$p")"; done
    echo "$line"
    sleep 1
  done
) >"$out/rss.txt" &
sampler=$!; pids+=("$sampler")
sleep 3
"$bin" bench density --kubeconfig "$kc" --server-pid "$api" --nodes "$nodes" --pods "$pods" \
  --rate "$rate" --out "$out" "$@" | tee "$out/bench.txt"
sleep 2
kill "$sampler" 2>/dev/null || true

echo
echo "Peak RSS by process ($nodes nodes, $pods pods, $rate pods/s; load average $(cut -d' ' -f1-3 /proc/loadavg)):"
echo
echo "| process | start MiB | peak MiB | end MiB | peak growth KiB/pod |"
echo "|---|---|---|---|---|"
for i in "${!names[@]}"; do
  col=$((i + 2))
  awk -v c="$col" -v n="${names[$i]}" -v pods="$pods" '
    $c > 0 { if (!s) s = $c; if ($c > m) m = $c; e = $c }
    END { printf "| %s | %.0f | %.0f | %.0f | %.1f |\n", n, s / 1024, m / 1024, e / 1024, (m - s) / pods }' "$out/rss.txt"
done
awk -v pods="$pods" '
  { t = 0; for (i = 2; i <= NF; i++) t += $i; if (!s) s = t; if (t > m) m = t; e = t }
  END { printf "| all | %.0f | %.0f | %.0f | %.1f |\n", s / 1024, m / 1024, e / 1024, (m - s) / pods }' "$out/rss.txt"
echo
echo "output in $out"
