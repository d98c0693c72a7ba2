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

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak, mpsc};
use std::time::SystemTime;

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use super::error::store_error;
use super::rows::{Returned, read_returned};
use super::sql;
use crate::store::durable::encode;
use crate::store::{StoreError, StoreResult};

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

/// A step run inside the batch's transaction, and what it came to.
struct Ran {
    reply: oneshot::Sender<StoreResult<Done>>,
    outcome: StoreResult<Done>,
}

/// Runs `batch` in one transaction and answers every caller; whether it
/// committed.
fn run_batch(
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
fn run_in_savepoints(
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
fn commit_and_answer(conn: &Connection, mut ran: Vec<Ran>) -> bool {
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
fn run_alone(
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

/// The completed, unexpired row for `digest` at `now`, if there is one:
/// a replay's read.
fn peek_completed(
    conn: &Connection,
    digest: &[u8; 32],
    now: i64,
) -> rusqlite::Result<Option<Returned>> {
    conn.prepare_cached(sql::PEEK_COMPLETED)?
        .query_row(params![digest.as_slice(), now], read_returned)
        .optional()
}

/// Runs a statement without parameters, prepared once per connection.
fn execute(conn: &Connection, statement: &str) -> rusqlite::Result<usize> {
    conn.prepare_cached(statement)?.execute([])
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

fn run_step(conn: &Connection, step: &Step, read_first: bool) -> rusqlite::Result<Done> {
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

fn release(
    conn: &Connection,
    digest: &[u8; 32],
    owner: &[u8; 16],
    fence: i64,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql::RELEASE)?
        .execute(params![digest.as_slice(), owner.as_slice(), fence])
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

#[cfg(test)]
mod tests {
    use super::super::SqliteStore;
    use super::*;

    fn claim(key: &str) -> Step {
        Step::Claim {
            digest: [key.len() as u8; 32],
            key_text: key.to_owned(),
            tool: "shop::refund".to_owned(),
            fingerprint: [0; 16],
            owner: [7; 16],
            lease: 60_000,
            retention: 60_000,
        }
    }

    fn rows(path: &Path, key: &str) -> i64 {
        Connection::open(path)
            .and_then(|conn| {
                conn.query_row(
                    "SELECT count(*) FROM idempotent_claims WHERE key_text = ?1",
                    [key],
                    |r| r.get(0),
                )
            })
            .expect("count the rows")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claim_whose_answer_is_dropped_unread_is_released_and_one_read_is_kept() {
        let dir = std::env::temp_dir().join(format!("idempotent-writer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let path = dir.join("claims.db");
        let store = SqliteStore::open(&path).expect("open");
        let writer = &store.inner.writer;

        // Answered after the commit, then dropped unread.
        let (reply, unread) = oneshot::channel();
        writer
            .queue
            .send(Job {
                step: claim("dropped"),
                reply,
            })
            .expect("queued");
        while writer.commits() == 0 {
            tokio::task::yield_now().await;
        }
        drop(unread);
        // Read: the claim stays its caller's.
        let Done::Claimed(row, _, mut undo) = writer.run(claim("kept-key")).await.expect("claim")
        else {
            panic!("a claim's answer");
        };
        assert!(row.owned_by(&[7; 16]));
        undo.disarm();
        drop(undo);
        // The steps run in order: the release queued by the unread answer
        // ran before this one.
        writer.run(claim("after-all")).await.expect("a last claim");
        assert_eq!(rows(&path, "dropped"), 0, "the unread claim was released");
        assert_eq!(rows(&path, "kept-key"), 1, "the read claim is kept");
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claim_whose_caller_leaves_before_its_batch_commits_is_let_go_in_that_batch() {
        let dir = std::env::temp_dir().join(format!("idempotent-batch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let path = dir.join("claims.db");
        drop(SqliteStore::open(&path).expect("open, which makes the schema"));
        let conn = Connection::open(&path).expect("a connection");

        let (left_reply, left) = oneshot::channel();
        let (stays_reply, stays) = oneshot::channel();
        let mut batch = vec![
            Job {
                step: claim("left"),
                reply: left_reply,
            },
            Job {
                step: claim("stays"),
                reply: stays_reply,
            },
        ];
        execute(&conn, "BEGIN IMMEDIATE").expect("begin");
        let Ok(ran) = run_in_savepoints(&conn, &mut batch, &Weak::new()) else {
            panic!("both steps ran");
        };
        // Both steps ran; one caller leaves before the commit.
        drop(left);
        assert!(commit_and_answer(&conn, ran), "the batch commits");

        let Ok(Done::Claimed(row, _, mut undo)) = stays.await.expect("an answer") else {
            panic!("a claim's answer");
        };
        assert!(row.owned_by(&[7; 16]));
        undo.disarm();
        assert_eq!(rows(&path, "left"), 0, "the left caller's claim was let go");
        assert_eq!(rows(&path, "stays"), 1, "the other claim is kept");
        drop(conn);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A claim's step and where its answer goes.
    fn job(step: Step) -> (Job, oneshot::Receiver<StoreResult<Done>>) {
        let (reply, answer) = oneshot::channel();
        (Job { step, reply }, answer)
    }

    /// A file with the store's schema, and a connection of the test's own.
    fn schema_file(name: &str) -> (std::path::PathBuf, std::path::PathBuf, Connection) {
        let dir = std::env::temp_dir().join(format!("idempotent-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let path = dir.join("claims.db");
        drop(SqliteStore::open(&path).expect("open, which makes the schema"));
        let conn = Connection::open(&path).expect("a connection");
        (dir, path, conn)
    }

    fn claimed_row(mut answer: oneshot::Receiver<StoreResult<Done>>) -> Returned {
        match answer.try_recv() {
            Ok(Ok(Done::Claimed(row, _, mut undo))) => {
                undo.disarm();
                row
            }
            Ok(Ok(Done::Changed(_))) => panic!("a claim's answer"),
            Ok(Err(err)) => panic!("a claim: {err}"),
            Err(err) => panic!("no answer: {err}"),
        }
    }

    #[test]
    fn a_step_that_rolls_the_whole_batch_back_fails_alone_and_the_others_run_again() {
        let (dir, path, mut conn) = schema_file("rollback");
        conn.execute_batch(
            "CREATE TRIGGER refuse BEFORE INSERT ON idempotent_claims
             WHEN NEW.key_text = 'refused'
             BEGIN SELECT RAISE(ROLLBACK, 'refused by the ledger'); END;",
        )
        .expect("a trigger");
        let (first, first_answer) = job(claim("first"));
        let (refused, refused_answer) = job(claim("refused"));
        let (after, after_answer) = job(claim("after-it"));
        let mut batch = vec![first, refused, after];

        assert!(
            run_batch(&mut conn, &mut batch, &Weak::new()),
            "a batch commits"
        );
        assert!(batch.is_empty(), "every step was answered");
        assert!(claimed_row(first_answer).owned_by(&[7; 16]));
        assert!(claimed_row(after_answer).owned_by(&[7; 16]));
        let refused = refused_answer.blocking_recv().expect("an answer");
        assert!(
            matches!(&refused, Err(err) if format!("{err:?}").contains("refused by the ledger")),
            "the refused step hears why: {:?}",
            refused.as_ref().err()
        );
        assert_eq!(rows(&path, "first"), 1, "the step before it ran again");
        assert_eq!(rows(&path, "after-it"), 1, "the step after it committed");
        assert_eq!(rows(&path, "refused"), 0);
        assert!(conn.is_autocommit(), "no transaction is left open");
        drop(conn);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_batch_of_replays_is_answered_without_the_write_lock() {
        let (dir, path, mut conn) = schema_file("replays");
        for key in ["done-a", "done-bb"] {
            let (claiming, answer) = job(claim(key));
            run_batch(&mut conn, &mut vec![claiming], &Weak::new());
            let row = claimed_row(answer);
            let (completing, _) = job(Step::Complete {
                digest: [key.len() as u8; 32],
                owner: [7; 16],
                fence: row.fence_column(),
                state: "done",
                json: "1".into(),
                completed_at: now_millis(),
                retention: 60_000,
            });
            run_batch(&mut conn, &mut vec![completing], &Weak::new());
        }
        // Another connection holds the write lock.
        let writer = Connection::open(&path).expect("another connection");
        writer
            .execute_batch("BEGIN IMMEDIATE")
            .expect("the write lock");

        let (a, a_answer) = job(claim("done-a"));
        let (b, b_answer) = job(claim("done-bb"));
        run_batch(&mut conn, &mut vec![a, b], &Weak::new());
        // Had the batch asked for the write lock, it would have been told
        // the file is busy: this connection waits for no lock.
        for answer in [a_answer, b_answer] {
            let found = claimed_row(answer).found(1, now_millis()).expect("a row");
            assert!(
                matches!(
                    found,
                    crate::store::durable::Found::Other(crate::store::durable::Row {
                        state: crate::store::durable::RowState::Completed { .. },
                        ..
                    })
                ),
                "a replay"
            );
        }
        writer.execute_batch("ROLLBACK").expect("let go");
        drop((conn, writer));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
