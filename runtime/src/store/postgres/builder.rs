//! Setting a Postgres store up: where its connections come from, whether
//! and how it listens for completions, and its settings.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Config, NoTls, Socket};

use super::Inner;
use super::batch::Batches;
use super::connect::{own_pool, session};
use super::error::pool_error;
use super::listener::{Listener, SessionFn};
use super::schema::check_schema_name;
use super::{DEFAULT_COALESCE_BATCH, DEFAULT_PURGE_BATCH, PostgresStore};
use crate::store::durable::coalesce::Limits;
use crate::store::durable::reconnect::DEFAULT_RECONNECT_WITHIN;
use crate::store::{StoreError, StoreResult};

/// How a [`PostgresStore`] is set up; every setting has a default. Start
/// from a URL ([`PostgresStore::builder`]), a tokio-postgres `Config`
/// ([`PostgresStoreBuilder::from_config`]) or the application's own pool
/// ([`PostgresStoreBuilder::from_pool`]); finish with
/// [`connect`](PostgresStoreBuilder::connect) or
/// [`connect_lazy`](PostgresStoreBuilder::connect_lazy).
///
/// A store from a URL or a `Config` has its own pool of up to 16
/// connections, without TLS, and one more connection that listens for
/// completions. A store on the application's pool listens only when told
/// how to connect ([`listen_with`](PostgresStoreBuilder::listen_with)): a
/// pool's connections cannot receive notifications. Without a listener, a
/// duplicate waiting on a claim held elsewhere polls (from 5 ms, doubling
/// up to 250 ms) instead of being woken; everything else is the same.
///
/// ```no_run
/// use idempotent_tools::store::postgres::{PostgresStoreBuilder, deadpool_postgres, tokio_postgres};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let url = "postgres://app@db.internal/app";
/// let config: tokio_postgres::Config = url.parse()?;
/// let manager = deadpool_postgres::Manager::new(config.clone(), tokio_postgres::NoTls);
/// let pool = deadpool_postgres::Pool::builder(manager).max_size(8).build()?;
/// let store = PostgresStoreBuilder::from_pool(pool)
///     .listen_with(config, tokio_postgres::NoTls)
///     .purge_batch(500)
///     .connect()
///     .await?;
/// store.migrate().await?;
/// assert!(store.listening().await);
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until `.connect()` or `.connect_lazy()`"]
pub struct PostgresStoreBuilder {
    source: Source,
    listen: Listen,
    purge_batch: usize,
    asynchronous_completions: bool,
    reconnect_within: Duration,
    coalesce: Option<Coalesce>,
    schema: Option<String>,
}

/// How claims and completions are coalesced.
#[derive(Debug, Clone, Copy)]
struct Coalesce {
    batch: usize,
    in_flight: Option<usize>,
}

/// Where the store's connections come from.
enum Source {
    Url(String),
    Config(Box<Config>),
    Pool(Pool),
}

/// Whether and how the store listens for completions.
enum Listen {
    /// On the store's own config, without TLS; none on a given pool.
    Own,
    /// Never: waiters poll.
    Off,
    /// On a connection made as the application said.
    With(SessionFn),
}

impl PostgresStoreBuilder {
    pub(super) fn from_url(url: &str) -> PostgresStoreBuilder {
        PostgresStoreBuilder::new(Source::Url(url.to_owned()))
    }

    /// A store with its own pool from a tokio-postgres `Config`, without
    /// TLS.
    pub fn from_config(config: Config) -> PostgresStoreBuilder {
        PostgresStoreBuilder::new(Source::Config(Box::new(config)))
    }

    /// A store on the application's own pool; it listens for completions
    /// only with [`listen_with`](PostgresStoreBuilder::listen_with).
    pub fn from_pool(pool: Pool) -> PostgresStoreBuilder {
        PostgresStoreBuilder::new(Source::Pool(pool))
    }

    fn new(source: Source) -> PostgresStoreBuilder {
        PostgresStoreBuilder {
            source,
            listen: Listen::Own,
            purge_batch: DEFAULT_PURGE_BATCH,
            asynchronous_completions: false,
            reconnect_within: DEFAULT_RECONNECT_WITHIN,
            coalesce: Some(Coalesce {
                batch: DEFAULT_COALESCE_BATCH,
                in_flight: None,
            }),
            schema: None,
        }
    }

    /// Keeps the store's tables in a schema of their own, such as
    /// `shop_idempotent`, apart from the application's tables in the same
    /// database. Every connection of the store's pool then has that schema,
    /// and only it, as its `search_path` (this overrides a `search_path` in
    /// the URL's `options`); [`migrate`](PostgresStore::migrate) creates the
    /// schema if it is missing. Two stores in two schemas of one database
    /// never see each other's records.
    ///
    /// The name must be a plain identifier: a lowercase ASCII letter or `_`,
    /// then lowercase letters, digits or `_`, at most 63 bytes, not
    /// beginning with `pg_`. Anything else fails the build with
    /// [`StoreError::BadSetting`]. A store on the application's pool
    /// ([`from_pool`](PostgresStoreBuilder::from_pool)) cannot set its
    /// connections' `search_path`, and refuses this setting too: give the
    /// pool's `Config` the options `-c search_path=NAME` instead.
    ///
    /// Without it, the tables are where the connection's `search_path`
    /// finds them, `public` by default, as before this setting existed: an
    /// existing store keeps working unchanged. To move one into a schema,
    /// stop its writers, then, as its owner:
    ///
    /// ```sql
    /// CREATE SCHEMA shop_idempotent;
    /// ALTER TABLE public.idempotent_claims SET SCHEMA shop_idempotent;
    /// ALTER TABLE public.idempotent_schema SET SCHEMA shop_idempotent;
    /// ```
    ///
    /// and start them again built with `.schema("shop_idempotent")` (the
    /// indexes move with their tables). Completions are notified on one
    /// channel per database ([`NOTIFY_CHANNEL`](super::NOTIFY_CHANNEL)), so
    /// a waiter may be woken by another schema's completion of a key with
    /// the same digest: it looks at its own record again and waits on.
    ///
    /// ```no_run
    /// # use idempotent_tools::PostgresStore;
    /// # async fn demo() -> Result<(), idempotent_tools::store::StoreError> {
    /// let store = PostgresStore::builder("postgres://app@db.internal/app")
    ///     .schema("shop_idempotent")
    ///     .connect()
    ///     .await?;
    /// store.migrate().await?; // creates the schema and its tables
    /// # Ok(()) }
    /// ```
    pub fn schema(mut self, name: impl Into<String>) -> PostgresStoreBuilder {
        self.schema = Some(name.into());
        self
    }

    /// Wakes waiters through `LISTEN` on one extra connection made from
    /// `config` with `tls`, which must reach the same database as the pool:
    /// for TLS, or for a store on the application's pool.
    pub fn listen_with<T>(mut self, config: Config, tls: T) -> PostgresStoreBuilder
    where
        T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        self.listen = Listen::With(session(config, tls));
        self
    }

    /// Never listens: a waiter on a claim held elsewhere polls. For tools
    /// that never wait on a claim, and keep one connection fewer.
    pub fn without_listener(mut self) -> PostgresStoreBuilder {
        self.listen = Listen::Off;
        self
    }

    /// How many rows one purge statement deletes at most (default
    /// [`DEFAULT_PURGE_BATCH`]), so a large purge never holds many row locks
    /// for long.
    pub fn purge_batch(mut self, rows: usize) -> PostgresStoreBuilder {
        self.purge_batch = rows.max(1);
        self
    }

    /// Commits completions without waiting for the server to flush them to
    /// disk (`synchronous_commit = off` for that one transaction; claims,
    /// releases and renewals stay synchronous). Off by default.
    ///
    /// A completion then costs about what a claim costs, so a fresh call
    /// commits at nearly one insert's rate instead of two. The trade-off: if
    /// the database server crashes (not merely the application) within a
    /// fraction of a second of a completion, that completion may be lost,
    /// while the action's claim stays. The key then reads as a claim whose
    /// holder vanished after acting, the same case as a holder that crashed
    /// between its action and its completion: once the lease runs out, the
    /// next caller takes it over and the [`Takeover`](crate::call::Takeover)
    /// policy decides whether the action runs again or the outcome is
    /// reported unknown. The result itself is never lost to a caller that
    /// saw it: the committing call returned it.
    ///
    /// ```no_run
    /// # use idempotent_tools::PostgresStore;
    /// # async fn demo() -> Result<(), idempotent_tools::store::StoreError> {
    /// let store = PostgresStore::builder("postgres://app@db.internal/app")
    ///     .asynchronous_completions(true)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn asynchronous_completions(mut self, on: bool) -> PostgresStoreBuilder {
        self.asynchronous_completions = on;
        self
    }

    /// How long a step keeps trying when its connection breaks (the server
    /// restarted or shut down, an administrator ended the session, the
    /// network dropped it) before it reports the store
    /// [unavailable](StoreError::Unavailable); default
    /// [`DEFAULT_RECONNECT_WITHIN`](crate::store::DEFAULT_RECONNECT_WITHIN).
    /// Each try takes a connection from the pool anew. Every step is safe to
    /// repeat: a claim whose reply was lost finds the claim its own by its
    /// holder token, and a completion, release or renewal is fenced.
    pub fn reconnect_within(mut self, budget: Duration) -> PostgresStoreBuilder {
        self.reconnect_within = budget;
        self
    }

    /// Whether claims and completions are coalesced (on by default).
    ///
    /// On, a claim (or completion) that finds no other batch of claims (or
    /// completions) on the wire goes at once, alone, with the single-key
    /// statement: no added delay. Under a light load it also goes at once
    /// beside a few others (see
    /// [`coalesce_in_flight`](PostgresStoreBuilder::coalesce_in_flight)).
    /// Otherwise it waits, and those waiting go together in one statement
    /// over arrays as soon as a batch comes back: one round trip and one
    /// commit for up to [`coalesce_batch`](PostgresStoreBuilder::coalesce_batch)
    /// of them instead of one each. A replay is a claim that finds the
    /// record, so replays' reads are coalesced with the claims.
    ///
    /// Each caller gets its own answer (its claim and fence, the record it
    /// replays, a conflict, a claim in flight, a lost lease). Two steps on
    /// one key never share a batch. If a batched statement fails, its
    /// members run again one by one, so one caller's input the server
    /// refuses fails that caller only. A caller dropped while it waits is
    /// left out; a claim made in a batch for a caller that has gone is
    /// released at once. Releases and renewals are not coalesced.
    ///
    /// [`PostgresStore::statements`] counts a batch as one statement. Off,
    /// every step is its own statement, as measured in BENCHMARKS.md.
    pub fn coalesce(mut self, on: bool) -> PostgresStoreBuilder {
        self.coalesce = on.then_some(Coalesce {
            batch: DEFAULT_COALESCE_BATCH,
            in_flight: None,
        });
        self
    }

    /// The most claims (or completions) in one coalesced statement
    /// (default [`DEFAULT_COALESCE_BATCH`]); turns coalescing on.
    pub fn coalesce_batch(mut self, steps: usize) -> PostgresStoreBuilder {
        let in_flight = self.coalesce.and_then(|c| c.in_flight);
        self.coalesce = Some(Coalesce {
            batch: steps.max(1),
            in_flight,
        });
        self
    }

    /// How many batches of claims (and, apart, of completions) may be on the
    /// wire at once (default: a quarter of the pool's size, 4 of the own
    /// pool's 16, at least 1); turns coalescing on. Beyond the first, a
    /// batch goes only while those on the wire carry fewer steps than this
    /// between them: a light load goes at once, side by side, and a heavy
    /// one waits for the batch ahead, in fewer and larger batches, with
    /// fewer commits (BENCHMARKS.md section 4 measures it). 1 sends one
    /// batch at a time, whatever the load.
    pub fn coalesce_in_flight(mut self, batches: usize) -> PostgresStoreBuilder {
        let batch = self.coalesce.map_or(DEFAULT_COALESCE_BATCH, |c| c.batch);
        self.coalesce = Some(Coalesce {
            batch,
            in_flight: Some(batches.max(1)),
        });
        self
    }

    /// Builds the store and checks that the server answers, and starts
    /// listening for completions.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] if the server cannot be reached,
    /// [`StoreError::Backend`] if the URL does not parse or the server
    /// refuses the connection, and [`StoreError::BadSetting`] for a
    /// [`schema`](PostgresStoreBuilder::schema) it refuses.
    pub async fn connect(self) -> StoreResult<PostgresStore> {
        let store = self.connect_lazy()?;
        let client = store.inner.pool.get().await.map_err(pool_error)?;
        drop(client);
        if let Some(listener) = &store.inner.listener {
            listener.ensure();
        }
        Ok(store)
    }

    /// Builds the store without connecting: nothing is checked until a
    /// call claims a key.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the URL does not parse or the pool cannot
    /// be built, and [`StoreError::BadSetting`] for a
    /// [`schema`](PostgresStoreBuilder::schema) it refuses.
    pub fn connect_lazy(self) -> StoreResult<PostgresStore> {
        if let Some(name) = &self.schema {
            check_schema_name(name)?;
        }
        let schema = self.schema.as_deref();
        let (pool, config) = match self.source {
            Source::Url(url) => {
                let config: Config = url
                    .parse()
                    .map_err(|e: tokio_postgres::Error| StoreError::Backend(Box::new(e)))?;
                own_pool(config, schema)?
            }
            Source::Config(config) => own_pool(*config, schema)?,
            Source::Pool(_) if schema.is_some() => {
                return Err(StoreError::BadSetting {
                    setting: "schema",
                    problem: "a store on the application's pool cannot set its connections' \
                              search_path; give the pool's Config the options \
                              `-c search_path=NAME` instead"
                        .into(),
                });
            }
            Source::Pool(pool) => (pool, None),
        };
        let session = match self.listen {
            Listen::Own => config.map(|config| session(config, NoTls)),
            Listen::Off => None,
            Listen::With(session) => Some(session),
        };
        let batches = self.coalesce.map(|c| {
            Batches::new(Limits {
                batch: c.batch,
                in_flight: c
                    .in_flight
                    .unwrap_or_else(|| (pool.status().max_size / 4).max(1)),
            })
        });
        let listener = session.map(Listener::new);
        Ok(PostgresStore {
            inner: Arc::new_cyclic(|me| Inner {
                pool,
                listener,
                statements: AtomicU64::new(0),
                purge_batch: self.purge_batch,
                asynchronous_completions: self.asynchronous_completions,
                reconnect_within: self.reconnect_within,
                schema: self.schema,
                batches,
                me: me.clone(),
            }),
        })
    }
}

impl fmt::Debug for PostgresStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Url(_) => "url",
            Source::Config(_) => "config",
            Source::Pool(_) => "pool",
        };
        let listen = match &self.listen {
            Listen::Own => "own",
            Listen::Off => "off",
            Listen::With(_) => "with",
        };
        f.debug_struct("PostgresStoreBuilder")
            .field("source", &source)
            .field("listen", &listen)
            .field("purge_batch", &self.purge_batch)
            .field("asynchronous_completions", &self.asynchronous_completions)
            .field("coalesce", &self.coalesce)
            .field("schema", &self.schema)
            .finish()
    }
}
