//! Replays answered at once ([`Store::replay_at_once`]): where a store
//! offers them, they agree with what a claim would answer, and never
//! replay what a claim would not.

use std::sync::Arc;
use std::time::Duration;

use super::case::{Case, case};
use super::kit::{TOOL, claimed, finished, fresh_run, refund_key, request, usd};
use crate::store::ClaimAnswer;
use crate::{Finished, Store, ToolId};

pub(super) fn cases() -> Vec<Case> {
    vec![case!(a_replay_answered_at_once_agrees_with_the_claim, [])]
}

async fn a_replay_answered_at_once_agrees_with_the_claim(store: Arc<dyn Store>) {
    let run = fresh_run();
    let key = refund_key(&run, "1182");
    let at_once =
        |tool: &ToolId, amount: u64| replayed_at_once(&*store, key.as_str(), tool, amount);
    assert!(at_once(&TOOL, 42).is_none(), "nothing was asked yet");

    let claim = claimed(&*store, request(&key, Duration::from_secs(30))).await;
    assert!(
        at_once(&TOOL, 42).is_none(),
        "a held claim is in flight, not finished"
    );
    store
        .complete(&claim, finished(r#"{"refund":"re_1"}"#))
        .await
        .expect("complete");

    // Lending nothing is always a correct answer; a record lent must be the
    // claim's.
    if let Some(found) = at_once(&TOOL, 42) {
        let answered = store
            .claim(request(&key, Duration::from_secs(30)))
            .await
            .expect("claim");
        let ClaimAnswer::Completed(recorded) = answered else {
            panic!("the claim must replay what was answered at once, got {answered:?}");
        };
        assert_eq!(found.ending, recorded.ending);
        assert_eq!(
            found.value.to_json().expect("json"),
            recorded.value.to_json().expect("json")
        );
    }
    assert!(
        at_once(&TOOL, 41).is_none(),
        "other arguments are a conflict, never a replay"
    );
    assert!(
        at_once(&ToolId::new("shop::cancel_order"), 42).is_none(),
        "another tool is a conflict, never a replay"
    );

    // A record past its retention is acted again, never replayed.
    let gone = refund_key(&run, "1183");
    let mut expiring = request(&gone, Duration::from_secs(30));
    expiring.retention = Duration::ZERO;
    let claim = claimed(&*store, expiring).await;
    store
        .complete(&claim, finished(r#"{"refund":"re_2"}"#))
        .await
        .expect("complete");
    assert!(
        replayed_at_once(&*store, gone.as_str(), &TOOL, 42).is_none(),
        "a record past its retention is not replayed"
    );
}

/// What the store lends [`Store::replay_at_once`]'s visitor, cloned, and
/// checked to be lent at most once.
fn replayed_at_once(store: &dyn Store, key: &str, tool: &ToolId, amount: u64) -> Option<Finished> {
    let mut lent = Vec::new();
    store.replay_at_once(key, tool, usd(amount), &mut |finished| {
        lent.push(finished.clone());
    });
    assert!(
        lent.len() <= 1,
        "a record is lent at most once, not {} times",
        lent.len()
    );
    lent.pop()
}
