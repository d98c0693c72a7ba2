//! Where a key's record stands: the four states, named alike everywhere.

use std::fmt;

/// Where a key's record stands. These four words name the states
/// everywhere: in types, the command-line tool's output, SQL, Redis, metrics
/// and traces.
///
/// | State | What happened | A call with the key |
/// |---|---|---|
/// | `held` | a caller claimed the key and is acting, or stopped and its lease has not run out | waits for it; once the lease runs out, one caller takes over ([`Takeover`](crate::call::Takeover)) |
/// | `done` | the action returned its result, which was recorded | gets the result again: a replay |
/// | `failed` | the action returned an error recorded as final (`record_errors`) | gets the error again |
/// | `unknown` | the action failed in a way that may have taken effect and nobody could tell whether it did, the provider contradicted the ask, a holder stopped mid-action and the takeover policy said not to run it again, or its result could not be kept | [`Error::UnknownOutcome`](crate::Error::UnknownOutcome), until an operator resolves the key ([`Records::resolve`](crate::records::Records::resolve)) |
///
/// Two events leave no state behind: a claim **released** after its action
/// failed (or panicked, or was dropped) leaves no record, so the next call
/// acts; a record **expired** past its retention is as good as gone, and a
/// purge deletes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum RecordState {
    /// A claim is held: its action is running, or its holder stopped and the
    /// lease has not yet let another caller take over.
    Held,
    /// The action returned its result, which every repeat replays.
    Done,
    /// The action's error was recorded as final, and every repeat gets it.
    Failed,
    /// The outcome is unknown: a holder stopped mid-action under
    /// [`Takeover::ReportUnknown`](crate::call::Takeover::ReportUnknown), or its
    /// result could not be kept. Every call gets
    /// [`Error::UnknownOutcome`](crate::Error::UnknownOutcome) until an
    /// operator resolves the key.
    Unknown,
}

impl RecordState {
    /// Every state, in the order listings use.
    pub const ALL: [RecordState; 4] = [
        RecordState::Held,
        RecordState::Done,
        RecordState::Failed,
        RecordState::Unknown,
    ];

    /// The state's name: `held`, `done`, `failed` or `unknown`, as stores
    /// write it.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordState::Held => "held",
            RecordState::Done => "done",
            RecordState::Failed => "failed",
            RecordState::Unknown => "unknown",
        }
    }

    /// Parses what [`RecordState::as_str`] writes.
    pub fn parse(text: &str) -> Option<RecordState> {
        RecordState::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl fmt::Display for RecordState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
