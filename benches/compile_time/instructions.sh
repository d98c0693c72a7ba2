#!/usr/bin/env bash
# Instructions rustc executes for `cargo check` of the crates that run.sh
# generated (run it first), counted by valgrind: a figure that other load on
# the machine does not move, unlike the times run.sh reports.
#
#   bash benches/compile_time/run.sh && bash benches/compile_time/instructions.sh
#
# Prints each crate's count and the attribute's cost per tool over the
# unannotated crate. Needs valgrind; about a minute per crate.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="$ROOT/target/compile_time"
TARGET="$OUT/target"
N="$(grep -c '^pub async fn tool_' "$OUT/plain/src/lib.rs")"

# The instructions of one `rustc` check of crate $1, proc-macros included.
count() {
  local dir="$OUT/$1" cmd scratch
  touch "$dir/src/lib.rs"
  cmd="$(CARGO_TARGET_DIR="$TARGET" CARGO_INCREMENTAL=0 cargo check -v --manifest-path "$dir/Cargo.toml" 2>&1 |
    grep 'Running `' | tail -1 | sed -e 's/^ *Running `//' -e 's/`$//')"
  scratch="$(mktemp -d)"
  (cd "$dir" && eval "CARGO_INCREMENTAL=0 valgrind --tool=cachegrind --cache-sim=no \
    --cachegrind-out-file=$scratch/out $cmd") >/dev/null 2>"$scratch/log"
  grep -o 'I *refs: *[0-9,]*' "$scratch/log" | tr -d ', ' | cut -d: -f2
  rm -rf "$scratch"
}

plain="$(count plain)"
attribute="$(count attribute)"
by_hand="$(count by_hand)"
echo "| crate ($N tools) | instructions | per tool over the unannotated crate |"
echo "|---|---|---|"
for row in "unannotated $plain" "#[idempotent] $attribute" "Call_by_hand $by_hand"; do
  set -- $row
  awk -v name="${1//_/ }" -v c="$2" -v p="$plain" -v n="$N" \
    'BEGIN { printf "| %s | %.1f M | %.2f M |\n", name, c / 1e6, (c - p) / n / 1e6 }'
done
