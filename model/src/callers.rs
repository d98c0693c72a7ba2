//! Three callers asking one store for one key, as the guard drives them:
//! a system the model checker explores state by state.
//!
//! Each caller asks once. It claims; on a claim in flight it waits, then
//! claims again (woken, or on a recheck) or gives up when its wait runs
//! out; holding the claim, it acts (the action has its effect) or its
//! action fails (no effect), renews its lease while acting, and then
//! completes (done, or failed for a tool that records its errors) or
//! releases. A completion's reply may be lost, and the completion is tried
//! again. At any point a holder may crash (where leases expire: the claim
//! stays until its lease runs out), or its future may be dropped (the
//! claim is released, as the guard's holder does on drop). The clock
//! moves a tick at any time: a holder that stalls past its lease is taken
//! over by the next claim.

use std::fmt;

use stateright::{Model, Property};

use crate::store::{
    Answer, Args, ClaimRef, Ending, Flaw, KeyStore, LeaseLost, Leases, Owner, Slot, Tick, Value,
};

/// How many callers ask.
pub const CALLERS: usize = 3;

/// What a claim that takes over does: the guard's two takeover policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Takeover {
    /// The taker acts again (the provider deduplicates on the key).
    Rerun,
    /// The taker records an unknown outcome and does not act.
    ReportUnknown,
}

/// The system's settings: the store's kind, the policy, and the bounds
/// that keep the state space finite.
#[derive(Clone, Debug)]
pub struct Callers {
    /// Whether leases run out (durable stores) or not (the memory store).
    pub leases: Leases,
    /// What a takeover does.
    pub takeover: Takeover,
    /// Each caller's arguments: callers with the same number ask the same.
    pub args: [Args; CALLERS],
    /// How many times a caller claims at most (the first claim, and one
    /// more after each wait but the last).
    pub claims: u8,
    /// How many times a holder renews its lease at most.
    pub renewals: u8,
    /// A lease's length, in ticks.
    pub lease: Tick,
    /// The last tick the clock reaches.
    pub last_tick: Tick,
    /// A mistake planted in the protocol, if any.
    pub flaw: Option<Flaw>,
}

impl Callers {
    /// Three callers asking the same, each claiming at most twice, with
    /// leases of two ticks on a clock of three.
    pub fn new(leases: Leases, takeover: Takeover) -> Callers {
        Callers {
            leases,
            takeover,
            args: [0; CALLERS],
            claims: 2,
            renewals: 1,
            lease: 2,
            last_tick: 3,
            flaw: None,
        }
    }

    /// The same system with a mistake planted in its protocol.
    pub fn with_flaw(self, flaw: Flaw) -> Callers {
        Callers {
            flaw: Some(flaw),
            ..self
        }
    }

    /// The same system with each caller's arguments as given.
    pub fn with_args(self, args: [Args; CALLERS]) -> Callers {
        Callers { args, ..self }
    }

    fn owner(&self, caller: usize, claims_made: u8) -> Owner {
        // A new owner for every claim, as the stores draw one.
        (caller as Owner) * Owner::from(self.claims) + Owner::from(claims_made) + 1
    }
}

/// How a caller's ask ended: what its tool returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum End {
    /// The caller acted, and its result was recorded.
    Fresh(Value),
    /// The result of an earlier action, replayed.
    Replay(Value),
    /// The recorded error of an earlier action, replayed.
    ReplayedError,
    /// The action's outcome is unknown (`Error::UnknownOutcome`): this
    /// caller did not act.
    UnknownOutcome,
    /// The key was used for other arguments.
    Conflict,
    /// The caller's action ran and failed without an effect; its error was
    /// recorded or its claim released.
    ToolError,
    /// The caller's action ran, but its claim had been taken over, so its
    /// result was refused (`Error::LeaseLost`: the action ran).
    LeaseLost,
    /// The caller waited for a claim in flight until its wait ran out
    /// (`Error::InProgress`: the action did not run here).
    InProgress,
    /// A takeover's unknown outcome could not be recorded: the action did
    /// not run here.
    NotRecorded,
    /// The caller's future was dropped: nobody reads an answer.
    Dropped,
    /// The caller's process crashed.
    Crashed,
}

/// Where a caller is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Asked, not claimed yet.
    Asking,
    /// Its claim found another in flight: waiting for a wake-up or for its
    /// wait to run out.
    Waiting,
    /// Under [`Flaw::CheckThenAct`]: it saw the key free, and has not yet
    /// written its claim.
    Checked,
    /// Holding the claim; its action has not returned.
    Holding(ClaimRef),
    /// Its action had its effect; the result is being recorded.
    Acted(ClaimRef),
    /// Its action failed without an effect; the error is being recorded or
    /// the claim released.
    Declined(ClaimRef),
    /// It took over under [`Takeover::ReportUnknown`]: an unknown outcome is
    /// being recorded.
    ReportingUnknown(ClaimRef),
    /// Its ask ended.
    Ended(End),
}

/// One caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Caller {
    /// Where it is.
    pub phase: Phase,
    /// How many claims it made.
    pub claims_made: u8,
    /// How many renewals it made.
    pub renewals_made: u8,
    /// The last claim it was granted.
    pub claim: Option<ClaimRef>,
    /// Whether its action ran (with an effect or not).
    pub ran: bool,
    /// Whether its action had its effect.
    pub effect: bool,
    /// Whether it waited for a claim in flight.
    pub waited: bool,
    /// Whether a completion's reply was lost to it.
    pub lost_reply: bool,
}

impl Caller {
    fn new() -> Caller {
        Caller {
            phase: Phase::Asking,
            claims_made: 0,
            renewals_made: 0,
            claim: None,
            ran: false,
            effect: false,
            waited: false,
            lost_reply: false,
        }
    }

    /// The claim it holds and may still use, if any.
    pub fn holding(&self) -> Option<ClaimRef> {
        match self.phase {
            Phase::Holding(claim)
            | Phase::Acted(claim)
            | Phase::Declined(claim)
            | Phase::ReportingUnknown(claim) => Some(claim),
            _ => None,
        }
    }

    fn ended(&self) -> Option<End> {
        match self.phase {
            Phase::Ended(end) => Some(end),
            _ => None,
        }
    }
}

/// The system's state: the store's key, the callers, and what the
/// properties need to know of the past.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The store, for the one key.
    pub store: KeyStore,
    /// The callers.
    pub callers: [Caller; CALLERS],
    /// How many actions had their effect.
    pub effects: u8,
    /// How many claims took over from a holder whose lease ran out.
    pub takeovers: u8,
    /// The claim the store granted last.
    pub last_granted: Option<ClaimRef>,
    /// Whether a completion from a holder whose claim was taken over was
    /// refused.
    pub stale_refused: bool,
}

/// A step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The caller claims (first, or again after a wait).
    Claim(usize),
    /// Under [`Flaw::CheckThenAct`]: the caller writes the claim it checked.
    Write(usize),
    /// The caller's action has its effect and returns its result.
    Act(usize),
    /// The caller's action fails without an effect.
    Decline(usize),
    /// The caller records its action's end (done, failed, or unknown).
    Complete(usize),
    /// The caller's completion reaches the store, but its reply is lost:
    /// the guard tries it again.
    LoseReply(usize),
    /// The caller releases its claim after its action failed.
    Release(usize),
    /// The caller renews its lease while its action runs.
    Renew(usize),
    /// The caller's wait runs out.
    GiveUp(usize),
    /// The caller's future is dropped: a held claim is released.
    Drop(usize),
    /// The caller's process crashes: its claim stays until its lease runs
    /// out.
    Crash(usize),
    /// The clock moves a tick.
    Tick,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl Model for Callers {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            store: KeyStore::new(self.leases).with_flaw(self.flaw),
            callers: [Caller::new(); CALLERS],
            effects: 0,
            takeovers: 0,
            last_granted: None,
            stale_refused: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let crashes = self.leases == Leases::Expire;
        for (i, caller) in state.callers.iter().enumerate() {
            match caller.phase {
                Phase::Asking => actions.push(Action::Claim(i)),
                Phase::Waiting => {
                    if caller.claims_made < self.claims {
                        actions.push(Action::Claim(i));
                    }
                    actions.extend([Action::GiveUp(i), Action::Drop(i)]);
                }
                Phase::Checked => actions.push(Action::Write(i)),
                Phase::Holding(_) => {
                    actions.extend([Action::Act(i), Action::Decline(i), Action::Drop(i)]);
                    if crashes && caller.renewals_made < self.renewals {
                        actions.push(Action::Renew(i));
                    }
                }
                Phase::Acted(_) => {
                    actions.push(Action::Complete(i));
                    if !caller.lost_reply {
                        actions.push(Action::LoseReply(i));
                    }
                }
                Phase::Declined(_) => actions.extend([Action::Complete(i), Action::Release(i)]),
                Phase::ReportingUnknown(_) => actions.push(Action::Complete(i)),
                Phase::Ended(_) => {}
            }
            if crashes && caller.holding().is_some() {
                actions.push(Action::Crash(i));
            }
        }
        if crashes && state.store.now < self.last_tick {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut next = last.clone();
        let State { store, callers, .. } = &mut next;
        match action {
            Action::Tick => store.tick(),
            Action::Claim(i) => {
                let caller = &mut callers[i];
                let owner = self.owner(i, caller.claims_made);
                caller.claims_made += 1;
                if self.flaw == Some(Flaw::CheckThenAct) && store.looks_free() {
                    caller.phase = Phase::Checked;
                    return Some(next);
                }
                let answer = store.claim(owner, self.args[i], self.lease);
                self.answered(&mut next, i, owner, answer);
            }
            Action::Write(i) => {
                let owner = self.owner(i, callers[i].claims_made - 1);
                let answer = store.write_claim(owner, self.args[i], self.lease);
                self.answered(&mut next, i, owner, answer);
            }
            Action::Act(i) => {
                let claim = callers[i].holding()?;
                callers[i].phase = Phase::Acted(claim);
                callers[i].ran = true;
                callers[i].effect = true;
                next.effects += 1;
            }
            Action::Decline(i) => {
                let claim = callers[i].holding()?;
                callers[i].phase = Phase::Declined(claim);
                callers[i].ran = true;
            }
            Action::Complete(i) => {
                let (claim, ending, value) = match callers[i].phase {
                    Phase::Acted(claim) => (claim, Ending::Done, claim.owner),
                    Phase::Declined(claim) => (claim, Ending::Failed, claim.owner),
                    Phase::ReportingUnknown(claim) => (claim, Ending::Unknown, 0),
                    _ => return None,
                };
                let recorded = store.complete(claim, ending, value);
                let stale = Some(claim) != next.last_granted;
                let caller = &mut next.callers[i];
                caller.phase = Phase::Ended(match (ending, recorded) {
                    (Ending::Done, Ok(())) => End::Fresh(value),
                    (Ending::Failed, Ok(())) => End::ToolError,
                    (Ending::Unknown, Ok(())) => End::UnknownOutcome,
                    (Ending::Unknown, Err(LeaseLost)) => End::NotRecorded,
                    (_, Err(LeaseLost)) => End::LeaseLost,
                });
                if recorded.is_err() && stale {
                    next.stale_refused = true;
                }
            }
            Action::LoseReply(i) => {
                let Phase::Acted(claim) = callers[i].phase else {
                    return None;
                };
                // The completion reaches the store, whatever it answers;
                // the caller does not hear, and tries again.
                let _ = store.complete(claim, Ending::Done, claim.owner);
                callers[i].lost_reply = true;
            }
            Action::Release(i) => {
                let Phase::Declined(claim) = callers[i].phase else {
                    return None;
                };
                let _ = store.release(claim);
                callers[i].phase = Phase::Ended(End::ToolError);
            }
            Action::Renew(i) => {
                let claim = callers[i].holding()?;
                // Refused, the holder keeps acting: its completion reports.
                let _ = store.renew(claim, self.lease);
                callers[i].renewals_made += 1;
            }
            Action::GiveUp(i) => callers[i].phase = Phase::Ended(End::InProgress),
            Action::Drop(i) => {
                if let Some(claim) = callers[i].holding()
                    && self.flaw != Some(Flaw::NoReleaseOnDrop)
                {
                    let _ = store.release(claim);
                }
                callers[i].phase = Phase::Ended(End::Dropped);
            }
            Action::Crash(i) => callers[i].phase = Phase::Ended(End::Crashed),
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(
                "at most one effect, but after a takeover",
                |model: &Callers, state: &State| {
                    let allowed = match model.takeover {
                        Takeover::Rerun => 1 + state.takeovers,
                        Takeover::ReportUnknown => 1,
                    };
                    state.effects <= allowed
                },
            ),
            Property::always(
                "the record is its current holder's",
                |_: &Callers, state: &State| match state.store.slot {
                    Slot::Completed(record) => {
                        state.last_granted
                            == Some(ClaimRef {
                                owner: record.owner,
                                fence: record.fence,
                            })
                    }
                    _ => true,
                },
            ),
            Property::always(
                "a fresh result is the one replayed",
                |_: &Callers, state: &State| {
                    state.callers.iter().all(|caller| match caller.ended() {
                        Some(End::Fresh(value) | End::Replay(value)) => matches!(
                            state.store.slot,
                            Slot::Completed(record)
                                if record.value == value && record.ending == Ending::Done
                        ),
                        _ => true,
                    })
                },
            ),
            Property::always(
                "an answer says truly whether the action ran",
                |_: &Callers, state: &State| {
                    state.callers.iter().all(|caller| match caller.ended() {
                        Some(End::Fresh(value)) => {
                            caller.effect && caller.claim.map(|c| c.owner) == Some(value)
                        }
                        Some(End::LeaseLost | End::ToolError) => caller.ran,
                        Some(
                            End::Replay(_)
                            | End::ReplayedError
                            | End::UnknownOutcome
                            | End::Conflict
                            | End::InProgress
                            | End::NotRecorded,
                        ) => !caller.ran,
                        Some(End::Dropped | End::Crashed) | None => true,
                    })
                },
            ),
            Property::always(
                "a held claim has a holder, or one that crashed",
                |_: &Callers, state: &State| match state.store.slot {
                    Slot::Held(held) => state.callers.iter().any(|caller| {
                        caller.claim
                            == Some(ClaimRef {
                                owner: held.owner,
                                fence: held.fence,
                            })
                            && (caller.holding().is_some() || caller.ended() == Some(End::Crashed))
                    }),
                    _ => true,
                },
            ),
            Property::always("every caller ends", |model: &Callers, state: &State| {
                let mut actions = Vec::new();
                model.actions(state, &mut actions);
                !actions.is_empty() || state.callers.iter().all(|c| c.ended().is_some())
            }),
            Property::sometimes("a waiter replays", |_: &Callers, state: &State| {
                state
                    .callers
                    .iter()
                    .any(|c| c.waited && matches!(c.ended(), Some(End::Replay(_))))
            }),
            Property::sometimes("a waiter's wait runs out", |_: &Callers, state: &State| {
                state
                    .callers
                    .iter()
                    .any(|c| c.ended() == Some(End::InProgress))
            }),
            Property::sometimes(
                "a completion whose reply was lost is recorded when tried again",
                |_: &Callers, state: &State| {
                    state
                        .callers
                        .iter()
                        .any(|c| c.lost_reply && matches!(c.ended(), Some(End::Fresh(_))))
                },
            ),
        ];
        if self.args.iter().all(|a| *a == self.args[0]) {
            properties.push(Property::sometimes(
                "one caller acts and the two others replay",
                |_: &Callers, state: &State| {
                    let ends = state.callers.map(|c| c.ended());
                    let count = |f: fn(&Option<End>) -> bool| ends.iter().filter(|e| f(e)).count();
                    count(|e| matches!(e, Some(End::Fresh(_)))) == 1
                        && count(|e| matches!(e, Some(End::Replay(_)))) == 2
                },
            ));
        }
        if self.leases == Leases::Expire {
            properties.extend([
                Property::sometimes("a claim is taken over", |_: &Callers, state: &State| {
                    state.takeovers > 0
                }),
                Property::sometimes(
                    "a stale holder's completion is refused",
                    |_: &Callers, state: &State| state.stale_refused,
                ),
            ]);
            properties.push(match self.takeover {
                Takeover::Rerun => {
                    Property::sometimes("a takeover acts again", |_: &Callers, state: &State| {
                        state.effects == 2
                    })
                }
                Takeover::ReportUnknown => Property::sometimes(
                    "a takeover reports an unknown outcome",
                    |_: &Callers, state: &State| {
                        state
                            .callers
                            .iter()
                            .any(|c| c.ended() == Some(End::UnknownOutcome))
                    },
                ),
            });
        }
        if self.args.iter().any(|a| *a != self.args[0]) {
            properties.push(Property::sometimes(
                "other arguments conflict",
                |_: &Callers, state: &State| {
                    state
                        .callers
                        .iter()
                        .any(|c| c.ended() == Some(End::Conflict))
                },
            ));
        }
        properties
    }
}

impl Callers {
    /// Moves caller `i` on from the store's answer to its claim.
    fn answered(&self, state: &mut State, i: usize, owner: Owner, answer: Answer) {
        let caller = &mut state.callers[i];
        caller.phase = match answer {
            Answer::Claimed { fence, taken_over } => {
                let claim = ClaimRef { owner, fence };
                caller.claim = Some(claim);
                state.last_granted = Some(claim);
                if taken_over {
                    state.takeovers += 1;
                }
                if taken_over && self.takeover == Takeover::ReportUnknown {
                    Phase::ReportingUnknown(claim)
                } else {
                    Phase::Holding(claim)
                }
            }
            Answer::InFlight => {
                caller.waited = true;
                Phase::Waiting
            }
            Answer::Completed {
                ending: Ending::Done,
                value,
            } => Phase::Ended(End::Replay(value)),
            Answer::Completed {
                ending: Ending::Failed,
                ..
            } => Phase::Ended(End::ReplayedError),
            Answer::Completed {
                ending: Ending::Unknown,
                ..
            } => Phase::Ended(End::UnknownOutcome),
            Answer::Conflict { .. } => Phase::Ended(End::Conflict),
        };
    }
}
