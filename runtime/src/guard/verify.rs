//! Asking the provider whether an action happened: after an unknown
//! failure of the call's own action, and on taking over from a holder that
//! stopped mid-action.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::backoff::Backoff;
use crate::failure::Verified;
use crate::key::Key;
use crate::store::record::RecordValue;

type Check =
    dyn Fn(Key) -> Pin<Box<dyn Future<Output = Verified<RecordValue>> + Send>> + Send + Sync;

/// A tool's verification, with its result type erased.
#[derive(Clone)]
pub(crate) struct Verifier {
    check: Arc<Check>,
}

impl Verifier {
    pub(crate) fn new<T, F, Fut>(check: F) -> Verifier
    where
        F: Fn(Key) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Verified<T>> + Send + 'static,
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let check = move |key: Key| {
            let asked = check(key);
            Box::pin(async move {
                match asked.await {
                    Verified::Applied(value) => Verified::Applied(RecordValue::typed(value)),
                    Verified::NotApplied => Verified::NotApplied,
                    Verified::NotYet => Verified::NotYet,
                    Verified::Contradicts(why) => Verified::Contradicts(why),
                }
            }) as Pin<Box<dyn Future<Output = Verified<RecordValue>> + Send>>
        };
        Verifier {
            check: Arc::new(check),
        }
    }
}

/// A call's verification, with what bounds it.
#[derive(Clone)]
pub(crate) struct Verification {
    pub(crate) verifier: Verifier,
    /// How long "not applied" is not trusted after the action may last
    /// have run.
    pub(crate) settle: Duration,
    /// How long the provider is asked, while it cannot tell.
    pub(crate) wait: Duration,
}

impl Verification {
    /// Asks the provider about the action under `key`, from now on: see
    /// [`check`].
    pub(crate) fn ask(&self, key: Key) -> impl Future<Output = Checked> + Send + 'static {
        let now = Instant::now();
        check(
            self.verifier.clone(),
            key,
            (now, self.settle),
            now + self.wait,
        )
    }
}

/// What verification came to.
pub(crate) enum Checked {
    /// The action happened, with this result.
    Applied(RecordValue),
    /// It did not: acting again is safe.
    NotApplied,
    /// Nobody can say: why, for the record and the operator.
    Unknown(String),
}

/// Asks the provider whether the action under `key` happened, again while
/// it cannot tell, until `deadline`. "Not applied" is trusted only once
/// `settle` has passed since `since` (when the action may last have run);
/// before that it counts as "cannot tell yet". A check that panics, or does
/// not answer by the deadline, cannot tell either.
async fn check(
    verifier: Verifier,
    key: Key,
    (since, settle): (Instant, Duration),
    deadline: Instant,
) -> Checked {
    let mut backoff = Backoff::new();
    let mut last = "the provider could not tell before the call's wait ran out".to_owned();
    loop {
        // A verification may panic as it is called, or as it is polled.
        let asked = catch_unwind(AssertUnwindSafe(|| (verifier.check)(key.clone())));
        let answered = match asked {
            Ok(asked) => tokio::time::timeout_at(deadline, CatchUnwind(asked)).await,
            Err(_) => Ok(None),
        };
        match answered {
            Ok(Some(Verified::Applied(value))) => return Checked::Applied(value),
            Ok(Some(Verified::NotApplied)) if Instant::now() >= since + settle => {
                return Checked::NotApplied;
            }
            Ok(Some(Verified::Contradicts(why))) => {
                return Checked::Unknown(format!("the provider contradicts the ask: {why}"));
            }
            Ok(Some(Verified::NotApplied | Verified::NotYet)) => {}
            Ok(None) => last = "the verification panicked".to_owned(),
            Err(_) => return Checked::Unknown(last),
        }
        if !backoff.again(deadline).await {
            return Checked::Unknown(last);
        }
    }
}

/// The JSON an unknown outcome is recorded with: why it is unknown, and
/// the error that left it so, if any, for the operator who resolves it.
pub(crate) fn unknown_detail(why: &str, error: Option<&str>) -> RecordValue {
    let detail = match error {
        Some(error) => serde_json::json!({ "why": why, "error": error }),
        None => serde_json::json!({ "why": why }),
    };
    RecordValue::from_json(detail.to_string())
}

/// A future that ends with `None` if polling it panics.
struct CatchUnwind<F>(F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match catch_unwind(AssertUnwindSafe(|| Pin::new(inner).poll(cx))) {
            Ok(Poll::Ready(out)) => Poll::Ready(Some(out)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(None),
        }
    }
}
