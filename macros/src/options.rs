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
use syn::{Expr, Ident, LitStr, Token};

use crate::errors::Errors;
use crate::suggest;
use crate::values::{self, Zero, is_str};

pub use crate::values::{Duration, Takeover};

/// Reads one option's value (if it has one) into the options.
type Read = fn(&mut Options, &Ident, Option<Expr>, &mut Errors);

/// Every option `#[idempotent]` accepts, and how its value is read: the
/// parser and the list that messages show both come from here.
const OPTIONS: &[(&str, Read)] = &[
    ("key", |o, name, value, errors| {
        o.key = values::key(name, value, errors);
    }),
    ("store", |o, name, value, errors| {
        o.store = values::store(name, value, errors);
    }),
    ("retention", |o, name, value, errors| {
        o.retention = values::duration(name, value, Zero::Refuse, errors);
    }),
    ("wait", |o, name, value, errors| {
        o.wait = values::duration(name, value, Zero::Allow, errors);
    }),
    ("lease", |o, name, value, errors| {
        o.lease = values::duration(name, value, Zero::Refuse, errors);
    }),
    ("record_errors", |o, _, value, errors| {
        o.record_errors = values::record_errors(value, errors);
    }),
    ("takeover", |o, name, value, errors| {
        o.takeover_at = Some(value.as_ref().map_or(name.span(), Spanned::span));
        o.takeover = values::takeover(name, value, errors);
    }),
    ("verify", |o, name, value, errors| {
        o.verify = values::verify(name, value, errors);
    }),
    ("settle", |o, name, value, errors| {
        o.settle = values::duration(name, value, Zero::Allow, errors);
    }),
    ("note", |o, name, value, errors| {
        o.note = values::note(name, value, errors);
    }),
    ("conflict_note", |o, name, value, errors| {
        o.conflict_note = values::note(name, value, errors);
    }),
    ("tool", |o, name, value, errors| {
        o.tool = values::tool(name, value, errors);
    }),
    ("transaction", |o, name, value, errors| {
        o.transaction = values::transaction(name, value, errors);
    }),
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
    ("transactional", "transaction"),
    ("tx", "transaction"),
    ("tool_name", "tool"),
    ("verifier", "verify"),
    ("verification", "verify"),
    ("check", "verify"),
    ("lag", "settle"),
    ("settle_time", "settle"),
];

/// The options, read and checked.
#[derive(Default)]
pub struct Options {
    pub key: Option<LitStr>,
    pub store: Option<Expr>,
    pub retention: Option<Duration>,
    pub wait: Option<Duration>,
    pub lease: Option<Duration>,
    pub record_errors: bool,
    pub takeover: Option<Takeover>,
    /// Where `takeover` is written.
    pub takeover_at: Option<Span>,
    /// `verify = path`: the function that asks the provider whether the
    /// action happened.
    pub verify: Option<syn::Path>,
    /// `settle = "2s"`: how long the provider's lookups lag behind its
    /// writes.
    pub settle: Option<Duration>,
    pub note: Option<LitStr>,
    pub conflict_note: Option<LitStr>,
    pub tool: Option<LitStr>,
    /// `transaction`, where it is written: the body runs in a transaction
    /// on the store's database, handed through the `#[transaction]`
    /// argument.
    pub transaction: Option<Span>,
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
pub fn parse(tokens: TokenStream, errors: &mut Errors) -> Options {
    let raw = match (|input: ParseStream| {
        Punctuated::<RawArg, Token![,]>::parse_terminated_with(input, parse_raw)
    })
    .parse2(tokens)
    {
        Ok(raw) => raw,
        Err(err) => {
            errors.push(err);
            return Options::default();
        }
    };

    let mut options = Options::default();
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

        let Some(&(_, read)) = OPTIONS.iter().find(|(option, _)| *option == text) else {
            errors.add(name.span(), unknown_option(&text));
            continue;
        };
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
        key_given |= text == "key";
        seen.push((text, written));
        read(&mut options, &name, value, errors);
    }
    if !key_given {
        errors.add(
            Span::call_site(),
            "`#[idempotent]` needs a key that names the action, the same way each time it is asked \
             for: write `#[idempotent(key = \"<run>:refund:<order_id>\")]`, with the run, the \
             action and the object acted on",
        );
    }
    options
}

fn unknown_option(name: &str) -> String {
    let list = OPTIONS
        .iter()
        .map(|(o, _)| format!("`{o}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if let Some((_, option)) = SYNONYMS.iter().find(|(s, _)| *s == name) {
        return format!(
            "unknown option `{name}`: this is called `{option}` here; write `{option}` instead \
             (the options are {list})"
        );
    }
    let hint = suggest::did_you_mean(name, OPTIONS.iter().map(|(o, _)| *o), |o| format!("`{o}`"));
    format!("unknown option `{name}`.{hint} The options are {list}")
}
