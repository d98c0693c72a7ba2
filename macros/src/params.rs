//! The function's parameters: the names they bind, and what role each plays
//! in a guarded call.
//!
//! Every name a parameter binds is one of:
//! - **plain**: part of the ask. It may go in the key; if it does not, it is
//!   fingerprinted, so the same key asked with other values is a conflict;
//! - **free text**: model-authored wording (`#[free_text]`, or typed
//!   `FreeText<_>`). Never in the key, never fingerprinted;
//! - **a call id**: the id of one call (`#[call_id]`, typed `CallId`, or
//!   named as the model APIs and agent frameworks name it, in any case:
//!   `call_id`, `tool_use_id`, `requestId`, ... as listed in
//!   [`crate::names::CALL_ID_NAMES`]). Never in the key, never fingerprinted:
//!   it is new for every call;
//! - **context**: what the framework hands the tool besides the ask
//!   (`#[context]`, rig's `#[rig(context)]`, or one of the frameworks' own
//!   context types listed in [`CONTEXT_TYPES`]). Its fields may be keyed on
//!   (`<ctx.tenant>`); it is never fingerprinted. A type of the user's own is
//!   context only when marked, whatever its name: `RefundContext { usd }`
//!   may carry part of the ask;
//! - **the transaction**: the argument marked `#[transaction]` under
//!   `#[idempotent(.., transaction)]`, which the guard fills with the
//!   transaction the body writes in. It is taken out of the signature:
//!   callers never pass it. Never in the key, never fingerprinted.
//!
//! Apart from its role, a plain parameter may be marked `#[identifier]`: the
//! user vouches that its name, and the field names under it, name ids even
//! where they read like the model's wording or a call's id (`text`,
//! `args.subject`, a customer's `request_id`).
//!
//! Destructured parameters are walked, and each name they bind gets the role
//! of its parameter.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, Ident, Meta, Pat, Signature, Type};

use crate::errors::Errors;
use crate::names;

/// The inert markers `#[idempotent]` reads on parameters and strips from its
/// output.
pub const MARKERS: &[&str] = &[
    "free_text",
    "call_id",
    "context",
    "identifier",
    "transaction",
];

/// The frameworks' own context types, by their last path segment: rig's
/// `ToolContext`, and rmcp's `RequestContext` and the other extractors that
/// carry the request rather than the ask. Whatever else an argument is, it is
/// part of the ask unless marked.
pub const CONTEXT_TYPES: &[&str] = &[
    // rig
    "ToolContext",
    // rmcp
    "RequestContext",
    "Peer",
    "Extensions",
    "Extension",
    "RequestMetaObject",
    "RequestId",
    "CancellationToken",
    "ToolName",
    "RequestState",
    "InputResponses",
];

/// What a bound name is to the guard.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Plain,
    FreeText(Why),
    CallId(Why),
    Context,
    Transaction,
}

/// How a role was recognised, to say so in messages.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Why {
    Marker,
    Type,
    Name,
}

/// A name bound by a parameter.
pub struct Binding {
    pub ident: Ident,
    pub role: Role,
    /// Marked `#[identifier]`: its name and the fields under it name ids.
    pub identifier: bool,
    /// Where a value of this name is best pointed at: the parameter's type
    /// when the parameter is this one name, or else the name.
    pub type_span: Span,
}

/// An argument marked `#[transaction]`.
pub struct TransactionArg {
    /// The marker's span.
    pub marker: Span,
    /// Its place among the function's inputs, `self` included.
    pub index: usize,
    /// Its pattern and type, as written.
    pub pat: Pat,
    pub ty: Type,
}

/// The parameters, read.
pub struct Params {
    /// The `self` token, if the function is a method.
    pub receiver: Option<Span>,
    pub bindings: Vec<Binding>,
    /// The arguments marked `#[transaction]`, in order.
    pub transaction: Vec<TransactionArg>,
}

impl Params {
    /// The binding named `name`.
    pub fn find(&self, name: &str) -> Option<&Binding> {
        self.bindings.iter().find(|b| b.ident == name)
    }

    /// Every name a placeholder may start with, in order.
    pub fn names(&self) -> Vec<String> {
        let mut names = Vec::new();
        if self.receiver.is_some() {
            names.push("self".to_owned());
        }
        names.extend(self.bindings.iter().map(|b| b.ident.to_string()));
        names
    }
}

/// Reads the parameters. Misused markers go to `errors`.
pub fn read(sig: &Signature, errors: &mut Errors) -> Params {
    let mut params = Params {
        receiver: None,
        bindings: Vec::new(),
        transaction: Vec::new(),
    };
    for (index, input) in sig.inputs.iter().enumerate() {
        match input {
            FnArg::Receiver(receiver) => {
                params.receiver = Some(receiver.self_token.span);
                for attr in &receiver.attrs {
                    if marker_name(attr).is_some() {
                        errors.add(
                            attr.path().span(),
                            "markers go on the arguments, not on `self`: `self` is never \
                             fingerprinted, and only its fields may go in a key (`<self.tenant>`)",
                        );
                    }
                }
            }
            FnArg::Typed(typed) => {
                let role = role_of(&typed.attrs, &typed.ty, errors);
                if role == Role::Transaction
                    && let Some(marker) = typed
                        .attrs
                        .iter()
                        .find(|attr| marker_name(attr) == Some("transaction"))
                {
                    params.transaction.push(TransactionArg {
                        marker: marker.path().span(),
                        index,
                        pat: (*typed.pat).clone(),
                        ty: (*typed.ty).clone(),
                    });
                }
                let identifier = typed
                    .attrs
                    .iter()
                    .any(|attr| marker_name(attr) == Some("identifier"));
                let whole = matches!(&*typed.pat, Pat::Ident(p) if p.subpat.is_none());
                let mut idents = Vec::new();
                bound_idents(&typed.pat, &mut idents);
                for ident in idents {
                    let role = match role {
                        Role::Plain
                            if !identifier && names::call_id(&ident.to_string()).is_some() =>
                        {
                            Role::CallId(Why::Name)
                        }
                        role => role,
                    };
                    let type_span = if whole { typed.ty.span() } else { ident.span() };
                    params.bindings.push(Binding {
                        ident,
                        role,
                        identifier,
                        type_span,
                    });
                }
            }
        }
    }
    params
}

/// The marker an attribute is, if it is one.
pub fn marker_name(attr: &Attribute) -> Option<&'static str> {
    let ident = attr.path().get_ident()?;
    MARKERS.iter().copied().find(|m| ident == m)
}

fn role_of(attrs: &[Attribute], ty: &Type, errors: &mut Errors) -> Role {
    // The first marker: its role, how it was written, and whether it is one
    // of ours (rig's `#[rig(context)]` is not).
    let mut marked: Option<(&'static str, &'static str, bool)> = None;
    let mut role = None;
    for attr in attrs {
        let (name, shown, ours) = match marker_name(attr) {
            Some("identifier") => {
                identifier_marker(attr, ty, errors);
                continue;
            }
            Some(name) => (name, name, true),
            None if is_rig_context(attr) => ("context", "rig(context)", false),
            None => continue,
        };
        if ours && !matches!(attr.meta, Meta::Path(_)) {
            errors.add(
                attr.path().span(),
                format!("`#[{name}]` takes no arguments: write `#[{name}]`"),
            );
        }
        if let Some((first, first_shown, first_ours)) = marked {
            if first != name {
                errors.add(
                    attr.path().span(),
                    format!(
                        "`#[{first_shown}]` and `#[{shown}]` contradict each other: an argument \
                         is either free text, a call id, context or the transaction; keep the \
                         one it is"
                    ),
                );
            } else if ours && first_ours {
                errors.add(
                    attr.path().span(),
                    format!("`#[{name}]` is given twice; keep one"),
                );
            }
            continue;
        }
        marked = Some((name, shown, ours));
        role = Some(match name {
            "free_text" => Role::FreeText(Why::Marker),
            "call_id" => Role::CallId(Why::Marker),
            "transaction" => Role::Transaction,
            _ => Role::Context,
        });
    }
    if let Some(role) = role {
        return role;
    }
    match type_name(ty).as_deref() {
        Some("FreeText") => Role::FreeText(Why::Type),
        Some("CallId") => Role::CallId(Why::Type),
        Some(name) if CONTEXT_TYPES.contains(&name) => Role::Context,
        _ => Role::Plain,
    }
}

/// `#[identifier]` takes no arguments, and vouches only for what may be
/// keyed: free text and call ids stay what their type says.
fn identifier_marker(attr: &Attribute, ty: &Type, errors: &mut Errors) {
    if !matches!(attr.meta, Meta::Path(_)) {
        errors.add(
            attr.path().span(),
            "`#[identifier]` takes no arguments: write `#[identifier]`",
        );
    }
    if let Some(name @ ("FreeText" | "CallId")) = type_name(ty).as_deref() {
        errors.add(
            attr.path().span(),
            format!(
                "`#[identifier]` cannot make a `{name}` an id: its type says it is new on each \
                 ask. Key on the ids of the action instead, as in `<run>:refund:<order_id>`"
            ),
        );
    }
}

/// `#[rig(context)]`: rig's own marker for its context parameter.
fn is_rig_context(attr: &Attribute) -> bool {
    if !attr.path().is_ident("rig") {
        return false;
    }
    let Meta::List(list) = &attr.meta else {
        return false;
    };
    list.tokens
        .clone()
        .into_iter()
        .any(|t| matches!(t, proc_macro2::TokenTree::Ident(i) if i == "context"))
}

/// The last path segment of a type, through references and parentheses:
/// `FreeText` for `&FreeText<String>`.
pub fn type_name(ty: &Type) -> Option<String> {
    match ty {
        Type::Reference(r) => type_name(&r.elem),
        Type::Paren(p) => type_name(&p.elem),
        Type::Group(g) => type_name(&g.elem),
        Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

/// The names a pattern binds, as `tracing-attributes` walks them.
fn bound_idents(pat: &Pat, out: &mut Vec<Ident>) {
    match pat {
        Pat::Ident(p) => {
            out.push(p.ident.clone());
            if let Some((_, sub)) = &p.subpat {
                bound_idents(sub, out);
            }
        }
        Pat::Reference(p) => bound_idents(&p.pat, out),
        Pat::Paren(p) => bound_idents(&p.pat, out),
        Pat::Type(p) => bound_idents(&p.pat, out),
        Pat::Struct(p) => {
            for field in &p.fields {
                bound_idents(&field.pat, out);
            }
        }
        Pat::Tuple(p) => p.elems.iter().for_each(|e| bound_idents(e, out)),
        Pat::TupleStruct(p) => p.elems.iter().for_each(|e| bound_idents(e, out)),
        Pat::Slice(p) => p.elems.iter().for_each(|e| bound_idents(e, out)),
        // Every alternative binds the same names.
        Pat::Or(p) => {
            if let Some(first) = p.cases.first() {
                bound_idents(first, out);
            }
        }
        _ => {}
    }
}
