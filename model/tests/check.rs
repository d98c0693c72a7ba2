//! The three callers' system, explored exhaustively: every property holds
//! in every reachable state, every example is reached, and a protocol with
//! a planted mistake is caught.
//!
//! The counts of states are exact: a change to the model that changes them
//! changes the figures in the crate's documentation too.

use std::time::Instant;

use idempotent_tools_model::callers::{Callers, Lookup, Takeover};
use idempotent_tools_model::store::{Flaw, Leases};
use stateright::{Checker, HasDiscoveries, Model};

/// Explores every state of `system`, checks every property, and returns
/// how many states there are.
fn explore(system: Callers) -> usize {
    let name = format!("{system:?}");
    let started = Instant::now();
    let checker = system.checker().spawn_bfs().join();
    let states = checker.unique_state_count();
    println!(
        "{name}: {states} states, {} steps deep, in {:.1?}",
        checker.max_depth(),
        started.elapsed()
    );
    checker.assert_properties();
    states
}

/// Explores `system` until a property fails, and returns the names of the
/// properties that failed.
fn counterexamples(system: Callers) -> Vec<&'static str> {
    let checker = system
        .checker()
        .finish_when(HasDiscoveries::AnyFailures)
        .spawn_bfs()
        .join();
    let failed: Vec<_> = checker
        .model()
        .properties()
        .into_iter()
        .filter(|p| p.expectation.discovery_is_failure())
        .map(|p| p.name)
        .filter(|name| checker.discovery(name).is_some())
        .collect();
    for name in &failed {
        if let Some(path) = checker.discovery(name) {
            println!("{name}: {:?}", path.into_actions());
        }
    }
    failed
}

#[test]
fn durable_stores_under_the_rerun_policy() {
    let states = explore(Callers::new(Leases::Expire, Takeover::Rerun));
    assert_eq!(states, 608_980);
}

#[test]
fn durable_stores_under_the_report_unknown_policy() {
    let states = explore(Callers::new(Leases::Expire, Takeover::ReportUnknown));
    assert_eq!(states, 181_300);
}

#[test]
fn the_memory_store_whose_leases_never_run_out() {
    let states = explore(Callers::new(Leases::Never, Takeover::Rerun));
    assert_eq!(states, 4_060);
}

#[test]
fn a_caller_with_other_arguments() {
    let states = explore(Callers::new(Leases::Expire, Takeover::Rerun).with_args([0, 0, 1]));
    assert_eq!(states, 122_436);
}

/// A lookup whose answers lag a tick behind the effects, with a settle time
/// of a tick.
const LAGGING: Lookup = Lookup { lag: 1, settle: 1 };

/// A durable store whose actions may fail in a way that may have taken
/// effect, asking `lookup` if there is one. Its holders renew no lease:
/// renewal is checked by the other systems, and here would only add
/// states.
fn unknown_failures(takeover: Takeover, lookup: Option<Lookup>) -> Callers {
    Callers {
        renewals: 0,
        ..Callers::new(Leases::Expire, takeover).with_unknown_failures(lookup)
    }
}

#[test]
fn unknown_failures_verified_under_the_verify_policy() {
    let states = explore(unknown_failures(Takeover::Verify, Some(LAGGING)));
    assert_eq!(states, 663_469);
}

#[test]
fn unknown_failures_without_a_lookup() {
    let states = explore(unknown_failures(Takeover::ReportUnknown, None));
    assert_eq!(states, 77_452);
}

/// A lookup that lags a tick, with a settle time that also covers a
/// request taken up by the provider a tick after its failure returned.
const LATE: Lookup = Lookup { lag: 1, settle: 2 };

#[test]
fn late_requests_verified_with_a_settle_time_that_covers_them() {
    let states = explore(unknown_failures(Takeover::Verify, Some(LATE)).with_late_requests(1));
    assert_eq!(states, 615_835);
}

#[test]
fn a_completion_that_ignores_the_fence_is_caught() {
    let failed = counterexamples(
        Callers::new(Leases::Expire, Takeover::Rerun).with_flaw(Flaw::CompletionIgnoresFence),
    );
    assert!(
        failed.contains(&"the record is its current holder's"),
        "{failed:?}"
    );
}

#[test]
fn a_claim_that_checks_then_acts_is_caught() {
    let failed =
        counterexamples(Callers::new(Leases::Never, Takeover::Rerun).with_flaw(Flaw::CheckThenAct));
    assert!(
        failed.contains(&"at most one effect, but after a takeover"),
        "{failed:?}"
    );
}

#[test]
fn a_holder_that_leaves_its_claim_behind_is_caught() {
    let failed = counterexamples(
        Callers::new(Leases::Never, Takeover::Rerun).with_flaw(Flaw::NoReleaseOnDrop),
    );
    assert!(
        failed.contains(&"a held claim has a holder, or one that crashed"),
        "{failed:?}"
    );
}

#[test]
fn a_blind_rerun_acts_twice_where_the_provider_takes_no_key() {
    let failed = counterexamples(unknown_failures(Takeover::Rerun, Some(LAGGING)));
    assert!(
        failed.contains(&"no second effect when the provider can be asked"),
        "{failed:?}"
    );
}

#[test]
fn a_not_applied_read_before_the_settle_time_is_caught() {
    let failed = counterexamples(
        unknown_failures(Takeover::Verify, Some(LAGGING)).with_flaw(Flaw::UnsettledNotApplied),
    );
    assert!(
        failed.contains(&"no second effect when the provider can be asked"),
        "{failed:?}"
    );
}

#[test]
fn a_settle_time_shorter_than_the_lookups_lag_is_caught() {
    let failed = counterexamples(unknown_failures(
        Takeover::Verify,
        Some(Lookup { lag: 2, settle: 1 }),
    ));
    assert!(
        failed.contains(&"no second effect when the provider can be asked"),
        "{failed:?}"
    );
}

#[test]
fn a_settle_time_that_does_not_cover_a_late_request_is_caught() {
    let failed =
        counterexamples(unknown_failures(Takeover::Verify, Some(LAGGING)).with_late_requests(1));
    assert!(
        failed.contains(&"no second effect when the provider can be asked"),
        "{failed:?}"
    );
}

#[test]
fn an_unknown_failure_that_releases_is_caught() {
    let failed = counterexamples(
        unknown_failures(Takeover::Verify, Some(LAGGING)).with_flaw(Flaw::ReleaseOnUnknown),
    );
    assert!(
        failed.contains(&"an unknown failure is never released without a \"not applied\""),
        "{failed:?}"
    );
}
