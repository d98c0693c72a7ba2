//! The rules: which functions the guard can serve, and which values may
//! enter a key.
//!
//! A key must name the action the same way every time it is asked for, and
//! differently for different actions. So a placeholder must name an argument,
//! a field of one, or the run; never model-authored free text (worded anew on
//! each ask) and never a tool-call id (new on each call).
//!
//! Free text is caught by its marker or type, and also by its name: an
//! argument or field of the ask named as the model's wording usually is
//! ([`FREE_TEXT_NAMES`]), unless its argument is marked `#[identifier]`.
//! `self` and context are filled in by the application, never the model, so
//! their field names are not read this way.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote_spanned};
use syn::spanned::Spanned;
use syn::{GenericArgument, Ident, Index, LitStr, PathArguments, ReturnType, Signature, Type};

use crate::errors::Errors;
use crate::params::{Params, Role, Why, is_call_id_name, type_name};
use crate::suggest;
use crate::template::{Placeholder, Segment, Template};

/// Names that almost always carry the model's own wording. A name is read as
/// one when it is one of these, or ends in `_` and one of these
/// (`refund_reason`, `email_body`).
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

/// Whether a name reads as the model's wording.
fn is_free_text_name(name: &str) -> bool {
    let name = name.strip_prefix("r#").unwrap_or(name);
    FREE_TEXT_NAMES.iter().any(|word| {
        name == *word
            || name
                .strip_suffix(word)
                .is_some_and(|head| head.ends_with('_'))
    })
}

/// A key part, ready to expand.
pub enum Part {
    /// Literal template text.
    Literal(String),
    /// `<run>` with no `run` argument: the run scope.
    RunScope,
    /// A value: `name` for the runtime's messages, `value` the place
    /// expression (`order_id`, `self.tenant`).
    Value { name: String, value: TokenStream },
}

/// The key, resolved against the parameters.
pub struct Key {
    pub parts: Vec<Part>,
    /// Arguments that are in the key whole, and so not fingerprinted.
    pub keyed_whole: Vec<String>,
}

/// Resolves each placeholder to a parameter, refusing what may not be keyed.
/// Every problem is reported at the key string.
pub fn key(
    template: &Template,
    params: &Params,
    fn_name: &Ident,
    lit: &LitStr,
    errors: &mut Errors,
) -> Key {
    let span = lit.span();
    let mut key = Key {
        parts: Vec::new(),
        keyed_whole: Vec::new(),
    };
    for segment in &template.segments {
        let placeholder = match segment {
            Segment::Literal(text) => {
                key.parts.push(Part::Literal(text.clone()));
                continue;
            }
            Segment::Placeholder(p) => p,
        };
        match resolve(placeholder, params, fn_name, span) {
            Ok(part) => {
                if placeholder.fields.is_empty() {
                    key.keyed_whole.push(placeholder.root.clone());
                }
                key.parts.push(part);
            }
            Err(message) => errors.add(span, message),
        }
    }
    key
}

fn resolve(p: &Placeholder, params: &Params, fn_name: &Ident, span: Span) -> Result<Part, String> {
    let shown = p.shown();
    if p.root == "self" {
        let Some(self_span) = params.receiver else {
            return Err(format!(
                "`{shown}` names `self`, but `{fn_name}` is not a method. {}",
                arguments_are(params, fn_name)
            ));
        };
        let root = Ident::new("self", self_span.located_at(span));
        return Ok(value(p, root.into_token_stream(), span));
    }

    let Some(binding) = params.find(&p.root) else {
        if p.root == "run" {
            if !p.fields.is_empty() {
                return Err(format!(
                    "`{shown}`: with no `run` argument, `<run>` is the run in scope, which has no \
                     fields. Write `<run>`"
                ));
            }
            return Ok(Part::RunScope);
        }
        let mut candidates = params.names();
        candidates.push("run".to_owned());
        let rest: String = p.fields.iter().map(|f| format!(".{f}")).collect();
        let hint = suggest::did_you_mean(&p.root, candidates.iter().map(String::as_str), |found| {
            format!("`<{found}{rest}>`")
        });
        return Err(format!(
            "`{shown}` does not name an argument of `{fn_name}`; {}.{hint} A placeholder names an \
             argument (`<order_id>`), a field of one (`<args.order_id>`, `<self.tenant>`) or the \
             run (`<run>`)",
            argument_list(params, fn_name)
        ));
    };

    let name = &p.root;
    match binding.role {
        Role::FreeText(why) => {
            let how = match why {
                Why::Marker => "is marked `#[free_text]`",
                _ => "is `FreeText<_>`",
            };
            return Err(format!(
                "`{shown}` is model-authored free text (`{name}` {how}): the model words it \
                 differently on each ask, so two identical asks would get two keys and the action \
                 would run twice. Key on ids instead, such as `<run>:refund:<order_id>`; free text \
                 is left out of the key and the fingerprint"
            ));
        }
        Role::CallId(why) => return Err(call_id(&shown, name, why)),
        Role::Plain | Role::Context => {}
    }
    if let Some(field) = p.fields.iter().find(|f| is_call_id_name(f)) {
        return Err(call_id(&shown, field, Why::Name));
    }
    if binding.role == Role::Plain && !binding.identifier {
        let mut path = std::iter::once(&p.root).chain(&p.fields);
        if let Some(word) = path.find(|n| is_free_text_name(n)) {
            return Err(free_text_name(&shown, name, word));
        }
    }
    let root = Ident::new(
        &binding.ident.to_string(),
        binding.ident.span().located_at(span),
    );
    Ok(value(p, root.into_token_stream(), span))
}

fn free_text_name(shown: &str, argument: &str, word: &str) -> String {
    let how = if argument == word {
        format!("if `{argument}` really is an id, mark it `#[identifier] {argument}: ..`")
    } else {
        format!(
            "if `{word}` really is an id, mark its argument `#[identifier] {argument}: ..`, \
             which vouches for the names under it"
        )
    };
    format!(
        "`{shown}` reads like model-authored free text: `{word}` is a name that almost always \
         carries the model's own wording, which it words anew on each ask, so two asks for one \
         action would get two keys and the action would run twice. Key on ids instead, such as \
         `<run>:ticket:<customer_id>`, and leave the wording out of the key (mark it \
         `#[free_text]`, or type it `FreeText<_>`); {how}"
    )
}

fn call_id(shown: &str, name: &str, why: Why) -> String {
    let how = match why {
        Why::Marker => format!("`{name}` is marked `#[call_id]`"),
        Why::Type => format!("`{name}` is a `CallId`"),
        Why::Name => format!("`{name}` is named as one"),
    };
    format!(
        "`{shown}` is a tool-call id ({how}): the framework makes a new id for every call, so two \
         identical asks get two keys and the action runs twice. Key on the run, the action and \
         the object acted on instead, as in `<run>:refund:<order_id>`"
    )
}

/// `self.tenant`, `args.0`, spanned at the key string.
fn value(p: &Placeholder, root: TokenStream, span: Span) -> Part {
    let fields = p.fields.iter().map(|f| match f.parse::<u32>() {
        Ok(index) => Index { index, span }.into_token_stream(),
        Err(_) => match f.strip_prefix("r#") {
            Some(raw) => Ident::new_raw(raw, span).into_token_stream(),
            None => Ident::new(f, span).into_token_stream(),
        },
    });
    let value = quote_spanned!(span=> #root #(. #fields)*);
    Part::Value {
        name: p.text.clone(),
        value,
    }
}

fn argument_list(params: &Params, fn_name: &Ident) -> String {
    let names = params.names();
    if names.is_empty() {
        format!("`{fn_name}` takes no arguments")
    } else {
        format!("its arguments are {}", names.join(", "))
    }
}

fn arguments_are(params: &Params, fn_name: &Ident) -> String {
    let list = argument_list(params, fn_name);
    let mut chars = list.chars();
    match chars.next() {
        Some(first) => format!("{}{}", first.to_uppercase(), chars.as_str()),
        None => list,
    }
}

/// Checks that the guard can serve this function, and returns its declared
/// return type.
pub fn signature<'a>(sig: &'a Signature, errors: &mut Errors) -> Option<&'a Type> {
    let name = &sig.ident;
    let ret = match &sig.output {
        ReturnType::Type(_, ty) => Some(&**ty),
        ReturnType::Default => None,
    };

    if sig.asyncness.is_none() {
        let boxed = ret.is_some_and(is_future);
        let message = if boxed {
            format!(
                "`{name}` is not an `async fn` but returns a future: another attribute has \
                 already rewritten it, such as rmcp's `#[tool]` or `#[async_trait]` on its impl. \
                 Place `#[idempotent]` above `#[tool]`, so that it reads the `async fn` as \
                 written; with `#[async_trait]`, declare the method a native `async fn` instead"
            )
        } else {
            format!(
                "`#[idempotent]` needs an `async fn`: before the body runs, the guard awaits the \
                 store, and waits for an identical call that is already in flight. Write \
                 `async fn {name}(..)`"
            )
        };
        errors.add(sig.fn_token.span, message);
        return None;
    }

    let needed = "the guard tells a fresh result from a replay or a conflict through \
                  `Outcome`, releases the claim when the body returns `Err`, and reports a store \
                  failure or a missing run through `E`, which needs `From<idempotent_tools::Error>`";
    let Some(ret) = ret else {
        errors.add(
            name.span(),
            format!(
                "`{name}` returns nothing, but it must return `Result<Outcome<T>, E>`: {needed}. \
                 Write `-> Result<Outcome<Refund>, PayError>`, and let the body return \
                 `Ok(refund)`"
            ),
        );
        return None;
    };
    let Type::Path(_) = peel(ret) else {
        errors.add(
            ret.span(),
            format!(
                "`{name}` must return `Result<Outcome<T>, E>`: {needed}. Write \
                 `-> Result<Outcome<Refund>, PayError>`, and let the body return `Ok(refund)`"
            ),
        );
        return None;
    };
    match type_name(ret).as_deref() {
        Some(last @ ("Outcome" | "Option")) => {
            errors.add(
                ret.span(),
                format!(
                    "`{name}` returns `{last}<..>` with no error type, but it must return \
                     `Result<Outcome<T>, E>`: {needed}. Write \
                     `-> Result<Outcome<Refund>, PayError>`, and let the body return `Ok(refund)`"
                ),
            );
            None
        }
        Some("Result") => match success_type(ret) {
            Some(value) if is_plain_value(value) => {
                let value = value.to_token_stream().to_string().replace(' ', "");
                errors.add(
                    success_type(ret).map_or(ret.span(), Spanned::span),
                    format!(
                        "`{name}` returns `{value}` on success, but a guarded tool returns \
                         `Outcome<{value}>`, which tells the caller a fresh result from a replay \
                         or a conflict. Write `Result<Outcome<{value}>, ..>`; the body still \
                         returns `Ok(value)`, and the guard wraps it"
                    ),
                );
                None
            }
            _ => Some(ret),
        },
        _ => Some(ret),
    }
}

/// The `O` of a return type written `Result<O, ..>`.
fn success_type(ret: &Type) -> Option<&Type> {
    let Type::Path(path) = peel(ret) else {
        return None;
    };
    let PathArguments::AngleBracketed(args) = &path.path.segments.last()?.arguments else {
        return None;
    };
    match args.args.first()? {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    }
}

/// A type that is plainly a value and no `ToolOutput`: a number, text, a
/// collection, a tuple, a reference.
fn is_plain_value(ty: &Type) -> bool {
    match peel(ty) {
        Type::Tuple(_) | Type::Reference(_) | Type::Array(_) | Type::Slice(_) => true,
        Type::Path(_) => matches!(
            type_name(ty).as_deref(),
            Some(
                "u8" | "u16"
                    | "u32"
                    | "u64"
                    | "u128"
                    | "usize"
                    | "i8"
                    | "i16"
                    | "i32"
                    | "i64"
                    | "i128"
                    | "isize"
                    | "f32"
                    | "f64"
                    | "bool"
                    | "char"
                    | "str"
                    | "String"
                    | "Vec"
                    | "HashMap"
                    | "BTreeMap"
                    | "Value"
            )
        ),
        _ => false,
    }
}

/// The return type a refused function's body can still be checked against,
/// and whether the function is async: a path type that is not plainly
/// something else (an `Outcome` alone, an `Option`, a future).
pub fn body_type(sig: &Signature) -> Option<(&Type, bool)> {
    let ReturnType::Type(_, ret) = &sig.output else {
        return None;
    };
    let named = type_name(ret)?;
    let other = matches!(named.as_str(), "Outcome" | "Option")
        || is_future(ret)
        || success_type(ret).is_some_and(is_plain_value);
    (!other && matches!(peel(ret), Type::Path(_))).then_some((&**ret, sig.asyncness.is_some()))
}

/// `impl Future`, `Pin<Box<dyn Future>>`, `BoxFuture`: what a macro that
/// has already made the future returns.
fn is_future(ty: &Type) -> bool {
    match ty {
        Type::ImplTrait(_) => true,
        Type::Path(p) => p.path.segments.last().is_some_and(|last| {
            let name = last.ident.to_string();
            name.ends_with("Future")
                || (name == "Pin"
                    && last
                        .arguments
                        .to_token_stream()
                        .to_string()
                        .contains("Future"))
        }),
        _ => false,
    }
}

/// A type without the parentheses or invisible groups around it.
fn peel(ty: &Type) -> &Type {
    match ty {
        Type::Paren(p) => peel(&p.elem),
        Type::Group(g) => peel(&g.elem),
        _ => ty,
    }
}
