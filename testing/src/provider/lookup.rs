//! The provider's lookup of an order's refunds, for a tool's verification,
//! and how far it lags behind the refunds made.

use std::time::Duration;

use tokio::time::Instant;

use super::{Provider, Refund};

/// How far the provider's lookups lag behind its refunds, as a provider's
/// search index or read replica does: a refund is found by
/// [`Provider::refund_of`] only once the lookups of its order have missed
/// it [`lookups`](Lag::lookups) times and [`time`](Lag::time) has passed
/// since it was made. Set with [`Provider::with_lookup_lag`].
///
/// A count of lookups is the same on every machine, for a test that asks a
/// set number of times; a time suits a tool whose verification waits out a
/// [`settle`](idempotent_tools::call::Call::settle) time at least as long,
/// however busy the machine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lag {
    misses: u32,
    time: Duration,
}

impl Lag {
    /// No lag: a refund is found as soon as it is made.
    pub const NONE: Lag = Lag {
        misses: 0,
        time: Duration::ZERO,
    };

    /// The first `misses` lookups of an order after a refund on it was
    /// made do not find it.
    pub const fn lookups(misses: u32) -> Lag {
        Lag {
            misses,
            time: Duration::ZERO,
        }
    }

    /// Lookups find a refund only once `time` has passed since it was made.
    pub const fn time(time: Duration) -> Lag {
        Lag { misses: 0, time }
    }
}

/// When a refund becomes visible to lookups.
#[derive(Debug, Clone, Copy)]
pub(super) struct Visible {
    /// Lookups of its order still to miss it.
    misses: u32,
    /// When it is visible from.
    from: Instant,
}

impl Visible {
    /// For a refund made now, under `lag`.
    pub(super) fn made_now(lag: Lag) -> Visible {
        Visible {
            misses: lag.misses,
            from: Instant::now() + lag.time,
        }
    }
}

impl Provider {
    /// Makes the provider's lookups ([`Provider::refund_of`]) lag behind
    /// the refunds made from now on, by `lag`. It changes the provider that
    /// every clone shares.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idempotent_tools_testing::{Lag, Provider};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), idempotent_tools_testing::ProviderError> {
    /// let provider = Provider::with_delay(Duration::ZERO).with_lookup_lag(Lag::lookups(2));
    /// let made = provider.refund("1182", 42, None).await?;
    /// assert_eq!(provider.refund_of("1182").await, None, "missed once");
    /// assert_eq!(provider.refund_of("1182").await, None, "missed twice");
    /// assert_eq!(provider.refund_of("1182").await, Some(made));
    /// assert_eq!(provider.lookups_received(), 3);
    /// # Ok(()) }
    /// ```
    pub fn with_lookup_lag(self, lag: Lag) -> Provider {
        self.ledger().lag = lag;
        self
    }

    /// The first refund made on `order_id` that the provider's lookup
    /// finds: what a tool's [verification](idempotent_tools::call::Call::verify)
    /// asks a provider that ignores keys (listing an order's refunds). It
    /// takes the network delay, as a refund does, and is counted in
    /// [`lookups_received`](Provider::lookups_received). Under a
    /// [`Lag`] it misses refunds made too recently.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idempotent_tools_testing::Provider;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), idempotent_tools_testing::ProviderError> {
    /// let provider = Provider::with_delay(Duration::ZERO);
    /// assert_eq!(provider.refund_of("1182").await, None);
    /// let made = provider.refund("1182", 42, None).await?;
    /// assert_eq!(provider.refund_of("1182").await, Some(made));
    /// # Ok(()) }
    /// ```
    pub async fn refund_of(&self, order_id: &str) -> Option<Refund> {
        self.network().await;
        let now = Instant::now();
        let mut ledger = self.ledger();
        ledger.lookups += 1;
        let ledger = &mut *ledger;
        let mut found = None;
        for (refund, visible) in ledger.refunds.iter().zip(&mut ledger.visible) {
            if refund.order_id != order_id {
                continue;
            }
            if visible.misses > 0 {
                visible.misses -= 1;
            } else if found.is_none() && visible.from <= now {
                found = Some(refund.clone());
            }
        }
        found
    }

    /// How many lookups ([`Provider::refund_of`]) reached the provider.
    pub fn lookups_received(&self) -> usize {
        self.ledger().lookups
    }
}
