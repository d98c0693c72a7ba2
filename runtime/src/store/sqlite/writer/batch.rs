//! One batch of the writer's: the replays answered first, the other steps
//! in one transaction with a savepoint each, the commit, and each caller's
//! answer; or a step alone as its own statement.

use std::sync::{Weak, mpsc};

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::step::{execute, peek_completed, release, run_step};
use super::{Armed, Done, Job, Step, Undo, now_millis};
use crate::store::sqlite_store::error::store_error;
use crate::store::{StoreError, StoreResult};

/// A step run inside the batch's transaction, and what it came to.
pub(super) struct Ran {
    reply: oneshot::Sender<StoreResult<Done>>,
    outcome: StoreResult<Done>,
}

/// Runs `batch` in one transaction and answers every caller; whether it
/// committed.
pub(super) fn run_batch(
    conn: &mut Connection,
    batch: &mut Vec<Job>,
    requeue: &Weak<mpsc::Sender<Job>>,
) -> bool {
    // A claim whose caller already left is not made at all.
    batch.retain(|job| !(matches!(job.step, Step::Claim { .. }) && job.reply.is_closed()));
    if batch.len() > 1 {
        answer_replays(conn, batch);
    }
    loop {
        if batch.is_empty() {
            return false;
        }
        if let [_] = batch.as_slice() {
            return run_alone(conn, batch, requeue);
        }
        if let Err(err) = execute(conn, "BEGIN IMMEDIATE") {
            for job in batch.drain(..) {
                let _ = job.reply.send(Err(shared_error(&err)));
            }
            return false;
        }
        match run_in_savepoints(conn, batch, requeue) {
            Ok(ran) => return commit_and_answer(conn, ran),
            // SQLite rolled the whole transaction back with this step (a
            // full disk, an I/O error, a trigger's `RAISE(ROLLBACK)`): its
            // caller hears why, and the others, undone with it, run again.
            Err((failed, err)) => {
                let _ = batch.remove(failed).reply.send(Err(err));
            }
        }
    }
}

/// Answers at once each claim of `batch` that finds its record completed,
/// and takes it out: a replay reads, and never waits for the write lock a
/// batch's transaction asks for.
fn answer_replays(conn: &Connection, batch: &mut Vec<Job>) {
    let mut writes = Vec::with_capacity(batch.len());
    for job in batch.drain(..) {
        let Step::Claim { digest, .. } = &job.step else {
            writes.push(job);
            continue;
        };
        let now = now_millis();
        match peek_completed(conn, digest, now) {
            Ok(Some(finished)) => {
                let _ = job.reply.send(Ok(Done::Claimed(finished, now, Undo(None))));
            }
            // Not completed, or the read failed: the claim runs in the
            // transaction, which reads again.
            Ok(None) | Err(_) => writes.push(job),
        }
    }
    *batch = writes;
}

/// Runs each step of `batch` in its own savepoint of the open transaction,
/// and takes them out with what they came to. If one fails and SQLite rolls
/// the whole transaction back with it, every step stays in `batch`, undone,
/// and the failing one's place is returned with its error.
pub(super) fn run_in_savepoints(
    conn: &Connection,
    batch: &mut Vec<Job>,
    requeue: &Weak<mpsc::Sender<Job>>,
) -> Result<Vec<Ran>, (usize, StoreError)> {
    let mut outcomes = Vec::with_capacity(batch.len());
    for (i, job) in batch.iter().enumerate() {
        let mut outcome = match in_savepoint(conn, &job.step) {
            Err(err) if conn.is_autocommit() => {
                // Nothing of the transaction is left: no claim made in it
                // may be released in its name.
                for outcome in &mut outcomes {
                    if let Ok(Done::Claimed(_, _, undo)) = outcome {
                        undo.disarm();
                    }
                }
                return Err((i, err));
            }
            outcome => outcome,
        };
        arm(&job.step, &mut outcome, requeue);
        outcomes.push(outcome);
    }
    Ok(batch
        .drain(..)
        .zip(outcomes)
        .map(|(job, outcome)| Ran {
            reply: job.reply,
            outcome,
        })
        .collect())
}

/// Lets go of the claims whose callers left while the steps ran, commits
/// the open transaction and answers every caller; whether it committed.
pub(super) fn commit_and_answer(conn: &Connection, mut ran: Vec<Ran>) -> bool {
    // A claim whose caller left while the batch ran is let go before the
    // commit, in the same transaction.
    for step in &mut ran {
        if let Ok(Done::Claimed(_, _, undo)) = &mut step.outcome
            && step.reply.is_closed()
            && let Some(armed) = undo.0.take()
        {
            let _ = release(conn, &armed.digest, &armed.owner, armed.fence);
        }
    }
    if let Err(err) = execute(conn, "COMMIT") {
        // A failed `COMMIT` may leave the transaction open: nothing in it
        // happened.
        let _ = execute(conn, "ROLLBACK");
        for mut step in ran {
            if let Ok(Done::Claimed(_, _, undo)) = &mut step.outcome {
                undo.disarm();
            }
            let _ = step.reply.send(Err(shared_error(&err)));
        }
        return false;
    }
    for step in ran {
        // An answer nobody reads is dropped here, and its `Undo` queues
        // the release.
        let _ = step.reply.send(step.outcome);
    }
    true
}

/// Runs a step that found nothing queued beside it: as its own statement,
/// which SQLite commits at once, with no transaction around it.
pub(super) fn run_alone(
    conn: &mut Connection,
    batch: &mut Vec<Job>,
    requeue: &Weak<mpsc::Sender<Job>>,
) -> bool {
    let Some(job) = batch.pop() else {
        return false;
    };
    let mut outcome = run_step(conn, &job.step, true).map_err(store_error);
    arm(&job.step, &mut outcome, requeue);
    let _ = job.reply.send(outcome);
    true
}

/// Arms the `Undo` of a claim `step` made, so that its answer, dropped
/// unread, releases it.
fn arm(step: &Step, outcome: &mut StoreResult<Done>, requeue: &Weak<mpsc::Sender<Job>>) {
    if let (Step::Claim { digest, owner, .. }, Ok(Done::Claimed(row, _, undo))) = (step, outcome)
        && row.owned_by(owner)
    {
        *undo = Undo(Some(Armed {
            queue: requeue.clone(),
            digest: *digest,
            owner: *owner,
            fence: row.fence_column(),
        }));
    }
}

/// Runs one step inside a savepoint: its failure rolls back only its own
/// writes.
fn in_savepoint(conn: &Connection, step: &Step) -> StoreResult<Done> {
    execute(conn, "SAVEPOINT step").map_err(store_error)?;
    let undone = |err| {
        let _ = execute(conn, "ROLLBACK TO step");
        let _ = execute(conn, "RELEASE step");
        Err(store_error(err))
    };
    match run_step(conn, step, false) {
        Ok(done) => match execute(conn, "RELEASE step") {
            Ok(_) => Ok(done),
            Err(err) => undone(err),
        },
        Err(err) => undone(err),
    }
}

/// The error of a statement every step in the batch shared (`BEGIN` or
/// `COMMIT`), once for each caller, sorted as [`store_error`] sorts it.
fn shared_error(err: &rusqlite::Error) -> StoreError {
    match err {
        rusqlite::Error::SqliteFailure(code, message) => {
            store_error(rusqlite::Error::SqliteFailure(*code, message.clone()))
        }
        other => StoreError::Backend(other.to_string().into()),
    }
}
