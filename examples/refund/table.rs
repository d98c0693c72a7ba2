//! The table: one row per version, and how it prints.

use std::fmt;

use super::attempt::Attempt;

/// One line of the table.
pub struct Row {
    pub version: &'static str,
    /// What went wrong, or why the count is right.
    pub verdict: &'static str,
    /// Refunds the provider made: the number that matters.
    pub refunds_on_file: usize,
    /// Calls that reached the provider, repeats included.
    pub calls_received: usize,
    /// What each call gave the model: `, ` between calls of one step, ` / ` between steps.
    pub model_got: String,
}

#[derive(Default)]
pub struct Table {
    pub rows: Vec<Row>,
    /// What the model saw when it asked again in a later step.
    pub replay: Option<serde_json::Value>,
    /// What the model saw when it asked for $41 after $42.
    pub conflict: Option<serde_json::Value>,
}

impl Table {
    pub(super) fn push(&mut self, version: &'static str, verdict: &'static str, attempt: &Attempt) {
        self.push_all(version, verdict, std::slice::from_ref(attempt));
    }

    /// One row for attempts played one after the other against one provider:
    /// its counts as the last left them, and every step the model took.
    pub(super) fn push_all(
        &mut self,
        version: &'static str,
        verdict: &'static str,
        attempts: &[Attempt],
    ) {
        let Some(attempt) = attempts.last() else {
            return;
        };
        let steps = attempts
            .iter()
            .flat_map(|a| a.transcript.steps())
            .map(|step| {
                let calls: Vec<String> = step
                    .iter()
                    .map(|result| summary(&result.seen_by_model()))
                    .collect();
                calls.join(", ")
            });
        self.rows.push(Row {
            version,
            verdict,
            refunds_on_file: attempt.refunds_on_file,
            calls_received: attempt.calls_received,
            model_got: steps.collect::<Vec<_>>().join(" / "),
        });
    }

    /// The row for one version.
    pub fn row(&self, version: &str) -> Option<&Row> {
        self.rows.iter().find(|row| row.version == version)
    }
}

/// A tool result in a few words: `re_1`, `replay re_1`, `already refunded`, `error`.
fn summary(seen: &serde_json::Value) -> String {
    let refund_id = |value: &serde_json::Value| value["id"].as_str().map(str::to_owned);
    match (
        seen["status"].as_str(),
        seen.get("error"),
        seen["note"].as_str(),
    ) {
        (Some("conflict"), ..) => "conflict".to_owned(),
        (Some(status), ..) => format!("{status} {}", refund_id(&seen["value"]).unwrap_or_default()),
        (None, Some(_), _) => "error".to_owned(),
        (None, None, Some(note)) => note.to_owned(),
        (None, None, None) => refund_id(seen).unwrap_or_default(),
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "The model asks to refund order 1182 twice. Counts are from the stand-in provider.\n"
        )?;
        let header = (
            "version of the tool",
            "refunds on file",
            "calls received",
            "the model got",
        );
        writeln!(
            f,
            "{:<47} {:>17} {:>16}   {}",
            header.0, header.1, header.2, header.3
        )?;
        for row in &self.rows {
            let Row {
                version,
                verdict,
                refunds_on_file,
                calls_received,
                model_got,
            } = row;
            writeln!(
                f,
                "{version:<47} {refunds_on_file:>17} {calls_received:>16}   {model_got}"
            )?;
            writeln!(f, "    {verdict}")?;
        }
        writeln!(
            f,
            "\n\"refunds on file\" is what the provider kept: what the customer sees. \"calls received\" is\n\
             how many refund requests reached it. A provider that honours keys answers a repeat with\n\
             the first refund, so 1 on file after 2 calls means the provider saved the day; 1 after 1\n\
             means the tool stopped the repeat itself. In the two ledger rows the refund is a row in the\n\
             shop's own database: \"on file\" counts the rows committed, \"received\" the writes begun.\n\
             In the last three the provider ignores keys, and its answer to the first refund is lost."
        )?;
        let pretty = |value: &Option<serde_json::Value>| {
            value
                .as_ref()
                .and_then(|v| serde_json::to_string_pretty(v).ok())
                .unwrap_or_default()
        };
        writeln!(
            f,
            "\nWhat the model saw when it asked again in step 2:\n{}",
            pretty(&self.replay)
        )?;
        writeln!(
            f,
            "\nWhat the model saw when it asked for $41 after $42:\n{}",
            pretty(&self.conflict)
        )
    }
}
