//! The SQLite store's writer: one thread with its own connection that runs
//! every claim, completion, release and renewal.
//!
//! SQLite admits one writer at a time, and each commit in `synchronous =
//! FULL` costs a flush. So the steps that arrive while a write is in
//! flight go together in the next one: the thread takes everything queued,
//! runs it in one `IMMEDIATE` transaction with a `SAVEPOINT` per step (a
//! step that fails rolls back alone, and only its caller hears of it),
//! commits once, and answers each caller. A step that finds nothing queued
//! runs at once as its own statement: no step waits for company. A claim in
//! a batch that finds its record completed is answered before the
//! transaction begins: a replay reads, and never waits for the write lock.
//! A step with which SQLite rolls the whole transaction back (a full disk,
//! an I/O error, a trigger's `RAISE(ROLLBACK)`) fails alone; the others,
//! undone with it, run again in the next transaction.
//!
//! A claim whose caller is gone is not made, or is released in the same
//! transaction; one whose answer is dropped unread is released by the
//! answer's [`Undo`]: a claim never outlives its caller unseen.
//!
//! Here: the queue, the thread's loop and the [`Undo`]; `batch`: a batch's
//! transaction, its savepoints, and answering its callers; `step`: each
//! step's statements.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak, mpsc};
use std::time::SystemTime;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::rows::Returned;
use crate::store::durable::encode;
use crate::store::{StoreError, StoreResult};
use batch::run_batch;

mod batch;
mod step;

/// The most steps one transaction runs, so a long queue still answers its
/// first callers soon.
const MOST_PER_BATCH: usize = 256;

/// One step, with its parameters as stored.
pub(super) enum Step {
    /// `sql::PEEK_COMPLETED`, then `sql::CLAIM` if no completed row.
    Claim {
        digest: [u8; 32],
        key_text: String,
        tool: String,
        fingerprint: [u8; 16],
        owner: [u8; 16],
        lease: i64,
        retention: i64,
    },
    /// `sql::COMPLETE`.
    Complete {
        digest: [u8; 32],
        owner: [u8; 16],
        fence: i64,
        state: &'static str,
        json: String,
        completed_at: i64,
        retention: i64,
    },
    /// `sql::RELEASE`.
    Release {
        digest: [u8; 32],
        owner: [u8; 16],
        fence: i64,
    },
    /// `sql::RENEW`.
    Renew {
        digest: [u8; 32],
        owner: [u8; 16],
        fence: i64,
        lease: i64,
        retention: i64,
    },
}

/// What a step did.
// Moved once, through the answer's channel: boxing the row would cost an
// allocation per claim to save a copy.
#[allow(clippy::large_enum_variant)]
pub(super) enum Done {
    /// The row a claim found or made, the time it ran with, and what
    /// releases the claim if this answer is dropped unread.
    Claimed(Returned, i64, Undo),
    /// The rows a completion, release or renewal changed.
    Changed(usize),
}

/// A step and where its answer goes.
pub(super) struct Job {
    step: Step,
    reply: oneshot::Sender<StoreResult<Done>>,
}

/// The writer's queue; the thread ends when the store that holds it is
/// dropped.
pub(super) struct Writer {
    queue: Arc<mpsc::Sender<Job>>,
    /// How many transactions the thread has committed.
    commits: Arc<AtomicU64>,
}

impl Writer {
    /// Starts the writer thread over `conn`.
    pub(super) fn start(conn: Connection, path: &Path) -> StoreResult<Writer> {
        let (queue, jobs) = mpsc::channel();
        let queue = Arc::new(queue);
        let commits = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&commits);
        // Weak, so the thread ends once the store is dropped.
        let requeue = Arc::downgrade(&queue);
        std::thread::Builder::new()
            .name("idempotent-sqlite-writer".into())
            .spawn(move || write_until_closed(conn, jobs, &requeue, &counted))
            .map_err(|cause| StoreError::CannotOpen {
                store: "SQLite",
                place: path.display().to_string(),
                cause: Box::new(cause),
            })?;
        Ok(Writer { queue, commits })
    }

    /// How many transactions the writer has committed.
    pub(super) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Queues `step` and waits for its answer. Dropping the future leaves
    /// the step queued; a claim nobody waits for any more is undone.
    pub(super) async fn run(&self, step: Step) -> StoreResult<Done> {
        let (reply, answer) = oneshot::channel();
        self.queue.send(Job { step, reply }).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// The writer thread is gone (it panicked): the store cannot write.
fn gone() -> StoreError {
    StoreError::Backend("the SQLite store's writer thread stopped".into())
}

fn now_millis() -> i64 {
    encode::unix_millis(SystemTime::now())
}

/// The writer's loop: block for a step, take whatever else is queued, run
/// them all in one transaction, answer, repeat.
fn write_until_closed(
    mut conn: Connection,
    jobs: mpsc::Receiver<Job>,
    requeue: &Weak<mpsc::Sender<Job>>,
    commits: &AtomicU64,
) {
    let mut batch = Vec::with_capacity(MOST_PER_BATCH);
    while let Ok(first) = jobs.recv() {
        batch.push(first);
        while batch.len() < MOST_PER_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if run_batch(&mut conn, &mut batch, requeue) {
            commits.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Releases a claim the writer made if the answer that carries it is
/// dropped unread: its caller left after the commit.
pub(super) struct Undo(Option<Armed>);

/// Where an [`Undo`] queues its release, and the claim it releases.
struct Armed {
    queue: Weak<mpsc::Sender<Job>>,
    digest: [u8; 32],
    owner: [u8; 16],
    fence: i64,
}

impl Undo {
    /// The answer was read: the claim is its caller's.
    pub(super) fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        if let Some(Armed {
            queue,
            digest,
            owner,
            fence,
        }) = self.0.take()
            && let Some(queue) = queue.upgrade()
        {
            // Nobody waits for the answer. With the store gone, the lease
            // frees the claim.
            let (reply, _) = oneshot::channel();
            let step = Step::Release {
                digest,
                owner,
                fence,
            };
            let _ = queue.send(Job { step, reply });
        }
    }
}

#[cfg(test)]
mod tests;
