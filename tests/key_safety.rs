//! The holes a key must not have: two tools that would share one result, a
//! call id or an argument that would be fingerprinted wrongly, a counter the
//! model could move. Every test counts what reached the stand-in provider.

use idempotent_tools::{
    CallId, Error, FreeText, Outcome, Run,
    call::{Call, ConflictReason, Fingerprint, Key},
    idempotent,
};
use idempotent_tools_testing::{Provider, ProviderError, Refund};
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
enum ShopError {
    #[error(transparent)]
    Idempotency(#[from] Error),
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

fn run(id: &str) -> Run {
    Run::new(id).unwrap_or_else(|e| panic!("run: {e}"))
}

fn refund<T>(outcome: Result<Outcome<T>, ShopError>) -> Outcome<T> {
    outcome.unwrap_or_else(|e| panic!("the call failed: {e}"))
}

// ---------------------------------------------------------------------------
// Two tools in one module, each with a method named `call`, as every
// hand-written rig tool has.

struct RefundTool {
    provider: Provider,
}

impl RefundTool {
    #[idempotent(key = "<run>:order:<order_id>")]
    async fn call(&self, run: &Run, order_id: String) -> Result<Outcome<Refund>, ShopError> {
        let _ = run;
        Ok(self.provider.refund(&order_id, 42, None).await?)
    }
}

struct CancelTool {
    provider: Provider,
}

impl CancelTool {
    #[idempotent(key = "<run>:order:<order_id>")]
    async fn call(&self, run: &Run, order_id: String) -> Result<Outcome<Refund>, ShopError> {
        let _ = run;
        // The stand-in provider counts a cancellation as a refund of 0.
        Ok(self.provider.refund(&order_id, 0, None).await?)
    }

    /// The same cancel, keyed as the guide advises: on the action too.
    #[idempotent(key = "<run>:cancel:<order_id>")]
    async fn cancel(&self, run: &Run, order_id: String) -> Result<Outcome<Refund>, ShopError> {
        let _ = run;
        Ok(self.provider.refund(&order_id, 0, None).await?)
    }
}

/// A conflict with another tool: the key text was first used by a tool of
/// another identity. It carries no result, so the model is never told that
/// the other tool's action was this one's.
fn is_other_tool<T>(outcome: &Outcome<T>) -> bool {
    matches!(
        outcome,
        Outcome::Conflict {
            reason: ConflictReason::OtherTool,
            first: None,
            ..
        }
    )
}

/// The two tools, sharing one stand-in provider.
fn refund_and_cancel() -> (Provider, RefundTool, CancelTool) {
    let provider = Provider::default();
    let refund_tool = RefundTool {
        provider: provider.clone(),
    };
    let cancel_tool = CancelTool {
        provider: provider.clone(),
    };
    (provider, refund_tool, cancel_tool)
}

#[tokio::test]
async fn a_cancel_after_a_refund_under_one_key_text_never_replays_the_refund() {
    let (provider, refund_tool, cancel_tool) = refund_and_cancel();
    let run = run("identity-methods");
    assert!(refund(refund_tool.call(&run, "1182".into()).await).is_fresh());
    let cancel = refund(cancel_tool.call(&run, "1182".into()).await);
    assert!(
        is_other_tool(&cancel),
        "the cancel is another tool: it must not get the refund's result, got {cancel:?}"
    );
    // The refund still deduplicates its own repeats.
    assert!(refund(refund_tool.call(&run, "1182".into()).await).is_replay());
    assert_eq!(provider.calls_received(), 1);
}

#[tokio::test]
async fn a_cancel_keyed_on_its_own_action_acts_after_the_refund_of_one_order() {
    let (provider, refund_tool, cancel_tool) = refund_and_cancel();
    let run = run("identity-own-keys");
    assert!(refund(refund_tool.call(&run, "1190".into()).await).is_fresh());
    assert!(refund(cancel_tool.cancel(&run, "1190".into()).await).is_fresh());
    assert!(refund(cancel_tool.cancel(&run, "1190".into()).await).is_replay());
    assert_eq!(provider.calls_received(), 2);
}

/// One generic impl, two instances: `Notify<Email>` and `Notify<Sms>` are two
/// tools.
trait Channel: Send + Sync {
    const USD: u64;
}
struct Email;
struct Sms;
impl Channel for Email {
    const USD: u64 = 1;
}
impl Channel for Sms {
    const USD: u64 = 2;
}

struct Notify<C> {
    provider: Provider,
    channel: std::marker::PhantomData<C>,
}

impl<C: Channel> Notify<C> {
    #[idempotent(key = "<run>:notify:<order_id>")]
    async fn call(&self, run: &Run, order_id: String) -> Result<Outcome<Refund>, ShopError> {
        let _ = run;
        Ok(self.provider.refund(&order_id, C::USD, None).await?)
    }
}

#[tokio::test]
async fn two_instances_of_one_generic_tool_do_not_replay_each_other() {
    let provider = Provider::default();
    let email = Notify::<Email> {
        provider: provider.clone(),
        channel: std::marker::PhantomData,
    };
    let sms = Notify::<Sms> {
        provider: provider.clone(),
        channel: std::marker::PhantomData,
    };
    let run = run("identity-generic");
    assert!(refund(email.call(&run, "1183".into()).await).is_fresh());
    assert!(is_other_tool(&refund(sms.call(&run, "1183".into()).await)));
    assert!(refund(email.call(&run, "1183".into()).await).is_replay());
    assert_eq!(provider.calls_received(), 1);
}

// ---------------------------------------------------------------------------
// Two tools named `apply` in one module, each nested in the function of its
// step, under one key template.

async fn billing(provider: &Provider, run: &Run, order_id: &str) -> Outcome<Refund> {
    #[idempotent(key = "<run>:step:<order_id>")]
    async fn apply(
        #[context] provider: &Provider,
        run: &Run,
        order_id: String,
    ) -> Result<Outcome<Refund>, ShopError> {
        let _ = run;
        Ok(provider.refund(&order_id, 1182, None).await?)
    }
    refund(apply(provider, run, order_id.into()).await)
}

async fn shipping(provider: &Provider, run: &Run, order_id: &str) -> Outcome<Refund> {
    #[idempotent(key = "<run>:step:<order_id>")]
    async fn apply(
        #[context] provider: &Provider,
        run: &Run,
        order_id: String,
    ) -> Result<Outcome<Refund>, ShopError> {
        let _ = run;
        // The stand-in provider counts a shipment as a refund of 0.
        Ok(provider.refund(&order_id, 0, None).await?)
    }
    refund(apply(provider, run, order_id.into()).await)
}

#[tokio::test]
async fn nested_tools_with_one_name_never_replay_each_other() {
    let provider = Provider::default();
    let run = run("identity-nested");
    assert!(billing(&provider, &run, "1191").await.is_fresh());
    let shipped = shipping(&provider, &run, "1191").await;
    assert!(
        is_other_tool(&shipped),
        "shipping's `apply` is another tool: it must not get billing's result, got {shipped:?}"
    );
    // Each still deduplicates its own repeats.
    assert!(billing(&provider, &run, "1191").await.is_replay());
    assert_eq!(provider.calls_received(), 1);
}

/// Methods of two types named alike, each declared in its step's function.
async fn billing_method(provider: &Provider, run: &Run, order_id: &str) -> Outcome<Refund> {
    struct Step(Provider);
    impl Step {
        #[idempotent(key = "<run>:step-method:<order_id>")]
        async fn apply(&self, run: &Run, order_id: String) -> Result<Outcome<Refund>, ShopError> {
            let _ = run;
            Ok(self.0.refund(&order_id, 1182, None).await?)
        }
    }
    refund(Step(provider.clone()).apply(run, order_id.into()).await)
}

async fn shipping_method(provider: &Provider, run: &Run, order_id: &str) -> Outcome<Refund> {
    struct Step(Provider);
    impl Step {
        #[idempotent(key = "<run>:step-method:<order_id>")]
        async fn apply(&self, run: &Run, order_id: String) -> Result<Outcome<Refund>, ShopError> {
            let _ = run;
            Ok(self.0.refund(&order_id, 0, None).await?)
        }
    }
    refund(Step(provider.clone()).apply(run, order_id.into()).await)
}

/// An error recorded with `record_errors`, whose guard reads the tool's
/// identity from another body than a plain tool's.
#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
#[error("{0}")]
struct StepError(String);

impl From<Error> for StepError {
    fn from(error: Error) -> StepError {
        StepError(error.to_string())
    }
}

async fn billing_recorded(provider: &Provider, run: &Run, order_id: &str) -> Outcome<Refund> {
    #[idempotent(key = "<run>:recorded:<order_id>", record_errors)]
    async fn apply(
        #[context] provider: &Provider,
        run: &Run,
        order_id: String,
    ) -> Result<Outcome<Refund>, StepError> {
        let _ = run;
        provider
            .refund(&order_id, 1182, None)
            .await
            .map_err(|e| StepError(e.to_string()))
    }
    apply(provider, run, order_id.into())
        .await
        .unwrap_or_else(|e| panic!("the call failed: {e}"))
}

async fn shipping_recorded(provider: &Provider, run: &Run, order_id: &str) -> Outcome<Refund> {
    #[idempotent(key = "<run>:recorded:<order_id>", record_errors)]
    async fn apply(
        #[context] provider: &Provider,
        run: &Run,
        order_id: String,
    ) -> Result<Outcome<Refund>, StepError> {
        let _ = run;
        provider
            .refund(&order_id, 0, None)
            .await
            .map_err(|e| StepError(e.to_string()))
    }
    apply(provider, run, order_id.into())
        .await
        .unwrap_or_else(|e| panic!("the call failed: {e}"))
}

#[tokio::test]
async fn nested_tools_recording_errors_never_replay_each_other() {
    let provider = Provider::default();
    let run = run("identity-nested-recorded");
    assert!(billing_recorded(&provider, &run, "1192").await.is_fresh());
    let shipped = shipping_recorded(&provider, &run, "1192").await;
    assert!(is_other_tool(&shipped), "got {shipped:?}");
    assert!(billing_recorded(&provider, &run, "1192").await.is_replay());
    assert_eq!(provider.calls_received(), 1);
}

#[tokio::test]
async fn nested_methods_of_types_with_one_name_never_replay_each_other() {
    let provider = Provider::default();
    let run = run("identity-nested-methods");
    assert!(billing_method(&provider, &run, "1192").await.is_fresh());
    assert!(is_other_tool(
        &shipping_method(&provider, &run, "1192").await
    ));
    assert!(billing_method(&provider, &run, "1192").await.is_replay());
    assert_eq!(provider.calls_received(), 1);
}

#[idempotent(key = "<run>:unnested:<order_id>")]
async fn unnested(
    #[context] provider: &Provider,
    run: &Run,
    order_id: String,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = run;
    Ok(provider.refund(&order_id, 42, None).await?)
}

/// What a deployment before nested identities recorded for `tool`: its
/// identity was `module::name`.
async fn earlier_record(tool: &'static str, run: &Run, action: &str, order_id: &str, usd: u64) {
    let key = Key::builder()
        .part("run", run)
        .and_then(|b| b.literal(action))
        .and_then(|b| b.part("order_id", order_id))
        .and_then(|b| b.finish())
        .unwrap_or_else(|e| panic!("key: {e}"));
    let fingerprint = match action {
        ":refund:" => Fingerprint::builder()
            .arg("usd", &usd)
            .map(|b| b.finish())
            .unwrap_or_else(|e| panic!("fingerprint: {e}")),
        _ => Fingerprint::EMPTY,
    };
    let refund = Refund {
        id: "re_earlier".into(),
        order_id: order_id.into(),
        usd,
    };
    let earlier = Call::new(tool, key)
        .fingerprint(fingerprint)
        .run(async { Ok::<_, Error>(refund) })
        .await;
    assert!(matches!(earlier, Ok(Outcome::Fresh { .. })), "{earlier:?}");
}

#[tokio::test]
async fn a_record_written_under_the_module_and_name_replays_for_a_tool_nested_in_no_function() {
    let provider = Provider::default();
    let run = run("identity-unchanged");
    earlier_record(
        concat!(module_path!(), "::unnested"),
        &run,
        ":unnested:",
        "1193",
        42,
    )
    .await;
    assert!(refund(unnested(&provider, &run, "1193".into()).await).is_replay());
    // Under `#[tracing::instrument]`, which wraps the body in a block.
    let tool = concat!(module_path!(), "::instrumented_below");
    earlier_record(tool, &run, ":refund:", "1194", 42).await;
    let call = instrumented_below(&provider, &run, "1194".into(), 42);
    assert!(refund(call.await).is_replay());
    assert_eq!(provider.calls_received(), 0);
}

// ---------------------------------------------------------------------------
// Call ids are left out of the fingerprint wherever they sit.

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_with_optional_call(
    #[context] provider: &Provider,
    run: &Run,
    order_id: String,
    usd: u64,
    call: Option<CallId>,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = (run, call);
    Ok(provider.refund(&order_id, usd, None).await?)
}

#[derive(Serialize, Deserialize)]
struct RefundArgs {
    order_id: String,
    usd: u64,
    call: CallId,
    why: FreeText,
}

#[idempotent(key = "<run>:refund:<args.order_id>")]
async fn refund_with_args(
    #[context] provider: &Provider,
    run: &Run,
    args: RefundArgs,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = run;
    Ok(provider.refund(&args.order_id, args.usd, None).await?)
}

#[tokio::test]
async fn a_repeat_under_a_new_optional_call_id_is_a_replay() {
    let provider = Provider::default();
    let run = run("call-id-option");
    let first = refund_with_optional_call(&provider, &run, "1184".into(), 42, Some("c1".into()));
    assert!(refund(first.await).is_fresh());
    let again = refund_with_optional_call(&provider, &run, "1184".into(), 42, Some("c2".into()));
    assert!(refund(again.await).is_replay());
    let none = refund_with_optional_call(&provider, &run, "1184".into(), 42, None);
    assert!(refund(none.await).is_replay());
    assert_eq!(provider.calls_received(), 1);
}

#[tokio::test]
async fn a_repeat_whose_arguments_carry_a_new_call_id_is_a_replay() {
    let provider = Provider::default();
    let run = run("call-id-field");
    let args = |call: &str, why: &str| RefundArgs {
        order_id: "1185".into(),
        usd: 42,
        call: CallId::new(call),
        why: FreeText::new(why.into()),
    };
    let first = refund_with_args(&provider, &run, args("c1", "customer asked"));
    assert!(refund(first.await).is_fresh());
    let again = refund_with_args(&provider, &run, args("c2", "please refund"));
    assert!(refund(again.await).is_replay());
    assert_eq!(provider.calls_received(), 1);
}

// Each way of writing a call id, as a user would: marked, named as a field of
// the ask (typed `String`, as the issue found it), deeper and spelt as an
// outside API spells it, bound by a destructured argument.

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_with_marked_call(
    #[context] provider: &Provider,
    run: &Run,
    order_id: String,
    usd: u64,
    #[call_id] call: String,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = (run, call);
    Ok(provider.refund(&order_id, usd, None).await?)
}

#[tokio::test]
async fn a_repeat_under_a_new_marked_call_id_is_a_replay() {
    let provider = Provider::default();
    let run = run("call-id-marker");
    let ask = |call: &str| refund_with_marked_call(&provider, &run, "1197".into(), 42, call.into());
    assert!(refund(ask("c1").await).is_fresh());
    assert!(refund(ask("c2").await).is_replay());
    assert_eq!(provider.calls_received(), 1);
}

#[derive(Serialize, Deserialize)]
struct OpenAiRefund {
    order_id: String,
    usd: u64,
    tool_call_id: String,
}

#[idempotent(key = "<run>:refund:<args.order_id>")]
async fn refund_openai(
    #[context] provider: &Provider,
    run: &Run,
    args: OpenAiRefund,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = run;
    Ok(provider.refund(&args.order_id, args.usd, None).await?)
}

fn openai_refund(usd: u64, tool_call_id: &str) -> OpenAiRefund {
    OpenAiRefund {
        order_id: "1198".into(),
        usd,
        tool_call_id: tool_call_id.into(),
    }
}

#[tokio::test]
async fn a_repeat_whose_arguments_carry_a_new_tool_call_id_string_is_a_replay() {
    let provider = Provider::default();
    let run = run("call-id-string-field");
    let first = refund_openai(&provider, &run, openai_refund(42, "call_1"));
    assert!(refund(first.await).is_fresh());
    let again = refund(refund_openai(&provider, &run, openai_refund(42, "call_2")).await);
    assert!(
        again.is_replay(),
        "the same ask under a new call id is a replay, not a conflict over details: {again:?}"
    );
    // The rest of the ask is still fingerprinted.
    let other = refund_openai(&provider, &run, openai_refund(41, "call_3"));
    assert!(refund(other.await).is_conflict());
    assert_eq!(provider.calls_received(), 1);
}

/// A provider's envelope, mirrored as its JSON spells it.
#[derive(Serialize, Deserialize)]
struct Envelope {
    #[serde(rename = "toolUseId")]
    tool_use_id: String,
    meta: EnvelopeMeta,
    extra: serde_json::Value,
}

#[derive(Serialize, Deserialize)]
struct EnvelopeMeta {
    request_id: String,
    tier: String,
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_enveloped(
    #[context] provider: &Provider,
    run: &Run,
    order_id: String,
    usd: u64,
    envelope: Envelope,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = (run, envelope);
    Ok(provider.refund(&order_id, usd, None).await?)
}

fn envelope(n: u32, tier: &str) -> Envelope {
    Envelope {
        tool_use_id: format!("toolu_{n}"),
        meta: EnvelopeMeta {
            request_id: format!("req_{n}"),
            tier: tier.into(),
        },
        extra: serde_json::json!({ "invocationId": format!("inv_{n}") }),
    }
}

#[tokio::test]
async fn a_repeat_whose_nested_call_ids_are_new_is_a_replay() {
    let provider = Provider::default();
    let run = run("call-id-nested");
    let ask = |n, tier| refund_enveloped(&provider, &run, "1199".into(), 42, envelope(n, tier));
    assert!(refund(ask(1, "gold").await).is_fresh());
    assert!(refund(ask(2, "gold").await).is_replay());
    // What else the envelope carries is part of the ask.
    assert!(refund(ask(3, "silver").await).is_conflict());
    assert_eq!(provider.calls_received(), 1);
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_destructured(
    #[context] provider: &Provider,
    run: &Run,
    OpenAiRefund {
        order_id,
        usd,
        tool_call_id,
    }: OpenAiRefund,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = (run, tool_call_id);
    Ok(provider.refund(&order_id, usd, None).await?)
}

#[tokio::test]
async fn a_repeat_whose_destructured_tool_call_id_is_new_is_a_replay() {
    let provider = Provider::default();
    let run = run("call-id-destructured");
    let first = refund_destructured(&provider, &run, openai_refund(42, "call_1"));
    assert!(refund(first.await).is_fresh());
    let again = refund_destructured(&provider, &run, openai_refund(42, "call_2"));
    assert!(refund(again.await).is_replay());
    assert_eq!(provider.calls_received(), 1);
}

/// A refund filed by the customer: its `request_id` is theirs, the same on
/// every ask about it, and vouched for as such.
#[derive(Serialize)]
struct FiledRefund {
    order_id: String,
    request_id: String,
}

#[idempotent(key = "<run>:refund:<args.order_id>")]
async fn refund_filed(
    #[context] provider: &Provider,
    run: &Run,
    #[identifier] args: FiledRefund,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = run;
    Ok(provider.refund(&args.order_id, 42, None).await?)
}

#[tokio::test]
async fn a_request_id_field_vouched_for_as_an_identifier_is_fingerprinted() {
    let provider = Provider::default();
    let run = run("identifier-fingerprinted");
    let filed = |request_id: &str| FiledRefund {
        order_id: "1200".into(),
        request_id: request_id.into(),
    };
    assert!(refund(refund_filed(&provider, &run, filed("rq-1")).await).is_fresh());
    assert!(refund(refund_filed(&provider, &run, filed("rq-1")).await).is_replay());
    assert!(refund(refund_filed(&provider, &run, filed("rq-2")).await).is_conflict());
    assert_eq!(provider.calls_received(), 1);
}

// ---------------------------------------------------------------------------
// Call ids under the names the model APIs and agent frameworks give them, as
// a tool that mirrors one would take them.

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_for_anthropic(
    #[context] provider: &Provider,
    run: &Run,
    order_id: String,
    usd: u64,
    tool_use_id: String,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = (run, tool_use_id);
    Ok(provider.refund(&order_id, usd, None).await?)
}

#[idempotent(key = "<run>:refund:<order_id>")]
#[allow(non_snake_case)]
async fn refund_for_vercel(
    #[context] provider: &Provider,
    run: &Run,
    order_id: String,
    usd: u64,
    toolCallId: String,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = (run, toolCallId);
    Ok(provider.refund(&order_id, usd, None).await?)
}

#[tokio::test]
async fn a_repeat_under_a_new_tool_use_id_is_a_replay() {
    let provider = Provider::default();
    let run = run("call-id-tool-use");
    let ask = |id: &str| refund_for_anthropic(&provider, &run, "1195".into(), 42, id.into());
    assert!(refund(ask("toolu_01").await).is_fresh());
    assert!(refund(ask("toolu_02").await).is_replay());
    assert_eq!(provider.calls_received(), 1);
}

#[tokio::test]
async fn a_repeat_under_a_new_call_id_spelt_in_camel_case_is_a_replay() {
    let provider = Provider::default();
    let run = run("call-id-camel-case");
    let ask = |id: &str| refund_for_vercel(&provider, &run, "1196".into(), 42, id.into());
    assert!(refund(ask("call_a").await).is_fresh());
    assert!(refund(ask("call_b").await).is_replay());
    assert_eq!(provider.calls_received(), 1);
}

/// A customer's refund request, filed before any agent saw it: vouched for
/// as an id, it names the action.
#[idempotent(key = "<run>:refund-request:<request_id>")]
async fn refund_request(
    #[context] provider: &Provider,
    run: &Run,
    #[identifier] request_id: String,
    usd: u64,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = run;
    Ok(provider.refund(&request_id, usd, None).await?)
}

#[tokio::test]
async fn a_request_id_vouched_for_as_an_identifier_keys_one_refund_per_request() {
    let provider = Provider::default();
    let run = run("identifier-request-id");
    assert!(refund(refund_request(&provider, &run, "rq-1".into(), 42).await).is_fresh());
    assert!(refund(refund_request(&provider, &run, "rq-2".into(), 42).await).is_fresh());
    assert!(refund(refund_request(&provider, &run, "rq-1".into(), 42).await).is_replay());
    assert_eq!(provider.calls_received(), 2);
}

// ---------------------------------------------------------------------------
// A type of the user's own named `...Context` is part of the ask.

#[derive(Serialize)]
struct RefundContext {
    usd: u64,
}

#[idempotent(key = "<run>:refund:<order_id>")]
async fn refund_in_context(
    #[context] provider: &Provider,
    run: &Run,
    order_id: String,
    refund: RefundContext,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = run;
    Ok(provider.refund(&order_id, refund.usd, None).await?)
}

#[tokio::test]
async fn a_user_type_named_context_is_fingerprinted_so_41_after_42_is_a_conflict() {
    let provider = Provider::default();
    let run = run("user-context");
    let usd = |usd| RefundContext { usd };
    let first = refund_in_context(&provider, &run, "1186".into(), usd(42));
    assert!(refund(first.await).is_fresh());
    let other = refund(refund_in_context(&provider, &run, "1186".into(), usd(41)).await);
    assert!(
        matches!(
            other,
            Outcome::Conflict {
                reason: ConflictReason::Arguments,
                ..
            }
        ),
        "$41 after $42 must be a conflict, got {other:?}"
    );
    assert_eq!(provider.calls_received(), 1);
}

// ---------------------------------------------------------------------------
// A counter from code: the second refund of one order in one run.

/// `refund_no` is assigned by the application (1 for the first refund of an
/// order in this run, 2 once a second one is approved), never by the model.
#[idempotent(key = "<run>:refund:<order_id>:<refund_no>")]
async fn refund_numbered(
    #[context] provider: &Provider,
    run: &Run,
    order_id: String,
    refund_no: u32,
    usd: u64,
    #[free_text] reason: String,
) -> Result<Outcome<Refund>, ShopError> {
    let _ = (run, reason);
    Ok(provider.refund(&order_id, usd, None).await?)
}

#[tokio::test]
async fn a_second_refund_numbered_by_the_application_acts_and_its_repeats_do_not() {
    let provider = Provider::default();
    let run = run("counter-by-hand");
    let ask = |refund_no, reason: &str| {
        refund_numbered(&provider, &run, "1187".into(), refund_no, 10, reason.into())
    };
    assert!(refund(ask(1, "damaged").await).is_fresh());
    assert!(refund(ask(1, "it arrived damaged").await).is_replay());
    // The application approves a second refund of the order.
    assert!(refund(ask(2, "still damaged").await).is_fresh());
    assert!(refund(ask(2, "refund again").await).is_replay());
    assert_eq!(provider.refunds_of("1187"), 2);
}

// ---------------------------------------------------------------------------
// `#[tracing::instrument]` stacked with `#[idempotent]`, in either order.

#[tracing::instrument(skip(provider))]
#[idempotent(key = "<run>:refund:<order_id>")]
async fn instrumented_above(
    #[context] provider: &Provider,
    run: &Run,
    order_id: String,
    usd: u64,
) -> Result<Outcome<Refund>, ShopError> {
    Ok(provider.refund(&order_id, usd, None).await?)
}

#[idempotent(key = "<run>:refund:<order_id>")]
#[tracing::instrument(skip(provider), err)]
async fn instrumented_below(
    #[context] provider: &Provider,
    run: &Run,
    order_id: String,
    usd: u64,
) -> Result<Outcome<Refund>, ShopError> {
    Ok(provider.refund(&order_id, usd, None).await?)
}

#[tokio::test]
async fn instrument_above_the_guard_refunds_once() {
    let provider = Provider::default();
    let run = run("instrument-above");
    let call = || instrumented_above(&provider, &run, "1188".into(), 42);
    assert!(refund(call().await).is_fresh());
    assert!(refund(call().await).is_replay());
    assert_eq!(provider.refunds_of("1188"), 1);
}

#[tokio::test]
async fn instrument_below_the_guard_refunds_once() {
    let provider = Provider::default();
    let run = run("instrument-below");
    let call = || instrumented_below(&provider, &run, "1189".into(), 42);
    assert!(refund(call().await).is_fresh());
    assert!(refund(call().await).is_replay());
    assert_eq!(provider.refunds_of("1189"), 1);
}

/// The attribute reads free text and call ids by name at compile time, and
/// keys built at run time from a schema read them from the runtime: one
/// text in two crates.
#[test]
fn the_attribute_and_the_runtime_read_names_by_one_text() {
    assert_eq!(
        include_str!("../macros/src/names.rs"),
        include_str!("../runtime/src/names.rs"),
        "macros/src/names.rs and runtime/src/names.rs must be the same text"
    );
}

/// The attribute refuses call ids in a key by name (`macros/src/names.rs`),
/// and the fingerprint leaves the same names out (`runtime/src/fingerprint/call_ids.rs`):
/// two lists in two crates, which must name the same ids.
#[test]
fn the_attribute_and_the_fingerprint_know_the_same_call_id_names() {
    let squash = |name: &str| -> String {
        name.chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let macros = include_str!("../macros/src/names.rs");
    let runtime = include_str!("../runtime/src/fingerprint/call_ids.rs");
    let mut refused: Vec<String> = macros
        .lines()
        .filter_map(|line| line.trim().strip_prefix("name: \""))
        .filter_map(|rest| rest.split('"').next())
        .map(squash)
        .collect();
    let mut left_out: Vec<String> = runtime
        .lines()
        .filter_map(|line| line.trim().trim_start_matches("| ").strip_prefix("b\""))
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect();
    refused.sort();
    left_out.sort();
    assert!(
        !refused.is_empty(),
        "no names read from macros/src/names.rs"
    );
    assert_eq!(refused, left_out);
}
