//! A background task that purges expired records on an interval.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use super::{Records, StoreResult};

/// Why a [`Purger`] could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PurgerError {
    /// The interval was zero.
    #[error("a purger's interval must be longer than zero; once an hour suits most stores")]
    ZeroInterval,
    /// No Tokio runtime was running on this thread.
    #[error(
        "a purger runs on a Tokio runtime and none is running here: start it from async code \
         (inside `#[tokio::main]`), or after entering a runtime with `Handle::enter`"
    )]
    NoRuntime,
}

/// Purges a store's expired records on an interval, on a task of its own,
/// until stopped or dropped.
///
/// The first purge runs at once, then one every interval; a purge that
/// takes longer than the interval delays the next rather than piling up.
/// A purge that fails is reported as a `warn` event (target
/// `idempotent_tools`) with the error and its causes, and the next purge
/// runs at its turn; one that succeeds is a `debug` event with how many
/// records it removed.
///
/// A purge deletes in batches (the store's `purge_batch`, 1,000 rows by
/// default), each its own statement, so calls get in between; it is the
/// same [`Records::purge_expired`] the command-line tool's `purge` runs.
/// Where calls must not feel a large purge at all (SQLite, whose writers
/// take turns on one lock), [`Purger::start_paced`] waits a pause between
/// batches.
///
/// The durable stores (`SqliteStore`, `PostgresStore`) purge only when
/// asked;
/// run one purger per store in each service that writes to it (several
/// purging one database at once is safe: each deletes in small batches and
/// never a held claim). The memory store sweeps itself and needs none.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use idempotent_tools::MemoryStore;
/// use idempotent_tools::records::Purger;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = Arc::new(MemoryStore::new()); // or a SqliteStore, a PostgresStore
/// let purger = Purger::start(store, Duration::from_secs(3600))?;
/// // ... serve ...
/// purger.stop().await;
/// # Ok(()) }
/// ```
pub struct Purger {
    /// Taken out by [`Purger::stop`].
    task: Option<JoinHandle<()>>,
    every: Duration,
    pause: Duration,
}

impl Purger {
    /// Starts purging `store` every `every` on the current Tokio runtime:
    /// any store that offers the operator's calls ([`Records`]), passed as
    /// an `Arc` of it.
    pub fn start(store: Arc<dyn Records>, every: Duration) -> Result<Purger, PurgerError> {
        Purger::start_paced(store, every, Duration::ZERO)
    }

    /// As [`Purger::start`], waiting `pause` after each full batch before
    /// the next ([`Records::purge_expired_batch`]), so a purge of many
    /// records takes longer and calls meet fewer batches in their way. A
    /// zero pause purges as [`Purger::start`] does.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// # use idempotent_tools::MemoryStore;
    /// # use idempotent_tools::records::Purger;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Arc::new(MemoryStore::new());
    /// let purger = Purger::start_paced(store, Duration::from_secs(3600), Duration::from_millis(20))?;
    /// assert_eq!(purger.pause(), Duration::from_millis(20));
    /// # purger.stop().await;
    /// # Ok(()) }
    /// ```
    pub fn start_paced(
        store: Arc<dyn Records>,
        every: Duration,
        pause: Duration,
    ) -> Result<Purger, PurgerError> {
        if every.is_zero() {
            return Err(PurgerError::ZeroInterval);
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| PurgerError::NoRuntime)?;
        let task = runtime.spawn(purge_every(store, every, pause));
        Ok(Purger {
            task: Some(task),
            every,
            pause,
        })
    }

    /// One purge as a purger with `pause` runs it, awaited here rather
    /// than on an interval: [`Records::purge_expired`] for a zero pause,
    /// else its batches one by one with the pause between them. Returns how
    /// many records were removed.
    ///
    /// # Errors
    ///
    /// As [`Records::purge_expired`]; batches already removed stay removed.
    pub async fn purge_now(store: &dyn Records, pause: Duration) -> StoreResult<u64> {
        purge_once(store, pause).await
    }

    /// The interval between purges.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// The pause between a purge's batches (zero unless started with
    /// [`Purger::start_paced`]).
    pub fn pause(&self) -> Duration {
        self.pause
    }

    /// Stops the purger and waits until it has: no purge starts after this
    /// returns. A purge running when it is called is cancelled at its next
    /// step; the rows it already deleted stay deleted.
    pub async fn stop(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            // The task ends at its next `.await`; its result is the abort.
            let _ = task.await;
        }
    }
}

impl Drop for Purger {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl fmt::Debug for Purger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Purger")
            .field("every", &self.every)
            .field("pause", &self.pause)
            .field(
                "running",
                &self.task.as_ref().is_some_and(|t| !t.is_finished()),
            )
            .finish()
    }
}

/// One purge: [`Records::purge_expired`], or with a pause its batches one
/// by one.
async fn purge_once(store: &dyn Records, pause: Duration) -> StoreResult<u64> {
    if pause.is_zero() {
        return store.purge_expired().await;
    }
    let mut total = 0;
    loop {
        let batch = store.purge_expired_batch().await?;
        total += batch.removed;
        if !batch.more {
            return Ok(total);
        }
        tokio::time::sleep(pause).await;
    }
}

async fn purge_every(store: Arc<dyn Records>, every: Duration, pause: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match purge_once(&*store, pause).await {
            Ok(purged) => tracing::debug!(
                target: crate::TARGET,
                store = store.kind(),
                purged,
                "purged expired records"
            ),
            Err(err) => tracing::warn!(
                target: crate::TARGET,
                store = store.kind(),
                error = &err as &(dyn std::error::Error + 'static),
                every = ?every,
                "purging expired records failed; trying again at the next interval"
            ),
        }
    }
}
