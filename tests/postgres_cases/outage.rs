//! The server goes away under the store and comes back: a TCP proxy in
//! front of it cuts every connection and turns new ones away, as a restart
//! or a failover does, then lets them through again. A call made meanwhile
//! goes through once the server is back, and nothing runs twice.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use idempotent_tools::PostgresStore;
use idempotent_tools::records::Records;
use idempotent_tools::store::postgres::PostgresStoreBuilder;
use idempotent_tools::store::postgres::tokio_postgres::Config;
use idempotent_tools::store::{ClaimAnswer, Store};
use idempotent_tools_testing::conformance::kit::{
    self, CountingProvider as Provider, PATIENCE, RefundError, fresh_run, refund_call, refund_key,
    refunds, request,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};

use crate::Schema;
use crate::coalesced;

/// A proxy to the server that can be taken down and brought back.
struct Proxy {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    cut: Arc<Notify>,
    /// One permit per connection turned away while down.
    turned_away: Arc<Semaphore>,
    /// How many replies to a statement's execution go through before one is
    /// dropped and its connection cut, plus one; 0 when none is to be.
    swallow: Arc<AtomicUsize>,
    swallowed: Arc<Notify>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let up = Arc::new(AtomicBool::new(true));
        let cut = Arc::new(Notify::new());
        let turned_away = Arc::new(Semaphore::new(0));
        let (swallow, swallowed) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let (up_, cut_, turned_away_) = (up.clone(), cut.clone(), turned_away.clone());
        let (swallow_, swallowed_) = (swallow.clone(), swallowed.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if !up_.load(Ordering::SeqCst) {
                    drop(client);
                    turned_away_.add_permits(1);
                    continue;
                }
                let server = TcpStream::connect(upstream).await.expect("upstream");
                let (cut, swallow, swallowed) =
                    (cut_.clone(), swallow_.clone(), swallowed_.clone());
                tokio::spawn(async move {
                    let (mut from_client, mut to_client) = client.into_split();
                    let (mut from_server, mut to_server) = server.into_split();
                    let replies = async {
                        let mut buf = vec![0u8; 1 << 16];
                        loop {
                            let n = match from_server.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            // An execution's reply begins with `BindComplete`
                            // ('2'); a statement's preparation, with '1'.
                            if buf[0] == b'2'
                                && swallow.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                                    n.checked_sub(1)
                                }) == Ok(1)
                            {
                                swallowed.notify_one();
                                return;
                            }
                            if to_client.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    };
                    tokio::select! {
                        _ = tokio::io::copy(&mut from_client, &mut to_server) => {}
                        () = replies => {}
                        () = cut.notified() => {}
                    }
                });
            }
        });
        Proxy {
            addr,
            up,
            cut,
            turned_away,
            swallow,
            swallowed,
        }
    }

    /// Drops the `nth` reply to a statement's execution from now (1: the
    /// next), which the server ran, and cuts its connection: a reply lost on
    /// the way back.
    fn swallow_reply(&self, nth: usize) {
        self.swallow.store(nth, Ordering::SeqCst);
    }

    /// Closes every connection and turns new ones away.
    fn down(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cut.notify_waiters();
    }

    /// Lets connections through again.
    fn up(&self) {
        self.up.store(true, Ordering::SeqCst);
    }

    /// Returns once `tries` more connections were turned away: a step that
    /// keeps trying while the server is away.
    async fn turned_away(&self, tries: u32) {
        let turned_away = tokio::time::timeout(PATIENCE, self.turned_away.acquire_many(tries))
            .await
            .expect("the step tries again while the server is away")
            .expect("the proxy lives");
        turned_away.forget();
    }
}

/// A store of its own in `schema`, through `proxy`, without a listener (so
/// that every connection the proxy turns away is a step's).
async fn through(schema: &Schema, proxy: &Proxy) -> PostgresStore {
    through_within(schema, proxy, PATIENCE).await
}

/// [`through`], its steps trying again over a broken connection for
/// `reconnect_within`.
async fn through_within(
    schema: &Schema,
    proxy: &Proxy,
    reconnect_within: Duration,
) -> PostgresStore {
    through_with(schema, proxy.addr, |builder| {
        builder.reconnect_within(reconnect_within)
    })
    .await
}

/// A store of its own in `schema`, through the proxy at `proxy`, without a
/// listener, with the builder's options set by `options`.
pub(super) async fn through_with(
    schema: &Schema,
    proxy: SocketAddr,
    options: impl FnOnce(PostgresStoreBuilder) -> PostgresStoreBuilder,
) -> PostgresStore {
    let config = schema.config();
    schema
        .store_with(|_| {
            // The same database and settings, through the proxy.
            let mut through = Config::new();
            through.host("127.0.0.1").port(proxy.port());
            if let Some(user) = config.get_user() {
                through.user(user);
            }
            if let Some(dbname) = config.get_dbname() {
                through.dbname(dbname);
            }
            if let Some(options) = config.get_options() {
                through.options(options);
            }
            options(PostgresStoreBuilder::from_config(through).without_listener())
        })
        .await
}

pub(super) async fn a_call_made_while_the_server_is_away_goes_through_once_it_is_back() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let proxy = Proxy::start(super::round_trips::upstream(&schema.config())).await;
    let store = through(&schema, &proxy).await;
    let store: Arc<dyn Store> = Arc::new(store);
    let provider = Arc::new(Provider::default());
    let run = fresh_run();
    let first = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("the first refund");
    assert!(first.is_fresh());

    proxy.down();
    let mut later = tokio::spawn({
        let (store, run, provider) = (store.clone(), run.clone(), provider.clone());
        async move {
            refund_call(&store, &run, "1183", 42)
                .run(refunds(&provider, 42))
                .await
        }
    });
    // The call finds the server away at least once, and keeps trying.
    tokio::select! {
        turned_away = proxy.turned_away.acquire() => {
            turned_away.expect("a connection turned away").forget();
        }
        ended = &mut later => panic!("the call ended while the server was away: {ended:?}"),
    }
    proxy.up();

    let later = later
        .await
        .expect("the task")
        .expect("the call, once the server is back");
    assert!(later.is_fresh());
    let again = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("a repeat, after the outage");
    assert!(again.is_replay());
    assert_eq!(provider.refunds(), 2, "one refund per order");
}

/// Calls (and a bare claim step) dropped while they retry on a server that
/// is away, at the pause between tries: nothing stays claimed, and a
/// result made before the drop is kept. Once the server is back, a new call
/// acts once, and a repeat replays. Each scenario has its own proxy, so
/// that the connections turned away are its own.
pub(super) async fn a_call_dropped_while_its_steps_retry_leaves_no_claim_stuck_and_no_result_lost()
{
    let Some(schema) = Schema::new().await else {
        return;
    };
    let upstream = super::round_trips::upstream(&schema.config());
    let proxies = [
        Proxy::start(upstream).await,
        Proxy::start(upstream).await,
        Proxy::start(upstream).await,
    ];
    let [completing, claiming, bare] = [
        Arc::new(through(&schema, &proxies[0]).await),
        Arc::new(through(&schema, &proxies[1]).await),
        Arc::new(through(&schema, &proxies[2]).await),
    ];
    let provider = Arc::new(Provider::default());
    let run = fresh_run();

    // An action that runs while the server is there and ends once it is away.
    let (entered, finish) = (Notify::new(), Notify::new());
    let store: Arc<dyn Store> = completing.clone();
    {
        let call = refund_call(&store, &run, "completed-away", 42)
            .lease(PATIENCE)
            .run(async {
                entered.notify_one();
                finish.notified().await;
                Ok::<_, RefundError>(provider.refund("completed-away", 42))
            });
        tokio::pin!(call);
        tokio::select! {
            ended = &mut call => panic!("the call ended before its action did: {ended:?}"),
            () = entered.notified() => {}
        }
        proxies.iter().for_each(Proxy::down);
        finish.notify_one();
        tokio::select! {
            ended = &mut call => panic!("the call ended while the server was away: {ended:?}"),
            () = proxies[0].turned_away(2) => {}
        }
        // Dropped here, its completion trying again.
    }

    // A call whose claim finds the server away, dropped while it retries.
    let store: Arc<dyn Store> = claiming.clone();
    {
        let call = refund_call(&store, &run, "claimed-away", 42).run(refunds(&provider, 42));
        tokio::pin!(call);
        tokio::select! {
            ended = &mut call => panic!("the call ended while the server was away: {ended:?}"),
            () = proxies[1].turned_away(2) => {}
        }
    }

    // The claim step itself, dropped while it retries, with an hour's
    // lease: a claim left held would block the key for that long.
    let key = refund_key(&run, "step-dropped");
    let hour = Duration::from_secs(3600);
    {
        let step = bare.claim(request(&key, hour));
        tokio::select! {
            ended = step => panic!("the claim ended while the server was away: {ended:?}"),
            () = proxies[2].turned_away(2) => {}
        }
    }

    proxies.iter().for_each(Proxy::up);
    let claimed = refund_call(&store, &run, "claimed-away", 42)
        .wait(PATIENCE)
        .run(refunds(&provider, 42))
        .await
        .expect("a new call, once the server is back");
    assert!(claimed.is_fresh(), "{claimed:?}");
    let store: Arc<dyn Store> = completing.clone();
    let kept = refund_call(&store, &run, "completed-away", 42)
        .wait(PATIENCE)
        .run(refunds(&provider, 42))
        .await
        .expect("a repeat of the call whose completion was retrying");
    assert!(
        kept.is_replay(),
        "the result made before the drop is kept: {kept:?}"
    );
    // The dropped step's batch goes on trying on its own task; a claim it
    // makes once the server is back, for a caller that has gone, is
    // released at once, not at the end of its hour.
    let reclaimed = tokio::time::timeout(PATIENCE, async {
        loop {
            match bare.claim(request(&key, PATIENCE)).await {
                Ok(ClaimAnswer::InFlight(_)) => {
                    while bare.inspect(&key).await.expect("inspect").is_some() {
                        tokio::task::yield_now().await;
                    }
                }
                other => return other,
            }
        }
    })
    .await
    .expect("a claim step dropped while the server was away leaves nothing held");
    assert!(
        matches!(reclaimed, Ok(ClaimAnswer::Claimed(_))),
        "{reclaimed:?}"
    );
    assert_eq!(provider.refunds(), 2, "one refund per order");
}

/// A completion whose server stays away past the lease: it is tried again
/// until the lease would run out, then the call says the result was not
/// recorded, and that the action ran.
pub(super) async fn a_completion_whose_server_stays_away_past_the_lease_is_not_recorded_and_says_the_action_ran()
 {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let proxy = Proxy::start(super::round_trips::upstream(&schema.config())).await;
    let store: Arc<dyn Store> =
        Arc::new(through_within(&schema, &proxy, Duration::from_millis(50)).await);
    let provider = Arc::new(Provider::default());
    kit::not_recorded_once_down(&store, &provider, || proxy.down()).await;
}

/// A claim whose reply is lost after the server made it: the statement runs
/// again on another connection and finds the claim its own by its owner
/// token, instead of waiting for its own lease to run out.
pub(super) async fn a_claim_whose_reply_was_lost_finds_its_claim_its_own_when_sent_again() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let proxy = Proxy::start(super::round_trips::upstream(&schema.config())).await;
    let store = through(&schema, &proxy).await;
    let run = fresh_run();
    let key = refund_key(&run, "reply-lost");
    proxy.swallow_reply(1);
    let hour = Duration::from_secs(3600);
    let answer = tokio::time::timeout(PATIENCE, store.claim(request(&key, hour)))
        .await
        .expect("the claim answers at once")
        .expect("the claim");
    tokio::time::timeout(PATIENCE, proxy.swallowed.notified())
        .await
        .expect("the first reply was lost");
    let ClaimAnswer::Claimed(claim) = answer else {
        panic!("the claim is the caller's own: {answer:?}");
    };
    assert_eq!(claim.fence, 1, "one claim, made once");
    store
        .complete(&claim, kit::done("1"))
        .await
        .expect("the claim completes under its fence");
}

/// The same for a batch of claims: the batch's reply is lost, the statement
/// runs again on another connection, and each member finds its claim its
/// own.
pub(super) async fn a_batch_whose_reply_was_lost_finds_each_claim_its_own_when_sent_again() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let proxy = Proxy::start(super::round_trips::upstream(&schema.config())).await;
    let store = Arc::new(
        through_with(&schema, proxy.addr, |builder| {
            builder.reconnect_within(PATIENCE).coalesce_in_flight(1)
        })
        .await,
    );
    let side = super::batch::side(&schema).await;
    let run = fresh_run();
    let blocker = refund_key(&run, "blocker");
    super::batch::hold_new_key(&side, &blocker).await;
    let before = store.statements();
    let on_the_wire = coalesced::spawn_claim(&store, &blocker, &coalesced::tool(), 42);
    coalesced::until_sent(&*store, before + 1).await;
    let queued = coalesced::spawn_queued(&store, &run, 3);
    coalesced::until_waiting(&*store, 3).await;
    // The claim on the wire is answered; the batch's reply, the next, is
    // lost.
    proxy.swallow_reply(2);
    super::batch::let_go(&side).await;
    let answer = on_the_wire.await.expect("task");
    assert!(matches!(answer, Ok(ClaimAnswer::Claimed(_))), "{answer:?}");
    for task in queued {
        let answer = tokio::time::timeout(PATIENCE, task)
            .await
            .expect("the batch answers at once")
            .expect("task");
        let Ok(ClaimAnswer::Claimed(claim)) = answer else {
            panic!("each claim is the caller's own: {answer:?}");
        };
        assert_eq!(claim.fence, 1, "one claim, made once");
    }
    tokio::time::timeout(PATIENCE, proxy.swallowed.notified())
        .await
        .expect("the batch's first reply was lost");
}
