//! The tools a scripted model may call, by name.

use std::collections::HashMap;
use std::fmt::{self, Display};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use idempotent_tools::CallId;

use super::model::ToolCall;

/// What a tool hands back: the JSON the model reads, or the error text it
/// reads instead.
pub(crate) type Reply = Pin<Box<dyn Future<Output = Result<Value, String>> + Send>>;

type Handler = Arc<dyn Fn(ToolCall) -> Reply + Send + Sync>;

/// The tools a [`Runner`](super::Runner) may call, by name.
///
/// A tool is an async function of its typed arguments (parsed from the
/// model's JSON, as a framework does) and the call's id. Its `Ok` value is
/// serialized for the model; its `Err` is shown to the model as an error.
///
/// ```
/// use idempotent_tools::CallId;
/// use idempotent_tools_testing::Tools;
///
/// #[derive(serde::Deserialize)]
/// struct Args { order_id: String }
///
/// let tools = Tools::new().tool("look_up", |args: Args, _call: CallId| async move {
///     Ok::<_, std::io::Error>(format!("order {} is paid", args.order_id))
/// });
/// assert!(tools.has("look_up"));
/// ```
#[derive(Clone, Default)]
pub struct Tools {
    // Shared, so the runner hands every call its own handle cheaply.
    handlers: Arc<HashMap<String, Handler>>,
}

impl Tools {
    /// No tools.
    pub fn new() -> Tools {
        Tools::default()
    }

    /// Adds the tool `name`, replacing any tool of that name.
    ///
    /// The future must be `Send + 'static` so that the runner may spawn it;
    /// move what the tool needs (a provider, a store) into it.
    pub fn tool<A, T, E, F, Fut>(mut self, name: impl Into<String>, tool: F) -> Tools
    where
        A: DeserializeOwned,
        T: Serialize,
        E: Display,
        F: Fn(A, CallId) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let name = name.into();
        let handler = move |call: ToolCall| -> Reply {
            let args = match serde_json::from_value::<A>(call.args) {
                Ok(args) => args,
                Err(err) => {
                    let text = format!("invalid arguments for `{}`: {err}", call.tool);
                    return Box::pin(async move { Err(text) });
                }
            };
            let reply = tool(args, call.id);
            Box::pin(async move {
                let value = reply.await.map_err(|err| err.to_string())?;
                serde_json::to_value(value)
                    .map_err(|err| format!("the tool's result could not be serialized: {err}"))
            })
        };
        Arc::make_mut(&mut self.handlers).insert(name, Arc::new(handler));
        self
    }

    /// Whether a tool of that name is there.
    pub fn has(&self, name: &str) -> bool {
        self.handlers.contains_key(name)
    }

    /// Starts `call`. An unknown tool answers with an error, as a framework
    /// would tell the model.
    pub(crate) fn call(&self, call: ToolCall) -> Reply {
        match self.handlers.get(&call.tool) {
            Some(handler) => handler(call),
            None => {
                let text = format!("there is no tool named `{}`", call.tool);
                Box::pin(async move { Err(text) })
            }
        }
    }
}

impl fmt::Debug for Tools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.handlers.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_struct("Tools").field("names", &names).finish()
    }
}
