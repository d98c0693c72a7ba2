//! Output: tables and fields for people, JSON for scripts, times and ages.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idempotent_tools::records::{Record, RecordCount, RecordState};
use serde_json::{Value, json};

/// A time as RFC 3339 in UTC, to the second: `2025-03-01T12:00:00Z`.
pub fn rfc3339(at: SystemTime) -> String {
    let secs = match at.duration_since(UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
    };
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A span of time, short: `45s`, `12m`, `3h`, `2d`.
pub fn short(span: Duration) -> String {
    let secs = span.as_secs();
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86_400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

/// How long ago `at` was, or how long until it is, from `now`.
pub fn relative(at: SystemTime, now: SystemTime) -> String {
    match now.duration_since(at) {
        Ok(ago) => format!("{} ago", short(ago)),
        Err(ahead) => format!("in {}", short(ahead.duration())),
    }
}

/// What a record's last change was, for the table.
fn when(record: &Record, now: SystemTime) -> String {
    if let Some(at) = record.completed_at {
        return format!("completed {}", relative(at, now));
    }
    match record.lease_until {
        Some(until) if until > now => format!("lease ends {}", relative(until, now)),
        Some(until) => format!("lease ended {}", relative(until, now)),
        None => "held".to_owned(),
    }
}

/// A table of records, columns padded to their widest cell.
pub fn table(records: &[Record], now: SystemTime) -> String {
    let mut rows = vec![[
        "STATE".to_owned(),
        "TOOL".to_owned(),
        "FENCE".to_owned(),
        "WHEN".to_owned(),
        "KEY".to_owned(),
    ]];
    for record in records {
        rows.push([
            record.state.to_string(),
            record.tool.to_string(),
            record.fence.to_string(),
            when(record, now),
            record.key.to_string(),
        ]);
    }
    columns(&rows)
}

/// The keys whose outcome is unknown, with why: one line each.
pub fn pending_table(records: &[Record], now: SystemTime) -> String {
    let mut rows = vec![[
        "TOOL".to_owned(),
        "FENCE".to_owned(),
        "WHEN".to_owned(),
        "KEY".to_owned(),
        "WHY".to_owned(),
    ]];
    for record in records {
        let why = match (record.why(), record.last_error()) {
            (Some(why), Some(error)) => format!("{why} (error: {error})"),
            (Some(why), None) => why,
            (None, Some(error)) => format!("(error: {error})"),
            (None, None) => "(not recorded)".to_owned(),
        };
        rows.push([
            record.tool.to_string(),
            record.fence.to_string(),
            when(record, now),
            record.key.to_string(),
            why,
        ]);
    }
    columns(&rows)
}

/// A key whose outcome is unknown as JSON: the record, with why and the
/// last error drawn out of its detail.
pub fn pending_json(record: &Record) -> Value {
    let mut json = record_json(record);
    if let Some(fields) = json.as_object_mut() {
        fields.insert("why".to_owned(), json!(record.why()));
        fields.insert("error".to_owned(), json!(record.last_error()));
    }
    json
}

/// Counts as a table, then totals by state.
pub fn count_table(counts: &[RecordCount]) -> String {
    let mut rows = vec![["TOOL".to_owned(), "STATE".to_owned(), "COUNT".to_owned()]];
    for count in counts {
        rows.push([
            count.tool.to_string(),
            count.state.to_string(),
            count.count.to_string(),
        ]);
    }
    let mut out = columns(&rows);
    let totals = by_state(counts);
    let total: u64 = totals.iter().map(|(_, n)| n).sum();
    let parts: Vec<String> = totals
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    let _ = writeln!(out, "\n{total} records: {}", parts.join(", "));
    out
}

fn by_state(counts: &[RecordCount]) -> Vec<(RecordState, u64)> {
    RecordState::ALL
        .iter()
        .map(|&state| {
            let n = counts
                .iter()
                .filter(|c| c.state == state)
                .map(|c| c.count)
                .sum();
            (state, n)
        })
        .collect()
}

fn columns<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// One record in full, a field a line.
pub fn fields(record: &Record, now: SystemTime) -> String {
    let mut out = String::new();
    let mut field = |name: &str, value: String| {
        let _ = writeln!(out, "{name:<12} {value}");
    };
    field("key", record.key.to_string());
    field("digest", record.key_digest());
    field("tool", record.tool.to_string());
    field("fingerprint", hex(record));
    field("state", record.state.to_string());
    let fence = if record.taken_over {
        format!(
            "{} (taken over from a holder whose lease ran out)",
            record.fence
        )
    } else {
        record.fence.to_string()
    };
    field("fence", fence);
    if let Some(owner) = record.owner {
        field("owner", format!("{owner:032x}"));
    }
    if let Some(until) = record.lease_until {
        field(
            "lease until",
            format!("{} ({})", rfc3339(until), relative(until, now)),
        );
    }
    if let Some(at) = record.completed_at {
        field(
            "completed at",
            format!("{} ({})", rfc3339(at), relative(at, now)),
        );
    }
    if let Some(at) = record.expires_at {
        field(
            "expires at",
            format!("{} ({})", rfc3339(at), relative(at, now)),
        );
    }
    if let Some(result) = &record.result {
        let text = result
            .to_json()
            .map_or_else(|e| format!("(unreadable: {e})"), |t| t.into_owned());
        field("result", text);
    }
    if let Some(why) = record.why() {
        field("why", why);
    }
    if let Some(error) = record.last_error() {
        field("last error", error);
    }
    out
}

/// The fingerprint of the record's arguments, in hex.
fn hex(record: &Record) -> String {
    record
        .fingerprint
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One record as JSON: times in RFC 3339, the result as JSON.
pub fn record_json(record: &Record) -> Value {
    let time = |at: Option<SystemTime>| at.map(rfc3339);
    let result = record.result.as_ref().map(|result| match result.to_json() {
        Ok(text) => serde_json::from_str(&text).unwrap_or(Value::String(text.into_owned())),
        Err(_) => Value::Null,
    });
    json!({
        "key": record.key.as_str(),
        "key_digest": record.key_digest(),
        "tool": record.tool.as_str(),
        "fingerprint": hex(record),
        "state": record.state.as_str(),
        "fence": record.fence,
        "taken_over": record.taken_over,
        "owner": record.owner.map(|o| format!("{o:032x}")),
        "lease_until": time(record.lease_until),
        "lease_live": record.lease_is_live(SystemTime::now()),
        "completed_at": time(record.completed_at),
        "expires_at": time(record.expires_at),
        "result": result,
    })
}

/// Counts as JSON.
pub fn counts_json(counts: &[RecordCount]) -> Value {
    let by_state: serde_json::Map<String, Value> = by_state(counts)
        .into_iter()
        .map(|(state, n)| (state.as_str().to_owned(), json!(n)))
        .collect();
    json!({
        "counts": counts.iter().map(|c| json!({
            "tool": c.tool.as_str(),
            "state": c.state.as_str(),
            "count": c.count,
        })).collect::<Vec<_>>(),
        "by_state": by_state,
        "total": counts.iter().map(|c| c.count).sum::<u64>(),
    })
}

/// Reads an age: numbers with units, such as `90s`, `15m`, `2h`, `7d` or
/// `1h30m`.
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "`{text}` is not an age: write numbers with units, such as 90s, 15m, 2h, 7d or 1h30m"
        )
    };
    let mut total = Duration::ZERO;
    let mut digits = String::new();
    for c in text.trim().chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 604_800,
            _ => return Err(bad()),
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        digits.clear();
        let secs = n.checked_mul(unit).ok_or_else(bad)?;
        total = total
            .checked_add(Duration::from_secs(secs))
            .ok_or_else(bad)?;
    }
    if !digits.is_empty() || text.trim().is_empty() {
        return Err(bad());
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_rfc3339_in_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let leap_day = UNIX_EPOCH + Duration::from_secs(1_709_210_096);
        assert_eq!(rfc3339(leap_day), "2024-02-29T12:34:56Z");
    }

    #[test]
    fn ages_read_with_units_and_refuse_anything_else() {
        assert_eq!(parse_age("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_age("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_age("7d"), Ok(Duration::from_secs(7 * 86_400)));
        for bad in ["", "15", "h", "3 hours", "-1h", "99999999999999999999d"] {
            assert!(parse_age(bad).is_err(), "{bad:?}");
        }
    }
}
