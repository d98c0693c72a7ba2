//! The statements of the SQLite store, as SQL. Parameters are numbered
//! (`?1`, `?2`, ...); times are milliseconds since the Unix epoch, written
//! by the store (SQLite has no clock a process could disagree with).

/// One statement: insert a claim; on a collision, take the row over if it
/// may be taken and leave it as it is otherwise; return the row either way.
/// The caller holds the claim exactly when the returned owner is its own.
///
/// A row may be taken when it is a held claim whose lease ran out, for the
/// same tool and arguments (a takeover), or a completed record past its
/// retention. Every column gets its new value if so and keeps its old one
/// otherwise: an upsert whose `WHERE` fails returns no row, and the caller
/// must see the row it collided with. Every `CASE` reads the row as it was.
///
/// `?1` digest, `?2` key text, `?3` tool, `?4` fingerprint, `?5` owner,
/// `?6` now, `?7` lease, `?8` retention.
pub(super) const CLAIM: &str = "\
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
          lease_until, result, completed_at";

/// A replay's read: the completed, unexpired row for a key, if there is
/// one. `?1` digest, `?2` now.
pub(super) const PEEK_COMPLETED: &str = "\
SELECT key_text, tool, fingerprint, state, owner, fence, taken_over,
       lease_until, result, completed_at
FROM idempotent_claims
WHERE key_digest = ?1 AND state <> 'held' AND expires_at > ?2";

/// Completes a claim held by this owner at this fence. Completing it again
/// (a retry after a reply that was lost) finds it done by the same owner and
/// fence and writes the same record: nobody else can hold that pair.
/// `?1`-`?3` the holder, `?4` state (done, failed or unknown), `?5`
/// result, `?6` completed at, `?7` now, `?8` retention.
pub(super) const COMPLETE: &str = "\
UPDATE idempotent_claims
SET state = ?4, result = ?5, completed_at = ?6, lease_until = NULL,
    expires_at = ?7 + ?8
WHERE key_digest = ?1 AND owner = ?2 AND fence = ?3";

/// `?1`-`?3` the holder.
pub(super) const RELEASE: &str = "\
DELETE FROM idempotent_claims
WHERE key_digest = ?1 AND state = 'held' AND owner = ?2 AND fence = ?3";

/// `?1`-`?3` the holder, `?4` now, `?5` lease, `?6` retention.
pub(super) const RENEW: &str = "\
UPDATE idempotent_claims
SET lease_until = ?4 + ?5, expires_at = ?4 + ?5 + ?6
WHERE key_digest = ?1 AND state = 'held' AND owner = ?2 AND fence = ?3";

/// When the lease of a claim held by this owner at this fence runs out.
/// `?1`-`?3` the holder.
pub(super) const HELD_BY: &str = "\
SELECT lease_until FROM idempotent_claims
WHERE key_digest = ?1 AND state = 'held' AND owner = ?2 AND fence = ?3";

/// `?1` now, `?2` the most rows to delete.
pub(super) const PURGE: &str = "\
DELETE FROM idempotent_claims WHERE rowid IN (
    SELECT rowid FROM idempotent_claims
    WHERE expires_at <= ?1 AND (state <> 'held' OR lease_until <= ?1)
    LIMIT ?2
)";

/// Removes a completed record or a claim whose lease ran out, or anything
/// when `?3` (forced). `?1` digest, `?2` now.
pub(super) const FORGET: &str = "\
DELETE FROM idempotent_claims
WHERE key_digest = ?1 AND (state <> 'held' OR lease_until <= ?2 OR ?3)";

/// The record's state a resolve may change: an unknown outcome, or a claim
/// whose lease ran out, within its retention.
macro_rules! resolvable {
    () => {
        "key_digest = ?1 AND expires_at > ?2
  AND (state = 'unknown' OR (state = 'held' AND lease_until <= ?2))"
    };
}

/// Resolves an unknown outcome as applied: `done` with the provider's
/// result, its expiry kept, its fence bumped so that its holder's late
/// completion changes nothing. `?1` digest, `?2` now, `?3` the result.
pub(super) const RESOLVE_APPLIED: &str = concat!(
    "\
UPDATE idempotent_claims
SET state = 'done', result = ?3, completed_at = ?2, lease_until = NULL, fence = fence + 1
WHERE ",
    resolvable!()
);

/// Resolves an unknown outcome as not applied: the row goes. `?1` digest,
/// `?2` now.
pub(super) const RESOLVE_NOT_APPLIED: &str = concat!(
    "\
DELETE FROM idempotent_claims
WHERE ",
    resolvable!()
);

/// What a resolve that changed nothing found, in the same transaction:
/// the state of the row within its retention. `?1` digest, `?2` now.
pub(super) const RESOLVE_FOUND: &str = "\
SELECT state FROM idempotent_claims
WHERE key_digest = ?1 AND expires_at > ?2";

/// Whether a held claim is left under a key that a forget did not remove.
pub(super) const HELD: &str =
    "SELECT 1 FROM idempotent_claims WHERE key_digest = ?1 AND state = 'held'";

/// One page of records. `?1` the state, `?2` the tool, `?3` the run (a
/// prefix of the key), `?4` the latest change time to match, `?5` the key
/// to start after, `?6` the rows to return; a `NULL` matches anything.
/// Columns as [`super::rows::read_record`] takes them.
pub(super) const LIST: &str = "\
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
LIMIT ?6";

/// One key's record. Columns as [`super::rows::read_record`] takes them.
pub(super) const INSPECT: &str = "\
SELECT key_text, tool, state, owner, fence, taken_over, lease_until, result,
       completed_at, expires_at, fingerprint
FROM idempotent_claims
WHERE key_digest = ?1";

/// Records by tool and state.
pub(super) const COUNT: &str = "\
SELECT tool, state, count(*) FROM idempotent_claims
GROUP BY tool, state";

/// Whether a table exists.
pub(super) const HAS_TABLE: &str =
    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1";

/// The newest schema version recorded.
pub(super) const NEWEST_VERSION: &str = "SELECT COALESCE(MAX(version), 1) FROM idempotent_schema";

#[cfg(test)]
mod tests;
