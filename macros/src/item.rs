//! The function as the user wrote it, parsed once.
//!
//! `#[idempotent]` rewrites only the body. The attributes (doc comments,
//! `#[tool]`, `#[rig_tool]`, `#[rig(context)]`), the visibility and the
//! signature are parsed with syn and written back as the same tokens, so
//! that another attribute below or above it reads the same function. The
//! body is kept as tokens, unparsed (tracing-attributes' `MaybeItemFn`): it
//! is handed on whole, inside the guard. The one change outside the body:
//! the inert markers `#[free_text]`, `#[call_id]`, `#[context]`,
//! `#[identifier]` and `#[transaction]` are taken off the parameters, since
//! no other macro knows them; and under `transaction`, the argument marked
//! `#[transaction]` is taken out of the signature, since the guard, not the
//! caller, hands it over.

use proc_macro2::{Delimiter, Group, Span, TokenStream};
use quote::{ToTokens, TokenStreamExt};
use syn::parse::{Parse, ParseStream, Parser};
use syn::{Attribute, FnArg, Signature, Visibility};

use crate::params::marker_name;

/// A function item: its attributes, visibility and signature parsed, its
/// body kept as tokens.
pub struct Item {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub sig: Signature,
    /// The body, braces included.
    pub body: Group,
}

impl Parse for Item {
    fn parse(input: ParseStream) -> syn::Result<Item> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let sig = input.parse()?;
        let body: Group = input.parse()?;
        if body.delimiter() != Delimiter::Brace {
            return Err(syn::Error::new(body.span(), "expected the function's body"));
        }
        Ok(Item {
            attrs,
            vis,
            sig,
            body,
        })
    }
}

impl Item {
    /// Takes the inert parameter markers off, once the parameters are read.
    pub fn strip_markers(&mut self) {
        for input in &mut self.sig.inputs {
            let attrs = match input {
                FnArg::Receiver(receiver) => &mut receiver.attrs,
                FnArg::Typed(typed) => &mut typed.attrs,
            };
            attrs.retain(|attr| marker_name(attr).is_none());
        }
    }

    /// The item without its input at `index`, and with an empty body.
    pub fn clone_without_input(&self, index: usize) -> Item {
        let mut sig = self.sig.clone();
        sig.inputs = self
            .sig
            .inputs
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != index)
            .map(|(_, input)| input.clone())
            .collect();
        Item {
            attrs: self.attrs.clone(),
            vis: self.vis.clone(),
            sig,
            body: Group::new(Delimiter::Brace, TokenStream::new()),
        }
    }

    /// rmcp's `#[tool]` on this function, written `#[tool]` or
    /// `#[rmcp::tool]`. Only a method is taken for rmcp's: rmcp's router
    /// serves methods, and other crates' `#[tool]` marks free functions.
    pub fn rmcp_tool(&self) -> Option<&Attribute> {
        self.sig.receiver()?;
        self.attrs.iter().find(|attr| {
            let path = attr.path();
            path.is_ident("tool")
                || (path.segments.len() == 2
                    && path.segments[0].ident == "rmcp"
                    && path.segments[1].ident == "tool")
        })
    }

    /// The item with its body's contents replaced by `body`, in braces of
    /// the original span.
    pub fn with_body(&self, body: TokenStream) -> TokenStream {
        let mut out = TokenStream::new();
        out.append_all(&self.attrs);
        self.vis.to_tokens(&mut out);
        self.sig.to_tokens(&mut out);
        out.append(braced(body, self.body.span()));
        out
    }
}

/// A body's inner attributes (`#![allow(..)]`), which must stay at the top
/// of the function, and its statements in braces of the body's span, so
/// that errors about its value point there.
pub struct Body {
    pub inner_attrs: Vec<Attribute>,
    pub block: Group,
}

impl Body {
    /// Splits a braced body.
    pub fn split(body: &Group) -> Body {
        let parser = |input: ParseStream| {
            let inner_attrs = input.call(Attribute::parse_inner)?;
            let stmts: TokenStream = input.parse()?;
            Ok((inner_attrs, stmts))
        };
        // A body whose inner attributes do not parse is kept whole, for
        // the compiler to report.
        let (inner_attrs, stmts) = parser
            .parse2(body.stream())
            .unwrap_or_else(|_| (Vec::new(), body.stream()));
        Body {
            inner_attrs,
            block: braced(stmts, body.span()),
        }
    }
}

fn braced(stream: TokenStream, span: Span) -> Group {
    let mut group = Group::new(Delimiter::Brace, stream);
    group.set_span(span);
    group
}
