//! The claim-first guard: how one guarded call runs.

use std::borrow::Cow;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::error::Error;
use crate::fingerprint::Fingerprint;
use crate::key::Key;
use crate::outcome::ConflictReason;
use crate::outcome::{DEFAULT_CONFLICT_NOTE, DEFAULT_REPLAY_NOTE, OTHER_TOOL_NOTE, Outcome};
use crate::policy::{Policy, Takeover};
use crate::record::{Ending, Finished, Recorded, ToolId};
use crate::store::{Claim, ClaimRequest, ClaimState, IntoStore, Store, StoreError, default_store};

tokio::task_local! {
    static ACTIVE: Active;
}

/// The keys whose actions are running on this task, innermost first.
struct Active {
    key: Key,
    outer: Option<Arc<[Key]>>,
}

impl Active {
    fn holds(&self, key: &Key) -> bool {
        self.key == *key || self.outer.iter().flat_map(|o| o.iter()).any(|k| k == key)
    }

    fn enter(key: Key) -> Active {
        let outer = ACTIVE
            .try_with(|active| {
                let mut keys = Vec::with_capacity(1 + active.outer.as_ref().map_or(0, |o| o.len()));
                keys.push(active.key.clone());
                keys.extend(active.outer.iter().flat_map(|o| o.iter().cloned()));
                Arc::from(keys)
            })
            .ok();
        Active { key, outer }
    }
}

/// The key of the guarded action running on this task, if any.
///
/// Hand its [`Key::provider_key`] to the provider as the provider's own
/// idempotency key, so that a retry after a crash is deduplicated there too.
///
/// ```
/// # use idempotent_runtime::{Call, Key, current_key};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idempotent_runtime::Error> {
/// let key = Key::builder().literal("run-1:refund:")?.part("order_id", &1182)?.finish()?;
/// let outcome = Call::new("shop::refund", key)
///     .run(async {
///         let key = current_key().ok_or(idempotent_runtime::Error::MissingRun)?;
///         Ok::<_, idempotent_runtime::Error>(key.provider_key().into_owned())
///     })
///     .await?;
/// assert_eq!(outcome.value().map(String::as_str), Some("run-1:refund:1182"));
/// # Ok(()) }
/// ```
pub fn current_key() -> Option<Key> {
    ACTIVE.try_with(|active| active.key.clone()).ok()
}

/// One guarded call: a key, the tool, the arguments' fingerprint and the
/// call site's policy. [`Call::run`] claims the key, then acts or replays.
///
/// This is what `#[idempotent]` expands into; use it by hand when keys are
/// built at run time:
///
/// ```
/// use std::sync::Arc;
/// use idempotent_runtime::{Call, Fingerprint, Key, MemoryStore, Outcome, Run};
///
/// #[derive(Debug, thiserror::Error)]
/// enum PayError {
///     #[error(transparent)]
///     Idempotency(#[from] idempotent_runtime::Error),
/// }
///
/// async fn refund(run: &Run, order_id: &str, usd: u64) -> Result<Outcome<String>, PayError> {
///     let key = Key::builder()
///         .part("run", run)?
///         .literal(":refund:")?
///         .part("order_id", order_id)?
///         .finish()?;
///     let fingerprint = Fingerprint::builder().arg("usd", &usd)?.finish();
///     Call::new("shop::refund", key)
///         .fingerprint(fingerprint)
///         .run(async move { Ok(format!("refunded {usd} on {order_id}")) })
///         .await
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), PayError> {
/// let run = Run::new("run-1")?;
/// assert!(refund(&run, "1182", 42).await?.is_fresh());
/// assert!(refund(&run, "1182", 42).await?.is_replay());
/// assert!(refund(&run, "1182", 41).await?.is_conflict());
/// # Ok(()) }
/// ```
#[must_use = "a call does nothing until `.run(..)` is awaited"]
pub struct Call {
    key: Key,
    tool: ToolId,
    fingerprint: Fingerprint,
    policy: Policy,
    store: Option<Arc<dyn Store>>,
}

impl Call {
    /// A call of `tool` under `key`, with the default policy and store.
    pub fn new(tool: impl Into<ToolId>, key: Key) -> Call {
        Call {
            key,
            tool: tool.into(),
            fingerprint: Fingerprint::EMPTY,
            policy: Policy::default(),
            store: None,
        }
    }

    /// The arguments beyond the key. A different fingerprint under the same
    /// key is a conflict.
    pub fn fingerprint(mut self, fingerprint: Fingerprint) -> Call {
        self.fingerprint = fingerprint;
        self
    }

    /// Uses this store instead of the process default.
    pub fn store(mut self, store: impl IntoStore) -> Call {
        self.store = Some(store.into_store());
        self
    }

    /// Replaces the whole policy.
    pub fn policy(mut self, policy: Policy) -> Call {
        self.policy = policy;
        self
    }

    /// How long the record is kept once finished.
    pub fn retention(mut self, retention: Duration) -> Call {
        self.policy.retention = retention;
        self
    }

    /// How long a duplicate waits for an in-flight call.
    pub fn wait(mut self, wait: Duration) -> Call {
        self.policy.wait = wait;
        self
    }

    /// The claim's lease.
    pub fn lease(mut self, lease: Duration) -> Call {
        self.policy.lease = lease;
        self
    }

    /// What a takeover from a crashed holder does.
    pub fn takeover(mut self, takeover: Takeover) -> Call {
        self.policy.takeover = takeover;
        self
    }

    /// The note a replay carries for the model.
    pub fn replay_note(mut self, note: impl Into<Cow<'static, str>>) -> Call {
        self.policy.replay_note = Some(note.into());
        self
    }

    /// The note a conflict on arguments carries for the model.
    pub fn conflict_note(mut self, note: impl Into<Cow<'static, str>>) -> Call {
        self.policy.conflict_note = Some(note.into());
        self
    }

    /// The key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Claims the key, then runs `action` or replays.
    ///
    /// - First call: runs `action`. On `Ok` the result is recorded and
    ///   returned as [`Outcome::Fresh`]. On `Err` the claim is released and
    ///   nothing is recorded, so a retry runs the action again.
    /// - A duplicate after completion gets [`Outcome::Replay`].
    /// - A duplicate while the first is in flight waits (by wake-up) and gets
    ///   its result; if the first fails, one waiter takes over and runs.
    /// - The same key with other arguments or from another tool gets
    ///   [`Outcome::Conflict`].
    ///
    /// If `action` panics or the returned future is dropped mid-action, the
    /// claim is released.
    pub fn run<T, E, F>(self, action: F) -> impl Future<Output = Result<Outcome<T>, E>>
    where
        F: Future<Output = Result<T, E>>,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: From<Error>,
    {
        // Returned as it is, not awaited in another async layer: the
        // future stays one state machine.
        self.execute(action, None)
    }

    /// Like [`Call::run`], but an `Err` is final: it is recorded, and every
    /// duplicate gets the same error back without running the action. For
    /// actions whose failure must not be retried, such as a declined card.
    pub fn run_recording_errors<T, E, F>(
        self,
        action: F,
    ) -> impl Future<Output = Result<Outcome<T>, E>>
    where
        F: Future<Output = Result<T, E>>,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: From<Error> + Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    {
        let codec = ErrorCodec {
            record: |e: &E| Recorded::typed(e.clone()),
            replay: |r: &Recorded| r.decode::<E>(),
        };
        self.execute(action, Some(codec))
    }

    async fn execute<T, E, F>(
        self,
        action: F,
        errors: Option<ErrorCodec<E>>,
    ) -> Result<Outcome<T>, E>
    where
        F: Future<Output = Result<T, E>>,
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        E: From<Error>,
    {
        let Call {
            key,
            tool,
            fingerprint,
            policy,
            store,
        } = self;
        if ACTIVE
            .try_with(|active| active.holds(&key))
            .unwrap_or(false)
        {
            return Err(Error::Reentrant { key }.into());
        }
        let store = store.unwrap_or_else(default_store);
        let request = ClaimRequest {
            key: &key,
            tool: &tool,
            fingerprint,
            lease: policy.lease,
            retention: policy.retention,
        };

        let mut deadline = None;
        let claim = loop {
            match store.claim(request).await.map_err(Error::from)? {
                ClaimState::Claimed(claim) => break claim,
                ClaimState::Completed(finished) => {
                    return replay(&key, &policy, finished, errors.as_ref());
                }
                ClaimState::Conflict { reason, first } => {
                    let note = match reason {
                        ConflictReason::OtherTool => Cow::Borrowed(OTHER_TOOL_NOTE),
                        _ => policy
                            .conflict_note
                            .clone()
                            .unwrap_or(Cow::Borrowed(DEFAULT_CONFLICT_NOTE)),
                    };
                    let first = match first {
                        Some(first) => Some(first.decode::<T>()?),
                        None => None,
                    };
                    return Ok(Outcome::Conflict {
                        first,
                        reason,
                        note,
                    });
                }
                ClaimState::InFlight(woken) => {
                    let deadline = *deadline.get_or_insert_with(|| Instant::now() + policy.wait);
                    if tokio::time::timeout_at(deadline, woken).await.is_err() {
                        return Err(Error::InProgress { key }.into());
                    }
                }
            }
        };

        let mut holding = Holding {
            store: Arc::clone(&store),
            claim,
            armed: true,
        };
        if holding.claim.taken_over && policy.takeover == Takeover::ReportUnknown {
            holding.armed = false;
            let unknown = Finished {
                ending: Ending::Unknown,
                value: Recorded::from_json("null"),
                finished_at: SystemTime::now(),
            };
            store
                .complete(&holding.claim, unknown)
                .await
                .map_err(|e| lease_error(&key, e))?;
            return Err(Error::UnknownOutcome { key }.into());
        }

        let active = Active::enter(key.clone());
        let action = ACTIVE.scope(active, action);
        let result = match store.renew_every(policy.lease) {
            None => action.await,
            // Boxed, so that calls on stores that never renew do not carry
            // the renewal loop's state in their future.
            Some(every) => {
                Box::pin(renewing(
                    action,
                    store.as_ref(),
                    &holding.claim,
                    every,
                    policy.lease,
                ))
                .await
            }
        };

        match result {
            Ok(value) => {
                // The action happened: from here on the claim must never be
                // released, or a retry would act twice.
                holding.armed = false;
                let finished = Finished {
                    ending: Ending::Ok,
                    value: Recorded::typed(value.clone()),
                    finished_at: SystemTime::now(),
                };
                store
                    .complete(&holding.claim, finished)
                    .await
                    .map_err(|e| lease_error(&key, e))?;
                Ok(Outcome::Fresh { value })
            }
            Err(err) => match &errors {
                Some(codec) => {
                    holding.armed = false;
                    let finished = Finished {
                        ending: Ending::Err,
                        value: (codec.record)(&err),
                        finished_at: SystemTime::now(),
                    };
                    store
                        .complete(&holding.claim, finished)
                        .await
                        .map_err(|e| lease_error(&key, e))?;
                    Err(err)
                }
                None => {
                    holding.armed = false;
                    // If the store is down the lease frees the claim later.
                    let _ = store.release(&holding.claim).await;
                    Err(err)
                }
            },
        }
    }
}

/// Runs the action while renewing the claim's lease every `every`.
async fn renewing<F: Future>(
    action: F,
    store: &dyn Store,
    claim: &Claim,
    every: Duration,
    lease: Duration,
) -> F::Output {
    let mut action = pin!(action);
    let mut renewing = true;
    loop {
        tokio::select! {
            biased;
            result = &mut action => break result,
            () = tokio::time::sleep(every), if renewing => {
                // Once the lease is lost there is nothing to renew;
                // `complete` reports it. A store that is briefly down is
                // tried again next time.
                let renewed = store.extend(claim, lease).await;
                renewing = !matches!(renewed, Err(StoreError::LeaseLost));
            }
        }
    }
}

struct ErrorCodec<E> {
    record: fn(&E) -> Recorded,
    replay: fn(&Recorded) -> Result<E, Error>,
}

fn lease_error(key: &Key, err: StoreError) -> Error {
    match err {
        StoreError::LeaseLost => Error::LeaseLost { key: key.clone() },
        other => Error::Store(other),
    }
}

fn replay<T, E>(
    key: &Key,
    policy: &Policy,
    finished: Finished,
    errors: Option<&ErrorCodec<E>>,
) -> Result<Outcome<T>, E>
where
    T: DeserializeOwned + Clone + 'static,
    E: From<Error>,
{
    match finished.ending {
        Ending::Ok => Ok(Outcome::Replay {
            value: finished.value.decode::<T>()?,
            note: policy
                .replay_note
                .clone()
                .unwrap_or(Cow::Borrowed(DEFAULT_REPLAY_NOTE)),
        }),
        Ending::Err => match errors {
            Some(codec) => Err((codec.replay)(&finished.value)?),
            // Another call site of this tool records errors; this one cannot
            // read them, and must not act again.
            None => Err(Error::UnknownOutcome { key: key.clone() }.into()),
        },
        Ending::Unknown => Err(Error::UnknownOutcome { key: key.clone() }.into()),
    }
}

/// A held claim that is released if the call ends before it is disarmed:
/// by an error, a panic, or the future being dropped.
struct Holding {
    store: Arc<dyn Store>,
    claim: Claim,
    armed: bool,
}

impl Drop for Holding {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // The memory store releases synchronously. A store that does I/O
        // releases on a spawned task; with no runtime left, its lease frees
        // the claim.
        let pending = self.store.release(&self.claim).into_ready().is_err();
        if let (true, Ok(handle)) = (pending, tokio::runtime::Handle::try_current()) {
            let store = Arc::clone(&self.store);
            let claim = self.claim.clone();
            handle.spawn(async move {
                let _ = store.release(&claim).await;
            });
        }
    }
}
