//! Calls in the action's own transaction (`Call::run_in_transaction`): the
//! effect is a row in an application table in the store's schema, and each
//! case counts those rows.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idempotent_tools::call::{Call, Key};
use idempotent_tools::store::StoreError;
use idempotent_tools::store::postgres::tokio_postgres;
use idempotent_tools::{Error, Outcome, PostgresStore, idempotent};
use idempotent_tools_testing::conformance::kit::unique_id;
use tokio::sync::Notify;

use crate::{Schema, admin, config_in};

/// The environment variable that makes the test binary a child that writes
/// and then waits to be killed, in the schema it names.
pub const CHILD_SCHEMA: &str = "IDEMPOTENT_TXN_CHILD_SCHEMA";
const CHILD_KEY: &str = "IDEMPOTENT_TXN_CHILD_KEY";

/// The line a child prints once its write is in its transaction, not yet
/// committed.
const WRITTEN: &str = "written";

/// The lease of the child's claim: how long the retry waits once the child
/// is killed.
const CHILD_LEASE: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
enum CreditError {
    #[error(transparent)]
    Idempotency(#[from] Error),
    #[error("the credit could not be written")]
    Database(#[from] tokio_postgres::Error),
    #[error("the ledger refused the credit")]
    Refused,
}

fn credit_key(id: &str) -> Key {
    Key::builder()
        .literal("txn-")
        .and_then(|b| b.part("id", id))
        .and_then(|b| b.literal(":credit:A1"))
        .and_then(|b| b.finish())
        .expect("a valid key")
}

/// The store, with the application's table `credits` beside its own.
async fn store_with_credits(schema: &Schema) -> PostgresStore {
    let store = schema.store().await;
    admin(&schema.url)
        .await
        .batch_execute(&format!(
            "CREATE TABLE {}.credits (order_id text NOT NULL, cents bigint NOT NULL)",
            schema.name
        ))
        .await
        .expect("create the application's table");
    store
}

async fn credits(schema: &Schema) -> i64 {
    admin(&schema.url)
        .await
        .query_one(
            &format!("SELECT count(*) FROM {}.credits", schema.name),
            &[],
        )
        .await
        .expect("count the credits")
        .get(0)
}

/// Issues a credit of 42 under `key`: one row in `credits`, counted in
/// `acted`.
async fn issue_credit(
    store: &PostgresStore,
    key: Key,
    acted: &Arc<AtomicUsize>,
) -> Result<Outcome<i64>, CreditError> {
    let acted = Arc::clone(acted);
    Call::new("shop::issue_credit", key)
        .run_in_transaction(store, move |tx| {
            Box::pin(async move {
                acted.fetch_add(1, Ordering::SeqCst);
                tx.execute(
                    "INSERT INTO credits (order_id, cents) VALUES ('A1', 42)",
                    &[],
                )
                .await?;
                Ok(42)
            })
        })
        .await
}

pub async fn a_duplicate_waits_for_the_commit_and_replays_the_committed_result() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = Arc::new(store_with_credits(&schema).await);
    let key = credit_key(&unique_id());
    let acted = Arc::new(AtomicUsize::new(0));
    let (written, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let first = tokio::spawn({
        let (store, key, acted) = (Arc::clone(&store), key.clone(), Arc::clone(&acted));
        let (written, go) = (Arc::clone(&written), Arc::clone(&go));
        async move {
            Call::new("shop::issue_credit", key)
                .run_in_transaction(&store, move |tx| {
                    Box::pin(async move {
                        acted.fetch_add(1, Ordering::SeqCst);
                        tx.execute(
                            "INSERT INTO credits (order_id, cents) VALUES ('A1', 42)",
                            &[],
                        )
                        .await?;
                        written.notify_one();
                        go.notified().await;
                        Ok::<_, CreditError>(42_i64)
                    })
                })
                .await
        }
    });
    written.notified().await;
    let duplicate = tokio::spawn({
        let (store, key, acted) = (Arc::clone(&store), key.clone(), Arc::clone(&acted));
        async move { issue_credit(&store, key, &acted).await }
    });
    // The duplicate found the claim in flight and marked it as waited for.
    let admin = admin(&schema.url).await;
    let marked = format!(
        "SELECT count(*) FROM {}.idempotent_claims WHERE waiting",
        schema.name
    );
    while admin
        .query_one(&marked, &[])
        .await
        .expect("read the claim")
        .get::<_, i64>(0)
        == 0
    {
        tokio::task::yield_now().await;
    }
    go.notify_one();
    let first = first.await.expect("the first call").expect("it acts");
    assert!(matches!(first, Outcome::Fresh { value: 42 }), "{first:?}");
    let duplicate = duplicate.await.expect("the duplicate").expect("it replays");
    assert!(
        matches!(duplicate, Outcome::Replay { value: 42, .. }),
        "{duplicate:?}"
    );
    assert_eq!(acted.load(Ordering::SeqCst), 1, "the action ran once");
    assert_eq!(credits(&schema).await, 1, "one credit committed");
}

pub async fn a_failing_action_leaves_no_write_and_a_retry_acts_once() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = store_with_credits(&schema).await;
    let key = credit_key(&unique_id());
    let failed = Call::new("shop::issue_credit", key.clone())
        .run_in_transaction(&store, |tx| {
            Box::pin(async move {
                tx.execute(
                    "INSERT INTO credits (order_id, cents) VALUES ('A1', 42)",
                    &[],
                )
                .await?;
                Err::<i64, _>(CreditError::Refused)
            })
        })
        .await;
    assert!(matches!(failed, Err(CreditError::Refused)), "{failed:?}");
    assert_eq!(
        credits(&schema).await,
        0,
        "the failed action's write rolled back"
    );
    let acted = Arc::new(AtomicUsize::new(0));
    let retry = issue_credit(&store, key, &acted)
        .await
        .expect("the retry acts");
    assert!(matches!(retry, Outcome::Fresh { value: 42 }), "{retry:?}");
    assert_eq!(acted.load(Ordering::SeqCst), 1);
    assert_eq!(credits(&schema).await, 1);
}

pub async fn a_stale_holder_whose_claim_was_taken_over_has_its_write_rolled_back() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = Arc::new(store_with_credits(&schema).await);
    let key = credit_key(&unique_id());
    let (written, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let stale = tokio::spawn({
        let (store, key) = (Arc::clone(&store), key.clone());
        let (written, go) = (Arc::clone(&written), Arc::clone(&go));
        async move {
            // A lease long enough that no renewal comes during the case.
            Call::new("shop::issue_credit", key)
                .lease(Duration::from_secs(60))
                .run_in_transaction(&store, move |tx| {
                    Box::pin(async move {
                        tx.execute(
                            "INSERT INTO credits (order_id, cents) VALUES ('A1', 7)",
                            &[],
                        )
                        .await?;
                        written.notify_one();
                        // Paused, as a process stopped past its lease.
                        go.notified().await;
                        Ok::<_, CreditError>(7_i64)
                    })
                })
                .await
        }
    });
    written.notified().await;
    // Its lease runs out, as if its renewals had stalled with it.
    admin(&schema.url)
        .await
        .batch_execute(&format!(
            "UPDATE {}.idempotent_claims SET lease_until = now() - interval '1 second'",
            schema.name
        ))
        .await
        .expect("expire the lease");
    let acted = Arc::new(AtomicUsize::new(0));
    let taker = issue_credit(&store, key, &acted)
        .await
        .expect("the takeover acts");
    assert!(matches!(taker, Outcome::Fresh { value: 42 }), "{taker:?}");
    go.notify_one();
    let stale = stale.await.expect("the stale holder");
    match stale {
        Err(CreditError::Idempotency(error @ Error::RolledBack { .. })) => {
            assert_eq!(error.action_ran(), Some(false));
            let cause = std::error::Error::source(&error).expect("a cause");
            assert!(
                matches!(
                    cause.downcast_ref::<StoreError>(),
                    Some(StoreError::LeaseLost)
                ),
                "{cause:?}"
            );
            assert!(error.to_string().contains("did not take effect"), "{error}");
        }
        other => panic!("the stale holder's transaction must roll back, got {other:?}"),
    }
    assert_eq!(acted.load(Ordering::SeqCst), 1);
    let admin = admin(&schema.url).await;
    let rows = admin
        .query(&format!("SELECT cents FROM {}.credits", schema.name), &[])
        .await
        .expect("read the credits");
    let cents: Vec<i64> = rows.iter().map(|row| row.get(0)).collect();
    assert_eq!(cents, vec![42], "only the new holder's credit committed");
}

pub async fn a_process_killed_between_its_write_and_its_commit_leaves_nothing_and_the_retry_acts_once()
 {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = store_with_credits(&schema).await;
    let id = unique_id();
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .env(CHILD_SCHEMA, &schema.name)
        .env(CHILD_KEY, &id)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the child");
    let stdout = child.stdout.take().expect("the child's stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .expect("read the child")
    .expect("the child's line");
    assert_eq!(line.trim(), WRITTEN, "the child wrote in its transaction");
    // SIGKILL, between the write and the commit.
    child.kill().expect("kill the child");
    child.wait().expect("the child ends");
    let acted = Arc::new(AtomicUsize::new(0));
    let retry = issue_credit(&store, credit_key(&id), &acted)
        .await
        .expect("the retry takes over once the lease runs out, and acts");
    assert!(matches!(retry, Outcome::Fresh { value: 42 }), "{retry:?}");
    assert_eq!(acted.load(Ordering::SeqCst), 1);
    assert_eq!(
        credits(&schema).await,
        1,
        "the killed child's write never committed"
    );
}

/// A call dropped while its `COMMIT` is on the server: the commit holds at
/// a deferred trigger on `credits` that waits for an advisory lock the case
/// holds. Then the server either finishes the commit (`terminate` false)
/// or its backend is terminated (`terminate` true). Either way the write
/// and the record are there together or not at all, and with the retry the
/// credit is issued exactly once.
async fn a_call_dropped_at_its_commit(terminate: bool) {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = Arc::new(store_with_credits(&schema).await);
    let name = &schema.name;
    let admin = admin(&schema.url).await;
    admin
        .batch_execute(&format!(
            "CREATE FUNCTION {name}.hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_advisory_xact_lock(hashtext('{name}')); RETURN NULL; END $$;
             CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON {name}.credits
                 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {name}.hold_commit();
             SELECT pg_advisory_lock(hashtext('{name}'));"
        ))
        .await
        .expect("hold commits on credits");
    let key = credit_key(&unique_id());
    let acted = Arc::new(AtomicUsize::new(0));
    let call = tokio::spawn({
        let (store, key, acted) = (Arc::clone(&store), key.clone(), Arc::clone(&acted));
        // A short lease, so that a claim the release misses frees soon.
        async move {
            Call::new("shop::issue_credit", key)
                .lease(Duration::from_secs(2))
                .run_in_transaction(&store, move |tx| {
                    Box::pin(async move {
                        acted.fetch_add(1, Ordering::SeqCst);
                        tx.execute(
                            "INSERT INTO credits (order_id, cents) VALUES ('A1', 42)",
                            &[],
                        )
                        .await?;
                        Ok::<_, CreditError>(42_i64)
                    })
                })
                .await
        }
    });
    // Polls the server until the commit waits on the lock: the action ran,
    // the fenced completion is in the transaction, and `COMMIT` was sent.
    let waiting = format!(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
         AND objid = hashtext('{name}')::oid"
    );
    let pid: i32 = loop {
        if let Some(row) = admin.query_opt(&waiting, &[]).await.expect("read pg_locks") {
            break row.get(0);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    call.abort();
    assert!(
        call.await
            .expect_err("dropped at its commit")
            .is_cancelled(),
        "the call was dropped before it ended"
    );
    if terminate {
        admin
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .expect("terminate the committing backend");
    }
    admin
        .execute("SELECT pg_advisory_unlock(hashtext($1))", &[name])
        .await
        .expect("let the commit go");
    assert_eq!(acted.load(Ordering::SeqCst), 1, "the dropped call acted");
    // The retry waits on the claim's row while the commit holds it.
    let retry = issue_credit(&store, key, &acted)
        .await
        .expect("the retry replays or acts");
    let committed = !terminate;
    if committed {
        assert!(
            matches!(retry, Outcome::Replay { value: 42, .. }),
            "{retry:?}"
        );
        assert_eq!(acted.load(Ordering::SeqCst), 1, "the commit is replayed");
    } else {
        assert!(matches!(retry, Outcome::Fresh { value: 42 }), "{retry:?}");
        assert_eq!(
            acted.load(Ordering::SeqCst),
            2,
            "nothing committed, so the retry acts"
        );
    }
    assert_eq!(credits(&schema).await, 1, "one credit, with its record");
}

pub async fn a_call_dropped_while_its_commit_goes_through_is_replayed() {
    a_call_dropped_at_its_commit(false).await;
}

pub async fn a_call_dropped_while_its_commit_fails_leaves_nothing_and_the_retry_acts() {
    a_call_dropped_at_its_commit(true).await;
}

/// A shop whose tool keeps its credits in the store's database, written as
/// an `#[idempotent]` method with `transaction`.
struct Shop {
    db: PostgresStore,
    acted: AtomicUsize,
}

impl Shop {
    /// Credits `cents` on `order_id`; a negative amount is written, then
    /// refused.
    #[idempotent(key = "txn-<id>:credit:<order_id>", store = &self.db, transaction)]
    async fn issue_credit(
        &self,
        id: String,
        order_id: String,
        cents: i64,
        #[transaction] tx: &tokio_postgres::Transaction<'_>,
    ) -> Result<Outcome<i64>, CreditError> {
        self.acted.fetch_add(1, Ordering::SeqCst);
        tx.execute(
            "INSERT INTO credits (order_id, cents) VALUES ($1, $2)",
            &[&order_id, &cents],
        )
        .await?;
        if cents < 0 {
            return Err(CreditError::Refused);
        }
        Ok(cents)
    }
}

pub async fn the_attribute_form_commits_the_write_with_its_record_and_replays_it() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let shop = Shop {
        db: store_with_credits(&schema).await,
        acted: AtomicUsize::new(0),
    };
    let id = unique_id();
    // The transaction is the guard's to hand over: the caller passes the
    // ask alone.
    let first = shop.issue_credit(id.clone(), "A1".into(), 42);
    fn sends<T: Send>(_: &T) {}
    sends(&first);
    let first = first.await.expect("the first call acts");
    assert!(matches!(first, Outcome::Fresh { value: 42 }), "{first:?}");
    let again = shop
        .issue_credit(id.clone(), "A1".into(), 42)
        .await
        .expect("the duplicate replays");
    assert!(
        matches!(again, Outcome::Replay { value: 42, .. }),
        "{again:?}"
    );
    // The amount is fingerprinted, and the transaction is not: the same
    // key asked for another amount is a conflict.
    let other = shop
        .issue_credit(id, "A1".into(), 41)
        .await
        .expect("a conflict is an outcome");
    assert!(other.is_conflict(), "{other:?}");
    assert_eq!(shop.acted.load(Ordering::SeqCst), 1);
    assert_eq!(credits(&schema).await, 1, "one credit, committed once");

    // A failing body's write rolls back, and the claim is released.
    let refused_id = unique_id();
    let refused = shop.issue_credit(refused_id.clone(), "A2".into(), -5).await;
    assert!(matches!(refused, Err(CreditError::Refused)), "{refused:?}");
    assert_eq!(credits(&schema).await, 1, "the refused write rolled back");
    let retry = shop.issue_credit(refused_id, "A2".into(), -5).await;
    assert!(matches!(retry, Err(CreditError::Refused)), "{retry:?}");
    assert_eq!(
        shop.acted.load(Ordering::SeqCst),
        3,
        "the retry acted again"
    );
    assert_eq!(credits(&schema).await, 1);
}

/// The child: claims the key, writes its credit, says so, and waits to be
/// killed.
pub fn child(schema: &str) -> ! {
    let url = crate::url().expect("the child runs with the server's URL");
    let id = std::env::var(CHILD_KEY).expect("the child's key");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let store = idempotent_tools::store::postgres::PostgresStoreBuilder::from_config(
            config_in(&url, schema),
        )
        .connect_lazy()
        .expect("a store");
        let _ = Call::new("shop::issue_credit", credit_key(&id))
            .lease(CHILD_LEASE)
            .run_in_transaction(&store, |tx| {
                Box::pin(async move {
                    tx.execute(
                        "INSERT INTO credits (order_id, cents) VALUES ('A1', 42)",
                        &[],
                    )
                    .await?;
                    let mut out = std::io::stdout();
                    writeln!(out, "{WRITTEN}").expect("tell the parent");
                    out.flush().expect("tell the parent");
                    std::future::pending::<()>().await;
                    Ok::<_, CreditError>(42_i64)
                })
            })
            .await;
    });
    std::process::exit(1)
}
