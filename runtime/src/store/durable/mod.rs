//! The shared core of the durable stores (SQLite, Postgres, and any store
//! that keeps claims on a server or in a file).
//!
//! A durable store is a [`Backend`] (one method per step, each one atomic
//! in the database) behind a public type that names it through
//! [`Durable`]. Everything the steps have in common lives here once:
//!
//! - [`forward`]: the single `impl Store` for every durable store. It draws
//!   the owner token, judges a row someone else holds or finished
//!   ([`verdict`]), checks that a completion, release or renewal changed a
//!   row still held by its [`Holder`] (or reports
//!   [`StoreError::LeaseLost`](crate::store::StoreError::LeaseLost)), refuses a
//!   result that does not store as JSON before any I/O, loops purges in
//!   batches, and checks what an operator reads.
//! - [`encode`]: time as milliseconds, owner tokens as 16 bytes, fences as
//!   signed integers, states as text.
//! - [`wait`]: the poll-with-backoff wait until a holder lets go.
//! - `coalesce`: steps of one kind waiting while a round trip is in flight
//!   go together in the next one, each caller still getting its own answer.
//! - `waiters`: the waiters of a store that listens on one connection
//!   (Postgres, Redis), by key, woken by a notification or all at once.
//!
//! # Plugging a new store in
//!
//! 1. Write its state as a type that implements [`Backend`]: `claim`
//!    returns [`Found::Mine`] when the caller now holds the key, or the
//!    [`Row`] it found; `complete`, `release` and `renew` return how many
//!    rows they changed where the owner and fence matched (the forwarding
//!    turns zero into `LeaseLost`); `held_by` answers the waiter's look;
//!    `subscribe` and `wait` give waiters the store's wake-up (or just
//!    [`wait::until_let_go`] with no wake-up (`None`)).
//! 2. Give the public type a field `Arc<TheBackend>` and implement
//!    [`Durable`] for it: it then is a [`Store`](crate::store::Store).
//! 3. Run the durable test suite against it.
//!
//! A Redis store, say, is a `Backend` whose steps each call one server-side
//! script, whose `Subscription` is a pub/sub subscription taken before the
//! claim, and whose `wait` wakes on it; the verdict on a found record, the
//! owner and fence checks, the JSON check and the forwarding come from
//! here.
//!
//! `Backend` and `Durable` are public in name only, in a private module:
//! nothing outside the crate can name them, so they are sealed, and a
//! store written outside the library implements `Store` directly (the
//! example on [`Store`](crate::store::Store) compiles beside the blanket impl).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::key::Key;
use crate::{
    store::record::RecordState,
    store::records::{Record, RecordCount, RecordQuery},
    store::{Claim, ClaimRequest, StoreResult, Wait},
};

#[cfg(any(feature = "postgres", feature = "redis"))]
pub(crate) mod coalesce;
pub(crate) mod encode;
mod forward;
#[cfg(any(feature = "postgres", feature = "redis"))]
pub(crate) mod reconnect;
pub(crate) mod verdict;
pub(crate) mod wait;
#[cfg(any(feature = "postgres", feature = "redis"))]
pub(crate) mod waiters;

pub(crate) use verdict::Found;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use verdict::{Row, RowState};

/// Who holds a claim, as the durable stores check it: the key's digest, the
/// owner token and the fence. A step changes a row only where all three
/// match, so a holder whose claim was taken over changes nothing.
#[derive(Debug, Clone, Copy)]
pub struct Holder {
    /// The key's digest, the row's primary key.
    pub digest: [u8; 32],
    /// The owner token.
    pub owner: u128,
    /// The fence.
    pub fence: u64,
}

impl Holder {
    /// The holder of a claim this caller holds.
    pub(crate) fn of(claim: &Claim) -> Holder {
        Holder {
            digest: claim.key.digest(),
            owner: claim.owner,
            fence: claim.fence,
        }
    }

    /// The owner token as stored.
    pub(crate) fn owner_bytes(&self) -> [u8; 16] {
        encode::owner_bytes(self.owner)
    }

    /// The fence as stored.
    pub(crate) fn fence_column(&self) -> i64 {
        encode::fence_to(self.fence)
    }
}

/// A completion as a backend writes it: the result already checked to
/// store as JSON.
pub struct CompletionRow {
    /// The state, as [`RecordState::as_str`](crate::store::record::RecordState::as_str).
    pub state: &'static str,
    /// The result as JSON text.
    pub json: String,
    /// When the action finished.
    pub completed_at: SystemTime,
    /// How long the record is kept.
    pub retention: Duration,
}

/// What a forget did: removed a row, or left a live claim in place.
pub struct Forgotten {
    /// Whether a row was removed.
    pub removed: bool,
    /// Whether a claim whose lease is live is left under the key.
    pub live: bool,
}

/// What a resolve found under a key, the write having checked it.
pub enum Resolved {
    /// The unknown outcome (or the claim whose lease ran out) was resolved.
    Changed,
    /// No record, or one past its retention.
    Missing,
    /// A claim whose lease is live.
    Live,
    /// A record whose outcome is known, in this state.
    Known(RecordState),
}

/// One durable store's steps, each atomic in its database.
pub trait Backend: Send + Sync + Sized + 'static {
    /// The store's kind as traces and metrics name it.
    const KIND: &'static str;

    /// What a waiter holds from before the claim statement so that a
    /// completion after it is never missed.
    type Subscription: Send + 'static;

    /// Subscribes to wake-ups for a key, before the claim statement.
    fn subscribe(&self, digest: [u8; 32]) -> Self::Subscription;

    /// Claims a key for `owner`, or returns the row found.
    fn claim<'a>(
        &'a self,
        req: &'a ClaimRequest<'a>,
        owner: u128,
    ) -> impl Future<Output = StoreResult<Found>> + Send + 'a;

    /// Waits on a claim held by `holder` until it may have changed.
    fn wait(
        self: Arc<Self>,
        subscription: Self::Subscription,
        holder: Holder,
        lease_left: Duration,
    ) -> Wait;

    /// The lease left on a claim if `holder` still holds it.
    fn held_by<'a>(
        &'a self,
        holder: &'a Holder,
    ) -> impl Future<Output = StoreResult<Option<Duration>>> + Send + 'a;

    /// Completes the claim `holder` holds (or already completed); returns
    /// the rows changed.
    fn complete(
        &self,
        holder: Holder,
        done: CompletionRow,
    ) -> impl Future<Output = StoreResult<u64>> + Send + '_;

    /// Deletes the claim `holder` holds; returns the rows changed.
    fn release(&self, holder: Holder) -> impl Future<Output = StoreResult<u64>> + Send + '_;

    /// Renews the lease of the claim `holder` holds; returns the rows
    /// changed.
    fn renew(
        &self,
        holder: Holder,
        lease: Duration,
        retention: Duration,
    ) -> impl Future<Output = StoreResult<u64>> + Send + '_;

    /// The most rows one purge statement deletes.
    fn purge_batch(&self) -> usize;

    /// Deletes up to [`Backend::purge_batch`] expired rows; returns how
    /// many.
    fn purge_some(&self) -> impl Future<Output = StoreResult<u64>> + Send + '_;

    /// Removes a completed record or an expired claim, or anything if
    /// `force`.
    fn forget(
        &self,
        digest: [u8; 32],
        force: bool,
    ) -> impl Future<Output = StoreResult<Forgotten>> + Send + '_;

    /// Resolves an unknown outcome, or a claim whose lease ran out: makes
    /// it `done` with `applied` (the result as JSON text), keeping its
    /// expiry and bumping its fence, or removes it when `applied` is
    /// `None`, waking the waiters of a removed or resolved claim. The
    /// statement checks the state itself.
    fn resolve(
        &self,
        digest: [u8; 32],
        applied: Option<String>,
    ) -> impl Future<Output = StoreResult<Resolved>> + Send + '_;

    /// Up to `limit` records matching `query`, in key order.
    fn list<'a>(
        &'a self,
        query: &'a RecordQuery,
        limit: i64,
    ) -> impl Future<Output = StoreResult<Vec<Record>>> + Send + 'a;

    /// The record under a key's digest, if any.
    fn inspect<'a>(
        &'a self,
        key: &'a Key,
    ) -> impl Future<Output = StoreResult<Option<Record>>> + Send + 'a;

    /// Records counted by tool and state, in any order.
    fn count(&self) -> impl Future<Output = StoreResult<Vec<RecordCount>>> + Send + '_;
}

/// A public store type over a [`Backend`]: implementing it makes the type
/// a [`Store`](crate::store::Store), through the one forwarding in [`forward`].
pub trait Durable: Send + Sync + 'static {
    /// The steps.
    type Backend: Backend;

    /// The store's state.
    fn backend(&self) -> &Arc<Self::Backend>;
}
