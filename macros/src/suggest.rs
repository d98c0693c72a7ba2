//! Did-you-mean: the closest known name to a misspelt one.

/// The candidate closest to `wrong`, if one is close enough to be what was
/// meant.
pub fn closest<'a>(wrong: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|candidate| (strsim::jaro_winkler(wrong, candidate), candidate))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

/// " Did you mean `x`?" or nothing. `wrap` formats the suggestion.
pub fn did_you_mean<'a>(
    wrong: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    wrap: impl FnOnce(&str) -> String,
) -> String {
    match closest(wrong, candidates) {
        Some(found) => format!(" Did you mean {}?", wrap(found)),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_near_miss_is_suggested() {
        assert_eq!(
            closest("ordr_id", ["order_id", "usd", "reason"]),
            Some("order_id")
        );
        assert_eq!(
            closest("retension", ["retention", "wait"]),
            Some("retention")
        );
    }

    #[test]
    fn nothing_close_suggests_nothing() {
        assert_eq!(closest("colour", ["order_id", "usd"]), None);
    }
}
