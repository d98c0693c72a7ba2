//! How a Postgres store's own connections are made: its pool (each
//! connection's `search_path` the store's schema, if one was set), the
//! listener's session, and their timeouts.

use std::time::Duration;

use deadpool_postgres::{Manager, Pool, Runtime};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Config, NoTls, Socket};

use super::LISTENER_NAME;
use super::listener::{SessionFn, listen};
use crate::store::{StoreError, StoreResult};

fn with_timeouts(mut config: Config) -> Config {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(5));
    }
    config
}

/// A pool of the store's own, each connection's `search_path` the schema if
/// one was set, and the config its listener connects with.
pub(super) fn own_pool(
    mut config: Config,
    schema: Option<&str>,
) -> StoreResult<(Pool, Option<Config>)> {
    if let Some(schema) = schema {
        // A plain identifier (checked): no quoting or escaping needed. A
        // later `-c` wins over one the URL gave.
        let options = match config.get_options() {
            Some(given) if !given.trim().is_empty() => {
                format!("{given} -c search_path={schema}")
            }
            _ => format!("-c search_path={schema}"),
        };
        config.options(&options);
    }
    let config = with_timeouts(config);
    let pool = Pool::builder(Manager::new(config.clone(), NoTls))
        .max_size(16)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(10)))
        .create_timeout(Some(Duration::from_secs(5)))
        .build()
        .map_err(|e| StoreError::Backend(Box::new(e)))?;
    Ok((pool, Some(config)))
}

/// A listening session on a connection made from `config` with `tls`.
pub(super) fn session<T>(config: Config, tls: T) -> SessionFn
where
    T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let mut config = with_timeouts(config);
    if config.get_application_name().is_none() {
        // So that a DBA can tell the listening connection apart.
        config.application_name(LISTENER_NAME);
    }
    Box::new(move |listener, stop| Box::pin(listen(listener, stop, config.clone(), tls.clone())))
}
