//! How the durable stores write time, owner tokens, fences and states into
//! columns, and read them back.

use std::time::Duration;
#[cfg(feature = "sqlite")]
use std::time::{SystemTime, UNIX_EPOCH};

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::fingerprint::Fingerprint;
use crate::{
    store::record::RecordState,
    store::{StoreError, StoreResult},
};

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

/// A duration a store read back in milliseconds; nothing if negative.
pub(crate) fn from_millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
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

/// A fingerprint read back.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn fingerprint_from(bytes: &[u8]) -> StoreResult<Fingerprint> {
    let bytes: [u8; 16] = bytes
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("a fingerprint of {} bytes", bytes.len())))?;
    Ok(Fingerprint(bytes))
}

/// A fence read back (SQL integers are signed).
pub(crate) fn fence_from(fence: i64) -> StoreResult<u64> {
    u64::try_from(fence).map_err(|_| StoreError::Corrupt(format!("a negative fence {fence}")))
}

/// A fence to store.
pub(crate) fn fence_to(fence: u64) -> i64 {
    i64::try_from(fence).unwrap_or(i64::MAX)
}

/// A record's state from a row's `state` column.
pub(crate) fn record_state(state: &str) -> StoreResult<RecordState> {
    RecordState::parse(state)
        .ok_or_else(|| StoreError::Corrupt(format!("a row in state `{state}`")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_round_up_and_clamp() {
        assert_eq!(millis(Duration::ZERO), 0);
        assert_eq!(millis(Duration::from_micros(500)), 1);
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), MAX_MILLIS as i64);
        assert_eq!(from_millis(-3), Duration::ZERO);
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
}
