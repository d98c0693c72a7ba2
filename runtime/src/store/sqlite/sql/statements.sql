-- claim
INSERT INTO idempotent_claims
    (key_digest, key_text, tool, fingerprint, state, owner, fence, taken_over,
     lease_until, expires_at)
VALUES (?1, ?2, ?3, ?4, 'held', ?5, 1, 0, ?6 + ?7, ?6 + ?7 + ?8)
ON CONFLICT (key_digest) DO UPDATE SET
    taken_over = CASE WHEN (state = 'held' AND lease_until <= ?6 AND tool = excluded.tool AND fingerprint = excluded.fingerprint) OR (state <> 'held' AND expires_at <= ?6)
        THEN state = 'held' ELSE taken_over END,
    fence = CASE WHEN (state = 'held' AND lease_until <= ?6 AND tool = excluded.tool AND fingerprint = excluded.fingerprint) OR (state <> 'held' AND expires_at <= ?6)
        THEN fence + 1 ELSE fence END,
    key_text = CASE WHEN (state = 'held' AND lease_until <= ?6 AND tool = excluded.tool AND fingerprint = excluded.fingerprint) OR (state <> 'held' AND expires_at <= ?6)
        THEN excluded.key_text ELSE key_text END,
    tool = CASE WHEN (state = 'held' AND lease_until <= ?6 AND tool = excluded.tool AND fingerprint = excluded.fingerprint) OR (state <> 'held' AND expires_at <= ?6)
        THEN excluded.tool ELSE tool END,
    fingerprint = CASE WHEN (state = 'held' AND lease_until <= ?6 AND tool = excluded.tool AND fingerprint = excluded.fingerprint) OR (state <> 'held' AND expires_at <= ?6)
        THEN excluded.fingerprint ELSE fingerprint END,
    state = CASE WHEN (state = 'held' AND lease_until <= ?6 AND tool = excluded.tool AND fingerprint = excluded.fingerprint) OR (state <> 'held' AND expires_at <= ?6)
        THEN 'held' ELSE state END,
    owner = CASE WHEN (state = 'held' AND lease_until <= ?6 AND tool = excluded.tool AND fingerprint = excluded.fingerprint) OR (state <> 'held' AND expires_at <= ?6)
        THEN excluded.owner ELSE owner END,
    lease_until = CASE WHEN (state = 'held' AND lease_until <= ?6 AND tool = excluded.tool AND fingerprint = excluded.fingerprint) OR (state <> 'held' AND expires_at <= ?6)
        THEN excluded.lease_until ELSE lease_until END,
    result = CASE WHEN (state = 'held' AND lease_until <= ?6 AND tool = excluded.tool AND fingerprint = excluded.fingerprint) OR (state <> 'held' AND expires_at <= ?6)
        THEN NULL ELSE result END,
    completed_at = CASE WHEN (state = 'held' AND lease_until <= ?6 AND tool = excluded.tool AND fingerprint = excluded.fingerprint) OR (state <> 'held' AND expires_at <= ?6)
        THEN NULL ELSE completed_at END,
    expires_at = CASE WHEN (state = 'held' AND lease_until <= ?6 AND tool = excluded.tool AND fingerprint = excluded.fingerprint) OR (state <> 'held' AND expires_at <= ?6)
        THEN excluded.expires_at ELSE expires_at END
RETURNING key_text, tool, fingerprint, state, owner, fence, taken_over,
          lease_until, result, completed_at;

-- peek completed
SELECT key_text, tool, fingerprint, state, owner, fence, taken_over,
       lease_until, result, completed_at
FROM idempotent_claims
WHERE key_digest = ?1 AND state <> 'held' AND expires_at > ?2;

-- complete
UPDATE idempotent_claims
SET state = ?4, result = ?5, completed_at = ?6, lease_until = NULL,
    expires_at = ?7 + ?8
WHERE key_digest = ?1 AND owner = ?2 AND fence = ?3;

-- release
DELETE FROM idempotent_claims
WHERE key_digest = ?1 AND state = 'held' AND owner = ?2 AND fence = ?3;

-- renew
UPDATE idempotent_claims
SET lease_until = ?4 + ?5, expires_at = ?4 + ?5 + ?6
WHERE key_digest = ?1 AND state = 'held' AND owner = ?2 AND fence = ?3;

-- held by
SELECT lease_until FROM idempotent_claims
WHERE key_digest = ?1 AND state = 'held' AND owner = ?2 AND fence = ?3;

-- purge
DELETE FROM idempotent_claims WHERE rowid IN (
    SELECT rowid FROM idempotent_claims
    WHERE expires_at <= ?1 AND (state <> 'held' OR lease_until <= ?1)
    LIMIT ?2
);

-- forget
DELETE FROM idempotent_claims
WHERE key_digest = ?1 AND (state <> 'held' OR lease_until <= ?2 OR ?3);

-- resolve applied
UPDATE idempotent_claims
SET state = 'done', result = ?3, completed_at = ?2, lease_until = NULL, fence = fence + 1
WHERE key_digest = ?1 AND expires_at > ?2
  AND (state = 'unknown' OR (state = 'held' AND lease_until <= ?2));

-- resolve not applied
DELETE FROM idempotent_claims
WHERE key_digest = ?1 AND expires_at > ?2
  AND (state = 'unknown' OR (state = 'held' AND lease_until <= ?2));

-- resolve found
SELECT state FROM idempotent_claims
WHERE key_digest = ?1 AND expires_at > ?2;

-- held
SELECT 1 FROM idempotent_claims WHERE key_digest = ?1 AND state = 'held';

-- list
SELECT key_text, tool, state, owner, fence, taken_over, lease_until, result,
       completed_at, expires_at, fingerprint
FROM idempotent_claims
WHERE (?1 IS NULL OR state = ?1)
  AND (?2 IS NULL OR tool = ?2)
  AND (?3 IS NULL OR substr(key_text, 1, instr(key_text || ':', ':') - 1) = ?3)
  AND (?7 IS NULL OR substr(key_text, 1, length(?7)) = ?7)
  AND (?4 IS NULL OR COALESCE(completed_at, lease_until) < ?4)
  AND (?5 IS NULL OR key_text > ?5)
ORDER BY key_text
LIMIT ?6;

-- inspect
SELECT key_text, tool, state, owner, fence, taken_over, lease_until, result,
       completed_at, expires_at, fingerprint
FROM idempotent_claims
WHERE key_digest = ?1;

-- count
SELECT tool, state, count(*) FROM idempotent_claims
GROUP BY tool, state;

-- has table
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1;

-- newest version
SELECT COALESCE(MAX(version), 1) FROM idempotent_schema;
