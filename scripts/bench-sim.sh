#!/usr/bin/env bash
# Simulated-node soak: `rkube server` and `rkube sim --nodes N` as two processes for M minutes; every 30 s
# it counts Leases older than their 40 s duration (a node that would go NotReady), Ready nodes, and the
# CPU (% of one core over the interval) and RSS of both processes. Prints a markdown table.
#
# Usage: scripts/bench-sim.sh [NODES=5000] [MINUTES=10]   (build first: cargo build --release)
set -euo pipefail
nodes=${1:-5000}
minutes=${2:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/rkube
dir=$(mktemp -d)
trap 'kill $server_pid $sim_pid 2>/dev/null || true; rm -rf "$dir"' EXIT

"$bin" server --data-dir "$dir" --secure-port 0 --disable-kubelet >"$dir/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do grep -q "serving on" "$dir/server.log" 2>/dev/null && break; sleep 0.2; done
export KUBECONFIG=$dir/admin.kubeconfig
start=$(date +%s.%N)
"$bin" sim --nodes "$nodes" --kubeconfig "$KUBECONFIG" >"$dir/sim.log" 2>&1 &
sim_pid=$!
for _ in $(seq 600); do grep -q "nodes registered" "$dir/sim.log" 2>/dev/null && break; sleep 0.5; done
grep "nodes registered" "$dir/sim.log" || { cat "$dir/sim.log"; exit 1; }

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
stale_and_ready() {
  kubectl get leases -n kube-node-lease -o json | python3 -c '
import json, sys, datetime
now = datetime.datetime.now(datetime.timezone.utc)
items = json.load(sys.stdin)["items"]
stale = 0
for l in items:
    t = datetime.datetime.fromisoformat(l["spec"]["renewTime"].replace("Z", "+00:00"))
    if (now - t).total_seconds() > l["spec"].get("leaseDurationSeconds", 40):
        stale += 1
print(stale, len(items), end=" ")'
  kubectl get nodes -o json | python3 -c '
import json, sys
items = json.load(sys.stdin)["items"]
print(sum(1 for n in items if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])))'
}

echo "| minute | stale leases | leases | Ready nodes | server CPU % | server RSS MiB | sim CPU % | sim RSS MiB |"
echo "|---|---|---|---|---|---|---|---|"
prev_s=$(cpu $server_pid); prev_m=$(cpu $sim_pid); prev_t=$(date +%s.%N)
end=$(( $(date +%s) + minutes * 60 ))
max_stale=0
while [ "$(date +%s)" -lt "$end" ]; do
  sleep 30
  now_s=$(cpu $server_pid); now_m=$(cpu $sim_pid); now_t=$(date +%s.%N)
  read -r stale total ready <<<"$(stale_and_ready)"
  [ "$stale" -gt "$max_stale" ] && max_stale=$stale
  awk -v s0="$prev_s" -v s1="$now_s" -v m0="$prev_m" -v m1="$now_m" -v t0="$prev_t" -v t1="$now_t" \
      -v st="$start" -v hz="$ticks" -v stale="$stale" -v total="$total" -v ready="$ready" \
      -v srss="$(rss $server_pid)" -v mrss="$(rss $sim_pid)" \
      'BEGIN { dt = t1 - t0; printf "| %.1f | %d | %d | %d | %.1f | %s | %.1f | %s |\n", (t1 - st) / 60, stale, total, ready, 100 * (s1 - s0) / hz / dt, srss, 100 * (m1 - m0) / hz / dt, mrss }'
  prev_s=$now_s; prev_m=$now_m; prev_t=$now_t
done
echo
echo "nodes=$nodes minutes=$minutes max stale leases at any sample: $max_stale"
grep -c "lease renewal failed" "$dir/sim.log" | sed 's/^/failed lease renewals logged: /'
