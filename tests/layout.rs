//! The runtime's layout, read from its source: its modules import one
//! another in one direction only, and the root names what a tool author
//! writes and no more.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

#[path = "layout/files.rs"]
mod files;

fn runtime_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime/src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read the runtime's source") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file, without its comments (doc links name other modules
/// without importing them).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each top-level module of the runtime and the top-level modules its code
/// names through `crate::`, in paths and in `use crate::{..}` groups.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = runtime_src();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src");
        let first = relative.components().next().expect("a component");
        let module = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        // The root and the public doors only re-export.
        if ["lib", "call", "records"].contains(&module.as_str()) {
            continue;
        }
        let code = code(&fs::read_to_string(&file).expect("read a source file"));
        let mut named = BTreeSet::new();
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find("};").unwrap_or(group.len())];
                for piece in group.split([',', '{', ' ', '\n']) {
                    if let Some((head, _)) = piece.trim().split_once("::") {
                        named.insert(head.to_owned());
                    }
                }
            } else {
                let head: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !head.is_empty() && rest[head.len()..].starts_with("::") {
                    named.insert(head);
                }
            }
        }
        named.remove(&module);
        imports.entry(module).or_default().extend(named);
    }
    imports
}

#[test]
fn the_runtime_modules_import_one_another_in_one_direction() {
    let imports = imports();
    for start in imports.keys() {
        let mut seen = BTreeSet::new();
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((module, path)) = stack.pop() {
            for next in imports.get(&module).into_iter().flatten() {
                let mut path = path.clone();
                path.push(next.clone());
                assert_ne!(next, start, "an import circle: {}", path.join(" -> "));
                if seen.insert(next.clone()) {
                    stack.push((next.clone(), path));
                }
            }
        }
    }
}

#[test]
fn no_vocabulary_module_imports_the_guards_error() {
    let imports = imports();
    for module in ["key", "run", "fingerprint", "call_id", "free_text", "store"] {
        assert!(
            !imports[module].contains("error"),
            "`{module}` imports the guard's error: {:?}",
            imports[module]
        );
    }
}

#[test]
fn the_root_names_what_a_tool_author_writes() {
    let lib = fs::read_to_string(runtime_src().join("lib.rs")).expect("read lib.rs");
    let mut names = BTreeSet::new();
    for statement in code(&lib).split(';') {
        let statement = statement.trim();
        let Some(path) = statement.rsplit("\npub use ").next() else {
            continue;
        };
        if !statement.contains("pub use ") {
            continue;
        }
        let tail = path.trim_start_matches("pub use ");
        let items = match tail.find('{') {
            Some(open) => tail[open + 1..].trim_end_matches('}').to_owned(),
            None => tail.rsplit("::").next().unwrap_or(tail).to_owned(),
        };
        for item in items.split(',') {
            let item = item.trim();
            if !item.is_empty() {
                names.insert(item.rsplit("::").next().unwrap_or(item).to_owned());
            }
        }
    }
    let expected: BTreeSet<String> = [
        "CallId",
        "Classify",
        "Error",
        "Failure",
        "FreeText",
        "KeyPart",
        "MemoryStore",
        "Outcome",
        "PostgresStore",
        "RedisStore",
        "Run",
        "RunError",
        "SqliteStore",
        "Verified",
        "current_key",
        "reqwest",
        "rig",
        "rmcp",
        "set_default_store",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    // Besides these, the root holds the attribute and the derive, and the
    // modules `call`, `store` and `records`; `rig` and `rmcp` are the
    // framework adapters' modules.
    assert_eq!(names, expected);
}

fn crate_src(package: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(package)
        .join("src")
}

#[test]
fn no_two_files_import_each_other() {
    let mut found = Vec::new();
    for package in ["runtime", "testing"] {
        let graph = files::Graph::read(&crate_src(package));
        let circles = files::circles(&graph.edges);
        let shown: Vec<String> = circles
            .iter()
            .map(|group| {
                let names: Vec<String> = group
                    .iter()
                    .map(|f| {
                        let to: Vec<String> = graph.edges[f]
                            .iter()
                            .filter(|(t, _)| group.contains(t))
                            .map(|(t, why)| format!("{} ({why})", t.display()))
                            .collect();
                        format!("{} -> [{}]", f.display(), to.join(", "))
                    })
                    .collect();
                format!("{{{}}}", names.join("; "))
            })
            .collect();
        if !circles.is_empty() {
            found.push(format!(
                "files of `{package}/src` that import one another:\n{}",
                shown.join("\n")
            ));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// A source file's lines before its unit tests.
fn lines_before_tests(text: &str) -> usize {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end].lines().count()
}

#[test]
fn each_source_file_holds_one_job_and_stays_short() {
    const MOST: usize = 480;
    let mut long = Vec::new();
    for package in ["runtime", "testing"] {
        let mut files = Vec::new();
        rust_files(&crate_src(package), &mut files);
        for file in files {
            let text = fs::read_to_string(&file).expect("read a source file");
            let lines = lines_before_tests(&text);
            if lines > MOST {
                long.push(format!("{} ({lines} lines)", file.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "over {MOST} lines before their unit tests: split them by job:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_guard_names_no_durable_store() {
    let mut files = Vec::new();
    rust_files(&runtime_src().join("guard"), &mut files);
    for file in files {
        let code = code(&fs::read_to_string(&file).expect("read a source file"));
        for store in [
            "SqliteStore",
            "PostgresStore",
            "RedisStore",
            "sqlite_store",
            "postgres_store",
            "redis_store",
            "store::sqlite",
            "store::postgres",
            "store::redis",
            "store::durable",
            "rusqlite",
            "tokio_postgres",
        ] {
            assert!(
                !code.contains(store),
                "{} names `{store}`: a store's part of the guard's work belongs in the \
                 store's folder, behind a seam in `store`",
                file.display()
            );
        }
    }
}
