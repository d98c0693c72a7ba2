//! The names the key rules read as the model's wording or as the id of one
//! call, compared as a user writes them: in any case, with `_`, `-` or a
//! change of case between words. A struct that mirrors an outside API
//! (`Reason`, `toolUseId`) is read like one written in snake case.
//!
//! The attribute reads them at compile time (`macros/src/names.rs`); keys
//! built from a schema at run time, as the gateway builds them, read them
//! from the runtime (`runtime/src/names.rs`). The two files are one text,
//! which a test holds; the fingerprint leaves the same call-id names out
//! (`runtime/src/fingerprint/call_ids.rs`).

/// Names that almost always carry the model's own wording. A name is read as
/// one when its words are one of these, or end in one of these
/// (`refund_reason`, `emailBody`).
pub const FREE_TEXT_NAMES: &[&str] = &[
    "description",
    "desc",
    "reason",
    "rationale",
    "justification",
    "explanation",
    "message",
    "msg",
    "note",
    "notes",
    "comment",
    "comments",
    "remark",
    "remarks",
    "feedback",
    "summary",
    "body",
    "text",
    "content",
    "details",
    "instructions",
    "query",
    "question",
    "prompt",
    "subject",
    "title",
];

/// A name that is the id of one call, as a model API or an agent framework
/// hands it to a tool: new on every call, so never the name of an action.
pub struct CallIdName {
    /// The name in snake case.
    pub name: &'static str,
    /// What it is the id of, for messages: "a tool-call id".
    pub what: &'static str,
    /// Who uses it, and for what.
    pub source: &'static str,
}

/// The per-call ids of the major model APIs and agent frameworks. Only
/// names that nearly always mean one call are here: `id` and `run_id` name
/// too many stable things (and a run is what a key starts with), and
/// `message_id` names a message that a redelivery repeats.
pub const CALL_ID_NAMES: &[CallIdName] = &[
    CallIdName {
        name: "call_id",
        what: "a tool-call id",
        source: "OpenAI's Responses API and rig name a tool call's id so",
    },
    CallIdName {
        name: "tool_call_id",
        what: "a tool-call id",
        source: "OpenAI's Chat Completions API, LangChain and the Vercel AI SDK name a tool \
                 call's id so",
    },
    CallIdName {
        name: "tool_use_id",
        what: "a tool-call id",
        source: "Anthropic's API and AWS Bedrock name a tool call's id so",
    },
    CallIdName {
        name: "function_call_id",
        what: "a tool-call id",
        source: "Google's Agent Development Kit names a tool call's id so",
    },
    CallIdName {
        name: "invocation_id",
        what: "an invocation id",
        source: "AWS Bedrock Agents name one invocation of an action so, and Google's Agent \
                 Development Kit one turn of the agent",
    },
    CallIdName {
        name: "request_id",
        what: "a request id",
        source: "MCP and HTTP servers name one request so",
    },
];

/// A name's words in lower case, joined with `_`: `order_note` for
/// `order_note`, `orderNote`, `order_Note`, `OrderNote` and `ORDER_NOTE`;
/// `call_id` for `CallID`.
pub fn snake(name: &str) -> String {
    let name = name.strip_prefix("r#").unwrap_or(name);
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len() + 4);
    let mut boundary = false;
    for (i, &c) in chars.iter().enumerate() {
        if c == '_' || c == '-' {
            boundary = true;
            continue;
        }
        let before = i.checked_sub(1).and_then(|p| chars.get(p)).copied();
        let after = chars.get(i + 1).copied();
        if c.is_uppercase() {
            // `orderNote`, `order2Note`; and the last capital of an acronym
            // that starts a word, as in `HTTPRequest`.
            let after_lower = before.is_some_and(|b| b.is_lowercase() || b.is_ascii_digit());
            let acronym_end =
                before.is_some_and(char::is_uppercase) && after.is_some_and(char::is_lowercase);
            boundary |= after_lower || acronym_end;
        }
        if boundary && !out.is_empty() {
            out.push('_');
        }
        boundary = false;
        out.extend(c.to_lowercase());
    }
    out
}

/// Whether a name reads as the model's wording.
pub fn is_free_text(name: &str) -> bool {
    let words = snake(name);
    FREE_TEXT_NAMES.iter().any(|word| {
        words == *word
            || words
                .strip_suffix(word)
                .is_some_and(|head| head.ends_with('_'))
    })
}

/// The call id a name is, if it is one. Only letters and digits count, in
/// lower case, as the runtime compares them: `toolUseId`, `TOOL_USE_ID` and
/// `tool-use-id` are `tool_use_id`.
pub fn call_id(name: &str) -> Option<&'static CallIdName> {
    let squashed = squash(name);
    // The names above are lowercase words joined by `_`: squashed by
    // leaving the `_`s out, with nothing to allocate.
    CALL_ID_NAMES
        .iter()
        .find(|id| id.name.bytes().filter(|b| *b != b'_').eq(squashed.bytes()))
}

fn squash(name: &str) -> String {
    let name = name.strip_prefix("r#").unwrap_or(name);
    name.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_id_names_are_lowercase_words_joined_by_underscores() {
        for id in CALL_ID_NAMES {
            assert!(
                id.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{}",
                id.name
            );
            assert_eq!(call_id(id.name).map(|found| found.name), Some(id.name));
        }
        assert_eq!(
            call_id("ToolCallID").map(|id| id.name),
            Some("tool_call_id")
        );
        assert!(call_id("call").is_none());
    }

    #[test]
    fn a_name_is_read_in_any_case_and_with_any_separator() {
        for name in [
            "order_note",
            "orderNote",
            "order_Note",
            "OrderNote",
            "ORDER_NOTE",
            "order-note",
        ] {
            assert_eq!(snake(name), "order_note", "{name}");
        }
        assert_eq!(snake("CallID"), "call_id");
        assert_eq!(snake("HTTPRequestId"), "http_request_id");
        assert_eq!(snake("r#type"), "type");
        assert_eq!(snake("_reason"), "reason");
    }

    #[test]
    fn free_text_is_caught_in_any_case() {
        for name in [
            "reason",
            "Reason",
            "REASON",
            "order_Note",
            "orderNote",
            "refund_reason",
            "emailBody",
        ] {
            assert!(is_free_text(name), "{name}");
        }
        for name in ["order_id", "keynote", "notes_id", "Subjects"] {
            assert!(!is_free_text(name), "{name}");
        }
    }

    #[test]
    fn call_ids_are_caught_by_every_name_and_spelling() {
        for (name, id) in [
            ("call_id", "call_id"),
            ("CallId", "call_id"),
            ("toolCallId", "tool_call_id"),
            ("TOOL_CALL_ID", "tool_call_id"),
            ("tool_use_id", "tool_use_id"),
            ("toolUseId", "tool_use_id"),
            ("function_call_id", "function_call_id"),
            ("invocationId", "invocation_id"),
            ("request_id", "request_id"),
            ("requestID", "request_id"),
        ] {
            assert_eq!(call_id(name).map(|c| c.name), Some(id), "{name}");
        }
        for name in ["order_id", "run_id", "id", "message_id", "phone_call"] {
            assert!(call_id(name).is_none(), "{name}");
        }
    }
}
