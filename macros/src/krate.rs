//! The path the expansion names the facade crate by.

use std::env;
use std::fs;
use std::path::Path;

use proc_macro_crate::{FoundCrate, crate_name};
use proc_macro2::{Punct, Spacing, Span, TokenStream};
use quote::TokenStreamExt;
use syn::Ident;
use toml_edit::{Document, Item, TableLike};

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
    ///
    /// The crate's own manifest answers when it names the facade, as
    /// nearly every crate's does. Only a dependency inherited from the
    /// workspace under another name needs the workspace's manifest, which
    /// `proc-macro-crate` finds by running `cargo locate-project`: a process
    /// per compiled crate, so it is asked only then.
    pub fn find() -> Krate {
        let own = env::var_os("CARGO_MANIFEST_DIR")
            .and_then(|dir| fs::read_to_string(Path::new(&dir).join("Cargo.toml")).ok())
            .and_then(|manifest| facade_in(&manifest));
        Krate(own.unwrap_or_else(|| match crate_name(FACADE) {
            Ok(FoundCrate::Name(name)) => name,
            // The facade's own tests and examples name it as users do; a
            // manifest that cannot be read falls back to the usual name.
            Ok(FoundCrate::Itself) | Err(_) => FACADE.replace('-', "_"),
        }))
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

/// The name a manifest gives the facade, if the manifest alone can tell:
/// the facade itself, or a dependency whose key or `package` is the facade.
/// `[dependencies]` come before target-specific ones and those before
/// `[dev-dependencies]`, since the library's own code sees only the first.
/// `None` for a manifest that does not parse or does not name the facade
/// (one that inherits it from the workspace under another key, say).
fn facade_in(manifest: &str) -> Option<String> {
    let manifest = Document::parse(manifest).ok()?;
    let package = manifest
        .get("package")
        .and_then(|package| package.get("name"))
        .and_then(Item::as_str);
    if package == Some(FACADE) {
        return Some(FACADE.replace('-', "_"));
    }
    // The crate's own tables, then each target's.
    let mut scopes: Vec<&dyn TableLike> = vec![manifest.as_table()];
    if let Some(targets) = manifest.get("target").and_then(Item::as_table_like) {
        scopes.extend(
            targets
                .iter()
                .filter_map(|(_, target)| target.as_table_like()),
        );
    }
    ["dependencies", "build-dependencies", "dev-dependencies"]
        .iter()
        .flat_map(|kind| {
            scopes
                .iter()
                .filter_map(move |scope| scope.get(kind)?.as_table_like())
        })
        .flat_map(|table| table.iter())
        .find(|(key, dependency)| {
            let package = dependency.get("package").and_then(Item::as_str);
            package.unwrap_or(key) == FACADE
        })
        .map(|(key, _)| key.replace('-', "_"))
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

#[cfg(test)]
mod tests {
    use super::facade_in;

    #[test]
    fn a_manifest_that_names_the_facade_gives_its_name() {
        let named = |manifest: &str| facade_in(manifest);
        assert_eq!(
            named("[dependencies]\nidempotent-tools = \"0.1\"\n").as_deref(),
            Some("idempotent_tools")
        );
        assert_eq!(
            named(
                "[dependencies]\ntools = { package = \"idempotent-tools\", version = \"0.1\" }\n"
            )
            .as_deref(),
            Some("tools")
        );
        assert_eq!(
            named("[dependencies.my-tools]\npackage = \"idempotent-tools\"\nversion = \"0.1\"\n")
                .as_deref(),
            Some("my_tools")
        );
        assert_eq!(
            named("[dependencies]\nidempotent-tools = { workspace = true }\n").as_deref(),
            Some("idempotent_tools"),
            "inherited under its own name, it keeps that name"
        );
        assert_eq!(
            named("[package]\nname = \"idempotent-tools\"\n").as_deref(),
            Some("idempotent_tools"),
            "the facade's own tests and examples"
        );
        assert_eq!(
            named("[target.'cfg(unix)'.dependencies]\nt = { package = \"idempotent-tools\" }\n")
                .as_deref(),
            Some("t")
        );
        assert_eq!(
            named(concat!(
                "[dev-dependencies]\nfor_tests = { package = \"idempotent-tools\" }\n",
                "[dependencies]\nidempotent-tools = \"0.1\"\n",
            ))
            .as_deref(),
            Some("idempotent_tools"),
            "the library's own dependency comes first"
        );
    }

    #[test]
    fn a_manifest_that_cannot_tell_leaves_it_to_the_workspace() {
        // Renamed in `[workspace.dependencies]`: only the workspace knows.
        assert_eq!(
            facade_in("[dependencies]\ntools = { workspace = true }\n"),
            None
        );
        assert_eq!(facade_in("[dependencies]\nserde = \"1\"\n"), None);
        assert_eq!(facade_in("not toml ["), None);
    }
}
