-- schema version
SELECT CASE
    WHEN to_regclass('idempotent_schema') IS NOT NULL THEN -1
    WHEN to_regclass('idempotent_claims') IS NOT NULL THEN 1
    ELSE 0
END::integer;

-- schema version
SELECT COALESCE(MAX(version), 1)::integer FROM idempotent_schema;

-- migrate
SELECT set_config('idempotent.lock_timeout', current_setting('lock_timeout'), true);
SET LOCAL lock_timeout = 0;
SELECT pg_advisory_xact_lock(hashtext('idempotent_claims')::bigint);
SELECT set_config('lock_timeout', current_setting('idempotent.lock_timeout'), true);

-- claim
WITH existing AS (
    SELECT fence, taken_over, key_text, tool, fingerprint, state, owner,
           lease_until, result, completed_at, expires_at
    FROM idempotent_claims
    WHERE key_digest = $1::bytea
),
taken AS (
    UPDATE idempotent_claims AS c SET
        key_text = $2::text,
        tool = $3::text,
        fingerprint = $4::bytea,
        state = 'held',
        owner = $5::bytea,
        fence = c.fence + 1,
        taken_over = (c.state = 'held'),
        waiting = false,
        lease_until = now() + $6::bigint * interval '1 millisecond',
        expires_at = now() + ($6::bigint + $7::bigint) * interval '1 millisecond',
        result = NULL,
        completed_at = NULL
    WHERE c.key_digest = $1::bytea
      AND ((c.state = 'held' AND c.lease_until <= now()
            AND c.tool = $3::text AND c.fingerprint = $4::bytea)
           OR (c.state <> 'held' AND c.expires_at <= now()))
    RETURNING c.fence, c.taken_over
),
inserted AS (
    INSERT INTO idempotent_claims
        (key_digest, key_text, tool, fingerprint, state, owner, fence, taken_over,
         lease_until, expires_at)
    SELECT $1::bytea, $2::text, $3::text, $4::bytea, 'held', $5::bytea, 1, false,
           now() + $6::bigint * interval '1 millisecond',
           now() + ($6::bigint + $7::bigint) * interval '1 millisecond'
    WHERE NOT EXISTS (SELECT 1 FROM existing)
    ON CONFLICT (key_digest) DO NOTHING
    RETURNING fence, taken_over
),
mine AS (
    SELECT fence, taken_over FROM taken
    UNION ALL
    SELECT fence, taken_over FROM inserted
)
SELECT true AS mine, fence, taken_over,
       NULL::text AS key_text, NULL::text AS tool, NULL::bytea AS fingerprint,
       NULL::text AS state, NULL::bytea AS owner, NULL::bigint AS lease_left_ms,
       NULL::text AS result, NULL::timestamptz AS completed_at,
       false AS stale
FROM mine
UNION ALL
SELECT (state = 'held' AND owner = $5::bytea), fence, taken_over, key_text, tool, fingerprint,
       state, owner,
       GREATEST(0, CEIL(EXTRACT(EPOCH FROM (lease_until - now())) * 1000))::bigint,
       result, completed_at,
       (state <> 'held' AND expires_at <= now())
         OR (state = 'held' AND lease_until <= now()
             AND tool = $3::text AND fingerprint = $4::bytea)
FROM existing
WHERE NOT EXISTS (SELECT 1 FROM mine);

-- claim
WITH asks AS (
    SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::bytea[], $5::bytea[],
                         $6::bigint[], $7::bigint[])
        WITH ORDINALITY AS a(digest, key_text, tool, fingerprint, owner, lease, retention, i)
),
existing AS (
    SELECT a.i, c.fence, c.taken_over, c.key_text, c.tool, c.fingerprint, c.state, c.owner,
           c.lease_until, c.result, c.completed_at, c.expires_at
    FROM asks a JOIN idempotent_claims c ON c.key_digest = a.digest
),
taken AS (
    UPDATE idempotent_claims AS c SET
        key_text = a.key_text,
        tool = a.tool,
        fingerprint = a.fingerprint,
        state = 'held',
        owner = a.owner,
        fence = c.fence + 1,
        taken_over = (c.state = 'held'),
        waiting = false,
        lease_until = now() + a.lease * interval '1 millisecond',
        expires_at = now() + (a.lease + a.retention) * interval '1 millisecond',
        result = NULL,
        completed_at = NULL
    FROM asks a
    WHERE c.key_digest = a.digest
      AND ((c.state = 'held' AND c.lease_until <= now()
            AND c.tool = a.tool AND c.fingerprint = a.fingerprint)
           OR (c.state <> 'held' AND c.expires_at <= now()))
    RETURNING a.i, c.fence, c.taken_over
),
inserted AS (
    INSERT INTO idempotent_claims
        (key_digest, key_text, tool, fingerprint, state, owner, fence, taken_over,
         lease_until, expires_at)
    SELECT a.digest, a.key_text, a.tool, a.fingerprint, 'held', a.owner, 1, false,
           now() + a.lease * interval '1 millisecond',
           now() + (a.lease + a.retention) * interval '1 millisecond'
    FROM asks a
    WHERE NOT EXISTS (SELECT 1 FROM existing e WHERE e.i = a.i)
    ORDER BY a.i
    ON CONFLICT (key_digest) DO NOTHING
    RETURNING key_digest, fence, taken_over
),
mine AS (
    SELECT i, fence, taken_over FROM taken
    UNION ALL
    SELECT a.i, n.fence, n.taken_over FROM inserted n JOIN asks a ON a.digest = n.key_digest
)
SELECT i, true AS mine, fence, taken_over,
       NULL::text AS key_text, NULL::text AS tool, NULL::bytea AS fingerprint,
       NULL::text AS state, NULL::bytea AS owner, NULL::bigint AS lease_left_ms,
       NULL::text AS result, NULL::timestamptz AS completed_at,
       false AS stale
FROM mine
UNION ALL
SELECT e.i, (e.state = 'held' AND e.owner = a.owner), e.fence, e.taken_over, e.key_text, e.tool,
       e.fingerprint, e.state, e.owner,
       GREATEST(0, CEIL(EXTRACT(EPOCH FROM (e.lease_until - now())) * 1000))::bigint,
       e.result, e.completed_at,
       (e.state <> 'held' AND e.expires_at <= now())
         OR (e.state = 'held' AND e.lease_until <= now()
             AND e.tool = a.tool AND e.fingerprint = a.fingerprint)
FROM existing e JOIN asks a ON a.i = e.i
WHERE NOT EXISTS (SELECT 1 FROM mine m WHERE m.i = e.i);

-- complete
WITH done AS (
    UPDATE idempotent_claims
    SET state = $4, result = $5, completed_at = $6, lease_until = NULL,
        expires_at = now() + $7::bigint * interval '1 millisecond'
    WHERE key_digest = $1 AND owner = $2 AND fence = $3
    RETURNING key_digest, waiting
)
SELECT CASE WHEN waiting THEN pg_notify($8::text, encode(key_digest, 'hex')) END
FROM done;

-- complete
WITH unflushed AS (
    SELECT set_config('synchronous_commit', 'off', true)
),
done AS (
    UPDATE idempotent_claims
    SET state = $4, result = $5, completed_at = $6, lease_until = NULL,
        expires_at = now() + $7::bigint * interval '1 millisecond'
    WHERE key_digest = $1 AND owner = $2 AND fence = $3
    RETURNING key_digest, waiting
)
SELECT CASE WHEN waiting THEN pg_notify($8::text, encode(key_digest, 'hex')) END
FROM done, unflushed;

-- complete
WITH asks AS (
    SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::bigint[], $4::text[], $5::text[],
                         $6::timestamptz[], $7::bigint[])
        AS a(digest, owner, fence, state, result, completed_at, retention)
),
done AS (
    UPDATE idempotent_claims AS c
    SET state = a.state, result = a.result, completed_at = a.completed_at, lease_until = NULL,
        expires_at = now() + a.retention * interval '1 millisecond'
    FROM asks a
    WHERE c.key_digest = a.digest AND c.owner = a.owner AND c.fence = a.fence
    RETURNING c.key_digest, c.waiting
)
SELECT key_digest, CASE WHEN waiting THEN pg_notify($8::text, encode(key_digest, 'hex')) END
FROM done;

-- complete
WITH unflushed AS (
    SELECT set_config('synchronous_commit', 'off', true)
),
asks AS (
    SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::bigint[], $4::text[], $5::text[],
                         $6::timestamptz[], $7::bigint[])
        AS a(digest, owner, fence, state, result, completed_at, retention)
),
done AS (
    UPDATE idempotent_claims AS c
    SET state = a.state, result = a.result, completed_at = a.completed_at, lease_until = NULL,
        expires_at = now() + a.retention * interval '1 millisecond'
    FROM asks a
    WHERE c.key_digest = a.digest AND c.owner = a.owner AND c.fence = a.fence
    RETURNING c.key_digest, c.waiting
)
SELECT key_digest, CASE WHEN waiting THEN pg_notify($8::text, encode(key_digest, 'hex')) END
FROM done, unflushed;

-- release
WITH gone AS (
    DELETE FROM idempotent_claims
    WHERE key_digest = $1 AND state = 'held' AND owner = $2 AND fence = $3
    RETURNING key_digest, waiting
)
SELECT CASE WHEN waiting THEN pg_notify($4::text, encode(key_digest, 'hex')) END
FROM gone;

-- mark-waiting
UPDATE idempotent_claims SET waiting = true
WHERE key_digest = $1 AND state = 'held' AND owner = $2 AND fence = $3 AND lease_until > now()
RETURNING GREATEST(0, CEIL(EXTRACT(EPOCH FROM (lease_until - now())) * 1000))::bigint;

-- renew
UPDATE idempotent_claims
SET lease_until = now() + $4::bigint * interval '1 millisecond',
    expires_at = now() + ($4::bigint + $5::bigint) * interval '1 millisecond'
WHERE key_digest = $1 AND state = 'held' AND owner = $2 AND fence = $3;

-- held-by
SELECT GREATEST(0, CEIL(EXTRACT(EPOCH FROM (lease_until - now())) * 1000))::bigint
FROM idempotent_claims
WHERE key_digest = $1 AND state = 'held' AND owner = $2 AND fence = $3 AND lease_until > now();

-- purge
WITH batch AS (
    SELECT key_digest FROM idempotent_claims
    WHERE expires_at <= now() AND (state <> 'held' OR lease_until <= now())
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotent_claims c USING batch
WHERE c.key_digest = batch.key_digest
  AND c.expires_at <= now() AND (c.state <> 'held' OR c.lease_until <= now());

-- forget
WITH gone AS (
    DELETE FROM idempotent_claims
    WHERE key_digest = $1 AND (state <> 'held' OR lease_until <= now() OR $2::boolean)
    RETURNING key_digest, state
),
woken AS (
    SELECT pg_notify($3::text, encode(key_digest, 'hex')) FROM gone
    WHERE state = 'held'
)
SELECT (SELECT count(*) FROM gone) AS forgotten,
       (SELECT count(*) FROM woken) AS woken,
       EXISTS (SELECT 1 FROM idempotent_claims WHERE key_digest = $1 AND state = 'held') AS held;

-- resolve
WITH target AS (
    SELECT key_digest, state FROM idempotent_claims
    WHERE key_digest = $1 AND expires_at > now()
      AND (state = 'unknown' OR (state = 'held' AND lease_until <= now()))
    FOR UPDATE
),
applied AS (
    UPDATE idempotent_claims c
    SET state = 'done', result = $2::text, completed_at = now(), lease_until = NULL,
        fence = c.fence + 1
    FROM target
    WHERE c.key_digest = target.key_digest AND $2::text IS NOT NULL
    RETURNING c.key_digest
),
gone AS (
    DELETE FROM idempotent_claims c USING target
    WHERE c.key_digest = target.key_digest AND $2::text IS NULL
    RETURNING c.key_digest
),
woken AS (
    SELECT pg_notify($3::text, encode(key_digest, 'hex')) FROM target
    WHERE state = 'held'
)
SELECT (SELECT count(*) FROM applied) + (SELECT count(*) FROM gone) AS resolved,
       (SELECT count(*) FROM woken) AS woken,
       (SELECT state FROM idempotent_claims WHERE key_digest = $1 AND expires_at > now())
           AS found;

-- list
SELECT key_text, tool, state, owner, fence, taken_over, lease_until, result,
       completed_at, expires_at, fingerprint
FROM idempotent_claims
WHERE ($1::text IS NULL OR state = $1::text)
  AND ($2::text IS NULL OR tool = $2::text)
  AND ($3::text IS NULL OR split_part(key_text, ':', 1) = $3::text)
  AND ($7::text IS NULL OR left(key_text, length($7::text)) = $7::text)
  AND ($4::bigint IS NULL
       OR COALESCE(completed_at, lease_until) < now() - $4::bigint * interval '1 millisecond')
  AND ($5::text IS NULL OR key_text COLLATE "C" > $5::text)
ORDER BY key_text COLLATE "C"
LIMIT $6::bigint;

-- inspect
SELECT key_text, tool, state, owner, fence, taken_over, lease_until, result,
       completed_at, expires_at, fingerprint
FROM idempotent_claims
WHERE key_digest = $1;

-- count
SELECT tool, state, count(*) AS n FROM idempotent_claims GROUP BY tool, state;

-- listen
LISTEN idempotent_claims;
