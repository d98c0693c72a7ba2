//! One script call on its own: a round trip, with `WAIT` when replicas are
//! asked for, loading the script again if the server forgot it, and going
//! again as the connection comes back.

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::{ErrorKind, ServerErrorKind, Value};

use super::Inner;
use super::error::{NotReplicated, corrupt, redis_error};
use super::scripts::{MAX_RELOADS, Script};
use crate::store::StoreResult;
use crate::store::durable::encode::millis;
use crate::store::durable::reconnect::Reconnecting;

/// Whether an error says the connection broke rather than the command
/// failed: the server restarted, failed over or dropped the connection, is
/// still loading its data after a restart, or the Cluster is between
/// primaries.
pub(super) fn is_broken_connection(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || matches!(
            err.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
            ) | ErrorKind::ClusterConnectionNotFound
        )
}

/// A script's reply, and whether its `WAIT` fell short.
pub(super) struct Reply {
    pub(super) value: Value,
    pub(super) short: Option<NotReplicated>,
}

impl Inner {
    /// Calls `script` on the record at `key`, with `WAIT` in the same round
    /// trip if `replicate` and the store asks for it. Loads the script
    /// again if the server forgot it.
    pub(super) async fn call_alone(
        &self,
        script: &Script,
        key: &str,
        args: &[&str],
        replicate: bool,
    ) -> StoreResult<Reply> {
        let mut connection = self.connection();
        let wait = self.replicas.filter(|_| replicate);
        let pipeline = |by_source: bool| {
            let mut pipe = redis::pipe();
            if by_source {
                pipe.cmd("EVAL").arg(script.source);
            } else {
                pipe.cmd("EVALSHA").arg(&script.hash);
            }
            pipe.arg(1).arg(key).arg(args);
            if let Some((replicas, timeout)) = wait {
                pipe.cmd("WAIT").arg(replicas).arg(millis(timeout));
            }
            pipe
        };
        let mut pipe = pipeline(false);
        let mut reloads = 0;
        let mut reconnecting = Reconnecting::new(self.reconnect_within);
        let mut values: Vec<Value> = loop {
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            let generation = connection.generation();
            match pipe.query_async(&mut connection).await {
                Ok(values) => break values,
                Err(err)
                    if reloads < MAX_RELOADS
                        && err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
                {
                    if connection.is_cluster() {
                        // The node that owns the key now (a replica a
                        // failover promoted) never loaded the script, and
                        // the Cluster may still be telling the client so:
                        // send the script itself, routed and redirected as
                        // the step is, which also caches it there.
                        self.script_loads.fetch_add(1, Ordering::Relaxed);
                        pipe = pipeline(true);
                    } else {
                        self.reload(&mut connection, script, key).await?;
                    }
                    reloads += 1;
                }
                // The connection broke (a restart, a failover): the manager
                // reconnects, and the step, safe to repeat, goes again.
                Err(err) if is_broken_connection(&err) && reconnecting.again().await => {
                    connection.renew(generation).await;
                }
                Err(err) => return Err(redis_error(script.name)(err)),
            }
        };
        let short = match (wait, values.get(1)) {
            (Some(asked), Some(acked)) => short(script.name, asked, acked)?,
            _ => None,
        };
        let value = values
            .drain(..)
            .next()
            .ok_or_else(|| corrupt(script.name, "nothing"))?;
        Ok(Reply { value, short })
    }
}

/// Whether a `WAIT` that asked for `asked` replicas within `timeout` fell
/// short, from its reply `acked`.
pub(super) fn short(
    step: &'static str,
    (asked, timeout): (u32, Duration),
    acked: &Value,
) -> StoreResult<Option<NotReplicated>> {
    let acked: i64 = redis::from_redis_value_ref(acked)
        .map_err(|e| corrupt(step, format_args!("a `WAIT` of {e}")))?;
    Ok((acked < i64::from(asked)).then_some(NotReplicated {
        step,
        asked,
        acked,
        timeout,
    }))
}
