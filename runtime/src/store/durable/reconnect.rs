//! Trying a step again while a store's connection comes back: after a
//! restart, a failover or a dropped connection. Every durable store's steps
//! are safe to repeat (a claim recognises its own holder token, the other
//! steps are fenced), so a step that found its connection broken goes
//! again, pacing itself, until its budget runs out.

use std::time::Duration;

/// How long a step keeps trying over a broken connection unless the
/// store's builder says otherwise (`reconnect_within`): long enough for a
/// restart or a managed failover's switch, short of a waiting call's
/// patience.
pub const DEFAULT_RECONNECT_WITHIN: Duration = Duration::from_secs(10);

/// Paces a step's tries over a broken connection, until its budget runs out.
/// The budget starts at the first broken try, so a step that never breaks
/// never reads the clock for it.
pub(crate) struct Reconnecting {
    budget: Duration,
    until: Option<tokio::time::Instant>,
    nap: Duration,
}

impl Reconnecting {
    const FIRST_NAP: Duration = Duration::from_millis(10);
    const LONGEST_NAP: Duration = Duration::from_millis(500);

    pub(crate) fn new(budget: Duration) -> Reconnecting {
        Reconnecting {
            budget,
            until: None,
            nap: Self::FIRST_NAP,
        }
    }

    /// Naps before the next try; `false` once the budget is spent.
    pub(crate) async fn again(&mut self) -> bool {
        let now = tokio::time::Instant::now();
        let until = *self.until.get_or_insert(now + self.budget);
        if now >= until {
            return false;
        }
        tokio::time::sleep(self.nap.min(until - now)).await;
        self.nap = (self.nap * 2).min(Self::LONGEST_NAP);
        true
    }
}
