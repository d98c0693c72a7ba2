//! Every statement, as rendered, against a golden file: a change to the SQL
//! shows as a diff of `statements.sql`. Set `IDEMPOTENT_BLESS_SQL=1` to
//! write the file anew after a deliberate change.

use super::*;

const STATEMENTS: [(&str, &str); 17] = [
    ("claim", CLAIM),
    ("peek completed", PEEK_COMPLETED),
    ("complete", COMPLETE),
    ("release", RELEASE),
    ("renew", RENEW),
    ("held by", HELD_BY),
    ("purge", PURGE),
    ("forget", FORGET),
    ("resolve applied", RESOLVE_APPLIED),
    ("resolve not applied", RESOLVE_NOT_APPLIED),
    ("resolve found", RESOLVE_FOUND),
    ("held", HELD),
    ("list", LIST),
    ("inspect", INSPECT),
    ("count", COUNT),
    ("has table", HAS_TABLE),
    ("newest version", NEWEST_VERSION),
];

fn rendered() -> String {
    STATEMENTS
        .iter()
        .map(|(name, sql)| format!("-- {name}\n{sql};\n"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn each_statement_renders_as_the_golden_file_says() {
    let golden = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/store/sqlite/sql/statements.sql"
    );
    let rendered = rendered();
    if std::env::var_os("IDEMPOTENT_BLESS_SQL").is_some() {
        std::fs::write(golden, &rendered).expect("write the golden file");
    }
    assert_eq!(rendered, include_str!("statements.sql"));
}

#[test]
fn each_statement_prepares_against_the_current_schema() {
    let conn = rusqlite::Connection::open_in_memory().expect("an in-memory database");
    for script in super::super::open::MIGRATIONS {
        conn.execute_batch(script).expect("the schema applies");
    }
    for (name, sql) in STATEMENTS {
        if let Err(err) = conn.prepare(sql) {
            panic!("`{name}` does not prepare: {err}");
        }
    }
}
