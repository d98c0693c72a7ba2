//! The tool on a SQLite file: every command, and files it must refuse
//! without creating or changing them.

use std::path::{Path, PathBuf};

use idempotent_tools::SqliteStore;

use crate::commands::{every_command, stats_and_purge};
use crate::run::cli;

/// A SQLite file holding the schema, in a directory removed afterwards.
pub fn sqlite_file() -> (tempfile::TempDir, PathBuf, SqliteStore) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("claims.db");
    let store = SqliteStore::open(&path).expect("open");
    (dir, path, store)
}

/// The path as `--store` takes it.
pub fn text(path: &Path) -> String {
    path.to_str().expect("a UTF-8 path").to_owned()
}

pub async fn every_command_on_a_sqlite_file() {
    let (_dir, path, store) = sqlite_file();
    every_command(&store, &text(&path)).await;
}

pub async fn stats_and_purge_on_a_sqlite_file() {
    let (_dir, path, store) = sqlite_file();
    stats_and_purge(&store, &format!("sqlite://{}", text(&path))).await;
}

pub async fn a_file_that_does_not_exist_is_bad_usage_and_is_not_created() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("typo.db");
    let out = cli(&text(&path), &["stats"]).expect(2);
    assert!(
        out.stderr.contains("there is no SQLite file"),
        "{}",
        out.stderr
    );
    assert!(!path.exists(), "the tool created {path:?}");
}

pub async fn a_database_without_the_schema_is_bad_usage_and_gets_none() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("other.db");
    // An empty file is an empty SQLite database.
    std::fs::write(&path, b"").expect("an empty database file");
    let out = cli(&text(&path), &["list"]).expect(2);
    assert!(
        out.stderr.contains("holds no idempotent-tools schema"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("never does"), "{}", out.stderr);
    // Still nothing there: opening it with create(false) again fails too.
    assert!(
        matches!(
            SqliteStore::builder(&path).create(false).open(),
            Err(idempotent_tools::store::StoreError::MissingSchema)
        ),
        "the tool created a schema"
    );
}

pub async fn a_file_that_is_not_a_database_fails_and_says_why() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("notes.txt");
    std::fs::write(
        &path,
        "not a database, just text long enough to have a header",
    )
    .expect("write");
    let out = cli(&text(&path), &["list"]).expect(1);
    assert!(
        out.stderr.starts_with("error: could not open the store"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("caused by: "), "{}", out.stderr);
}
