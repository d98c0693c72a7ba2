//! Partitions, for every store on a server: a holder cut off from its
//! store mid-action, its connections kept open but carrying nothing either
//! way (packets dropped, not refused), while another caller asks for the
//! same key.
//!
//! The holder's connections go through a [`BlackHole`], a TCP proxy of the
//! test's own that, cut, neither forwards nor closes anything, and, healed,
//! delivers what it held, as TCP does once a route comes back. The other
//! caller reaches the server directly. The holder's renewals cannot get
//! through, so its lease runs out and the other caller takes over by its
//! policy; when the network comes back the holder's completion reaches the
//! server and is refused by the fence ([`Error::LeaseLost`]). Under
//! `Takeover::Rerun` the stand-in provider deduplicates on the provider key
//! both callers hand it, so it makes one refund; under `Takeover::Verify`
//! the callers hand it no key (a provider that takes none) and the other
//! caller finds the holder's refund by asking the provider.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use idempotent_tools::call::Takeover;
use idempotent_tools::records::Records;
use idempotent_tools::store::Store;
use idempotent_tools::{Error, Verified, current_key};
use idempotent_tools_testing::Provider;
use idempotent_tools_testing::conformance::kit::{
    PATIENCE, RefundError, fresh_run, refund_call, refund_key,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// The lease of both callers: short, so that the case is quick.
pub const LEASE: Duration = Duration::from_secs(1);

/// A TCP proxy to one server that can black-hole every connection through
/// it, open or new, and heal them.
pub struct BlackHole {
    addr: SocketAddr,
    open: watch::Sender<bool>,
    accepting: tokio::task::JoinHandle<()>,
}

impl BlackHole {
    /// A proxy on a free loopback port, forwarding to `upstream`.
    pub async fn to(upstream: SocketAddr) -> BlackHole {
        BlackHole::start(SocketAddr::from(([127, 0, 0, 1], 0)), upstream).await
    }

    /// A proxy listening on `listen`, forwarding to `upstream`.
    pub async fn start(listen: SocketAddr, upstream: SocketAddr) -> BlackHole {
        let listener = TcpListener::bind(listen).await.expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let (open, gate) = watch::channel(true);
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                // Connected at once, so that a connection made while cut
                // is there when the network comes back.
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let (from_client, to_client) = client.into_split();
                let (from_server, to_server) = server.into_split();
                tokio::spawn(pump(from_client, to_server, gate.clone()));
                tokio::spawn(pump(from_server, to_client, gate.clone()));
            }
        });
        BlackHole {
            addr,
            open,
            accepting,
        }
    }

    /// Where the proxy listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// From now on, nothing goes through either way, and nothing closes.
    pub fn cut(&self) {
        self.open.send_replace(false);
    }

    /// Delivers what was held, and forwards again.
    pub fn heal(&self) {
        self.open.send_replace(true);
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Copies one direction of a connection while the gate is open. Bytes read
/// just as it shuts are held until it opens again, and so is a close.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut gate: watch::Receiver<bool>) {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        if gate.wait_for(|open| *open).await.is_err() {
            return;
        }
        let read = from.read(&mut buf).await;
        if gate.wait_for(|open| *open).await.is_err() {
            return;
        }
        match read {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// How long the steps of a partition took.
#[derive(Debug, Clone, Copy)]
pub struct Took {
    /// From the cut to the end of the holder's lease, as the store last
    /// renewed it.
    pub lease_left: Duration,
    /// From the end of the holder's lease to the other caller's answer: it
    /// took over.
    pub taken_over: Duration,
    /// From the heal to the holder's call ending with its completion
    /// refused.
    pub refused: Duration,
}

/// Order 1182 refunded at `provider`: under the acting key's provider key,
/// unless the policy verifies, for a provider that takes no key.
async fn refund_under_the_key(
    provider: &Provider,
    takeover: Takeover,
) -> Result<idempotent_tools_testing::Refund, RefundError> {
    let key = current_key().expect("the action runs under its key");
    let key = (takeover != Takeover::Verify).then(|| key.provider_key().into_owned());
    provider
        .refund("1182", 42, key.as_deref())
        .await
        .map_err(|e| RefundError::Declined(e.to_string()))
}

/// The refund call of both callers: verified by listing the order's
/// refunds at `provider` when the policy says so.
fn call_with(
    store: &Arc<dyn Store>,
    run: &idempotent_tools::Run,
    takeover: Takeover,
    provider: &Provider,
) -> idempotent_tools::call::Call {
    let call = refund_call(store, run, "1182", 42)
        .lease(LEASE)
        .takeover(takeover);
    if takeover != Takeover::Verify {
        return call;
    }
    let provider = provider.clone();
    call.verify(move |_key| {
        let found = provider
            .refunds()
            .into_iter()
            .find(|r| r.order_id == "1182");
        std::future::ready(match found {
            Some(refund) => Verified::Applied(refund),
            None => Verified::NotApplied,
        })
    })
}

/// The holder refunds through `holder` (whose connections go through
/// `cut_off`, and nothing else does) and, having acted, is cut off; another
/// caller asks for the same key through `other`, both with `takeover` as
/// their policy and a [`LEASE`]. Asserts what each caller and the provider
/// see, prints the figures (`measured: ...`, naming `store`) and returns
/// them.
pub async fn a_holder_cut_off_mid_action<S: Records + 'static>(
    store: &str,
    holder: Arc<dyn Store>,
    other: Arc<S>,
    cut_off: &[BlackHole],
    takeover: Takeover,
) -> Took {
    let records = other.clone();
    let other: Arc<dyn Store> = other;
    let provider = Provider::with_delay(Duration::ZERO);
    let run = fresh_run();
    let (acted, finish, ended) = (
        Arc::new(Notify::new()),
        Arc::new(Notify::new()),
        Arc::new(Notify::new()),
    );
    let mut holding = {
        let call = call_with(&holder, &run, takeover, &provider);
        let (provider, acted, finish, ended) = (
            provider.clone(),
            acted.clone(),
            finish.clone(),
            ended.clone(),
        );
        tokio::spawn(async move {
            call.run(async move {
                let refund = refund_under_the_key(&provider, takeover).await;
                acted.notify_one();
                finish.notified().await;
                ended.notify_one();
                refund
            })
            .await
        })
    };
    tokio::select! {
        () = acted.notified() => {}
        ended = &mut holding => panic!("the holder ended before it acted: {ended:?}"),
        () = tokio::time::sleep(PATIENCE) => panic!("the holder did not act"),
    }

    // The holder acted; the network between it and its store goes.
    let cut = Instant::now();
    let cut_at = SystemTime::now();
    cut_off.iter().for_each(BlackHole::cut);
    // When the lease ends, by the store's clock (on this host, the same).
    let lease_until = records
        .inspect(&refund_key(&run, "1182"))
        .await
        .expect("inspect")
        .and_then(|record| record.lease_until)
        .expect("the holder's claim, under a lease");
    let lease_left = lease_until.duration_since(cut_at).unwrap_or_default();
    let answer = tokio::time::timeout(
        PATIENCE,
        call_with(&other, &run, takeover, &provider)
            .wait(PATIENCE)
            .run(refund_under_the_key(&provider, takeover)),
    )
    .await
    .expect("the other caller's answer, once the holder's lease ran out");
    let taken_over = cut.elapsed().saturating_sub(lease_left);

    // The holder's action ends while it is cut off: its completion goes
    // into the black hole, and the call waits on it.
    finish.notify_one();
    tokio::time::timeout(PATIENCE, ended.notified())
        .await
        .expect("the holder's action ends");
    assert!(
        !holding.is_finished(),
        "the cut-off holder's call ended before the network came back: {:?}",
        holding.await
    );
    let healed = Instant::now();
    cut_off.iter().for_each(BlackHole::heal);
    let stale = tokio::time::timeout(PATIENCE, holding)
        .await
        .expect("the holder's call ends once the network is back")
        .expect("the holder's task");
    let refused = healed.elapsed();
    let stale = stale.expect_err("the cut-off holder's completion is refused");
    let stale = stale.guard().expect("a guard error");
    assert!(matches!(stale, Error::LeaseLost { .. }), "{stale:?}");
    assert_eq!(stale.action_ran(), Some(true));

    let again = call_with(&other, &run, takeover, &provider)
        .run(refund_under_the_key(&provider, takeover))
        .await;
    match takeover {
        Takeover::ReportUnknown => {
            for answer in [answer, again] {
                let err = answer.expect_err("the outcome is unknown");
                let err = err.guard().expect("a guard error");
                assert!(matches!(err, Error::UnknownOutcome { .. }), "{err:?}");
            }
            assert_eq!(provider.calls_received(), 1, "the taker did not act");
        }
        Takeover::Verify => {
            let answer = answer.expect("the holder's refund, found by asking the provider");
            let again = again.expect("a repeat");
            for outcome in [answer, again] {
                assert!(outcome.is_replay(), "{outcome:?}");
                let refund = outcome.into_value().expect("a refund");
                assert_eq!(refund.id, "re_1", "the holder's refund");
            }
            assert_eq!(provider.calls_received(), 1, "only the holder acted");
        }
        _ => {
            let answer = answer.expect("the other caller's refund");
            assert!(answer.is_fresh(), "it took over and acted: {answer:?}");
            let again = again.expect("a repeat");
            assert!(again.is_replay(), "{again:?}");
            for outcome in [answer, again] {
                let refund = outcome.into_value().expect("a refund");
                assert_eq!(refund.id, "re_1", "the holder's refund, found by its key");
            }
            assert_eq!(
                provider.calls_received(),
                2,
                "the holder and the other caller acted"
            );
            let keys: Vec<_> = provider.received().into_iter().map(|r| r.key).collect();
            assert_eq!(keys[0], keys[1], "under one provider key");
        }
    }
    assert_eq!(provider.refunds_on_file(), 1, "one refund");

    let took = Took {
        lease_left,
        taken_over,
        refused,
    };
    println!(
        "measured: {store}, {takeover:?}, lease {LEASE:?}: the lease ran out {:?} after the cut; \
         the other caller answered {:?} after that; the cut-off holder's completion was refused \
         {:?} after the heal",
        took.lease_left, took.taken_over, took.refused
    );
    took
}
