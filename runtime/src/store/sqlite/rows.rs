//! Reading SQLite's rows: the row a claim returned, and a record as an
//! operator reads it.

use crate::key::Key;
use crate::store::durable::encode::{self, fence_from, from_unix_millis, owner_from};
use crate::store::durable::{Found, Row, RowState};
use crate::store::record::RecordValue;
use crate::tool::ToolId;
use crate::{store::StoreResult, store::record::RecordState, store::records::Record};

/// What a claim statement returned, in the columns of [`super::sql::CLAIM`].
pub(super) struct Returned {
    key_text: String,
    tool: String,
    fingerprint: Vec<u8>,
    state: String,
    owner: Vec<u8>,
    fence: i64,
    taken_over: bool,
    lease_until: Option<i64>,
    result: Option<String>,
    completed_at: Option<i64>,
}

pub(super) fn read_returned(r: &rusqlite::Row<'_>) -> rusqlite::Result<Returned> {
    Ok(Returned {
        key_text: r.get(0)?,
        tool: r.get(1)?,
        fingerprint: r.get(2)?,
        state: r.get(3)?,
        owner: r.get(4)?,
        fence: r.get(5)?,
        taken_over: r.get::<_, i64>(6)? != 0,
        lease_until: r.get(7)?,
        result: r.get(8)?,
        completed_at: r.get(9)?,
    })
}

impl Returned {
    /// Whether the row is held by (or was completed by) `owner`, as stored.
    pub(super) fn owned_by(&self, owner: &[u8; 16]) -> bool {
        self.owner.as_slice() == owner.as_slice()
    }

    /// The row's fence, as stored.
    pub(super) fn fence_column(&self) -> i64 {
        self.fence
    }

    /// The claim is the caller's exactly when the row's owner is `owner`;
    /// `now` is the time the statement ran with.
    pub(super) fn found(self, owner: u128, now: i64) -> StoreResult<Found> {
        let holder = owner_from(&self.owner)?;
        let fence = fence_from(self.fence)?;
        if holder == owner {
            return Ok(Found::Mine {
                fence,
                taken_over: self.taken_over,
            });
        }
        let (result, completed_at) = (self.result, self.completed_at);
        let lease_until = self.lease_until;
        let state = RowState::read(
            &self.state,
            || {
                let left = lease_until.unwrap_or(now).saturating_sub(now);
                Ok((holder, fence, encode::from_millis(left)))
            },
            || Ok((result, from_unix_millis(completed_at.unwrap_or(now)))),
        )?;
        Ok(Found::Other(Row {
            key_text: self.key_text,
            tool: self.tool,
            fingerprint: self.fingerprint,
            state,
        }))
    }
}

/// A record as SQLite returns it, in the columns of [`super::sql::LIST`].
pub(super) struct RawRecord {
    key_text: String,
    tool: String,
    state: String,
    owner: Vec<u8>,
    fence: i64,
    taken_over: bool,
    lease_until: Option<i64>,
    result: Option<String>,
    completed_at: Option<i64>,
    expires_at: i64,
    fingerprint: Vec<u8>,
}

pub(super) fn read_record(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRecord> {
    Ok(RawRecord {
        key_text: r.get(0)?,
        tool: r.get(1)?,
        state: r.get(2)?,
        owner: r.get(3)?,
        fence: r.get(4)?,
        taken_over: r.get::<_, i64>(5)? != 0,
        lease_until: r.get(6)?,
        result: r.get(7)?,
        completed_at: r.get(8)?,
        expires_at: r.get(9)?,
        fingerprint: r.get(10)?,
    })
}

impl RawRecord {
    pub(super) fn into_record(self) -> StoreResult<Record> {
        let state = encode::record_state(&self.state)?;
        let held = state == RecordState::Held;
        Ok(Record {
            key: Key::from_recorded(&self.key_text),
            tool: ToolId::owned(self.tool),
            state,
            fingerprint: encode::fingerprint_from(&self.fingerprint)?,
            fence: fence_from(self.fence)?,
            taken_over: self.taken_over,
            owner: if held {
                Some(owner_from(&self.owner)?)
            } else {
                None
            },
            lease_until: self.lease_until.map(from_unix_millis),
            result: self.result.map(RecordValue::from_json),
            completed_at: self.completed_at.map(from_unix_millis),
            expires_at: Some(from_unix_millis(self.expires_at)),
        })
    }
}
