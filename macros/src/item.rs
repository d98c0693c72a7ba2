//! The function as the user wrote it, token for token.
//!
//! `#[idempotent]` rewrites only the body. The attributes (doc comments,
//! `#[tool]`, `#[rig_tool]`, `#[rig(context)]`), the visibility and the
//! signature are handed on as the very tokens that came in, so that another
//! attribute below or above it reads the same function. The one change
//! outside the body: the inert markers `#[free_text]`, `#[call_id]`,
//! `#[context]` and `#[identifier]` are taken off the parameters, since no
//! other macro knows them.
//!
//! A body that `#[tracing::instrument]` above has already rewritten is
//! recognised: only the user's block inside it is guarded, so the span
//! covers the guard and the action, and instrument's own check of the
//! return type reads the guarded function's type.

use proc_macro2::{Delimiter, Group, Spacing, TokenStream, TokenTree};

use crate::params::MARKERS;

/// A function item's tokens, with its parameter list and body located.
pub struct FnTokens {
    tokens: Vec<TokenTree>,
    params: Option<usize>,
    body: Option<usize>,
}

impl FnTokens {
    /// Splits an item into top-level tokens and finds its parts.
    pub fn new(item: TokenStream) -> FnTokens {
        let tokens: Vec<TokenTree> = item.into_iter().collect();
        let params = params_index(&tokens);
        let body = match tokens.last() {
            Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => {
                Some(tokens.len() - 1)
            }
            _ => None,
        };
        FnTokens {
            tokens,
            params,
            body,
        }
    }

    /// Takes the inert parameter markers off.
    pub fn strip_markers(&mut self) {
        let Some(i) = self.params else { return };
        let TokenTree::Group(group) = &self.tokens[i] else {
            return;
        };
        let mut stripped = Group::new(group.delimiter(), strip(group.stream()));
        stripped.set_span(group.span());
        self.tokens[i] = TokenTree::Group(stripped);
    }

    /// The body's tokens, without its braces.
    pub fn body(&self) -> Option<&Group> {
        match self.body.map(|i| &self.tokens[i]) {
            Some(TokenTree::Group(g)) => Some(g),
            _ => None,
        }
    }

    /// The item with its body's contents replaced by `body`.
    pub fn with_body(mut self, body: TokenStream) -> TokenStream {
        if let Some(i) = self.body
            && let TokenTree::Group(old) = &self.tokens[i]
        {
            let mut new = Group::new(Delimiter::Brace, body);
            new.set_span(old.span());
            self.tokens[i] = TokenTree::Group(new);
        }
        self.into_tokens()
    }

    /// The item as it is.
    pub fn into_tokens(self) -> TokenStream {
        self.tokens.into_iter().collect()
    }
}

/// The parameter list: the first parenthesised group after `fn name` that is
/// not inside the generics (where `Fn(u8) -> u8` has parentheses of its own).
fn params_index(tokens: &[TokenTree]) -> Option<usize> {
    let fn_at = tokens
        .iter()
        .position(|t| matches!(t, TokenTree::Ident(i) if i == "fn"))?;
    let mut depth = 0usize;
    let mut previous: Option<&TokenTree> = None;
    // Skip `fn` and the name.
    for (i, token) in tokens.iter().enumerate().skip(fn_at + 2) {
        match token {
            TokenTree::Punct(p) if p.as_char() == '<' => depth += 1,
            TokenTree::Punct(p) if p.as_char() == '>' => {
                let arrow = matches!(
                    previous,
                    Some(TokenTree::Punct(q)) if q.as_char() == '-' && q.spacing() == Spacing::Joint
                );
                if !arrow {
                    depth = depth.saturating_sub(1);
                }
            }
            TokenTree::Group(g) if g.delimiter() == Delimiter::Parenthesis && depth == 0 => {
                return Some(i);
            }
            _ => {}
        }
        previous = Some(token);
    }
    None
}

/// The user's block inside a body that `#[tracing::instrument]` has
/// rewritten, if this is one.
///
/// tracing-attributes (0.1) writes an async fn's body as an `async move`
/// block that opens with a fake return, `if false { let
/// __tracing_attr_fake_return: Ret = loop {}; return ..; }`, followed by the
/// user's block in braces of its own. That block is the body to guard.
pub fn instrumented_block(body: &Group) -> Option<Group> {
    let mut found = None;
    rewrite_instrumented(body.stream(), &mut |block| {
        found = Some(block.clone());
        block.clone()
    });
    found
}

/// The body with the user's block inside `#[tracing::instrument]`'s
/// rewriting replaced by `new`.
pub fn replace_instrumented_block(body: &Group, new: TokenStream) -> TokenStream {
    let mut new = Some(new);
    let (stream, _) = rewrite_instrumented(body.stream(), &mut |block| {
        let mut group = Group::new(Delimiter::Brace, new.take().unwrap_or_default());
        group.set_span(block.span());
        group
    });
    stream
}

/// Finds the block after instrument's fake return, and rewrites the first
/// one found with `f`.
fn rewrite_instrumented(
    stream: TokenStream,
    f: &mut dyn FnMut(&Group) -> Group,
) -> (TokenStream, bool) {
    let mut tokens: Vec<TokenTree> = stream.into_iter().collect();
    for i in 0..tokens.len() {
        let fake_return = matches!(
            (&tokens[i], tokens.get(i + 1), tokens.get(i + 2), tokens.get(i + 3)),
            (
                TokenTree::Ident(if_),
                Some(TokenTree::Ident(false_)),
                Some(TokenTree::Group(edge)),
                Some(TokenTree::Group(block)),
            ) if if_ == "if"
                && false_ == "false"
                && edge.delimiter() == Delimiter::Brace
                && block.delimiter() == Delimiter::Brace
                && edge.stream().into_iter().any(
                    |t| matches!(t, TokenTree::Ident(i) if i == "__tracing_attr_fake_return")
                )
        );
        if fake_return && let TokenTree::Group(block) = &tokens[i + 3] {
            tokens[i + 3] = TokenTree::Group(f(block));
            return (tokens.into_iter().collect(), true);
        }
        if let TokenTree::Group(group) = &tokens[i] {
            let (inner, done) = rewrite_instrumented(group.stream(), f);
            if done {
                let mut new = Group::new(group.delimiter(), inner);
                new.set_span(group.span());
                tokens[i] = TokenTree::Group(new);
                return (tokens.into_iter().collect(), true);
            }
        }
    }
    (tokens.into_iter().collect(), false)
}

/// Removes `#[free_text]`, `#[call_id]`, `#[context]` and `#[identifier]`
/// (with or without arguments) from a parameter list.
fn strip(params: TokenStream) -> TokenStream {
    let tokens: Vec<TokenTree> = params.into_iter().collect();
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        if let (TokenTree::Punct(pound), Some(TokenTree::Group(attr))) =
            (&tokens[i], tokens.get(i + 1))
            && pound.as_char() == '#'
            && attr.delimiter() == Delimiter::Bracket
            && is_marker(attr.stream())
        {
            i += 2;
            continue;
        }
        out.push(tokens[i].clone());
        i += 1;
    }
    out.into_iter().collect()
}

fn is_marker(attr: TokenStream) -> bool {
    let mut tokens = attr.into_iter();
    let first = tokens.next();
    let rest = tokens.next();
    match (first, rest) {
        (Some(TokenTree::Ident(name)), None) => MARKERS.iter().any(|m| name == m),
        (Some(TokenTree::Ident(name)), Some(TokenTree::Group(_))) => {
            MARKERS.iter().any(|m| name == m)
        }
        _ => false,
    }
}

/// Splits a body into its inner attributes (`#![allow(..)]`), which must stay
/// at the top of the function, and the rest.
pub fn inner_attributes(body: TokenStream) -> (TokenStream, TokenStream) {
    let mut tokens: Vec<TokenTree> = body.into_iter().collect();
    let mut i = 0;
    while let (
        Some(TokenTree::Punct(pound)),
        Some(TokenTree::Punct(bang)),
        Some(TokenTree::Group(g)),
    ) = (tokens.get(i), tokens.get(i + 1), tokens.get(i + 2))
    {
        if pound.as_char() != '#' || bang.as_char() != '!' || g.delimiter() != Delimiter::Bracket {
            break;
        }
        i += 3;
    }
    let rest = tokens.split_off(i);
    (tokens.into_iter().collect(), rest.into_iter().collect())
}
