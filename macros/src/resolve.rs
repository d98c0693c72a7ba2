//! Resolves the template's placeholders against the parameters, into the
//! plan of the key the expansion builds, refusing what may not be keyed.
//!
//! A key must name the action the same way every time it is asked for, and
//! differently for different actions. So a placeholder must name an argument,
//! a field of one, or the run; never model-authored free text (worded anew on
//! each ask) and never a tool-call id (new on each call).
//!
//! Free text is caught by its marker or type, and also by its name: an
//! argument or field of the ask named as the model's wording usually is
//! ([`FREE_TEXT_NAMES`]), in any case, unless its argument is marked
//! `#[identifier]`. `self` and context are filled in by the application,
//! never the model, so their field names are not read this way. A call id is
//! caught by its marker, type or name ([`CALL_ID_NAMES`]), also as a field
//! of context, where frameworks put it; `#[identifier]` vouches for a name.
//!
//! [`FREE_TEXT_NAMES`]: crate::names::FREE_TEXT_NAMES
//! [`CALL_ID_NAMES`]: crate::names::CALL_ID_NAMES

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote_spanned};
use syn::{Ident, Index, LitStr};

use crate::errors::Errors;
use crate::names;
use crate::params::{Params, Role, Why};
use crate::suggest;
use crate::template::{Placeholder, Segment, Template};

/// One step of building the key, ready to expand.
pub enum PlanPart {
    /// Literal template text.
    Literal(String),
    /// `<run>` with no `run` argument: the run scope.
    RunScope,
    /// A value: `name` for the runtime's messages, `value` the place
    /// expression (`order_id`, `self.tenant`).
    Value { name: String, value: TokenStream },
}

/// The key to build, resolved against the parameters: the template's
/// literals and the places its placeholders read.
pub struct KeyPlan {
    pub parts: Vec<PlanPart>,
    /// Arguments that are in the key whole, and so not fingerprinted.
    pub keyed_whole: Vec<String>,
}

/// Resolves each placeholder to a parameter, refusing what may not be keyed.
/// Every problem is reported at the key string.
pub fn plan(
    template: &Template,
    params: &Params,
    fn_name: &Ident,
    rmcp_tool: bool,
    lit: &LitStr,
    errors: &mut Errors,
) -> KeyPlan {
    let span = lit.span();
    let mut key = KeyPlan {
        parts: Vec::new(),
        keyed_whole: Vec::new(),
    };
    for segment in &template.segments {
        let placeholder = match segment {
            Segment::Literal(text) => {
                key.parts.push(PlanPart::Literal(text.clone()));
                continue;
            }
            Segment::Placeholder(p) => p,
        };
        match self::placeholder(placeholder, params, fn_name, rmcp_tool, span) {
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

fn placeholder(
    p: &Placeholder,
    params: &Params,
    fn_name: &Ident,
    rmcp_tool: bool,
    span: Span,
) -> Result<PlanPart, String> {
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
            if rmcp_tool {
                return Err(format!(
                    "`<run>` needs a `run: Run` argument under rmcp's `#[tool]`: rmcp runs a tool \
                     where no run scope reaches, so every call would fail for want of a run. Add \
                     `run: Run` to `{fn_name}`'s arguments; the adapter fills it from each \
                     request (`_meta`, a header, the principal, the session)"
                ));
            }
            return Ok(PlanPart::RunScope);
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
        Role::CallId(why) => return Err(call_id(&shown, name, name, why)),
        Role::Transaction => {
            return Err(format!(
                "`{shown}` is the transaction (`{name}` is marked `#[transaction]`): the guard \
                 opens a new one for each call, so it is no part of the ask and names no action. \
                 Key on the ids of the action instead, such as `<run>:credit:<order_id>`"
            ));
        }
        Role::Plain | Role::Context => {}
    }
    if !binding.identifier {
        if let Some(field) = p.fields.iter().find(|f| names::call_id(f).is_some()) {
            return Err(call_id(&shown, name, field, Why::Name));
        }
        let mut path = std::iter::once(&p.root).chain(&p.fields);
        if binding.role == Role::Plain
            && let Some(word) = path.find(|n| names::is_free_text(n))
        {
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
    let snake = names::snake(word);
    let name = if *word == snake {
        format!("`{word}` is a name")
    } else {
        format!("{}, a name", read_as(word, &snake))
    };
    format!(
        "`{shown}` reads like model-authored free text: {name} that almost always carries the \
         model's own wording, which it words anew on each ask, so two asks for one action would \
         get two keys and the action would run twice. Key on ids instead, such as \
         `<run>:ticket:<customer_id>`, and leave the wording out of the key (mark it \
         `#[free_text]`, or type it `FreeText<_>`); {how}"
    )
}

/// `` `REASON` is `reason` spelt another way ``: why a name written in
/// another case or with other separators was caught.
fn read_as(written: &str, listed: &str) -> String {
    format!("`{written}` is `{listed}` spelt another way")
}

/// `argument` is the argument; `named` the argument or field the rule caught.
fn call_id(shown: &str, argument: &str, named: &str, why: Why) -> String {
    let (what, how, hatch) = match (why, names::call_id(named)) {
        (Why::Marker, _) => (
            "a tool-call id",
            format!("`{named}` is marked `#[call_id]`"),
            None,
        ),
        (Why::Type, _) => ("a tool-call id", format!("`{named}` is a `CallId`"), None),
        (Why::Name, Some(id)) => {
            let hatch = if argument == named {
                format!(
                    "if `{named}` names an id that stays the same when an ask is repeated, mark \
                     it `#[identifier] {argument}: ..`"
                )
            } else {
                format!(
                    "if `{named}` names an id that stays the same when an ask is repeated, mark \
                     its argument `#[identifier] {argument}: ..`, which vouches for the names \
                     under it"
                )
            };
            let how = if named == id.name {
                format!("`{named}` is named as one; {}", id.source)
            } else {
                format!("{}; {}", read_as(named, id.name), id.source)
            };
            (id.what, how, Some(hatch))
        }
        (Why::Name, None) => ("a tool-call id", format!("`{named}` is named as one"), None),
    };
    let hatch = hatch.map(|h| format!("; {h}")).unwrap_or_default();
    format!(
        "`{shown}` is {what} ({how}): the framework makes a new id for every call, so two \
         identical asks get two keys and the action runs twice. Key on the run, the action and \
         the object acted on instead, as in `<run>:refund:<order_id>`{hatch}"
    )
}

/// `self.tenant`, `args.0`, spanned at the key string.
fn value(p: &Placeholder, root: TokenStream, span: Span) -> PlanPart {
    let fields = p.fields.iter().map(|f| match f.parse::<u32>() {
        Ok(index) => Index { index, span }.into_token_stream(),
        Err(_) => match f.strip_prefix("r#") {
            Some(raw) => Ident::new_raw(raw, span).into_token_stream(),
            None => Ident::new(f, span).into_token_stream(),
        },
    });
    let value = quote_spanned!(span=> #root #(. #fields)*);
    PlanPart::Value {
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
