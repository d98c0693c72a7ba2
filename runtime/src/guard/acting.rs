//! A claim whose action runs: its completion and its release.

use std::future::Future;
use std::time::SystemTime;

use crate::error::Error;
use crate::key::Key;
use crate::observe;
use crate::record::{Ending, Finished, Recorded};
use crate::store::StoreError;
use crate::tool::ToolId;

use super::active;
use super::held::Held;

/// A held claim whose action is about to run or running: the key it acts
/// as, for `current_key` and the re-entrancy check.
pub(super) struct Acting {
    held: Held,
    pub(super) active: active::Active,
    tool: ToolId,
}

impl Acting {
    pub(super) fn new(key: Key, tool: ToolId, mut held: Held) -> Acting {
        held.renew_while_acting();
        Acting {
            held,
            active: active::Active::inside(key),
            tool,
        }
    }

    /// Records the finished action; see [`Held::complete`].
    pub(super) fn complete(
        self,
        ending: Ending,
        value: Recorded,
    ) -> impl Future<Output = Result<(), Error>> {
        let Acting { held, active, tool } = self;
        let store = held.store();
        let finished = Finished {
            ending,
            value,
            finished_at: SystemTime::now(),
        };
        let recording = observe::timed(&*store, "complete", held.complete(finished));
        async move {
            match recording.await {
                Ok(()) => {
                    match ending {
                        Ending::Err => observe::error_recorded(&tool),
                        _ => observe::fresh(&tool),
                    }
                    Ok(())
                }
                Err(cause) => {
                    observe::not_recorded(&tool, &*store, &cause);
                    Err(not_recorded(active.into_key(), cause))
                }
            }
        }
    }

    /// Gives the claim up without a record; see [`Held::release`].
    pub(super) async fn release(self) {
        let store = self.held.store();
        observe::timed(&*store, "release", self.held.release()).await;
        observe::released(&self.tool);
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
