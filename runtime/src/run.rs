//! The run: the agent run a key is scoped to.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

tokio::task_local! {
    static RUN: Run;
}

/// Why text is no run id.
///
/// The crate's [`Error`](crate::Error) takes it with `From`, so `?` works in
/// a function returning that error. `?` converts once: a tool author's error
/// that wraps [`Error`](crate::Error) takes `RunError` with a line of its own,
/// so that `Run::new(id)?` works in the author's functions too.
///
/// ```
/// use idempotent_tools::{Run, RunError};
///
/// #[derive(Debug, thiserror::Error)]
/// enum ShopError {
///     #[error(transparent)]
///     Idempotency(#[from] idempotent_tools::Error),
///     #[error(transparent)]
///     Run(#[from] RunError),
/// }
///
/// fn run_of(request_run: &str) -> Result<Run, ShopError> {
///     Ok(Run::new(request_run)?)
/// }
///
/// assert!(matches!(run_of(""), Err(ShopError::Run(RunError::Empty))));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The text was empty.
    #[error("a run id must not be empty; an empty run would merge every run's actions")]
    Empty,
}

/// The id of one agent run. Keys name the run so that the same action in two
/// runs is two actions, and the same action twice in one run is one.
///
/// A run is never empty. Enter one around an agent run with [`Run::scope`];
/// `<run>` in a key template then reads it. A tool with an argument named
/// `run` uses that argument instead.
///
/// ```
/// use idempotent_tools::Run;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idempotent_tools::RunError> {
/// let run = Run::new("run-7")?;
/// let seen = run.scope(async { Run::current() }).await;
/// assert_eq!(seen.as_ref().map(Run::as_str), Some("run-7"));
/// assert!(Run::current().is_none());
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Run(Arc<str>);

impl Run {
    /// Makes a run id. Fails with [`RunError::Empty`] on empty text.
    pub fn new(id: impl Into<String>) -> Result<Run, RunError> {
        let id: String = id.into();
        if id.is_empty() {
            return Err(RunError::Empty);
        }
        Ok(Run(Arc::from(id)))
    }

    /// A run derived from what a request carries, written as its path of
    /// `(source, value)` steps: `meta/run-7`, `principal/alice/meta/run-7`.
    ///
    /// Each value has `%` and `/` percent-encoded, and each source is a
    /// constant without `/`, so the text decodes one way only: no value a
    /// client sends can make the run of another source, and none equals a
    /// [`Run::constant`], which has no `/`.
    #[cfg(feature = "rmcp")]
    pub(crate) fn derived(path: &[(&'static str, &str)]) -> Run {
        let mut text = String::new();
        for (source, value) in path {
            debug_assert!(!source.is_empty() && !source.contains('/'), "{source:?}");
            if !text.is_empty() {
                text.push('/');
            }
            text.push_str(source);
            text.push('/');
            for c in value.chars() {
                match c {
                    '%' => text.push_str("%25"),
                    '/' => text.push_str("%2F"),
                    c => text.push(c),
                }
            }
        }
        Run(Arc::from(text))
    }

    /// This run, narrowed by a constant of the crate's: `principal/alice`
    /// then `server-wide` is `principal/alice/server-wide`. The constant has
    /// no `/`, so the result is never another path's run.
    #[cfg(feature = "rmcp")]
    pub(crate) fn then(&self, constant: &'static str) -> Run {
        debug_assert!(
            !constant.is_empty() && !constant.contains('/'),
            "{constant:?}"
        );
        Run(Arc::from(format!("{}/{constant}", self.0)))
    }

    /// A run named by a constant of the crate's, which is never empty.
    #[cfg(feature = "rmcp")]
    pub(crate) fn constant(id: &'static str) -> Run {
        debug_assert!(!id.is_empty() && !id.contains('/'), "{id:?}");
        Run(Arc::from(id))
    }

    /// The run's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The run in scope on this task, if any.
    pub fn current() -> Option<Run> {
        RUN.try_with(Run::clone).ok()
    }

    /// Runs `fut` with this run in scope: `<run>` in keys reads it.
    ///
    /// The scope is task-local. A task spawned inside it does not inherit it:
    /// enter the scope again in the task, or pass the run as an argument.
    pub fn scope<F: Future>(self, fut: F) -> impl Future<Output = F::Output> {
        RUN.scope(self, fut)
    }
}

impl TryFrom<String> for Run {
    type Error = RunError;
    fn try_from(id: String) -> Result<Run, RunError> {
        Run::new(id)
    }
}

impl From<Run> for String {
    fn from(run: Run) -> String {
        run.0.to_string()
    }
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Run({:?})", &*self.0)
    }
}

#[cfg(all(test, feature = "rmcp"))]
mod tests {
    use super::Run;

    #[test]
    fn derived_runs_of_different_paths_never_share_a_text() {
        let runs = [
            Run::derived(&[("principal", "alice")]),
            Run::derived(&[("meta", "principal/alice")]),
            Run::derived(&[("meta", "principal%2Falice")]),
            Run::derived(&[("principal", "alice/meta/x")]),
            Run::derived(&[("principal", "alice"), ("meta", "x")]),
            Run::derived(&[("header", "x")]),
            Run::derived(&[("meta", "x")]),
            Run::derived(&[("meta", "server-wide")]),
            Run::constant("server-wide"),
            Run::derived(&[("principal", "alice")]).then("server-wide"),
            Run::derived(&[("principal", "alice/server-wide")]),
        ];
        for (i, a) in runs.iter().enumerate() {
            for b in &runs[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(runs[1].as_str(), "meta/principal%2Falice");
        assert_eq!(runs[2].as_str(), "meta/principal%252Falice");
        assert_eq!(runs[4].as_str(), "principal/alice/meta/x");
    }
}
