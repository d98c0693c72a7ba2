//! The claim-first guard: how one guarded call runs.
//!
//! [`Call`] is what a user builds (`call`); its claim, and every answer that
//! ends a call without acting, is one non-generic core (`claim`); a claim
//! that is won acts under a [`held::Held`] drop guard (`held`, `acting`),
//! marked as the task's active key (`active`); `drive` is the thin typed
//! shim that joins them around the tool's own future ([`Call::run`], whose
//! three kinds are in `run`), with
//! `codec` recording a tool's error when errors are final; `transaction`
//! runs the action in a transaction of the store's, through the store's
//! half of it.

mod acting;
mod active;
mod backoff;
mod call;
mod claim;
mod codec;
mod drive;
mod held;
mod run;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod transaction;
mod verify;

use std::any::Any;
use std::sync::Arc;

use crate::{MemoryStore, store::Store};

pub use active::current_key;
pub use call::Call;
pub(crate) use codec::ErrorCodec;
pub(crate) use drive::{drive, drive_classified, unknown_error};
#[cfg(feature = "postgres")]
pub(crate) use transaction::transact;
pub(crate) use verify::Verifier;

/// The memory store, if `store` is one. Its steps are ready as soon as they
/// are asked, so the guard calls it inline and reads a replay in place: a
/// path private to the crate. Every other store, a wrapper around a memory
/// store included, runs its steps on tasks of their own, so that a call
/// dropped at any `.await` never leaves a claim nobody owns nor loses the
/// record of an action that ran.
fn memory(store: &Arc<dyn Store>) -> Option<&MemoryStore> {
    (&**store as &dyn Any).downcast_ref::<MemoryStore>()
}

/// Whether every step of `store` is ready at once (see [`memory`]).
fn answers_at_once(store: &Arc<dyn Store>) -> bool {
    memory(store).is_some()
}
