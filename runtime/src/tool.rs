//! The identity of a tool, recorded with each claim.

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};

/// The identity of a tool: its module path and function name, such as
/// `shop::tools::refund_order`. Stable across builds; recorded with each
/// claim, so that two tools whose keys render alike never share a result.
#[derive(Clone, Eq, PartialOrd, Ord)]
pub struct ToolId(Cow<'static, str>);

/// Ids compare as their text. A call site's id and the one its records
/// carry are mostly the same `static` text, which is equal without reading
/// it.
impl PartialEq for ToolId {
    fn eq(&self, other: &ToolId) -> bool {
        let (this, that) = (self.as_str(), other.as_str());
        (this.as_ptr() == that.as_ptr() && this.len() == that.len()) || this == that
    }
}

/// Hashed as the text, as `PartialEq` compares it.
impl Hash for ToolId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl ToolId {
    /// A tool id from static text; costs nothing.
    pub const fn new(id: &'static str) -> ToolId {
        ToolId(Cow::Borrowed(id))
    }

    /// A tool id built at run time.
    pub fn owned(id: impl Into<String>) -> ToolId {
        ToolId(Cow::Owned(id.into()))
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&'static str> for ToolId {
    fn from(id: &'static str) -> ToolId {
        ToolId::new(id)
    }
}

impl From<String> for ToolId {
    fn from(id: String) -> ToolId {
        ToolId::owned(id)
    }
}

impl fmt::Debug for ToolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ToolId({:?})", self.as_str())
    }
}

impl fmt::Display for ToolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
