//! The refund race, end to end.
//!
//! A scripted model asks to refund order 1182 twice, and each version of the
//! `refund_order` tool runs against a fresh stand-in payment provider, which
//! counts the refunds it made. The first six versions are the usual ways to
//! write the tool; the next four rows are `#[idempotent]`. The next two keep
//! the refund as a row in the shop's own SQLite database, and crash between
//! that write and the record of the call. The last three face a provider
//! that ignores keys and loses its answer to the refund.
//!
//! ```sh
//! cargo run --example refund
//! ```

mod attempt;
mod ledger;
mod model;
mod shop;
mod table;
mod unknown;
mod versions;

pub use attempt::{attempt, attempt_in, tools};
pub use model::{
    ask, forty_two_then_forty_one, once_in_each_of_two_steps, once_then_again_if_it_failed,
    twice_in_one_step,
};
pub use shop::Shop;
pub use table::{Row, Table};
pub use unknown::{reported_then_resolved, shop_losing_the_answer, verified};
pub use versions::{
    check_then_act, claim_then_act, guarded, key_is_call_id, key_is_run_and_order, no_key,
};

use idempotent_tools::Run;
use idempotent_tools_testing::{Runner, ToolResult};

#[tokio::main]
async fn main() -> Result<(), shop::PayError> {
    print!("{}", table().await?);
    Ok(())
}

/// The run every row's tool calls belong to.
const RUN: &str = "run-1";

/// Plays each version of the tool against the model that repeats itself.
pub async fn table() -> Result<Table, shop::PayError> {
    // A step's tool calls run at the same time, as the AI SDK's `Promise.all` runs them.
    let together = Runner::new().in_run(Run::new(RUN)?);
    let one_at_a_time = together.clone().tool_call_concurrency(1);
    let mut table = Table::default();

    // 1. What most tools look like: no key, or the tool call id as the key.
    let row = attempt(&together, twice_in_one_step(), no_key).await;
    table.push(
        "no key",
        "two refunds: nothing tells the provider the second call is a repeat",
        &row,
    );
    let row = attempt(&together, twice_in_one_step(), key_is_call_id).await;
    table.push(
        "key = tool call id",
        "two refunds: every call gets a new id, so every call is a new request",
        &row,
    );

    // 2. A key that names the action: this refund, on this order, in this run.
    let row = attempt(&together, twice_in_one_step(), key_is_run_and_order).await;
    table.push(
        "key = run + order",
        "one, but only because this provider dedupes keys; the model is not told it was a repeat",
        &row,
    );

    // 3. A check in the tool instead of a key: both calls pass it before either writes.
    let row = attempt(&together, twice_in_one_step(), check_then_act).await;
    table.push(
        "check, then act",
        "two refunds: both calls check before either writes",
        &row,
    );

    // 4. The same check, but the order is claimed before the provider is called.
    let row = attempt(&together, twice_in_one_step(), claim_then_act).await;
    table.push(
        "claim first, then act",
        "one, in one process only; and a claim never cleared blocks the retry after a real failure",
        &row,
    );

    // 5. The plain check again, with the tool calls run one at a time.
    let row = attempt(&one_at_a_time, twice_in_one_step(), check_then_act).await;
    table.push(
        "one at a time, check, then act",
        "one only because the calls were serialized; a later step or a second worker refunds again",
        &row,
    );

    // 6. `#[idempotent]`, in the three cases worth a test.
    let row = attempt(&together, twice_in_one_step(), guarded).await;
    table.push(
        "#[idempotent]: two identical calls in one step",
        "one: the second call waits for the first and replays its refund",
        &row,
    );

    let row = attempt(&together, once_in_each_of_two_steps(), guarded).await;
    table.push(
        "#[idempotent]: the same call in two steps",
        "one: the later step gets the recorded refund and a note",
        &row,
    );
    table.replay = row
        .transcript
        .result("call_b")
        .map(ToolResult::seen_by_model);

    // The provider makes the refund but its answer is lost: the tool fails, and the model retries.
    let shop = Shop::default();
    shop.provider.lose_next_reply();
    let row = attempt_in(shop, &together, once_then_again_if_it_failed(), guarded).await;
    table.push(
        "#[idempotent]: fails after the refund, retried",
        "one: the retry acts again under the same key, which the provider dedupes",
        &row,
    );

    // 7. Another amount on the same order is not a repeat: it is refused, and the model told why.
    let row = attempt(&together, forty_two_then_forty_one(), guarded).await;
    table.push(
        "#[idempotent]: $42, then $41 on the same order",
        "one: other arguments under one key are refused, and the model is told why",
        &row,
    );
    table.conflict = row
        .transcript
        .result("call_b")
        .map(ToolResult::seen_by_model);

    // 8. The refund is a row in the shop's own database, and the tool crashes after writing it.
    let row = ledger::attempt(&together, once_then_again_if_it_failed(), ledger::guarded).await?;
    table.push(
        "ledger in SQLite: crashes after its write",
        "two: the write committed on its own, so the retry wrote again",
        &row,
    );
    let row = ledger::attempt(
        &together,
        once_then_again_if_it_failed(),
        ledger::in_transaction,
    )
    .await?;
    table.push(
        "ledger in SQLite: same crash, in a transaction",
        "one: the write and the call's record commit together, so the crash left neither",
        &row,
    );

    // 9. The provider ignores keys, and the answer to the refund is lost: rerun, verify, or report.
    let row = attempt_in(
        shop_losing_the_answer(),
        &together,
        once_then_again_if_it_failed(),
        guarded,
    )
    .await;
    table.push(
        "provider ignores keys: answer lost, retried",
        "two: the retry acted again, and this provider ignores the key",
        &row,
    );
    let row = attempt_in(
        shop_losing_the_answer(),
        &together,
        once_then_again_if_it_failed(),
        verified,
    )
    .await;
    table.push(
        "provider ignores keys: with `verify`",
        "one: the failure may have followed the refund, so the provider was asked, and it had it",
        &row,
    );
    let rows = reported_then_resolved(
        shop_losing_the_answer(),
        &together,
        once_then_again_if_it_failed(),
    )
    .await?;
    table.push_all(
        "provider ignores keys: reported, then resolved",
        "one: the retry was told the outcome is unknown; once resolved, the next ask replays it",
        &rows,
    );

    Ok(table)
}
