#!/usr/bin/env bash
# Streaming throughput through the whole path (kubectl -> API server -> kubelet -> containerd): bytes
# out of `kubectl exec` (stdout), into it (stdin), through `kubectl port-forward` (nginx serving a file),
# and out of `kubectl logs`, over kubectl's WebSockets and over SPDY. `rkube server` runs with its local
# node, containerd and pods in a network namespace of their own. Needs root, containerd, runc, the CNI
# plugins and the images of scripts/images.sh. Prints a markdown table.
#
# Usage: scripts/bench-streaming.sh [MIB=100]   (build first: cargo build --release; scripts/images.sh)
set -euo pipefail
mib=${1:-100}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/rkube
images=${RKUBE_IMAGES_DIR:-$root/target/images}
dir=$(mktemp -d)
netns=rkbench-$$
cgroup=/rkube-bench-$$
mkdir -p "$dir/images"
for i in pause busybox nginx; do cp "$images/$i.tar" "$dir/images/"; done

cleanup() {
  kubectl delete pods --all --force --grace-period=0 --wait=false >/dev/null 2>&1 || true
  sleep 3
  [ -n "${pf_pid:-}" ] && kill "$pf_pid" 2>/dev/null
  kill -INT "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  # What the node leaves: shims, processes in its cgroups, mounts, its network namespace.
  for p in $(pgrep -f "containerd-shim.*$dir" || true); do kill -9 "$p"; done
  for d in /sys/fs/cgroup/*/"${cgroup#/}"; do
    [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} + | xargs -r kill -9 2>/dev/null
  done
  sleep 1
  for d in /sys/fs/cgroup/*/"${cgroup#/}"; do [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null; done
  awk '{print $5}' /proc/self/mountinfo | grep "^$dir" | sort -r | xargs -r -n1 umount -l
  ip netns del "$netns" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

"$bin" server --data-dir "$dir" --secure-port 0 --kubelet-port 0 --kubelet-address 127.0.0.1 \
  --node-ip 127.0.0.1 --node-name bench-node --pod-network-namespace "$netns" --cgroup-root "$cgroup" \
  >"$dir/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 300); do grep -q "local node" "$dir/server.log" 2>/dev/null && break; sleep 0.2; done
export KUBECONFIG=$dir/admin.kubeconfig
kubectl wait --for=condition=Ready node/bench-node --timeout=120s >/dev/null

lines=$((mib * 1024 * 8))   # 128-byte lines
line=$(printf 'x%.0s' $(seq 127))
kubectl run bb --image=busybox --restart=Never --command -- sh -c \
  "yes $line | head -n $lines; echo DONE; exec sleep 3600" >/dev/null
kubectl run web --image=nginx --restart=Never --port=80 >/dev/null
kubectl wait --for=condition=Ready pod/bb pod/web --timeout=120s >/dev/null
kubectl exec web -- sh -c "head -c $((mib * 1048576)) /dev/zero > /usr/share/nginx/html/big"
for _ in $(seq 600); do [ "$(kubectl logs bb --tail=1)" = DONE ] && break; sleep 0.5; done

mibps() { python3 -c "print(f'{$1 / 1048576 / $2:.0f}')"; }
measure() { # seconds of a command
  local start end
  start=$(date +%s.%N); "$@" >/dev/null; end=$(date +%s.%N)
  python3 -c "print($end - $start)"
}

echo "| path | transport | MiB | seconds | MiB/s |"
echo "|---|---|---|---|---|"
bytes=$((mib * 1048576))
for ws in true false; do
  t=WebSocket; [ $ws = false ] && t=SPDY
  s=$(KUBECTL_REMOTE_COMMAND_WEBSOCKETS=$ws measure kubectl exec bb -- head -c $bytes /dev/zero)
  echo "| exec stdout | $t | $mib | $(printf %.2f "$s") | $(mibps $bytes "$s") |"
  start=$(date +%s.%N)
  head -c $bytes /dev/zero | KUBECTL_REMOTE_COMMAND_WEBSOCKETS=$ws kubectl exec -i bb -- sh -c 'cat > /dev/null'
  end=$(date +%s.%N); s=$(python3 -c "print($end - $start)")
  echo "| exec stdin | $t | $mib | $(printf %.2f "$s") | $(mibps $bytes "$s") |"
done
for ws in true false; do
  t=WebSocket; [ $ws = false ] && t=SPDY
  port=$((20000 + RANDOM % 20000))
  KUBECTL_PORT_FORWARD_WEBSOCKETS=$ws kubectl port-forward pod/web "$port:80" >"$dir/pf.log" 2>&1 &
  pf_pid=$!
  for _ in $(seq 100); do grep -q Forwarding "$dir/pf.log" && break; sleep 0.1; done
  s=$(measure curl -sf "http://127.0.0.1:$port/big" -o /dev/null)
  kill "$pf_pid"; wait "$pf_pid" 2>/dev/null || true; pf_pid=
  echo "| port-forward (curl) | $t | $mib | $(printf %.2f "$s") | $(mibps $bytes "$s") |"
done
s=$(measure kubectl logs bb)
echo "| logs ($lines lines) | HTTP/2 | $mib | $(printf %.2f "$s") | $(mibps $bytes "$s") |"
