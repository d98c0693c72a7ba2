//! The claim-first guard: how one guarded call runs.
//!
//! [`Call`] is what a user builds (`call`); its claim, and every answer that
//! ends a call without acting, is one non-generic core (`claim`); a claim
//! that is won acts under a [`held::Held`] drop guard (`held`, `acting`),
//! marked as the task's active key (`active`); and `drive` is the thin typed
//! shim that joins them around the tool's own future.

mod acting;
mod active;
mod call;
mod claim;
mod drive;
mod held;

pub use active::current_key;
pub use call::Call;
pub(crate) use drive::{ErrorCodec, drive};
