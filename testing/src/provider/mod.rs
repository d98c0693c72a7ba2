//! A stand-in payment provider that counts what reached it.

mod lookup;
mod losses;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use idempotent_tools::{Classify, Failure};

pub use lookup::Lag;
pub(crate) use losses::Then;
pub use losses::{LostCall, Moment};

use lookup::Visible;
use losses::Loss;

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
    /// The provider made the refund, then the connection dropped before its
    /// answer came back (a reset, a gateway's 502): the caller cannot tell
    /// whether it was made. See [`Provider::fail_next_call`].
    #[error(
        "the connection to the payment provider dropped before its answer (the refund may or may not have been made)"
    )]
    ConnectionDropped,
}

/// Every error the provider answers with comes after it may have acted:
/// [unknown](Failure::Unknown), so a guarded tool that hands it on
/// through [`Call::run_classified`](idempotent_tools::call::Call::run_classified)
/// never acts again blindly.
impl Classify for ProviderError {
    fn failure(&self) -> Failure {
        match self {
            ProviderError::ReplyLost | ProviderError::ConnectionDropped => Failure::Unknown,
        }
    }
}

/// A stand-in for a payment provider such as Stripe.
///
/// - The first refund under an idempotency key is kept; a repeat under that
///   key gets the same refund back, and nothing new is made.
/// - Without a key, every call makes a refund; so does every call to a
///   provider [that ignores keys](Provider::ignoring_keys).
/// - Each call waits for a simulated network delay that really yields, so
///   two calls in one step overlap as they would against a real provider,
///   and a check made before the call races.
/// - It counts what reached it: [`refunds_on_file`](Provider::refunds_on_file),
///   [`refunds_of`](Provider::refunds_of) one order, and
///   [`calls_received`](Provider::calls_received). Count these, never what
///   the model said at the end.
/// - It fails as real providers do, on the call and at the moment a test
///   picks: [`lose_next_call`](Provider::lose_next_call) (never answers),
///   [`fail_next_call`](Provider::fail_next_call) (acts, then answers with
///   an error that may have taken effect), and its lookup
///   [`refund_of`](Provider::refund_of), for a tool's verification, can
///   [lag](Provider::with_lookup_lag) behind the refunds made.
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
    ignores_keys: AtomicBool,
    lose_next_reply: AtomicBool,
    ledger: Mutex<Ledger>,
    losses: Mutex<Vec<Loss>>,
    tickets: AtomicU64,
}

#[derive(Debug, Default)]
struct Ledger {
    /// Every refund made, in order.
    refunds: Vec<Refund>,
    /// Index into `refunds` of the refund kept under each key.
    by_key: HashMap<String, usize>,
    /// When each refund in `refunds` becomes visible to lookups.
    visible: Vec<Visible>,
    /// How far lookups lag behind refunds made from now on.
    lag: Lag,
    received: Vec<Received>,
    /// How many lookups reached the provider.
    lookups: usize,
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
                ignores_keys: AtomicBool::new(false),
                lose_next_reply: AtomicBool::new(false),
                ledger: Mutex::new(Ledger::default()),
                losses: Mutex::new(Vec::new()),
                tickets: AtomicU64::new(0),
            }),
        }
    }

    /// Makes the provider ignore idempotency keys, as many real services
    /// do: every call makes a refund, even under a key already used (the
    /// key is still noted in [`received`](Provider::received)). A guarded
    /// tool on such a provider keeps a retry from refunding twice only by
    /// never acting again blindly: its errors
    /// [classified](idempotent_tools::Classify), and a
    /// [verification](idempotent_tools::call::Call::verify) that asks
    /// [`refund_of`](Provider::refund_of). It changes the provider that
    /// every clone shares.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idempotent_tools_testing::Provider;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), idempotent_tools_testing::ProviderError> {
    /// let provider = Provider::with_delay(Duration::ZERO).ignoring_keys();
    /// let first = provider.refund("1182", 42, Some("run-1:refund:1182")).await?;
    /// let again = provider.refund("1182", 42, Some("run-1:refund:1182")).await?;
    /// assert_ne!(first, again);
    /// assert_eq!(provider.refunds_of("1182"), 2);
    /// # Ok(()) }
    /// ```
    pub fn ignoring_keys(self) -> Provider {
        self.inner.ignores_keys.store(true, Ordering::SeqCst);
        self
    }

    /// Makes the next call carry out its refund and then fail with
    /// [`ProviderError::ReplyLost`], as a timeout after the action would.
    /// Later calls answer normally.
    pub fn lose_next_reply(&self) {
        self.inner.lose_next_reply.store(true, Ordering::SeqCst);
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
        self.lost_at(order_id, Moment::BeforeActing).await?;
        self.network().await;
        let key = key.filter(|_| !self.inner.ignores_keys.load(Ordering::SeqCst));
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
                    let visible = Visible::made_now(ledger.lag);
                    ledger.visible.push(visible);
                    if let Some(key) = key {
                        let index = ledger.refunds.len() - 1;
                        ledger.by_key.insert(key.to_owned(), index);
                    }
                    refund
                }
            }
        };
        self.lost_at(order_id, Moment::Acted).await?;
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
