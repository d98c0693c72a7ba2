//! Coalesced round trips: asks of one kind (claims, say) that arrive while
//! earlier ones are on the wire go together in the next round trip.
//!
//! A caller [`ask`](Coalescer::ask)s and awaits its own answer. An ask that
//! finds no batch of its kind on the wire goes at once, alone: nothing
//! waits for company. So does one that finds fewer than
//! [`Limits::in_flight`] batches there carrying fewer than that many asks
//! between them: a light load goes side by side. Other asks queue up, and
//! the first batch to come back takes them, up to [`Limits::batch`] at a
//! time, as its next one, if another could go then; else it leaves them to
//! the batches still on the wire. Under load, asks thus wait for the batch
//! ahead and go in fewer, larger batches. Two asks under
//! the same key never share a batch (a statement could not tell their rows
//! apart): the second waits for the next.
//!
//! Batches run on tasks of their own, so a caller that stops waiting never
//! cancels the others' round trip. A caller dropped while its ask is queued
//! is left out of the batch; one dropped while its batch is on the wire
//! leaves its answer undelivered, and the answer's own `Drop` undoes
//! whatever it holds (a claim made for nobody is released). No lock is
//! held across an `.await`.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use crate::store::{StoreError, StoreResult};

/// An ask that can go in a batch: what it is keyed by, so that two asks
/// under one key never share a batch.
pub(crate) trait Ask: Send + 'static {
    /// What two asks in one batch must not share.
    type Key: Eq + Hash;

    /// This ask's key.
    fn key(&self) -> Self::Key;
}

/// How much is coalesced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The most asks in one batch.
    pub batch: usize,
    /// The most batches of one kind on the wire at once; beyond the first,
    /// another goes only while those carry fewer asks than this.
    pub in_flight: usize,
}

/// One caller's ask in a batch, with the way back to its caller.
pub(crate) struct Member<R, A> {
    /// What the caller asked.
    pub ask: R,
    reply: oneshot::Sender<A>,
}

impl<R, A> Member<R, A> {
    /// Sends the caller its answer. A caller that is gone never gets it:
    /// the answer is dropped, and its `Drop` undoes what it holds.
    pub(crate) fn answer(self, answer: A) {
        drop(self.reply.send(answer));
    }

    /// Whether the caller stopped waiting.
    fn gone(&self) -> bool {
        self.reply.is_closed()
    }
}

/// The asks of one kind waiting for a round trip, and the batches on it.
pub(crate) struct Coalescer<R, A> {
    queue: Mutex<Queue<R, A>>,
    limits: Limits,
}

struct Queue<R, A> {
    waiting: VecDeque<Member<R, A>>,
    in_flight: usize,
    /// The asks in the batches on the wire.
    on_wire: usize,
}

impl<R, A> Queue<R, A> {
    /// Whether another batch may go: none is on the wire, or fewer than
    /// `limit` batches are and they carry fewer than `limit` asks between
    /// them. Under a light load asks go at once, side by side; under a
    /// heavy one they wait for the batch ahead and go together, in fewer
    /// and larger batches.
    fn may_send(&self, limit: usize) -> bool {
        self.in_flight == 0 || (self.in_flight < limit && self.on_wire < limit)
    }
}

impl<R: Ask, A: Send + 'static> Coalescer<R, A> {
    /// No asks yet; at least one ask per batch and one batch on the wire.
    pub(crate) fn new(limits: Limits) -> Coalescer<R, A> {
        Coalescer {
            queue: Mutex::new(Queue {
                waiting: VecDeque::new(),
                in_flight: 0,
                on_wire: 0,
            }),
            limits: Limits {
                batch: limits.batch.max(1),
                in_flight: limits.in_flight.max(1),
            },
        }
    }

    /// Asks, and waits for this ask's own answer. `run` carries out one
    /// batch and answers each of its members; it runs on a task of its own
    /// when there is a runtime to spawn it on.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] if the batch ended without answering
    /// (its task panicked, or the runtime shut down under it).
    pub(crate) async fn ask<F, Fut>(self: &Arc<Self>, ask: R, run: F) -> StoreResult<A>
    where
        F: Fn(Vec<Member<R, A>>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let first = {
            let mut queue = self.lock();
            queue.waiting.push_back(Member { ask, reply });
            if queue.may_send(self.limits.in_flight) {
                queue.in_flight += 1;
                Some(queue.take(self.limits.batch))
            } else {
                None
            }
        };
        if let Some(batch) = first {
            // The slot's guard exists from the moment the slot is taken: a
            // task dropped before it first runs (its runtime shutting down)
            // still gives the slot back.
            let slot = Slot {
                coalescer: Arc::clone(self),
                held: true,
                on_wire: batch.len(),
            };
            let driven = drive(slot, batch, run);
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(driven)),
                Err(_) => driven.await,
            }
        }
        answer.await.map_err(|_| {
            StoreError::Unavailable("a batch of store steps ended without an answer".into())
        })
    }

    /// How many asks wait for a batch to go.
    pub(crate) fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    fn lock(&self) -> MutexGuard<'_, Queue<R, A>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<R: Ask, A> Queue<R, A> {
    /// The next batch: the oldest asks whose callers still wait, up to
    /// `most`, one per key. Callers that are gone are dropped here, their
    /// asks never sent.
    fn take(&mut self, most: usize) -> Vec<Member<R, A>> {
        let mut batch = Vec::new();
        let mut keys = HashSet::new();
        let mut left = VecDeque::new();
        while let Some(member) = self.waiting.pop_front() {
            if member.gone() {
                continue;
            }
            if batch.len() < most && keys.insert(member.ask.key()) {
                batch.push(member);
            } else {
                left.push_back(member);
            }
        }
        self.waiting = left;
        self.on_wire += batch.len();
        batch
    }
}

/// Runs batches for as long as asks wait, then gives its slot back.
async fn drive<R, A, F, Fut>(mut slot: Slot<R, A>, first: Vec<Member<R, A>>, run: F)
where
    R: Ask,
    A: Send + 'static,
    F: Fn(Vec<Member<R, A>>) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut batch = first;
    loop {
        if !batch.is_empty() {
            run(batch).await;
        }
        let coalescer = Arc::clone(&slot.coalescer);
        let mut queue = coalescer.lock();
        queue.on_wire -= slot.on_wire;
        slot.on_wire = 0;
        // The next batch goes from here if another could go now; else
        // the batches still on the wire take the asks waiting.
        queue.in_flight -= 1;
        batch = if queue.may_send(coalescer.limits.in_flight) {
            queue.take(coalescer.limits.batch)
        } else {
            Vec::new()
        };
        if batch.is_empty() {
            slot.held = false;
            return;
        }
        queue.in_flight += 1;
        slot.on_wire = batch.len();
    }
}

/// A batch slot, given back if its task ends abnormally (a panic, a runtime
/// shutting down, before or after the task first ran). The last slot given
/// back that way also answers the asks still queued, with an error, so that
/// none waits forever.
struct Slot<R, A> {
    coalescer: Arc<Coalescer<R, A>>,
    held: bool,
    /// The asks of its batch on the wire.
    on_wire: usize,
}

impl<R, A> Drop for Slot<R, A> {
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        let mut queue = self
            .coalescer
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        queue.in_flight -= 1;
        queue.on_wire -= self.on_wire;
        if queue.in_flight == 0 {
            // Their senders dropped, the callers are told.
            queue.waiting.clear();
        }
    }
}

#[cfg(test)]
mod tests;
