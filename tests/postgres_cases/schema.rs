//! The schema: a missing one says to migrate, version 1 is upgraded in
//! place, a newer one is refused, `check_schema` creates nothing, several
//! processes migrate at once (a migration waits for the one ahead of it
//! past the role's `lock_timeout`, and its own statements keep it), and the SQL a DBA applies by hand is the one
//! `migrate` applies. A store's own schema (`PostgresStoreBuilder::schema`):
//! two stores in two schemas of one database never see each other's
//! records, a store without the setting keeps working and moves into one as
//! documented, and a name that is not a plain identifier is refused.

use std::sync::Arc;

use idempotent_tools::store::postgres::PostgresStoreBuilder;
use idempotent_tools::store::postgres::deadpool_postgres::{Manager, Pool};
use idempotent_tools::store::postgres::tokio_postgres;
use idempotent_tools::{
    Error, PostgresStore,
    records::{RecordQuery, RecordState, Records},
    store::{Store, StoreError},
};
use idempotent_tools_testing::conformance::kit::{
    CountingProvider as Provider, fresh_run, refund_call, refunds,
};

use crate::{Schema, admin};

/// A role whose sessions give up on a lock after 50 ms.
const SHORT_LOCK_TIMEOUT: &str = "-c lock_timeout=50ms";

pub(super) async fn a_missing_schema_says_to_migrate_and_nothing_runs() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(
        PostgresStoreBuilder::from_config(schema.config())
            .connect_lazy()
            .expect("store"),
    );
    let provider = Provider::default();
    let refused = refund_call(&store, &fresh_run(), "1182", 42)
        .run(refunds(&provider, 42))
        .await;
    let err = refused.expect_err("no table, no action");
    let message = match err.guard() {
        Some(Error::Store(StoreError::Backend(source))) => source.to_string(),
        other => panic!("expected a backend error, got {other:?}"),
    };
    assert!(message.contains("migrate()"), "{message}");
    assert_eq!(provider.refunds(), 0);
}

/// A schema at version 1, as stores before schema versions left it: no
/// versions table, a row's state `held` or `done` with the end in
/// `ending`, and `finished_at`; its rows written back in that shape.
async fn downgrade_to_version_1(schema: &Schema) {
    admin(&schema.url)
        .await
        .batch_execute(&format!(
            "ALTER TABLE {0}.idempotent_claims DROP CONSTRAINT idempotent_claims_state_check;
             ALTER TABLE {0}.idempotent_claims ADD COLUMN ending text;
             UPDATE {0}.idempotent_claims
             SET ending = CASE state WHEN 'done' THEN 'ok' WHEN 'failed' THEN 'err'
                                     ELSE 'unknown' END,
                 state = 'done'
             WHERE state <> 'held';
             ALTER TABLE {0}.idempotent_claims ADD CONSTRAINT idempotent_claims_state_check
                 CHECK (state IN ('held', 'done'));
             ALTER TABLE {0}.idempotent_claims RENAME COLUMN completed_at TO finished_at;
             DROP TABLE {0}.idempotent_schema;
             DROP INDEX {0}.idempotent_claims_tool_state;",
            schema.name
        ))
        .await
        .expect("back to version 1");
}

pub(super) async fn a_version_1_schema_is_upgraded_in_place_and_keeps_its_records() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let run = fresh_run();
    let provider = Provider::default();
    {
        let store: Arc<dyn Store> = Arc::new(schema.store().await);
        let first = refund_call(&store, &run, "1182", 42)
            .run(refunds(&provider, 42))
            .await;
        assert!(first.expect("fresh").is_fresh());
    }
    downgrade_to_version_1(&schema).await;

    let store = PostgresStoreBuilder::from_config(schema.config())
        .connect_lazy()
        .expect("store");
    assert_eq!(store.schema_version().await.expect("version"), 1);
    store.migrate().await.expect("upgrade");
    assert_eq!(
        store.schema_version().await.expect("version"),
        idempotent_tools::store::SCHEMA_VERSION
    );
    let index: i64 = admin(&schema.url)
        .await
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = $1 \
             AND indexname = 'idempotent_claims_tool_state'",
            &[&schema.name],
        )
        .await
        .expect("indexes")
        .get(0);
    assert_eq!(index, 1, "version 2's index was created");
    let store: Arc<dyn Store> = Arc::new(store);
    let again = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await;
    assert!(again.expect("replay").is_replay());
    assert_eq!(provider.refunds(), 1);

    // check_schema upgrades in place too, without creating anything new.
    downgrade_to_version_1(&schema).await;
    let checked = PostgresStoreBuilder::from_config(schema.config())
        .connect_lazy()
        .expect("store");
    checked.check_schema().await.expect("upgrade by check");
    assert_eq!(
        checked.schema_version().await.expect("version"),
        idempotent_tools::store::SCHEMA_VERSION
    );
}

pub(super) async fn a_schema_newer_than_the_code_is_refused_and_left_unchanged() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = schema.store().await;
    admin(&schema.url)
        .await
        .batch_execute(&format!(
            "INSERT INTO {}.idempotent_schema (version) VALUES (99)",
            schema.name
        ))
        .await
        .expect("a newer version");
    for refused in [store.migrate().await, store.check_schema().await] {
        let err = refused.expect_err("too new");
        assert!(
            matches!(
                err,
                StoreError::SchemaTooNew {
                    found: 99,
                    supported: idempotent_tools::store::SCHEMA_VERSION
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("version 99"), "{err}");
    }
    let versions: i64 = admin(&schema.url)
        .await
        .query_one(
            &format!("SELECT count(*) FROM {}.idempotent_schema", schema.name),
            &[],
        )
        .await
        .expect("versions")
        .get(0);
    assert_eq!(versions, 3, "nothing was changed: versions 2 and 3, and 99");
}

pub(super) async fn a_schema_missing_is_not_created_by_check_schema() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = PostgresStoreBuilder::from_config(schema.config())
        .connect_lazy()
        .expect("store");
    let err = store.check_schema().await.expect_err("no schema");
    assert!(matches!(err, StoreError::MissingSchema), "{err:?}");
    assert_eq!(store.schema_version().await.expect("version"), 0);
}

pub(super) async fn migrating_from_several_processes_at_once_succeeds() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let mut migrations = Vec::new();
    for _ in 0..4 {
        let store = PostgresStoreBuilder::from_config(schema.config())
            .connect_lazy()
            .expect("store");
        migrations.push(tokio::spawn(async move { store.migrate().await }));
    }
    for migration in migrations {
        migration.await.expect("task").expect("migrate");
    }
    schema.store().await.migrate().await.expect("and again");
}

/// A deployment's processes start at once under a role whose
/// `lock_timeout` is short: a migration waits for the one ahead of it,
/// however long, instead of failing as contended.
pub(super) async fn a_migration_waits_for_the_one_ahead_of_it_past_the_roles_lock_timeout() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    // The migration ahead, under way in another process: it holds the lock
    // every migration of the database takes.
    let ahead = admin(&schema.url).await;
    ahead
        .batch_execute("BEGIN; SELECT pg_advisory_xact_lock(hashtext('idempotent_claims')::bigint)")
        .await
        .expect("the migration lock");
    let name = format!("migrating-{}", schema.name);
    let mut config = schema.config_with(SHORT_LOCK_TIMEOUT);
    config.application_name(&name);
    let store = PostgresStoreBuilder::from_config(config)
        .connect_lazy()
        .expect("store");
    let migration = tokio::spawn(async move { store.migrate().await });
    // Until this store's migration has waited for the lock four times the
    // role's `lock_timeout`, seen from the server by a session outside any
    // transaction (one inside sees `pg_stat_activity` as it first read it).
    let observer = admin(&schema.url).await;
    let waited_past = "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
         WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = $1 \
         AND clock_timestamp() - a.query_start > interval '200 milliseconds'";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the migration was never seen waiting for the lock"
        );
        assert!(
            !migration.is_finished(),
            "the migration ended while the one ahead held the lock: {:?}",
            migration.await
        );
        let waiting: i64 = observer
            .query_one(waited_past, &[&name])
            .await
            .expect("the server's locks")
            .get(0);
        if waiting == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    ahead
        .batch_execute("COMMIT")
        .await
        .expect("the one ahead ends");
    migration
        .await
        .expect("task")
        .expect("the migration, once the one ahead has ended");
    assert_eq!(
        schema
            .store()
            .await
            .schema_version()
            .await
            .expect("version"),
        idempotent_tools::store::SCHEMA_VERSION
    );
}

/// A migration's own statements keep the role's `lock_timeout`: an upgrade
/// whose table a long read holds fails as contended and changes nothing,
/// instead of queueing every claim behind its `ALTER TABLE`.
pub(super) async fn an_upgrade_behind_a_long_read_gives_up_at_the_roles_lock_timeout() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    schema.store().await;
    downgrade_to_version_1(&schema).await;
    let reader = admin(&schema.url).await;
    reader
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE {}.idempotent_claims IN ACCESS SHARE MODE",
            schema.name
        ))
        .await
        .expect("a long read");
    let store = PostgresStoreBuilder::from_config(schema.config_with(SHORT_LOCK_TIMEOUT))
        .connect_lazy()
        .expect("store");
    let err = tokio::time::timeout(std::time::Duration::from_secs(30), store.migrate())
        .await
        .expect("the upgrade gives up at the role's lock_timeout")
        .expect_err("the table is held by the read");
    assert!(matches!(err, StoreError::Contended(_)), "{err:?}");
    assert_eq!(
        store.schema_version().await.expect("version"),
        1,
        "nothing was changed"
    );
    reader.batch_execute("COMMIT").await.expect("the read ends");
    store
        .migrate()
        .await
        .expect("the upgrade, once the read has ended");
    assert_eq!(
        store.schema_version().await.expect("version"),
        idempotent_tools::store::SCHEMA_VERSION
    );
}

pub(super) fn the_schema_a_dba_applies_by_hand_is_the_one_migrate_applies() {
    let schema = idempotent_tools::store::postgres::POSTGRES_SCHEMA;
    assert!(schema.contains("CREATE TABLE IF NOT EXISTS idempotent_claims"));
    assert!(schema.contains("key_digest  bytea"));
    assert!(schema.contains("result      text"));
}

/// Whether `name` is a schema of the database, and how many tables it has.
async fn tables_in(url: &str, name: &str) -> Option<i64> {
    let client = admin(url).await;
    let exists: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
            &[&name],
        )
        .await
        .expect("schemas")
        .get(0);
    if !exists {
        return None;
    }
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
            &[&name],
        )
        .await
        .expect("tables")
        .get(0);
    Some(tables)
}

pub(super) async fn two_stores_in_two_schemas_of_one_database_never_see_each_others_records() {
    let Some(url) = crate::url() else {
        return;
    };
    // Neither schema exists yet: the stores create them (and drop them
    // afterwards).
    let schemas = [crate::unique_schema(), crate::unique_schema()].map(|name| Schema {
        url: url.clone(),
        name,
    });
    let mut stores = Vec::new();
    for schema in &schemas {
        assert_eq!(tables_in(&url, &schema.name).await, None);
        let store = PostgresStore::builder(&url)
            .schema(schema.name.as_str())
            .connect()
            .await
            .expect("a store");
        store.migrate().await.expect("migrate creates the schema");
        assert_eq!(
            tables_in(&url, &schema.name).await,
            Some(2),
            "{}",
            schema.name
        );
        stores.push(Arc::new(store));
    }

    // The same key in both: each store's first call is fresh, each
    // repeat a replay of its own store's result.
    let run = fresh_run();
    let providers = [Provider::default(), Provider::default()];
    for (store, provider) in stores.iter().zip(&providers) {
        let store: Arc<dyn Store> = store.clone();
        let first = refund_call(&store, &run, "1182", 42)
            .run(refunds(provider, 42))
            .await;
        assert!(
            first.expect("fresh").is_fresh(),
            "the other schema's record is not seen"
        );
        let again = refund_call(&store, &run, "1182", 42)
            .run(refunds(provider, 42))
            .await;
        assert!(again.expect("replay").is_replay());
    }
    assert_eq!(providers.each_ref().map(Provider::refunds), [1, 1]);

    for store in &stores {
        let listed = store
            .list(&RecordQuery::new().run(run.as_str()))
            .await
            .expect("list");
        assert_eq!(listed.records.len(), 1, "one record in each schema");
        assert_eq!(listed.records[0].state, RecordState::Done);
        assert_eq!(store.count().await.expect("count").len(), 1);
    }
}

pub(super) async fn a_store_keeps_working_without_a_schema_and_after_moving_into_one() {
    let Some(old) = Schema::new().await else {
        return;
    };
    // The store as it was before the setting: its tables where the
    // connection's search_path puts them (here a schema standing in for
    // `public`).
    let run = fresh_run();
    let provider = Provider::default();
    let before: Arc<dyn Store> = Arc::new(old.store().await);
    let first = refund_call(&before, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await;
    assert!(first.expect("fresh").is_fresh());
    drop(before);

    // The move the builder's documentation gives.
    let new = Schema {
        url: old.url.clone(),
        name: crate::unique_schema(),
    };
    admin(&old.url)
        .await
        .batch_execute(&format!(
            "CREATE SCHEMA {new};
             ALTER TABLE {old}.idempotent_claims SET SCHEMA {new};
             ALTER TABLE {old}.idempotent_schema SET SCHEMA {new};",
            new = new.name,
            old = old.name
        ))
        .await
        .expect("move the tables");
    let moved = PostgresStore::builder(&old.url)
        .schema(new.name.as_str())
        .connect_lazy()
        .expect("a store");
    moved
        .check_schema()
        .await
        .expect("the moved schema is current");
    assert_eq!(
        moved.schema_version().await.expect("version"),
        idempotent_tools::store::SCHEMA_VERSION
    );
    let moved: Arc<dyn Store> = Arc::new(moved);
    let again = refund_call(&moved, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await;
    assert!(
        again.expect("replay").is_replay(),
        "the record moved with its table"
    );
    assert_eq!(provider.refunds(), 1);
    assert_eq!(tables_in(&old.url, &old.name).await, Some(0));
}

pub(super) fn a_schema_name_that_is_not_a_plain_identifier_is_refused() {
    let url = "postgres://app@db.internal/app";
    for name in [
        "",
        "Shop",
        "shop-idempotent",
        "1shop",
        "shop; DROP TABLE idempotent_claims; --",
        "shop\" CASCADE",
        "pg_shop",
        "é",
        "s".repeat(64).as_str(),
    ] {
        let refused = PostgresStore::builder(url).schema(name).connect_lazy();
        assert!(
            matches!(
                &refused,
                Err(StoreError::BadSetting {
                    setting: "schema",
                    ..
                })
            ),
            "`{name}`: {refused:?}"
        );
    }
    for name in ["shop_idempotent", "_s", "s1", "s".repeat(63).as_str()] {
        PostgresStore::builder(url)
            .schema(name)
            .connect_lazy()
            .unwrap_or_else(|e| panic!("`{name}` is a plain identifier: {e}"));
    }
    // A store on the application's pool cannot set its connections'
    // search_path, and says so.
    let config: tokio_postgres::Config = url.parse().expect("a URL");
    let pool = Pool::builder(Manager::new(config, tokio_postgres::NoTls))
        .build()
        .expect("a pool");
    let refused = PostgresStoreBuilder::from_pool(pool)
        .schema("shop_idempotent")
        .connect_lazy();
    let Err(StoreError::BadSetting { problem, .. }) = refused else {
        panic!("expected the setting refused, got {refused:?}");
    };
    assert!(problem.contains("search_path"), "{problem}");
}
