#!/usr/bin/env bash
# The memory store's goals as ratios: runs the `steady` and `replay` groups
# of the memory benchmark RUNS times (each run measures the guard and its
# peers in one process), takes each run's criterion medians, and prints
# every ratio per run, then its median and range over the runs, with the
# load average before and after.
#
#   bash benches/ratios.sh                 # 5 runs
#   RUNS=3 bash benches/ratios.sh
#
# CRITERION_ARGS defaults to "--warm-up-time 1 --measurement-time 2".
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
RUNS="${RUNS:-5}"
CRITERION="${CARGO_TARGET_DIR:-$ROOT/target}/criterion"
read -r -a ARGS <<<"${CRITERION_ARGS:---warm-up-time 1 --measurement-time 2}"

median_ns() { jq -r '.median.point_estimate' "$CRITERION/$1/new/estimates.json"; }

RATIOS=(
  "fresh overhead / steady floor"
  "fresh / moka miss"
  "fresh / cached miss"
  "replay / moka hit"
  "replay / cached hit"
  "replay String / moka hit String"
  "replay String / cached hit String"
)

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
rows=()
for run in $(seq 1 "$RUNS"); do
  cargo bench -q -p idempotent-benches --bench memory -- "${ARGS[@]}" '^(steady|replay)/' >/dev/null 2>&1
  g=$(median_ns steady/idempotent_macro)
  u=$(median_ns steady/unguarded)
  f=$(median_ns steady/floor_insert_remove_oldest)
  mm=$(median_ns steady/moka_get_with_miss)
  cm=$(median_ns steady/cached_macro_miss)
  r=$(median_ns replay/idempotent_macro)
  rm=$(median_ns replay/moka_get_with)
  rc=$(median_ns replay/cached_macro)
  rs=$(median_ns replay/idempotent_macro_string)
  rms=$(median_ns replay/moka_get_with_string)
  rcs=$(median_ns replay/cached_macro_string)
  row=$(awk -v g="$g" -v u="$u" -v f="$f" -v mm="$mm" -v cm="$cm" -v r="$r" -v rm="$rm" \
    -v rc="$rc" -v rs="$rs" -v rms="$rms" -v rcs="$rcs" 'BEGIN {
      printf "%.3f %.3f %.3f %.3f %.3f %.3f %.3f", (g - u) / f, g / mm, g / cm, r / rm, r / rc, rs / rms, rs / rcs }')
  rows+=("$row")
  printf 'run %s: fresh %.0f ns, unguarded %.1f ns, floor %.0f ns, moka miss %.0f ns, cached miss %.0f ns; replay %.0f ns (String %.0f), moka %.0f (%.0f), cached %.0f (%.0f)\n' \
    "$run" "$g" "$u" "$f" "$mm" "$cm" "$r" "$rs" "$rm" "$rms" "$rc" "$rcs"
  echo "        ratios: $row"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| ratio | median | range | runs |"
echo "|---|---|---|---|"
for i in "${!RATIOS[@]}"; do
  printf '%s\n' "${rows[@]}" | awk -v col=$((i + 1)) '{ print $col }' | sort -g |
    awk -v name="${RATIOS[$i]}" '{ v[NR] = $1 } END {
      m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "| %s | %.2f | %.2f–%.2f | %d |\n", name, m, v[1], v[NR], NR }'
done
