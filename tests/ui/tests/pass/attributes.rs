//! Every other attribute stays as written: doc comments, lints, `cfg_attr`,
//! inner attributes, and parameter attributes other than the markers.
//! Context parameters are recognised by marker and by type name.
#![deny(unused_variables)]
// The tool is written as a framework's tools are: many arguments, and an
// inner attribute beside the outer ones, which is what this case keeps.
#![allow(clippy::too_many_arguments, clippy::mixed_attributes_style)]

use idempotent_tools::{CallId, FreeText, Outcome, Run, idempotent};

#[derive(Debug, thiserror::Error)]
enum PayError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

/// What a framework hands a tool besides the model's arguments. It is not
/// `Serialize`, so fingerprinting it would not build.
struct ToolContext {
    user: u64,
}

struct Peer;

/// Refunds an order.
///
/// The doc comment stays on the function.
#[idempotent(key = "<run>:refund:<ctx.user>:<order_id>")]
#[must_use = "a refund's outcome says whether it ran"]
#[cfg_attr(all(), allow(clippy::needless_pass_by_value))]
async fn refund(
    run: Run,
    ctx: &mut ToolContext,
    #[context] peer: Peer,
    order_id: u64,
    tool_call_id: String,
    #[call_id] id: CallId,
    reason: FreeText<String>,
    #[free_text] note: String,
    #[allow(unused_variables)] unused: u8,
) -> Result<Outcome<u64>, PayError> {
    #![allow(clippy::let_unit_value)]
    let _ = (peer, tool_call_id, id, reason, note);
    ctx.user += 1;
    Ok(order_id)
}

#[tokio::test(flavor = "current_thread")]
async fn attributes_builds_and_runs() -> Result<(), Box<dyn std::error::Error>> {
    let run = Run::new("attributes-1")?;
    let mut ctx = ToolContext { user: 3 };
    let first = refund(
        run.clone(),
        &mut ctx,
        Peer,
        7,
        "call_a".into(),
        CallId::new("call_a"),
        FreeText::new("damaged".into()),
        "first".into(),
        0,
    )
    .await?;
    let mut ctx = ToolContext { user: 3 };
    let again = refund(
        run,
        &mut ctx,
        Peer,
        7,
        "call_b".into(),
        CallId::new("call_b"),
        FreeText::new("it broke".into()),
        "second".into(),
        0,
    )
    .await?;
    assert!(first.is_fresh());
    assert!(
        again.is_replay(),
        "call ids, free text and context change nothing"
    );
    Ok(())
}
