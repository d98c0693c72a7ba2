//! A stand-in payment provider that counts what reached it.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use serde::{Deserialize, Serialize};

/// How long [`Provider::new`] takes to answer: long enough that two calls in
/// one step overlap, short enough that a test stays fast.
pub const DEFAULT_DELAY: Duration = Duration::from_millis(20);

/// A refund the provider made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refund {
    /// The provider's id for it: `re_1`, `re_2`, ... in the order they were made.
    pub id: String,
    /// The order refunded.
    pub order_id: String,
    /// The amount, in whole dollars.
    pub usd: u64,
}

/// One request as it reached the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The order asked for.
    pub order_id: String,
    /// The amount asked for.
    pub usd: u64,
    /// The idempotency key sent with it, if any.
    pub key: Option<String>,
}

/// Why [`Provider::refund`] did not answer with a refund.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The provider made the refund, but its answer never came back: what a
    /// timeout after the action looks like to the caller. A retry under the
    /// same key gets the refund that was made; a retry without one makes
    /// another.
    #[error(
        "the payment provider did not answer in time (the refund may or may not have been made)"
    )]
    ReplyLost,
}

/// A stand-in for a payment provider such as Stripe.
///
/// - The first refund under an idempotency key is kept; a repeat under that
///   key gets the same refund back, and nothing new is made.
/// - Without a key, every call makes a refund.
/// - Each call waits for a simulated network delay that really yields, so
///   two calls in one step overlap as they would against a real provider,
///   and a check made before the call races.
/// - It counts what reached it: [`refunds_on_file`](Provider::refunds_on_file),
///   [`refunds_of`](Provider::refunds_of) one order, and
///   [`calls_received`](Provider::calls_received). Count these, never what
///   the model said at the end.
///
/// Clones share one provider, so a tool can hold a clone and a test can read
/// the counts from another.
///
/// ```
/// use std::time::Duration;
/// use idempotent_tools_testing::Provider;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idempotent_tools_testing::ProviderError> {
/// let provider = Provider::with_delay(Duration::ZERO);
/// let first = provider.refund("1182", 42, Some("run-1:refund:1182")).await?;
/// let again = provider.refund("1182", 42, Some("run-1:refund:1182")).await?;
/// assert_eq!(first, again);
/// provider.refund("1182", 42, None).await?;
/// assert_eq!(provider.refunds_on_file(), 2);
/// assert_eq!(provider.calls_received(), 3);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Provider {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    delay: Duration,
    lose_next_reply: AtomicBool,
    ledger: Mutex<Ledger>,
    losses: Mutex<Vec<Loss>>,
    tickets: AtomicU64,
}

/// Where [`Provider::lose_next_call`] loses a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Moment {
    /// As the call arrives (it is counted in
    /// [`calls_received`](Provider::calls_received)), before the refund is
    /// made: nothing happened.
    BeforeActing,
    /// Once the refund is made, before its answer goes back: the effect
    /// happened, and the caller never hears of it.
    Acted,
}

/// A call the provider will lose, once one reaches it: see
/// [`Provider::lose_next_call`].
#[derive(Debug, Clone)]
pub struct LostCall {
    reached: Arc<Reached>,
}

#[derive(Debug, Default)]
struct Reached {
    yes: AtomicBool,
    notify: Notify,
}

impl LostCall {
    /// Waits until a call has reached the moment it is lost at (at once if
    /// one has).
    pub async fn reached(&self) {
        loop {
            let notified = self.reached.notify.notified();
            if self.reached.yes.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }

    /// Whether a call has reached the moment it is lost at.
    pub fn is_reached(&self) -> bool {
        self.reached.yes.load(Ordering::SeqCst)
    }
}

/// A call to lose: the next one on `order_id`, at `at`.
struct Loss {
    ticket: u64,
    order_id: String,
    at: Moment,
    on_reached: Box<dyn FnOnce() + Send>,
}

impl fmt::Debug for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loss")
            .field("order_id", &self.order_id)
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Ledger {
    /// Every refund made, in order.
    refunds: Vec<Refund>,
    /// Index into `refunds` of the refund kept under each key.
    by_key: HashMap<String, usize>,
    received: Vec<Received>,
}

impl Default for Provider {
    fn default() -> Provider {
        Provider::new()
    }
}

impl Provider {
    /// A provider that answers after [`DEFAULT_DELAY`] (20 ms).
    pub fn new() -> Provider {
        Provider::with_delay(DEFAULT_DELAY)
    }

    /// A provider that answers after `delay`. Even a zero delay yields to the
    /// scheduler once, so other calls still get to run in between.
    pub fn with_delay(delay: Duration) -> Provider {
        Provider {
            inner: Arc::new(Inner {
                delay,
                lose_next_reply: AtomicBool::new(false),
                ledger: Mutex::new(Ledger::default()),
                losses: Mutex::new(Vec::new()),
                tickets: AtomicU64::new(0),
            }),
        }
    }

    /// Makes the next call carry out its refund and then fail with
    /// [`ProviderError::ReplyLost`], as a timeout after the action would.
    /// Later calls answer normally.
    pub fn lose_next_reply(&self) {
        self.inner.lose_next_reply.store(true, Ordering::SeqCst);
    }

    /// Makes the next call on `order_id` stop at `at` and never answer, as
    /// for a caller whose connection broke there: at [`Moment::Acted`] the
    /// refund is made and the answer never comes back. The call stays
    /// pending until its caller drops it (a timeout around it, a cancelled
    /// task). Later calls answer normally. The returned [`LostCall`] says
    /// when a call reached that moment, so a test drops its caller then,
    /// and not at a moment the machine's timing picks.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idempotent_tools_testing::{Moment, Provider};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), idempotent_tools_testing::ProviderError> {
    /// let provider = Provider::with_delay(Duration::ZERO);
    /// let lost = provider.lose_next_call("1182", Moment::Acted);
    /// tokio::select! {
    ///     _ = provider.refund("1182", 42, None) => unreachable!("a lost call never answers"),
    ///     () = lost.reached() => {} // the caller gives up here
    /// }
    /// assert_eq!(provider.refunds_of("1182"), 1, "the refund was made all the same");
    /// provider.refund("1182", 42, None).await?;
    /// assert_eq!(provider.refunds_of("1182"), 2, "a retry without a key makes another");
    /// # Ok(()) }
    /// ```
    pub fn lose_next_call(&self, order_id: &str, at: Moment) -> LostCall {
        let reached = Arc::new(Reached::default());
        let notice = Arc::clone(&reached);
        self.on_next_call(order_id, at, move || {
            notice.yes.store(true, Ordering::SeqCst);
            notice.notify.notify_waiters();
        });
        LostCall { reached }
    }

    /// Loses the next call on `order_id` at `at`, running `on_reached` when
    /// one gets there. Returns a ticket for [`Provider::keep_call`].
    pub(crate) fn on_next_call(
        &self,
        order_id: &str,
        at: Moment,
        on_reached: impl FnOnce() + Send + 'static,
    ) -> u64 {
        let ticket = self.inner.tickets.fetch_add(1, Ordering::SeqCst);
        self.losses().push(Loss {
            ticket,
            order_id: order_id.to_owned(),
            at,
            on_reached: Box::new(on_reached),
        });
        ticket
    }

    /// Takes back a loss no call has reached yet.
    pub(crate) fn keep_call(&self, ticket: u64) {
        self.losses().retain(|loss| loss.ticket != ticket);
    }

    /// If a loss waits for this call at this moment: tells it, and never
    /// answers.
    async fn lost_at(&self, order_id: &str, at: Moment) {
        let loss = {
            let mut losses = self.losses();
            let found = losses
                .iter()
                .position(|loss| loss.order_id == order_id && loss.at == at);
            found.map(|index| losses.remove(index))
        };
        if let Some(loss) = loss {
            (loss.on_reached)();
            std::future::pending::<()>().await;
        }
    }

    fn losses(&self) -> MutexGuard<'_, Vec<Loss>> {
        // Each statement under this lock leaves the list whole.
        self.inner
            .losses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Refunds `usd` on `order_id`, under the idempotency `key` if one is
    /// given.
    ///
    /// The call is counted when it arrives, then waits for the network
    /// delay; the refund is then looked up and made in one step, as a real
    /// provider does with its own unique index on keys.
    pub async fn refund(
        &self,
        order_id: &str,
        usd: u64,
        key: Option<&str>,
    ) -> Result<Refund, ProviderError> {
        self.ledger().received.push(Received {
            order_id: order_id.to_owned(),
            usd,
            key: key.map(str::to_owned),
        });
        self.lost_at(order_id, Moment::BeforeActing).await;
        self.network().await;
        let refund = {
            let mut ledger = self.ledger();
            let kept = key.and_then(|key| ledger.by_key.get(key).copied());
            match kept {
                Some(index) => ledger.refunds[index].clone(),
                None => {
                    let refund = Refund {
                        id: format!("re_{}", ledger.refunds.len() + 1),
                        order_id: order_id.to_owned(),
                        usd,
                    };
                    ledger.refunds.push(refund.clone());
                    if let Some(key) = key {
                        let index = ledger.refunds.len() - 1;
                        ledger.by_key.insert(key.to_owned(), index);
                    }
                    refund
                }
            }
        };
        self.lost_at(order_id, Moment::Acted).await;
        if self.inner.lose_next_reply.swap(false, Ordering::SeqCst) {
            return Err(ProviderError::ReplyLost);
        }
        Ok(refund)
    }

    /// How many refunds the provider made: the number that matters.
    pub fn refunds_on_file(&self) -> usize {
        self.ledger().refunds.len()
    }

    /// How many refunds the provider made on `order_id`.
    ///
    /// For a provider that several tests or tools share, each with its own
    /// order: each counts only the refunds of its order, so tests that run
    /// at the same time never count each other's.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idempotent_tools_testing::Provider;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), idempotent_tools_testing::ProviderError> {
    /// let provider = Provider::with_delay(Duration::ZERO);
    /// provider.refund("1182", 42, None).await?;
    /// provider.refund("1182", 42, None).await?;
    /// provider.refund("1183", 42, None).await?;
    /// assert_eq!(provider.refunds_of("1182"), 2);
    /// assert_eq!(provider.refunds_of("1183"), 1);
    /// assert_eq!(provider.refunds_of("1184"), 0);
    /// # Ok(()) }
    /// ```
    pub fn refunds_of(&self, order_id: &str) -> usize {
        let ledger = self.ledger();
        ledger
            .refunds
            .iter()
            .filter(|refund| refund.order_id == order_id)
            .count()
    }

    /// How many refund calls reached the provider, repeats included.
    pub fn calls_received(&self) -> usize {
        self.ledger().received.len()
    }

    /// The refunds made, in order.
    pub fn refunds(&self) -> Vec<Refund> {
        self.ledger().refunds.clone()
    }

    /// The calls that reached the provider, in order of arrival.
    pub fn received(&self) -> Vec<Received> {
        self.ledger().received.clone()
    }

    async fn network(&self) {
        // A zero-length sleep may complete without yielding; the network
        // always lets someone else run.
        tokio::task::yield_now().await;
        if !self.inner.delay.is_zero() {
            tokio::time::sleep(self.inner.delay).await;
        }
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        // The ledger is consistent after every statement, so a panic
        // elsewhere while it was locked leaves nothing half-written.
        self.inner
            .ledger
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
