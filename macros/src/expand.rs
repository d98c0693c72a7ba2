//! Writes the guarded function.
//!
//! Only the body changes. It becomes, in order:
//! 1. the key, built from the template (`Key::builder()`), each placeholder's
//!    value checked as a `KeyPart` at the key string;
//! 2. the fingerprint of every argument that is neither in the key nor free
//!    text, a call id or context, each checked as `Serialize` at its type;
//! 3. the call site's options on an `idempotent_tools::Call`;
//! 4. the original body, as an `async move` block, handed to the guard.
//!
//! If the key cannot be built (no run in scope, an empty value), the tool
//! returns the error through its own `E` and the body does not run.
//! Internal names are hygienic (`Span::mixed_site`), so arguments named
//! `key`, `store`, `guard` or `__x` are the user's own.

use proc_macro2::{Delimiter, Group, Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, ItemFn, LitStr, Type};

use crate::args::{self, Args, Takeover};
use crate::errors::Errors;
use crate::item::{self, FnTokens};
use crate::krate::Krate;
use crate::params::{self, Params, Role};
use crate::template::{self, Segment};
use crate::validate::{self, Key, Part};

/// The whole attribute: checks everything, then writes the function, or the
/// errors next to the unchanged function so that call sites still resolve.
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let mut tokens = FnTokens::new(item.clone());
    tokens.strip_markers();

    let func: ItemFn = match syn::parse2(item) {
        Ok(func) => func,
        Err(_) => {
            errors.add(
                Span::call_site(),
                "`#[idempotent]` goes on an `async fn` with a body: a free function or a method",
            );
            let errors = errors.to_compile_errors();
            let item = tokens.into_tokens();
            return quote!(#errors #item);
        }
    };

    let args = args::parse(args, &mut errors);
    let params = params::read(&func.sig, &mut errors);
    let ret = validate::signature(&func.sig, &mut errors);
    let template = args
        .key
        .as_ref()
        .map(|lit| (lit, template::parse(lit, &mut errors)));
    let key = template
        .as_ref()
        .map(|(lit, t)| validate::key(t, &params, &func.sig.ident, lit, &mut errors));

    let Some(outer) = tokens.body().cloned() else {
        let errors = errors.to_compile_errors();
        let item = tokens.into_tokens();
        return quote!(#errors #item);
    };
    // Under `#[tracing::instrument]`, the user's block inside its rewriting.
    let instrumented = item::instrumented_block(&outer);
    let body = instrumented.as_ref().unwrap_or(&outer);
    let with_body = |tokens: FnTokens, new: TokenStream| match &instrumented {
        Some(_) => tokens.with_body(item::replace_instrumented_block(&outer, new)),
        None => tokens.with_body(new),
    };
    if let (Some(ret), Some(key), true) = (ret, &key, errors.is_empty()) {
        let body = guarded_body(&args, &params, key, ret, &func.sig.ident, body);
        return with_body(tokens, body);
    }

    // Refused: the errors, next to the function with a body that is checked
    // as a guarded body would be, so that it gets its own errors and no
    // others, and call sites still resolve.
    let keyed: Vec<&str> = template
        .iter()
        .flat_map(|(_, t)| &t.segments)
        .filter_map(|segment| match segment {
            Segment::Placeholder(p) => Some(p.root.as_str()),
            Segment::Literal(_) => None,
        })
        .collect();
    let body = refused_body(&func, &params, &keyed, body);
    let errors = errors.to_compile_errors();
    let item = with_body(tokens, body);
    quote!(#errors #item)
}

/// The body of a refused function. It never runs: the crate does not build.
fn refused_body(func: &ItemFn, params: &Params, keyed: &[&str], body: &Group) -> TokenStream {
    let krate = Krate::find();
    // The arguments the key and the fingerprint would have read count as
    // used, so that the refusal adds no warnings of its own.
    let used = params
        .bindings
        .iter()
        .filter(|b| b.role == Role::Plain || keyed.iter().any(|k| b.ident == k))
        .map(|b| &b.ident);
    let used = quote!(#(let _ = &#used;)*);
    let (inner_attrs, block) = split_body(body);
    let typed = match validate::body_type(&func.sig) {
        Some((ret, asyncness)) => {
            let ret_span = ret.span();
            let ret = respan(ret.to_token_stream(), ret_span);
            let krate = krate.at(ret_span);
            Some(if asyncness {
                quote_spanned!(ret_span=>
                    #krate::__private::unguarded::<#ret, _>(async move #block).await
                )
            } else {
                quote_spanned!(ret_span=>
                    #krate::__private::unguarded_sync::<#ret, _>(move || #block)
                )
            })
        }
        // A plain `fn` whose body cannot be checked, such as one `#[tool]`
        // has boxed: its body was written for the guard, so checking it
        // against the boxed type would only add errors.
        None if func.sig.asyncness.is_none() => Some(quote!(::core::unreachable!())),
        None => None,
    };
    let body = typed.unwrap_or_else(|| block.stream());
    quote! {
        #inner_attrs
        #used
        #body
    }
}

/// Inner attributes, which stay at the top of the function, and the rest of
/// the body in braces of the original span.
fn split_body(body: &Group) -> (TokenStream, Group) {
    let (inner_attrs, stmts) = item::inner_attributes(body.stream());
    // The body keeps its braces' span, so errors about its value point there.
    let mut block = Group::new(Delimiter::Brace, stmts);
    block.set_span(body.span());
    (inner_attrs, block)
}

fn guarded_body(
    args: &Args,
    params: &Params,
    key: &Key,
    ret: &Type,
    fn_name: &Ident,
    body: &Group,
) -> TokenStream {
    let krate = Krate::find();
    let (inner_attrs, block) = split_body(body);
    let def = Span::mixed_site();
    let call = Ident::new("__idempotent_call", def);
    let key_var = Ident::new("__idempotent_key", def);
    // Checks on the tool's types point at its return type.
    let ret_span = ret.span();
    let ret = respan(ret.to_token_stream(), ret_span);

    let key_span = args.key.as_ref().map_or(Span::call_site(), |k| {
        Span::call_site().located_at(k.span())
    });
    let key_steps = key.parts.iter().map(|part| match part {
        Part::Literal(text) => quote_spanned!(def=> .literal(#text)?),
        Part::RunScope => quote_spanned!(def=> .run()?),
        Part::Value { name, value } => {
            let krate = krate.at(key_span);
            let check = quote_spanned!(key_span=> #krate::__private::key_part(&#value));
            quote_spanned!(def=> .part(#name, #check)?)
        }
    });

    let fingerprint_steps = params
        .bindings
        .iter()
        .filter(|b| b.role == Role::Plain && !key.keyed_whole.iter().any(|k| b.ident == k))
        .map(|b| {
            let name = b.ident.to_string();
            let name = name.strip_prefix("r#").unwrap_or(&name);
            let at = Span::call_site().located_at(b.type_span);
            let ident = &b.ident;
            let krate = krate.at(at);
            let check = quote_spanned!(at=> #krate::__private::fingerprinted(&#ident));
            quote_spanned!(def=> .arg(#name, #check)?)
        });

    let tool = tool_identity(args, params, fn_name, def);

    let options = options(args, def);
    // The call that carries every bound on the tool's types is located at
    // its return type, so that a bound that fails is reported there once.
    let at_ret = krate.at(ret_span);
    let run = if args.record_errors {
        quote_spanned!(ret_span=> #at_ret::__private::run_recording_errors::<#ret, _>)
    } else {
        quote_spanned!(ret_span=> #at_ret::__private::run::<#ret, _>)
    };
    let krate = krate.at(def);
    let run = quote_spanned!(ret_span=>
        #at_ret::__private::wrap::<#ret>(#run(#call, async move #block).await)
    );

    // The call is prepared in a statement of its own: the closure's borrows
    // of the arguments end there, before the body moves them, and nothing
    // of it is held across an `.await`.
    quote_spanned! {def=>
        #inner_attrs
        let #call = (|| -> ::core::result::Result<#krate::Call, #krate::Error> {
            let #key_var = #krate::Key::builder() #(#key_steps)* .finish()?;
            ::core::result::Result::Ok(
                #krate::Call::new(#tool, #key_var)
                    .fingerprint(#krate::Fingerprint::builder() #(#fingerprint_steps)* .finish())
                    #options
            )
        })();
        #run
    }
}

/// The tool's identity in the store: `tool = "..."`, or else the function's
/// path. A free function is `module::name`. A method is `module::Type::name`,
/// where the type is read from `Self` at run time (once per call site), since
/// two types in one module may each guard a method of one name: `Tool::call`
/// of a refund and of a cancel must never replay each other.
fn tool_identity(args: &Args, params: &Params, fn_name: &Ident, def: Span) -> TokenStream {
    let krate = Krate::find();
    if let Some(tool) = &args.tool {
        return quote!(#tool);
    }
    let name = fn_name.to_string();
    let name = LitStr::new(name.strip_prefix("r#").unwrap_or(&name), fn_name.span());
    if params.receiver.is_none() {
        return quote_spanned!(def=> ::core::concat!(::core::module_path!(), "::", #name));
    }
    let site = Ident::new("__IDEMPOTENT_TOOL", def);
    let krate = krate.at(def);
    quote_spanned! {def=> {
        static #site: #krate::__private::MethodTool =
            #krate::__private::MethodTool::new(::core::module_path!(), #name);
        #site.get(::core::any::type_name::<Self>())
    }}
}

/// The call site's policy, as builder calls on `idempotent_tools::Call`.
fn options(args: &Args, def: Span) -> TokenStream {
    let krate = Krate::find();
    let mut out = TokenStream::new();
    if let Some(store) = &args.store {
        out.extend(quote!(.store(#store)));
    }
    for (method, duration) in [
        ("retention", &args.retention),
        ("wait", &args.wait),
        ("lease", &args.lease),
    ] {
        if let Some(duration) = duration {
            let method = Ident::new(method, def);
            let millis = duration.millis;
            let at = Span::call_site().located_at(duration.span);
            out.extend(quote_spanned!(at=>
                .#method(::core::time::Duration::from_millis(#millis))
            ));
        }
    }
    if let Some(takeover) = args.takeover {
        let variant = match takeover {
            Takeover::Rerun => quote!(Rerun),
            Takeover::ReportUnknown => quote!(ReportUnknown),
        };
        let krate = krate.at(def);
        out.extend(quote_spanned!(def=> .takeover(#krate::Takeover::#variant)));
    }
    if let Some(note) = &args.note {
        out.extend(quote_spanned!(def=> .replay_note(#note)));
    }
    if let Some(note) = &args.conflict_note {
        out.extend(quote_spanned!(def=> .conflict_note(#note)));
    }
    out
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
