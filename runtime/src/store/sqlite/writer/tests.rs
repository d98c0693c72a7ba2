//! The writer's batches against a real file.

use super::super::SqliteStore;
use super::batch::*;
use super::step::*;
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
