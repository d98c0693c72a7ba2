//! Seeds, shrinking, and the report a storm ends with.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use super::checks::{Caller, Violation};
use super::schedule::{Event, Schedule, Shape, Trouble, describe, schedules};

/// The environment variable that replays one schedule by its seed.
pub const SEED_VAR: &str = "STORM_SEED";

/// The seed of schedule `n` of a storm whose first seed is `first`: each
/// schedule has a seed of its own, which replays it alone.
pub(super) fn nth_seed(first: u64, n: u64) -> u64 {
    // splitmix64: neighbouring schedules get unrelated seeds.
    let mut z = first.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A schedule's value tree, from its seed: generated and shrunk the same
/// way on every machine.
pub(super) fn tree(shape: Shape, seed: u64) -> Box<dyn ValueTree<Value = Schedule>> {
    let mut bytes = [0u8; 32];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&nth_seed(seed, i as u64).to_le_bytes());
    }
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    match schedules(shape).new_tree(&mut runner) {
        Ok(tree) => Box::new(tree),
        // The strategy rejects only troubles the shape excludes, and
        // offers others beside each: a rejection every time is a bug here.
        Err(reason) => panic!("storm could not generate a schedule: {reason}"),
    }
}

/// A schedule that broke a promise, shrunk.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The schedule's seed: `STORM_SEED=<seed>` replays it.
    pub seed: u64,
    /// The schedule as generated.
    pub original: Schedule,
    /// The shortest schedule found that still breaks a promise.
    pub shrunk: Schedule,
    /// What the shrunk schedule broke.
    pub violations: Vec<Violation>,
    /// Its callers and what each got.
    pub callers: Vec<Caller>,
    /// How many schedules shrinking ran.
    pub shrink_runs: usize,
    /// Whether this run shrank it: a replayed seed, and a key without its
    /// object, are reported as generated.
    pub shrunk_here: bool,
}

/// What a storm explored, and the first failure it found, shrunk.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Schedules run (shrinking's runs not counted).
    pub schedules: usize,
    /// Callers started in them.
    pub callers: usize,
    /// How many asks each trouble was put on, by name.
    pub troubles: BTreeMap<String, usize>,
    /// Schedules with a lease run out between events.
    pub leases_passed: usize,
    /// Whether the store's leases run out, so vanishing holders, pauses
    /// past the lease and renewal faults were explored.
    pub short_leases: bool,
    /// How long the storm took, shrinking included.
    pub took: Duration,
    /// The first failing schedule, shrunk; `None` if every promise held.
    pub failure: Option<Failure>,
}

impl Report {
    /// Counts a schedule's events.
    pub(super) fn count(&mut self, schedule: &Schedule) {
        self.schedules += 1;
        let mut passed = false;
        for event in &schedule.events {
            match event {
                Event::Ask { trouble, .. } => {
                    self.callers += 1;
                    if *trouble != Trouble::None {
                        *self.troubles.entry(describe(*trouble)).or_default() += 1;
                    }
                }
                Event::Burst { callers, .. } => self.callers += usize::from(*callers),
                Event::PassLease => passed = true,
                Event::Settle => {}
            }
        }
        self.leases_passed += usize::from(passed);
    }

    /// Whether every promise held.
    pub fn is_ok(&self) -> bool {
        self.failure.is_none()
    }

    /// Panics with the report, and the shrunk schedule and its seed, if a
    /// promise was broken.
    #[track_caller]
    pub fn assert_ok(&self) {
        if !self.is_ok() {
            panic!("{self}");
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "storm: {} {}, {} callers, {} ms",
            self.schedules,
            if self.schedules == 1 {
                "schedule"
            } else {
                "schedules"
            },
            self.callers,
            self.took.as_millis()
        )?;
        if !self.short_leases {
            writeln!(
                f,
                "  (the store's leases do not run out, or are long: no vanishing holders, pauses \
                 past the lease, renewal faults or passing leases)"
            )?;
        }
        for (trouble, n) in &self.troubles {
            writeln!(f, "  {n:>5} asks: {trouble}")?;
        }
        if self.short_leases {
            writeln!(
                f,
                "  {:>5} schedules let a lease run out",
                self.leases_passed
            )?;
        }
        let Some(failure) = &self.failure else {
            return writeln!(f, "every promise held");
        };
        if failure.shrunk_here {
            writeln!(
                f,
                "a schedule broke a promise; shrunk from {} to {} events in {} runs:",
                failure.original.events.len(),
                failure.shrunk.events.len(),
                failure.shrink_runs
            )?;
        } else {
            writeln!(f, "a schedule broke a promise (as generated, not shrunk):")?;
        }
        write!(f, "{}", failure.shrunk)?;
        writeln!(f, "what broke:")?;
        for violation in &failure.violations {
            writeln!(f, "  - {violation}")?;
        }
        writeln!(f, "the callers:")?;
        for caller in &failure.callers {
            writeln!(f, "  {caller}")?;
        }
        writeln!(f, "replay it with {SEED_VAR}={}", failure.seed)
    }
}
