//! Two processes race on one refund: first on a SQLite file, then on
//! Postgres. Each is this program started again, and both call the same tool
//! on the same order at the same moment. The stand-in provider is a file
//! that every refund appends a line to, so it counts across processes.
//!
//! ```sh
//! cargo run --example two_processes --features sqlite,postgres
//! # the Postgres round, too:
//! IDEMPOTENT_POSTGRES_URL=postgres://postgres@127.0.0.1/test \
//!     cargo run --example two_processes --features sqlite,postgres
//! ```

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;

use idempotent_tools::{Outcome, Run, idempotent, store::Store};
use idempotent_tools::{PostgresStore, SqliteStore};

type Failure = Box<dyn std::error::Error + Send + Sync>;

/// The tool, as an application would write it.
struct Shop {
    store: Arc<dyn Store>,
    provider: PathBuf,
}

impl Shop {
    /// Refunds once per run and order, in whichever process asks first.
    #[idempotent(key = "<run>:refund:<order_id>", store = &self.store)]
    async fn refund_order(
        &self,
        order_id: String,
        usd: u64,
    ) -> Result<Outcome<String>, idempotent_tools::Error> {
        Ok(refund_at_provider(&self.provider, &order_id, usd))
    }
}

/// The stand-in provider: appends one line per refund to a shared file.
fn refund_at_provider(provider: &Path, order_id: &str, usd: u64) -> String {
    let id = format!("re_{}", std::process::id());
    let line = format!("{id} order {order_id} ${usd}\n");
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(provider)
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if let Err(err) = appended {
        eprintln!("the stand-in provider failed: {err}");
    }
    id
}

#[tokio::main]
async fn main() -> Result<(), Failure> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, role, backend, place, run, provider] = args.as_slice()
        && role == "child"
    {
        return child(backend, place, run, provider).await;
    }

    let dir = std::env::temp_dir().join(format!("idempotent-two-processes-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let claims = dir.join("claims.db").display().to_string();
    // Create the file (and its schema) before the race, as a deployment would.
    SqliteStore::open(&claims)?;
    race("sqlite", &claims, &dir.join("sqlite-provider.log"))?;

    match std::env::var("IDEMPOTENT_POSTGRES_URL") {
        Ok(url) => {
            PostgresStore::connect(&url).await?.migrate().await?;
            race("postgres", &url, &dir.join("postgres-provider.log"))?;
        }
        Err(_) => println!("postgres: skipped (set IDEMPOTENT_POSTGRES_URL to run it)"),
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// Starts two children, lets them go at once, and prints what each got and
/// how many refunds reached the provider.
fn race(backend: &str, place: &str, provider: &Path) -> Result<(), Failure> {
    let run = format!(
        "run-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
    );
    let mut children = Vec::new();
    for _ in 0..2 {
        children.push(Racer::start(backend, place, &run, provider)?);
    }
    // The barrier: both are connected and waiting before either is told to go.
    for child in &mut children {
        child.expect("ready")?;
    }
    for child in &mut children {
        child.tell("go")?;
    }
    let mut said = Vec::new();
    for child in &mut children {
        said.push(format!(
            "process {}: {}",
            child.pid(),
            child.expect("outcome")?
        ));
    }
    for child in children {
        child.finish()?;
    }
    let refunds = std::fs::read_to_string(provider)
        .map(|text| text.lines().count())
        .unwrap_or(0);
    println!("{backend}:");
    for line in said {
        println!("  {line}");
    }
    println!("  refunds that reached the provider: {refunds}");
    Ok(())
}

/// One racing child: this program, started again.
async fn child(backend: &str, place: &str, run: &str, provider: &str) -> Result<(), Failure> {
    let store: Arc<dyn Store> = match backend {
        "sqlite" => Arc::new(SqliteStore::open(place)?),
        _ => Arc::new(PostgresStore::connect(place).await?),
    };
    let shop = Shop {
        store,
        provider: PathBuf::from(provider),
    };
    println!("ready");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go)?;

    let outcome = Run::new(run)?
        .scope(shop.refund_order("1182".to_owned(), 42))
        .await?;
    match outcome {
        Outcome::Fresh { value } => println!("outcome refunded: {value}"),
        Outcome::Replay { value, .. } => println!("outcome replayed the other's refund: {value}"),
        other => println!("outcome {other:?}"),
    }
    Ok(())
}

struct Racer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Racer {
    fn start(backend: &str, place: &str, run: &str, provider: &Path) -> Result<Racer, Failure> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["child", backend, place, run])
            .arg(provider)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(Racer {
            child,
            stdin,
            stdout,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn expect(&mut self, word: &str) -> Result<String, Failure> {
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        match line.trim_end().split_once(' ') {
            Some((said, rest)) if said == word => Ok(rest.to_owned()),
            _ if line.trim_end() == word => Ok(String::new()),
            _ => Err(format!("expected `{word}`, the child said `{}`", line.trim_end()).into()),
        }
    }

    fn tell(&mut self, word: &str) -> Result<(), Failure> {
        writeln!(self.stdin, "{word}")?;
        Ok(self.stdin.flush()?)
    }

    fn finish(mut self) -> Result<(), Failure> {
        let status = self.child.wait()?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("a child failed: {status}").into())
        }
    }
}
