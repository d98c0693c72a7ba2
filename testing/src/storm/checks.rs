//! What must hold after every schedule, and what a caller got.

use std::fmt;
use std::time::Duration;

use super::schedule::{Trouble, describe};

/// What one caller got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answered {
    /// [`Outcome::Fresh`](idempotent_tools::Outcome::Fresh): the action ran now.
    Fresh,
    /// [`Outcome::Replay`](idempotent_tools::Outcome::Replay).
    Replay,
    /// [`Outcome::Conflict`](idempotent_tools::Outcome::Conflict).
    Conflict,
    /// An error that says whether the action ran
    /// ([`Error::action_ran`](idempotent_tools::Error::action_ran)).
    Error {
        /// The error, as displayed.
        error: String,
        /// `Some(true)` if the action ran, `Some(false)` if not, `None` if
        /// an earlier holder's outcome is unknown.
        action_ran: Option<bool>,
    },
    /// The tool's own error, after the stand-in provider acted and then
    /// failed the call as the schedule asked (a dropped connection, a
    /// timeout): the error says the action may have taken effect.
    ProviderFailed {
        /// The error, as displayed.
        error: String,
    },
    /// An error that is not the guard's: nothing says whether the action ran.
    Unexplained {
        /// The error, as displayed.
        error: String,
    },
    /// The caller was dropped by the schedule.
    Dropped,
    /// The caller never answered within the storm's patience.
    NoAnswer,
}

/// One caller of a schedule and what it got.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The caller's number, from 1, in the order started.
    pub number: usize,
    /// The object asked for.
    pub object: String,
    /// The arguments' variant: 0 for the usual ones.
    pub variant: u8,
    /// What happened to it.
    pub trouble: Trouble,
    /// The key its first claim named, if it claimed one.
    pub key: Option<String>,
    /// What it got.
    pub answered: Answered,
    /// How long it took.
    pub took: Duration,
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "caller {} ({}", self.number, self.object)?;
        if self.variant != 0 {
            write!(f, ", other arguments {}", self.variant)?;
        }
        if self.trouble != Trouble::None {
            write!(f, ", {}", describe(self.trouble))?;
        }
        match &self.key {
            Some(key) => write!(f, ", key {key}")?,
            None => f.write_str(", no claim")?,
        }
        write!(f, "): ")?;
        match &self.answered {
            Answered::Fresh => f.write_str("fresh")?,
            Answered::Replay => f.write_str("replay")?,
            Answered::Conflict => f.write_str("conflict")?,
            Answered::Error { error, action_ran } => {
                write!(f, "error (action ran: {action_ran:?}): {error}")?
            }
            Answered::ProviderFailed { error } => {
                write!(f, "the provider's error once it acted: {error}")?
            }
            Answered::Unexplained { error } => write!(f, "error: {error}")?,
            Answered::Dropped => f.write_str("dropped")?,
            Answered::NoAnswer => f.write_str("no answer")?,
        }
        write!(f, " after {} ms", self.took.as_millis())
    }
}

/// A promise a schedule broke.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// The real effect happened more than once for one key.
    EffectRepeated {
        /// The object.
        object: String,
        /// How many effects were counted.
        effects: usize,
    },
    /// More than one caller was told the action ran now, for one key.
    FreshTwice {
        /// The object.
        object: String,
        /// The callers told so.
        callers: Vec<usize>,
    },
    /// A caller got an error that does not say whether the action ran.
    Unexplained {
        /// The caller.
        caller: usize,
        /// The error, as displayed.
        error: String,
    },
    /// A caller took longer than the wait bound allows.
    WaitedTooLong {
        /// The caller.
        caller: usize,
        /// How long it took.
        took: Duration,
        /// How long it may take.
        bound: Duration,
    },
    /// A key was still held once every holder was gone and its lease had
    /// passed.
    LeftHeld {
        /// The key's text.
        key: String,
    },
    /// The tool's key leaves out the object the storm asked about, so the
    /// storm cannot tell one object's calls from another's: the storm stops
    /// at the first such key, without shrinking.
    KeyWithoutObject {
        /// The caller whose claim named it.
        caller: usize,
        /// The key's text.
        key: String,
        /// The object asked about.
        object: String,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::EffectRepeated { object, effects } => write!(
                f,
                "the effect happened {effects} times for {object}, where at most one is allowed"
            ),
            Violation::FreshTwice { object, callers } => write!(
                f,
                "callers {callers:?} were each told the action on {object} ran now (fresh)"
            ),
            Violation::Unexplained { caller, error } => write!(
                f,
                "caller {caller} got an error that does not say whether the action ran: {error}"
            ),
            Violation::WaitedTooLong {
                caller,
                took,
                bound,
            } => write!(
                f,
                "caller {caller} took {} ms, past the wait bound's {} ms",
                took.as_millis(),
                bound.as_millis()
            ),
            Violation::LeftHeld { key } => write!(
                f,
                "key `{key}` was still held after every holder was gone and its lease had passed"
            ),
            Violation::KeyWithoutObject {
                caller,
                key,
                object,
            } => write!(
                f,
                "caller {caller} claimed key `{key}`, which leaves out the object it asked about \
                 (`{object}`): put the ask's object (`ask.object`) in the tool's key"
            ),
        }
    }
}

/// The checks on callers alone: results, errors and times.
pub(super) fn callers(callers: &[Caller], bound: Duration) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut fresh: Vec<(String, Vec<usize>)> = Vec::new();
    for caller in callers {
        match &caller.answered {
            Answered::Fresh => match fresh.iter_mut().find(|(o, _)| *o == caller.object) {
                Some((_, numbers)) => numbers.push(caller.number),
                None => fresh.push((caller.object.clone(), vec![caller.number])),
            },
            Answered::Unexplained { error } => found.push(Violation::Unexplained {
                caller: caller.number,
                error: error.clone(),
            }),
            _ => {}
        }
        if caller.took > bound {
            found.push(Violation::WaitedTooLong {
                caller: caller.number,
                took: caller.took,
                bound,
            });
        }
    }
    for (object, numbers) in fresh {
        if numbers.len() > 1 {
            found.push(Violation::FreshTwice {
                object,
                callers: numbers,
            });
        }
    }
    found
}
