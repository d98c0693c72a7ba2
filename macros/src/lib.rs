//! The compile-time half of [`idempotent`](https://docs.rs/idempotent):
//! `#[idempotent(key = "...")]` and `#[derive(KeyPart)]`.
//!
//! Use them through the `idempotent` crate, which re-exports both and holds
//! the runtime the expansion calls into. The attribute checks the key
//! template against the function's arguments while the crate compiles, so a
//! key that could split one ask into two actions (free text, a tool-call id)
//! or merge two asks into one (a fixed key) never builds.
//!
//! The work flows one way: [`args`] reads the attribute's options,
//! [`template`] reads the key template, [`params`] reads the function's
//! parameters, [`validate`] applies the rules, and [`expand`] writes the
//! tokens. [`item`] keeps the user's tokens as they were, and
//! [`key_part`] is the derive.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use proc_macro::TokenStream;

mod args;
mod errors;
mod expand;
mod item;
mod key_part;
mod params;
mod suggest;
mod template;
mod validate;

/// Runs an async tool's action once per ask, however many times it is
/// called. See the `idempotent` crate for the full documentation.
#[proc_macro_attribute]
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::idempotent(args.into(), item.into()).into()
}

/// Lets a newtype or a fieldless enum be part of an idempotency key. See the
/// `idempotent` crate for the full documentation.
#[proc_macro_derive(KeyPart, attributes(key_part))]
pub fn derive_key_part(input: TokenStream) -> TokenStream {
    key_part::derive(input.into()).into()
}
