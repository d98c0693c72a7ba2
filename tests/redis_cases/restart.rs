//! A Redis server of the test's own, restarted under the store: the calls
//! made while it is down go through once it is back, and nothing runs
//! twice.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use idempotent_tools::RedisStore;
use idempotent_tools::store::Store;
use idempotent_tools_testing::conformance::kit::{
    CountingProvider as Provider, fresh_run, refund_call, refunds,
};

/// A `redis-server` on a port of its own, keeping its data in an
/// append-only file that every write reaches before it is acknowledged, as
/// a production server that must survive a restart does.
struct Server {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Server {
    /// Starts one, or `None` where this machine has no `redis-server` (a
    /// failure in CI).
    fn start() -> Option<Server> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
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

    fn url(&self) -> String {
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

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

pub async fn calls_made_while_the_server_restarts_go_through_once_it_is_back() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(
        RedisStore::builder(server.url())
            .reconnect_within(Duration::from_secs(30))
            .connect()
            .await
            .expect("a store"),
    );
    let provider = Arc::new(Provider::default());
    let run = fresh_run();
    let first = refund_call(&store, &run, "1182", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("the first refund");
    assert!(first.is_fresh());

    server.kill();
    // Asked while the server is down: the same refund again, and another.
    let again = tokio::spawn({
        let (store, run, provider) = (store.clone(), run.clone(), provider.clone());
        async move {
            refund_call(&store, &run, "1182", 42)
                .run(refunds(&provider, 42))
                .await
        }
    });
    let other = tokio::spawn({
        let (store, run, provider) = (store.clone(), run.clone(), provider.clone());
        async move {
            refund_call(&store, &run, "1183", 42)
                .run(refunds(&provider, 42))
                .await
        }
    });
    let _server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .expect("the restart");

    let again = again
        .await
        .expect("the task")
        .expect("the repeat, after the restart");
    assert!(
        again.is_replay(),
        "the record outlived the restart: {again:?}"
    );
    let other = other
        .await
        .expect("the task")
        .expect("the other refund, after the restart");
    assert!(other.is_fresh());
    // And the next call, on a connection the store rebuilt.
    let later = refund_call(&store, &run, "1183", 42)
        .run(refunds(&provider, 42))
        .await
        .expect("a call after the restart");
    assert!(later.is_replay());
    assert_eq!(provider.refunds(), 2, "one refund per order");
}
