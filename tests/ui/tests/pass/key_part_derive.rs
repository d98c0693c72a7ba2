//! `#[derive(KeyPart)]` on newtypes and fieldless enums, used in keys.

use idempotent_tools::{KeyPart, Outcome, Run, call::Key, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

#[derive(KeyPart)]
struct OrderId(u64);

#[derive(KeyPart)]
struct Sku {
    code: String,
}

#[derive(KeyPart)]
struct Tagged<T>(T);

#[derive(KeyPart)]
enum Currency {
    Usd,
    #[key_part(rename = "eur")]
    Euro,
}

#[idempotent(key = "<run>:refund:<order_id>:<sku>:<currency>")]
async fn refund(
    run: Run,
    order_id: OrderId,
    sku: Sku,
    currency: Currency,
) -> Result<Outcome<String>, PayError> {
    let _ = (order_id, sku, currency);
    Ok(idempotent_tools::current_key()
        .map(|k| k.to_string())
        .unwrap_or_default())
}

#[test]
fn key_part_derive_builds_and_runs() -> Result<(), idempotent_tools::Error> {
    let key = Key::builder()
        .part("tagged", &Tagged(OrderId(7)))?
        .literal(":")?
        .part("currency", &Currency::Usd)?
        .finish()?;
    assert_eq!(key.as_str(), "7:Usd");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|_| idempotent_tools::Error::MissingRun)?;
    let run = Run::new("key_part_derive-1")?;
    let key = runtime
        .block_on(refund(
            run,
            OrderId(1182),
            Sku { code: "a b".into() },
            Currency::Euro,
        ))
        .map_err(|PayError::Idempotency(e)| e)?
        .into_value();
    assert_eq!(
        key.as_deref(),
        Some("key_part_derive-1:refund:1182:a%20b:eur")
    );
    Ok(())
}
