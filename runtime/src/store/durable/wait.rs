//! Waiting for a claim held elsewhere: poll with backoff until its holder
//! lets go, woken early by whatever wake-up the store has.

use std::future::Future;
use std::time::Duration;

use super::{Backend, Holder};

/// How long after a lease runs out a waiter looks again: enough for the
/// store's clock to agree that it has.
pub(crate) const LEASE_MARGIN: Duration = Duration::from_millis(5);

/// Backoff for stores that poll: doubles from `first` up to `max`, and
/// never sleeps past the moment a lease runs out.
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(first: Duration, max: Duration) -> Backoff {
        Backoff { next: first, max }
    }

    /// The next nap, cut short so the caller looks again just after
    /// `lease_left` has passed.
    pub(crate) fn nap(&mut self, lease_left: Duration) -> Duration {
        let nap = self.next.min(lease_left + LEASE_MARGIN);
        self.next = (self.next * 2).min(self.max);
        nap
    }
}

/// A wake-up that may end a nap early: a completion or release seen in
/// this process, or a notification from the server.
pub(crate) trait Wakeup: Send {
    /// Whether a wake-up means the claim waited on let go (a notification
    /// for its key), so the waiter claims again without looking first; if
    /// not (a wake-up for any key), the waiter looks.
    const CONCLUSIVE: bool;

    /// Resolves when the claim waited on may have changed.
    fn woken(&mut self) -> impl Future<Output = ()> + Send;
}

/// No wake-up (`None`): only the timer ends a nap.
impl<W: Wakeup> Wakeup for Option<W> {
    const CONCLUSIVE: bool = W::CONCLUSIVE;

    async fn woken(&mut self) {
        match self {
            Some(wakeup) => wakeup.woken().await,
            None => std::future::pending::<()>().await,
        }
    }
}

impl<W: Wakeup> Wakeup for &mut W {
    const CONCLUSIVE: bool = W::CONCLUSIVE;

    fn woken(&mut self) -> impl Future<Output = ()> + Send {
        (**self).woken()
    }
}

/// Polls until `holder` no longer holds its claim (finished, released,
/// taken over, or its lease ran out), or the store fails: either way the
/// caller claims again and finds out which. A wake-up ends a nap early; it
/// ends the wait at once if it is [conclusive](Wakeup::CONCLUSIVE).
pub(crate) async fn until_let_go<B: Backend, W: Wakeup>(
    backend: &B,
    holder: &Holder,
    mut lease_left: Duration,
    mut backoff: Backoff,
    mut wakeup: W,
) {
    loop {
        let nap = backoff.nap(lease_left);
        tokio::select! {
            () = wakeup.woken() => if W::CONCLUSIVE { return },
            () = tokio::time::sleep(nap) => {}
        }
        match backend.held_by(holder).await {
            Ok(Some(left)) => lease_left = left,
            Ok(None) | Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_and_stops_at_the_lease() {
        let mut b = Backoff::new(Duration::from_millis(2), Duration::from_millis(10));
        let long = Duration::from_secs(60);
        assert_eq!(b.nap(long), Duration::from_millis(2));
        assert_eq!(b.nap(long), Duration::from_millis(4));
        assert_eq!(b.nap(long), Duration::from_millis(8));
        assert_eq!(b.nap(long), Duration::from_millis(10));
        assert_eq!(b.nap(Duration::ZERO), LEASE_MARGIN);
    }
}
