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
//!
//! Where the system has unknown failures ([`Callers::with_unknown_failures`]),
//! an action may also fail in a way that may have taken effect: with its
//! effect (the provider applied it, and the answer was lost) or without
//! one. Such a failure never releases the claim: with the provider's
//! [`Lookup`], the holder asks it, and records the result it applied, or
//! releases on "not applied" (trusted only once the settle time has
//! passed), or records an unknown outcome when it cannot tell; without
//! one, it records an unknown outcome. A takeover under
//! [`Takeover::Verify`] asks the lookup the same way. Where requests may
//! land late ([`Callers::with_late_requests`]), the request of a failure
//! that had no effect may still have it after the failure returned, as
//! when the provider takes a request up after the caller stopped waiting.

mod properties;

use std::fmt;

use stateright::{Model, Property};

use crate::store::{
    Answer, Args, ClaimRef, Ending, Flaw, KeyStore, LeaseLost, Leases, Owner, Tick, Value,
};

/// A step's outcome for the caller: ended as this, or refused (`LeaseLost`)
/// and ended as that.
type Ends = (End, End);

/// How many callers ask.
pub const CALLERS: usize = 3;

/// What a claim that takes over does: the guard's takeover policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Takeover {
    /// The taker acts again (the provider deduplicates on the key).
    Rerun,
    /// The taker records an unknown outcome and does not act.
    ReportUnknown,
    /// The taker asks the provider's [`Lookup`]: it replays the result the
    /// provider applied, acts on "not applied", and records an unknown
    /// outcome when the provider cannot tell. Without a lookup, as
    /// [`Takeover::ReportUnknown`].
    Verify,
}

/// The provider's lookup, which a verification asks whether the action
/// happened: it answers "applied" (with the action's result) once an
/// effect shows, and "not applied" before.
///
/// The model holds the provider to what the settle time stands for: an
/// action's effect shows in the lookup no later than `settle` ticks after
/// its holder's lease ran out (as of its last renewal), so a holder does
/// not have its effect past `settle - lag` ticks after that.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lookup {
    /// How many ticks an effect takes to show in the lookup: until then, it
    /// answers "not applied".
    pub lag: Tick,
    /// The policy's settle time: "not applied" is trusted only once this
    /// many ticks have passed since the action may last have run (its
    /// failure, or the takeover).
    pub settle: Tick,
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
    /// Whether an action may fail in a way that may have taken effect.
    pub unknown_failures: bool,
    /// How many ticks after an unknown failure without an effect its
    /// request may still reach the provider and have its effect (a request
    /// the provider takes up after the caller stopped waiting for it).
    pub late: Tick,
    /// The provider's lookup, if it can be asked.
    pub lookup: Option<Lookup>,
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
            unknown_failures: false,
            late: 0,
            lookup: None,
            flaw: None,
        }
    }

    /// The same system where an action may fail in a way that may have
    /// taken effect, and the provider is asked through `lookup`, if any.
    pub fn with_unknown_failures(self, lookup: Option<Lookup>) -> Callers {
        Callers {
            unknown_failures: true,
            lookup,
            ..self
        }
    }

    /// The same system where the request of an unknown failure may still
    /// have its effect up to `late` ticks after the failure returned.
    pub fn with_late_requests(self, late: Tick) -> Callers {
        Callers { late, ..self }
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
    /// The caller's action ran and failed in a way that may have taken
    /// effect, and nobody could tell whether it did: its error is returned,
    /// and the outcome recorded as unknown.
    UnknownError,
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
    /// It took over under [`Takeover::ReportUnknown`], or its verification
    /// of a takeover could not tell: an unknown outcome is being recorded.
    ReportingUnknown(ClaimRef),
    /// Its action failed in a way that may have taken effect, or it took
    /// over under [`Takeover::Verify`]: the provider's lookup is being
    /// asked.
    Verifying {
        /// The claim.
        claim: ClaimRef,
        /// The tick the action may last have run: "not applied" is trusted
        /// from the settle time after it.
        since: Tick,
        /// Whether it asks for a takeover (or for its own action).
        takeover: bool,
    },
    /// Its action failed in a way that may have taken effect, and nobody
    /// can tell whether it did: an unknown outcome is being recorded.
    RecordingUnknown(ClaimRef),
    /// The provider said the action was applied, with this result: it is
    /// being recorded.
    Confirmed {
        /// The claim.
        claim: ClaimRef,
        /// The result the provider applied.
        value: Value,
        /// Whether it asked for a takeover (or for its own action).
        takeover: bool,
    },
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
    /// Whether its action failed in a way that may have taken effect.
    pub unsure: bool,
    /// What the provider's lookup last told it.
    pub heard: Option<Heard>,
    /// The tick its lease runs out, as of its last claim or renewal
    /// (tracked where the provider has a lookup).
    pub lease_until: Tick,
    /// Where requests may land late: the tick its unknown failure without
    /// an effect returned, while its request may still have its effect
    /// ([`Callers::late`] ticks after it, at most).
    pub late_since: Option<Tick>,
}

/// What the provider's lookup told a caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Heard {
    /// The action happened.
    Applied,
    /// It did not, and the settle time has passed.
    NotApplied,
    /// The provider could not tell (or contradicted the ask) within the
    /// call's wait.
    CannotTell,
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
            unsure: false,
            heard: None,
            lease_until: 0,
            late_since: None,
        }
    }

    /// The claim it holds and may still use, if any.
    pub fn holding(&self) -> Option<ClaimRef> {
        match self.phase {
            Phase::Holding(claim)
            | Phase::Acted(claim)
            | Phase::Declined(claim)
            | Phase::ReportingUnknown(claim)
            | Phase::Verifying { claim, .. }
            | Phase::RecordingUnknown(claim)
            | Phase::Confirmed { claim, .. } => Some(claim),
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
    /// When the first effect happened, and its result: what the provider's
    /// lookup answers (tracked where there is one).
    pub first_effect: Option<(Tick, Value)>,
    /// Whether a claim was released after an action that may have taken
    /// effect, without the provider saying it was not applied.
    pub unverified_release: bool,
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
    /// The caller's action has its effect, and its answer is lost: it fails
    /// in a way that may have taken effect.
    ActUnknown(usize),
    /// The caller's action fails in a way that may have taken effect, but
    /// had none when it returned (its request never reached the provider,
    /// or, where requests land late, may still).
    FailUnknown(usize),
    /// The request of the caller's unknown failure reaches the provider
    /// late, and has its effect.
    Land(usize),
    /// The provider's lookup answers the caller's verification: "applied"
    /// once an effect shows, "not applied" otherwise (before the settle
    /// time, nothing is concluded and the caller asks again later).
    Ask(usize),
    /// The provider cannot tell, or contradicts the ask, until the call's
    /// wait runs out.
    CannotTell(usize),
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
            first_effect: None,
            unverified_release: false,
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
                    let lands = self.lands(caller, state.store.now);
                    if lands {
                        actions.push(Action::Act(i));
                    }
                    actions.extend([Action::Decline(i), Action::Drop(i)]);
                    if self.unknown_failures {
                        if lands {
                            actions.push(Action::ActUnknown(i));
                        }
                        actions.push(Action::FailUnknown(i));
                    }
                    if crashes && caller.renewals_made < self.renewals {
                        actions.push(Action::Renew(i));
                    }
                }
                Phase::Verifying { .. } => {
                    actions.extend([Action::Ask(i), Action::CannotTell(i)]);
                    // Dropped while asking, the call must leave its claim
                    // held, as a crash does (below).
                    if self.flaw == Some(Flaw::ReleaseOnUnknown) {
                        actions.push(Action::Drop(i));
                    }
                    if crashes && caller.renewals_made < self.renewals {
                        actions.push(Action::Renew(i));
                    }
                }
                Phase::RecordingUnknown(_) | Phase::Confirmed { .. } => {
                    actions.push(Action::Complete(i));
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
            // Whatever the caller does meanwhile, even once it has ended.
            let now = state.store.now;
            if caller
                .late_since
                .is_some_and(|failed| now <= failed + self.late && self.lands(caller, now))
            {
                actions.push(Action::Land(i));
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
            Action::Tick => {
                store.tick();
                // A request that did not land in time never will.
                for caller in callers.iter_mut() {
                    if caller
                        .late_since
                        .is_some_and(|at| at + self.late < store.now)
                    {
                        caller.late_since = None;
                    }
                }
            }
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
                self.has_effect(&mut next, i, claim);
            }
            Action::ActUnknown(i) => {
                let claim = callers[i].holding()?;
                self.has_effect(&mut next, i, claim);
                self.failed_unknown(&mut next, i, claim);
            }
            Action::FailUnknown(i) => {
                let claim = callers[i].holding()?;
                if self.late > 0 {
                    callers[i].late_since = Some(store.now);
                }
                self.failed_unknown(&mut next, i, claim);
            }
            Action::Land(i) => {
                let claim = callers[i].claim?;
                callers[i].late_since = None;
                self.has_effect(&mut next, i, claim);
            }
            Action::Ask(i) => {
                let Phase::Verifying {
                    claim,
                    since,
                    takeover,
                } = callers[i].phase
                else {
                    return None;
                };
                let lookup = self.lookup?;
                let now = store.now;
                let caller = &mut next.callers[i];
                match next.first_effect {
                    Some((at, value)) if at + lookup.lag <= now => {
                        caller.heard = Some(Heard::Applied);
                        caller.phase = Phase::Confirmed {
                            claim,
                            value,
                            takeover,
                        };
                    }
                    _ if now >= since + lookup.settle
                        || self.flaw == Some(Flaw::UnsettledNotApplied) =>
                    {
                        caller.heard = Some(Heard::NotApplied);
                        caller.phase = if takeover {
                            Phase::Holding(claim)
                        } else {
                            let _ = next.store.release(claim);
                            Phase::Ended(End::ToolError)
                        };
                    }
                    // "Not applied" before the settle time: asked again.
                    _ => return None,
                }
            }
            Action::CannotTell(i) => {
                let Phase::Verifying {
                    claim, takeover, ..
                } = callers[i].phase
                else {
                    return None;
                };
                callers[i].heard = Some(Heard::CannotTell);
                callers[i].phase = if takeover {
                    Phase::ReportingUnknown(claim)
                } else {
                    Phase::RecordingUnknown(claim)
                };
            }
            Action::Decline(i) => {
                let claim = callers[i].holding()?;
                callers[i].phase = Phase::Declined(claim);
                callers[i].ran = true;
            }
            Action::Complete(i) => {
                let (claim, ending, value, (recorded_end, refused_end)): (_, _, _, Ends) =
                    match callers[i].phase {
                        Phase::Acted(claim) => (
                            claim,
                            Ending::Done,
                            claim.owner,
                            (End::Fresh(claim.owner), End::LeaseLost),
                        ),
                        Phase::Declined(claim) => (
                            claim,
                            Ending::Failed,
                            claim.owner,
                            (End::ToolError, End::LeaseLost),
                        ),
                        Phase::ReportingUnknown(claim) => (
                            claim,
                            Ending::Unknown,
                            0,
                            (End::UnknownOutcome, End::NotRecorded),
                        ),
                        Phase::RecordingUnknown(claim) => (
                            claim,
                            Ending::Unknown,
                            0,
                            (End::UnknownError, End::LeaseLost),
                        ),
                        Phase::Confirmed {
                            claim,
                            value,
                            takeover: true,
                        } => (
                            claim,
                            Ending::Done,
                            value,
                            (End::Replay(value), End::NotRecorded),
                        ),
                        Phase::Confirmed {
                            claim,
                            value,
                            takeover: false,
                        } => (
                            claim,
                            Ending::Done,
                            value,
                            (End::Fresh(value), End::LeaseLost),
                        ),
                        _ => return None,
                    };
                let recorded = store.complete(claim, ending, value);
                let stale = Some(claim) != next.last_granted;
                let caller = &mut next.callers[i];
                caller.phase = Phase::Ended(match recorded {
                    Ok(()) => recorded_end,
                    Err(LeaseLost) => refused_end,
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
                let renewed = store.renew(claim, self.lease);
                if renewed.is_ok() && self.lookup.is_some() {
                    callers[i].lease_until = store.now + self.lease;
                }
                callers[i].renewals_made += 1;
            }
            Action::GiveUp(i) => callers[i].phase = Phase::Ended(End::InProgress),
            Action::Drop(i) => {
                if let Some(claim) = callers[i].holding()
                    && self.flaw != Some(Flaw::NoReleaseOnDrop)
                {
                    let _ = store.release(claim);
                    next.unverified_release |= next.callers[i].unsure;
                }
                next.callers[i].phase = Phase::Ended(End::Dropped);
            }
            Action::Crash(i) => callers[i].phase = Phase::Ended(End::Crashed),
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        self.checked()
    }
}

impl Callers {
    /// Whether caller `i`'s action may still have its effect at tick `now`:
    /// where the provider has a lookup, only while the effect would show
    /// in it by the settle time after the caller's lease ran out.
    fn lands(&self, caller: &Caller, now: Tick) -> bool {
        self.lookup
            .is_none_or(|lookup| now + lookup.lag <= caller.lease_until + lookup.settle)
    }

    /// Caller `i`'s action has its effect under `claim`.
    fn has_effect(&self, state: &mut State, i: usize, claim: ClaimRef) {
        let caller = &mut state.callers[i];
        caller.ran = true;
        caller.effect = true;
        state.effects += 1;
        if self.lookup.is_some() && state.first_effect.is_none() {
            state.first_effect = Some((state.store.now, claim.owner));
        }
    }

    /// Caller `i`'s action failed in a way that may have taken effect: the
    /// provider is asked, or the outcome is recorded as unknown.
    fn failed_unknown(&self, state: &mut State, i: usize, claim: ClaimRef) {
        let now = state.store.now;
        let caller = &mut state.callers[i];
        caller.ran = true;
        caller.unsure = true;
        caller.phase = match self.lookup {
            Some(_) => Phase::Verifying {
                claim,
                since: now,
                takeover: false,
            },
            None => Phase::RecordingUnknown(claim),
        };
    }

    /// Moves caller `i` on from the store's answer to its claim.
    fn answered(&self, state: &mut State, i: usize, owner: Owner, answer: Answer) {
        let now = state.store.now;
        let caller = &mut state.callers[i];
        caller.phase = match answer {
            Answer::Claimed { fence, taken_over } => {
                let claim = ClaimRef { owner, fence };
                caller.claim = Some(claim);
                if self.lookup.is_some() {
                    caller.lease_until = now + self.lease;
                }
                state.last_granted = Some(claim);
                if taken_over {
                    state.takeovers += 1;
                }
                match (taken_over, self.takeover, self.lookup) {
                    (false, ..) | (true, Takeover::Rerun, _) => Phase::Holding(claim),
                    (true, Takeover::Verify, Some(_)) => Phase::Verifying {
                        claim,
                        since: now,
                        takeover: true,
                    },
                    (true, Takeover::ReportUnknown | Takeover::Verify, _) => {
                        Phase::ReportingUnknown(claim)
                    }
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
