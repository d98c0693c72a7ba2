-- pgbench's side of the Postgres comparison: one INSERT per transaction of a
-- row as wide as the store's claim, keyed by the SHA-256 of a new key, into a
-- table with the same two indexes (primary key on the digest, expires_at).
-- Run by benches/pgbench/run.sh, which creates and drops the table.
-- (pgbench reads `:name` as a variable, so the key's colons are chr(58).)
WITH k AS (SELECT concat('run-7f3a', chr(58), 'refund', chr(58), gen_random_uuid()) AS key_text)
INSERT INTO idempotent_bench_inserts
    (key_digest, key_text, tool, fingerprint, state, owner, fence, lease_until, expires_at)
SELECT sha256(convert_to(key_text, 'UTF8')), key_text, 'benches::refund',
       '\x00000000000000000000000000000000'::bytea, 'held',
       '\x00000000000000000000000000000000'::bytea, 1,
       now() + interval '30 seconds', now() + interval '7 days 30 seconds'
FROM k;
