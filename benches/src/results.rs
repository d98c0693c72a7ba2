//! The figures the benchmarks keep for the plots: rows appended to CSV
//! files under `benches/results/`, which `benches/plot` draws.
//!
//! Each row carries the run it came from (`BENCH_RUN`, or the time the
//! process started), so the plots take medians and ranges over runs.
//!
//! | file | columns |
//! |---|---|
//! | `throughput.csv` | `store,series,clients,run,per_second` |
//! | `size.csv` | `store,records,step,run,median_us,p99_us` |
//! | `purge.csv` | `store,phase,run,median_us,p99_us` |
//! | `memory.csv` | `records,run,bytes_per_record` (the memory store's size, from `--bench size`) |

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// The folder the CSV files are kept in: `benches/results/`.
pub fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results")
}

/// This process's run label: `BENCH_RUN`, or the seconds since the epoch
/// when it was first asked for.
pub fn run_label() -> &'static str {
    static LABEL: OnceLock<String> = OnceLock::new();
    LABEL.get_or_init(|| {
        std::env::var("BENCH_RUN").unwrap_or_else(|_| {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default();
            now.to_string()
        })
    })
}

/// Appends one row to `benches/results/<file>`, writing `header` first when
/// the file is new. The values are written as given, comma-separated: none
/// may hold a comma.
pub fn append(file: &str, header: &str, values: &[&dyn std::fmt::Display]) {
    let path = folder().join(file);
    let new = !path.exists();
    let row = values
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let written = std::fs::create_dir_all(folder()).and_then(|()| {
        let mut out = OpenOptions::new().create(true).append(true).open(&path)?;
        if new {
            writeln!(out, "{header}")?;
        }
        writeln!(out, "{row}")
    });
    if let Err(e) = written {
        eprintln!("could not keep a row in {}: {e}", path.display());
    }
}

/// A throughput point: `series` (for example `fresh call` or
/// `pgbench insert`) on `store` with `clients` at once.
pub fn throughput(store: &str, series: &str, clients: u64, per_second: f64) {
    append(
        "throughput.csv",
        "store,series,clients,run,per_second",
        &[
            &store,
            &series,
            &clients,
            &run_label(),
            &format!("{per_second:.0}"),
        ],
    );
}

/// A latency point against table size: `step` (`claim`, `replay`,
/// `completion`) on `store` holding `records` records.
pub fn size(store: &str, records: u64, step: &str, median_us: f64, p99_us: f64) {
    append(
        "size.csv",
        "store,records,step,run,median_us,p99_us",
        &[
            &store,
            &records,
            &step,
            &run_label(),
            &format!("{median_us:.1}"),
            &format!("{p99_us:.1}"),
        ],
    );
}

/// Calls' latency while a purge runs (`phase` = `during`) or not
/// (`without`).
pub fn purge(store: &str, phase: &str, median_us: f64, p99_us: f64) {
    append(
        "purge.csv",
        "store,phase,run,median_us,p99_us",
        &[
            &store,
            &phase,
            &run_label(),
            &format!("{median_us:.1}"),
            &format!("{p99_us:.1}"),
        ],
    );
}
