//! The identity of a tool, recorded with each claim.

use std::borrow::Cow;
use std::fmt;

/// The identity of a tool: its module path and function name, such as
/// `shop::tools::refund_order`. Stable across builds; recorded with each
/// claim, so that two tools whose keys render alike never share a result.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ToolId(Cow<'static, str>);

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
