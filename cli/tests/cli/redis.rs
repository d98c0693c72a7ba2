//! The tool on Redis: every command under a prefix of its own, what `stats`
//! and `purge` say of a server that expires records itself, a key that does
//! not exist, and a server it cannot reach.

use std::time::{Duration, SystemTime};

use idempotent_tools::RedisStore;
use idempotent_tools::records::{Forget, RecordQuery, RecordState, Records};

use crate::commands::every_command;
use crate::records::{CANCEL, REFUND, claim, finish, finish_keeping, fresh_run, key};
use crate::run::cli;

/// Where the Redis cases find their server.
pub const URL: &str = "IDEMPOTENT_REDIS_URL";

/// A store under a prefix no other case uses, and the `--store` URL that
/// names it.
async fn store() -> (RedisStore, String) {
    let url = std::env::var(URL).expect("the harness runs this only with the URL");
    let prefix = format!("idempotent-cli-{}:", fresh_run());
    let store = RedisStore::builder(url.as_str())
        .prefix(prefix.as_str())
        .connect()
        .await
        .unwrap_or_else(|e| panic!("Redis at {URL} must be reachable: {e}"));
    let sep = if url.contains('?') { '&' } else { '?' };
    (store, format!("{url}{sep}prefix={prefix}"))
}

/// Removes what a case left under its prefix.
async fn clean(store: &RedisStore) {
    let page = store
        .list(&RecordQuery::new().limit(idempotent_tools::records::MAX_PAGE))
        .await
        .expect("list");
    for record in page.records {
        let _ = store.forget_with(&record.key, Forget::Force).await;
    }
}

pub async fn every_command_on_redis() {
    let (store, target) = store().await;
    every_command(&store, &target).await;
    clean(&store).await;
}

pub async fn stats_and_purge_on_redis() {
    let (store, target) = store().await;
    let run = fresh_run();
    let (now, hour) = (SystemTime::now(), Duration::from_secs(3600));
    claim(
        &store,
        &key(&run, "held"),
        &REFUND,
        Duration::from_secs(300),
        hour,
    )
    .await;
    finish(&store, &key(&run, "done"), &REFUND, RecordState::Done, now).await;
    finish(
        &store,
        &key(&run, "error"),
        &CANCEL,
        RecordState::Failed,
        now,
    )
    .await;
    // Kept for no time: the server expires it at once.
    let expired = key(&run, "expired");
    finish_keeping(
        &store,
        &expired,
        &CANCEL,
        RecordState::Done,
        now,
        Duration::ZERO,
    )
    .await;

    let stats = cli(&target, &["stats", "--json"]).expect(0).json();
    assert_eq!(stats["total"], 3, "{stats}");
    assert_eq!(stats["by_state"]["held"], 1);
    assert_eq!(stats["by_state"]["done"], 1);
    assert_eq!(stats["by_state"]["failed"], 1);
    cli(&target, &["show", expired.as_str()]).expect(3);

    // Redis expires records itself, so a purge finds nothing left to do
    // and changes nothing.
    let purged = cli(&target, &["purge", "--json"]).expect(0).json();
    assert_eq!(purged["purged"], 0);
    let said = cli(&target, &["purge"]).expect(0).stdout;
    assert!(said.contains("never anything to purge"), "{said}");
    assert_eq!(
        cli(&target, &["stats", "--json"]).expect(0).json()["total"],
        3
    );
    clean(&store).await;
}

pub async fn a_key_that_does_not_exist_on_redis_is_not_found() {
    let (store, target) = store().await;
    let out = cli(&target, &["show", "no-such-run:refund:1"]).expect(3);
    assert!(
        out.stderr
            .contains("no record under key `no-such-run:refund:1`"),
        "{}",
        out.stderr
    );
    cli(&target, &["forget", "--yes", "no-such-run:refund:1"]).expect(3);
    clean(&store).await;
}

pub async fn an_unreachable_redis_server_fails_and_says_what_to_check() {
    let out = cli("redis://127.0.0.1:1/0", &["list"]).expect(1);
    assert!(
        out.stderr
            .contains("could not open the store at `redis://127.0.0.1:1/0?prefix=idempotent:`"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("help: check that the store's server is up"),
        "{}",
        out.stderr
    );
}

pub async fn a_redis_url_it_cannot_read_is_bad_usage() {
    let out = cli("redis://cache:notaport/0", &["list"]).expect(2);
    assert!(
        out.stderr.contains("is not a valid Redis URL"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("?prefix=PREFIX"), "{}", out.stderr);
}

pub async fn a_redis_password_never_reaches_a_message() {
    let out = cli("redis://:s3cret@127.0.0.1:1/0", &["list"]).expect(1);
    assert!(!out.stderr.contains("s3cret"), "{}", out.stderr);
    assert!(
        out.stderr.contains("redis://:***@127.0.0.1:1/0"),
        "{}",
        out.stderr
    );
}

/// Every command on a Redis Cluster of the case's own, named by a
/// `redis+cluster://` URL: reported ignored where this machine cannot
/// start one (`redis-server` and `redis-cli`), and a failure in CI.
pub fn cluster_trial() -> crate::harness::Trial {
    use crate::harness::{Completion, Failed, Trial};
    use crate::redis_cluster::{self, LocalCluster};
    Trial::ignorable_test("every_command_on_a_redis_cluster", || {
        if !redis_cluster::available() {
            if std::env::var_os("CI").is_some() {
                return Err("CI needs `redis-server` and `redis-cli` on the PATH".into());
            }
            return Ok(Completion::ignored_with(
                "needs `redis-server` and `redis-cli`",
            ));
        }
        let ports = redis_cluster::free_ports();
        let cluster = LocalCluster::start(&ports);
        let urls = cluster.urls();
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| Failed::from(format!("a runtime: {e}")))?
            .block_on(async {
                let prefix = format!("idempotent-cli-{}:", fresh_run());
                let store = RedisStore::builder_cluster(urls.clone())
                    .prefix(prefix.as_str())
                    .connect()
                    .await
                    .expect("a store on the cluster");
                let nodes: Vec<&str> = urls
                    .iter()
                    .map(|url| url.trim_start_matches("redis://"))
                    .collect();
                let target = format!("redis+cluster://{}?prefix={prefix}", nodes.join(","));
                every_command(&store, &target).await;
                let said = cli(&target, &["purge"]).expect(0).stdout;
                assert!(said.contains("never anything to purge"), "{said}");
            });
        drop(cluster);
        Ok(Completion::Completed)
    })
}
