//! Coalesced claims and completions on Postgres: the shared cases of
//! `coalesced`, then what a caller dropped while its step waits or is on the
//! wire leaves (no claim), and a server that is away.
//!
//! A batch is held on the wire by a row another transaction holds: a claim
//! on a key the test inserted without committing waits for that
//! transaction, and so does a completion of a row the test locked.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use idempotent_tools::PostgresStore;
use idempotent_tools::call::{Key, ToolId};
use idempotent_tools::records::Records;
use idempotent_tools::store::postgres::tokio_postgres::{Client, NoTls};
use idempotent_tools::store::{Claim, ClaimAnswer, Completion, Store, StoreError};
use idempotent_tools_testing::conformance::kit::{
    CountingProvider, done, fresh_run, refund_call, refund_key, refunds,
};

use crate::Schema;
use crate::coalesced::{
    self, BatchCounts, LONG, Wire, spawn_claim, tool, until_sent, until_waiting,
};

/// A store that puts one batch of a kind on the wire at a time, and a
/// connection of the test's own that holds rows.
struct Rows {
    store: Arc<PostgresStore>,
    client: Client,
}

impl Rows {
    async fn new(schema: &Schema) -> Rows {
        Rows {
            store: Arc::new(schema.store_with(|b| b.coalesce_in_flight(1)).await),
            client: side(schema).await,
        }
    }
}

impl Wire for Rows {
    type Store = PostgresStore;

    fn store(&self) -> &Arc<PostgresStore> {
        &self.store
    }

    async fn hold_claim(&self, key: &Key) {
        hold_new_key(&self.client, key).await;
    }

    async fn hold_completion(&self, claim: &Claim) {
        lock_row(&self.client, &claim.key).await;
    }

    async fn let_go(&self) {
        let_go(&self.client).await;
    }

    async fn refuse_claim(&self, _: &Key) -> ToolId {
        // Postgres's text holds no NUL: the server refuses this tool's name.
        ToolId::owned("tests::\0refund")
    }

    async fn refuse_completion(&self, _: &Claim) -> Completion {
        // A time the server refuses: before 4713 BC.
        let mut too_old = done("2");
        too_old.completed_at = SystemTime::UNIX_EPOCH
            .checked_sub(Duration::from_secs(7000 * 366 * 24 * 3600))
            .expect("a time before the epoch");
        too_old
    }
}

impl BatchCounts for PostgresStore {
    fn sent(&self) -> u64 {
        self.statements()
    }

    fn waiting(&self) -> usize {
        PostgresStore::waiting(self)
    }
}

/// A connection of the test's own in the schema.
pub(super) async fn side(schema: &Schema) -> Client {
    let (client, connection) = schema.config().connect(NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

/// Inserts a held row for `key` in a transaction left open: a claim on the
/// key waits for it. `let_go` rolls it back.
pub(super) async fn hold_new_key(client: &Client, key: &Key) {
    client.batch_execute("BEGIN").await.expect("begin");
    client
        .execute(
            "INSERT INTO idempotent_claims
                 (key_digest, key_text, tool, fingerprint, state, owner, fence, lease_until,
                  expires_at)
             VALUES ($1, $2, 'other', '\\x00', 'held', '\\x00', 1, now() + interval '1 hour',
                     now() + interval '2 hours')",
            &[&key.digest().as_slice(), &key.as_str()],
        )
        .await
        .expect("insert");
}

/// Locks `key`'s row in a transaction left open: a completion of it waits.
async fn lock_row(client: &Client, key: &Key) {
    client.batch_execute("BEGIN").await.expect("begin");
    let locked = client
        .execute(
            "SELECT 1 FROM idempotent_claims WHERE key_digest = $1 FOR UPDATE",
            &[&key.digest().as_slice()],
        )
        .await
        .expect("lock");
    assert_eq!(locked, 1);
}

pub(super) async fn let_go(client: &Client) {
    client.batch_execute("ROLLBACK").await.expect("rollback");
}

pub(super) async fn each_caller_in_a_coalesced_batch_gets_its_own_answer() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    coalesced::each_caller_in_a_batch_gets_its_own_answer(&Rows::new(&schema).await).await;
}

pub(super) async fn many_guarded_calls_coalesced_act_once_per_key() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    coalesced::many_guarded_calls_act_once_per_key(Rows::new(&schema).await.store).await;
}

pub(super) async fn a_step_the_server_refuses_fails_only_its_caller() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let rows = Rows::new(&schema).await;
    let failed = coalesced::a_step_that_fails_fails_only_its_caller(&rows).await;
    let store = &rows.store;
    assert!(
        store
            .inspect(&failed.claim_of)
            .await
            .expect("inspect")
            .is_none(),
        "the refused claim made no record"
    );
    let record = store
        .inspect(&failed.completion_of.key)
        .await
        .expect("inspect")
        .expect("a record");
    assert!(
        record.result.is_none(),
        "the refused completion wrote nothing"
    );
}

pub(super) async fn a_caller_dropped_while_queued_or_on_the_wire_leaves_no_claim() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let Rows {
        store,
        client: first_row,
    } = Rows::new(&schema).await;
    let second_row = side(&schema).await;
    let run = fresh_run();
    let key = |name: &str| refund_key(&run, name);
    let (d1, d2, queued, in_batch) = (key("d1"), key("d2"), key("queued"), key("in-batch"));
    hold_new_key(&first_row, &d1).await;
    hold_new_key(&second_row, &d2).await;

    let before = store.sent();
    let first = spawn_claim(&store, &d1, &tool(), 42);
    until_sent(&*store, before + 1).await;
    let dropped_queued = spawn_claim(&store, &queued, &tool(), 42);
    let dropped_in_batch = spawn_claim(&store, &in_batch, &tool(), 42);
    let dropped_blocked = spawn_claim(&store, &d2, &tool(), 42);
    until_waiting(&*store, 3).await;
    dropped_queued.abort();
    assert!(dropped_queued.await.expect_err("dropped").is_cancelled());

    // The first batch comes back; the next, with `in-batch` and `d2`, goes
    // and waits on d2's row.
    let_go(&first_row).await;
    assert!(matches!(
        first.await.expect("task").expect("claim"),
        ClaimAnswer::Claimed(_)
    ));
    until_sent(&*store, before + 2).await;
    dropped_in_batch.abort();
    assert!(dropped_in_batch.await.expect_err("dropped").is_cancelled());
    dropped_blocked.abort();
    assert!(dropped_blocked.await.expect_err("dropped").is_cancelled());
    let_go(&second_row).await;
    // The batch made both claims for callers that were gone: once it is
    // back, each is released, by a statement of its own.
    until_sent(&*store, before + 4).await;
    for k in [&in_batch, &d2] {
        while store.inspect(k).await.expect("inspect").is_some() {
            tokio::task::yield_now().await;
        }
    }
    assert!(
        store.inspect(&queued).await.expect("inspect").is_none(),
        "the queued claim never went"
    );
    // And a follow-up with an hour's lease acts at once on each key.
    let shared: Arc<dyn Store> = store.clone();
    let provider = CountingProvider::default();
    for order in ["queued", "in-batch", "d2"] {
        let outcome = refund_call(&shared, &run, order, 42)
            .lease(LONG)
            .wait(Duration::from_secs(5))
            .run(refunds(&provider, 42))
            .await
            .expect("the follow-up");
        assert!(outcome.is_fresh(), "{order}: {outcome:?}");
    }
    assert_eq!(provider.refunds(), 3);
}

pub(super) async fn a_batch_whose_server_is_away_fails_each_caller_once_not_one_by_one() {
    // Port 1 on the loopback: nothing listens there.
    let budget = Duration::from_secs(1);
    let store = Arc::new(
        PostgresStore::builder("postgres://postgres@127.0.0.1:1/test")
            .coalesce_in_flight(1)
            .reconnect_within(budget)
            .connect_lazy()
            .expect("a lazy store"),
    );
    let run = fresh_run();
    let started = std::time::Instant::now();
    let first = spawn_claim(&store, &refund_key(&run, "first"), &tool(), 42);
    let queued = coalesced::spawn_queued(&store, &run, 3);
    tokio::time::timeout(budget * 4, until_waiting(&*store, 3))
        .await
        .expect("the three queue behind the first while it tries");
    coalesced::each_unavailable(std::iter::once(first).chain(queued)).await;
    // The first alone, then the three together: two budgets, not five.
    let took = started.elapsed();
    assert!(took < budget * 4, "took {took:?}");
}

/// A batch the server refuses for one member's input: each member goes
/// again alone, all at once, so the free keys are answered while a member
/// whose key another transaction holds still waits.
pub(super) async fn members_of_a_refused_batch_go_again_alone_at_once() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let rows = Rows::new(&schema).await;
    let store = &rows.store;
    let run = fresh_run();
    let key = |name: &str| refund_key(&run, name);

    let blocker = key("blocker");
    rows.hold_claim(&blocker).await;
    let before = store.sent();
    let on_the_wire = spawn_claim(store, &blocker, &tool(), 42);
    until_sent(&**store, before + 1).await;
    let other = side(&schema).await;
    let locked = key("locked");
    hold_new_key(&other, &locked).await;
    // Postgres's text holds no NUL: the server refuses the whole batch.
    let refused = spawn_claim(
        store,
        &key("refused"),
        &ToolId::owned("tests::\0refund"),
        42,
    );
    let waits = spawn_claim(store, &locked, &tool(), 42);
    let free: Vec<_> = (0..4)
        .map(|i| spawn_claim(store, &key(&format!("free-{i}")), &tool(), 42))
        .collect();
    until_waiting(&**store, 6).await;
    rows.let_go().await;
    assert!(matches!(
        on_the_wire.await.expect("task"),
        Ok(ClaimAnswer::Claimed(_))
    ));

    for task in free {
        let answer = tokio::time::timeout(LONG / 360, task)
            .await
            .expect("a free key is answered while another member waits on a lock")
            .expect("task");
        assert!(matches!(answer, Ok(ClaimAnswer::Claimed(_))), "{answer:?}");
    }
    let refused = refused.await.expect("task");
    assert!(
        matches!(refused, Err(StoreError::Backend(_))),
        "{refused:?}"
    );
    assert!(!waits.is_finished(), "the locked key still waits");
    let_go(&other).await;
    let answer = waits.await.expect("task");
    assert!(matches!(answer, Ok(ClaimAnswer::Claimed(_))), "{answer:?}");
}
