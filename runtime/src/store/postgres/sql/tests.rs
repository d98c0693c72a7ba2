//! Every statement, as rendered, against a golden file: a change to the SQL
//! shows as a diff of `statements.sql`. Set `IDEMPOTENT_BLESS_SQL=1` to
//! write the file anew after a deliberate change. The Postgres test suite
//! runs each one against a real server.

use super::*;
use crate::store::postgres_store::NOTIFY_CHANNEL;

const STATEMENTS: [Statement; 19] = [
    SCHEMA_VERSION_OF,
    NEWEST_VERSION,
    MIGRATE_LOCK,
    CLAIM,
    CLAIM_MANY,
    COMPLETE,
    COMPLETE_ASYNC,
    COMPLETE_MANY,
    COMPLETE_MANY_ASYNC,
    RELEASE,
    MARK_WAITING,
    RENEW,
    HELD_BY,
    PURGE,
    FORGET,
    RESOLVE,
    LIST,
    INSPECT,
    COUNT,
];

fn rendered() -> String {
    let mut all: Vec<String> = STATEMENTS
        .iter()
        .map(|s| format!("-- {}\n{};\n", s.name, s.sql))
        .collect();
    all.push(format!("-- listen\n{};\n", listen(NOTIFY_CHANNEL)));
    all.join("\n")
}

#[test]
fn each_statement_renders_as_the_golden_file_says() {
    let golden = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/store/postgres/sql/statements.sql"
    );
    let rendered = rendered();
    if std::env::var_os("IDEMPOTENT_BLESS_SQL").is_some() {
        std::fs::write(golden, &rendered).expect("write the golden file");
    }
    assert_eq!(rendered, include_str!("statements.sql"));
}

#[test]
fn notifications_go_to_the_channel_the_listener_listens_on() {
    for statement in [
        COMPLETE,
        COMPLETE_ASYNC,
        COMPLETE_MANY,
        COMPLETE_MANY_ASYNC,
        RELEASE,
        FORGET,
        RESOLVE,
    ] {
        assert!(
            !statement.sql.contains("pg_notify('"),
            "`{}` spells its channel by hand",
            statement.name
        );
        assert!(statement.sql.contains("pg_notify($"), "{}", statement.name);
    }
    assert_eq!(listen(NOTIFY_CHANNEL), "LISTEN idempotent_claims");
}
