#!/usr/bin/env bash
# Persistent-volume scheduling benchmark (issue 21): `rkube server --disable-kubelet --sim-nodes NODES`
# (API server, scheduler, controllers incl. the PV binder and the local-path provisioner, simulated
# nodes; one process). Times SETS StatefulSets of REPLICAS pods each (podManagementPolicy Parallel)
# from `kubectl apply` until every pod is Running, first without claims, then in a fresh server with a
# `volumeClaimTemplates` claim per pod on the default `local-path` class (WaitForFirstConsumer: the
# scheduler selects the node, the PV controller provisions a directory and binds, PreBind waits).
# Prints a markdown table.
#
# Usage: scripts/bench-volumes.sh [SETS=100] [REPLICAS=10] [NODES=100]  (build first: cargo build --release)
set -euo pipefail
sets=${1:-100}
replicas=${2:-10}
nodes=${3:-100}
total=$((sets * replicas))
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${RKUBE:-$root/target/release/rkube}
now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a - b }'; }

manifests() { # $1: with claims (1) or not (0)
  for i in $(seq "$sets"); do
    cat <<YAML
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s$i}
spec:
  serviceName: s$i
  replicas: $replicas
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: s$i}}
  template:
    metadata: {labels: {app: s$i}}
    spec:
      containers:
      - name: app
        image: bench:1
        resources: {requests: {cpu: 10m, memory: 16Mi}}
YAML
    if [ "$1" = 1 ]; then
      cat <<YAML
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
YAML
    fi
    echo "---"
  done
}

run() { # $1: label, $2: with claims
  local dir server_pid t0 t1 running bound
  dir=$(mktemp -d)
  "$bin" server --data-dir "$dir" --secure-port 0 --disable-kubelet --disable-dns --sim-nodes "$nodes" \
    >"$dir/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 300); do grep -q "simulated nodes running" "$dir/server.log" 2>/dev/null && break; sleep 0.2; done
  export KUBECONFIG=$dir/admin.kubeconfig
  for _ in $(seq 100); do kubectl get storageclass local-path >/dev/null 2>&1 && break; sleep 0.2; done
  manifests "$2" >"$dir/sets.yaml"
  t0=$(now)
  kubectl apply -f "$dir/sets.yaml" >/dev/null
  running=0
  for _ in $(seq 3000); do
    running=$(kubectl get pods --no-headers --field-selector=status.phase=Running 2>/dev/null | wc -l)
    [ "$running" -ge "$total" ] && break
    sleep 0.2
  done
  t1=$(now)
  bound=$(kubectl get pvc --no-headers 2>/dev/null | grep -c Bound || true)
  printf '| %s | %s | %s | %s |\n' "$1" "$running" "$bound" "$(sub "$t1" "$t0")"
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  rm -rf "$dir"
}

echo "| $sets StatefulSets x $replicas pods, $nodes simulated nodes | pods Running | claims Bound | seconds to all Running |"
echo "|---|---|---|---|"
run "no claims" 0
run "a local-path claim per pod" 1
