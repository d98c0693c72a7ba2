//! The verdict on a row a claim found held or completed by someone else.
//!
//! The durable stores differ in how they reach the row; once a claim
//! statement has returned someone else's row, they judge it alike, here, so
//! the fingerprint and tool are checked the same way on every path.

use std::time::{Duration, SystemTime};

use crate::outcome::ConflictReason;
use crate::store::record::RecordState;
use crate::store::record::{Completion, RecordValue};
use crate::store::{ClaimAnswer, ClaimRequest, StoreError, StoreResult};

/// What a claim step found: its own claim, or someone else's row.
pub enum Found {
    /// The caller now holds the claim.
    Mine {
        /// The claim's fence.
        fence: u64,
        /// Whether it took over an expired claim.
        taken_over: bool,
    },
    /// Another caller's claim or record.
    Other(Row),
}

/// A row that a claim found held or completed by someone else.
pub struct Row {
    /// The full key text, checked against the request's key.
    pub key_text: String,
    /// The tool that claimed the key.
    pub tool: String,
    /// The arguments' fingerprint.
    pub fingerprint: Vec<u8>,
    /// Held or completed.
    pub state: RowState,
}

/// Whether a row is held or completed.
pub enum RowState {
    /// Another caller holds the claim.
    Held {
        /// Its owner.
        owner: u128,
        /// Its fence.
        fence: u64,
        /// How long until its lease runs out (zero if it has).
        lease_left: Duration,
    },
    /// The claim was completed: done, failed or unknown.
    Completed {
        /// Its state, never `Held`.
        state: RecordState,
        /// The recorded value, as JSON text.
        result: String,
        /// When it finished.
        completed_at: SystemTime,
    },
}

impl RowState {
    /// The state a row's columns spell: `held` with its holder, or a
    /// completed state with its record (a completed row carries a result).
    pub(crate) fn read(
        state: &str,
        held: impl FnOnce() -> StoreResult<(u128, u64, Duration)>,
        completed: impl FnOnce() -> StoreResult<(Option<String>, SystemTime)>,
    ) -> StoreResult<RowState> {
        match RecordState::parse(state) {
            Some(RecordState::Held) => {
                let (owner, fence, lease_left) = held()?;
                Ok(RowState::Held {
                    owner,
                    fence,
                    lease_left,
                })
            }
            Some(state) => {
                let (result, completed_at) = completed()?;
                Ok(RowState::Completed {
                    state,
                    result: result.ok_or_else(|| {
                        StoreError::Corrupt(format!("a {state} row without a result"))
                    })?,
                    completed_at,
                })
            }
            None => Err(StoreError::Corrupt(format!("a row in state `{state}`"))),
        }
    }
}

/// What a row found by a claim means for the caller.
pub(crate) enum Verdict {
    /// An answer the caller gets as it is: a replay or a conflict.
    Answer(ClaimAnswer),
    /// Another caller holds the claim for the same request: wait on it.
    InFlight {
        /// The holder.
        owner: u128,
        /// The holder's fence.
        fence: u64,
        /// How long until its lease runs out.
        lease_left: Duration,
    },
}

/// Judges a row held or completed by someone else, as the memory store does:
/// another tool is a conflict without a result; other arguments are a
/// conflict (with the first result, once it finished well); the same request
/// is a replay or waits.
pub(crate) fn judge(req: &ClaimRequest<'_>, row: Row) -> StoreResult<Verdict> {
    if row.key_text != req.key.as_str() {
        return Err(StoreError::Corrupt(format!(
            "key `{}` shares its digest with the stored key `{}`",
            req.key, row.key_text
        )));
    }
    let same_tool = row.tool == req.tool.as_str();
    let same_args = row.fingerprint.as_slice() == req.fingerprint.as_bytes();
    let conflict = |first| {
        Verdict::Answer(ClaimAnswer::Conflict {
            reason: ConflictReason::Arguments,
            first,
        })
    };
    match row.state {
        _ if !same_tool => Ok(Verdict::Answer(ClaimAnswer::Conflict {
            reason: ConflictReason::OtherTool,
            first: None,
        })),
        RowState::Held { .. } if !same_args => Ok(conflict(None)),
        RowState::Held {
            owner,
            fence,
            lease_left,
        } => Ok(Verdict::InFlight {
            owner,
            fence,
            lease_left,
        }),
        RowState::Completed {
            state,
            result,
            completed_at,
        } => {
            let value = RecordValue::from_json(result);
            if same_args {
                Ok(Verdict::Answer(ClaimAnswer::Completed(Completion {
                    state,
                    value,
                    completed_at,
                })))
            } else {
                Ok(conflict((state == RecordState::Done).then_some(value)))
            }
        }
    }
}
