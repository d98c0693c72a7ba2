//! Pacing a store step that may go again: a completion or release while
//! the store is briefly away, a claim that gave way to another writer.

use std::time::Duration;

use tokio::time::Instant;

/// Naps between the tries of one step, longer each time, until a deadline.
pub(super) struct Backoff {
    pause: Duration,
}

impl Backoff {
    /// The first pause before a step is tried again.
    const FIRST: Duration = Duration::from_millis(10);

    /// The longest pause between two tries.
    const LONGEST: Duration = Duration::from_secs(1);

    pub(super) fn new() -> Backoff {
        Backoff { pause: Self::FIRST }
    }

    /// Naps before the next try; `false`, at once, if that try could not
    /// start before `deadline`.
    pub(super) async fn again(&mut self, deadline: Instant) -> bool {
        if Instant::now() + self.pause >= deadline {
            return false;
        }
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(Self::LONGEST);
        true
    }
}
