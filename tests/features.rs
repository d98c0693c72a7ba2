//! Every feature a manifest declares is in the crate's documented list of
//! features, and the list names no feature that does not exist: a new
//! feature cannot go undocumented.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

fn read(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The features a manifest declares, `default` aside.
fn declared(manifest: &str) -> BTreeSet<String> {
    let manifest: toml::Table = read(manifest).parse().expect("a manifest");
    manifest
        .get("features")
        .and_then(toml::Value::as_table)
        .map(|features| {
            features
                .keys()
                .filter(|name| *name != "default")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// The features the front page's `# Features` table lists: the first
/// column's names, in backticks.
fn documented() -> BTreeSet<String> {
    let front = read("src/lib.rs");
    let table = front
        .split("//! # Features")
        .nth(1)
        .expect("the front page has a `# Features` section")
        .lines()
        .map(|line| line.trim_start_matches("//!").trim())
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2); // the heading and its rule
    table
        .map(|row| {
            let name = row.split('|').nth(1).expect("a row has cells").trim();
            name.trim_matches('`').to_owned()
        })
        .collect()
}

#[test]
fn the_front_page_lists_every_feature_of_the_crate_and_no_other() {
    assert_eq!(documented(), declared("Cargo.toml"));
}

#[test]
fn every_feature_of_the_runtime_is_one_of_the_crate_and_turned_on_by_it() {
    let manifest: toml::Table = read("Cargo.toml").parse().expect("a manifest");
    let features = manifest["features"].as_table().expect("features");
    for feature in declared("runtime/Cargo.toml") {
        let enables: Vec<&str> = features
            .get(&feature)
            .and_then(toml::Value::as_array)
            .unwrap_or_else(|| panic!("the runtime's `{feature}` has no feature of the crate"))
            .iter()
            .filter_map(toml::Value::as_str)
            .collect();
        assert!(
            enables.contains(&format!("idempotent-tools-runtime/{feature}").as_str()),
            "the crate's `{feature}` must turn on the runtime's"
        );
    }
}

#[test]
fn the_published_crates_other_than_these_two_declare_no_feature() {
    for manifest in ["macros/Cargo.toml", "testing/Cargo.toml", "cli/Cargo.toml"] {
        assert_eq!(
            declared(manifest),
            BTreeSet::new(),
            "{manifest}: a feature here needs a place in the docs, and this test"
        );
    }
}
