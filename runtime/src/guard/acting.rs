//! A claim whose action runs: its completion and its release.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::SystemTime;

use crate::error::Error;
use crate::key::Key;
use crate::observe::{self, Timed};
use crate::store::record::RecordState;
use crate::store::record::{Completion, RecordValue};
use crate::store::{Store, StoreError, StoreFuture, StoreResult};
use crate::tool::ToolId;

use super::active;
use super::held::Held;
use super::verify::Verification;

/// A held claim whose action is about to run or running: the key it acts
/// as, for `current_key` and the re-entrancy check.
pub(super) struct Acting {
    held: Held,
    pub(super) active: active::Active,
    tool: ToolId,
    /// How to ask the provider, if the action fails in a way that may have
    /// taken effect: boxed, as most calls have none.
    verification: Option<Box<Verification>>,
}

impl Acting {
    #[inline]
    pub(super) fn new(
        key: Key,
        tool: ToolId,
        mut held: Held,
        verification: Option<Box<Verification>>,
    ) -> Acting {
        held.renew_while_acting();
        Acting {
            held,
            active: active::Active::inside(key),
            tool,
            verification,
        }
    }

    /// The action is about to be polled, and may take effect from now on:
    /// if the call can ask the provider, a drop or a panic from here on
    /// leaves the claim to be settled by asking, not released.
    pub(super) fn may_take_effect(&mut self) {
        if let Some(v) = &self.verification
            && !self.held.verifies_if_abandoned()
        {
            let key = self.active.key().clone();
            self.held
                .verify_if_abandoned(key, self.tool.clone(), Verification::clone(v));
        }
    }

    /// The call's verification, taken out.
    pub(super) fn take_verification(&mut self) -> Option<Box<Verification>> {
        self.verification.take()
    }

    /// Completes the claim with the action's record; see [`Held::complete`].
    #[inline]
    pub(super) fn complete(self, state: RecordState, value: RecordValue) -> Completing {
        let Acting {
            held, active, tool, ..
        } = self;
        let store = held.store();
        let completion = Completion {
            state,
            value,
            completed_at: SystemTime::now(),
        };
        Completing {
            recording: observe::timed(&*store, "complete", held.complete(completion)),
            store,
            active,
            tool,
            state,
        }
    }

    /// The claim held, for a completion written in the action's own
    /// transaction.
    #[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
    pub(super) fn claim(&self) -> &crate::store::Claim {
        self.held.claim()
    }

    /// The tool acting.
    #[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
    pub(super) fn tool(&self) -> &ToolId {
        &self.tool
    }

    /// The store the claim is held in.
    #[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
    pub(super) fn store(&self) -> Arc<dyn Store> {
        self.held.store()
    }

    /// The lease's renewal, for the action's transaction to stop when it
    /// writes the record: dropped, it stops.
    #[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
    pub(super) fn take_renewal(&mut self) -> Option<Box<dyn std::any::Any + Send + Sync>> {
        self.held.take_renewal()
    }

    /// The completion committed with the action's transaction (or the claim
    /// was lost): nothing is left to release.
    #[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
    pub(super) fn settled(self) {
        self.held.settled();
    }

    /// Gives the claim up without a record; see [`Held::release`].
    pub(super) fn release(self) -> Releasing {
        let store = self.held.store();
        Releasing {
            releasing: observe::timed(&*store, "release", self.held.release()),
            tool: self.tool,
        }
    }
}

/// The completion of an action that ran. Dropping it leaves the record to
/// be written: the step runs on a task of its own for stores that do I/O.
pub(super) struct Completing {
    recording: Timed<StoreFuture<'static, StoreResult<()>>>,
    store: Arc<dyn Store>,
    active: active::Active,
    tool: ToolId,
    state: RecordState,
}

impl Future for Completing {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let recorded = ready!(Pin::new(&mut self.recording).poll(cx));
        Poll::Ready(match recorded {
            Ok(()) => {
                match self.state {
                    RecordState::Failed => observe::error_recorded(&self.tool),
                    RecordState::Unknown => observe::unknown_outcome(&self.tool, true),
                    _ => observe::fresh(&self.tool),
                }
                Ok(())
            }
            Err(cause) => {
                observe::not_recorded(&self.tool, &*self.store, &cause);
                Err(not_recorded(self.active.key().clone(), cause))
            }
        })
    }
}

/// The release of a claim whose action failed. Dropping it leaves the
/// release to run: on a task of its own for stores that do I/O.
pub(super) struct Releasing {
    releasing: Timed<StoreFuture<'static, ()>>,
    tool: ToolId,
}

impl Future for Releasing {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        ready!(Pin::new(&mut self.releasing).poll(cx));
        observe::released(&self.tool);
        Poll::Ready(())
    }
}

/// The error for an action that ran but whose result could not be recorded.
fn not_recorded(key: Key, cause: StoreError) -> Error {
    match cause {
        StoreError::LeaseLost => Error::LeaseLost { key },
        cause => Error::NotRecorded {
            key,
            result: None,
            cause,
        },
    }
}
