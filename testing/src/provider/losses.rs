//! Calls the provider loses or fails at a chosen moment: the caller whose
//! connection broke, and the request that acted and then failed.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard, PoisonError};

use tokio::sync::Notify;

use super::{Provider, ProviderError};

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

/// What becomes of a call once it reaches its moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Then {
    /// It never answers.
    Hangs,
    /// It answers with this error.
    Fails(ProviderError),
}

/// A call to lose: the next one on `order_id`, at `at`.
pub(super) struct Loss {
    ticket: u64,
    order_id: String,
    at: Moment,
    then: Then,
    on_reached: Box<dyn FnOnce() + Send>,
}

impl fmt::Debug for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loss")
            .field("order_id", &self.order_id)
            .field("at", &self.at)
            .field("then", &self.then)
            .finish_non_exhaustive()
    }
}

impl Provider {
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
        self.on_next_call(order_id, at, Then::Hangs, move || {
            notice.yes.store(true, Ordering::SeqCst);
            notice.notify.notify_waiters();
        });
        LostCall { reached }
    }

    /// Makes the next call on `order_id` carry out its refund and then
    /// answer with `error`, as a provider whose connection dropped
    /// ([`ProviderError::ConnectionDropped`]) or whose answer came too late
    /// ([`ProviderError::ReplyLost`]) after it acted: the effect happened,
    /// and the caller is told it may have. Both errors
    /// [classify](idempotent_tools::Classify) as
    /// [unknown](idempotent_tools::Failure::Unknown). Unlike
    /// [`Provider::lose_next_reply`], it picks the call by its order, so
    /// tests on other orders of a shared provider are never hit. Later
    /// calls answer normally.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idempotent_tools::{Classify, Failure};
    /// use idempotent_tools_testing::{Provider, ProviderError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let provider = Provider::with_delay(Duration::ZERO);
    /// provider.fail_next_call("1182", ProviderError::ConnectionDropped);
    /// let dropped = provider.refund("1182", 42, None).await;
    /// assert_eq!(dropped, Err(ProviderError::ConnectionDropped));
    /// assert_eq!(ProviderError::ConnectionDropped.failure(), Failure::Unknown);
    /// assert_eq!(provider.refunds_of("1182"), 1, "the refund was made all the same");
    /// # }
    /// ```
    pub fn fail_next_call(&self, order_id: &str, error: ProviderError) {
        self.on_next_call(order_id, Moment::Acted, Then::Fails(error), || {});
    }

    /// Stops the next call on `order_id` at `at`, then hangs or fails it
    /// as `then` says, running `on_reached` when one gets there. Returns a
    /// ticket for [`Provider::keep_call`].
    pub(crate) fn on_next_call(
        &self,
        order_id: &str,
        at: Moment,
        then: Then,
        on_reached: impl FnOnce() + Send + 'static,
    ) -> u64 {
        let ticket = self.inner.tickets.fetch_add(1, Ordering::SeqCst);
        self.losses().push(Loss {
            ticket,
            order_id: order_id.to_owned(),
            at,
            then,
            on_reached: Box::new(on_reached),
        });
        ticket
    }

    /// Takes back a loss no call has reached yet.
    pub(crate) fn keep_call(&self, ticket: u64) {
        self.losses().retain(|loss| loss.ticket != ticket);
    }

    /// If a loss waits for this call at this moment: tells it, and never
    /// answers, or answers with the loss's error.
    pub(super) async fn lost_at(&self, order_id: &str, at: Moment) -> Result<(), ProviderError> {
        let loss = {
            let mut losses = self.losses();
            let found = losses
                .iter()
                .position(|loss| loss.order_id == order_id && loss.at == at);
            found.map(|index| losses.remove(index))
        };
        let Some(loss) = loss else {
            return Ok(());
        };
        (loss.on_reached)();
        match loss.then {
            Then::Hangs => std::future::pending().await,
            Then::Fails(error) => Err(error),
        }
    }

    fn losses(&self) -> MutexGuard<'_, Vec<Loss>> {
        // Each statement under this lock leaves the list whole.
        self.inner
            .losses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
