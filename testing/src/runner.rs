//! The runner: plays a scripted model against real tools, step by step.

use std::future::Future;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use idempotent_tools::Run;

use super::model::{ScriptedModel, ToolCall, ToolResult, Turn};
use super::tools::Tools;

/// How the calls of one step run at the same time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Concurrency {
    /// All in the calling task, joined: they take turns at each `.await`,
    /// as the AI SDK's `Promise.all` runs them on one JavaScript thread.
    #[default]
    Joined,
    /// Each in its own spawned task, so on a multi-thread runtime they also
    /// run in parallel, as in a Rust agent framework that spawns tool calls.
    Spawned,
}

/// Everything the model was handed, step by step, and its final answer.
///
/// Read it to check what the model saw: that a repeat was told "already
/// done", that a conflict named the first refund, that an error came back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transcript {
    steps: Vec<Vec<ToolResult>>,
    answer: String,
}

impl Transcript {
    /// One entry per step: its calls' results, in the order of the calls.
    pub fn steps(&self) -> &[Vec<ToolResult>] {
        &self.steps
    }

    /// Every result, in order.
    pub fn results(&self) -> impl Iterator<Item = &ToolResult> {
        self.steps.iter().flatten()
    }

    /// The result of the call with this id.
    pub fn result(&self, call_id: &str) -> Option<&ToolResult> {
        self.results()
            .find(|result| result.call.id.as_str() == call_id)
    }

    /// The model's final answer.
    pub fn answer(&self) -> &str {
        &self.answer
    }
}

/// Plays a [`ScriptedModel`] against [`Tools`], the way an agent framework
/// runs a model: it asks the model for a turn, runs that step's tool calls
/// at the same time, hands their results back, and repeats until the model
/// answers with text.
///
/// - [`Concurrency`] says how a step's calls run at the same time: joined in
///   one task, or spawned.
/// - [`tool_call_concurrency`](Runner::tool_call_concurrency) caps how many
///   run at once; 1 runs them one at a time.
/// - [`in_run`](Runner::in_run) enters a [`Run`] around every call, spawned
///   ones included, so `<run>` in a key reads it. Without it, the run in
///   scope where the runner is awaited is carried into every call.
///
/// ```
/// use std::time::Duration;
/// use idempotent_tools::{CallId, Run};
/// use idempotent_tools_testing::{Provider, Runner, ScriptedModel, ToolCall, Tools};
/// use serde_json::json;
///
/// #[derive(serde::Deserialize)]
/// struct Args { order_id: String, usd: u64 }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idempotent_tools::Error> {
/// let provider = Provider::with_delay(Duration::ZERO);
/// let tools = Tools::new().tool("refund_order", {
///     let provider = provider.clone();
///     move |args: Args, _call: CallId| {
///         let provider = provider.clone();
///         async move { provider.refund(&args.order_id, args.usd, None).await }
///     }
/// });
/// let ask = ToolCall::new("call_a", "refund_order", json!({ "order_id": "1182", "usd": 42 }));
/// let model = ScriptedModel::new().step([ask.clone(), ask.with_id("call_b")]).answer("Done.");
///
/// let transcript = Runner::new().in_run(Run::new("run-1")?).run(model, &tools).await;
/// assert_eq!(provider.refunds_on_file(), 2); // no key: two refunds
/// assert_eq!(transcript.answer(), "Done.");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Runner {
    concurrency: Concurrency,
    limit: Option<usize>,
    run: Option<Run>,
}

impl Runner {
    /// A runner that joins each step's calls in one task, with no cap.
    pub fn new() -> Runner {
        Runner::default()
    }

    /// A runner that spawns each call in its own task, with no cap.
    pub fn spawned() -> Runner {
        Runner::new().concurrency(Concurrency::Spawned)
    }

    /// Sets how a step's calls run at the same time.
    pub fn concurrency(mut self, concurrency: Concurrency) -> Runner {
        self.concurrency = concurrency;
        self
    }

    /// Runs at most `limit` calls of a step at once, in the order the model
    /// made them; 1 runs them one at a time. A limit of 0 is taken as 1.
    pub fn tool_call_concurrency(mut self, limit: usize) -> Runner {
        self.limit = Some(limit.max(1));
        self
    }

    /// Runs every tool call inside this run's scope.
    pub fn in_run(mut self, run: Run) -> Runner {
        self.run = Some(run);
        self
    }

    /// Plays `model` against `tools` until it answers with text.
    ///
    /// A tool's error goes back to the model as an error result. A tool's
    /// panic propagates to the caller, as it would in a test of the tool.
    pub async fn run(&self, mut model: ScriptedModel, tools: &Tools) -> Transcript {
        let run = self.run.clone().or_else(Run::current);
        let mut transcript = Transcript::default();
        let mut results: Vec<ToolResult> = Vec::new();
        loop {
            match model.next_turn(&results) {
                Turn::Text(answer) => {
                    transcript.answer = answer;
                    return transcript;
                }
                Turn::Calls(calls) => {
                    results = self.run_step(calls, tools, run.as_ref()).await;
                    transcript.steps.push(results.clone());
                }
            }
        }
    }

    async fn run_step(
        &self,
        calls: Vec<ToolCall>,
        tools: &Tools,
        run: Option<&Run>,
    ) -> Vec<ToolResult> {
        let permits = self
            .limit
            .unwrap_or(Semaphore::MAX_PERMITS)
            .min(Semaphore::MAX_PERMITS);
        let limit = Arc::new(Semaphore::new(permits));
        let started = calls
            .iter()
            .map(|call| start(tools, call.clone(), Arc::clone(&limit), run.cloned()));
        let outputs = match self.concurrency {
            Concurrency::Joined => futures_util::future::join_all(started).await,
            Concurrency::Spawned => {
                let mut tasks = JoinSet::new();
                for (index, call) in started.enumerate() {
                    tasks.spawn(async move { (index, call.await) });
                }
                // Resumes a tool's panic; the set aborts the other calls.
                let mut done = tasks.join_all().await;
                done.sort_unstable_by_key(|(index, _)| *index);
                done.into_iter().map(|(_, output)| output).collect()
            }
        };
        calls
            .into_iter()
            .zip(outputs)
            .map(|(call, output)| ToolResult { call, output })
            .collect()
    }
}

/// One call, ready to run: it waits for a permit, then runs the tool inside
/// the run's scope (task-locals do not follow a spawn).
fn start(
    tools: &Tools,
    call: ToolCall,
    limit: Arc<Semaphore>,
    run: Option<Run>,
) -> impl Future<Output = Result<Value, String>> + Send + 'static {
    let tools = tools.clone();
    async move {
        // The semaphore is never closed, so a permit always comes.
        let _permit = limit.acquire_owned().await.ok();
        let reply = async move { tools.call(call).await };
        match run {
            Some(run) => run.scope(reply).await,
            None => reply.await,
        }
    }
}
