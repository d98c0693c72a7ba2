//! Every section of the README that gives `Cargo.toml` lines builds as a
//! reader would build it: each Rust block under those lines becomes a new
//! crate of its own, with those dependencies and nothing else, outside this
//! workspace, and compiles without a warning.
//!
//! The README's table of stores is the guide's, cut to its first three
//! columns: a test holds the two together.
//!
//! The crates resolve `idempotent-tools` to this checkout (a
//! `[patch.crates-io]`), at the versions of this workspace's `Cargo.lock`,
//! offline. They share one target directory under `target/tmp`, so only
//! the first run builds their dependencies.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A project a reader would make from one section.
struct Project {
    name: String,
    section: String,
    dependencies: String,
    code: String,
}

/// A fenced block: its info string and its text.
fn blocks(section: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        out.push((info.trim().to_owned(), body.join("\n") + "\n"));
    }
    out
}

/// Rust code as rustdoc compiles it: lines hidden with `# ` shown.
fn unhidden(code: &str) -> String {
    code.lines()
        .map(|line| match line.trim_start() {
            "#" => "",
            trimmed if trimmed.starts_with("# ") => &trimmed[2..],
            _ => line,
        })
        .fold(String::new(), |mut out, line| {
            out.push_str(line);
            out.push('\n');
            out
        })
}

/// Each Rust block that follows a `[dependencies]` block in its section.
fn projects(readme: &str) -> Vec<Project> {
    let mut projects = Vec::new();
    for section in readme.split("\n## ") {
        let title = section.lines().next().unwrap_or_default();
        let title = title.trim_start_matches('#').trim().to_owned();
        let mut dependencies = None;
        for (info, text) in blocks(section) {
            let compiled = info == "rust" || info.starts_with("rust,") && !info.contains("ignore");
            if info == "toml" && text.trim_start().starts_with("[dependencies]") {
                dependencies = Some(text);
            } else if compiled && let Some(dependencies) = &dependencies {
                let slug: String = title
                    .to_lowercase()
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                    .collect();
                projects.push(Project {
                    name: format!("readme-{slug}-{}", projects.len()),
                    section: title.clone(),
                    dependencies: dependencies.clone(),
                    code: unhidden(&text),
                });
            }
        }
    }
    projects
}

/// The projects of a file other than the README, their crates named
/// after `name`.
fn projects_named(text: &str, name: &str) -> Vec<Project> {
    let mut projects = projects(text);
    for (n, project) in projects.iter_mut().enumerate() {
        project.name = format!("{name}-{n}");
    }
    projects
}

/// The workspace's root, two folders above this package.
fn workspace() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// Writes `project` as a crate in `dir`: a binary if it has a `main`, else
/// a library.
fn write(project: &Project, dir: &Path) {
    let src = dir.join("src");
    fs::create_dir_all(&src).expect("a directory for the crate");
    let mut manifest = format!(
        "[package]\nname = \"{}\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n{}\n\
         [workspace]\n\n[patch.crates-io]\n",
        project.name, project.dependencies
    );
    for (name, path) in [
        ("idempotent-tools", "."),
        ("idempotent-tools-testing", "testing"),
    ] {
        if !project.dependencies.contains(&format!("\n{name} ")) {
            continue;
        }
        let path = workspace().join(path);
        writeln!(
            manifest,
            "{name} = {{ path = {:?} }}",
            path.display().to_string()
        )
        .expect("write to a string");
    }
    fs::write(dir.join("Cargo.toml"), manifest).expect("write the manifest");
    fs::copy(workspace().join("Cargo.lock"), dir.join("Cargo.lock")).expect("copy the lock file");
    let file = if project.code.contains("fn main(") {
        "main.rs"
    } else {
        "lib.rs"
    };
    let _ = fs::remove_file(src.join("main.rs"));
    let _ = fs::remove_file(src.join("lib.rs"));
    fs::write(src.join(file), &project.code).expect("write the code");
}

/// Checks the crate in `dir`; `Err` with cargo's output if it fails or warns.
fn build(dir: &Path, target: &Path) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args([
            // A check finds every error and warning a build would, without
            // the code generation and the linking, which the README's
            // examples get as the frameworks package's doctests.
            "check",
            "--offline",
            "--all-targets",
            "--message-format=short",
        ])
        .arg("--target-dir")
        .arg(target)
        .current_dir(dir)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env("CARGO_TERM_COLOR", "never")
        .output()
        .map_err(|e| format!("cargo did not start: {e}"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let warned = stderr.lines().any(|line| line.contains("warning"));
    if output.status.success() && !warned {
        Ok(())
    } else {
        Err(stderr.into_owned())
    }
}

#[test]
fn every_readme_section_builds_on_its_own_from_its_own_dependencies() {
    let readme = fs::read_to_string(workspace().join("README.md")).expect("read the README");
    // The MCP chapter of the guide is a whole server of production shape
    // under one dependency block; the other chapters' examples are tests
    // and are built as doctests.
    let rmcp = fs::read_to_string(workspace().join("guide/rmcp.md")).expect("read the guide");
    let mut projects = projects(&readme);
    projects.extend(projects_named(&rmcp, "guide-rmcp"));
    let sections: Vec<&str> = projects.iter().map(|p| p.section.as_str()).collect();
    for expected in [
        "In your code",
        "Stores",
        "rig",
        "MCP servers",
        "rmcp (MCP servers)",
    ] {
        assert!(
            sections.contains(&expected),
            "no project in section `{expected}`: {sections:?}"
        );
    }
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("readme-sections");
    let target = root.join("target");
    let mut failures = String::new();
    for project in &projects {
        let dir = root.join(&project.name);
        write(project, &dir);
        if let Err(output) = build(&dir, &target) {
            let _ = write!(
                failures,
                "\n== section `{}` ({}):\n{output}",
                project.section,
                dir.display()
            );
        }
    }
    assert!(
        failures.is_empty(),
        "README sections that do not build cleanly:{failures}"
    );
}

/// The rows of the first table after `heading` in `text`, each cut to its
/// first `columns` cells.
fn table(text: &str, heading: &str, columns: usize) -> Vec<Vec<String>> {
    text.split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("no `{heading}`"))
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .map(|row| {
            row.split('|')
                .skip(1)
                .take(columns)
                .map(|cell| cell.trim().to_owned())
                .collect()
        })
        .collect()
}

#[test]
fn the_readme_table_of_stores_is_the_guides() {
    let readme = fs::read_to_string(workspace().join("README.md")).expect("read the README");
    let guide = fs::read_to_string(workspace().join("guide/stores.md")).expect("read the guide");
    let short = table(&readme, "\n## Stores\n", 3);
    assert!(short.len() >= 6, "the README's table of stores: {short:?}");
    assert_eq!(short, table(&guide, "# Stores\n", 3));
}
