#!/usr/bin/env bash
# Pod startup latency on a real node and the kubelet's memory (docs/benchmarks.md):
#   scripts/bench-kubelet.sh [PODS]        (default 100; needs root, containerd, scripts/images.sh's images)
# Starts `rkube server --disable-kubelet` and a separate `rkube kubelet` (its containerd as a child, in a
# network namespace of its own), creates PODS busybox pods through `rkube bench schedule` (latency: from
# each create request to the pod seen Running by a watch), then reports the kubelet's RSS with the pods
# running. Everything it started is stopped and removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
pods="${1:-100}"
bin="${RKUBE_BIN:-target/release/rkube}"
[ -x "$bin" ] || cargo build --release -p rkube
dir="$(mktemp -d)"
ns="rkbench-$$"
cg="/rkube-bench-$$"
mkdir -p "$dir/node/images"
for i in pause busybox; do ln "target/images/$i.tar" "$dir/node/images/" 2>/dev/null || cp "target/images/$i.tar" "$dir/node/images/"; done

cleanup() {
  set +e
  [ -n "${kubeconfig:-}" ] && KUBECONFIG="$kubeconfig" kubectl delete ns bench-schedule --wait=false >/dev/null 2>&1
  for _ in $(seq 1 120); do
    left=$(ctr --address "$dir/node/containerd/containerd.sock" -n k8s.io containers ls -q 2>/dev/null | wc -l)
    [ "$left" = 0 ] && break
    sleep 1
  done
  [ -n "${kubelet_pid:-}" ] && kill "$kubelet_pid" 2>/dev/null
  [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null
  sleep 1
  for h in /sys/fs/cgroup/*"$cg"; do
    [ -d "$h" ] || continue
    find "$h" -name cgroup.procs -exec cat {} \; 2>/dev/null | xargs -r kill -9 2>/dev/null
    find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  grep " $dir" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

"$bin" server --data-dir "$dir/server" --secure-port 0 --disable-kubelet >"$dir/server.log" 2>&1 &
server_pid=$!
kubeconfig="$dir/server/admin.kubeconfig"
for _ in $(seq 1 120); do grep -q "serving on" "$dir/server.log" && break; sleep 0.5; done
"$bin" kubelet --kubeconfig "$kubeconfig" --root-dir "$dir/node" --pod-network-namespace "$ns" \
  --node-ip 127.0.0.1 --node-name bench-node --cgroup-root "$cg" --port 0 >"$dir/kubelet.log" 2>&1 &
kubelet_pid=$!
for _ in $(seq 1 240); do
  [ "$(KUBECONFIG="$kubeconfig" kubectl get node bench-node -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] && break
  sleep 0.5
done
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB; commit $(git rev-parse --short HEAD)"
# CPU seconds (user + system) of a process, and of the whole machine, to see where the startup goes.
ticks=$(getconf CLK_TCK)
cpu_of() { awk -v t="$ticks" '{printf "%.2f", ($14 + $15) / t}' "/proc/$1/stat"; }
machine_cpu() { awk -v t="$ticks" '/^cpu /{printf "%.2f", ($2 + $3 + $4 + $7 + $8) / t}' /proc/stat; }
kubelet_cpu0=$(cpu_of "$kubelet_pid"); machine_cpu0=$(machine_cpu)
"$bin" bench schedule --kubeconfig "$kubeconfig" --pods "$pods" --concurrency 8 --cpu 10m --memory 8Mi --image busybox --command "sleep 3600"
rss() { awk '/VmRSS/{print $2}' "/proc/$1/status"; }
containerd_pid=$(pgrep -P "$kubelet_pid" -f containerd | head -1 || true)
echo "kubelet RSS with $pods pods running: $(( $(rss "$kubelet_pid") / 1024 )) MiB"
[ -n "$containerd_pid" ] && echo "containerd RSS: $(( $(rss "$containerd_pid") / 1024 )) MiB"
echo "CPU seconds during the run: kubelet $(awk -v a="$(cpu_of "$kubelet_pid")" -v b="$kubelet_cpu0" 'BEGIN{printf "%.2f", a-b}'), whole machine (containerd, shims, runc, CNI plugins, API server, kubelet) $(awk -v a="$(machine_cpu)" -v b="$machine_cpu0" 'BEGIN{printf "%.2f", a-b}')"
