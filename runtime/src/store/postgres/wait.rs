//! Waiting on a claim held elsewhere: woken by the listener when there is
//! one, polling when there is none.

use std::sync::Arc;
use std::time::Duration;

use super::Inner;
use super::listener::KeyWatch;
use crate::store::Wait;
use crate::store::durable::Holder;
use crate::store::durable::wait::{self, Backoff};

/// How often a waiter polls when it cannot listen (a store built on an
/// application's pool without a listener): first pause, doubled up to the
/// second.
const POLL: (Duration, Duration) = (Duration::from_millis(5), Duration::from_millis(250));

/// What a waiter subscribed to before its claim statement ran: the key's
/// wake-ups, and whether the listener was up then. `None` without a
/// listener.
pub type Subscription = Option<(KeyWatch, bool)>;

/// Waits until a claim held elsewhere may have changed.
///
/// - Listening since before the claim statement: mark the held row as
///   waited for (its completion or release then notifies), then wake on the
///   key's notification, when the lease would run out, or after
///   [`RECHECK_EVERY`](super::RECHECK_EVERY). The mark comes after
///   subscribing, so a completion either sees it and notifies, or came
///   first and the mark finds no held row: then claim again at once.
/// - The listener came up only now: the same, once it is up.
/// - No listener: poll with backoff.
///
/// A mark that fails (a table whose schema is older than this version) is
/// covered by the recheck timer: the waiter is late, never wrong.
pub(super) fn wait_on(
    inner: Arc<Inner>,
    woken: Subscription,
    holder: Holder,
    lease_left: Duration,
) -> Wait {
    Wait::new(async move {
        let (first, max) = POLL;
        let backoff = Backoff::new(first, max);
        match woken {
            Some((mut woken, up)) => {
                if up || woken.listener.up().await {
                    match inner.mark_waiting(&holder).await {
                        Ok(Some(left)) => woken.until(left).await,
                        Ok(None) => {}
                        Err(_) => woken.until(lease_left).await,
                    }
                } else {
                    let woken = Some(&mut woken);
                    wait::until_let_go(&*inner, &holder, lease_left, backoff, woken).await;
                }
            }
            None => {
                let woken: Option<KeyWatch> = None;
                wait::until_let_go(&*inner, &holder, lease_left, backoff, woken).await;
            }
        }
    })
}
