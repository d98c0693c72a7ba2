//! A Postgres server of the test's own, in a temporary directory: the
//! conformance suite's restart cases stop it (a fast shutdown, which cuts
//! every connection) and start it again over its data (see
//! `Suite::restarting` in `store_postgres.rs`).
//!
//! `initdb` and `postgres` refuse to run as root: as root, they run as the
//! `postgres` user (`runuser`), in a directory handed to that user.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use idempotent_tools::store::postgres::tokio_postgres::{self, NoTls};
use idempotent_tools_testing::conformance::Restart;

/// Where the server's programs (`initdb`, `pg_ctl`) are: on the `PATH`, or
/// in the newest `/usr/lib/postgresql/<version>/bin`.
fn programs() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).find(|dir| dir.join("initdb").is_file()));
    on_path.or_else(|| {
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let version = entry.file_name().to_str()?.parse().ok()?;
                let bin = entry.path().join("bin");
                bin.join("initdb").is_file().then_some((version, bin))
            })
            .collect();
        versions.sort();
        versions.pop().map(|(_, bin)| bin)
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

/// A Postgres server on a port of its own, over a data directory of its
/// own; stopped for good when dropped.
pub struct Server {
    programs: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    as_postgres: bool,
}

impl Server {
    /// Whether the restart cases can start a server of their own: this
    /// machine has Postgres's programs, or `CI` is set, where their absence
    /// fails them.
    pub fn can_start() -> bool {
        std::env::var_os("CI").is_some() || programs().is_some()
    }

    /// Creates a database cluster and starts its server, or `None` where
    /// this machine has no Postgres programs (a failure in CI).
    pub fn start() -> Option<Server> {
        let Some(programs) = programs() else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI needs Postgres's programs (`initdb`, `pg_ctl`) for the restart cases"
            );
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("idempotent-postgres-")
            .tempdir()
            .expect("a directory");
        let as_postgres = is_root();
        if as_postgres {
            ran(Command::new("chown")
                .arg("postgres")
                .arg(dir.path())
                .output());
        }
        let port = crate::harness::free_port();
        let server = Server {
            programs,
            dir,
            port,
            as_postgres,
        };
        let data = server.data();
        ran(server
            .program("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "--no-sync"])
            .output());
        server.pg_ctl_start();
        Some(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// One of the server's programs, run as a user it accepts.
    fn program(&self, name: &str) -> Command {
        let path = self.programs.join(name);
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        };
        command.stdin(Stdio::null());
        command
    }

    /// Starts the server and returns once it accepts connections.
    fn pg_ctl_start(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        ran(self
            .program("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-o", &options, "-w", "-l"])
            .arg(self.dir.path().join("log"))
            .arg("start")
            .output());
    }

    /// Stops the server: `fast` ends every session at once, `immediate`
    /// as a crash would.
    fn pg_ctl_stop(&self, mode: &str) -> std::io::Result<Output> {
        self.program("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", mode, "-w", "stop"])
            .output()
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

/// Fails the case unless the program ran and succeeded.
fn ran(output: std::io::Result<Output>) {
    let output = output.expect("a Postgres program runs");
    assert!(
        output.status.success(),
        "a Postgres program failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The suite's restart cases stop the server with a fast shutdown, which
/// ends every session, and start it again over its data.
impl Restart for Server {
    async fn stop(&mut self) {
        ran(self.pg_ctl_stop("fast"));
    }

    async fn start(&mut self) {
        self.pg_ctl_start();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.pg_ctl_stop("immediate");
    }
}

/// How long after a restart the first calls go through, over 7 fast
/// shutdowns and starts (`--ignored` runs it).
pub(super) async fn measured_first_calls_after_a_restart() {
    let Some(mut server) = tokio::task::spawn_blocking(Server::start)
        .await
        .expect("the server's start")
    else {
        return;
    };
    let store = idempotent_tools::PostgresStore::builder(&server.url())
        .connect_lazy()
        .expect("a store");
    store.migrate().await.expect("migrate");
    let store: std::sync::Arc<dyn idempotent_tools::store::Store> = std::sync::Arc::new(store);
    let url = server.url();
    let answers = move || {
        let url = url.clone();
        async move {
            let Ok((client, connection)) = tokio_postgres::connect(&url, NoTls).await else {
                return false;
            };
            tokio::spawn(connection);
            client.simple_query("SELECT 1").await.is_ok()
        }
    };
    idempotent_tools_testing::conformance::kit::measure_first_calls_after_restarts(
        store,
        &mut server,
        answers,
        7,
    )
    .await;
}
