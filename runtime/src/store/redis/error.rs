//! How the Redis store sorts its failures into [`StoreError`]s.

use std::fmt;
use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::store::StoreError;

/// A step that failed, and the client's or server's error as its source.
#[derive(Debug, thiserror::Error)]
#[error("the Redis `{step}` step failed")]
pub(super) struct StepFailed {
    step: &'static str,
    #[source]
    source: Cause,
}

/// The Redis error, printed as redis-rs prints it. redis-rs's message of an
/// I/O failure is the I/O error's own, which it also gives as its source:
/// that source is skipped here, so an error chain prints each cause once.
#[derive(Debug)]
struct Cause(RedisError);

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        let below = std::error::Error::source(&self.0)?;
        if self.0.to_string().contains(&below.to_string()) {
            below.source()
        } else {
            Some(below)
        }
    }
}

/// Fewer replicas acknowledged a write than
/// [`RedisStoreBuilder::wait_for_replicas`](super::RedisStoreBuilder::wait_for_replicas)
/// asks for: the primary has it, but a failover now could lose it.
#[derive(Debug, thiserror::Error)]
#[error(
    "the `{step}` write reached {acked} of the {asked} replicas asked for within {timeout:?}; \
     a failover could lose it, so it is not relied on"
)]
pub(super) struct NotReplicated {
    pub(super) step: &'static str,
    pub(super) asked: u32,
    pub(super) acked: i64,
    pub(super) timeout: Duration,
}

/// Sorts a Redis error: the server unreachable, busy, loading, read-only
/// (a replica after a failover) or the cluster in flux is
/// [`StoreError::Unavailable`], where a later retry may work; anything else
/// is [`StoreError::Backend`].
pub(super) fn redis_error(step: &'static str) -> impl Fn(RedisError) -> StoreError + Copy {
    move |source| {
        let unavailable = source.is_io_error()
            || source.is_timeout()
            || source.is_connection_dropped()
            || source.is_connection_refusal()
            || matches!(
                source.kind(),
                ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ReadOnly
                ) | ErrorKind::ClusterConnectionNotFound
            );
        let failed = Box::new(StepFailed {
            step,
            source: Cause(source),
        });
        if unavailable {
            StoreError::Unavailable(failed)
        } else {
            StoreError::Backend(failed)
        }
    }
}

/// A reply that does not read as the script writes it.
pub(super) fn corrupt(step: &'static str, what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("the Redis `{step}` step answered {what}"))
}
