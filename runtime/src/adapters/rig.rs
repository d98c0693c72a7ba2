//! rig (rig-core 0.44): where a tool finds its run.
//!
//! A rig tool that returns `Result<Outcome<T>, E>` needs nothing from this
//! module to reach the model: rig serializes the [`Outcome`](crate::Outcome),
//! so a replay arrives as `{"status":"replay","value":…,"note":"…"}`, a
//! result and not an error.
//!
//! What a tool does need is the run, for `<run>` in its key. In rig it comes
//! from the [`ToolContext`], never from a task-local scope around the prompt:
//! an agent's tools are polled by whichever run happens to drive the agent's
//! bus, so while two runs share an agent, a tool of one run can be polled
//! from the other run's task and would read the other run's scope. The
//! context is cloned into each dispatch and travels with it.
//!
//! - Put the run into the context of each prompt: `.tool_context(context(&run))`.
//! - Wrap a tool whose key names `<run>` in [`InRun`]: it reads the run from
//!   the context and enters [`Run::scope`] around that one call, so the scope
//!   is part of the call's own future, whoever polls it.
//! - Or read it yourself with [`run_of`] and pass it to an annotated function
//!   that takes a `run` argument.

use rig_core::tool::{ContextValue, Tool, ToolContext, ToolExecutionError};

use crate::error::Error;
use crate::run::Run;

/// The run is plain data in a rig [`ToolContext`], under the slot
/// `idempotent.run`.
impl ContextValue for Run {
    const KEY: &'static str = "idempotent.run";
}

/// A tool context that carries `run`, to hand to
/// `AgentRunner::tool_context` for one prompt.
///
/// ```
/// use idempotent_tools::{Run, rig::{context, run_of}};
///
/// let run = Run::new("run-7")?;
/// assert_eq!(run_of(&context(&run))?, run);
/// # Ok::<(), idempotent_tools::Error>(())
/// ```
pub fn context(run: &Run) -> ToolContext {
    let mut context = ToolContext::new();
    // A run serializes as its text, which cannot fail; were it to, the slot
    // stays empty and the tool refuses to act with `Error::MissingRun`.
    let _ = context.insert(run.clone());
    context
}

/// The run a tool call belongs to, read from its [`ToolContext`].
///
/// Fails with [`Error::MissingRun`] when the context carries no run, so a
/// tool never acts under a key that could merge two runs' actions.
///
/// ```
/// use idempotent_tools::{Error, rig::run_of};
/// use rig_core::tool::ToolContext;
///
/// assert!(matches!(run_of(&ToolContext::new()), Err(Error::MissingRun)));
/// ```
pub fn run_of(context: &ToolContext) -> Result<Run, Error> {
    match context.get::<Run>() {
        Ok(Some(run)) => Ok(run),
        // A slot that does not decode (empty text, say) is no run either.
        Ok(None) | Err(_) => Err(Error::MissingRun),
    }
}

/// A rig tool that runs each call in the run its [`ToolContext`] names.
///
/// `InRun(tool)` is the same tool to the model (name, description,
/// parameters, output). Before each call it reads the run with [`run_of`]
/// and runs the call inside [`Run::scope`], so `<run>` in an
/// `#[idempotent]` key reads that run. The scope wraps the call's own
/// future, so it holds whichever task polls it. A call whose context carries
/// no run fails with [`Error::MissingRun`] and does nothing.
///
/// It works for `#[rig_tool]` functions, with or without a `&mut ToolContext`
/// parameter, and for hand-written tools.
///
/// ```
/// use idempotent_tools::{Outcome, Run, call::{Call, Key, KeyError}, rig::{InRun, context}};
/// use rig_core::tool::{Tool, ToolContext};
///
/// #[derive(Debug, thiserror::Error)]
/// enum ShopError {
///     #[error(transparent)]
///     Idempotency(#[from] idempotent_tools::Error),
///     #[error(transparent)]
///     Key(#[from] KeyError),
/// }
///
/// struct Refund;
///
/// impl Tool for Refund {
///     const NAME: &'static str = "refund";
///     type Args = String;
///     type Output = Outcome<String>;
///     type Error = ShopError;
///
///     fn description(&self) -> String {
///         "Refund an order".into()
///     }
///
///     fn parameters(&self) -> serde_json::Value {
///         serde_json::json!({ "type": "string" })
///     }
///
///     async fn call(&self, _: &mut ToolContext, order: String) -> Result<Outcome<String>, ShopError> {
///         // What `#[idempotent(key = "<run>:refund:<order>")]` expands to.
///         let run = Run::current().ok_or(idempotent_tools::Error::MissingRun)?;
///         let key = Key::builder().part("run", &run)?.literal(":refund:")?.part("order", &order)?.finish()?;
///         Call::new("shop::refund", key).run(async move { Ok(format!("refunded {order}")) }).await
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let tool = InRun(Refund);
/// let mut ctx = context(&Run::new("run-7")?);
/// assert!(tool.call(&mut ctx, "1182".into()).await?.is_fresh());
/// assert!(tool.call(&mut ctx, "1182".into()).await?.is_replay());
/// // Another run is another action.
/// let mut other = context(&Run::new("run-8")?);
/// assert!(tool.call(&mut other, "1182".into()).await?.is_fresh());
/// // No run in the context: nothing is done.
/// assert!(tool.call(&mut ToolContext::new(), "1183".into()).await.is_err());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct InRun<T>(pub T);

impl<T> Tool for InRun<T>
where
    T: Tool,
    T::Error: From<Error>,
{
    const NAME: &'static str = T::NAME;
    type Args = T::Args;
    type Output = T::Output;
    type Error = T::Error;

    fn description(&self) -> String {
        self.0.description()
    }

    fn parameters(&self) -> serde_json::Value {
        self.0.parameters()
    }

    fn map_error(&self, error: Self::Error) -> ToolExecutionError {
        self.0.map_error(error)
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        args: Self::Args,
    ) -> Result<Self::Output, Self::Error> {
        let run = run_of(context)?;
        run.scope(self.0.call(context, args)).await
    }
}
