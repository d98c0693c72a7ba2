//! Every error of one item, reported together.

use std::fmt::Display;

use proc_macro2::{Span, TokenStream};

/// Collects errors so that one build shows all of an item's mistakes, each
/// at the token that caused it.
#[derive(Default)]
pub struct Errors(Option<syn::Error>);

impl Errors {
    /// Adds an error.
    pub fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Adds an error at `span`.
    pub fn add(&mut self, span: Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    /// Whether nothing went wrong.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The `compile_error!`s, or nothing.
    pub fn to_compile_errors(&self) -> TokenStream {
        self.0
            .as_ref()
            .map(syn::Error::to_compile_error)
            .unwrap_or_default()
    }
}
