#!/usr/bin/env bash
# The Redis store's claim script called as a script (EVALSHA) and as a Redis
# function (FCALL), and an empty one each way, on fresh keys, with
# redis-benchmark: throughput, the server's CPU per call (from /proc) and
# the time inside the command (INFO commandstats). Each round measures the
# four in turn; ORDER=swapped puts the functions first.
#
#   bash benches/redis/functions.sh              # 4 rounds of 200,000 calls
#   ROUNDS=2 N=50000 ORDER=swapped bash benches/redis/functions.sh
#
# Needs redis-server on 127.0.0.1:6379 (REDIS_PORT) on this machine, for
# /proc; writes only to database 9 (REDIS_DB), which it empties, and loads
# a function library named `idempotent_bench`.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PORT="${REDIS_PORT:-6379}"
DB="${REDIS_DB:-9}"
N="${N:-200000}"
CLAIM="$ROOT/runtime/src/store/redis/claim.lua"
cli() { redis-cli -p "$PORT" "$@"; }

# The claim script's text as the body of a function: its KEYS and ARGV are
# the function's arguments.
library="#!lua name=idempotent_bench
local function claim(KEYS, ARGV)
$(cat "$CLAIM")
end
local function empty(keys, args)
    return 1
end
redis.register_function('claim', claim)
redis.register_function('empty', empty)"
cli FUNCTION LOAD REPLACE "$library" >/dev/null
# What it loads and writes goes, however the script ends.
trap 'cli -n "$DB" FLUSHDB >/dev/null; cli FUNCTION DELETE idempotent_bench >/dev/null' EXIT
SHA="$(cli SCRIPT LOAD "$(cat "$CLAIM")")"
EMPTY="$(cli SCRIPT LOAD "return 1")"
PID="$(cli INFO server | tr -d '\r' | sed -n 's/^process_id:\([0-9]*\)$/\1/p')"
TICK="$(getconf CLK_TCK)"
cpu() { awk '{ print $14 + $15 }' "/proc/$PID/stat"; }

# one NAME COMMANDSTAT COMMAND...: one redis-benchmark run of COMMAND.
one() {
  local name="$1" stat="$2"
  shift 2
  cli -n "$DB" FLUSHDB >/dev/null
  cli CONFIG RESETSTAT >/dev/null
  local before after rate inside
  before="$(cpu)"
  rate="$(redis-benchmark -p "$PORT" --dbnum "$DB" -c 16 -n "$N" -r 100000000 -q "$@" 2>/dev/null |
    tr '\r' '\n' | grep 'requests per second' | tail -1 | sed 's/.*: \([0-9.]*\) requests.*/\1/')"
  after="$(cpu)"
  inside="$(cli INFO commandstats | tr -d '\r' |
    sed -n "s/^cmdstat_$stat:.*usec_per_call=\([0-9.]*\).*/\1/p")"
  awk -v name="$name" -v rate="$rate" -v ticks=$((after - before)) -v hz="$TICK" -v n="$N" -v inside="$inside" \
    'BEGIN { printf "%s: %.0f calls/s, server CPU %.2f µs a call, %.2f µs inside the command\n", name, rate, ticks * 1e6 / hz / n, inside }'
}

claim=(1 'bench:__rand_int__' 'key__rand_int__' tool fingerprint owner 30000 600000 0)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "${ROUNDS:-4}"); do
  if [ "${ORDER:-}" = swapped ]; then
    one "$round claim FCALL" fcall FCALL claim "${claim[@]}"
    one "$round claim EVALSHA" evalsha EVALSHA "$SHA" "${claim[@]}"
    one "$round empty FCALL" fcall FCALL empty 0
    one "$round empty EVALSHA" evalsha EVALSHA "$EMPTY" 0
  else
    one "$round claim EVALSHA" evalsha EVALSHA "$SHA" "${claim[@]}"
    one "$round claim FCALL" fcall FCALL claim "${claim[@]}"
    one "$round empty EVALSHA" evalsha EVALSHA "$EMPTY" 0
    one "$round empty FCALL" fcall FCALL empty 0
  fi
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
