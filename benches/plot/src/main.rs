//! Draws the benchmarks' figures, the CSV rows under `benches/results/`
//! (columns in `benches/src/results.rs`), as SVG plots under
//! `benches/plots/`:
//!
//! - `throughput-<store>.svg`: calls per second against clients, one line
//!   per series through the median over runs, with the min–max range as
//!   error bars; anchor series (`pgbench insert`, `redis-benchmark set`,
//!   `plain insert`) dashed.
//! - `size.svg`: each step's latency against the records the store holds
//!   (log scales), median solid and p99 dashed, one panel per store.
//! - `purge.svg`: calls' median and p99 without a purge and during one,
//!   as bars with the min–max range over runs.
//!
//! ```sh
//! cargo run -p idempotent-plot [RESULTS_DIR [PLOTS_DIR]]
//! ```
#![deny(missing_docs)]

use std::collections::BTreeMap;
use std::error::Error;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// The series drawn dashed: the peers each store is measured beside.
const ANCHORS: [&str; 3] = ["pgbench insert", "redis-benchmark set", "plain insert"];

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
];

/// One CSV file's rows, as maps from column to value.
fn read_csv(path: &Path) -> Result<Vec<BTreeMap<String, String>>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", path.display()).into()),
    };
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let Some(header) = lines.next() else {
        return Ok(Vec::new());
    };
    let columns: Vec<&str> = header.split(',').collect();
    Ok(lines
        .map(|line| {
            columns
                .iter()
                .zip(line.split(','))
                .map(|(c, v)| ((*c).to_owned(), v.to_owned()))
                .collect()
        })
        .collect())
}

fn number(row: &BTreeMap<String, String>, column: &str) -> Result<f64> {
    let text = row
        .get(column)
        .ok_or_else(|| format!("a row lacks the column {column}"))?;
    Ok(text
        .parse()
        .map_err(|e| format!("{column} = {text:?}: {e}"))?)
}

fn text<'r>(row: &'r BTreeMap<String, String>, column: &str) -> Result<&'r str> {
    Ok(row
        .get(column)
        .ok_or_else(|| format!("a row lacks the column {column}"))?)
}

/// Median, least and greatest of the values (one per run).
#[derive(Debug, Clone, Copy)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

fn spread(values: &[f64]) -> Spread {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    Spread {
        median,
        min: sorted[0],
        max: sorted[n - 1],
    }
}

/// Appends a row's median and p99, one run's, to the runs' lists.
fn push_latencies(
    (medians, p99s): &mut (Vec<f64>, Vec<f64>),
    row: &BTreeMap<String, String>,
) -> Result<()> {
    medians.push(number(row, "median_us")?);
    p99s.push(number(row, "p99_us")?);
    Ok(())
}

/// Whitens `root`, titles it, and splits what is left into `count` panels
/// side by side.
fn titled_panels<'a>(
    root: &DrawingArea<SVGBackend<'a>, Shift>,
    title: &str,
    count: usize,
) -> Result<Vec<DrawingArea<SVGBackend<'a>, Shift>>> {
    root.fill(&WHITE)?;
    let titled = root.titled(title, ("sans-serif", 20))?;
    Ok(titled.split_evenly((1, count)))
}

/// Draws a chart's legend, in its upper left corner.
fn legend<'a, DB, CT>(chart: &mut ChartContext<'a, DB, CT>) -> Result<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn throughput(results: &Path, plots: &Path) -> Result<Vec<PathBuf>> {
    // store -> series -> clients -> values over runs
    let mut data: BTreeMap<String, BTreeMap<String, BTreeMap<u64, Vec<f64>>>> = BTreeMap::new();
    for row in read_csv(&results.join("throughput.csv"))? {
        data.entry(text(&row, "store")?.to_owned())
            .or_default()
            .entry(text(&row, "series")?.to_owned())
            .or_default()
            .entry(number(&row, "clients")? as u64)
            .or_default()
            .push(number(&row, "per_second")?);
    }
    let mut written = Vec::new();
    for (store, series) in &data {
        let path = plots.join(format!("throughput-{store}.svg"));
        let max_clients = series
            .values()
            .flat_map(|points| points.keys())
            .copied()
            .max()
            .unwrap_or(1)
            .max(2);
        let max_rate = series
            .values()
            .flat_map(|points| points.values().flatten())
            .copied()
            .fold(1.0, f64::max);
        let mut ticks: Vec<f64> = series
            .values()
            .flat_map(|points| points.keys())
            .map(|&c| c as f64)
            .collect();
        ticks.sort_by(f64::total_cmp);
        ticks.dedup();
        let root = SVGBackend::new(&path, (800, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("{store}: calls per second against clients"),
                ("sans-serif", 22),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(
                (0.8f64..max_clients as f64 * 1.25)
                    .log_scale()
                    .with_key_points(ticks),
                0f64..max_rate * 1.1,
            )?;
        chart
            .configure_mesh()
            .x_desc("clients at once")
            .y_desc("per second (median over runs, bars: min–max)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()?;
        for (i, (name, points)) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let style = color.stroke_width(2);
            let spreads: Vec<(f64, Spread)> = points
                .iter()
                .map(|(&clients, values)| (clients as f64, spread(values)))
                .collect();
            let line: Vec<(f64, f64)> = spreads.iter().map(|(x, s)| (*x, s.median)).collect();
            let anchor = ANCHORS.contains(&name.as_str());
            let label = if anchor {
                format!("{name} (anchor)")
            } else {
                name.clone()
            };
            if anchor {
                chart
                    .draw_series(DashedLineSeries::new(line.clone(), 8, 5, style))?
                    .label(label)
                    .legend(move |(x, y)| {
                        EmptyElement::at((x, y))
                            + PathElement::new(vec![(0, 0), (6, 0)], style)
                            + PathElement::new(vec![(10, 0), (20, 0)], style)
                    });
            } else {
                chart
                    .draw_series(LineSeries::new(line.clone(), style))?
                    .label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            }
            chart.draw_series(line.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
            chart.draw_series(spreads.iter().map(|&(x, s)| {
                ErrorBar::new_vertical(x, s.min, s.median, s.max, color.stroke_width(1), 8)
            }))?;
        }
        legend(&mut chart)?;
        root.present()?;
        written.push(path.clone());
    }
    Ok(written)
}

fn size(results: &Path, plots: &Path) -> Result<Vec<PathBuf>> {
    // store -> step -> records -> (medians, p99s) over runs
    type Points = BTreeMap<u64, (Vec<f64>, Vec<f64>)>;
    let mut data: BTreeMap<String, BTreeMap<String, Points>> = BTreeMap::new();
    for row in read_csv(&results.join("size.csv"))? {
        let entry = data
            .entry(text(&row, "store")?.to_owned())
            .or_default()
            .entry(text(&row, "step")?.to_owned())
            .or_default()
            .entry(number(&row, "records")? as u64)
            .or_default();
        push_latencies(entry, &row)?;
    }
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let path = plots.join("size.svg");
    let root = SVGBackend::new(&path, (420 * data.len() as u32, 480)).into_drawing_area();
    let panels = titled_panels(
        &root,
        "Latency against records held: median (solid) and p99 (dashed), median over runs",
        data.len(),
    )?;
    for (panel, (store, steps)) in panels.iter().zip(&data) {
        let all = steps.values().flat_map(|points| points.iter());
        let (mut lo_r, mut hi_r, mut lo_t, mut hi_t) = (f64::MAX, 1f64, f64::MAX, 0f64);
        for (&records, (medians, p99s)) in all {
            lo_r = lo_r.min(records as f64);
            hi_r = hi_r.max(records as f64);
            for &v in medians.iter().chain(p99s) {
                lo_t = lo_t.min(v);
                hi_t = hi_t.max(v);
            }
        }
        let lo_t = (lo_t / 2.0).max(0.01);
        let mut chart = ChartBuilder::on(panel)
            .caption(store, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(
                (lo_r / 3.0..hi_r * 3.0).log_scale(),
                (lo_t..hi_t * 8.0).log_scale(),
            )?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_desc("records held")
            .y_desc("µs")
            .x_label_formatter(&|x| records_label(*x))
            .y_label_formatter(&|y| format!("{y}"))
            .draw()?;
        for (i, (step, points)) in steps.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let style = color.stroke_width(2);
            let medians: Vec<(f64, f64)> = points
                .iter()
                .map(|(&r, (m, _))| (r as f64, spread(m).median))
                .collect();
            let p99s: Vec<(f64, f64)> = points
                .iter()
                .map(|(&r, (_, p))| (r as f64, spread(p).median))
                .collect();
            chart
                .draw_series(LineSeries::new(medians.clone(), style))?
                .label(step.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            chart.draw_series(DashedLineSeries::new(p99s.clone(), 8, 5, style))?;
            chart.draw_series(
                medians
                    .iter()
                    .chain(&p99s)
                    .map(|&p| Circle::new(p, 3, color.filled())),
            )?;
        }
        legend(&mut chart)?;
    }
    root.present()?;
    Ok(vec![path.clone()])
}

fn records_label(records: f64) -> String {
    if records >= 1e6 {
        format!("{}M", records / 1e6)
    } else if records >= 1e3 {
        format!("{}k", records / 1e3)
    } else {
        format!("{records}")
    }
}

fn purge(results: &Path, plots: &Path) -> Result<Vec<PathBuf>> {
    // store -> phase -> (medians, p99s) over runs
    type Phases = BTreeMap<String, (Vec<f64>, Vec<f64>)>;
    let mut data: BTreeMap<String, Phases> = BTreeMap::new();
    for row in read_csv(&results.join("purge.csv"))? {
        let entry = data
            .entry(text(&row, "store")?.to_owned())
            .or_default()
            .entry(text(&row, "phase")?.to_owned())
            .or_default();
        push_latencies(entry, &row)?;
    }
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let path = plots.join("purge.svg");
    let root = SVGBackend::new(&path, (420 * data.len() as u32, 460)).into_drawing_area();
    let panels = titled_panels(
        &root,
        "Calls' latency without a purge and during one (median over runs, bars: min–max)",
        data.len(),
    )?;
    // Bars in order: median without, median during, p99 without, p99 during.
    let phases = ["without", "during"];
    for (panel, (store, by_phase)) in panels.iter().zip(&data) {
        let mut bars = Vec::new();
        for (stat, pick) in [("median", 0usize), ("p99", 1)] {
            for (j, phase) in phases.iter().enumerate() {
                if let Some(values) = by_phase.get(*phase) {
                    let values = if pick == 0 { &values.0 } else { &values.1 };
                    if !values.is_empty() {
                        bars.push((format!("{stat} {phase}"), j, spread(values)));
                    }
                }
            }
        }
        let top = bars.iter().map(|b| b.2.max).fold(1.0, f64::max) / 1000.0;
        let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        let mut chart = ChartBuilder::on(panel)
            .caption(store, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5f64..bars.len() as f64 - 0.5, 0f64..top * 1.15)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE)
            .x_labels(bars.len())
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 0.01 && i >= 0.0 {
                    labels.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc("ms per call")
            .draw()?;
        for (i, (_, phase, s)) in bars.iter().enumerate() {
            let color = COLORS[*phase];
            let x = i as f64;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x - 0.35, 0.0), (x + 0.35, s.median / 1000.0)],
                color.mix(0.8).filled(),
            )))?;
            chart.draw_series(std::iter::once(ErrorBar::new_vertical(
                x,
                s.min / 1000.0,
                s.median / 1000.0,
                s.max / 1000.0,
                BLACK.stroke_width(1),
                10,
            )))?;
        }
    }
    root.present()?;
    Ok(vec![path.clone()])
}

fn main() -> Result<()> {
    let benches = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .ok_or("the plot package lives in benches/plot")?;
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let results = args.next().unwrap_or_else(|| benches.join("results"));
    let plots = args.next().unwrap_or_else(|| benches.join("plots"));
    std::fs::create_dir_all(&plots)?;
    let mut written = throughput(&results, &plots)?;
    written.extend(size(&results, &plots)?);
    written.extend(purge(&results, &plots)?);
    for path in &written {
        println!("wrote {}", path.display());
    }
    if written.is_empty() {
        println!(
            "no figures under {}: run the benchmarks first",
            results.display()
        );
    }
    Ok(())
}
