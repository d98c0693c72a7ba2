//! The refund race, end to end.
//!
//! A scripted model asks to refund order 1182 twice, and each version of the
//! `refund_order` tool runs against a fresh stand-in payment provider, which
//! counts the refunds it made. The first six versions are the usual ways to
//! write the tool; the last four rows are `#[idempotent]`.
//!
//! ```sh
//! cargo run --example refund
//! ```

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use idempotent_tools::testing::{
    Provider, ProviderError, Refund, Runner, ScriptedModel, ToolCall, ToolResult, Tools, Transcript,
};
use idempotent_tools::{CallId, MemoryStore, Outcome, Run, idempotent};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), idempotent_tools::Error> {
    print!("{}", table().await?);
    Ok(())
}

/// The run every row's tool calls belong to.
const RUN: &str = "run-1";

/// Plays each version of the tool against the model that repeats itself.
pub async fn table() -> Result<Table, idempotent_tools::Error> {
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

    Ok(table)
}

// ---------------------------------------------------------------------------
// The versions of the tool.

/// The tool's arguments, as the model writes them.
#[derive(Debug, Clone, Deserialize)]
pub struct RefundArgs {
    order_id: String,
    usd: u64,
    /// Worded by the model, differently each time: never part of a key.
    reason: String,
}

/// What one version of the tool can reach: the provider, its own record of
/// refunded orders, and the store behind `#[idempotent]`. Fresh for each row.
#[derive(Clone, Default)]
pub struct Shop {
    provider: Provider,
    refunded: Arc<Mutex<HashSet<String>>>,
    store: Arc<MemoryStore>,
}

impl Shop {
    pub fn with_provider(provider: Provider) -> Shop {
        Shop {
            provider,
            refunded: Arc::default(),
            store: Arc::new(MemoryStore::new()),
        }
    }

    fn refunded(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.refunded.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PayError {
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

/// What a version with its own check tells the model on a repeat.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Checked {
    Refunded(Refund),
    AlreadyRefunded { note: &'static str },
}

pub async fn no_key(shop: Shop, args: RefundArgs, _call: CallId) -> Result<Refund, PayError> {
    Ok(shop.provider.refund(&args.order_id, args.usd, None).await?)
}

pub async fn key_is_call_id(
    shop: Shop,
    args: RefundArgs,
    call: CallId,
) -> Result<Refund, PayError> {
    // The call id is new for every call the model makes.
    Ok(shop
        .provider
        .refund(&args.order_id, args.usd, Some(call.as_str()))
        .await?)
}

pub async fn key_is_run_and_order(
    shop: Shop,
    args: RefundArgs,
    _call: CallId,
) -> Result<Refund, PayError> {
    // The same for every ask for this refund.
    let key = format!("{RUN}:refund:{}", args.order_id);
    Ok(shop
        .provider
        .refund(&args.order_id, args.usd, Some(&key))
        .await?)
}

pub async fn check_then_act(
    shop: Shop,
    args: RefundArgs,
    _call: CallId,
) -> Result<Checked, PayError> {
    if shop.refunded().contains(&args.order_id) {
        return Ok(Checked::AlreadyRefunded {
            note: "already refunded",
        });
    }
    // While this call waits on the network, the other one runs the check above.
    let refund = shop.provider.refund(&args.order_id, args.usd, None).await?;
    shop.refunded().insert(args.order_id);
    Ok(Checked::Refunded(refund))
}

pub async fn claim_then_act(
    shop: Shop,
    args: RefundArgs,
    _call: CallId,
) -> Result<Checked, PayError> {
    // Check and claim in one step, before the network: the other call finds the claim.
    if !shop.refunded().insert(args.order_id.clone()) {
        return Ok(Checked::AlreadyRefunded {
            note: "already refunded",
        });
    }
    Ok(Checked::Refunded(
        shop.provider.refund(&args.order_id, args.usd, None).await?,
    ))
}

impl Shop {
    /// Refunds once per run and order, however many times the model asks.
    #[idempotent(key = "<run>:refund:<order_id>", store = &self.store)]
    async fn refund_order(
        &self,
        order_id: String,
        usd: u64,
        // Worded anew on every ask, so kept out of the key and the fingerprint:
        // a reworded repeat is still the same refund. (The stand-in provider takes no reason.)
        #[free_text] _reason: String,
    ) -> Result<Outcome<Refund>, PayError> {
        // The guard's key, handed on: a retry after a lost answer is deduplicated there too.
        let key = idempotent_tools::current_key().map(|key| key.provider_key().into_owned());
        Ok(self.provider.refund(&order_id, usd, key.as_deref()).await?)
    }
}

/// `#[idempotent]`, called with the model's arguments.
pub async fn guarded(
    shop: Shop,
    args: RefundArgs,
    _call: CallId,
) -> Result<Outcome<Refund>, PayError> {
    shop.refund_order(args.order_id, args.usd, args.reason)
        .await
}

// ---------------------------------------------------------------------------
// The model, and how a row is played.

pub fn ask(id: &str, usd: u64, reason: &str) -> ToolCall {
    ToolCall::new(
        id,
        "refund_order",
        json!({ "order_id": "1182", "usd": usd, "reason": reason }),
    )
}

/// The same refund twice in one step, under two call ids, then an answer.
pub fn twice_in_one_step() -> ScriptedModel {
    ScriptedModel::new()
        .step([
            ask("call_a", 42, "damaged in transit"),
            ask("call_b", 42, "arrived broken"),
        ])
        .answer("Refunded order 1182.")
}

/// The same refund in one step, and again in the next.
pub fn once_in_each_of_two_steps() -> ScriptedModel {
    ScriptedModel::new()
        .step([ask("call_a", 42, "damaged in transit")])
        .step([ask("call_b", 42, "arrived broken")])
        .answer("Refunded order 1182.")
}

/// The refund once; if it comes back as an error, once more.
pub fn once_then_again_if_it_failed() -> ScriptedModel {
    ScriptedModel::new()
        .step([ask("call_a", 42, "damaged in transit")])
        .retry_failed()
        .answer("Refunded order 1182.")
}

/// $42 on the order, then $41 on the same order.
pub fn forty_two_then_forty_one() -> ScriptedModel {
    ScriptedModel::new()
        .step([ask("call_a", 42, "damaged in transit")])
        .step([ask("call_b", 41, "damaged, minus shipping")])
        .answer("Refunded order 1182.")
}

/// What one row came to: the provider's counts, and what the model saw.
pub struct Attempt {
    pub refunds_on_file: usize,
    pub calls_received: usize,
    pub transcript: Transcript,
}

/// Plays `model` against one version of the tool, with a fresh shop behind it.
pub async fn attempt<F, Fut, T>(runner: &Runner, model: ScriptedModel, version: F) -> Attempt
where
    F: Fn(Shop, RefundArgs, CallId) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, PayError>> + Send + 'static,
    T: Serialize,
{
    attempt_in(Shop::default(), runner, model, version).await
}

/// Plays `model` against one version of the tool, with `shop` behind it.
pub async fn attempt_in<F, Fut, T>(
    shop: Shop,
    runner: &Runner,
    model: ScriptedModel,
    version: F,
) -> Attempt
where
    F: Fn(Shop, RefundArgs, CallId) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, PayError>> + Send + 'static,
    T: Serialize,
{
    let transcript = runner.run(model, &tools(&shop, version)).await;
    Attempt {
        refunds_on_file: shop.provider.refunds_on_file(),
        calls_received: shop.provider.calls_received(),
        transcript,
    }
}

/// The one tool the model can call, `refund_order`, as `version`, with `shop` behind it.
pub fn tools<F, Fut, T>(shop: &Shop, version: F) -> Tools
where
    F: Fn(Shop, RefundArgs, CallId) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, PayError>> + Send + 'static,
    T: Serialize,
{
    let shop = shop.clone();
    Tools::new().tool("refund_order", move |args, call| {
        version(shop.clone(), args, call)
    })
}

// ---------------------------------------------------------------------------
// The table.

/// One line of the table.
pub struct Row {
    pub version: &'static str,
    /// What went wrong, or why the count is right.
    pub verdict: &'static str,
    /// Refunds the provider made: the number that matters.
    pub refunds_on_file: usize,
    /// Calls that reached the provider, repeats included.
    pub calls_received: usize,
    /// What each call gave the model: `, ` between calls of one step, ` / ` between steps.
    pub model_got: String,
}

#[derive(Default)]
pub struct Table {
    pub rows: Vec<Row>,
    /// What the model saw when it asked again in a later step.
    pub replay: Option<serde_json::Value>,
    /// What the model saw when it asked for $41 after $42.
    pub conflict: Option<serde_json::Value>,
}

impl Table {
    fn push(&mut self, version: &'static str, verdict: &'static str, attempt: &Attempt) {
        let steps = attempt.transcript.steps().iter().map(|step| {
            let calls: Vec<String> = step
                .iter()
                .map(|result| summary(&result.seen_by_model()))
                .collect();
            calls.join(", ")
        });
        self.rows.push(Row {
            version,
            verdict,
            refunds_on_file: attempt.refunds_on_file,
            calls_received: attempt.calls_received,
            model_got: steps.collect::<Vec<_>>().join(" / "),
        });
    }

    /// The row for one version.
    pub fn row(&self, version: &str) -> Option<&Row> {
        self.rows.iter().find(|row| row.version == version)
    }
}

/// A tool result in a few words: `re_1`, `replay re_1`, `already refunded`, `error`.
fn summary(seen: &serde_json::Value) -> String {
    let refund_id = |value: &serde_json::Value| value["id"].as_str().map(str::to_owned);
    match (
        seen["status"].as_str(),
        seen.get("error"),
        seen["note"].as_str(),
    ) {
        (Some("conflict"), ..) => "conflict".to_owned(),
        (Some(status), ..) => format!("{status} {}", refund_id(&seen["value"]).unwrap_or_default()),
        (None, Some(_), _) => "error".to_owned(),
        (None, None, Some(note)) => note.to_owned(),
        (None, None, None) => refund_id(seen).unwrap_or_default(),
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "The model asks to refund order 1182 twice. Counts are from the stand-in provider.\n"
        )?;
        let header = (
            "version of the tool",
            "refunds on file",
            "calls received",
            "the model got",
        );
        writeln!(
            f,
            "{:<47} {:>17} {:>16}   {}",
            header.0, header.1, header.2, header.3
        )?;
        for row in &self.rows {
            let Row {
                version,
                verdict,
                refunds_on_file,
                calls_received,
                model_got,
            } = row;
            writeln!(
                f,
                "{version:<47} {refunds_on_file:>17} {calls_received:>16}   {model_got}"
            )?;
            writeln!(f, "    {verdict}")?;
        }
        writeln!(
            f,
            "\n\"refunds on file\" is what the provider kept: what the customer sees. \"calls received\" is\n\
             how many refund requests reached it. A provider that honours keys answers a repeat with\n\
             the first refund, so 1 on file after 2 calls means the provider saved the day; 1 after 1\n\
             means the tool stopped the repeat itself."
        )?;
        let pretty = |value: &Option<serde_json::Value>| {
            value
                .as_ref()
                .and_then(|v| serde_json::to_string_pretty(v).ok())
                .unwrap_or_default()
        };
        writeln!(
            f,
            "\nWhat the model saw when it asked again in step 2:\n{}",
            pretty(&self.replay)
        )?;
        writeln!(
            f,
            "\nWhat the model saw when it asked for $41 after $42:\n{}",
            pretty(&self.conflict)
        )
    }
}
