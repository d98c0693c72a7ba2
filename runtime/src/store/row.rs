//! A claim row as the durable stores keep it, and what it means for a caller.
//!
//! The SQLite and Postgres stores differ in how they reach the row; once a
//! claim statement has returned someone else's row, they judge it alike,
//! here, so the fingerprint and tool are checked the same way on every path.

#[cfg(feature = "sqlite")]
use std::time::UNIX_EPOCH;
use std::time::{Duration, SystemTime};

use super::{ClaimAnswer, ClaimRequest, RecordState, StoreError, StoreResult};
use crate::outcome::ConflictReason;
use crate::record::{Ending, Finished, Recorded};

/// The longest duration a store writes: about a century. Longer leases or
/// retentions (such as `Duration::MAX`, meaning "forever") are clamped, so
/// that time arithmetic in SQL never overflows.
const MAX_MILLIS: u128 = 100 * 365 * 24 * 60 * 60 * 1000;

/// Whole milliseconds, rounded up, so a lease of 0.5 ms is 1 ms and not
/// nothing; clamped to [`MAX_MILLIS`].
pub(crate) fn millis(d: Duration) -> i64 {
    let ms = d.as_nanos().div_ceil(1_000_000).min(MAX_MILLIS);
    // MAX_MILLIS fits an i64 many times over.
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// Milliseconds since the Unix epoch (negative before it).
#[cfg(feature = "sqlite")]
pub(crate) fn unix_millis(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(after) => millis(after),
        Err(before) => -millis(before.duration()),
    }
}

/// The time a store wrote with [`unix_millis`].
#[cfg(feature = "sqlite")]
pub(crate) fn from_unix_millis(ms: i64) -> SystemTime {
    let magnitude = Duration::from_millis(ms.unsigned_abs());
    if ms >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH - magnitude
    }
}

/// A fresh owner token: 128 random bits, so owners never repeat across
/// processes or hosts.
pub(crate) fn new_owner() -> StoreResult<u128> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| StoreError::Backend(Box::new(e)))?;
    Ok(u128::from_be_bytes(bytes))
}

/// An owner token as stored.
pub(crate) fn owner_bytes(owner: u128) -> [u8; 16] {
    owner.to_be_bytes()
}

/// An owner token read back.
pub(crate) fn owner_from(bytes: &[u8]) -> StoreResult<u128> {
    let bytes: [u8; 16] = bytes
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("an owner token of {} bytes", bytes.len())))?;
    Ok(u128::from_be_bytes(bytes))
}

/// A fence as stored (SQL integers are signed).
pub(crate) fn fence_from(fence: i64) -> StoreResult<u64> {
    u64::try_from(fence).map_err(|_| StoreError::Corrupt(format!("a negative fence {fence}")))
}

/// A fence to store.
pub(crate) fn fence_to(fence: u64) -> i64 {
    i64::try_from(fence).unwrap_or(i64::MAX)
}

/// A record's state from a row's `state` and `ending` columns.
pub(crate) fn record_state(state: &str, ending: Option<&str>) -> StoreResult<RecordState> {
    match (state, ending) {
        ("held", _) => Ok(RecordState::Held),
        ("done", Some(ending)) => Ending::parse(ending)
            .map(RecordState::of_ending)
            .ok_or_else(|| StoreError::Corrupt(format!("an unknown ending `{ending}`"))),
        ("done", None) => Err(StoreError::Corrupt(
            "a finished row without an ending".into(),
        )),
        (other, _) => Err(StoreError::Corrupt(format!("a row in state `{other}`"))),
    }
}

/// A row that a claim found held or finished by someone else.
pub(crate) struct Row {
    /// The full key text, checked against the request's key.
    pub key_text: String,
    /// The tool that claimed the key.
    pub tool: String,
    /// The arguments' fingerprint.
    pub fingerprint: Vec<u8>,
    /// Held or finished.
    pub state: RowState,
}

/// Whether a row is held or finished.
pub(crate) enum RowState {
    /// Another caller holds the claim.
    Held {
        /// Its owner.
        owner: u128,
        /// Its fence.
        fence: u64,
        /// How long until its lease runs out (zero if it has).
        lease_left: Duration,
    },
    /// The action finished.
    Done {
        /// How it ended, as [`Ending::as_str`] wrote it.
        ending: String,
        /// The recorded value, as JSON text.
        result: String,
        /// When it finished.
        finished_at: SystemTime,
    },
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

/// Judges a row held or finished by someone else, as the memory store does:
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
    match row.state {
        _ if !same_tool => Ok(Verdict::Answer(ClaimAnswer::Conflict {
            reason: ConflictReason::OtherTool,
            first: None,
        })),
        RowState::Held {
            owner,
            fence,
            lease_left,
        } => {
            if same_args {
                Ok(Verdict::InFlight {
                    owner,
                    fence,
                    lease_left,
                })
            } else {
                Ok(Verdict::Answer(ClaimAnswer::Conflict {
                    reason: ConflictReason::Arguments,
                    first: None,
                }))
            }
        }
        RowState::Done {
            ending,
            result,
            finished_at,
        } => {
            let ending = Ending::parse(&ending)
                .ok_or_else(|| StoreError::Corrupt(format!("an unknown ending `{ending}`")))?;
            let value = Recorded::from_json(result);
            if same_args {
                Ok(Verdict::Answer(ClaimAnswer::Completed(Finished {
                    ending,
                    value,
                    finished_at,
                })))
            } else {
                Ok(Verdict::Answer(ClaimAnswer::Conflict {
                    reason: ConflictReason::Arguments,
                    first: (ending == Ending::Ok).then_some(value),
                }))
            }
        }
    }
}

/// Backoff for stores that poll: doubles from `first` up to `max`, and
/// never sleeps past the moment a lease runs out.
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(first: Duration, max: Duration) -> Backoff {
        Backoff { next: first, max }
    }

    /// The next nap, cut short so the caller looks again just after
    /// `lease_left` has passed.
    pub(crate) fn nap(&mut self, lease_left: Duration) -> Duration {
        let nap = self.next.min(lease_left + LEASE_MARGIN);
        self.next = (self.next * 2).min(self.max);
        nap
    }
}

/// How long after a lease runs out a waiter looks again: enough for the
/// store's clock to agree that it has.
pub(crate) const LEASE_MARGIN: Duration = Duration::from_millis(5);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_round_up_and_clamp() {
        assert_eq!(millis(Duration::ZERO), 0);
        assert_eq!(millis(Duration::from_micros(500)), 1);
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), MAX_MILLIS as i64);
    }

    #[test]
    #[cfg(feature = "sqlite")]
    fn times_survive_a_round_trip_at_millisecond_precision() {
        let t = UNIX_EPOCH + Duration::from_millis(1_780_000_000_123);
        assert_eq!(from_unix_millis(unix_millis(t)), t);
        let before = UNIX_EPOCH - Duration::from_millis(5);
        assert_eq!(from_unix_millis(unix_millis(before)), before);
    }

    #[test]
    fn owner_tokens_survive_storage() {
        let owner = new_owner().expect("random");
        assert_eq!(owner_from(&owner_bytes(owner)).expect("16 bytes"), owner);
        assert!(owner_from(&[1, 2, 3]).is_err());
    }

    #[test]
    fn backoff_doubles_to_its_cap_and_stops_at_the_lease() {
        let mut b = Backoff::new(Duration::from_millis(2), Duration::from_millis(10));
        let long = Duration::from_secs(60);
        assert_eq!(b.nap(long), Duration::from_millis(2));
        assert_eq!(b.nap(long), Duration::from_millis(4));
        assert_eq!(b.nap(long), Duration::from_millis(8));
        assert_eq!(b.nap(long), Duration::from_millis(10));
        assert_eq!(b.nap(Duration::ZERO), LEASE_MARGIN);
    }
}
