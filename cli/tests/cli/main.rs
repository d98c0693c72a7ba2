//! The built `idempotent-tools` binary, end to end, against a real SQLite
//! file, the real Postgres and the real Redis: every command, its JSON, its
//! exit codes, and bad input (an unknown URL scheme, a database without the
//! schema, a key that does not exist).
//!
//! Postgres cases need `IDEMPOTENT_POSTGRES_URL` and Redis cases
//! `IDEMPOTENT_REDIS_URL`: without it they are reported as ignored, never as
//! passed, and in CI they fail. Each Postgres case gets a schema of its own,
//! named in the URL's `search_path`, dropped afterwards; each Redis case a
//! prefix of its own, named in the URL's `prefix` parameter, emptied
//! afterwards.

// The workspace's harness for cases that need a server.
#[path = "../../../tests/harness/mod.rs"]
mod harness;

// The workspace's local Redis Cluster of six `redis-server` processes.
#[path = "../../../tests/redis_cluster/mod.rs"]
mod redis_cluster;

mod commands;
mod docs;
mod gateway;
mod postgres;
mod records;
mod redis;
mod run;
mod sqlite;
mod usage;

fn main() {
    let mut trials = trials!(always;
        sqlite::every_command_on_a_sqlite_file,
        sqlite::stats_and_purge_on_a_sqlite_file,
        usage::help_shows_the_worked_example_and_the_exit_codes,
        usage::an_unknown_url_scheme_is_bad_usage,
        sqlite::a_file_that_does_not_exist_is_bad_usage_and_is_not_created,
        sqlite::a_database_without_the_schema_is_bad_usage_and_gets_none,
        sqlite::a_file_that_is_not_a_database_fails_and_says_why,
        usage::bad_arguments_are_bad_usage,
        usage::text_that_is_no_key_is_bad_usage_and_says_why,
        postgres::an_unreachable_server_fails_and_says_what_to_check,
        postgres::a_password_in_the_url_never_reaches_a_message,
        redis::an_unreachable_redis_server_fails_and_says_what_to_check,
        redis::a_redis_url_it_cannot_read_is_bad_usage,
        redis::a_redis_password_never_reaches_a_message,
        docs::every_invocation_the_docs_show_runs,
    );
    trials.extend(trials!(plain; docs::a_synopsis_runs_bare_and_with_each_alternative));
    trials.extend(trials!(postgres::URL;
        postgres::every_command_on_postgres,
        postgres::stats_and_purge_on_postgres,
        postgres::a_postgres_database_without_the_schema_is_bad_usage_and_gets_none,
        postgres::a_postgres_schema_newer_than_the_tool_is_refused,
        postgres::a_key_that_does_not_exist_on_postgres_is_not_found,
        postgres::a_database_that_does_not_exist_fails_and_says_what_to_check,
        postgres::the_urls_schema_parameter_names_the_stores_schema,
    ));
    trials.extend(trials!(redis::URL;
        redis::every_command_on_redis,
        redis::stats_and_purge_on_redis,
        redis::a_key_that_does_not_exist_on_redis_is_not_found,
    ));
    trials.push(redis::cluster_trial());
    trials.extend([
        gateway::trial(
            "gateway_three_cases_over_stdio",
            gateway::three_cases_over_stdio_refund_once_for_every_server_and_client,
        ),
        gateway::trial(
            "gateway_three_cases_over_http",
            gateway::three_cases_over_http_refund_once_and_pass_the_key_as_a_header,
        ),
        gateway::trial(
            "gateway_killed_mid_call_sqlite",
            gateway::a_gateway_killed_mid_call_does_not_refund_twice_on_sqlite,
        ),
        gateway::trial_postgres(
            "gateway_killed_mid_call_postgres",
            gateway::a_gateway_killed_mid_call_does_not_refund_twice_on_postgres,
        ),
        gateway::trial(
            "gateway_stateless_http",
            gateway::a_stateless_gateway_scopes_by_what_each_request_names,
        ),
        gateway::trial(
            "gateway_principals_and_401",
            gateway::principals_are_isolated_and_a_wrong_token_gets_401,
        ),
        gateway::trial(
            "gateway_marks_and_passes_through",
            gateway::guarded_tools_are_marked_and_the_rest_passes_through,
        ),
        gateway::trial(
            "gateway_upstream_not_starting",
            gateway::an_upstream_that_does_not_start_fails_with_a_clear_message,
        ),
        gateway::trial(
            "gateway_progress_and_cancellation",
            gateway::progress_and_cancellation_pass_through,
        ),
        gateway::trial(
            "gateway_bad_configurations",
            gateway::bad_configurations_are_refused_at_start_with_what_to_write,
        ),
        gateway::trial(
            "gateway_recheck_on_list_changed",
            gateway::a_tool_whose_schema_changes_is_refused_after_the_recheck,
        ),
    ]);
    harness::main(trials);
}
