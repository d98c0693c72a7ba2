
-- Version 3: one word per state. A row's `state` is 'held', 'done',
-- 'failed' or 'unknown' (it was 'held' or 'done', with the end in an
-- `ending` column), and `finished_at` is `completed_at`. SQLite cannot
-- change a CHECK in place, so the table is built anew and the rows copied.
CREATE TABLE idempotent_claims_v3 (
    -- SHA-256 of the key text: bounded, so long keys never make the index fail.
    key_digest   BLOB    NOT NULL PRIMARY KEY CHECK (length(key_digest) = 32),
    -- The full key, for operators and to tell a (practically impossible)
    -- digest collision from a real duplicate.
    key_text     TEXT    NOT NULL,
    -- The tool that claimed the key, such as `shop::refund_order`.
    tool         TEXT    NOT NULL,
    -- XXH3-128 of the arguments beyond the key.
    fingerprint  BLOB    NOT NULL,
    -- 'held': a claim is in force; 'done', 'failed' or 'unknown': it was
    -- completed with a result, a recorded error, or an unknown outcome.
    state        TEXT    NOT NULL CHECK (state IN ('held', 'done', 'failed', 'unknown')),
    -- The holder's random 128-bit token. Completion and release check it.
    owner        BLOB    NOT NULL,
    -- Bumped by every takeover: a holder whose fence is behind lost its claim.
    fence        INTEGER NOT NULL,
    -- 1 if this claim took over from a holder whose lease ran out.
    taken_over   INTEGER NOT NULL DEFAULT 0,
    -- While held: when another caller may take the claim over.
    lease_until  INTEGER,
    -- Once completed: the result (or recorded error) as JSON text, replayed
    -- byte for byte.
    result       TEXT,
    completed_at INTEGER,
    -- When `purge_expired` may delete the row: the end of the retention once
    -- completed; for a held claim, its lease end plus the retention, so only
    -- a claim abandoned that long is ever purged.
    expires_at   INTEGER NOT NULL
) STRICT;

INSERT INTO idempotent_claims_v3
    (key_digest, key_text, tool, fingerprint, state, owner, fence, taken_over,
     lease_until, result, completed_at, expires_at)
SELECT key_digest, key_text, tool, fingerprint,
       CASE WHEN state = 'held' THEN 'held'
            WHEN ending = 'ok' THEN 'done'
            WHEN ending = 'err' THEN 'failed'
            ELSE 'unknown' END,
       owner, fence, taken_over, lease_until, result, finished_at, expires_at
FROM idempotent_claims;

DROP TABLE idempotent_claims;
ALTER TABLE idempotent_claims_v3 RENAME TO idempotent_claims;
CREATE INDEX idempotent_claims_expires_at ON idempotent_claims (expires_at);
CREATE INDEX idempotent_claims_tool_state ON idempotent_claims (tool, state);

INSERT OR IGNORE INTO idempotent_schema (version, applied_at)
VALUES (3, CAST(unixepoch('subsec') * 1000 AS INTEGER));
