//! The path the expansion names the facade crate by.

use proc_macro_crate::{FoundCrate, crate_name};
use proc_macro2::{Punct, Spacing, Span, TokenStream};
use quote::TokenStreamExt;
use syn::Ident;

/// The facade's name on crates.io.
const FACADE: &str = "idempotent-tools";

/// The runtime module the expansion calls into, named for this release
/// (`__private` and the major and minor version), so that a facade of
/// another release has no such module and the pair fails to compile rather
/// than misbehave. The runtime declares it under the same name;
/// `tests/ui/fail/private_module_of_another_release.rs` holds the error.
const PRIVATE: &str = "__private0_1";

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
        push_segment(&mut path, &self.0, span);
        path
    }

    /// `::name::__private0_1`, spanned at `span`: the path of the
    /// functions and traits the expansion calls into.
    pub fn private_at(&self, span: Span) -> TokenStream {
        let mut path = self.at(span);
        push_segment(&mut path, PRIVATE, span);
        path
    }
}

/// Appends `::name` to a path, every token at `span`.
fn push_segment(path: &mut TokenStream, name: &str, span: Span) {
    let mut colons = Punct::new(':', Spacing::Joint);
    colons.set_span(span);
    path.append(colons);
    let mut colon = Punct::new(':', Spacing::Alone);
    colon.set_span(span);
    path.append(colon);
    path.append(Ident::new(name, span));
}
