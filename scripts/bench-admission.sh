#!/usr/bin/env bash
# What admission costs on the write path: ConfigMap creates/s (`rkube bench api --scenarios create`,
# 1/8/32 concurrent clients) on one `rkube server` (release, SQLite, no kubelet), per scenario:
#   none     no webhook, no policy;
#   webhook  one ValidatingWebhookConfiguration whose webhook matches every ConfigMap create, served
#            over HTTPS on loopback by the webhook server of crates/rkube/tests/admission_webhooks.rs
#            (it allows everything; it shares the machine's cores with the server and the client);
#   vap      one ValidatingAdmissionPolicy with one validation matching every ConfigMap create.
# Scenarios run one after the other on the same server, each in a namespace of its own, and undo
# their setup afterwards.
#
# Adding a scenario NAME: define `setup_NAME` (create what it needs; `wait_for_caches` makes sure the
# server's caches have it) and `teardown_NAME`, and add NAME to the default list below (or pass it).
#
# Usage: scripts/bench-admission.sh [SCENARIO...]
#   env: CREATES (per concurrency level, default 10000), CONCURRENCY (default 1,8,32),
#        PAYLOAD_BYTES (default 100), RKUBE_BIN (default: target/release/rkube, built here).
set -euo pipefail
cd "$(dirname "$0")/.."
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(none webhook vap)
creates=${CREATES:-10000}
concurrency=${CONCURRENCY:-1,8,32}
payload=${PAYLOAD_BYTES:-100}

work=$(mktemp -d)
server_pid=""
hook_pid=""
cleanup() {
  [ -n "$hook_pid" ] && kill "$hook_pid" 2>/dev/null
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${RKUBE_BIN:-}" ]; then
  cargo build --release -q -p rkube
fi
bin=${RKUBE_BIN:-$PWD/target/release/rkube}
# The webhook server is the integration test's, run from its test binary.
hook_bin=$(cargo test --release -p rkube --test admission_webhooks --no-run 2>&1 \
  | grep -o 'target/release/deps/admission_webhooks-[0-9a-f]*' | tail -n 1 || true)
[ -x "$hook_bin" ] || { echo "cannot find the admission_webhooks test binary" >&2; exit 1; }

"$bin" server --data-dir "$work/data" --secure-port 0 --disable-kubelet 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 1 300); do grep -q "serving on" "$work/server.log" && break; sleep 0.1; done
grep -q "serving on" "$work/server.log" || { cat "$work/server.log" >&2; exit 1; }
export KUBECONFIG=$work/data/admin.kubeconfig

RKUBE_BENCH_WEBHOOK_DIR=$work "$hook_bin" --ignored --exact serve_webhook_for_bench >/dev/null 2>&1 &
hook_pid=$!
for _ in $(seq 1 100); do [ -s "$work/url" ] && break; sleep 0.1; done
[ -s "$work/url" ] || { echo "the webhook server did not start" >&2; exit 1; }
hook_url=$(cat "$work/url")
hook_ca=$(base64 -w0 < "$work/ca.crt")

# A consistent list is answered once the server's caches (where admission reads its
# configuration from) have caught up with storage.
wait_for_caches() {
  kubectl get validatingwebhookconfigurations,mutatingwebhookconfigurations >/dev/null
}

setup_none() { :; }
teardown_none() { :; }

setup_webhook() {
  kubectl create -f - >/dev/null <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: bench-allow}
webhooks:
- name: allow.bench.example.com
  clientConfig: {url: "$hook_url", caBundle: "$hook_ca"}
  rules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}]
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
EOF
  wait_for_caches
}
teardown_webhook() { kubectl delete validatingwebhookconfiguration bench-allow >/dev/null; }

# vap: one ValidatingAdmissionPolicy (one validation reading the object) bound to every ConfigMap
# create; in force once a create of the name it refuses fails.
setup_vap() {
  kubectl create -f - >/dev/null <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: bench}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - {expression: "object.metadata.name != 'denied'", message: this name is refused}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: bench}
spec: {policyName: bench, validationActions: [Deny]}
EOF
  until ! kubectl create configmap denied -n default --dry-run=server >/dev/null 2>&1; do sleep 0.2; done
}
teardown_vap() {
  kubectl delete validatingadmissionpolicybinding,validatingadmissionpolicy bench >/dev/null
}

echo "### admission benchmark (commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%d), $(nproc) cores)"
for s in "${scenarios[@]}"; do
  declare -F "setup_$s" >/dev/null || { echo "unknown scenario $s" >&2; exit 1; }
  echo
  echo "#### $s"
  echo
  "setup_$s"
  echo '```'
  "$bin" bench api --kubeconfig "$KUBECONFIG" --scenarios create --namespace "adm-$s" \
    --creates "$creates" --concurrency "$concurrency" --payload-bytes "$payload"
  echo '```'
  "teardown_$s"
done
