#!/usr/bin/env bash
# pgbench's insert-only rate on the Postgres server the store is measured on:
# the ceiling for a claim, which is one insert. Creates a table shaped like
# the store's, runs benches/pgbench/claim_insert.sql with each client count,
# and drops the table.
#
#   bash benches/pgbench/run.sh                 # 1, 4, 16 and 64 clients, 10 s each
#   CLIENTS="1 8" SECONDS_EACH=5 bash benches/pgbench/run.sh
#
# Connection: PGHOST, PGPORT, PGUSER, PGDATABASE (default
# 127.0.0.1:5432, user postgres, database test).
set -euo pipefail

export PGHOST="${PGHOST:-127.0.0.1}" PGPORT="${PGPORT:-5432}"
export PGUSER="${PGUSER:-postgres}" PGDATABASE="${PGDATABASE:-test}"
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
CLIENTS="${CLIENTS:-1 4 16 64}"
SECONDS_EACH="${SECONDS_EACH:-10}"
SCRIPT="$(cd "$(dirname "$0")" && pwd)/claim_insert.sql"

cleanup() {
  psql -qAt -c "DROP TABLE IF EXISTS idempotent_bench_inserts" >/dev/null
}
trap cleanup EXIT

psql -qAt >/dev/null <<'SQL'
DROP TABLE IF EXISTS idempotent_bench_inserts;
CREATE TABLE idempotent_bench_inserts (
    key_digest  bytea       NOT NULL PRIMARY KEY,
    key_text    text        NOT NULL,
    tool        text        NOT NULL,
    fingerprint bytea       NOT NULL,
    state       text        NOT NULL,
    owner       bytea       NOT NULL,
    fence       bigint      NOT NULL,
    taken_over  boolean     NOT NULL DEFAULT false,
    lease_until timestamptz,
    ending      text,
    result      text,
    finished_at timestamptz,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX idempotent_bench_inserts_expires_at ON idempotent_bench_inserts (expires_at);
SQL

echo "| clients | pgbench inserts/s |"
echo "|---|---|"
for c in $CLIENTS; do
  threads=$((c < $(nproc) ? c : $(nproc)))
  out="$(pgbench -n -M prepared -f "$SCRIPT" -c "$c" -j "$threads" -T "$SECONDS_EACH" 2>&1)" || {
    echo "$out" >&2
    exit 1
  }
  tps="$(awk '/^tps = / { print $3 }' <<<"$out")"
  printf '| %s | %.0f |\n' "$c" "$tps"
done
