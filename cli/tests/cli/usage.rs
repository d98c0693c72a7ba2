//! Bad usage, whatever the store: the help, arguments and URLs the tool
//! refuses, each with a message that says why.

use std::process::Command;

use crate::run::{BIN, cli};
use crate::sqlite::{sqlite_file, text};

pub async fn help_shows_the_worked_example_and_the_exit_codes() {
    let out = Command::new(BIN).arg("--help").output().expect("run");
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for needed in [
        "idempotent-tools pending",
        "resolve run-7f3a:refund:1182 --applied '{\"id\":\"re_1\"}'",
        "resolve run-7f3a:refund:1182 --not-applied",
        "Exit codes",
        "3  no record under the key",
        "IDEMPOTENT_STORE",
    ] {
        assert!(help.contains(needed), "`{needed}` in:\n{help}");
    }
}

pub async fn an_unknown_url_scheme_is_bad_usage() {
    let out = cli("mysql://db.internal/shop", &["list"]).expect(2);
    assert!(
        out.stderr.contains("unknown store URL scheme `mysql://`"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("postgres:// URL"), "{}", out.stderr);
}

pub async fn bad_arguments_are_bad_usage() {
    let (_dir, path, _store) = sqlite_file();
    let target = text(&path);
    let age = cli(&target, &["list", "--older-than", "3 hours"]).expect(2);
    assert!(age.stderr.contains("is not an age"), "{}", age.stderr);
    cli(&target, &["list", "--state", "stuck"]).expect(2);
    cli(&target, &["list", "--limit", "0"]).expect(2);
    let none = cli("", &["list"]).expect(2);
    assert!(none.stderr.contains("no store given"), "{}", none.stderr);
}

pub async fn text_that_is_no_key_is_bad_usage_and_says_why() {
    let (_dir, path, _store) = sqlite_file();
    let target = text(&path);
    for args in [
        ["show", "run-1:refund:<order_id>"],
        ["forget", "run-1:refund:50%"],
    ] {
        let out = cli(&target, &args).expect(2);
        assert!(
            out.stderr.contains("is not a key that a template renders"),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr.contains("help: give the key in full"),
            "{}",
            out.stderr
        );
        // The reason is printed once, not again as a cause.
        assert!(!out.stderr.contains("caused by"), "{}", out.stderr);
    }
}
