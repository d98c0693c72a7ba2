//! Keys are injective, bounded for providers, and stable.

use idempotent_tools::{
    Error,
    call::{Key, KeyError, KeyTextProblem, PROVIDER_KEY_MAX},
};
use proptest::prelude::*;

fn refund_key(run: &str, order: &str, line: u32) -> Result<Key, KeyError> {
    Key::builder()
        .part("run", run)?
        .literal(":refund:")?
        .part("order_id", order)?
        .literal("/")?
        .part("line", &line)?
        .finish()
}

proptest! {
    #[test]
    fn distinct_tuples_give_distinct_keys(
        a in ("\\PC{1,12}", "[a-z0-9:/%<>é\\-_.~ ]{1,12}", any::<u32>()),
        b in ("\\PC{1,12}", "[a-z0-9:/%<>é\\-_.~ ]{1,12}", any::<u32>()),
    ) {
        let ka = refund_key(&a.0, &a.1, a.2).expect("key a");
        let kb = refund_key(&b.0, &b.1, b.2).expect("key b");
        prop_assert_eq!(a == b, ka == kb);
        prop_assert_eq!(a == b, ka.provider_key() == kb.provider_key());
    }

    #[test]
    fn every_rendered_key_reads_back_as_itself(
        run in "\\PC{1,12}",
        order in "[a-z0-9:/%<>é\\-_.~ ]{1,12}",
        line in any::<u32>(),
    ) {
        let key = refund_key(&run, &order, line).expect("key");
        prop_assert_eq!(Key::parse(key.as_str()), Ok(key));
    }

    /// Text that is not a rendered key never reads as a key: what parses is
    /// exactly what the builder writes, so a key read back names the same
    /// action as the key it was printed from.
    #[test]
    fn text_that_parses_is_the_key_of_its_own_decoded_values(text in "[a-z:%0-9A-F<>é]{1,16}") {
        if let Ok(key) = Key::parse(&text) {
            // Re-render the text as literals and values: each run of escapes
            // and unreserved characters is one value, decoded and escaped again.
            prop_assert_eq!(rerender(&text), key.as_str());
        }
    }

    /// Integers render as `Display` writes them, so keys recorded by an
    /// earlier release keep naming the same actions.
    #[test]
    fn integer_parts_render_as_display_writes_them(
        a in any::<i128>(), b in any::<u64>(), c in any::<i8>(), d in any::<usize>(), flag in any::<bool>(),
    ) {
        let key = Key::builder()
            .part("a", &a).and_then(|k| k.literal(":"))
            .and_then(|k| k.part("b", &b)).and_then(|k| k.literal(":"))
            .and_then(|k| k.part("c", &c)).and_then(|k| k.literal(":"))
            .and_then(|k| k.part("d", &d)).and_then(|k| k.literal(":"))
            .and_then(|k| k.part("flag", &flag))
            .and_then(|k| k.finish())
            .expect("key");
        prop_assert_eq!(key.as_str(), format!("{a}:{b}:{c}:{d}:{flag}"));
    }

    #[test]
    fn provider_keys_never_exceed_255_characters(order in "\\PC{1,400}") {
        let key = refund_key("run-1", &order, 1).expect("key");
        prop_assert!(key.provider_key().chars().count() <= PROVIDER_KEY_MAX);
    }
}

#[test]
fn a_value_holding_the_separator_cannot_imitate_another_order() {
    let sneaky = refund_key("run-1", "1182:refund:7", 1).expect("key");
    let plain = refund_key("run-1", "1182", 7).expect("key");
    assert_ne!(sneaky, plain);
    assert_eq!(sneaky.as_str(), "run-1:refund:1182%3Arefund%3A7/1");
}

#[test]
fn an_empty_value_is_refused_and_never_renders() {
    let err = refund_key("run-1", "", 1).expect_err("empty order");
    assert!(matches!(err, KeyError::EmptyPart { part: "order_id" }));
    // A guarded call wraps it: the key's error is the guard's error's source.
    let err = Error::from(err);
    // The cause is the error's source, printed once in its chain.
    let cause = std::error::Error::source(&err).expect("a cause");
    assert!(cause.to_string().contains("order_id"), "{cause}");
    assert!(!err.to_string().contains("order_id"), "{err}");
}

#[test]
fn unicode_values_encode_as_utf8_bytes() {
    let key = refund_key("run-ü", "订单-1182", 1).expect("key");
    assert_eq!(key.as_str(), "run-%C3%BC:refund:%E8%AE%A2%E5%8D%95-1182/1");
}

#[test]
fn keys_are_stable_across_versions() {
    // These exact strings are a compatibility promise: durable stores hold
    // records under them.
    let key = refund_key("run-7", "A b", 42).expect("key");
    assert_eq!(key.as_str(), "run-7:refund:A%20b/42");
    assert_eq!(
        hex(&key.digest()),
        "fb4796d644931b8ea7e87f7b7cfd499a7fd78ce08a1a6588fe82579d4fd12227"
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn long_keys_keep_a_readable_prefix_and_a_hash() {
    let key = refund_key("run-1", &"9".repeat(500), 1).expect("key");
    let provider = key.provider_key();
    assert_eq!(provider.len(), PROVIDER_KEY_MAX);
    assert!(provider.starts_with("run-1:refund:999"));
    assert!(provider.contains("%~"));
}

/// Renders `text` again through the builder: every maximal run of escapes
/// and unreserved bytes is taken as one value, decoded, and escaped again;
/// everything else is a literal.
fn rerender(text: &str) -> String {
    let unreserved = |c: char| c.is_ascii_alphanumeric() || "-_.~".contains(c);
    let mut builder = Key::builder();
    let mut value: Vec<u8> = Vec::new();
    let mut literal = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c == '%' || unreserved(c) {
            if !literal.is_empty() {
                builder = builder
                    .literal(&std::mem::take(&mut literal))
                    .expect("literal");
            }
            if c == '%' {
                let byte = u8::from_str_radix(&text[at + 1..at + 3], 16).expect("hex");
                chars.next();
                chars.next();
                value.push(byte);
            } else {
                value.push(c as u8);
            }
        } else {
            if !value.is_empty() {
                let part = String::from_utf8(std::mem::take(&mut value)).expect("utf-8");
                builder = builder.part("value", &part).expect("part");
            }
            literal.push(c);
        }
    }
    if !value.is_empty() {
        let part = String::from_utf8(value).expect("utf-8");
        builder = builder.part("value", &part).expect("part");
    }
    if !literal.is_empty() {
        builder = builder.literal(&literal).expect("literal");
    }
    builder.finish().expect("key").as_str().to_owned()
}

#[test]
fn text_no_template_renders_is_refused_and_says_why() {
    for (text, problem) in [
        (
            "run-1:refund:<order_id>",
            KeyTextProblem::Reserved { at: 13, ch: '<' },
        ),
        ("run-1:refund:50%", KeyTextProblem::BrokenEscape { at: 15 }),
        (
            "run-1:refund:%3a",
            KeyTextProblem::LowerCaseEscape { at: 13 },
        ),
        (
            "run-1:refund:%31",
            KeyTextProblem::NeedlessEscape { at: 13, ch: '1' },
        ),
        (" : / ", KeyTextProblem::NoValue),
    ] {
        let err = Key::parse(text).expect_err(text);
        assert_eq!(
            err,
            KeyError::Unrenderable {
                text: text.to_owned(),
                problem,
            }
        );
        assert!(
            err.to_string()
                .starts_with(&format!("`{text}` is not a key")),
            "{err}"
        );
    }
}
