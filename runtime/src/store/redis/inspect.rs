//! What an operator reads: records found by `SCAN` over the store's prefix,
//! each read by the `read` script, filtered and paged here.
//!
//! A listing or a count reads every record under the prefix: fine for an
//! operator's look at a dedicated prefix, not for a hot path (the guard
//! never calls these).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{ErrorKind, ServerErrorKind, Value};

use super::Inner;
use super::call::is_broken_connection;
use super::connection::Connection;
use super::error::{corrupt, redis_error};
use super::scripts::{MAX_RELOADS, SCRIPTS};
use super::steps::parse;
use crate::fingerprint::Fingerprint;
use crate::key::Key;
use crate::store::durable::reconnect::Reconnecting;
use crate::store::record::RecordValue;
use crate::tool::ToolId;
use crate::{
    store::record::RecordState,
    store::records::{Record, RecordCount, RecordPage, RecordQuery},
    store::{StoreError, StoreResult},
};

/// How many keys one `SCAN` asks for, and one pipeline of reads carries.
const BATCH: usize = 500;

impl Inner {
    pub(super) async fn inspect(&self, key: &Key) -> StoreResult<Option<Record>> {
        let record_key = self.record_key(&key.digest());
        let Some((record, _)) = self.read(&[record_key]).await?.pop().flatten() else {
            return Ok(None);
        };
        if record.key != *key {
            return Err(StoreError::Corrupt(format!(
                "key `{key}` shares its digest with the stored key `{}`",
                record.key
            )));
        }
        Ok(Some(record))
    }

    pub(super) async fn list(&self, query: &RecordQuery) -> StoreResult<RecordPage> {
        let (records, now) = self.read_all().await?;
        let mut records: Vec<Record> = records
            .into_iter()
            .filter(|r| query.matches(r, now))
            .filter(|r| {
                query
                    .after
                    .as_deref()
                    .is_none_or(|after| r.key.as_str() > after)
            })
            .collect();
        records.sort_by(|a, b| a.key.as_str().cmp(b.key.as_str()));
        let page = query.page_size();
        records.truncate(page + 1);
        Ok(RecordPage::from_overfetch(records, page))
    }

    pub(super) async fn count(&self) -> StoreResult<Vec<RecordCount>> {
        let (records, _) = self.read_all().await?;
        let mut counts: BTreeMap<(String, RecordState), u64> = BTreeMap::new();
        for record in records {
            *counts
                .entry((record.tool.as_str().to_owned(), record.state))
                .or_default() += 1;
        }
        Ok(counts
            .into_iter()
            .map(|((tool, state), n)| RecordCount::new(ToolId::owned(tool), state, n))
            .collect())
    }

    /// Every record under the prefix, and the server's time as it read them.
    /// A connection that broke (a restart, a failover) is made again, and
    /// the walk starts over, within the store's reconnection budget.
    async fn read_all(&self) -> StoreResult<(Vec<Record>, SystemTime)> {
        let pattern = format!("{}{{*}}", glob_escape(&self.prefix));
        let mut reconnecting = Reconnecting::new(self.reconnect_within);
        let mut keys = loop {
            let mut connection = self.connection();
            let generation = connection.generation();
            match self.scan(&mut connection, &pattern).await {
                Ok(keys) => break keys,
                Err(err) if is_broken_connection(&err) && reconnecting.again().await => {
                    connection.renew(generation).await;
                }
                Err(err) => return Err(redis_error("scan")(err)),
            }
        };
        // SCAN may return a key twice.
        keys.sort();
        keys.dedup();
        let mut records = Vec::with_capacity(keys.len());
        let mut now = SystemTime::now();
        for chunk in keys.chunks(BATCH) {
            for (record, at) in self.read(chunk).await?.into_iter().flatten() {
                records.push(record);
                now = at;
            }
        }
        Ok((records, now))
    }

    /// The keys matching `pattern` on every primary.
    async fn scan(
        &self,
        connection: &mut Connection,
        pattern: &str,
    ) -> redis::RedisResult<Vec<String>> {
        let nodes = connection.primaries().await?;
        let mut keys = Vec::new();
        // On a Cluster each primary holds its own slots: walk them all.
        for node in &nodes {
            let mut cursor = 0u64;
            loop {
                self.round_trips
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(BATCH);
                let reply = connection.query_on(scan, node).await?;
                let (next, batch): (u64, Vec<String>) = redis::from_redis_value(reply)?;
                keys.extend(batch);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(keys)
    }

    /// Reads records by their Redis keys, in one round trip (on a Cluster,
    /// one per key, all sent at once: a pipeline stays within one slot);
    /// `None` for a key that is gone.
    async fn read(&self, keys: &[String]) -> StoreResult<Vec<Option<(Record, SystemTime)>>> {
        let connection = self.connection();
        let replies = if connection.is_cluster() {
            let reads = keys
                .iter()
                .map(|key| self.read_in_one_trip(connection.clone(), std::slice::from_ref(key)));
            futures_util::future::try_join_all(reads)
                .await?
                .into_iter()
                .flatten()
                .collect()
        } else {
            self.read_in_one_trip(connection, keys).await?
        };
        replies.into_iter().map(decode).collect()
    }

    /// Reads the records at `keys` (all on one node) in one pipeline.
    async fn read_in_one_trip(
        &self,
        mut connection: Connection,
        keys: &[String],
    ) -> StoreResult<Vec<Value>> {
        let script = &SCRIPTS.read;
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("EVALSHA").arg(&script.hash).arg(1).arg(key);
        }
        let mut reloads = 0;
        let mut reconnecting = Reconnecting::new(self.reconnect_within);
        loop {
            self.round_trips
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let generation = connection.generation();
            match pipe.query_async(&mut connection).await {
                Ok(replies) => return Ok(replies),
                // The reads are safe to repeat on a connection made again.
                Err(err) if is_broken_connection(&err) && reconnecting.again().await => {
                    connection.renew(generation).await;
                }
                Err(err)
                    if reloads < MAX_RELOADS
                        && err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
                {
                    let Some(key) = keys.first() else {
                        return Ok(Vec::new());
                    };
                    self.reload(&mut connection, script, key).await?;
                    reloads += 1;
                }
                Err(err) => return Err(redis_error(script.name)(err)),
            }
        }
    }
}

/// A `read` reply: the server's time, the time to live, then the fields.
fn decode(reply: Value) -> StoreResult<Option<(Record, SystemTime)>> {
    let fields: Vec<Option<String>> =
        redis::from_redis_value(reply).map_err(|e| corrupt("read", format_args!("{e}")))?;
    let field = |at: usize| fields.get(at).cloned().flatten();
    let now = at(parse(field(0), "read", "time")?);
    let Some(key) = field(2) else {
        return Ok(None);
    };
    let tool = field(3).ok_or_else(|| corrupt("read", "a record without a tool"))?;
    let state = match field(4).as_deref().and_then(RecordState::parse) {
        Some(state) => state,
        None => {
            let other = field(4);
            return Err(corrupt("read", format_args!("a record in state {other:?}")));
        }
    };
    let held = state == RecordState::Held;
    let owner = match field(5).filter(|_| held) {
        Some(hex) => Some(
            u128::from_str_radix(&hex, 16)
                .map_err(|_| corrupt("read", format_args!("an owner token `{hex}`")))?,
        ),
        None => None,
    };
    let ttl: i64 = field(1)
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| corrupt("read", "no time to live"))?;
    let record = Record {
        key: Key::from_recorded(&key),
        tool: ToolId::owned(tool),
        state,
        fingerprint: fingerprint(field(12))?,
        fence: parse(field(6), "read", "fence")?,
        taken_over: field(7).as_deref() == Some("1"),
        owner,
        lease_until: match field(8).filter(|_| held) {
            Some(ms) => Some(at(parse(Some(ms), "read", "lease")?)),
            None => None,
        },
        result: field(10).map(RecordValue::from_json),
        completed_at: match field(11) {
            Some(ms) => Some(at(parse(Some(ms), "read", "completed_at")?)),
            None => None,
        },
        expires_at: u64::try_from(ttl)
            .ok()
            .map(|ms| now + Duration::from_millis(ms)),
    };
    Ok(Some((record, now)))
}

/// A fingerprint as the claim script wrote it, in hex.
fn fingerprint(hex: Option<String>) -> StoreResult<Fingerprint> {
    let hex = hex.ok_or_else(|| corrupt("read", "a record without a fingerprint"))?;
    let mut bytes = [0u8; 16];
    hex::decode_to_slice(&hex, &mut bytes)
        .map_err(|_| corrupt("read", format_args!("a fingerprint `{hex}`")))?;
    Ok(Fingerprint(bytes))
}

/// A time the scripts wrote, in milliseconds since the Unix epoch.
fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// `text` matched literally in a `SCAN` pattern.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::glob_escape;

    #[test]
    fn a_prefix_is_matched_literally() {
        assert_eq!(glob_escape("app:*[1]?\\"), "app:\\*\\[1\\]\\?\\\\");
        assert_eq!(glob_escape("idempotent:"), "idempotent:");
    }
}
