#!/usr/bin/env bash
# API server under a flood (issue 20's load test): `rkube server --disable-kubelet --disable-dns`
# with a static token for user `flood` (bound to cluster-admin, so it may do anything but is not in
# system:masters, which in-flight limits exempt as upstream's flow control does). `rkube bench api
# --scenarios flood` then floods whole LISTs of 10,000 ConfigMaps and creates from `flood` while the
# admin's paced probes (a small LIST and a PATCH, every 100 ms each) measure their latencies; then
# `--scenarios watch` opens WATCHERS watches and reports the server's RSS. A third probe runs as
# user `probe` (bound to view, not in system:masters either): with API Priority and Fairness on it
# lands in the same priority level as `flood` (global-default) but in another flow.
#
# Usage: scripts/bench-flood.sh [SECONDS=20] [TASKS=16] [WATCHERS=10000]  (build first: cargo build --release)
# RKUBE_SERVER_FLAGS adds server flags, e.g. "--enable-priority-and-fairness=false"; FLOOD_LEVEL=own
# gives `flood` a priority level of its own (see below).
set -euo pipefail
seconds=${1:-20}
tasks=${2:-16}
watchers=${3:-10000}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${RKUBE_BIN:-$root/target/release/rkube}
dir=$(mktemp -d)
trap 'kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
printf 'flood-token,flood,flood-uid\nprobe-token,probe,probe-uid\n' >"$dir/tokens.csv"
"$bin" server --data-dir "$dir" --secure-port 0 --disable-kubelet --disable-dns \
  --token-auth-file "$dir/tokens.csv" ${RKUBE_SERVER_FLAGS:-} >"$dir/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 300); do [ -f "$dir/admin.kubeconfig" ] && kubectl --kubeconfig "$dir/admin.kubeconfig" get ns default >/dev/null 2>&1 && break; sleep 0.2; done
export KUBECONFIG=$dir/admin.kubeconfig
kubectl create clusterrolebinding flood --clusterrole cluster-admin --user flood >/dev/null
kubectl create clusterrolebinding probe --clusterrole view --user probe >/dev/null
server=$(kubectl config view -o jsonpath='{.clusters[0].cluster.server}')
for user in flood probe; do
  kc=$dir/$user.kubeconfig
  kubectl config --kubeconfig "$kc" set-cluster rkube --server "$server" \
    --certificate-authority "$dir/pki/ca.crt" --embed-certs=true >/dev/null
  kubectl config --kubeconfig "$kc" set-credentials "$user" --token "$user-token" >/dev/null
  kubectl config --kubeconfig "$kc" set-context "$user" --cluster rkube --user "$user" >/dev/null
  kubectl config --kubeconfig "$kc" use-context "$user" >/dev/null
  for _ in $(seq 100); do kubectl --kubeconfig "$kc" get ns default >/dev/null 2>&1 && break; sleep 0.2; done
done
# FLOOD_LEVEL=own: a PriorityLevelConfiguration and FlowSchema of its own for `flood` (as an operator
# would isolate a noisy client), instead of sharing global-default with `probe`.
if [ "${FLOOD_LEVEL:-}" = own ]; then
  kubectl apply -f - >/dev/null <<'LEVEL'
apiVersion: v1
kind: List
items:
- apiVersion: flowcontrol.apiserver.k8s.io/v1
  kind: PriorityLevelConfiguration
  metadata: {name: flood}
  spec:
    type: Limited
    limited:
      nominalConcurrencyShares: 10
      limitResponse: {type: Queue, queuing: {queues: 16, handSize: 4, queueLengthLimit: 50}}
- apiVersion: flowcontrol.apiserver.k8s.io/v1
  kind: FlowSchema
  metadata: {name: flood}
  spec:
    priorityLevelConfiguration: {name: flood}
    matchingPrecedence: 500
    distinguisherMethod: {type: ByUser}
    rules:
    - subjects: [{kind: User, user: {name: flood}}]
      resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], clusterScope: true, namespaces: ["*"]}]
LEVEL
fi
flood=$dir/flood.kubeconfig
echo "server pid $server_pid, commit $(git -C "$root" rev-parse --short HEAD), flags: ${RKUBE_SERVER_FLAGS:-none}, flood level: ${FLOOD_LEVEL:-shared}"
"$bin" bench api --kubeconfig "$KUBECONFIG" --server-pid "$server_pid" --scenarios flood \
  --flood-kubeconfig "$flood" --probe-kubeconfig "$dir/probe.kubeconfig" \
  --flood-seconds "$seconds" --flood-tasks "$tasks"
"$bin" bench api --kubeconfig "$KUBECONFIG" --server-pid "$server_pid" --scenarios watch \
  --watchers "$watchers" --watch-events 100
