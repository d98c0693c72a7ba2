//! Schedules: what a storm does to a tool, event by event, and the
//! strategy that generates them (and shrinks a failing one).

use std::fmt;

use proptest::prelude::*;

/// A step of the claim protocol, as the store sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// [`Store::claim`](idempotent_tools::store::Store::claim).
    Claim,
    /// [`Store::complete`](idempotent_tools::store::Store::complete).
    Complete,
    /// [`Store::release`](idempotent_tools::store::Store::release).
    Release,
    /// [`Store::renew`](idempotent_tools::store::Store::renew).
    Renew,
}

/// What happens to one ask besides being asked: a cancellation at a chosen
/// point, a fault in one of its store steps, or its holder vanishing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trouble {
    /// Nothing: the ask runs to its end.
    None,
    /// The caller is dropped while its claim is on its way to the store.
    DroppedBeforeClaimAnswer,
    /// The caller is dropped while its action runs: when its call reaches
    /// the stand-in provider, before the provider acts.
    DroppedDuringAction,
    /// The caller is dropped once the stand-in provider acted on its call,
    /// before the answer comes back: the effect happened, the guard
    /// releases the claim, and a retry acts again (once more at the
    /// provider, unless the tool hands it the guard's key: a dropped call
    /// is not verified with the provider).
    DroppedAfterActing,
    /// The caller is dropped while its completion is on its way to the store.
    DroppedDuringCompletion,
    /// The store's next such step for this key fails as unreachable.
    Fails(Step),
    /// The store's next such step for this key stalls a moment (a busy
    /// database), then goes through.
    Stalls(Step),
    /// The store's next such step for this key is carried out, but its answer
    /// arrives after the caller gave up and was dropped.
    AnswersLate(Step),
    /// The completion stalls past the lease, as for a holder frozen by a
    /// long pause: another caller may take the claim over meanwhile.
    PausedPastLease,
    /// The holder vanishes once the stand-in provider acted on its call, as
    /// a process killed at the worst moment does: the effect happened, its
    /// future is dropped and none of its later steps reaches the store, so
    /// the claim stays until its lease runs out and another caller takes it
    /// over.
    Vanishes,
    /// The stand-in provider acts on the caller's call, then the connection
    /// drops before its answer: the tool gets
    /// [`ProviderError::ConnectionDropped`](crate::ProviderError::ConnectionDropped),
    /// an error after which the action may have taken effect. Explored
    /// with [`Storm::provider_faults`](super::Storm::provider_faults).
    ConnectionDropsAfterActing,
    /// The stand-in provider acts on the caller's call, then its answer
    /// comes too late: the tool gets
    /// [`ProviderError::ReplyLost`](crate::ProviderError::ReplyLost), as
    /// after a timeout. Explored with
    /// [`Storm::provider_faults`](super::Storm::provider_faults).
    TimesOutAfterActing,
}

impl Trouble {
    /// Whether this trouble needs leases that run out, and short ones.
    pub(super) fn needs_short_leases(self) -> bool {
        matches!(
            self,
            Trouble::Vanishes
                | Trouble::PausedPastLease
                | Trouble::Fails(Step::Renew)
                | Trouble::Stalls(Step::Renew)
        )
    }

    /// Whether this trouble lands in the action, at a moment the stand-in
    /// provider marks: without a provider the storm leaves it out.
    pub(super) fn needs_provider(self) -> bool {
        matches!(
            self,
            Trouble::DroppedDuringAction
                | Trouble::DroppedAfterActing
                | Trouble::Vanishes
                | Trouble::ConnectionDropsAfterActing
                | Trouble::TimesOutAfterActing
        )
    }

    /// Whether the stand-in provider answers the caller's call with an
    /// error once it acted.
    pub(super) fn is_provider_fault(self) -> bool {
        matches!(
            self,
            Trouble::ConnectionDropsAfterActing | Trouble::TimesOutAfterActing
        )
    }

    /// Whether the caller is dropped when its step is reached.
    pub(super) fn drops_caller(self) -> bool {
        matches!(
            self,
            Trouble::DroppedBeforeClaimAnswer
                | Trouble::DroppedDuringAction
                | Trouble::DroppedAfterActing
                | Trouble::DroppedDuringCompletion
                | Trouble::AnswersLate(_)
                | Trouble::Vanishes
        )
    }
}

/// One event of a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// One ask for `object`, with the usual arguments (`variant` 0) or other
    /// arguments under the same key, started without waiting for earlier
    /// asks to end.
    Ask {
        /// Which object (the key's argument): `storm0`, `storm1`, ...
        object: u8,
        /// 0 for the usual arguments, another number for other ones.
        variant: u8,
        /// What happens to it.
        trouble: Trouble,
    },
    /// `callers` identical asks for `object`, started at once.
    Burst {
        /// Which object.
        object: u8,
        /// How many callers.
        callers: u8,
    },
    /// Waits until every ask started so far has ended: what follows is a
    /// retry, or a later step of the model.
    Settle,
    /// Time passes: a lease runs out.
    PassLease,
}

/// A storm's schedule: its events, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// The events.
    pub events: Vec<Event>,
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, event) in self.events.iter().enumerate() {
            write!(f, "  {}. ", i + 1)?;
            match event {
                Event::Ask {
                    object,
                    variant,
                    trouble,
                } => {
                    write!(f, "ask storm{object}")?;
                    if *variant != 0 {
                        write!(f, " with other arguments ({variant})")?;
                    }
                    match trouble {
                        Trouble::None => {}
                        other => write!(f, ", {}", describe(*other))?,
                    }
                }
                Event::Burst { object, callers } => {
                    write!(f, "{callers} identical asks for storm{object} at once")?
                }
                Event::Settle => f.write_str("wait for every ask to end")?,
                Event::PassLease => f.write_str("let a lease run out")?,
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// A trouble in words.
pub(super) fn describe(trouble: Trouble) -> String {
    match trouble {
        Trouble::None => "nothing".into(),
        Trouble::DroppedBeforeClaimAnswer => "dropped before its claim is answered".into(),
        Trouble::DroppedDuringAction => {
            "dropped during its action, before the provider acts".into()
        }
        Trouble::DroppedAfterActing => "dropped once the provider acted".into(),
        Trouble::DroppedDuringCompletion => "dropped during its completion".into(),
        Trouble::Fails(step) => format!("its {} fails", step_name(step)),
        Trouble::Stalls(step) => format!("its {} stalls", step_name(step)),
        Trouble::AnswersLate(step) => {
            format!("its {} answers after it gave up", step_name(step))
        }
        Trouble::PausedPastLease => "its completion is paused past the lease".into(),
        Trouble::Vanishes => "its holder vanishes once the provider acted".into(),
        Trouble::ConnectionDropsAfterActing => {
            "the provider acts, then its connection drops before the answer".into()
        }
        Trouble::TimesOutAfterActing => "the provider acts, then its answer times out".into(),
    }
}

fn step_name(step: Step) -> &'static str {
    match step {
        Step::Claim => "claim",
        Step::Complete => "completion",
        Step::Release => "release",
        Step::Renew => "renewal",
    }
}

/// What schedules may contain.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    pub(super) objects: u8,
    pub(super) max_events: usize,
    pub(super) short_leases: bool,
    /// Whether the tool's action calls a stand-in provider the storm knows.
    pub(super) provider: bool,
    /// Whether the provider also fails calls once it acted.
    pub(super) provider_faults: bool,
    /// Troubles left out.
    pub(super) left_out: LeftOut,
}

/// Troubles a storm leaves out: see [`Storm::leave_out`](super::Storm::leave_out).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LeftOut {
    troubles: [Option<Trouble>; LeftOut::MOST],
}

impl LeftOut {
    /// The most troubles a storm leaves out.
    pub(super) const MOST: usize = 16;

    /// Adds `trouble`; past [`LeftOut::MOST`], it is not added.
    pub(super) fn add(&mut self, trouble: Trouble) {
        if let Some(free) = self.troubles.iter_mut().find(|t| t.is_none()) {
            *free = Some(trouble);
        }
    }

    fn contains(&self, trouble: Trouble) -> bool {
        self.troubles.contains(&Some(trouble))
    }
}

fn trouble(shape: Shape) -> BoxedStrategy<Trouble> {
    let Shape {
        short_leases,
        provider,
        provider_faults,
        left_out,
        ..
    } = shape;
    let steps = || {
        prop_oneof![
            Just(Step::Claim),
            Just(Step::Complete),
            Just(Step::Release),
            Just(Step::Renew)
        ]
    };
    let usual = prop_oneof![
        6 => Just(Trouble::None),
        1 => Just(Trouble::DroppedBeforeClaimAnswer),
        1 => Just(Trouble::DroppedDuringAction),
        1 => Just(Trouble::DroppedAfterActing),
        1 => Just(Trouble::DroppedDuringCompletion),
        1 => steps().prop_map(Trouble::Fails),
        1 => steps().prop_map(Trouble::Stalls),
        1 => prop_oneof![Just(Step::Claim), Just(Step::Complete)].prop_map(Trouble::AnswersLate),
        1 => Just(Trouble::PausedPastLease),
        // Acted, vanished, taken over: the case that finds a tool keeping
        // its key from the provider, explored twice as often.
        2 => Just(Trouble::Vanishes),
    ];
    // Without provider faults, the strategy is the one storms have always
    // drawn from, so a seed gives the schedule it always gave.
    let every = if provider_faults {
        prop_oneof![
            10 => usual,
            1 => Just(Trouble::ConnectionDropsAfterActing),
            1 => Just(Trouble::TimesOutAfterActing),
        ]
        .boxed()
    } else {
        usual.boxed()
    };
    every
        .prop_filter("needs leases that run out, or a provider", move |t| {
            (short_leases || !t.needs_short_leases())
                && (provider || !t.needs_provider())
                && !left_out.contains(*t)
        })
        .boxed()
}

/// The strategy for schedules of this shape. Shrinking drops events, and
/// turns troubles and variants toward none.
pub(super) fn schedules(shape: Shape) -> BoxedStrategy<Schedule> {
    let objects = shape.objects.max(1);
    let ask = (
        0..objects,
        prop_oneof![4 => Just(0u8), 1 => 1u8..3],
        trouble(shape),
    )
        .prop_map(|(object, variant, trouble)| Event::Ask {
            object,
            variant,
            trouble,
        });
    let burst = (0..objects, 2u8..6).prop_map(|(object, callers)| Event::Burst { object, callers });
    let event = if shape.short_leases {
        prop_oneof![6 => ask, 2 => burst, 1 => Just(Event::Settle), 1 => Just(Event::PassLease)]
            .boxed()
    } else {
        prop_oneof![6 => ask, 2 => burst, 1 => Just(Event::Settle)].boxed()
    };
    proptest::collection::vec(event, 1..=shape.max_events.max(1))
        .prop_map(|events| Schedule { events })
        .boxed()
}
