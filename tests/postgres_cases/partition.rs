//! A holder cut off from Postgres mid-action ([`crate::partition`]): its
//! store goes through a black hole, the other caller's straight to the
//! server.

use std::sync::Arc;

use idempotent_tools::call::Takeover;

use crate::Schema;
use crate::partition::{BlackHole, a_holder_cut_off_mid_action};

async fn cut_off_mid_action(takeover: Takeover) {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let hole = BlackHole::to(super::round_trips::upstream(&schema.config())).await;
    let holder = super::outage::through_with(&schema, hole.addr(), |builder| builder).await;
    let other = schema.store().await;
    a_holder_cut_off_mid_action(
        "Postgres",
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
