//! Running one schedule: its callers as tasks, its troubles through the
//! storm's store, then the checks.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use idempotent_tools::store::{ClaimAnswer, ClaimRequest, Store};
use idempotent_tools::{Outcome, Run};

use super::checks::{self, Answered, Caller, Violation};
use super::faults::{Armed, Troubled};
use super::handle::Handle;
use super::schedule::{Event, Schedule, Trouble};
use super::{Ask, Setup};
use crate::conformance::kit::unique_id;

/// The times a schedule runs by, from the policy the tool uses.
#[derive(Debug, Clone, Copy)]
pub(super) struct Times {
    pub(super) wait: Duration,
    pub(super) lease: Duration,
    /// Whether the store's leases run out, and are short enough to wait out.
    pub(super) short_leases: bool,
}

impl Times {
    /// A stalled step's stall.
    fn stall(self) -> Duration {
        (self.lease / 8).min(Duration::from_millis(50))
    }

    /// The most a completion stays paused for another caller to take its
    /// claim over: that caller waits out the lease within its own wait.
    fn pause(self) -> Duration {
        self.wait + self.lease
    }

    /// How long a caller may take: its wait for a duplicate, a lease it may
    /// wait out, its own pause past the lease, and stalls, with room for a
    /// busy machine.
    pub(super) fn bound(self) -> Duration {
        let pause = if self.short_leases {
            self.pause() + self.lease
        } else {
            Duration::ZERO
        };
        self.wait + pause + self.stall() * 4 + Duration::from_secs(2)
    }

    /// How long the storm waits for a caller before it reports no answer.
    fn patience(self) -> Duration {
        self.bound() + Duration::from_secs(5)
    }

    /// How long the storm waits on a key still held at the end.
    fn held_patience(self) -> Duration {
        if self.short_leases {
            self.lease + Duration::from_secs(1)
        } else {
            Duration::from_secs(2)
        }
    }
}

/// What one schedule came to.
pub(super) struct Ran {
    pub(super) callers: Vec<Caller>,
    pub(super) violations: Vec<Violation>,
}

/// Runs `schedule` on a fresh store from the storm's factory, in a run and
/// with objects of its own.
pub(super) async fn schedule<T, E>(setup: &Setup<T, E>, times: Times, schedule: &Schedule) -> Ran
where
    T: Send + 'static,
    E: Send + 'static,
{
    let tag = unique_id();
    // A run id made of a prefix and an id is never empty.
    let run = Run::new(format!("storm-{tag}")).unwrap_or_else(|_| unreachable!());
    let object = |k: u8| format!("storm{k}-{tag}");
    let inner = (setup.store)().await;
    let store = Arc::new(Troubled::new(
        inner,
        setup.provider.clone(),
        times.stall(),
        times.pause(),
    ));
    let mut running: Vec<(u8, JoinHandle<Caller>)> = Vec::new();
    let mut callers = Vec::new();
    let mut objects = BTreeSet::new();
    let mut number = 0;
    for event in &schedule.events {
        match event {
            Event::Ask {
                object: k,
                variant,
                trouble,
            } => {
                number += 1;
                objects.insert(object(*k));
                let ask = Ask::new(object(*k), *variant, number);
                if *trouble == Trouble::None {
                    running.push((*k, caller(setup, &store, &run, times, ask, *trouble).0));
                    continue;
                }
                // A troubled ask's claim is the first of its key: the asks
                // before it end first, and those after start once its claim
                // is answered (or it ended without one), so the same
                // schedule interleaves the same way on every run.
                settle(&store, times, &mut running, &mut callers, Some(*k)).await;
                let (task, claimed) = caller(setup, &store, &run, times, ask, *trouble);
                running.push((*k, task));
                let _ = tokio::time::timeout(times.patience(), claimed.notified()).await;
                // A caller that is dropped ends, and its steps that run on
                // without it end, before the next event: what follows finds
                // its claim released, completed, or (vanished) held, never
                // one or the other as the timing falls.
                if trouble.drops_caller() {
                    settle(&store, times, &mut running, &mut callers, Some(*k)).await;
                }
            }
            Event::Burst { object: k, callers } => {
                objects.insert(object(*k));
                for _ in 0..*callers {
                    number += 1;
                    let ask = Ask::new(object(*k), 0, number);
                    running.push((*k, caller(setup, &store, &run, times, ask, Trouble::None).0));
                }
            }
            Event::Settle => settle(&store, times, &mut running, &mut callers, None).await,
            Event::PassLease => tokio::time::sleep(times.lease + times.lease / 4).await,
        }
    }
    settle(&store, times, &mut running, &mut callers, None).await;
    callers.sort_by_key(|c| c.number);
    for caller in &mut callers {
        caller.key = store.key_of(caller.number);
    }
    if let Some(stray) = store.stray() {
        let violations = vec![Violation::KeyWithoutObject {
            caller: stray.caller,
            key: stray.key,
            object: stray.object,
        }];
        return Ran {
            callers,
            violations,
        };
    }

    let mut violations = checks::callers(&callers, times.bound());
    for object in &objects {
        let effects = (setup.effects)(object);
        if effects > 1 {
            violations.push(Violation::EffectRepeated {
                object: object.clone(),
                effects,
            });
        }
    }
    violations.extend(left_held(&store, times).await);
    Ran {
        callers,
        violations,
    }
}

/// Waits for the asks started so far, of one object or of all, and for
/// the claims they won to be completed or released.
async fn settle(
    store: &Troubled,
    times: Times,
    running: &mut Vec<(u8, JoinHandle<Caller>)>,
    callers: &mut Vec<Caller>,
    object: Option<u8>,
) {
    let (ending, going) = running
        .drain(..)
        .partition(|(k, _)| object.is_none_or(|object| *k == object));
    *running = going;
    let ending: Vec<(u8, JoinHandle<Caller>)> = ending;
    let mut ended = Vec::new();
    for (_, task) in ending {
        // A supervisor never panics: the tool runs on a task of its own.
        if let Ok(caller) = task.await {
            ended.push(caller.number);
            callers.push(caller);
        }
    }
    store.quiet(&ended, times.held_patience()).await;
}

/// Starts one caller, with its trouble armed in the store; the notice is
/// given once its claim is answered or held back.
fn caller<T, E>(
    setup: &Setup<T, E>,
    store: &Arc<Troubled>,
    run: &Run,
    times: Times,
    ask: Ask,
    trouble: Trouble,
) -> (JoinHandle<Caller>, Arc<Notify>)
where
    T: Send + 'static,
    E: Send + 'static,
{
    let (reached, let_go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let claimed = Arc::new(Notify::new());
    let faulted = Arc::new(AtomicBool::new(false));
    let number = ask.number;
    if trouble != Trouble::None {
        store.arm(Armed {
            id: number,
            trouble,
            reached: Arc::clone(&reached),
            let_go: Arc::clone(&let_go),
            claimed: Arc::clone(&claimed),
            seen: false,
            losing: None,
            faulted: Arc::clone(&faulted),
        });
    }
    let (object, variant) = (ask.object.clone(), ask.variant);
    let dyn_store: Arc<dyn Store> = Arc::new(Handle {
        store: Arc::clone(store),
        caller: number,
        object: object.clone(),
    });
    let tool = Arc::clone(&setup.tool);
    let guard_error = Arc::clone(&setup.guard_error);
    let show = Arc::clone(&setup.show);
    let store = Arc::clone(store);
    let ended = Arc::clone(&claimed);
    let call = run.clone().scope(tool(dyn_store, ask));
    let task = tokio::spawn(async move {
        let started = Instant::now();
        let mut call = tokio::spawn(call);
        let drops = trouble.drops_caller();
        let waited = tokio::time::timeout(times.patience(), async {
            tokio::select! {
                result = &mut call => Some(result),
                () = reached.notified(), if drops => None,
            }
        })
        .await;
        let timed_out = waited.is_err();
        let answered = match waited {
            Ok(Some(Ok(Ok(outcome)))) => match outcome {
                Outcome::Fresh { .. } => Answered::Fresh,
                Outcome::Replay { .. } => Answered::Replay,
                Outcome::Conflict { .. } => Answered::Conflict,
            },
            Ok(Some(Ok(Err(error)))) => match guard_error(&error) {
                Some(guard) => Answered::Error {
                    error: guard.to_string(),
                    action_ran: guard.action_ran(),
                },
                None if faulted.load(Ordering::SeqCst) => Answered::ProviderFailed {
                    error: show(&error),
                },
                None => Answered::Unexplained {
                    error: "the tool's own error (not the guard's)".into(),
                },
            },
            Ok(Some(Err(_))) => Answered::Unexplained {
                error: "the tool panicked".into(),
            },
            Ok(None) | Err(_) => {
                call.abort();
                let _ = (&mut call).await;
                if timed_out {
                    Answered::NoAnswer
                } else {
                    Answered::Dropped
                }
            }
        };
        let took = started.elapsed();
        store.disarm(number);
        // A step held back for this caller goes on, whoever reached it.
        let_go.notify_one();
        // A caller that ended without a claim lets the schedule go on.
        ended.notify_one();
        Caller {
            number,
            object,
            variant,
            trouble,
            key: None,
            answered,
            took,
        }
    });
    (task, claimed)
}

/// The keys still held once every caller is gone: each is claimed again,
/// as its last holder asked; a claim in flight is waited for until its
/// lease has passed.
async fn left_held(store: &Troubled, times: Times) -> Vec<Violation> {
    let mut found = Vec::new();
    for asked in store.asked() {
        let request = ClaimRequest {
            key: &asked.key,
            tool: &asked.tool,
            fingerprint: asked.fingerprint,
            lease: asked.lease,
            retention: asked.retention,
        };
        let mut held = true;
        for _ in 0..4 {
            match store.inner.claim(request).await {
                Ok(ClaimAnswer::Claimed(claim)) => {
                    let _ = store.inner.release(&claim).await;
                    held = false;
                }
                Ok(ClaimAnswer::InFlight(woken)) => {
                    if tokio::time::timeout(times.held_patience(), woken)
                        .await
                        .is_ok()
                    {
                        continue;
                    }
                }
                // Done, or a conflict: nothing is held. A store that fails
                // here says nothing either way.
                Ok(_) | Err(_) => held = false,
            }
            break;
        }
        if held {
            found.push(Violation::LeftHeld {
                key: asked.key.as_str().to_owned(),
            });
        }
    }
    found
}
