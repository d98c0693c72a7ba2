-- The SQLite store's schema, version 1: the claims table. `SqliteStore::open`
-- applies every version a file lacks, in order; every statement is idempotent.
--
-- One row per key. Times are milliseconds since the Unix epoch, from the
-- clock of the process that wrote them (every process on one file shares
-- the host's clock).
CREATE TABLE IF NOT EXISTS idempotent_claims (
    -- SHA-256 of the key text: bounded, so long keys never make the index fail.
    key_digest  BLOB    NOT NULL PRIMARY KEY CHECK (length(key_digest) = 32),
    -- The full key, for operators and to tell a (practically impossible)
    -- digest collision from a real duplicate.
    key_text    TEXT    NOT NULL,
    -- The tool that claimed the key, such as `shop::refund_order`.
    tool        TEXT    NOT NULL,
    -- XXH3-128 of the arguments beyond the key.
    fingerprint BLOB    NOT NULL,
    -- 'held': an action is running (or its holder crashed);
    -- 'done': it finished, and `ending` says how.
    state       TEXT    NOT NULL CHECK (state IN ('held', 'done')),
    -- The holder's random 128-bit token. Completion and release check it.
    owner       BLOB    NOT NULL,
    -- Bumped by every takeover: a holder whose fence is behind lost its claim.
    fence       INTEGER NOT NULL,
    -- 1 if this claim took over from a holder whose lease ran out.
    taken_over  INTEGER NOT NULL DEFAULT 0,
    -- While held: when another caller may take the claim over.
    lease_until INTEGER,
    -- Once done: 'ok', 'err' (a recorded error) or 'unknown'.
    ending      TEXT    CHECK (ending IN ('ok', 'err', 'unknown')),
    -- Once done: the result (or recorded error) as JSON text, replayed byte for byte.
    result      TEXT,
    finished_at INTEGER,
    -- When `purge_expired` may delete the row: the end of the retention once
    -- done; for a held claim, its lease end plus the retention, so only a
    -- claim abandoned that long is ever purged.
    expires_at  INTEGER NOT NULL
) STRICT;

CREATE INDEX IF NOT EXISTS idempotent_claims_expires_at ON idempotent_claims (expires_at);
