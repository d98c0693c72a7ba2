//! A Redis server of the test's own, stopped and started again under the
//! store: the conformance suite's restart cases run on it (see
//! `Suite::restarting` in `store_redis.rs`), and so does a call dropped
//! while its steps retry over the broken connection.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use idempotent_tools::RedisStore;
use idempotent_tools::store::redis::redis;
use idempotent_tools::store::{ClaimAnswer, Store};
use idempotent_tools_testing::conformance::Restart;
use idempotent_tools_testing::conformance::kit::{
    self, CountingProvider as Provider, PATIENCE, RefundError, fresh_run, refund_call, refund_key,
    refunds, request,
};

/// A `redis-server` on a port of its own, keeping its data in an
/// append-only file that every write reaches before it is acknowledged, as
/// a production server that must survive a restart does.
pub struct Server {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Server {
    /// Whether the restart cases can start a server of their own: this
    /// machine has `redis-server`, or `CI` is set, where its absence fails
    /// them.
    pub fn can_start() -> bool {
        std::env::var_os("CI").is_some()
            || Command::new("redis-server")
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
    }

    /// Starts one, or `None` where this machine has no `redis-server` (a
    /// failure in CI).
    pub fn start() -> Option<Server> {
        let port = crate::harness::free_port();
        let dir = tempfile::tempdir().expect("a directory");
        let mut server = Server {
            port,
            dir,
            child: None,
        };
        if !server.spawn() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI needs `redis-server` on the PATH for the restart case"
            );
            return None;
        }
        Some(server)
    }

    /// Starts the process and returns once it says it accepts connections
    /// (it says so after reading its files), or `false` if there is no
    /// `redis-server` to start.
    fn spawn(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let Ok(mut child) = child else {
            return false;
        };
        let stdout = child.stdout.take().expect("piped stdout");
        self.child = Some(child);
        let mut lines = BufReader::new(stdout).lines();
        let ready = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|line| line.contains("Ready to accept connections"));
        assert!(ready, "redis-server on port {} did not start", self.port);
        // Keep reading, so that the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        true
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server at once, as a crash or a lost host would.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("kill redis-server");
            child.wait().expect("reap redis-server");
        }
    }

    /// Starts it again on the same port, over the same files.
    fn restart(&mut self) {
        assert!(self.spawn(), "redis-server starts again");
    }
}

/// The suite's restart cases kill the server, as a crash would, and start
/// it again over its append-only file.
impl Restart for Server {
    async fn stop(&mut self) {
        self.kill();
    }

    async fn start(&mut self) {
        self.restart();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Returns once `store` has sent `tries` more round trips than `since`:
/// a step that keeps trying over a broken connection.
async fn retrying(store: &RedisStore, since: u64, tries: u64) {
    let tried = tokio::time::timeout(PATIENCE, async {
        // A counter, not a clock: look again until it has moved.
        while store.round_trips() < since + tries {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert!(
        tried.is_ok(),
        "the step did not try again within {PATIENCE:?}"
    );
}

/// A store of its own on `server`, so that its round trips are one
/// scenario's alone.
async fn store_on(server: &Server) -> Arc<RedisStore> {
    Arc::new(
        RedisStore::builder(server.url())
            .reconnect_within(PATIENCE)
            .connect()
            .await
            .expect("a store"),
    )
}

/// Calls (and a bare claim step) dropped while they retry over the broken
/// connection of a stopped server, at the pause between tries: nothing
/// stays claimed, and a result made before the drop is kept. Once the
/// server is back, a new call acts once, and a repeat replays.
pub async fn a_call_dropped_while_its_steps_retry_leaves_no_claim_stuck_and_no_result_lost() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let (completing, claiming, bare) = (
        store_on(&server).await,
        store_on(&server).await,
        store_on(&server).await,
    );
    let provider = Arc::new(Provider::default());
    let run = fresh_run();

    // An action that runs while the server is up and ends once it is down.
    let (entered, finish) = (Notify::new(), Notify::new());
    let store: Arc<dyn Store> = completing.clone();
    {
        let call = refund_call(&store, &run, "completed-down", 42)
            .lease(PATIENCE)
            .run(async {
                entered.notify_one();
                finish.notified().await;
                Ok::<_, RefundError>(provider.refund("completed-down", 42))
            });
        tokio::pin!(call);
        tokio::select! {
            ended = &mut call => panic!("the call ended before its action did: {ended:?}"),
            () = entered.notified() => {}
        }
        server.kill();
        let since = completing.round_trips();
        finish.notify_one();
        tokio::select! {
            ended = &mut call => panic!("the call ended while the server was down: {ended:?}"),
            () = retrying(&completing, since, 2) => {}
        }
        // Dropped here, its completion trying again.
    }

    // A call whose claim finds the server down, dropped while it retries.
    let store: Arc<dyn Store> = claiming.clone();
    {
        let since = claiming.round_trips();
        let call = refund_call(&store, &run, "claimed-down", 42).run(refunds(&provider, 42));
        tokio::pin!(call);
        tokio::select! {
            ended = &mut call => panic!("the call ended while the server was down: {ended:?}"),
            () = retrying(&claiming, since, 2) => {}
        }
    }

    // The claim step itself, dropped while it retries.
    let key = refund_key(&run, "step-dropped");
    {
        let since = bare.round_trips();
        let step = bare.claim(request(&key, PATIENCE));
        tokio::select! {
            ended = step => panic!("the claim ended while the server was down: {ended:?}"),
            () = retrying(&bare, since, 2) => {}
        }
    }

    let _server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .expect("the restart");

    let claimed = refund_call(&store, &run, "claimed-down", 42)
        .wait(PATIENCE)
        .run(refunds(&provider, 42))
        .await
        .expect("a new call, once the server is back");
    assert!(claimed.is_fresh(), "{claimed:?}");
    let store: Arc<dyn Store> = completing.clone();
    let kept = refund_call(&store, &run, "completed-down", 42)
        .wait(PATIENCE)
        .run(refunds(&provider, 42))
        .await
        .expect("a repeat of the call whose completion was retrying");
    assert!(
        kept.is_replay(),
        "the result made before the drop is kept: {kept:?}"
    );
    assert!(
        matches!(
            bare.claim(request(&key, PATIENCE)).await,
            Ok(ClaimAnswer::Claimed(_))
        ),
        "a claim step dropped while the server was down took nothing"
    );
    assert_eq!(provider.refunds(), 2, "one refund per order");
}

/// A completion whose server stays down past the lease: it is tried again
/// until the lease would run out, then the call says the result was not
/// recorded, and that the action ran.
pub async fn a_completion_whose_server_stays_down_past_the_lease_is_not_recorded_and_says_the_action_ran()
 {
    let Some(mut server) = Server::start() else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(
        RedisStore::builder(server.url())
            .reconnect_within(Duration::from_millis(50))
            .connect()
            .await
            .expect("a store"),
    );
    let provider = Arc::new(Provider::default());
    kit::not_recorded_once_down(&store, &provider, || server.kill()).await;
}

/// How long after a restart the first calls go through, over 7 restarts
/// of a server killed and started again (`--ignored` runs it).
pub async fn measured_first_calls_after_a_restart() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let store: Arc<dyn Store> =
        Arc::new(RedisStore::connect(&server.url()).await.expect("a store"));
    let client = redis::Client::open(server.url()).expect("a URL");
    let answers = move || {
        let client = client.clone();
        async move {
            match client.get_multiplexed_async_connection().await {
                Ok(mut connection) => redis::cmd("PING")
                    .query_async::<String>(&mut connection)
                    .await
                    .is_ok(),
                Err(_) => false,
            }
        }
    };
    kit::measure_first_calls_after_restarts(store, &mut server, answers, 7).await;
}
