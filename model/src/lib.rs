//! The claim protocol of `idempotent-tools`, as a model: checked
//! exhaustively, and held against the real stores.
//!
//! # What is modelled
//!
//! [`store::KeyStore`] is one key of one store on plain data: absent, held
//! (owner, fence, the tick its lease runs out), or completed (done, failed
//! or unknown, with its value), and a logical clock. Its four steps are the
//! `Store` trait's: `claim` (claimed, taken over with a higher fence, in
//! flight, completed, or a conflict on other arguments), and `complete`,
//! `release` and `renew`, each refused unless the claim's owner and fence
//! are current (a holder completing again is answered as the first time).
//! Leases run out (the durable stores) or never do (the memory store).
//!
//! [`callers::Callers`] is three callers asking for the same key, driven as
//! the guard drives a call: claim; on a claim in flight wait, then claim
//! again or give up; act (the action has its effect) or fail (none); renew
//! while acting; complete, with a reply that may be lost and the completion
//! tried again, or release; crash at any point (the claim stays until its
//! lease runs out) or be dropped (the claim is released); and a clock whose
//! ticks run leases out, so a holder that stalls is taken over. Both of the
//! guard's takeover policies are modelled: the taker acts again, or records
//! an unknown outcome.
//!
//! # The properties
//!
//! In every reachable state:
//!
//! - *at most one effect, but after a takeover*: no two actions have their
//!   effect under one key unless a lease ran out and the claim was taken
//!   over under the rerun policy (under report-unknown, never);
//! - *the record is its current holder's*: a stale holder's completion is
//!   always refused by the fence;
//! - *a fresh result is the one replayed*: a caller that acted and one that
//!   replays see the same recorded value;
//! - *an answer says truly whether the action ran*: a fresh result, a
//!   replay, a conflict, or an error that says whether the action ran here
//!   (`LeaseLost`: it ran; `InProgress`, an unknown outcome: it did not);
//! - *a held claim has a holder, or one that crashed*: nothing is left
//!   claimed once every holder is gone, but a crashed holder's claim until
//!   its lease runs out and the next claim takes it over;
//! - *every caller ends*: no state is stuck with a caller that has not
//!   ended; a waiter replays, takes over, or gives up when its wait runs
//!   out. Every path is finite, so every caller ends.
//!
//! And examples are reached of each interesting turn: a takeover, a stale
//! completion refused, a waiter that replays and one whose wait runs out, a
//! lost completion reply recorded when tried again, a takeover that acts
//! again or reports an unknown outcome, a conflict.
//!
//! Three mistakes planted in the protocol ([`store::Flaw`]: a completion
//! that ignores the fence, a claim that checks and then acts, a holder that
//! leaves its claim behind) are each caught with a counterexample.
//!
//! # The states
//!
//! Each caller claims at most twice and renews at most once; a lease lasts
//! two ticks, and the clock stops at three. Explored breadth first:
//!
//! | System | States |
//! |---|---|
//! | durable store, takeover reruns | 608,980 |
//! | durable store, takeover reports unknown | 181,300 |
//! | durable store, one caller with other arguments | 122,436 |
//! | memory store (leases never run out, no crash) | 4,060 |
//!
//! # What is not modelled
//!
//! More than one key, and more than one store; the network and its
//! failures (`Unavailable`, reconnects, a store step retried after one);
//! records past their retention and purges; the operator's calls
//! (`Records`); the wake-up channels themselves (a waiter may claim again
//! at any time, as on a spurious wake-up or a recheck); a store's own
//! replication.
//!
//! # Running it
//!
//! `cargo test -p idempotent-tools-model --test check` explores every
//! system (seconds, even unoptimized); add `-- --nocapture` to see the
//! counts. This crate's `tests/agreement.rs` runs random sequences of the
//! four steps against the memory, SQLite, Postgres and Redis stores and
//! [`store::KeyStore`] side by side, and fails at the first answer that
//! differs: `cargo test -p idempotent-tools-model --test agreement`, with
//! `IDEMPOTENT_POSTGRES_URL` and `IDEMPOTENT_REDIS_URL` set for the servers.
#![deny(missing_docs)]

pub mod callers;
pub mod store;
