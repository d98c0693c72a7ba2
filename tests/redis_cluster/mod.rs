//! A Redis Cluster of the tests' own: six `redis-server` processes (three
//! primaries, each with one replica) on free ports, in a temporary
//! directory, joined by `redis-cli --cluster create`.
//!
//! The nodes keep nothing on disk (`--save ""`, no append-only file): no
//! node is restarted here, and what a failover must not lose is what the
//! primary replicated, which a coordinated `CLUSTER FAILOVER` waits for.
//!
//! Each server runs under a small shell that kills it (`kill -9`) once its
//! standard input closes: when the cluster is dropped, and when the test
//! binary dies in any way, so no server outlives the tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use idempotent_tools::store::redis::redis;

/// How long a node may go unheard before the others count it failed.
/// Generous, so that a busy machine never fails a primary over by itself.
const NODE_TIMEOUT_MS: u32 = 5000;

/// How long the cluster may take to form.
const FORMING: Duration = Duration::from_secs(30);

/// Whether this machine can start a cluster: `redis-server` and
/// `redis-cli` on the PATH.
pub fn available() -> bool {
    ["redis-server", "redis-cli"]
        .into_iter()
        .all(crate::harness::on_path)
}

/// A node's client port and its cluster bus port.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub port: u16,
    pub bus: u16,
}

/// Six pairs of ports that were free a moment ago, none handed out before
/// in this process ([`crate::harness::free_port`]). A node whose port was
/// taken all the same fails its start (see [`Node::start`]).
pub fn free_ports() -> Vec<Ports> {
    (0..6)
        .map(|_| Ports {
            port: crate::harness::free_port(),
            bus: crate::harness::free_port(),
        })
        .collect()
}

/// One `redis-server`, under the shell that kills it.
struct Node {
    port: u16,
    shell: Child,
    stdin: Option<ChildStdin>,
}

impl Node {
    /// Starts a node keeping its data in `dir`: with `keeps` in an
    /// append-only file every write reaches before it is acknowledged, so
    /// that it comes back with it after a restart; without, in memory only.
    fn start(ports: Ports, dir: &Path, keeps: bool) -> Node {
        let data = dir.join(ports.port.to_string());
        std::fs::create_dir_all(&data).expect("a node's directory");
        let mut shell = Command::new("sh")
            .arg("-c")
            // The shell lets go of the server's output, so that the output
            // ends when the server does: a server that fails to start is
            // seen to, rather than waited on.
            .arg(r#"redis-server "$@" & server=$!; exec >/dev/null; read -r _; kill -9 "$server"; wait "$server""#)
            .arg("sh")
            .args(["--bind", "127.0.0.1", "--port", &ports.port.to_string()])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-port", &ports.bus.to_string()])
            .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
            .arg("--cluster-config-file")
            .arg(data.join("nodes.conf"))
            .args(["--save", ""])
            .args(if keeps {
                ["--appendonly", "yes", "--appendfsync", "always"]
            } else {
                ["--appendonly", "no", "--appendfsync", "everysec"]
            })
            .arg("--dir")
            .arg(&data)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh starts redis-server");
        let stdin = shell.stdin.take();
        let stdout = shell.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut said = Vec::new();
        let ready = lines.by_ref().map_while(Result::ok).any(|line| {
            let ready = line.contains("Ready to accept connections");
            said.push(line);
            ready
        });
        assert!(
            ready,
            "redis-server on port {} (cluster bus {}) did not start:\n{}",
            ports.port,
            ports.bus,
            said.join("\n")
        );
        // Keep reading, so that the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Node {
            port: ports.port,
            shell,
            stdin,
        }
    }

    /// Kills the server at once, as a crash or a lost host would.
    fn kill(&mut self) {
        drop(self.stdin.take());
        let _ = self.shell.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The running cluster; dropping it kills every node.
pub struct LocalCluster {
    nodes: Vec<Node>,
    ports: Vec<Ports>,
    keeps: bool,
    dir: tempfile::TempDir,
}

impl LocalCluster {
    /// Starts six nodes on `ports`, joins them, and returns once every
    /// node sees the whole cluster healthy and every replica in sync.
    pub fn start(ports: &[Ports]) -> LocalCluster {
        LocalCluster::starting(ports, false)
    }

    /// As [`LocalCluster::start`], with nodes that keep every acknowledged
    /// write on disk, so that the whole cluster can be restarted.
    pub fn start_keeping(ports: &[Ports]) -> LocalCluster {
        LocalCluster::starting(ports, true)
    }

    fn starting(ports: &[Ports], keeps: bool) -> LocalCluster {
        let dir = tempfile::Builder::new()
            .prefix("idempotent-redis-cluster-")
            .tempdir()
            .expect("a directory");
        let nodes: Vec<Node> = ports
            .iter()
            .map(|&p| Node::start(p, dir.path(), keeps))
            .collect();
        let cluster = LocalCluster {
            nodes,
            ports: ports.to_vec(),
            keeps,
            dir,
        };
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(
                cluster
                    .nodes
                    .iter()
                    .map(|n| format!("127.0.0.1:{}", n.port)),
            )
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli runs");
        assert!(
            created.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        cluster.wait_until_formed();
        cluster
    }

    /// Polls every node until each says `cluster_state:ok`, lists three
    /// primaries and three replicas with none failing, and each replica's
    /// link to its primary is up.
    fn wait_until_formed(&self) {
        let deadline = Instant::now() + FORMING;
        for node in &self.nodes {
            loop {
                if formed(node.port) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the cluster did not form within {FORMING:?}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The URL of every node, for the store and for children.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| url(n.port)).collect()
    }

    /// Kills every node at once, as a power cut would.
    pub fn stop(&mut self) {
        self.nodes.clear();
    }

    /// Starts every node again over what it kept (its data and its
    /// `nodes.conf`), and returns once the cluster has formed again.
    pub fn restart(&mut self) {
        self.nodes.clear();
        self.nodes = self
            .ports
            .iter()
            .map(|&p| Node::start(p, self.dir.path(), self.keeps))
            .collect();
        self.wait_until_formed();
    }

    /// Kills the node on `port`.
    pub fn kill(&mut self, port: u16) {
        if let Some(node) = self.nodes.iter_mut().find(|n| n.port == port) {
            node.kill();
        }
    }
}

/// A node's URL.
pub fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

/// Whether the node on `port` sees the cluster formed.
fn formed(port: u16) -> bool {
    let Ok(mut connection) = redis::Client::open(url(port))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
    else {
        return false;
    };
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut connection)
        .unwrap_or_default();
    let replication: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut connection)
        .unwrap_or_default();
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut connection)
        .unwrap_or_default();
    let listed = parse_nodes(&nodes);
    let primaries = listed.iter().filter(|n| n.primary && !n.failing).count();
    let replicas = listed.iter().filter(|n| !n.primary && !n.failing).count();
    let in_sync =
        replication.contains("role:master") || replication.contains("master_link_status:up");
    info.contains("cluster_state:ok") && primaries == 3 && replicas == 3 && in_sync
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
pub struct Listed {
    pub id: String,
    pub port: u16,
    pub primary: bool,
    pub failing: bool,
    /// A replica's primary's id.
    pub replica_of: Option<String>,
    /// A primary's slot ranges.
    pub slots: Vec<(u16, u16)>,
}

impl Listed {
    /// Whether this primary serves `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| (lo..=hi).contains(&slot))
    }
}

/// Reads a `CLUSTER NODES` reply.
pub fn parse_nodes(text: &str) -> Vec<Listed> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port = fields
                .get(1)?
                .split('@')
                .next()?
                .rsplit_once(':')?
                .1
                .parse()
                .ok()?;
            let flags = *fields.get(2)?;
            let primary = flags.split(',').any(|f| f == "master");
            let failing = flags.split(',').any(|f| f == "fail" || f == "fail?");
            let replica_of = (*fields.get(3)?).to_owned();
            let slots = fields
                .iter()
                .skip(8)
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
                    None => s.parse().ok().map(|one| (one, one)),
                })
                .collect();
            Some(Listed {
                id: (*fields.first()?).to_owned(),
                port,
                primary,
                failing,
                replica_of: (replica_of != "-").then_some(replica_of),
                slots,
            })
        })
        .collect()
}
