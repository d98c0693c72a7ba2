-- The Postgres store's schema, version 1: the claims table.
-- `PostgresStore::migrate` applies every version a database lacks, in order
-- (inside a transaction, under an advisory lock, so several processes may
-- call it at once); a DBA may apply them by hand instead. Every statement is
-- idempotent.
--
-- The table is created in the first schema on the connection's search_path;
-- set the role's search_path to keep it elsewhere. One row per key. Times
-- are the database's own clock (now()), so hosts with skewed clocks agree on
-- when a lease runs out.
CREATE TABLE IF NOT EXISTS idempotent_claims (
    -- SHA-256 of the key text: bounded, so long keys never exceed the
    -- B-tree's row size limit.
    key_digest  bytea       NOT NULL PRIMARY KEY CHECK (octet_length(key_digest) = 32),
    -- The full key, for operators and to tell a (practically impossible)
    -- digest collision from a real duplicate.
    key_text    text        NOT NULL,
    -- The tool that claimed the key, such as `shop::refund_order`.
    tool        text        NOT NULL,
    -- XXH3-128 of the arguments beyond the key.
    fingerprint bytea       NOT NULL,
    -- 'held': an action is running (or its holder crashed);
    -- 'done': it finished, and `ending` says how.
    state       text        NOT NULL CHECK (state IN ('held', 'done')),
    -- The holder's random 128-bit token. Completion and release check it.
    owner       bytea       NOT NULL,
    -- Bumped by every takeover: a holder whose fence is behind lost its claim.
    fence       bigint      NOT NULL,
    -- Whether this claim took over from a holder whose lease ran out.
    taken_over  boolean     NOT NULL DEFAULT false,
    -- While held: when another caller may take the claim over.
    lease_until timestamptz,
    -- Once done: 'ok', 'err' (a recorded error) or 'unknown'.
    ending      text        CHECK (ending IN ('ok', 'err', 'unknown')),
    -- Once done: the result (or recorded error) as JSON text. `text`, not
    -- `jsonb`: a replay returns exactly the bytes that were recorded.
    result      text,
    finished_at timestamptz,
    -- When `purge_expired` may delete the row: the end of the retention once
    -- done; for a held claim, its lease end plus the retention, so only a
    -- claim abandoned that long is ever purged.
    expires_at  timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS idempotent_claims_expires_at ON idempotent_claims (expires_at);

-- Completions and releases notify this channel with the key digest in hex
-- (from version 2, only for a row a waiter marked), so waiters on other
-- connections and hosts wake at once:
--   LISTEN idempotent_claims;
