//! What an operator reads and resolves, the same on every store: records
//! listed by state, tool, run and age, page by page; one record in full;
//! counts by tool and state; forgetting, which refuses a live claim unless
//! forced.
//!
//! Every listing filters on the case's fresh run, so cases never see each
//! other's records. A store that does not offer a step
//! (`StoreError::Unsupported`) has the case reported ignored.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::Case;
use super::case::case;
use super::kit::{fresh_run, offered, refund_key, usd};
use idempotent_tools::records::Records;
use idempotent_tools::{
    Run,
    call::{Key, ToolId},
    records::{Forget, RecordQuery, RecordState},
    store::{Claim, ClaimAnswer, ClaimRequest, Completion, RecordValue, Store, StoreError},
};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(records_are_listed_by_state_tool_and_run, [], records),
        case!(
            a_run_matches_its_keys_exactly_and_a_prefix_by_their_start,
            [],
            records
        ),
        case!(a_listing_pages_through_every_record_once, [], records),
        case!(
            an_age_filter_keeps_only_records_that_changed_long_enough_ago,
            [],
            records
        ),
        case!(one_record_reads_in_full, [], records),
        case!(counts_are_by_tool_and_state, [], records),
        case!(forgetting_refuses_a_live_claim_unless_forced, [], records),
    ]
}

static REFUND: ToolId = ToolId::new("shop::refund_order");
static CANCEL: ToolId = ToolId::new("shop::cancel_order");

fn request<'a>(key: &'a Key, tool: &'a ToolId) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        tool,
        fingerprint: usd(42),
        lease: Duration::from_secs(30),
        retention: Duration::from_secs(3600),
    }
}

async fn claim(store: &dyn Store, key: &Key, tool: &ToolId) -> Claim {
    match store.claim(request(key, tool)).await.expect("claim") {
        ClaimAnswer::Claimed(claim) => claim,
        other => panic!("expected to hold the claim, got {other:?}"),
    }
}

async fn finish(store: &dyn Store, key: &Key, tool: &ToolId, ending: RecordState, json: &str) {
    finish_at(store, key, tool, ending, json, SystemTime::now()).await;
}

async fn finish_at(
    store: &dyn Store,
    key: &Key,
    tool: &ToolId,
    state: RecordState,
    json: &str,
    at: SystemTime,
) {
    let claim = claim(store, key, tool).await;
    let completion = Completion {
        state,
        value: RecordValue::from_json(json),
        completed_at: at,
    };
    store.complete(&claim, completion).await.expect("complete");
}

/// One record of each state, two tools, under a fresh run: held
/// (`a-held`), done (`b-done`), unknown (`c-unknown`), recorded error
/// (`d-error`, of the other tool).
async fn one_of_each(store: &dyn Store) -> (Run, Claim) {
    let run = fresh_run();
    let held = claim(store, &refund_key(&run, "a-held"), &REFUND).await;
    finish(
        store,
        &refund_key(&run, "b-done"),
        &REFUND,
        RecordState::Done,
        r#"{"id":"re_1"}"#,
    )
    .await;
    finish(
        store,
        &refund_key(&run, "c-unknown"),
        &REFUND,
        RecordState::Unknown,
        "null",
    )
    .await;
    finish(
        store,
        &refund_key(&run, "d-error"),
        &CANCEL,
        RecordState::Failed,
        r#""declined""#,
    )
    .await;
    (run, held)
}

fn keys(page: &idempotent_tools::records::RecordPage) -> Vec<String> {
    page.records
        .iter()
        .map(|r| r.key.as_str().to_owned())
        .collect()
}

async fn records_are_listed_by_state_tool_and_run(records: Arc<dyn Records>) {
    let store: Arc<dyn Store> = records.clone();
    let (run, _held) = one_of_each(&*store).await;
    let other_run = fresh_run();
    finish(
        &*store,
        &refund_key(&other_run, "b-done"),
        &REFUND,
        RecordState::Done,
        "1",
    )
    .await;
    let mine = RecordQuery::new().run(run.as_str());

    let all = offered(records.list(&mine).await);
    let expect = ["a-held", "b-done", "c-unknown", "d-error"]
        .map(|order| refund_key(&run, order).as_str().to_owned());
    assert_eq!(keys(&all), expect);
    assert!(all.next.is_none());

    for (state, order) in [
        (RecordState::Held, "a-held"),
        (RecordState::Done, "b-done"),
        (RecordState::Unknown, "c-unknown"),
        (RecordState::Failed, "d-error"),
    ] {
        let page = offered(records.list(&mine.clone().state(state)).await);
        assert_eq!(keys(&page), [refund_key(&run, order).as_str()], "{state}");
        assert_eq!(page.records[0].state, state);
    }
    let cancels = offered(records.list(&mine.clone().tool(CANCEL.as_str())).await);
    assert_eq!(keys(&cancels), [refund_key(&run, "d-error").as_str()]);
    assert_eq!(cancels.records[0].tool, CANCEL);
}

async fn a_run_matches_its_keys_exactly_and_a_prefix_by_their_start(records: Arc<dyn Records>) {
    let store: Arc<dyn Store> = records.clone();
    // `run-..-p7` and `run-..-p70`: one run's id begins the other's.
    let base = format!("{}-p7", fresh_run().as_str());
    let seven = Run::new(base.as_str()).expect("a run id");
    let seventy = Run::new(format!("{base}0")).expect("a run id");
    let alone = Key::builder()
        .part("run", &seven)
        .and_then(|b| b.finish())
        .expect("a key that is its run alone");
    for key in [
        refund_key(&seven, "1182"),
        refund_key(&seventy, "1182"),
        alone.clone(),
    ] {
        finish(&*store, &key, &REFUND, RecordState::Done, "1").await;
    }

    let run = offered(records.list(&RecordQuery::new().run(seven.as_str())).await);
    assert_eq!(
        keys(&run),
        [alone.as_str(), refund_key(&seven, "1182").as_str()],
        "the run `{base}` never lists the run `{base}0`"
    );
    let run = offered(
        records
            .list(&RecordQuery::new().run(seventy.as_str()))
            .await,
    );
    assert_eq!(keys(&run), [refund_key(&seventy, "1182").as_str()]);

    let prefix = offered(records.list(&RecordQuery::new().key_prefix(&base)).await);
    assert_eq!(
        keys(&prefix),
        [
            alone.as_str(),
            refund_key(&seventy, "1182").as_str(),
            refund_key(&seven, "1182").as_str(),
        ],
        "a key prefix matches every key that begins with it, in the order of the keys' text"
    );
    let both = RecordQuery::new()
        .run(seven.as_str())
        .key_prefix(format!("{base}:refund:"));
    let both = offered(records.list(&both).await);
    assert_eq!(keys(&both), [refund_key(&seven, "1182").as_str()]);
}

async fn a_listing_pages_through_every_record_once(records: Arc<dyn Records>) {
    let store: Arc<dyn Store> = records.clone();
    let run = fresh_run();
    let mut expect = Vec::new();
    for n in 0..7 {
        let key = refund_key(&run, &format!("order-{n}"));
        finish(&*store, &key, &REFUND, RecordState::Done, "1").await;
        expect.push(key.as_str().to_owned());
    }
    let mut seen = Vec::new();
    let mut query = RecordQuery::new().run(run.as_str()).limit(3);
    let mut pages = 0;
    loop {
        let page = offered(records.list(&query).await);
        pages += 1;
        assert!(page.records.len() <= 3);
        seen.extend(keys(&page));
        match page.next {
            Some(next) => query = query.after(next),
            None => break,
        }
    }
    assert_eq!(seen, expect);
    assert_eq!(pages, 3);
}

async fn an_age_filter_keeps_only_records_that_changed_long_enough_ago(records: Arc<dyn Records>) {
    let store: Arc<dyn Store> = records.clone();
    let (run, _held) = one_of_each(&*store).await;
    let two_hours_ago = SystemTime::now() - Duration::from_secs(2 * 3600);
    let old = refund_key(&run, "e-old");
    finish_at(
        &*store,
        &old,
        &REFUND,
        RecordState::Unknown,
        "null",
        two_hours_ago,
    )
    .await;
    let mine = RecordQuery::new().run(run.as_str());

    // Completion two hours ago; the rest just now, and the held claim's
    // lease is live, so it has no age yet.
    let an_hour = offered(
        records
            .list(&mine.clone().older_than(Duration::from_secs(3600)))
            .await,
    );
    assert_eq!(keys(&an_hour), [old.as_str()]);
    let three_hours = offered(
        records
            .list(&mine.older_than(Duration::from_secs(3 * 3600)))
            .await,
    );
    assert!(three_hours.records.is_empty(), "{:?}", keys(&three_hours));
}

async fn one_record_reads_in_full(records: Arc<dyn Records>) {
    let store: Arc<dyn Store> = records.clone();
    let (run, held) = one_of_each(&*store).await;
    let done = offered(records.inspect(&refund_key(&run, "b-done")).await).expect("a record");
    assert_eq!(done.key, refund_key(&run, "b-done"));
    assert_eq!(done.tool, REFUND);
    assert_eq!(done.state, RecordState::Done);
    assert_eq!(done.fence, 1);
    assert!(done.owner.is_none());
    let result = done
        .result
        .expect("a result")
        .to_json()
        .expect("json")
        .into_owned();
    assert_eq!(result, r#"{"id":"re_1"}"#);
    assert!(done.completed_at.is_some());
    assert!(done.expires_at.is_some_and(|at| at > SystemTime::now()));

    let claimed = offered(records.inspect(&refund_key(&run, "a-held")).await).expect("a record");
    assert_eq!(claimed.state, RecordState::Held);
    assert_eq!(claimed.owner, Some(held.owner));
    assert_eq!(claimed.fence, held.fence);
    assert!(claimed.result.is_none());
    assert!(claimed.lease_is_live(SystemTime::now()));

    let missing = offered(records.inspect(&refund_key(&run, "never")).await);
    assert!(missing.is_none());
}

async fn counts_are_by_tool_and_state(records: Arc<dyn Records>) {
    let store: Arc<dyn Store> = records.clone();
    let before = offered(records.count().await);
    let (_run, _held) = one_of_each(&*store).await;
    let after = offered(records.count().await);
    let of = |counts: &[idempotent_tools::records::RecordCount], tool: &ToolId, state| {
        counts
            .iter()
            .find(|c| c.tool == *tool && c.state == state)
            .map_or(0, |c| c.count)
    };
    for (tool, state) in [
        (&REFUND, RecordState::Held),
        (&REFUND, RecordState::Done),
        (&REFUND, RecordState::Unknown),
        (&CANCEL, RecordState::Failed),
    ] {
        assert_eq!(
            of(&after, tool, state),
            of(&before, tool, state) + 1,
            "{tool} {state}"
        );
    }
    assert_eq!(
        of(&after, &CANCEL, RecordState::Done),
        of(&before, &CANCEL, RecordState::Done)
    );
}

async fn forgetting_refuses_a_live_claim_unless_forced(records: Arc<dyn Records>) {
    let store: Arc<dyn Store> = records.clone();
    let (run, held) = one_of_each(&*store).await;
    let held_key = refund_key(&run, "a-held");

    let refused = match records.forget(&held_key).await {
        Err(StoreError::Unsupported(step)) => offered(Err(StoreError::Unsupported(step))),
        other => other.expect_err("a live claim"),
    };
    assert!(
        matches!(refused, StoreError::LiveClaim { .. }),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("lease is live"), "{refused}");
    assert!(offered(records.inspect(&held_key).await).is_some());

    assert!(offered(
        records.forget(&refund_key(&run, "c-unknown")).await
    ));
    assert!(!offered(
        records.forget(&refund_key(&run, "c-unknown")).await
    ));
    assert!(!offered(records.forget(&refund_key(&run, "never")).await));

    assert!(offered(records.forget_with(&held_key, Forget::Force).await));
    assert!(offered(records.inspect(&held_key).await).is_none());
    // The forced holder's completion changes nothing.
    let late = Completion {
        state: RecordState::Done,
        value: RecordValue::from_json("1"),
        completed_at: SystemTime::now(),
    };
    assert!(matches!(
        store.complete(&held, late).await,
        Err(StoreError::LeaseLost)
    ));
    // And the key may be claimed again at once.
    claim(&*store, &held_key, &REFUND).await;
}
