//! The attribute's options: `#[idempotent(key = "...", store = ..., ...)]`.
//!
//! Parsing is by hand, so that every unknown, duplicated or contradicting
//! option gets its own message, spanned at the option, and all of them are
//! reported at once.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, Ident, Lit, LitStr, Token};

use crate::errors::Errors;
use crate::suggest;

/// The options every `#[idempotent]` accepts.
const OPTIONS: &[&str] = &[
    "key",
    "store",
    "retention",
    "wait",
    "lease",
    "record_errors",
    "takeover",
    "note",
    "conflict_note",
    "tool",
];

/// Names people reach for, and the option that does the job here.
const SYNONYMS: &[(&str, &str)] = &[
    ("template", "key"),
    ("key_template", "key"),
    ("ttl", "retention"),
    ("expiry", "retention"),
    ("expire", "retention"),
    ("expires", "retention"),
    ("keep", "retention"),
    ("retain", "retention"),
    ("timeout", "wait"),
    ("deadline", "wait"),
    ("wait_timeout", "wait"),
    ("lock_timeout", "lease"),
    ("replay_note", "note"),
    ("message", "note"),
    ("cache_errors", "record_errors"),
    ("record_err", "record_errors"),
    ("errors", "record_errors"),
    ("backend", "store"),
    ("name", "tool"),
    ("tool_name", "tool"),
];

/// The unit a duration option may end in, and its length in milliseconds.
const UNITS: &[(&str, u64)] = &[
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

/// What a takeover from a crashed holder does (`idempotent_tools::Takeover`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Takeover {
    Rerun,
    ReportUnknown,
}

/// A duration option, in milliseconds.
pub struct Duration {
    pub millis: u64,
    pub span: Span,
}

/// The options, read and checked.
#[derive(Default)]
pub struct Args {
    pub key: Option<LitStr>,
    pub store: Option<Expr>,
    pub retention: Option<Duration>,
    pub wait: Option<Duration>,
    pub lease: Option<Duration>,
    pub record_errors: bool,
    pub takeover: Option<Takeover>,
    pub note: Option<LitStr>,
    pub conflict_note: Option<LitStr>,
    pub tool: Option<LitStr>,
}

/// One option as written: `name`, `name = value`, or a bare value.
enum RawArg {
    Named {
        name: Ident,
        value: Option<Expr>,
    },
    /// `name(...)`: the list form, which no option takes.
    Listed {
        name: Ident,
        span: Span,
    },
    Positional(Expr),
}

fn parse_raw(input: ParseStream) -> syn::Result<RawArg> {
    if input.peek(Ident::peek_any) {
        let name = input.call(Ident::parse_any)?;
        if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            let value: Expr = input.parse()?;
            return Ok(RawArg::Named {
                name,
                value: Some(value),
            });
        }
        if input.peek(syn::token::Paren) {
            let group: proc_macro2::Group = input.parse()?;
            let span = name.span().join(group.span()).unwrap_or(name.span());
            return Ok(RawArg::Listed { name, span });
        }
        return Ok(RawArg::Named { name, value: None });
    }
    input.parse().map(RawArg::Positional)
}

/// Reads the attribute's options. Errors go to `errors`; whatever could be
/// read is returned, so the function's own checks still run.
pub fn parse(tokens: TokenStream, errors: &mut Errors) -> Args {
    let raw = match (|input: ParseStream| {
        Punctuated::<RawArg, Token![,]>::parse_terminated_with(input, parse_raw)
    })
    .parse2(tokens)
    {
        Ok(raw) => raw,
        Err(err) => {
            errors.push(err);
            return Args::default();
        }
    };

    let mut args = Args::default();
    let mut key_given = false;
    // The first occurrence of each option, to explain a second one.
    let mut seen: Vec<(String, String)> = Vec::new();
    for arg in raw {
        let (name, value) = match arg {
            RawArg::Named { name, value } => (name, value),
            RawArg::Listed { name, span } => {
                errors.add(
                    span,
                    format!(
                        "options are written `name = value`, not `{name}(...)`; \
                         for example `#[idempotent(key = \"<run>:refund:<order_id>\")]`"
                    ),
                );
                continue;
            }
            RawArg::Positional(value) => {
                // A bare string is the key, unnamed: one error says so.
                key_given |= is_str(&value);
                let message = if is_str(&value) {
                    "name the key template: write `key = \"<run>:refund:<order_id>\"`"
                } else {
                    "expected an option such as `key = \"<run>:refund:<order_id>\"`"
                };
                errors.add(value.span(), message);
                continue;
            }
        };
        let text = name.to_string();
        let written = value
            .as_ref()
            .map(|v| v.to_token_stream().to_string())
            .unwrap_or_default();

        if !OPTIONS.contains(&text.as_str()) {
            errors.add(name.span(), unknown_option(&text));
            continue;
        }
        if let Some((_, first)) = seen.iter().find(|(n, _)| *n == text) {
            let message = if *first == written || first.is_empty() || written.is_empty() {
                format!("`{text}` is given twice; keep one")
            } else {
                format!(
                    "`{text}` is given twice with different values, `{first}` and `{written}`; \
                     they contradict each other, so keep the one you mean"
                )
            };
            errors.add(name.span(), message);
            continue;
        }
        seen.push((text.clone(), written));

        match text.as_str() {
            "key" => {
                key_given = true;
                args.key = key(&name, value, errors);
            }
            "store" => match value {
                Some(value) => args.store = Some(value),
                None => errors.add(
                    name.span(),
                    "`store` names the store for this call site: write `store = <expression>`, \
                     anything that implements `idempotent_tools::IntoStore`, such as `store = &self.store`",
                ),
            },
            "retention" => args.retention = duration(&name, value, Zero::Refuse, errors),
            "wait" => args.wait = duration(&name, value, Zero::Allow, errors),
            "lease" => args.lease = duration(&name, value, Zero::Refuse, errors),
            "record_errors" => match value {
                None => args.record_errors = true,
                Some(value) => errors.add(
                    value.span(),
                    "`record_errors` is a flag: write `record_errors` alone to record final errors \
                     (every duplicate then gets the same error back), or leave it out to release \
                     the claim on an error so that a retry runs again",
                ),
            },
            "takeover" => args.takeover = takeover(&name, value, errors),
            "note" => args.note = note(&name, value, errors),
            "conflict_note" => args.conflict_note = note(&name, value, errors),
            "tool" => args.tool = tool(&name, value, errors),
            _ => {}
        }
    }
    if !key_given {
        errors.add(
            Span::call_site(),
            "`#[idempotent]` needs a key that names the action, the same way each time it is asked \
             for: write `#[idempotent(key = \"<run>:refund:<order_id>\")]`, with the run, the \
             action and the object acted on",
        );
    }
    args
}

fn unknown_option(name: &str) -> String {
    let list = OPTIONS
        .iter()
        .map(|o| format!("`{o}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if let Some((_, option)) = SYNONYMS.iter().find(|(s, _)| *s == name) {
        return format!(
            "unknown option `{name}`: this is called `{option}` here; write `{option}` instead \
             (the options are {list})"
        );
    }
    let hint = suggest::did_you_mean(name, OPTIONS.iter().copied(), |o| format!("`{o}`"));
    format!("unknown option `{name}`.{hint} The options are {list}")
}

fn is_str(expr: &Expr) -> bool {
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

fn key(name: &Ident, value: Option<Expr>, errors: &mut Errors) -> Option<LitStr> {
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
                 be an expression. To build a key at run time, use `idempotent_tools::Call` by hand",
            );
            None
        }
    }
}

#[derive(PartialEq)]
enum Zero {
    Allow,
    Refuse,
}

fn duration(
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

fn takeover(name: &Ident, value: Option<Expr>, errors: &mut Errors) -> Option<Takeover> {
    const CHOICES: [&str; 2] = ["rerun", "report_unknown"];
    let lit = value.as_ref().and_then(string_literal);
    let Some(lit) = lit else {
        let span = value.as_ref().map_or(name.span(), Spanned::span);
        errors.add(
            span,
            "`takeover` says what to do when a crashed holder's claim is taken over: write \
             `takeover = \"rerun\"` (run the action again; the provider's own key deduplicates) \
             or `takeover = \"report_unknown\"` (do not run it; report the outcome as unknown)",
        );
        return None;
    };
    match lit.value().as_str() {
        "rerun" => Some(Takeover::Rerun),
        "report_unknown" => Some(Takeover::ReportUnknown),
        other => {
            let hint = suggest::did_you_mean(other, CHOICES, |c| format!("\"{c}\""));
            errors.add(
                lit.span(),
                format!(
                    "`takeover` is \"rerun\" (run the action again when a crashed holder's claim \
                     is taken over) or \"report_unknown\" (do not run it; report the outcome as \
                     unknown), not \"{other}\".{hint}"
                ),
            );
            None
        }
    }
}

fn note(name: &Ident, value: Option<Expr>, errors: &mut Errors) -> Option<LitStr> {
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

fn tool(name: &Ident, value: Option<Expr>, errors: &mut Errors) -> Option<LitStr> {
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
