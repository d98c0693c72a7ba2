//! What only the Postgres store does: asynchronous completions and its
//! latency figure here; round trips counted on the wire in [`round_trips`],
//! LISTEN/NOTIFY in [`notify`], schema versions and migrations in
//! [`schema`], a server that is down or refuses in [`errors`], a server
//! that goes away and comes back in [`outage`], a holder cut off from it
//! mid-action in [`partition`], a server of the test's own
//! for the suite's restart cases in [`server`].

use std::sync::Arc;
use std::time::Duration;

use idempotent_tools::store::{ClaimAnswer, Store};
use idempotent_tools_testing::conformance::kit::{
    self, claimed, done, fresh_run, refund_key, request,
};

use crate::harness::Trial;
use crate::{Schema, URL};

mod batch;
mod errors;
mod notify;
mod outage;
mod partition;
mod round_trips;
mod schema;
pub mod server;
pub mod transactions;

pub fn trials() -> Vec<Trial> {
    let mut trials = crate::trials!(plain;
        schema::the_schema_a_dba_applies_by_hand_is_the_one_migrate_applies,
        schema::a_schema_name_that_is_not_a_plain_identifier_is_refused,
    );
    trials.extend(crate::trials!(URL;
        round_trips::a_claim_a_completion_a_replay_and_a_wait_take_one_round_trip_each,
        batch::each_caller_in_a_coalesced_batch_gets_its_own_answer,
        batch::many_guarded_calls_coalesced_act_once_per_key,
        batch::a_step_the_server_refuses_fails_only_its_caller,
        batch::a_caller_dropped_while_queued_or_on_the_wire_leaves_no_claim,
        batch::members_of_a_refused_batch_go_again_alone_at_once,
        measured_latency_of_a_guarded_call_on_the_local_server,
        notify::a_waiter_on_another_connection_is_woken_by_notify_not_by_polling,
        notify::only_a_completion_a_waiter_marked_notifies,
        asynchronous_completions_record_and_replay_like_synchronous_ones,
        notify::a_waiter_outlives_its_listening_connection_being_killed,
        notify::a_store_on_an_applications_pool_without_a_listener_polls_and_still_replays,
        schema::a_missing_schema_says_to_migrate_and_nothing_runs,
        schema::migrating_from_several_processes_at_once_succeeds,
        schema::a_migration_waits_for_the_one_ahead_of_it_past_the_roles_lock_timeout,
        schema::an_upgrade_behind_a_long_read_gives_up_at_the_roles_lock_timeout,
        schema::a_version_1_schema_is_upgraded_in_place_and_keeps_its_records,
        schema::a_schema_newer_than_the_code_is_refused_and_left_unchanged,
        schema::a_schema_missing_is_not_created_by_check_schema,
        schema::two_stores_in_two_schemas_of_one_database_never_see_each_others_records,
        schema::a_store_keeps_working_without_a_schema_and_after_moving_into_one,
        errors::a_server_error_names_the_statement_its_sqlstate_and_the_servers_message,
        errors::a_lock_held_past_lock_timeout_delays_a_claim_and_a_replay_instead_of_failing_them,
        errors::a_lock_held_past_the_calls_wait_is_contended_and_nothing_runs,
        errors::a_serialization_failure_on_a_completion_is_tried_again_and_recorded,
        errors::a_deadlock_on_a_completion_is_tried_again_and_recorded,
        outage::a_call_made_while_the_server_is_away_goes_through_once_it_is_back,
        outage::a_claim_whose_reply_was_lost_finds_its_claim_its_own_when_sent_again,
        outage::a_batch_whose_reply_was_lost_finds_each_claim_its_own_when_sent_again,
        transactions::a_duplicate_waits_for_the_commit_and_replays_the_committed_result,
        transactions::a_failing_action_leaves_no_write_and_a_retry_acts_once,
        transactions::a_stale_holder_whose_claim_was_taken_over_has_its_write_rolled_back,
        transactions::a_process_killed_between_its_write_and_its_commit_leaves_nothing_and_the_retry_acts_once,
        outage::a_call_dropped_while_its_steps_retry_leaves_no_claim_stuck_and_no_result_lost,
        outage::a_completion_whose_server_stays_away_past_the_lease_is_not_recorded_and_says_the_action_ran,
        partition::a_holder_cut_off_mid_action_loses_its_claim_and_the_provider_refunds_once,
        partition::a_holder_cut_off_mid_action_leaves_the_outcome_unknown_under_report_unknown,
        partition::a_holder_cut_off_mid_action_is_verified_where_the_provider_takes_no_key,
        transactions::a_call_dropped_while_its_commit_goes_through_is_replayed,
        transactions::a_call_dropped_while_its_commit_fails_leaves_nothing_and_the_retry_acts,
        transactions::the_attribute_form_commits_the_write_with_its_record_and_replays_it,
    ));
    trials.extend(crate::trials!(always;
        batch::a_batch_whose_server_is_away_fails_each_caller_once_not_one_by_one,
        errors::a_server_that_is_down_is_unavailable_and_nothing_runs,
        errors::an_unreachable_server_prints_each_cause_once,
    ));
    let initdb = ("initdb", server::Server::can_start());
    trials.extend(
        crate::trials!(URL, initdb; server::measured_first_calls_after_a_restart)
            .into_iter()
            .map(|trial| trial.with_ignored_flag(true)),
    );
    trials
}

async fn measured_latency_of_a_guarded_call_on_the_local_server() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    kit::measure_latency_of_a_guarded_call(Arc::new(schema.store().await)).await;
}

async fn asynchronous_completions_record_and_replay_like_synchronous_ones() {
    let Some(schema) = Schema::new().await else {
        return;
    };
    let store = schema
        .store_with(|b| b.asynchronous_completions(true))
        .await;
    let key = refund_key(&fresh_run(), "1182");
    let claim = claimed(&store, request(&key, Duration::from_secs(30))).await;
    store.complete(&claim, done("7")).await.expect("complete");
    let again = store
        .claim(request(&key, Duration::from_secs(30)))
        .await
        .expect("claim");
    assert!(matches!(again, ClaimAnswer::Completed(_)), "{again:?}");
}
