//! Each step's statements, run on the writer's connection.

use rusqlite::{Connection, OptionalExtension, params};

use super::{Done, Step, Undo, now_millis};
use crate::store::sqlite_store::rows::{Returned, read_returned};
use crate::store::sqlite_store::sql;

/// The completed, unexpired row for `digest` at `now`, if there is one:
/// a replay's read.
pub(super) fn peek_completed(
    conn: &Connection,
    digest: &[u8; 32],
    now: i64,
) -> rusqlite::Result<Option<Returned>> {
    conn.prepare_cached(sql::PEEK_COMPLETED)?
        .query_row(params![digest.as_slice(), now], read_returned)
        .optional()
}

/// Runs a statement without parameters, prepared once per connection.
pub(super) fn execute(conn: &Connection, statement: &str) -> rusqlite::Result<usize> {
    conn.prepare_cached(statement)?.execute([])
}

pub(super) fn run_step(conn: &Connection, step: &Step, read_first: bool) -> rusqlite::Result<Done> {
    match step {
        Step::Claim {
            digest,
            key_text,
            tool,
            fingerprint,
            owner,
            lease,
            retention,
        } => {
            let now = now_millis();
            // A completed record stays finished until it expires, so a read
            // may answer a replay: it writes nothing. In a batch that read
            // was made before the transaction ([`answer_replays`]); the
            // claim statement returns a completed row as it finds it anyway.
            let finished = if read_first {
                peek_completed(conn, digest, now)?
            } else {
                None
            };
            let returned = match finished {
                Some(finished) => finished,
                None => conn.prepare_cached(sql::CLAIM)?.query_row(
                    params![
                        digest.as_slice(),
                        key_text.as_str(),
                        tool.as_str(),
                        fingerprint.as_slice(),
                        owner.as_slice(),
                        now,
                        lease,
                        retention
                    ],
                    read_returned,
                )?,
            };
            Ok(Done::Claimed(returned, now, Undo(None)))
        }
        Step::Complete {
            digest,
            owner,
            fence,
            state,
            json,
            completed_at,
            retention,
        } => conn
            .prepare_cached(sql::COMPLETE)?
            .execute(params![
                digest.as_slice(),
                owner.as_slice(),
                fence,
                state,
                json,
                completed_at,
                now_millis(),
                retention
            ])
            .map(Done::Changed),
        Step::Release {
            digest,
            owner,
            fence,
        } => release(conn, digest, owner, *fence).map(Done::Changed),
        Step::Renew {
            digest,
            owner,
            fence,
            lease,
            retention,
        } => conn
            .prepare_cached(sql::RENEW)?
            .execute(params![
                digest.as_slice(),
                owner.as_slice(),
                fence,
                now_millis(),
                lease,
                retention
            ])
            .map(Done::Changed),
    }
}

pub(super) fn release(
    conn: &Connection,
    digest: &[u8; 32],
    owner: &[u8; 16],
    fence: i64,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql::RELEASE)?
        .execute(params![digest.as_slice(), owner.as_slice(), fence])
}
