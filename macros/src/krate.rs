//! The path the expansion names the facade crate by.

use proc_macro_crate::{FoundCrate, crate_name};
use proc_macro2::{Punct, Spacing, Span, TokenStream};
use quote::TokenStreamExt;
use syn::Ident;

/// The facade's name on crates.io.
const FACADE: &str = "idempotent-tools";

/// The facade's name as the user's crate knows it: `idempotent_tools`, or
/// the name the user's Cargo.toml gives the dependency (`tools = { package =
/// "idempotent-tools", .. }` gives `tools`), so a renamed dependency keeps
/// working.
pub struct Krate(String);

impl Krate {
    /// Looks the name up in the user's Cargo.toml.
    pub fn find() -> Krate {
        Krate(match crate_name(FACADE) {
            Ok(FoundCrate::Name(name)) => name,
            // The facade's own tests and examples name it as users do; a
            // manifest that cannot be read falls back to the usual name.
            Ok(FoundCrate::Itself) | Err(_) => FACADE.replace('-', "_"),
        })
    }

    /// `::name`, spanned at `span` like the tokens around it, so that an
    /// error in the path it starts is reported at one place.
    pub fn at(&self, span: Span) -> TokenStream {
        let mut path = TokenStream::new();
        let mut colons = Punct::new(':', Spacing::Joint);
        colons.set_span(span);
        path.append(colons);
        let mut colon = Punct::new(':', Spacing::Alone);
        colon.set_span(span);
        path.append(colon);
        path.append(Ident::new(&self.0, span));
        path
    }
}
