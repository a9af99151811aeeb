#!/usr/bin/env bash
# Deployment rollout benchmark: `rkube server --disable-kubelet --disable-controllers --sim-nodes NODES` and `rkube
# controller-manager` as two processes; times a REPLICAS-replica Deployment from creation to fully
# available, then a full rolling update (new image) to complete, with the controller manager's CPU time
# and RSS over each phase. Prints a markdown table.
#
# Usage: scripts/bench-rollout.sh [REPLICAS=1000] [NODES=100]   (build first: cargo build --release)
set -euo pipefail
replicas=${1:-1000}
nodes=${2:-100}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/rkube
dir=$(mktemp -d)
trap 'kill $server_pid $cm_pid 2>/dev/null || true; [ -n "${KEEP_LOGS:-}" ] && cp "$dir"/*.log "$KEEP_LOGS"/; rm -rf "$dir"' EXIT

"$bin" server --data-dir "$dir" --secure-port 0 --disable-kubelet --disable-controllers --sim-nodes "$nodes" \
  >"$dir/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 300); do grep -q "simulated nodes running" "$dir/server.log" 2>/dev/null && break; sleep 0.2; done
export KUBECONFIG=$dir/admin.kubeconfig
"$bin" controller-manager --kubeconfig "$KUBECONFIG" --leader-elect=false >"$dir/cm.log" 2>&1 &
cm_pid=$!
sleep 2

ticks=$(getconf CLK_TCK)
cpu_s() { awk -v t="$ticks" '{printf "%.2f", ($14 + $15) / t}' "/proc/$cm_pid/stat"; }
rss() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$cm_pid/status"; }
hwm() { awk '/VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$cm_pid/status"; }
now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }

echo "| phase | seconds | controller-manager CPU s | CM RSS MiB after | CM peak RSS MiB |"
echo "|---|---|---|---|---|"
echo "| idle (${nodes} nodes) | - | $(cpu_s) | $(rss) | $(hwm) |"
c0=$(cpu_s); t0=$(now)
kubectl apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: bench}
spec:
  replicas: $replicas
  selector: {matchLabels: {app: bench}}
  template:
    metadata: {labels: {app: bench}}
    spec:
      containers: [{name: app, image: "bench:1", resources: {requests: {cpu: 10m, memory: 16Mi}}}]
YAML
kubectl rollout status deployment/bench --timeout=600s >/dev/null
t1=$(now); c1=$(cpu_s)
printf '| create -> %s available | %.1f | %.2f | %s | %s |\n' "$replicas" "$(sub "$t1" "$t0")" "$(sub "$c1" "$c0")" "$(rss)" "$(hwm)"
kubectl set image deployment/bench app=bench:2 >/dev/null
kubectl rollout status deployment/bench --timeout=600s >/dev/null
t2=$(now); c2=$(cpu_s)
printf '| rolling update of %s | %.1f | %.2f | %s | %s |\n' "$replicas" "$(sub "$t2" "$t1")" "$(sub "$c2" "$c1")" "$(rss)" "$(hwm)"
