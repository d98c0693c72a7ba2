//! The Postgres schema: its scripts, the version a database is at, and the
//! migration that brings it to this build's.

use deadpool_postgres::GenericClient;

use super::PostgresStore;
use super::error::{corrupt, pg_error, pool_error};
use super::sql;
use crate::store::schema::{self, SCHEMA_VERSION};
use crate::store::{StoreError, StoreResult};

/// The schema [`PostgresStore::migrate`] applies, at [`SCHEMA_VERSION`],
/// for a DBA to read or apply by hand.
pub const POSTGRES_SCHEMA: &str = concat!(
    include_str!("v1.sql"),
    include_str!("v2.sql"),
    include_str!("v3.sql")
);

/// The script of each schema version, in order: a database at version `n`
/// gets the scripts after the `n`th.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    include_str!("v1.sql"),
    include_str!("v2.sql"),
    include_str!("v3.sql"),
];

impl PostgresStore {
    /// Brings the schema to [`SCHEMA_VERSION`] ([`POSTGRES_SCHEMA`]): it
    /// creates a missing schema and upgrades an older one in place, in one
    /// transaction under an advisory lock, so that several processes
    /// starting at once do not trip over each other: each waits for the
    /// migration ahead of it whatever the role's `lock_timeout`, which its
    /// own statements keep.
    ///
    /// # Errors
    ///
    /// [`StoreError::SchemaTooNew`] if the schema is newer than this build
    /// (nothing is changed), [`StoreError::Unavailable`] if the server
    /// cannot be reached, [`StoreError::Backend`] if a script fails.
    pub async fn migrate(&self) -> StoreResult<()> {
        self.upgrade(true).await
    }

    /// Checks that the database holds this library's schema, without
    /// creating it. An older schema is upgraded in place, as
    /// [`PostgresStore::migrate`] does. For tools that inspect an
    /// application's store and must never create one in the wrong database.
    ///
    /// # Errors
    ///
    /// [`StoreError::MissingSchema`] if it has none, and otherwise as
    /// [`PostgresStore::migrate`].
    pub async fn check_schema(&self) -> StoreResult<()> {
        self.upgrade(false).await
    }

    /// The schema version the database is at: 0 without the schema.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] if the server cannot be reached.
    pub async fn schema_version(&self) -> StoreResult<u32> {
        let client = self.pool().get().await.map_err(pool_error)?;
        version_of(&client).await
    }

    async fn upgrade(&self, create: bool) -> StoreResult<()> {
        let mut client = self.pool().get().await.map_err(pool_error)?;
        let failed = pg_error(sql::MIGRATE_LOCK.name);
        let tx = client.transaction().await.map_err(failed)?;
        tx.batch_execute(sql::MIGRATE_LOCK.sql)
            .await
            .map_err(failed)?;
        if let (true, Some(name)) = (create, &self.inner.schema) {
            // The builder checked the name is a plain identifier; quoted
            // all the same.
            tx.batch_execute(&sql::create_schema(name))
                .await
                .map_err(pg_error("create schema"))?;
        }
        let found = version_of(&tx).await?;
        for script in schema::upgrades(&MIGRATIONS, found, create)? {
            tx.batch_execute(script).await.map_err(failed)?;
        }
        tx.commit().await.map_err(failed)
    }
}

/// The schema version of the database the client is connected to.
async fn version_of(client: &impl GenericClient) -> StoreResult<u32> {
    let failed = pg_error(sql::SCHEMA_VERSION_OF.name);
    let found: i32 = client
        .query_one(sql::SCHEMA_VERSION_OF.sql, &[])
        .await
        .map_err(failed)?
        .try_get(0)
        .map_err(corrupt)?;
    let found = if found < 0 {
        client
            .query_one(sql::NEWEST_VERSION.sql, &[])
            .await
            .map_err(failed)?
            .try_get::<_, i32>(0)
            .map_err(corrupt)?
    } else {
        found
    };
    Ok(u32::try_from(found).unwrap_or(0))
}

/// Refuses a schema name that is not a plain identifier, so that it is the
/// same name quoted or not and needs no escaping in a connection's options.
pub(super) fn check_schema_name(name: &str) -> StoreResult<()> {
    let refuse = |why: &str| {
        Err(StoreError::BadSetting {
            setting: "schema",
            problem: format!(
                "`{}` {why}; a schema name is a lowercase ASCII letter or `_`, then lowercase \
                 letters, digits or `_`, at most 63 bytes, not beginning with `pg_`",
                name.escape_debug()
            ),
        })
    };
    let mut chars = name.chars();
    match chars.next() {
        None => return refuse("is empty"),
        Some(c) if !(c.is_ascii_lowercase() || c == '_') => {
            return refuse("does not begin with a lowercase letter or `_`");
        }
        Some(_) => {}
    }
    if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        return refuse("is not a plain identifier");
    }
    if name.len() > 63 {
        return refuse("is longer than Postgres keeps a name");
    }
    if name.starts_with("pg_") {
        return refuse("begins with `pg_`, which Postgres keeps for its own schemas");
    }
    Ok(())
}
