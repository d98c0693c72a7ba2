//! The statements of the Postgres store, as SQL a DBA can read. Times are
//! the server's (`now()`); durations are bound as milliseconds. Every
//! statement that notifies binds the [`NOTIFY_CHANNEL`] as a parameter.

#[cfg(doc)]
use super::NOTIFY_CHANNEL;

/// A statement and the name errors give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Statement {
    /// What an error calls it.
    pub name: &'static str,
    /// The SQL.
    pub sql: &'static str,
}

/// The schema version of the database (on the search path): the newest
/// recorded, 1 for a claims table that predates versions, 0 for none.
pub(super) const SCHEMA_VERSION_OF: Statement = Statement {
    name: "schema version",
    sql: "\
SELECT CASE
    WHEN to_regclass('idempotent_schema') IS NOT NULL THEN -1
    WHEN to_regclass('idempotent_claims') IS NOT NULL THEN 1
    ELSE 0
END::integer",
};

/// The newest schema version recorded.
pub(super) const NEWEST_VERSION: Statement = Statement {
    name: "schema version",
    sql: "\
SELECT COALESCE(MAX(version), 1)::integer FROM idempotent_schema",
};

/// Serialises migrations of one database, until the transaction ends. A
/// migration waits for the one ahead of it however long that takes: the
/// role's `lock_timeout`, meant for the claims' statements, would fail
/// every process but the first of a deployment that starts at once. The
/// migration's own statements keep it.
pub(super) const MIGRATE_LOCK: Statement = Statement {
    name: "migrate",
    sql: "\
SELECT set_config('idempotent.lock_timeout', current_setting('lock_timeout'), true);
SET LOCAL lock_timeout = 0;
SELECT pg_advisory_xact_lock(hashtext('idempotent_claims')::bigint);
SELECT set_config('lock_timeout', current_setting('idempotent.lock_timeout'), true)",
};

/// One statement, one round trip. It reads the row for the key; takes it
/// over if its lease ran out (for the same tool and arguments) or its record
/// expired; inserts a claim if there was no row; and returns either the
/// claim it made (`mine`) or the row it found. A row held under the
/// caller's own owner token is `mine` too: the statement ran before, and its
/// reply was lost with its connection.
///
/// Finding a row locks nothing and writes nothing: a replay, a conflict or
/// a claim in flight costs one read, without a WAL flush.
///
/// All parts share one snapshot (READ COMMITTED). If another caller inserted
/// the key after the snapshot was taken, the insert does nothing and there
/// was nothing to read: the statement returns no row. If the row changed
/// after the snapshot (taken over, purged), the takeover re-checks it as it
/// is now and does nothing, and the row read from the snapshot looks
/// takeable (`stale`). Either way the caller runs the statement again with a
/// new snapshot, and checks tool and fingerprint on what it gets.
pub(super) const CLAIM: Statement = Statement {
    name: "claim",
    sql: "\
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
WHERE NOT EXISTS (SELECT 1 FROM mine)",
};

/// [`CLAIM`] for several keys in one statement, one key per array element
/// (`$1` digests, `$2` keys, `$3` tools, `$4` fingerprints, `$5` owners,
/// `$6` leases, `$7` retentions); no key twice. Each row names the element
/// it answers (`i`, from 1) in the columns of [`CLAIM`]; an element with no
/// row, or a `stale` one, runs again, as [`CLAIM`] does.
pub(super) const CLAIM_MANY: Statement = Statement {
    name: "claim",
    sql: "\
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
WHERE NOT EXISTS (SELECT 1 FROM mine m WHERE m.i = e.i)",
};

/// A completion statement from its `done` step (and any steps before it)
/// and the columns it returns before the notification: as it commits by
/// default (`flushed`), or committed without waiting for the WAL flush
/// (`unflushed`). The text of both comes from one place.
macro_rules! completion {
    (flushed, $ctes:expr, $columns:literal) => {
        concat!("WITH ", $ctes, completion!(@select $columns), "\nFROM done")
    };
    (unflushed, $ctes:expr, $columns:literal) => {
        concat!(
            "WITH unflushed AS (\n    SELECT set_config('synchronous_commit', 'off', true)\n),\n",
            $ctes,
            completion!(@select $columns),
            "\nFROM done, unflushed"
        )
    };
    (@select $columns:literal) => {
        concat!(
            "\nSELECT ",
            $columns,
            "CASE WHEN waiting THEN pg_notify($8::text, encode(key_digest, 'hex')) END"
        )
    };
}

/// [`COMPLETE`]'s steps.
macro_rules! complete_one_ctes {
    () => {
        "\
done AS (
    UPDATE idempotent_claims
    SET state = $4, result = $5, completed_at = $6, lease_until = NULL,
        expires_at = now() + $7::bigint * interval '1 millisecond'
    WHERE key_digest = $1 AND owner = $2 AND fence = $3
    RETURNING key_digest, waiting
)"
    };
}

/// [`COMPLETE_MANY`]'s steps.
macro_rules! complete_many_ctes {
    () => {
        "\
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
)"
    };
}

/// Completes a claim held by this owner at this fence. Completing it again
/// (a retry after a reply that was lost) finds it done by the same owner and
/// fence and writes the same record: nobody else can hold that pair.
///
/// It notifies only if a waiter marked the row ([`MARK_WAITING`]): a
/// transaction that notifies holds a database-wide lock through its commit's
/// flush, so notifying every completion would stop completions from
/// committing together. One row comes back per row completed, notified or
/// not.
///
/// `$1`-`$3` the holder, `$4` state (done, failed or unknown), `$5` result,
/// `$6` completed at, `$7` retention, `$8` the [`NOTIFY_CHANNEL`].
pub(super) const COMPLETE: Statement = Statement {
    name: "complete",
    sql: completion!(flushed, complete_one_ctes!(), ""),
};

/// [`COMPLETE`], committed without waiting for the WAL flush
/// ([`PostgresStoreBuilder::asynchronous_completions`](super::PostgresStoreBuilder::asynchronous_completions)).
pub(super) const COMPLETE_ASYNC: Statement = Statement {
    name: "complete",
    sql: completion!(unflushed, complete_one_ctes!(), ""),
};

/// [`COMPLETE`] for several claims in one statement, one per array element
/// (`$1`-`$3` the holders, `$4` states, `$5` results, `$6` completed at,
/// `$7` retentions; no key twice), `$8` the [`NOTIFY_CHANNEL`]. Returns the
/// key of each row completed; it notifies only marked rows, as
/// [`COMPLETE`] does.
pub(super) const COMPLETE_MANY: Statement = Statement {
    name: "complete",
    sql: completion!(flushed, complete_many_ctes!(), "key_digest, "),
};

/// [`COMPLETE_MANY`], committed without waiting for the WAL flush, as
/// [`COMPLETE_ASYNC`].
pub(super) const COMPLETE_MANY_ASYNC: Statement = Statement {
    name: "complete",
    sql: completion!(unflushed, complete_many_ctes!(), "key_digest, "),
};

/// Releases a claim; notifies only a row a waiter marked, as [`COMPLETE`].
/// `$1`-`$3` the holder, `$4` the [`NOTIFY_CHANNEL`].
pub(super) const RELEASE: Statement = Statement {
    name: "release",
    sql: "\
WITH gone AS (
    DELETE FROM idempotent_claims
    WHERE key_digest = $1 AND state = 'held' AND owner = $2 AND fence = $3
    RETURNING key_digest, waiting
)
SELECT CASE WHEN waiting THEN pg_notify($4::text, encode(key_digest, 'hex')) END
FROM gone",
};

/// A waiter that listens for the key says so on the held row, and reads how
/// long its lease has left. No row: the claim is no longer held by that
/// owner at that fence, and the waiter claims again at once.
pub(super) const MARK_WAITING: Statement = Statement {
    name: "mark-waiting",
    sql: "\
UPDATE idempotent_claims SET waiting = true
WHERE key_digest = $1 AND state = 'held' AND owner = $2 AND fence = $3 AND lease_until > now()
RETURNING GREATEST(0, CEIL(EXTRACT(EPOCH FROM (lease_until - now())) * 1000))::bigint",
};

/// Renews a held claim's lease, by the server's clock. `$1`-`$3` the
/// holder, `$4` lease, `$5` retention.
pub(super) const RENEW: Statement = Statement {
    name: "renew",
    sql: "\
UPDATE idempotent_claims
SET lease_until = now() + $4::bigint * interval '1 millisecond',
    expires_at = now() + ($4::bigint + $5::bigint) * interval '1 millisecond'
WHERE key_digest = $1 AND state = 'held' AND owner = $2 AND fence = $3",
};

/// How long the lease of a claim held by this owner at this fence has
/// left; no row if it is no longer held. `$1`-`$3` the holder.
pub(super) const HELD_BY: Statement = Statement {
    name: "held-by",
    sql: "\
SELECT GREATEST(0, CEIL(EXTRACT(EPOCH FROM (lease_until - now())) * 1000))::bigint
FROM idempotent_claims
WHERE key_digest = $1 AND state = 'held' AND owner = $2 AND fence = $3 AND lease_until > now()",
};

/// Locks the batch it deletes, skipping rows a claim is changing, and checks
/// the conditions again on the row as it is when deleted. `$1` the most rows.
pub(super) const PURGE: Statement = Statement {
    name: "purge",
    sql: "\
WITH batch AS (
    SELECT key_digest FROM idempotent_claims
    WHERE expires_at <= now() AND (state <> 'held' OR lease_until <= now())
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotent_claims c USING batch
WHERE c.key_digest = batch.key_digest
  AND c.expires_at <= now() AND (c.state <> 'held' OR c.lease_until <= now())",
};

/// Removes a completed record or a claim whose lease ran out, or anything
/// when `$2` (forced), waking the waiters of a removed claim. Says whether
/// it removed a row, and if not, whether a live claim is left.
/// `$3` is the [`NOTIFY_CHANNEL`].
pub(super) const FORGET: Statement = Statement {
    name: "forget",
    sql: "\
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
       EXISTS (SELECT 1 FROM idempotent_claims WHERE key_digest = $1 AND state = 'held') AS held",
};

/// Resolves an unknown outcome, or a claim whose lease ran out, within its
/// retention: as applied (`$2` the result) it becomes `done`, its expiry
/// kept and its fence bumped so that its holder's late completion changes
/// nothing; as not applied (`$2` `NULL`) it goes. Wakes a resolved claim's
/// waiters. Says whether it resolved the row, and the state it found under
/// the key within its retention (`NULL` for none), from before the
/// statement. `$3` is the [`NOTIFY_CHANNEL`].
pub(super) const RESOLVE: Statement = Statement {
    name: "resolve",
    sql: "\
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
           AS found",
};

/// One page of records. `$1` the state, `$2` the tool, `$3` the run (a
/// prefix of the key), `$4` the age in milliseconds, `$5` the key to start
/// after, `$6` the rows to return; a `NULL` matches anything. Keys
/// sort byte by byte (`COLLATE "C"`), as in the other stores. Columns as
/// [`super::rows::read_record`] reads them.
pub(super) const LIST: Statement = Statement {
    name: "list",
    sql: "\
SELECT key_text, tool, state, owner, fence, taken_over, lease_until, result,
       completed_at, expires_at, fingerprint
FROM idempotent_claims
WHERE ($1::text IS NULL OR state = $1::text)
  AND ($2::text IS NULL OR tool = $2::text)
  AND ($3::text IS NULL OR split_part(key_text, ':', 1) = $3::text)
  AND ($7::text IS NULL OR left(key_text, length($7::text)) = $7::text)
  AND ($4::bigint IS NULL
       OR COALESCE(completed_at, lease_until) < now() - $4::bigint * interval '1 millisecond')
  AND ($5::text IS NULL OR key_text COLLATE \"C\" > $5::text)
ORDER BY key_text COLLATE \"C\"
LIMIT $6::bigint",
};

/// One key's record, in the columns of [`LIST`].
pub(super) const INSPECT: Statement = Statement {
    name: "inspect",
    sql: "\
SELECT key_text, tool, state, owner, fence, taken_over, lease_until, result,
       completed_at, expires_at, fingerprint
FROM idempotent_claims
WHERE key_digest = $1",
};

/// Records by tool and state.
pub(super) const COUNT: Statement = Statement {
    name: "count",
    sql: "\
SELECT tool, state, count(*) AS n FROM idempotent_claims GROUP BY tool, state",
};

/// Creates the store's own schema, named by a plain identifier, quoted.
pub(super) fn create_schema(name: &str) -> String {
    format!(
        "CREATE SCHEMA IF NOT EXISTS \"{}\"",
        name.replace('"', "\"\"")
    )
}

/// `LISTEN` on a channel, for the listening session.
pub(super) fn listen(channel: &str) -> String {
    format!("LISTEN {channel}")
}

#[cfg(test)]
mod tests;
