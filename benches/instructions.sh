#!/usr/bin/env bash
# Instructions per guarded call on the memory store, counted by callgrind:
# each mode of `benches/examples/instructions.rs` runs with no calls and
# with CALLS calls, and the difference is divided by CALLS. Counts do not
# move with the machine's load.
#
#   bash benches/instructions.sh            # CALLS = 20000
#   MODES="replay cached_hit" bash benches/instructions.sh
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
CALLS="${CALLS:-20000}"
cargo build -q --release -p idempotent-benches --example instructions
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/instructions"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

count() {
  valgrind --tool=callgrind --callgrind-out-file="$OUT/out" "$BIN" "$@" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

echo "| call | instructions per call |"
echo "|---|---|"
for mode in ${MODES:-floor fresh replay replay_string moka_hit cached_hit cached_hit_string}; do
  base=$(count "$mode" 0)
  total=$(count "$mode" "$CALLS")
  echo "| $mode | $(((total - base) / CALLS)) |"
done
