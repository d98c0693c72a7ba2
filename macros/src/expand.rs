//! Writes the guarded function.
//!
//! Only the body changes. It becomes, in order:
//! 1. the call, prepared by one runtime function from two tables: the key
//!    template's pieces, each placeholder's value checked as a `KeyPart` at
//!    the key string, and every argument that is neither in the key nor
//!    free text, a call id or context, each checked as `Serialize` at its
//!    type; with the call site's options as a `static` policy;
//! 2. the original body, as an `async move` block, handed to the guard.
//!
//! If the key cannot be built (no run in scope, an empty value), the tool
//! returns the error through its own `E` and the body does not run.
//! Internal names are hygienic (`Span::mixed_site`), so arguments named
//! `key`, `store`, `guard` or `__x` are the user's own.

use proc_macro2::{Group, Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, LitStr, Type};

use crate::ast::Input;
use crate::errors::Errors;
use crate::instrumented;
use crate::item::{Body, Item};
use crate::krate::Krate;
use crate::options::{Options, Takeover};
use crate::params::Role;
use crate::resolve::{KeyPlan, PlanPart};
use crate::signature;

/// The whole attribute: checks everything, then writes the function, or the
/// errors next to the unchanged function so that call sites still resolve.
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let parsed: Item = match syn::parse2(item.clone()) {
        Ok(parsed) => parsed,
        Err(_) => {
            errors.add(
                Span::call_site(),
                "`#[idempotent]` goes on an `async fn` with a body: a free function or a method",
            );
            let errors = errors.to_compile_errors();
            return quote!(#errors #item);
        }
    };
    let input = Input::read(args, parsed, &mut errors);

    // Under `#[tracing::instrument]`, the user's block inside its rewriting.
    let outer = &input.item.body;
    let instrumented = instrumented::user_block(outer);
    let body = instrumented.as_ref().unwrap_or(outer);
    let body = match (&input.ret, &input.plan, errors.is_empty()) {
        (Some(ret), Some(plan), true) => guarded_body(&input, plan, ret, body),
        // Refused: the errors, next to the function with a body that is
        // checked as a guarded body would be, so that it gets its own errors
        // and no others, and call sites still resolve.
        _ => refused_body(&input, body),
    };
    let body = match instrumented {
        Some(_) => instrumented::replace_user_block(outer, body),
        None => body,
    };
    let guarded = errors.is_empty() && input.ret.is_some() && input.plan.is_some();
    let errors = errors.to_compile_errors();
    let item = match input.params.transaction.first() {
        // The transaction is the guard's to hand over: callers never pass it.
        Some(tx) if guarded => {
            let mut item = input.item.clone_without_input(tx.index);
            item.body = input.item.body.clone();
            item.with_body(body)
        }
        _ => input.item.with_body(body),
    };
    quote!(#errors #item)
}

/// The body of a refused function. It never runs: the crate does not build.
fn refused_body(input: &Input, body: &Group) -> TokenStream {
    let krate = &input.krate;
    let keyed = input.keyed();
    // The arguments the key and the fingerprint would have read count as
    // used, so that the refusal adds no warnings of its own.
    let used = input
        .params
        .bindings
        .iter()
        .filter(|b| {
            matches!(b.role, Role::Plain | Role::Transaction) || keyed.iter().any(|k| b.ident == k)
        })
        .map(|b| &b.ident);
    let used = quote!(#(let _ = &#used;)*);
    let Body { inner_attrs, block } = Body::split(body);
    let sig = &input.item.sig;
    let typed = match signature::body_type(sig) {
        Some((ret, asyncness)) => {
            let ret_span = ret.span();
            let ret = respan(ret.to_token_stream(), ret_span);
            let private = krate.private_at(ret_span);
            Some(if asyncness {
                quote_spanned!(ret_span=>
                    #private::unguarded::<#ret, _>(async move #block).await
                )
            } else {
                quote_spanned!(ret_span=>
                    #private::unguarded_sync::<#ret, _>(move || #block)
                )
            })
        }
        // A plain `fn` whose body cannot be checked, such as one `#[tool]`
        // has boxed: its body was written for the guard, so checking it
        // against the boxed type would only add errors.
        None if sig.asyncness.is_none() => Some(quote!(::core::unreachable!())),
        None => None,
    };
    let body = typed.unwrap_or_else(|| block.stream());
    quote! {
        #(#inner_attrs)*
        #used
        #body
    }
}

fn guarded_body(input: &Input, plan: &KeyPlan, ret: &Type, body: &Group) -> TokenStream {
    let Input {
        options,
        params,
        krate,
        ..
    } = input;
    let Body { inner_attrs, block } = Body::split(body);
    let def = Span::mixed_site();
    let call = Ident::new("__idempotent_call", def);
    // Checks on the tool's types point at its return type.
    let ret_span = ret.span();
    let ret = respan(ret.to_token_stream(), ret_span);

    let key_span = options.key.as_ref().map_or(Span::call_site(), |k| {
        Span::call_site().located_at(k.span())
    });
    // Literals were proven to keep the key injective while the crate
    // compiled, so the call appends them unchecked.
    let private = krate.private_at(def);
    // The key template and the fingerprinted arguments are tables, which
    // one function compiled in the runtime (`prepare`) turns into the call.
    let pieces = plan.parts.iter().map(|part| match part {
        PlanPart::Literal(text) => quote_spanned!(def=> #private::Piece::Literal(#text)),
        PlanPart::RunScope => quote_spanned!(def=> #private::Piece::Run),
        PlanPart::Value { name, value } => {
            let private_at_key = krate.private_at(key_span);
            quote_spanned!(key_span=> #private_at_key::key_part(#name, &#value))
        }
    });

    let fingerprint_steps = params
        .bindings
        .iter()
        .filter(|b| b.role == Role::Plain && !plan.keyed_whole.iter().any(|k| b.ident == k))
        .map(|b| {
            let name = b.ident.to_string();
            let name = name.strip_prefix("r#").unwrap_or(&name);
            let at = Span::call_site().located_at(b.type_span);
            let ident = &b.ident;
            let private = krate.private_at(at);
            let check = quote_spanned!(at=> #private::fingerprinted(#name, &#ident));
            if b.identifier {
                // Its fields named as call ids are ids of the user's own.
                let private = krate.private_at(def);
                quote_spanned!(def=> #private::vouched(#check))
            } else {
                check
            }
        });

    let tool = tool_identity(input, def);

    let policy = static_policy(options, krate, def);
    // The call that carries every bound on the tool's types is located at
    // its return type, so that a bound that fails is reported there once.
    let at_ret = krate.private_at(ret_span);
    let run = if input.options.record_errors {
        quote_spanned!(ret_span=>
            #at_ret::run_recording_errors::<#ret, _>(#call, async move #block).await
        )
    } else {
        // The classification is found in a statement of its own, with no
        // type expected of it, and handed before the body: `run` then
        // takes its type as found, and an error type that classifies but
        // misses a bound is told so.
        let errors = Ident::new("__idempotent_errors", def);
        let classified = classification(krate, &ret, ret_span);
        quote_spanned!(ret_span=>
            let #errors = #classified;
            #at_ret::run::<#ret, _, _>(#call, #errors, async move #block).await
        )
    };
    let transaction = input
        .params
        .transaction
        .first()
        .filter(|_| options.transaction.is_some());

    // The call is prepared in a statement of its own: the tables' borrows
    // of the arguments end there, before the body moves them, and nothing
    // of it is held across an `.await`.
    let store = match &input.options.store {
        Some(store) if transaction.is_none() => Some(quote!(#private::store(#store))),
        _ => None,
    };
    // Under `transaction`, the body is the action of a call run in a
    // transaction on the store, handed it through the marked argument.
    let run = match (transaction, &input.options.store) {
        (Some(tx), Some(store)) => {
            let handed = Ident::new("__idempotent_tx", def);
            let on = Ident::new("__idempotent_store", def);
            let (pat, ty) = (&tx.pat, &tx.ty);
            let at_store = krate.private_at(store.span());
            let in_transaction = quote_spanned!(ret_span=>
                #at_ret::transaction::run::<#ret, _, _>
            );
            quote_spanned! {ret_span=>
                let #on = &(#store);
                let #on = #at_store::transaction::in_transaction(#on);
                #at_ret::wrap::<#ret>(#in_transaction(#call, #on, move |#handed, _| {
                    ::std::boxed::Box::pin(async move {
                        let #pat: #ty = #handed;
                        #block
                    })
                }).await)
            }
        }
        _ => run,
    };
    let tables = quote_spanned!(def=> #tool, &[#(#pieces),*], &[#(#fingerprint_steps),*]);
    // A call site with the default policy and store, as most are, checks
    // two arguments fewer.
    let prepared = if policy.is_none() && store.is_none() {
        quote_spanned!(def=> #private::prepare(#tables))
    } else {
        let policy = policy.unwrap_or_else(|| {
            let at_def = krate.at(def);
            quote_spanned!(def=> &#at_def::call::Policy::DEFAULT)
        });
        let store = store.unwrap_or_else(|| quote_spanned!(def=> ::core::option::Option::None));
        quote_spanned!(def=> #private::prepare_with(#tables, #policy, #store))
    };
    let verified = verification(input, &call, &ret);
    let rmcp_checks = rmcp_checks(input);
    quote_spanned! {def=>
        #(#inner_attrs)*
        #rmcp_checks
        let #call = #prepared;
        #verified
        #run
    }
}

/// Whether the tool's error implements `Classify`, found while the tool
/// compiles: `Classified` if it does, `Definite` if not (see the runtime's
/// `__private::Errors`). The trait is imported in a block of its own,
/// so the user's code never sees it.
fn classification(krate: &Krate, ret: &TokenStream, ret_span: Span) -> TokenStream {
    let private = krate.private_at(ret_span);
    quote_spanned! {ret_span=> {
        #[allow(unused_imports)]
        use #private::DefiniteErrors as _;
        #private::Errors::<#ret>::new().classification()
    }}
}

/// `verify = path`: the prepared call gets the tool's verification, given
/// a clone of the receiver (for a method), then of each argument of the ask
/// and of the context, taken before the body runs. The function is checked
/// against the arguments and the result at `path`.
fn verification(input: &Input, call: &Ident, ret: &TokenStream) -> TokenStream {
    let Some(path) = &input.options.verify else {
        return TokenStream::new();
    };
    let at = path.span();
    let private = input.krate.private_at(at);
    let ret = respan(ret.clone(), at);
    // The receiver, then the ask's and the context's arguments, in order.
    let receiver = input.params.receiver.map(|at| {
        let receiver = Ident::new("self", at);
        quote_spanned!(at=> <Self as ::core::clone::Clone>::clone(&#receiver))
    });
    let args = input
        .params
        .bindings
        .iter()
        .filter(|b| matches!(b.role, Role::Plain | Role::Context))
        .map(|b| {
            let at = Span::call_site().located_at(b.type_span);
            let ident = &b.ident;
            quote_spanned!(at=> ::core::clone::Clone::clone(&#ident))
        });
    let args = receiver.into_iter().chain(args);
    // Bound first, so that their types are known when the function is
    // checked against them, and a function that does not fit is told the
    // signature it should have (rather than inferring the arguments' types
    // from the function).
    let bound = Ident::new(
        "__idempotent_verify_args",
        Span::mixed_site().located_at(at),
    );
    quote_spanned! {at=>
        let #bound = (#(#args,)*);
        let #call = #private::verified::<#ret, _, _>(#call, #bound, #path);
    }
}

/// Under rmcp's `#[tool]`, what rmcp's router needs of the tool, checked
/// here so that a miss is reported in this crate's words, at the token that
/// causes it: the `rmcp` feature is on, a server whose tools take
/// `run: Run` says how runs are found (`ResolvesRuns`), and the error type
/// becomes the tool's result (`IntoContents`). Without these, rmcp's router
/// reports one opaque unmet bound for all three.
fn rmcp_checks(input: &Input) -> TokenStream {
    let Some(tool) = input.item.rmcp_tool() else {
        return TokenStream::new();
    };
    let krate = &input.krate;
    let at_tool = tool.path().span();
    let private = krate.private_at(at_tool);
    let mut checks = quote_spanned!(at_tool=> #private::rmcp::feature::<()>(););
    if let Some(run) = input.params.find("run") {
        let at = Span::call_site().located_at(run.type_span);
        let private = krate.private_at(at);
        checks.extend(quote_spanned!(at=> #private::rmcp::server::<Self>();));
    }
    let error = input.ret.as_ref().and_then(signature::error_type);
    if let Some(error) = error {
        let at = error.span();
        let private = krate.private_at(at);
        let error = respan(error.to_token_stream(), at);
        checks.extend(quote_spanned!(at=> #private::rmcp::tool_error::<#error>();));
    }
    checks
}

/// The tool's identity in the store: `tool = "..."`, or else the function's
/// path. A free function is `module::name`. A method is `module::Type::name`,
/// where the type is read from `Self` at run time (once per call site), since
/// two types in one module may each guard a method of one name: `Tool::call`
/// of a refund and of a cancel must never replay each other.
///
/// A tool nested in functions also carries their names (`module::billing::
/// apply`), so that an `apply` in `fn billing()` and one in `fn shipping()`
/// are two tools. A free function's are read by the guard from the type of
/// the body it is handed, which costs the tool no item of its own; a
/// method's from the `type_name` of an item declared in its body, once per
/// call site, in a `static`. One nested in none keeps the identity above.
fn tool_identity(input: &Input, def: Span) -> TokenStream {
    let Input {
        options,
        params,
        krate,
        ..
    } = input;
    let fn_name = &input.item.sig.ident;
    let private = krate.private_at(def);
    if let Some(tool) = &options.tool {
        return quote_spanned!(def=> #private::Tool::Named(#tool));
    }
    let name = fn_name.to_string();
    let name = LitStr::new(name.strip_prefix("r#").unwrap_or(&name), fn_name.span());
    if params.receiver.is_none() {
        return quote_spanned! {def=>
            #private::Tool::Function(::core::concat!(::core::module_path!(), "::", #name))
        };
    }
    let site = Ident::new("__IDEMPOTENT_TOOL", def);
    let item = Ident::new("__IdempotentSite", def);
    quote_spanned! {def=>
        #private::Tool::Named({
            struct #item;
            static #site: #private::MethodTool =
                #private::MethodTool::new(::core::module_path!(), #name);
            #site.get(::core::any::type_name::<Self>(), ::core::any::type_name::<#item>())
        })
    }
}

/// The call site's policy: a `static` of the call site holding its
/// options, so a call holds a reference instead of a copy; `None` for the
/// default.
fn static_policy(options: &Options, krate: &Krate, def: Span) -> Option<TokenStream> {
    let at_def = krate.at(def);
    let private = krate.private_at(def);
    let mut fields = TokenStream::new();
    for (field, duration) in [
        ("retention", &options.retention),
        ("wait", &options.wait),
        ("lease", &options.lease),
    ] {
        if let Some(duration) = duration {
            let field = Ident::new(field, def);
            let millis = duration.millis;
            let at = Span::call_site().located_at(duration.span);
            fields.extend(quote_spanned!(at=>
                #field: ::core::time::Duration::from_millis(#millis),
            ));
        }
    }
    if let Some(settle) = &options.settle {
        let millis = settle.millis;
        let at = Span::call_site().located_at(settle.span);
        fields.extend(quote_spanned!(at=>
            settle: ::core::time::Duration::from_millis(#millis),
        ));
    }
    // A tool with a verification asks it on a takeover, unless it says
    // otherwise, as `Call::verify` does.
    let verifies = options.verify.as_ref().map(|_| Takeover::Verify);
    if let Some(takeover) = options.takeover.or(verifies) {
        let variant = match takeover {
            Takeover::Rerun => quote!(Rerun),
            Takeover::ReportUnknown => quote!(ReportUnknown),
            Takeover::Verify => quote!(Verify),
        };
        fields.extend(quote_spanned!(def=> takeover: #at_def::call::Takeover::#variant,));
    }
    if let Some(note) = &options.note {
        fields.extend(quote_spanned!(def=> replay_note: #private::note(#note),));
    }
    if let Some(note) = &options.conflict_note {
        fields.extend(quote_spanned!(def=> conflict_note: #private::note(#note),));
    }
    if fields.is_empty() {
        return None;
    }
    let policy = Ident::new("__IDEMPOTENT_POLICY", def);
    Some(quote_spanned!(def=> {
        static #policy: #at_def::call::Policy = #at_def::call::Policy {
            #fields
            ..#at_def::call::Policy::DEFAULT
        };
        &#policy
    }))
}

/// The tokens with every span set to `span`, so that an obligation that
/// fails anywhere in them is reported once, at one place.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let proc_macro2::TokenTree::Group(group) = &token {
                let mut new = Group::new(group.delimiter(), respan(group.stream(), span));
                new.set_span(span);
                token = proc_macro2::TokenTree::Group(new);
            } else {
                token.set_span(span);
            }
            token
        })
        .collect()
}
