//! The value each option takes, read and checked: a template, durations
//! with a unit, a takeover policy, notes for the model, a tool's name.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Expr, Ident, Lit, LitStr};

use crate::errors::Errors;
use crate::suggest;

/// The unit a duration option may end in, and its length in milliseconds.
const UNITS: &[(&str, u64)] = &[
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

/// What a takeover from a crashed holder does (`idempotent_tools::call::Takeover`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Takeover {
    Rerun,
    ReportUnknown,
    Verify,
}

/// A duration option, in milliseconds.
pub struct Duration {
    pub millis: u64,
    pub span: Span,
}

/// Whether a value is a bare string literal.
pub fn is_str(expr: &Expr) -> bool {
    matches!(expr, Expr::Lit(lit) if matches!(lit.lit, Lit::Str(_)))
}

fn string_literal(expr: &Expr) -> Option<&LitStr> {
    match expr {
        Expr::Lit(lit) => match &lit.lit {
            Lit::Str(s) => Some(s),
            _ => None,
        },
        Expr::Group(group) => string_literal(&group.expr),
        _ => None,
    }
}

pub fn key(name: &Ident, value: Option<Expr>, errors: &mut Errors) -> Option<LitStr> {
    let Some(value) = value else {
        errors.add(
            name.span(),
            "`key` needs a template: write `key = \"<run>:refund:<order_id>\"`",
        );
        return None;
    };
    match string_literal(&value) {
        Some(lit) => Some(lit.clone()),
        None => {
            errors.add(
                value.span(),
                "`key` takes a string literal, such as `key = \"<run>:refund:<order_id>\"`: the \
                 template is checked against the arguments while the crate compiles, so it cannot \
                 be an expression. To build a key at run time, use `idempotent_tools::call::Call` by hand",
            );
            None
        }
    }
}

/// Whether a duration option may be zero.
#[derive(PartialEq)]
pub enum Zero {
    Allow,
    Refuse,
}

pub fn duration(
    name: &Ident,
    value: Option<Expr>,
    zero: Zero,
    errors: &mut Errors,
) -> Option<Duration> {
    let example = match name.to_string().as_str() {
        "retention" => "\"7d\"",
        _ => "\"30s\"",
    };
    let Some(value) = value else {
        errors.add(
            name.span(),
            format!("`{name}` needs a duration: write `{name} = {example}`"),
        );
        return None;
    };
    let Some(lit) = string_literal(&value) else {
        errors.add(
            value.span(),
            format!(
                "`{name}` takes a duration as a string with its unit, such as `{name} = {example}`; \
                 a bare number would leave the unit to guess"
            ),
        );
        return None;
    };
    let text = lit.value();
    let units = "ms, s, m, h or d";
    let digits_end = text
        .char_indices()
        .find(|(_, c)| !c.is_ascii_digit())
        .map_or(text.len(), |(i, _)| i);
    let (digits, unit) = text.split_at(digits_end);
    let Some(&(_, per)) = UNITS.iter().find(|(u, _)| *u == unit) else {
        errors.add(
            lit.span(),
            format!(
                "`{text}` is not a duration: write a whole number and one unit of {units}, \
                 such as {example}"
            ),
        );
        return None;
    };
    if digits.is_empty() {
        errors.add(
            lit.span(),
            format!("`{text}` has no number: write one before the unit, such as {example}"),
        );
        return None;
    }
    let Some(millis) = digits.parse::<u64>().ok().and_then(|n| n.checked_mul(per)) else {
        errors.add(lit.span(), format!("`{text}` is too long a duration"));
        return None;
    };
    if millis == 0 && zero == Zero::Refuse {
        let why = match name.to_string().as_str() {
            "retention" => {
                "a record kept for no time is forgotten as soon as the action finishes, \
                 so every duplicate would run the action again"
            }
            _ => {
                "a claim with no lease may be taken over at once, \
                 so a duplicate could run the action while the first call is still running it"
            }
        };
        errors.add(
            lit.span(),
            format!(
                "`{name}` must be longer than zero: {why}; leave the option out for the default"
            ),
        );
        return None;
    }
    Some(Duration {
        millis,
        span: lit.span(),
    })
}

/// `store = <expr>`: any expression, evaluated on each call.
pub fn store(name: &Ident, value: Option<Expr>, errors: &mut Errors) -> Option<Expr> {
    if value.is_none() {
        errors.add(
            name.span(),
            "`store` names the store for this call site: write `store = <expression>`, \
             anything that implements `idempotent_tools::store::IntoStore`, such as `store = &self.store`",
        );
    }
    value
}

/// `record_errors`: a flag, with no value.
pub fn record_errors(value: Option<Expr>, errors: &mut Errors) -> bool {
    let Some(value) = value else { return true };
    errors.add(
        value.span(),
        "`record_errors` is a flag: write `record_errors` alone to record final errors \
         (every duplicate then gets the same error back), or leave it out to release \
         the claim on an error so that a retry runs again",
    );
    false
}

pub fn transaction(name: &Ident, value: Option<Expr>, errors: &mut Errors) -> Option<Span> {
    let Some(value) = value else {
        return Some(name.span());
    };
    errors.add(
        value.span(),
        "`transaction` is a flag: write `transaction` alone to run the body in a transaction on \
         the store's database, handed through an argument marked `#[transaction]`",
    );
    None
}

pub fn takeover(name: &Ident, value: Option<Expr>, errors: &mut Errors) -> Option<Takeover> {
    const CHOICES: [&str; 3] = ["rerun", "verify", "report_unknown"];
    const MEANING: &str = "\"rerun\" (run the action again; the provider's own key deduplicates), \
         \"verify\" (ask the provider through `verify = ...` whether it happened) or \
         \"report_unknown\" (do not run it; report the outcome as unknown)";
    let lit = value.as_ref().and_then(string_literal);
    let Some(lit) = lit else {
        let span = value.as_ref().map_or(name.span(), Spanned::span);
        errors.add(
            span,
            format!(
                "`takeover` says what to do when a crashed holder's claim is taken over: write \
                 `takeover = ` {MEANING}"
            ),
        );
        return None;
    };
    match lit.value().as_str() {
        "rerun" => Some(Takeover::Rerun),
        "report_unknown" => Some(Takeover::ReportUnknown),
        "verify" => Some(Takeover::Verify),
        other => {
            let hint = suggest::did_you_mean(other, CHOICES, |c| format!("\"{c}\""));
            errors.add(
                lit.span(),
                format!(
                    "`takeover` is {MEANING} when a crashed holder's claim is taken over, \
                     not \"{other}\".{hint}"
                ),
            );
            None
        }
    }
}

/// `verify = path`: the function that asks the provider whether the action
/// happened.
pub fn verify(name: &Ident, value: Option<Expr>, errors: &mut Errors) -> Option<syn::Path> {
    match value {
        Some(Expr::Path(path)) if path.qself.is_none() => Some(path.path),
        value => {
            let span = value.as_ref().map_or(name.span(), Spanned::span);
            errors.add(
                span,
                "`verify` names the async fn that asks the provider whether the action happened: \
                 write `verify = find_refund`, for \
                 `async fn find_refund(key: Key, <each argument of the ask>) -> Verified<T>`",
            );
            None
        }
    }
}

pub fn note(name: &Ident, value: Option<Expr>, errors: &mut Errors) -> Option<LitStr> {
    let lit = value.as_ref().and_then(string_literal);
    match lit {
        Some(lit) if !lit.value().trim().is_empty() => Some(lit.clone()),
        Some(lit) => {
            errors.add(
                lit.span(),
                format!(
                    "`{name}` is empty: the note tells the model what was already done, so it \
                     does not ask again; write a sentence, or leave the option out for the default"
                ),
            );
            None
        }
        None => {
            let span = value.as_ref().map_or(name.span(), Spanned::span);
            errors.add(
                span,
                format!(
                    "`{name}` takes a string literal for the model, such as \
                     `{name} = \"This refund was already issued.\"`"
                ),
            );
            None
        }
    }
}

pub fn tool(name: &Ident, value: Option<Expr>, errors: &mut Errors) -> Option<LitStr> {
    let lit = value.as_ref().and_then(string_literal);
    match lit {
        Some(lit) if !lit.value().is_empty() => Some(lit.clone()),
        _ => {
            let span = value.as_ref().map_or(name.span(), Spanned::span);
            errors.add(
                span,
                format!(
                    "`{name}` names the tool in the store, such as `tool = \"shop::refund\"`; \
                     leave it out to use the module path and the function's name"
                ),
            );
            None
        }
    }
}
