//! A claim: the request for one, the claim held, and a store's answer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::fingerprint::Fingerprint;
use crate::key::Key;
use crate::outcome::ConflictReason;
use crate::store::record::{Completion, RecordValue};
use crate::tool::ToolId;

/// A request to claim a key.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    /// The key.
    pub key: &'a Key,
    /// The tool asking.
    pub tool: &'a ToolId,
    /// The arguments beyond the key.
    pub fingerprint: Fingerprint,
    /// How long the claim holds without renewal before another caller may
    /// take it over.
    pub lease: Duration,
    /// How long the record is kept once finished.
    pub retention: Duration,
}

/// A held claim: the right to act under a key, until completed or released.
#[derive(Debug, Clone)]
pub struct Claim {
    /// The key claimed.
    pub key: Key,
    /// Who holds it. Completion and release check it.
    pub owner: u128,
    /// Bumped by every takeover. A holder whose fence is behind has lost its
    /// claim.
    pub fence: u64,
    /// Whether this claim took over from a holder whose lease expired: that
    /// holder may or may not have acted.
    pub taken_over: bool,
    /// How long the record is kept once finished.
    pub retention: Duration,
}

/// The answer to a claim.
///
/// A store answers with the [`Claim`] itself; the guard keeps the same
/// answer with the claim in a holder of its own (`C`), which renews its
/// lease and releases it if the call is dropped.
#[derive(Debug)]
pub enum ClaimAnswer<C = Claim> {
    /// The caller holds the claim and must act, then complete or release.
    Claimed(C),
    /// Another caller holds the claim with the same tool and arguments.
    /// Await the [`Wait`], then claim again.
    InFlight(Wait),
    /// The claim was completed earlier, with the same tool and arguments:
    /// its record is done, failed or unknown.
    Completed(Completion),
    /// The key was used for a different request.
    Conflict {
        /// What differed.
        reason: ConflictReason,
        /// The first request's result, if it finished successfully and came
        /// from the same tool.
        first: Option<RecordValue>,
    },
}

impl<C> ClaimAnswer<C> {
    /// The same answer, with a claim held as `hold` turns it.
    pub fn map_claim<D>(self, hold: impl FnOnce(C) -> D) -> ClaimAnswer<D> {
        match self {
            ClaimAnswer::Claimed(claim) => ClaimAnswer::Claimed(hold(claim)),
            ClaimAnswer::InFlight(wait) => ClaimAnswer::InFlight(wait),
            ClaimAnswer::Completed(finished) => ClaimAnswer::Completed(finished),
            ClaimAnswer::Conflict { reason, first } => ClaimAnswer::Conflict { reason, first },
        }
    }
}

/// Resolves when an in-flight claim may have changed: completed, released or
/// expired. The caller then claims again.
pub struct Wait(Pin<Box<dyn Future<Output = ()> + Send + 'static>>);

impl Wait {
    /// Wraps a store's wake-up future.
    pub fn new(fut: impl Future<Output = ()> + Send + 'static) -> Wait {
        Wait(Box::pin(fut))
    }
}

impl Future for Wait {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl fmt::Debug for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Wait")
    }
}
