//! Every invocation of the tool that the README, the guide and `--help`
//! show runs here, against a SQLite file holding the record the guide's
//! worked example reads, and must succeed: a flag or a value renamed in the
//! tool and not in the docs (or the other way round) fails.
//!
//! An invocation is a line of a code block that begins with
//! `idempotent-tools` (after a `$ ` prompt, in a block that has prompts),
//! with the lines below it that
//! continue it (indented, starting with `[`), or a span of inline code in
//! the prose that does. A synopsis runs once bare and once with each
//! optional group, each alternative of a group (`--after KEY | --all`) and
//! each alternative of a value (`--state held|done|failed|unknown`) on its
//! own; a placeholder in capitals (`KEY`, `HEX`) stands for a value that
//! fits the example's record. Each runs on a store of its own, so that a
//! `forget` leaves the next one its record. A `forget` the docs show
//! answering the confirmation runs with `--yes`, as off a terminal it must.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use idempotent_tools::SqliteStore;
use idempotent_tools::records::RecordState;

use crate::records::{REFUND, finish, key};
use crate::run::{BIN, cli};
use crate::sqlite::text;

/// The worked example's run, key and tool.
const RUN: &str = "run-7f3a";
const ORDER: &str = "1182";

pub async fn every_invocation_the_docs_show_runs() {
    let mut shown = Vec::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut docs = vec![root.join("README.md")];
    let mut guide: Vec<PathBuf> = std::fs::read_dir(root.join("guide"))
        .expect("the guide")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    guide.sort();
    docs.extend(guide);
    for doc in &docs {
        let markdown = std::fs::read_to_string(doc).expect("read the doc");
        let name = doc.file_name().expect("a name").to_string_lossy();
        shown.extend(
            invocations(&markdown)
                .into_iter()
                .map(|line| (name.to_string(), line)),
        );
    }
    let help = Command::new(BIN).arg("--help").output().expect("run");
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    shown.extend(
        code_lines(&help)
            .into_iter()
            .map(|line| ("--help".to_owned(), line)),
    );
    for needed in ["operations.md", "README.md", "--help"] {
        assert!(
            shown.iter().any(|(doc, _)| doc == needed),
            "{needed} shows the tool at work: {shown:?}"
        );
    }

    let digest: String = key(RUN, ORDER)
        .digest()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut runs = 0;
    for (doc, line) in &shown {
        for args in expand(line, &digest[..12]) {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let path = example_store(dir.path()).await;
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            if args.first() == Some(&"gateway") {
                gateway_parses(doc, line, &args);
                runs += 1;
                continue;
            }
            let out = cli(&text(&path), &args);
            assert_eq!(
                out.code,
                0,
                "{doc}: `{line}` ran as `idempotent-tools {}`: {out:?}",
                args.join(" ")
            );
            runs += 1;
        }
    }
    assert!(runs >= 20, "only {runs} runs from {shown:?}");
}

/// A gateway invocation parses as the docs show it: run where its
/// configuration file is not, it gets as far as reading the file, so every
/// flag and value was accepted (its servers are run by the gateway's own
/// cases). One without `--config` shows its help.
fn gateway_parses(doc: &str, line: &str, args: &[&str]) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut args = args.to_vec();
    if !args.iter().any(|arg| *arg == "--config" || *arg == "-c") {
        args.push("--help");
    }
    let out = Command::new(BIN)
        .args(&args)
        .current_dir(dir.path())
        .env_remove("IDEMPOTENT_STORE")
        .output()
        .expect("run the binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if args.contains(&"--help") {
        assert!(out.status.success(), "{doc}: `{line}`: {stderr}");
    } else {
        assert_eq!(out.status.code(), Some(2), "{doc}: `{line}`: {stderr}");
        assert!(stderr.contains("No such file"), "{doc}: `{line}`: {stderr}");
    }
}

/// A SQLite file holding the worked example's record: an unknown outcome of
/// `shop::refund_order` under `run-7f3a:refund:1182`, 14 minutes old.
async fn example_store(dir: &Path) -> PathBuf {
    let path = dir.join("claims.db");
    let store = SqliteStore::open(&path).expect("open");
    let at = SystemTime::now() - Duration::from_secs(14 * 60);
    finish(&store, &key(RUN, ORDER), &REFUND, RecordState::Unknown, at).await;
    path
}

/// The invocations a Markdown file shows: in its shell and text code
/// blocks, and in inline code in its prose.
fn invocations(markdown: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut block = String::new();
    let mut in_block = false;
    let mut shell = false;
    for line in markdown.lines() {
        if let Some(fence) = line.trim_start().strip_prefix("```") {
            if in_block {
                if shell {
                    found.extend(code_lines(&block));
                }
                block.clear();
            } else {
                // Shell sessions and output; not a manifest or a program.
                shell = matches!(
                    fence.trim(),
                    "" | "sh" | "text" | "console" | "bash" | "shell"
                );
            }
            in_block = !in_block;
        } else if in_block {
            block.push_str(line);
            block.push('\n');
        } else {
            for (n, span) in line.split('`').enumerate() {
                if n % 2 == 1 && is_invocation(span) {
                    found.push(span.to_owned());
                }
            }
        }
    }
    found
}

/// The invocations among lines of code, each with its continuation lines:
/// where some lines have a `$ ` prompt (a session with its output), those
/// lines alone.
fn code_lines(code: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut open = false;
    let session = code.lines().any(|line| line.trim_start().starts_with("$ "));
    for line in code.lines() {
        let trimmed = line.trim();
        let command = match trimmed.strip_prefix("$ ") {
            Some(command) => command,
            None if session => "",
            None => trimmed,
        };
        if is_invocation(command) {
            found.push(without_comment(command).to_owned());
            open = true;
        } else if open && line.starts_with(' ') && trimmed.starts_with('[') {
            let last = found.last_mut().expect("an open invocation");
            last.push(' ');
            last.push_str(without_comment(trimmed));
        } else {
            open = false;
        }
    }
    found
}

fn is_invocation(text: &str) -> bool {
    text.starts_with("idempotent-tools ")
}

/// The command without a trailing `# comment`.
fn without_comment(line: &str) -> &str {
    line.split(" #").next().unwrap_or(line).trim_end()
}

/// A part of a synopsis: a word given, or an optional group of
/// alternatives, each its words.
enum Part {
    Word(String),
    Optional(Vec<Vec<String>>),
}

/// The argument lists one invocation stands for (without the program's
/// name): bare, then with each optional alternative and value on its own.
fn expand(line: &str, digest: &str) -> Vec<Vec<String>> {
    let line = line.strip_prefix("idempotent-tools").unwrap_or(line);
    let mut parts = Vec::new();
    let mut rest = line;
    while let Some(open) = rest.find('[') {
        parts.extend(words(&rest[..open]).into_iter().map(Part::Word));
        let close = rest[open..].find(']').expect("a closing `]`") + open;
        let group = rest[open + 1..close]
            .split(" | ")
            .map(words)
            .collect::<Vec<_>>();
        parts.push(Part::Optional(group));
        rest = &rest[close + 1..];
    }
    parts.extend(words(rest).into_iter().map(Part::Word));

    let fill = |word: &str| placeholder(word, digest);
    let base: Vec<String> = parts
        .iter()
        .filter_map(|part| match part {
            Part::Word(word) => Some(fill(word)),
            Part::Optional(_) => None,
        })
        .collect();
    let mut runs = vec![base.clone()];
    for part in &parts {
        let Part::Optional(alternatives) = part else {
            continue;
        };
        for alternative in alternatives {
            // A value with alternatives (`held|done`) runs once for each.
            let choices = alternative
                .iter()
                .find(|word| word.contains('|'))
                .map(|word| word.split('|').map(str::to_owned).collect::<Vec<_>>())
                .unwrap_or_else(|| vec![String::new()]);
            for choice in choices {
                let mut args = base.clone();
                args.extend(alternative.iter().map(|word| {
                    if word.contains('|') {
                        choice.clone()
                    } else {
                        fill(word)
                    }
                }));
                runs.push(args);
            }
        }
    }
    for args in &mut runs {
        // The test names the store: a `--store` the docs give is left out.
        if let Some(at) = args.iter().position(|a| a == "--store" || a == "-s") {
            args.drain(at..(at + 2).min(args.len()));
        }
        if args.first().is_some_and(|sub| sub == "forget") && !args.iter().any(|a| a == "--yes") {
            args.push("--yes".to_owned());
        }
    }
    runs
}

/// Words, as a shell splits them: single quotes keep their text whole.
fn words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut started = false;
    for c in text.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                started = true;
            }
            c if c.is_whitespace() && !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    words
}

/// A value fitting the example's record for a placeholder in capitals; any
/// other word as it is.
fn placeholder(word: &str, digest: &str) -> String {
    let is_placeholder = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_uppercase() || c == '_' || c == '|');
    if !is_placeholder {
        return word.to_owned();
    }
    match word {
        "KEY" => format!("{RUN}:refund:{ORDER}"),
        "HEX" => digest.to_owned(),
        "RUN" => RUN.to_owned(),
        "TEXT" => "run-7".to_owned(),
        "ID" => REFUND.as_str().to_owned(),
        "N" => "10".to_owned(),
        "JSON" => r#"{"id":"re_1","order_id":"1182","usd":42}"#.to_owned(),
        other => panic!("no value for the placeholder `{other}`: give it one here"),
    }
}

pub fn a_synopsis_runs_bare_and_with_each_alternative() {
    let runs = expand(
        "idempotent-tools list [--state held|done] [--after KEY | --all] [--json]",
        "3f2a",
    );
    let runs: Vec<String> = runs.iter().map(|args| args.join(" ")).collect();
    assert_eq!(
        runs,
        [
            "list",
            "list --state held",
            "list --state done",
            "list --after run-7f3a:refund:1182",
            "list --all",
            "list --json",
        ]
    );
    assert_eq!(
        expand("idempotent-tools forget 'run-7f3a:refund:1182'", "3f2a"),
        [vec!["forget", "run-7f3a:refund:1182", "--yes"]]
    );
}
