//! Keys are injective, bounded for providers, and stable.

use idempotent_tools::{Error, Key, KeyError, PROVIDER_KEY_MAX};
use proptest::prelude::*;

fn refund_key(run: &str, order: &str, line: u32) -> Result<Key, Error> {
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
    assert!(matches!(
        err,
        Error::Key(KeyError::EmptyPart { part: "order_id" })
    ));
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
