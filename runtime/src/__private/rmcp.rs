//! What rmcp's router needs of a guarded tool under `#[tool]`, as bounds
//! with this crate's messages. rmcp's router reports a miss of any of them
//! as one unmet `IntoToolRoute` bound, naming none; the expansion names each
//! here first, at the token that causes it.

/// The `rmcp` feature is on. Without it, `Outcome` is no tool result and
/// `Run` no argument rmcp can fill.
#[cfg_attr(
    not(feature = "rmcp"),
    diagnostic::on_unimplemented(
        message = "a guarded tool under rmcp's `#[tool]` needs the `rmcp` feature of `idempotent-tools`",
        label = "this `#[tool]` is taken for rmcp's",
        note = "turn it on: `idempotent-tools = {{ version = \"0.1\", features = [\"rmcp\"] }}`; it makes `Outcome` a tool result and fills `run: Run` from each request",
        note = "if this `#[tool]` is another crate's, write it with that crate's path, as in `#[other::tool]`"
    )
)]
pub trait RmcpFeature {}

#[cfg(feature = "rmcp")]
impl RmcpFeature for () {}

/// Checks that the `rmcp` feature is on.
pub fn feature<T: RmcpFeature>() {}

/// Checks that a server whose tool takes `run: Run` says how runs are found.
#[cfg(feature = "rmcp")]
pub fn server<S: crate::rmcp::ResolvesRuns + ?Sized>() {}

/// Nothing to check without the feature: [`feature`] reports it.
#[cfg(not(feature = "rmcp"))]
pub fn server<S: ?Sized>() {}

/// A tool's error type that rmcp turns into the tool's result.
#[cfg(feature = "rmcp")]
#[diagnostic::on_unimplemented(
    message = "`{Self}`, the error type of a tool under rmcp's `#[tool]`, does not implement `rmcp::model::IntoContents`",
    label = "rmcp cannot turn this error into the tool's result",
    note = "implement `IntoContents` for `{Self}`, as in `vec![ContentBlock::text(self.to_string())]`: the model then reads the error as the tool's result, marked as an error"
)]
pub trait ToolError {}

#[cfg(feature = "rmcp")]
impl<E: rmcp::model::IntoContents> ToolError for E {}

/// Checks that rmcp can turn the tool's error into its result.
#[cfg(feature = "rmcp")]
pub fn tool_error<E: ToolError>() {}

/// Nothing to check without the feature: [`feature`] reports it.
#[cfg(not(feature = "rmcp"))]
pub fn tool_error<E>() {}
