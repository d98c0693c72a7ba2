//! What the checker holds in every reachable state of the callers'
//! system, and the examples of each interesting turn it must reach.

use stateright::{Model, Property};

use super::{Callers, End, Heard, State, Takeover};
use crate::store::{ClaimRef, Ending, Leases, Slot};

impl Callers {
    /// The system's properties: those of every system, and those of its
    /// settings (its leases, its takeover policy, its callers' arguments,
    /// its unknown failures).
    pub(super) fn checked(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(
                "at most one effect, but after a takeover",
                |model: &Callers, state: &State| {
                    let allowed = match model.takeover {
                        Takeover::Rerun => 1 + state.takeovers,
                        Takeover::ReportUnknown | Takeover::Verify => 1,
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
                        Some(End::LeaseLost | End::ToolError | End::UnknownError) => caller.ran,
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
                Takeover::ReportUnknown | Takeover::Verify => Property::sometimes(
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
        if self.unknown_failures {
            properties.extend(self.unknown_properties());
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

    /// The properties of a system whose actions may fail in a way that may
    /// have taken effect.
    fn unknown_properties(&self) -> Vec<Property<Self>> {
        /// Whether a caller ended as `end` after the lookup told it `heard`.
        fn told(state: &State, unsure: bool, heard: Heard, end: fn(End) -> bool) -> bool {
            state
                .callers
                .iter()
                .any(|c| c.unsure == unsure && c.heard == Some(heard) && c.ended().is_some_and(end))
        }
        let mut properties = vec![Property::always(
            "an unknown failure is never released without a \"not applied\"",
            |_: &Callers, state: &State| !state.unverified_release,
        )];
        if self.lookup.is_none() {
            properties.push(Property::sometimes(
                "an unknown failure is recorded as unknown",
                |_: &Callers, state: &State| {
                    state
                        .callers
                        .iter()
                        .any(|c| c.ended() == Some(End::UnknownError))
                },
            ));
            return properties;
        }
        properties.extend([
            Property::sometimes(
                "an unknown failure found applied returns its result",
                |_: &Callers, state: &State| {
                    told(state, true, Heard::Applied, |e| matches!(e, End::Fresh(_)))
                },
            ),
            Property::sometimes(
                "an unknown failure found not applied is released, and a retry acts",
                |_: &Callers, state: &State| {
                    told(state, true, Heard::NotApplied, |e| e == End::ToolError)
                        && state.callers.iter().any(|c| {
                            !c.unsure && c.effect && matches!(c.ended(), Some(End::Fresh(_)))
                        })
                },
            ),
            Property::sometimes(
                "an unknown failure nobody can tell is recorded as unknown",
                |_: &Callers, state: &State| {
                    told(state, true, Heard::CannotTell, |e| e == End::UnknownError)
                },
            ),
        ]);
        // Whatever the takeover policy: under `Takeover::Rerun`, which asks
        // nobody, a takeover acts a second time.
        properties.push(Property::always(
            "no second effect when the provider can be asked",
            |_: &Callers, state: &State| state.effects <= 1,
        ));
        if self.takeover != Takeover::Verify {
            return properties;
        }
        properties.push(Property::sometimes(
            "a takeover finds the action applied and replays it",
            |_: &Callers, state: &State| {
                told(state, false, Heard::Applied, |e| {
                    matches!(e, End::Replay(_))
                })
            },
        ));
        // The first takeover is at the end of the first lease: "not
        // applied" is trusted a settle time later, if the clock gets there.
        if self
            .lookup
            .is_some_and(|l| self.lease + l.settle <= self.last_tick)
        {
            properties.push(Property::sometimes(
                "a takeover finds the action not applied and acts",
                |_: &Callers, state: &State| {
                    told(state, false, Heard::NotApplied, |e| {
                        matches!(e, End::Fresh(_))
                    })
                },
            ));
        }
        properties
    }
}
