//! Every feature a manifest declares is in the crate's documented list of
//! features, and the list names no feature that does not exist: a new
//! feature cannot go undocumented. The command-line tool's features are its
//! stores, each the crate's feature of the same name.

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

/// The command-line tool's store features, each turning on the crate's
/// feature of the same name, and all three on by default, beside the
/// gateway's.
const CLI_STORES: [&str; 3] = ["sqlite", "postgres", "redis"];

/// The tool's feature that is no store: the MCP gateway, on by default,
/// turning on the crate's rmcp adapter and metrics and no store.
const CLI_GATEWAY: &str = "gateway";

#[test]
fn the_command_line_tool_has_a_feature_per_store_wired_to_the_crates() {
    let cli: toml::Table = read("cli/Cargo.toml").parse().expect("a manifest");
    let features = cli["features"].as_table().expect("the tool's features");
    let crate_features = declared("Cargo.toml");
    let mut expected: BTreeSet<String> = CLI_STORES.iter().map(|s| s.to_string()).collect();
    expected.insert(CLI_GATEWAY.to_owned());
    assert_eq!(
        declared("cli/Cargo.toml"),
        expected,
        "one feature per store and the gateway's, and no other"
    );
    let default: BTreeSet<&str> = features["default"]
        .as_array()
        .expect("default")
        .iter()
        .filter_map(toml::Value::as_str)
        .collect();
    let mut every: BTreeSet<&str> = CLI_STORES.into();
    every.insert(CLI_GATEWAY);
    assert_eq!(default, every, "every store and the gateway by default");
    let gateway: Vec<&str> = features[CLI_GATEWAY]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(toml::Value::as_str)
        .collect();
    for store in CLI_STORES {
        assert!(
            !gateway.contains(&format!("idempotent-tools/{store}").as_str()),
            "the gateway turns on no store: the store features do"
        );
    }
    for store in CLI_STORES {
        let enables: Vec<&str> = features[store]
            .as_array()
            .expect("a list")
            .iter()
            .filter_map(toml::Value::as_str)
            .collect();
        assert!(
            enables.contains(&format!("idempotent-tools/{store}").as_str()),
            "the tool's `{store}` must turn on the crate's"
        );
        assert!(crate_features.contains(store), "the crate has `{store}`");
    }
    let dependency = &cli["dependencies"]["idempotent-tools"];
    assert!(
        dependency.get("features").is_none(),
        "the tool's dependency on the crate turns on no store of its own: {dependency}"
    );
}

/// Every `cargo install` of the tool that the README and the guide show
/// names only features the tool declares.
#[test]
fn every_install_of_the_tool_in_the_docs_names_its_features() {
    let declared = declared("cli/Cargo.toml");
    let mut docs = vec!["README.md".to_owned()];
    let guide = Path::new(env!("CARGO_MANIFEST_DIR")).join("guide");
    for entry in fs::read_dir(&guide).expect("the guide") {
        let name = entry.expect("an entry").file_name();
        docs.push(format!("guide/{}", name.to_string_lossy()));
    }
    let mut installs = 0;
    for doc in docs {
        for line in read(&doc).lines() {
            let line = line.split('#').next().unwrap_or_default();
            let Some(install) = line.trim().strip_prefix("cargo install ") else {
                continue;
            };
            if !install.contains("idempotent-tools-cli") && !install.contains("--path cli") {
                continue;
            }
            installs += 1;
            let words: Vec<&str> = install.split_whitespace().collect();
            for pair in words.windows(2).filter(|w| w[0] == "--features") {
                for feature in pair[1].split(',') {
                    assert!(
                        declared.contains(feature),
                        "{doc}: `{line}` names `{feature}`, which the tool does not declare"
                    );
                }
            }
        }
    }
    assert!(installs >= 2, "the docs show how to install the tool");
}

#[test]
fn the_published_crates_other_than_these_declare_no_feature() {
    for manifest in ["macros/Cargo.toml", "testing/Cargo.toml"] {
        assert_eq!(
            declared(manifest),
            BTreeSet::new(),
            "{manifest}: a feature here needs a place in the docs, and this test"
        );
    }
}
