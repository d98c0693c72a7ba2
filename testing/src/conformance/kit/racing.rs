//! Claims for one key racing from several connections, each answered as
//! its tool and arguments call for.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Barrier;

use super::{TOOL, usd, within};
use idempotent_tools::{
    call::{ConflictReason, Fingerprint, Key, ToolId},
    store::{ClaimAnswer, ClaimRequest, Store},
};

/// How many claims [`race_for_one_key`] makes.
pub const RACING_CLAIMS: usize = 8;

/// Races [`RACING_CLAIMS`] claims for `key` from one barrier, claim `i` on
/// `stores[i % stores.len()]`: three in four for [`TOOL`] and one in four
/// for another tool, half for 42 dollars and half for 41. Fails unless
/// exactly one claim wins and every other gets the answer its tool and
/// arguments call for: in flight with the winner's tool and amount, a
/// conflict over the arguments with its tool and another amount, a conflict
/// over the tool with another tool.
///
/// Give it stores of their own (their own pools) on one place, so that the
/// claims race in the database, where a loser may find no row yet.
pub async fn race_for_one_key(stores: &[Arc<dyn Store>], key: &Key) {
    assert!(!stores.is_empty(), "a race needs a store");
    let start = Arc::new(Barrier::new(RACING_CLAIMS));
    let mut tasks = Vec::with_capacity(RACING_CLAIMS);
    for caller in 0..RACING_CLAIMS {
        let (store, key, start) = (
            stores[caller % stores.len()].clone(),
            key.clone(),
            start.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let tool = if caller % 4 == 3 {
                ToolId::new("mail::send_receipt")
            } else {
                TOOL.clone()
            };
            let fingerprint = usd(if caller % 2 == 0 { 42 } else { 41 });
            start.wait().await;
            let answer = store
                .claim(ClaimRequest {
                    key: &key,
                    tool: &tool,
                    fingerprint,
                    lease: Duration::from_secs(30),
                    retention: Duration::from_secs(3600),
                })
                .await
                .expect("claim");
            (tool, fingerprint, answer)
        }));
    }
    let mut answers = Vec::with_capacity(RACING_CLAIMS);
    for task in tasks {
        answers.push(within("a racing claim", task).await.expect("task"));
    }
    check_answers(&answers);
}

/// Fails unless one claim in `answers` won and each other one was answered
/// as its tool and arguments call for.
fn check_answers(answers: &[(ToolId, Fingerprint, ClaimAnswer)]) {
    let winners: Vec<_> = answers
        .iter()
        .filter(|(_, _, answer)| matches!(answer, ClaimAnswer::Claimed(_)))
        .collect();
    assert_eq!(winners.len(), 1, "exactly one claim per key must win");
    let (won_tool, won_fingerprint, _) = winners[0];
    for (tool, fingerprint, answer) in answers {
        match answer {
            ClaimAnswer::Claimed(_) => {}
            ClaimAnswer::InFlight(_) => assert!(
                tool == won_tool && fingerprint == won_fingerprint,
                "in flight for another tool or other arguments than the winner's"
            ),
            ClaimAnswer::Conflict {
                reason: ConflictReason::OtherTool,
                ..
            } => assert!(tool != won_tool, "a tool conflicting with itself"),
            ClaimAnswer::Conflict {
                reason: ConflictReason::Arguments,
                ..
            } => assert!(
                tool == won_tool && fingerprint != won_fingerprint,
                "an arguments conflict for another tool or the winner's own arguments"
            ),
            other => panic!("a racing claim answered {other:?}"),
        }
    }
}
