#!/usr/bin/env bash
# Garbage collector and namespace controller at scale, on `rkube server --disable-scheduler` (SQLite):
#  1. N ConfigMaps owned by one ConfigMap: time from `kubectl delete cm owner` until none is left;
#  2. a namespace of N ConfigMaps: time of `kubectl delete namespace` (kubectl waits until it is gone).
# Object creation is not timed. Prints one line per measurement.
#
# Usage: scripts/bench-gc-ns.sh [N=10000]   (build first: cargo build --release; RKUBE_BIN overrides)
set -euo pipefail
n=${1:-10000}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${RKUBE_BIN:-$root/target/release/rkube}
dir=$(mktemp -d)
trap 'kill $server_pid 2>/dev/null || true; rm -rf "$dir"' EXIT

"$bin" server --data-dir "$dir" --secure-port 0 --disable-scheduler --disable-kubelet >"$dir/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do grep -q "serving on" "$dir/server.log" 2>/dev/null && break; sleep 0.2; done
export KUBECONFIG=$dir/admin.kubeconfig

# N ConfigMaps in namespace $1, owned by ($2 name, $3 uid) when given.
configmaps() {
  python3 - "$n" "$1" "${2:-}" "${3:-}" <<'EOF'
import json, sys
n, ns, owner, uid = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
for i in range(n):
    meta = {"name": f"cm-{i}", "namespace": ns}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": uid}]
    print("---\n" + json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}))
EOF
}
count() { kubectl get configmaps -n "$1" -o name 2>/dev/null | wc -l; }
now() { date +%s.%N; }

kubectl create namespace gc-bench >/dev/null
kubectl create configmap owner -n gc-bench >/dev/null
uid=$(kubectl get configmap owner -n gc-bench -o jsonpath='{.metadata.uid}')
configmaps gc-bench owner "$uid" | kubectl create -f - >/dev/null
[ "$(count gc-bench)" -eq $((n + 1)) ] || { echo "expected $((n + 1)) ConfigMaps"; exit 1; }
# Let the collector's monitors see every dependent before the clock starts.
sleep 5
start=$(now)
kubectl delete configmap owner -n gc-bench >/dev/null
while [ "$(count gc-bench)" -gt 0 ]; do sleep 0.5; done
echo "gc: $n dependents deleted in $(echo "$(now) - $start" | bc) s"

kubectl create namespace ns-bench >/dev/null
configmaps ns-bench | kubectl create -f - >/dev/null
[ "$(count ns-bench)" -eq "$n" ] || { echo "expected $n ConfigMaps"; exit 1; }
start=$(now)
kubectl delete namespace ns-bench --timeout=600s >/dev/null
echo "namespace: $n ConfigMaps, namespace gone in $(echo "$(now) - $start" | bc) s"
