//! A body that `#[tracing::instrument]` above has already rewritten.
//!
//! Only the user's block inside it is guarded, so the span covers the guard
//! and the action, and instrument's own check of the return type reads the
//! guarded function's type. The body is tokens (see `item`), so it is
//! searched as tokens.

use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};

/// The user's block inside a body that `#[tracing::instrument]` has
/// rewritten, if this is one.
///
/// tracing-attributes (0.1) writes an async fn's body as an `async move`
/// block that opens with a fake return, `if false { let
/// __tracing_attr_fake_return: Ret = loop {}; return ..; }`, followed by the
/// user's block in braces of its own. That block is the body to guard.
pub fn user_block(body: &Group) -> Option<Group> {
    let mut found = None;
    rewrite_instrumented(body.stream(), &mut |block| {
        found = Some(block.clone());
        block.clone()
    });
    found
}

/// The body with the user's block inside `#[tracing::instrument]`'s
/// rewriting replaced by `new`.
pub fn replace_user_block(body: &Group, new: TokenStream) -> TokenStream {
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
