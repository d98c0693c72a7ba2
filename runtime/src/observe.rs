//! What the guard tells an operator: a span per guarded call and events at
//! each step, through `tracing`; counters and histograms through the
//! `metrics` facade, with the `metrics` feature.
//!
//! - **Cost with nobody listening.** Every event and the span check one
//!   cached interest first: without a subscriber that wants them, none of
//!   their fields is computed (the key's digest, the run), nothing is
//!   allocated and no clock is read.
//! - **What is logged.** The tool's id and the run in full: they name code
//!   and an agent run, and an operator filters on them. The key only as the
//!   first 16 hex digits of its SHA-256 ([`KeyDigest`]): keys are built from
//!   tool arguments (order ids, e-mail addresses, account numbers), and logs
//!   travel further than the store does. `idempotent-tools show --digest`
//!   finds the record from it. Results, recorded errors and arguments are
//!   never logged.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::time::Instant;
use tracing::{Level, Span};

use crate::error::Error;
use crate::outcome::ConflictReason;
use crate::run::Run;
use crate::store::record::RecordState;
use crate::store::{Store, StoreError, default_store};
use crate::tool::ToolId;

#[cfg(feature = "metrics")]
pub(crate) mod metrics;

/// How many hex digits of the key's digest traces show: 64 bits, enough to
/// find a record among billions.
pub(crate) const DIGEST_HEX: usize = 16;

/// A key as traces show it: the first [`DIGEST_HEX`] hex digits of the
/// SHA-256 of its text, computed only when a subscriber records it.
pub(crate) struct KeyDigest<'a>(pub(crate) &'a str);

impl fmt::Display for KeyDigest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digest = Sha256::digest(self.0.as_bytes());
        for byte in &digest[..DIGEST_HEX / 2] {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

pub(crate) use crate::TARGET;

/// The run in scope as traces show it, read only when recorded.
struct CurrentRun;

impl fmt::Display for CurrentRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Run::current() {
            Some(run) => f.write_str(run.as_str()),
            None => f.write_str("-"),
        }
    }
}

/// The kind of a call's store as traces show it: the process default's if
/// the call names none, looked up only when recorded.
struct StoreKind<'a>(Option<&'a dyn Store>);

impl fmt::Display for StoreKind<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(store) => f.write_str(store.kind()),
            None => f.write_str(default_store().kind()),
        }
    }
}

/// The span of one guarded call: `Span::none()`, costing nothing, unless a
/// subscriber wants it.
pub(crate) fn call_span(tool: &ToolId, key: &str, store: Option<&dyn Store>) -> Span {
    tracing::info_span!(
        target: TARGET,
        "idempotent_tools.call",
        tool = %tool,
        run = %CurrentRun,
        key = %KeyDigest(key),
        store = %StoreKind(store),
    )
}

fn reason_name(reason: ConflictReason) -> &'static str {
    match reason {
        ConflictReason::Arguments => "arguments",
        ConflictReason::OtherTool => "other_tool",
    }
}

/// This call holds the claim; `taken_over` if from a holder whose lease
/// ran out.
pub(crate) fn claimed(tool: &ToolId, fence: u64, taken_over: bool) {
    if taken_over {
        tracing::warn!(
            target: TARGET,
            fence,
            "took over a claim whose holder's lease ran out; that holder may or may not have acted"
        );
        #[cfg(feature = "metrics")]
        metrics::takeover(tool);
    } else {
        tracing::debug!(target: TARGET, fence, "claimed");
    }
    let _ = tool;
}

/// The action ran and its result was recorded.
pub(crate) fn fresh(tool: &ToolId) {
    tracing::debug!(target: TARGET, "acted and recorded the result");
    count(tool, CallOutcome::Fresh);
}

/// A claim found the claim completed: a replay of its result or its error,
/// or an unknown outcome.
pub(crate) fn found_completed(tool: &ToolId, state: RecordState) {
    match state {
        RecordState::Done => replay(tool),
        RecordState::Failed => replayed_error(tool),
        RecordState::Unknown | RecordState::Held => unknown_outcome(tool, false),
    }
}

/// A repeat got the recorded result; the action did not run.
fn replay(tool: &ToolId) {
    tracing::info!(target: TARGET, "replayed the recorded result; the action did not run again");
    count(tool, CallOutcome::Replay);
}

/// A repeat got the recorded error; the action did not run.
fn replayed_error(tool: &ToolId) {
    tracing::info!(target: TARGET, "replayed the recorded error; the action did not run again");
    count(tool, CallOutcome::Failed);
}

/// The key was used for another request.
pub(crate) fn conflict(tool: &ToolId, reason: ConflictReason) {
    tracing::info!(
        target: TARGET,
        reason = reason_name(reason),
        "the key was used for another request; the action did not run"
    );
    count(tool, CallOutcome::Conflict);
}

/// Another call holds the claim; this one waits for it, until `deadline`.
/// Returns when the call's first wait began (`deadline` less `wait`),
/// without reading the clock.
pub(crate) fn waiting(tool: &ToolId, deadline: Instant, wait: Duration) -> Instant {
    tracing::debug!(target: TARGET, "another call holds the claim; waiting for it");
    #[cfg(feature = "metrics")]
    metrics::wait(tool);
    let _ = tool;
    deadline.checked_sub(wait).unwrap_or(deadline)
}

/// The wait started at `since` ended: the holder finished, released, or its
/// lease ran out. The clock is read only if someone records it.
pub(crate) fn woken(tool: &ToolId, since: Instant) {
    if tracing::enabled!(target: TARGET, Level::DEBUG) || cfg!(feature = "metrics") {
        let waited = since.elapsed();
        tracing::debug!(
            target: TARGET,
            waited_ms = waited.as_millis() as u64,
            "woken; claiming again"
        );
        #[cfg(feature = "metrics")]
        metrics::waited(tool, waited);
    }
    let _ = tool;
}

/// The wait deadline passed with the holder still acting.
pub(crate) fn wait_deadline_passed(tool: &ToolId, since: Instant) {
    let waited = since.elapsed();
    tracing::warn!(
        target: TARGET,
        waited_ms = waited.as_millis() as u64,
        "the wait deadline passed while another call still held the claim; nothing ran"
    );
    #[cfg(feature = "metrics")]
    metrics::waited(tool, waited);
    count(tool, CallOutcome::InProgress);
}

/// The outcome under the key is not on record: `recorded` if this call just
/// recorded it so (a takeover under `ReportUnknown`).
pub(crate) fn unknown_outcome(tool: &ToolId, recorded: bool) {
    if recorded {
        tracing::warn!(
            target: TARGET,
            "recorded the outcome as unknown: the action may have taken effect and nobody could \
             tell; an operator must check the provider, then resolve the key"
        );
    } else {
        tracing::warn!(
            target: TARGET,
            "the outcome under this key is unknown; nothing ran. An operator must check the \
             provider, then resolve the key"
        );
    }
    count(tool, CallOutcome::Unknown);
}

/// The action failed and its claim was released, so a retry acts again.
pub(crate) fn released(tool: &ToolId) {
    tracing::debug!(target: TARGET, "the action failed; released the claim so a retry acts again");
    count(tool, CallOutcome::Error);
}

/// The action failed and its error was recorded as final.
pub(crate) fn error_recorded(tool: &ToolId) {
    tracing::debug!(target: TARGET, "the action failed; recorded its error as final");
    count(tool, CallOutcome::Error);
}

/// A store step failed before the action: nothing ran. Returns the
/// guard's error for it.
pub(crate) fn store_failed(
    tool: &ToolId,
    store: &dyn Store,
    step: &'static str,
    err: StoreError,
) -> Error {
    tracing::error!(
        target: TARGET,
        step,
        error = &err as &(dyn std::error::Error + 'static),
        "the store failed, so the action was not run"
    );
    #[cfg(feature = "metrics")]
    metrics::store_error(store.kind(), step);
    let _ = store;
    count(tool, CallOutcome::StoreError);
    Error::from(err)
}

/// The action ran but its result could not be recorded.
pub(crate) fn not_recorded(tool: &ToolId, store: &dyn Store, err: &StoreError) {
    if let StoreError::LeaseLost = err {
        tracing::warn!(
            target: TARGET,
            "the action ran, but its claim was taken over after its lease ran out; \
             its result was not recorded"
        );
        count(tool, CallOutcome::LeaseLost);
        return;
    }
    tracing::error!(
        target: TARGET,
        error = err as &(dyn std::error::Error + 'static),
        "the action ran, but its result could not be recorded"
    );
    #[cfg(feature = "metrics")]
    metrics::store_error(store.kind(), "complete");
    let _ = store;
    count(tool, CallOutcome::NotRecorded);
}

/// A held claim's lease was renewed.
pub(crate) fn lease_renewed() {
    tracing::trace!(target: TARGET, "renewed the lease");
}

/// A renewal found the claim taken over.
pub(crate) fn lease_lost() {
    tracing::warn!(
        target: TARGET,
        "the lease was lost to a takeover while the action ran; its result will not be recorded"
    );
}

/// A renewal failed; the next is tried at its turn.
pub(crate) fn renewal_failed(store: &dyn Store, err: &StoreError) {
    tracing::warn!(
        target: TARGET,
        error = err as &(dyn std::error::Error + 'static),
        "renewing the lease failed; trying again at the next turn"
    );
    #[cfg(feature = "metrics")]
    metrics::store_error(store.kind(), "renew");
    let _ = store;
}

/// How a guarded call ended, as the `outcome` label of
/// `idempotent_tools_calls_total` names it.
#[derive(Clone, Copy)]
pub(crate) enum CallOutcome {
    Fresh,
    Replay,
    Failed,
    Conflict,
    InProgress,
    Unknown,
    Error,
    StoreError,
    NotRecorded,
    LeaseLost,
}

impl CallOutcome {
    #[cfg(feature = "metrics")]
    const ALL: [CallOutcome; 10] = [
        CallOutcome::Fresh,
        CallOutcome::Replay,
        CallOutcome::Failed,
        CallOutcome::Conflict,
        CallOutcome::InProgress,
        CallOutcome::Unknown,
        CallOutcome::Error,
        CallOutcome::StoreError,
        CallOutcome::NotRecorded,
        CallOutcome::LeaseLost,
    ];

    #[cfg(feature = "metrics")]
    fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Fresh => "fresh",
            CallOutcome::Replay => "replay",
            CallOutcome::Failed => "failed",
            CallOutcome::Conflict => "conflict",
            CallOutcome::InProgress => "in_progress",
            CallOutcome::Unknown => "unknown",
            CallOutcome::Error => "error",
            CallOutcome::StoreError => "store_error",
            CallOutcome::NotRecorded => "not_recorded",
            CallOutcome::LeaseLost => "lease_lost",
        }
    }
}

#[inline]
fn count(tool: &ToolId, outcome: CallOutcome) {
    #[cfg(feature = "metrics")]
    metrics::call(tool, outcome);
    let _ = (tool, outcome);
}

/// A store step that answers at once, timed like [`timed`].
#[inline(always)]
pub(crate) fn timed_now<R>(store: &dyn Store, step: &'static str, f: impl FnOnce() -> R) -> R {
    #[cfg(feature = "metrics")]
    {
        let kind = store.kind();
        let started = Instant::now();
        let out = f();
        metrics::store_latency(kind, step, started.elapsed());
        out
    }
    #[cfg(not(feature = "metrics"))]
    {
        let _ = (store, step);
        f()
    }
}

/// A store step, timed into `idempotent_tools_store_seconds` with the
/// `metrics` feature; the step itself, untouched, without it.
#[inline(always)]
pub(crate) fn timed<F: Future + Unpin>(store: &dyn Store, step: &'static str, fut: F) -> Timed<F> {
    let _ = (store, step);
    Timed {
        fut,
        #[cfg(feature = "metrics")]
        kind: store.kind(),
        #[cfg(feature = "metrics")]
        step,
        #[cfg(feature = "metrics")]
        started: None,
    }
}

/// The future [`timed`] returns: a type the guard's own futures can hold.
pub(crate) struct Timed<F> {
    fut: F,
    #[cfg(feature = "metrics")]
    kind: &'static str,
    #[cfg(feature = "metrics")]
    step: &'static str,
    #[cfg(feature = "metrics")]
    started: Option<Instant>,
}

impl<F: Future + Unpin> Future for Timed<F> {
    type Output = F::Output;

    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        #[cfg(feature = "metrics")]
        let started = *self.started.get_or_insert_with(Instant::now);
        let out = std::task::ready!(Pin::new(&mut self.fut).poll(cx));
        #[cfg(feature = "metrics")]
        metrics::store_latency(self.kind, self.step, started.elapsed());
        Poll::Ready(out)
    }
}
