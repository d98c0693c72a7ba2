//! The functions a guarded tool is nested in, read from the path of a type
//! declared in its body: a free function's body block (or closure), which
//! the guard is handed anyway, or a method's item.
//!
//! `module_path!()` stops at the module, so an `apply` defined inside
//! `fn billing()` and another inside `fn shipping()` of one module would be
//! one tool, and the second would replay the first's result. The path
//! `type_name` writes for a type inside the tool carries the enclosing
//! functions' names (`shop::billing::apply::{{closure}}::{{closure}}`, or
//! `shop::billing::apply::Site`), and names alone: it does not change when
//! code moves within a file.
//!
//! A tool that is nested in no function keeps the identity it always had,
//! `module::name` or `module::Type::name`, so its records keep replaying.
//! So does any tool whose site path reads in a way not foreseen here.

use std::hash::Hash;
use std::sync::OnceLock;

use dashmap::DashMap;

/// The top-level segments of a path as `type_name` writes it:
/// `a::G<b::C>::f` is `a`, `G<b::C>`, `f`. `None` if its brackets do not
/// balance.
fn segments(path: &str) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    let mut previous = '\0';
    let mut chars = path.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '<' => depth += 1,
            // The arrow of a function type, as in `G<fn() -> u8>`.
            '>' if previous == '-' => {}
            '>' => depth = depth.checked_sub(1)?,
            ':' if depth == 0 && chars.peek().is_some_and(|(_, next)| *next == ':') => {
                out.push(path.get(start..at)?);
                chars.next();
                start = at + 2;
                previous = ':';
                continue;
            }
            _ => {}
        }
        previous = c;
    }
    if depth != 0 {
        return None;
    }
    out.push(path.get(start..)?);
    Some(out)
}

/// Whether a segment is a type or an impl rather than a function: generic
/// (`G<_>`), an impl (`<impl T>`), or named as a type is (`RefundTool`).
fn is_impl(segment: &str) -> bool {
    segment.contains('<') || segment.chars().next().is_some_and(char::is_uppercase)
}

/// The functions the tool `name` is nested in, within `module`, joined with
/// `::` (`billing`, or `billing::{{closure}}`), read from `site`, the
/// `type_name` of a type declared in the tool's body (an item, or the body's
/// own block). `method` says that the tool is a method, so its parent is an
/// impl.
///
/// `None` when the tool is nested in no function, or when `site` does not
/// read as foreseen: the tool then keeps its identity without them.
pub fn enclosing(site: &str, module: &str, name: &str, method: bool) -> Option<String> {
    let mut path = segments(site)?;
    path.pop()?;
    // An `async fn`'s body, and the `async move` block another attribute
    // wraps it in, are closures that sit between the tool and the item.
    while path.last() == Some(&"{{closure}}") {
        path.pop();
    }
    if path.pop()? != name.strip_prefix("r#").unwrap_or(name) {
        return None;
    }
    let module = segments(module)?;
    let parents = match path.as_slice() {
        // A trait impl: `<Type as Trait>`, written only where the impl sits
        // with its type or with its trait.
        [qualified] if qualified.starts_with('<') => return of_trait_impl(qualified, &module),
        parents => parents.strip_prefix(module.as_slice())?,
    };
    let parents = match parents.split_last() {
        // A method's parent is its impl: `Type` or `<impl Type>`. A function
        // without `self` may be an associated function, whose parent is read
        // as an impl when it is named as a type is.
        Some((last, rest)) if method || is_impl(last) => rest,
        _ => parents,
    };
    (!parents.is_empty()).then(|| parents.join("::"))
}

/// The functions a trait impl is nested in, from its `<Type as Trait>`.
///
/// When the trait is declared in this module, the impl may sit there too,
/// and the type's path says nothing of the impl's: such a tool keeps its
/// identity without them. Otherwise the impl sits with its type, whose path
/// names them.
fn of_trait_impl(qualified: &str, module: &[&str]) -> Option<String> {
    let inner = qualified.strip_prefix('<')?.strip_suffix('>')?;
    let (self_type, the_trait) = inner.split_once(" as ")?;
    let the_trait = segments(the_trait)?;
    if the_trait.split_last().map(|(_, parent)| parent) == Some(module) {
        return None;
    }
    let self_type = segments(self_type)?;
    let (_, parent) = self_type.split_last()?;
    let parents = parent.strip_prefix(module)?;
    (!parents.is_empty()).then(|| parents.join("::"))
}

/// The default identity of a guarded function without `self`, given
/// `plain`, its `module::name`, and `site`, the `type_name` of the body it
/// hands the guard (an `async move` block or a closure declared in it):
/// `plain`, or `module::billing::name` for one nested in `fn billing()`.
///
/// A function nested in none, as nearly all are, is told by comparing the
/// two names, with nothing to keep. Any other site is read once, and its
/// identity kept in a table shared by every site.
pub(super) fn fn_tool(plain: &'static str, site: &'static str) -> &'static str {
    if nested_in_no_function(plain, site) {
        return plain;
    }
    static OTHERS: OnceLock<DashMap<&'static str, &'static str>> = OnceLock::new();
    kept(&OTHERS, site, || {
        let (module, name) = plain.rsplit_once("::").unwrap_or(("", plain));
        match enclosing(site, module, name, false) {
            Some(parents) => Box::leak(format!("{module}::{parents}::{name}").into()),
            None => plain,
        }
    })
}

/// The identity kept in `table` for `key`, made by `make` the first time:
/// once per site (and type), and kept for the life of the process.
pub(super) fn kept<K: Eq + Hash>(
    table: &OnceLock<DashMap<K, &'static str>>,
    key: K,
    make: impl FnOnce() -> &'static str,
) -> &'static str {
    let table = table.get_or_init(DashMap::new);
    if let Some(identity) = table.get(&key) {
        return *identity;
    }
    *table.entry(key).or_insert_with(make)
}

/// Whether `site` is `plain`, then only `{{closure}}`s, one at least: the
/// type of a body declared in a function nested in no other, for which
/// [`enclosing`] finds no parents.
fn nested_in_no_function(plain: &str, site: &str) -> bool {
    let Some(mut rest) = site.strip_prefix(plain) else {
        return false;
    };
    let mut closures = 0;
    while let Some(after) = rest.strip_prefix("::{{closure}}") {
        rest = after;
        closures += 1;
    }
    closures > 0 && rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free(site: &str) -> Option<String> {
        enclosing(site, "shop::tools", "apply", false)
    }

    fn method(site: &str) -> Option<String> {
        enclosing(site, "shop::tools", "apply", true)
    }

    #[test]
    fn a_function_is_its_plain_path_unless_its_site_names_a_function_around_it() {
        let plain = "shop::tools::apply";
        for site in [
            // The body's block in the `async fn`'s, and in another
            // attribute's block around it.
            "shop::tools::apply::{{closure}}::{{closure}}",
            "shop::tools::apply::{{closure}}::{{closure}}::{{closure}}",
            // An associated function: read, and found nested in none.
            "shop::tools::Refund::apply::{{closure}}::{{closure}}",
            "shop::tools::<impl shop::Refund>::apply::{{closure}}::{{closure}}",
        ] {
            assert_eq!(fn_tool(plain, site), plain, "{site}");
        }
        for _ in 0..2 {
            assert_eq!(
                fn_tool(
                    plain,
                    "shop::tools::billing::apply::{{closure}}::{{closure}}"
                ),
                "shop::tools::billing::apply"
            );
        }
        assert_eq!(
            fn_tool(
                plain,
                "shop::tools::billing::{{closure}}::apply::{{closure}}::{{closure}}"
            ),
            "shop::tools::billing::{{closure}}::apply"
        );
    }

    #[test]
    fn the_comparison_finds_no_function_around_only_where_the_path_finds_none() {
        let plain = "shop::tools::apply";
        for site in [
            "shop::tools::apply::{{closure}}::{{closure}}",
            "shop::tools::apply::{{closure}}",
            "shop::tools::apply",
            "shop::tools::apply::",
            "shop::tools::apply::{{closure}}::S<T>",
            "shop::tools::apply::a::{{closure}}",
            "shop::tools::applyx::{{closure}}",
            "shop::tools::billing::apply::{{closure}}",
        ] {
            if nested_in_no_function(plain, site) {
                assert_eq!(free(site), None, "{site}");
            }
        }
        assert!(nested_in_no_function(
            plain,
            "shop::tools::apply::{{closure}}::{{closure}}"
        ));
        assert!(!nested_in_no_function(plain, "shop::tools::apply"));
        assert!(!nested_in_no_function(plain, "shop::tools::apply::Site"));
        assert!(!nested_in_no_function(
            plain,
            "shop::tools::applyx::{{closure}}"
        ));
    }

    #[test]
    fn a_tool_nested_in_no_function_has_no_parents() {
        assert_eq!(free("shop::tools::apply::{{closure}}::Site"), None);
        assert_eq!(free("shop::tools::apply::Site"), None);
        // Associated functions, of an impl here or of another module's type.
        assert_eq!(free("shop::tools::Refund::apply::{{closure}}::Site"), None);
        assert_eq!(free("shop::tools::Notify<_>::apply::Site"), None);
        assert_eq!(free("shop::tools::<impl shop::Refund>::apply::Site"), None);
        assert_eq!(
            method("shop::tools::Refund::apply::{{closure}}::Site"),
            None
        );
        assert_eq!(
            method("shop::tools::<impl shop::Refund>::apply::Site"),
            None
        );
        assert_eq!(
            method("<shop::tools::Refund as rig::tool::Tool>::apply::{{closure}}::Site"),
            None
        );
    }

    #[test]
    fn a_nested_tool_names_the_functions_around_it() {
        let billing = Some("billing".to_owned());
        assert_eq!(
            free("shop::tools::billing::apply::{{closure}}::Site"),
            billing
        );
        assert_eq!(
            free("shop::tools::billing::step::apply::Site"),
            Some("billing::step".to_owned())
        );
        assert_eq!(free("shop::tools::billing::Refund::apply::Site"), billing);
        assert_eq!(method("shop::tools::billing::Refund::apply::Site"), billing);
        assert_eq!(
            method("shop::tools::billing::<impl shop::R>::apply::Site"),
            billing
        );
        assert_eq!(
            method("<shop::tools::billing::Refund as rig::Tool>::apply::Site"),
            billing
        );
        assert_eq!(
            free("shop::tools::Refund::make::apply::Site"),
            Some("Refund::make".to_owned())
        );
        assert_eq!(
            free("shop::tools::billing::{{closure}}::apply::{{closure}}::{{closure}}::Site"),
            Some("billing::{{closure}}".to_owned())
        );
    }

    #[test]
    fn a_site_read_otherwise_keeps_the_identity_without_parents() {
        // A trait of this module: the impl may sit here or with its type.
        assert_eq!(
            method("<shop::tools::billing::Refund as shop::tools::Tool>::apply::Site"),
            None
        );
        // Another module (one declared inside a function), another name,
        // unbalanced brackets.
        assert_eq!(free("shop::other::billing::apply::Site"), None);
        assert_eq!(free("shop::tools::billing::refund::Site"), None);
        assert_eq!(free("shop::tools::G<::billing::apply::Site"), None);
        assert_eq!(free(""), None);
        assert_eq!(
            free("shop::tools::G<fn() -> u8>::apply::Site"),
            None,
            "an arrow is no closing bracket"
        );
    }
}
