//! A holder cut off from Redis mid-action ([`crate::partition`]): its store
//! goes through a black hole, the other caller's straight to the server.

use std::sync::Arc;

use idempotent_tools::RedisStore;
use idempotent_tools::call::Takeover;
use idempotent_tools::store::redis::redis;

use crate::Prefixed;
use crate::partition::{BlackHole, a_holder_cut_off_mid_action};

async fn cut_off_mid_action(takeover: Takeover) {
    let Some(place) = Prefixed::new() else {
        return;
    };
    let info = redis::parse_redis_url(&place.url).expect("a Redis URL");
    let server = format!(
        "{}:{}",
        info.host_str().expect("a host"),
        info.port().unwrap_or(6379)
    );
    let upstream = tokio::net::lookup_host(server)
        .await
        .ok()
        .and_then(|mut addrs| addrs.next())
        .expect("the server's address");
    let hole = BlackHole::to(upstream).await;
    let mut through = info.clone();
    through.set_host(Some("127.0.0.1")).expect("host");
    through.set_port(Some(hole.addr().port())).expect("port");
    let holder = RedisStore::builder(through.as_str())
        .prefix(place.prefix.as_str())
        .connect()
        .await
        .expect("a store through the proxy");
    let other = place.store().await;
    a_holder_cut_off_mid_action(
        "Redis",
        Arc::new(holder),
        Arc::new(other),
        &[hole],
        takeover,
    )
    .await;
}

/// The other caller takes over and acts again under the same provider key:
/// one refund; the holder's completion is refused by the fence.
pub(super) async fn a_holder_cut_off_mid_action_loses_its_claim_and_the_provider_refunds_once() {
    cut_off_mid_action(Takeover::Rerun).await;
}

/// Under `Takeover::ReportUnknown` the other caller reports the outcome
/// unknown and does not act.
pub(super) async fn a_holder_cut_off_mid_action_leaves_the_outcome_unknown_under_report_unknown() {
    cut_off_mid_action(Takeover::ReportUnknown).await;
}

/// Under `Takeover::Verify`, with a provider that takes no key, the other
/// caller asks the provider, finds the holder's refund and replays it.
pub(super) async fn a_holder_cut_off_mid_action_is_verified_where_the_provider_takes_no_key() {
    cut_off_mid_action(Takeover::Verify).await;
}
