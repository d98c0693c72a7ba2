//! A guarded method's default identity, read from `Self` at run time.

use std::sync::OnceLock;

use dashmap::DashMap;

use super::site::{enclosing, kept};

/// The default identity of a guarded method: `module::Type::method`, or
/// `module::billing::Type::method` for an impl nested in `fn billing()`.
///
/// The attribute sees the method but not its `impl`, so the type is read at
/// run time from `type_name::<Self>()`. Two types in one module that each
/// guard a method of one name (every hand-written rig `Tool::call`) then get
/// two identities. One static per call site caches the identity, so a call
/// pays a comparison of the type's name; another instance of a generic impl
/// (`Notify<Email>`, `Notify<Sms>`) is looked up in a table shared by every
/// site.
pub struct MethodTool {
    module: &'static str,
    method: &'static str,
    first: OnceLock<(&'static str, &'static str)>,
}

impl MethodTool {
    /// The call site of `method` in `module`.
    pub const fn new(module: &'static str, method: &'static str) -> MethodTool {
        MethodTool {
            module,
            method,
            first: OnceLock::new(),
        }
    }

    /// The identity of this method on the type `self_type`, as
    /// `type_name::<Self>()` writes it; `site` is the `type_name` of an
    /// item declared in the method's body.
    pub fn get(&self, self_type: &'static str, site: &'static str) -> &'static str {
        let (first_type, first) = *self
            .first
            .get_or_init(|| (self_type, self.identity(self_type, site)));
        if first_type == self_type {
            return first;
        }
        static OTHERS: OnceLock<DashMap<(&'static str, &'static str), &'static str>> =
            OnceLock::new();
        kept(&OTHERS, (site, self_type), || {
            self.identity(self_type, site)
        })
    }

    /// Made once per site and type, and kept for the life of the process.
    fn identity(&self, self_type: &str, site: &str) -> &'static str {
        let parents = enclosing(site, self.module, self.method, true)
            .map(|parents| parents + "::")
            .unwrap_or_default();
        let id = format!(
            "{}::{parents}{}::{}",
            self.module,
            type_identity(self_type),
            self.method
        );
        Box::leak(id.into_boxed_str())
    }
}

/// A type's name with every path cut to its last segment:
/// `Notify<Email>` for `shop::tools::Notify<shop::channels::Email>`.
///
/// `type_name` promises no format, and the paths it writes to a type have
/// changed between compilers; a type's own name and its generic arguments'
/// names have not. Records outlive deployments, so the identity keeps only
/// those: moving the type to another module of the crate, or a new
/// compiler, leaves it as it was.
pub fn type_identity(type_name: &str) -> String {
    let mut out = String::with_capacity(type_name.len());
    // Where the path being written started in `out`.
    let mut path_start = 0;
    let mut chars = type_name.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            out.truncate(path_start);
        } else {
            if !(c.is_alphanumeric() || c == '_') {
                path_start = out.len() + c.len_utf8();
            }
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_identity_keeps_each_name_and_drops_the_paths() {
        assert_eq!(type_identity("shop::tools::RefundTool"), "RefundTool");
        assert_eq!(
            type_identity("shop::Notify<shop::channels::Email, alloc::string::String>"),
            "Notify<Email, String>"
        );
        assert_eq!(type_identity("&mut shop::Tool<'_>"), "&mut Tool<'_>");
    }

    #[test]
    fn a_method_site_names_each_self_type_apart() {
        static SITE: MethodTool = MethodTool::new("shop", "call");
        let site = "<shop::RefundTool as rig::Tool>::call::Site";
        assert_eq!(SITE.get("shop::RefundTool", site), "shop::RefundTool::call");
        assert_eq!(SITE.get("shop::CancelTool", site), "shop::CancelTool::call");
        assert_eq!(SITE.get("shop::RefundTool", site), "shop::RefundTool::call");
    }

    #[test]
    fn a_method_nested_in_a_function_names_it() {
        static SITE: MethodTool = MethodTool::new("shop", "call");
        let site = "shop::billing::RefundTool::call::{{closure}}::Site";
        assert_eq!(
            SITE.get("shop::billing::RefundTool", site),
            "shop::billing::RefundTool::call"
        );
    }
}
