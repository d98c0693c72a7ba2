//! What an operator tells [`Records::resolve`] once the provider has said
//! what happened to an action whose outcome is unknown.

use serde::Serialize;
use serde::de::DeserializeOwned;

#[cfg(doc)]
use super::records::Records;
use crate::store::record::RecordValue;

/// What the provider says happened to an action whose outcome is unknown,
/// as an operator tells [`Records::resolve`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Resolution {
    /// The action happened, with this result: the record becomes `done`
    /// with it, and every later call replays it. The value must decode as
    /// the tool's result type, or the replays fail to read it:
    /// [`Resolution::applied`] takes it typed.
    Applied(RecordValue),
    /// The action did not happen: the record goes, and the next call acts.
    NotApplied,
}

impl Resolution {
    /// [`Resolution::Applied`] with a typed result: a value of the tool's
    /// own result type, which every replay reads back as it is.
    pub fn applied<T: Serialize + DeserializeOwned + Send + Sync + 'static>(
        value: T,
    ) -> Resolution {
        Resolution::Applied(RecordValue::typed(value))
    }

    /// [`Resolution::Applied`] with a result given as JSON (an operator's
    /// form, the provider's answer), checked first: it must decode as `T`,
    /// the tool's result type, or nothing is resolved.
    ///
    /// ```
    /// use idempotent_tools::records::Resolution;
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Refunded {
    ///     id: String,
    ///     usd: u64,
    /// }
    ///
    /// assert!(Resolution::applied_json::<Refunded>(r#"{"id":"re_1","usd":42}"#).is_ok());
    /// // Not a refund: refused before anything is written.
    /// let refused = Resolution::applied_json::<Refunded>(r#"{"id":"re_1"}"#);
    /// assert!(refused.unwrap_err().to_string().contains("missing field `usd`"));
    /// ```
    ///
    /// # Errors
    ///
    /// The decoding error, if `json` is not JSON or not a `T`.
    pub fn applied_json<T: Serialize + DeserializeOwned + Send + Sync + 'static>(
        json: &str,
    ) -> Result<Resolution, serde_json::Error> {
        serde_json::from_str::<T>(json).map(Resolution::applied)
    }
}
