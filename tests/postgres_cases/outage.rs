//! The server goes away under the store and comes back: a TCP proxy in
//! front of it cuts every connection and turns new ones away, as a restart
//! or a failover does, then lets them through again. A call made meanwhile
//! goes through once the server is back, and nothing runs twice.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use idempotent_tools::store::Store;
use idempotent_tools::store::postgres::PostgresStoreBuilder;
use idempotent_tools::store::postgres::tokio_postgres::Config;
use idempotent_tools_testing::conformance::kit::{
    CountingProvider as Provider, fresh_run, refund_call, refunds,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};

use crate::Schema;

/// A proxy to the server that can be taken down and brought back.
struct Proxy {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    cut: Arc<Notify>,
    /// One permit per connection turned away while down.
    turned_away: Arc<Semaphore>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let up = Arc::new(AtomicBool::new(true));
        let cut = Arc::new(Notify::new());
        let turned_away = Arc::new(Semaphore::new(0));
        let (up_, cut_, turned_away_) = (up.clone(), cut.clone(), turned_away.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if !up_.load(Ordering::SeqCst) {
                    drop(client);
                    turned_away_.add_permits(1);
                    continue;
                }
                let server = TcpStream::connect(upstream).await.expect("upstream");
                let cut = cut_.clone();
                tokio::spawn(async move {
                    let (mut client, mut server) = (client, server);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
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
        }
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
}

pub(super) async fn a_call_made_while_the_server_is_away_goes_through_once_it_is_back() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let config = schema.config();
    let proxy = Proxy::start(super::round_trips::upstream(&config)).await;
    let store = schema
        .store_with(|_| {
            // The same database and settings, through the proxy.
            let mut through = Config::new();
            through.host("127.0.0.1").port(proxy.addr.port());
            if let Some(user) = config.get_user() {
                through.user(user);
            }
            if let Some(dbname) = config.get_dbname() {
                through.dbname(dbname);
            }
            if let Some(options) = config.get_options() {
                through.options(options);
            }
            PostgresStoreBuilder::from_config(through)
                .without_listener()
                .reconnect_within(Duration::from_secs(30))
        })
        .await;
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
