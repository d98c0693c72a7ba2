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
//! ticks run leases out, so a holder that stalls is taken over. The
//! guard's three takeover policies are modelled: the taker acts again,
//! records an unknown outcome, or asks the provider.
//!
//! Every action that has its effect counts as one more effect, as a
//! provider that takes no key sees them. Where the system has unknown
//! failures, an action may also fail in a way that may have taken effect:
//! with its effect (the provider applied it, then the answer was lost) or
//! without. Such a failure never releases the claim. Where the provider
//! can be asked (a [`callers::Lookup`]), the holder asks it, as the guard's
//! verification does: "applied" records the provider's result and returns
//! it, "not applied" releases the claim so that a retry acts, and "cannot
//! tell" (or a contradiction, or the call's wait running out) records an
//! unknown outcome; without a lookup, the outcome is recorded as unknown.
//! A takeover under the verify policy asks the same way: it replays what
//! was applied, acts on "not applied", and records an unknown outcome when
//! the provider cannot tell. The lookup lags: an effect shows in it a tick
//! after it happened, and "not applied" is trusted only once the settle
//! time has passed since the action may last have run (its failure, or the
//! takeover); until then the provider is asked again later. Where requests
//! may land late, the provider may take up the request of a failure that
//! had no effect a tick after the failure returned, and have its effect
//! then. The model holds the provider to what the settle time stands for
//! after a takeover: an effect shows in the lookup by the settle time
//! after its holder's lease ran out. A call dropped while the provider is
//! asked must leave its claim held, as a crash does.
//!
//! # The properties
//!
//! In every reachable state:
//!
//! - *at most one effect, but after a takeover*: no two actions have their
//!   effect under one key unless a lease ran out and the claim was taken
//!   over under the rerun policy, whose second effect the provider must
//!   deduplicate on the key (under report-unknown or verify, never);
//! - *no second effect when the provider can be asked*: where there is a
//!   lookup, no second effect at all, after an unknown failure or a
//!   takeover, though the provider takes no key. It holds under the verify
//!   policy; under the rerun policy, which asks nobody, the checker finds
//!   the takeover that acts a second time;
//! - *an unknown failure is never released without a "not applied"*: the
//!   claim of an action that may have taken effect is released only after
//!   the provider said, past the settle time, that it was not applied;
//! - *the record is its current holder's*: a stale holder's completion is
//!   always refused by the fence;
//! - *a fresh result is the one replayed*: a caller that acted and one that
//!   replays see the same recorded value;
//! - *an answer says truly whether the action ran*: a fresh result, a
//!   replay, a conflict, or an error that says whether the action ran here
//!   (`LeaseLost`, the action's own error: it ran; `InProgress`, an
//!   unknown outcome: it did not);
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
//! again or reports an unknown outcome, a conflict; and with unknown
//! failures, one found applied (its result returned), one found not applied
//! (released, and a retry acts), one nobody can tell (recorded as unknown),
//! and a takeover that finds the action applied (and replays it) or not
//! applied (and acts).
//!
//! The settle time must cover the lookup's lag and how late a request may
//! land: one shorter than the lag, or one that covers the lag but not a
//! request a tick late, is caught with a second effect.
//!
//! Five mistakes planted in the protocol ([`store::Flaw`]: a completion
//! that ignores the fence, a claim that checks and then acts, a holder that
//! leaves its claim behind, a "not applied" trusted before the settle time,
//! a claim released when its call is dropped while the provider is asked)
//! are each caught with a counterexample; so is the blind rerun, whose
//! takeover acts again without asking a provider that takes no key.
//!
//! # The states
//!
//! Each caller claims at most twice and renews at most once (not at all in
//! the systems with unknown failures: renewal is checked by the others,
//! and here would only add states); a lease lasts two ticks, and the clock
//! stops at three. The lookup lags a tick; the settle time is a tick, or
//! two where a request may land a tick late. Explored breadth first:
//!
//! | System | States |
//! |---|---|
//! | durable store, takeover reruns | 608,980 |
//! | durable store, takeover reports unknown | 181,300 |
//! | durable store, one caller with other arguments | 122,436 |
//! | memory store (leases never run out, no crash) | 4,060 |
//! | durable store, unknown failures verified, takeover verifies | 663,469 |
//! | the same, requests landing a tick late, a settle time of two | 615,835 |
//! | durable store, unknown failures without a lookup, takeover reports unknown | 77,452 |
//!
//! # What is not modelled
//!
//! More than one key, and more than one store; a provider that takes the
//! key (the model's provider never deduplicates); a future dropped while
//! its action's request is on its way (the guard cannot tell it from one
//! dropped before it was sent, and releases); a request that lands more
//! than a tick after its failure returned, or an effect that shows in the
//! lookup later than the settle time after its holder's lease ran out; a
//! contradiction as an answer of its own (it ends as "cannot tell" does);
//! the network and its failures (`Unavailable`, reconnects, a store step
//! retried after one); records past their retention and purges; the
//! operator's calls (`Records`); the wake-up channels themselves (a waiter
//! may claim again at any time, as on a spurious wake-up or a recheck); a
//! store's own replication.
//!
//! # Running it
//!
//! `cargo test -p idempotent-tools-model --test check` explores every
//! system (under a minute on two cores, even unoptimized); add
//! `-- --nocapture` to see the counts and times. This crate's `tests/agreement.rs` runs random sequences of the
//! four steps against the memory, SQLite, Postgres and Redis stores and
//! [`store::KeyStore`] side by side, and fails at the first answer that
//! differs: `cargo test -p idempotent-tools-model --test agreement`, with
//! `IDEMPOTENT_POSTGRES_URL` and `IDEMPOTENT_REDIS_URL` set for the servers.
#![deny(missing_docs)]

pub mod callers;
pub mod store;
