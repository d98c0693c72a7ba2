#!/usr/bin/env bash
# Runs every benchmark in one go and prints the medians, so that the peers of
# each comparison are measured in the same run. BENCHMARKS.md is written from
# this output.
#
#   bash benches/report.sh               # everything (about 15 minutes on 2 cores)
#   bash benches/report.sh --table-only  # only print the medians of the last run
#
# CRITERION_ARGS (default "--warm-up-time 1 --measurement-time 3") is passed
# to every criterion benchmark. Postgres is IDEMPOTENT_POSTGRES_URL (default
# postgres://postgres@127.0.0.1:5432/test); pgbench must be on PATH.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
CRITERION="$TARGET/criterion"
OUT="$TARGET/bench-report"
read -r -a ARGS <<<"${CRITERION_ARGS:---warm-up-time 1 --measurement-time 3}"

machine() {
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cores: $(nproc)"
  echo "cpu: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
  echo "memory: $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "rustc: $(rustc --version)"
}

run_all() {
  mkdir -p "$OUT"
  rm -rf "$CRITERION"
  machine | tee "$OUT/machine.txt"
  local bench
  for bench in memory keys contention; do
    cargo bench -p idempotent-benches --bench "$bench" -- "${ARGS[@]}" 2>&1 | tee "$OUT/$bench.txt"
  done
  cargo bench -p idempotent-benches --bench allocations 2>&1 | tee "$OUT/allocations.txt"
  cargo bench -p idempotent-benches --features sqlite --bench sqlite -- "${ARGS[@]}" 2>&1 |
    tee "$OUT/sqlite.txt"
  cargo bench -p idempotent-benches --features postgres --bench postgres -- "${ARGS[@]}" 2>&1 |
    tee "$OUT/postgres.txt"
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
}

# One row per benchmark: its id, the median time per iteration, and the
# median throughput where the benchmark declares one.
table() {
  echo "| benchmark | median | throughput at the median |"
  echo "|---|---|---|"
  find "$CRITERION" -path '*/new/estimates.json' | sort -V | while read -r estimates; do
    jq -r --slurpfile b "${estimates%estimates.json}benchmark.json" '
      .median.point_estimate as $ns
      | ($b[0].throughput.Elements // null) as $n
      | def t: if $ns >= 1e6 then "\($ns / 1e6 * 100 | round / 100) ms"
               elif $ns >= 1e3 then "\($ns / 1e3 * 100 | round / 100) µs"
               else "\($ns * 10 | round / 10) ns" end;
      "| \($b[0].full_id) | \(t) | \(if $n then "\($n / $ns * 1e9 | round) calls/s" else "" end) |"
    ' "$estimates"
  done
}

if [ "${1:-}" != "--table-only" ]; then
  run_all
fi
echo
table
