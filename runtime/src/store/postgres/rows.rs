//! Reading Postgres's rows: what a claim statement returned, and a record
//! as an operator reads it.

use std::time::SystemTime;

use super::error::corrupt;
use crate::key::Key;
use crate::store::durable::encode::{self, fence_from, owner_from};
use crate::store::durable::{Found, Row, RowState};
use crate::store::record::RecordValue;
use crate::tool::ToolId;
use crate::{store::StoreResult, store::record::RecordState, store::records::Record};

/// What a row of [`super::sql::CLAIM`] says: the caller's claim, someone
/// else's row, or `None` when the row changed since the statement's
/// snapshot (`stale`) and the claim must run again.
pub(super) fn read_claim(found: &tokio_postgres::Row) -> StoreResult<Option<Found>> {
    let fence = fence_from(found.try_get("fence").map_err(corrupt)?)?;
    if found.try_get::<_, bool>("mine").map_err(corrupt)? {
        return Ok(Some(Found::Mine {
            fence,
            taken_over: found.try_get("taken_over").map_err(corrupt)?,
        }));
    }
    if found.try_get::<_, bool>("stale").map_err(corrupt)? {
        return Ok(None);
    }
    let state: String = found.try_get("state").map_err(corrupt)?;
    let state = RowState::read(
        &state,
        || {
            let left: Option<i64> = found.try_get("lease_left_ms").map_err(corrupt)?;
            Ok((
                owner_from(found.try_get("owner").map_err(corrupt)?)?,
                fence,
                encode::from_millis(left.unwrap_or(0)),
            ))
        },
        || {
            Ok((
                found.try_get("result").map_err(corrupt)?,
                found
                    .try_get::<_, Option<SystemTime>>("completed_at")
                    .map_err(corrupt)?
                    .unwrap_or_else(SystemTime::now),
            ))
        },
    )?;
    Ok(Some(Found::Other(Row {
        key_text: found.try_get("key_text").map_err(corrupt)?,
        tool: found.try_get("tool").map_err(corrupt)?,
        fingerprint: found.try_get("fingerprint").map_err(corrupt)?,
        state,
    })))
}

/// Reads a row in the columns of [`super::sql::LIST`].
pub(super) fn read_record(found: &tokio_postgres::Row) -> StoreResult<Record> {
    let state: String = found.try_get("state").map_err(corrupt)?;
    let state = encode::record_state(&state)?;
    let owner = if state == RecordState::Held {
        Some(owner_from(found.try_get("owner").map_err(corrupt)?)?)
    } else {
        None
    };
    Ok(Record {
        key: Key::from_recorded(found.try_get("key_text").map_err(corrupt)?),
        tool: ToolId::owned(found.try_get::<_, String>("tool").map_err(corrupt)?),
        state,
        fingerprint: encode::fingerprint_from(found.try_get("fingerprint").map_err(corrupt)?)?,
        fence: fence_from(found.try_get("fence").map_err(corrupt)?)?,
        taken_over: found.try_get("taken_over").map_err(corrupt)?,
        owner,
        lease_until: found.try_get("lease_until").map_err(corrupt)?,
        result: found
            .try_get::<_, Option<String>>("result")
            .map_err(corrupt)?
            .map(RecordValue::from_json),
        completed_at: found.try_get("completed_at").map_err(corrupt)?,
        expires_at: Some(found.try_get("expires_at").map_err(corrupt)?),
    })
}
