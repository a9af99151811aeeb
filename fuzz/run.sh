#!/usr/bin/env bash
# Runs the cargo-fuzz targets one after another, each for SECONDS (default 60), one process each:
#   fuzz/run.sh [SECONDS] [TARGET...]
# On the stable toolchain (RUSTC_BOOTSTRAP=1 lets cargo-fuzz pass libFuzzer's nightly flags), without
# a sanitizer (safe Rust; panics, overflow checks, timeouts and the RSS limit are what is caught).
# New inputs go to fuzz/corpus-run/<target> (not committed); crashes to fuzz/artifacts/<target>/.
# A summary line per target goes to fuzz/artifacts/summary.txt.
set -uo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi
export RUSTC_BOOTSTRAP=1
cargo fuzz build -O -a -s none >/dev/null || exit 1
mkdir -p artifacts
for t in "${targets[@]}"; do
  mkdir -p "corpus-run/$t" "artifacts/$t"
  log="artifacts/$t.log"
  cargo fuzz run -O -a -s none "$t" "corpus-run/$t" "corpus/$t" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=5 \
    -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$')
  found=$(ls "artifacts/$t" | wc -l)
  echo "$t rc=$rc seconds=$seconds execs=${execs:-?} cov=${cov:-?} artifacts=$found" | tee -a artifacts/summary.txt
done
