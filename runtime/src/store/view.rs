//! What an operator reads of a store: one record in full, with why its
//! outcome is unknown if it is, and counts by tool and state.

use std::time::SystemTime;

#[cfg(doc)]
use super::records::Records;
use crate::fingerprint::Fingerprint;
use crate::key::Key;
use crate::store::record::{RecordState, RecordValue};
use crate::tool::ToolId;

/// One record in full, as a store keeps it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Record {
    /// The key, in full.
    pub key: Key,
    /// The tool that claimed it.
    pub tool: ToolId,
    /// Where it stands.
    pub state: RecordState,
    /// The fingerprint of the arguments it was claimed with: a call under
    /// the key with other arguments is refused as a conflict.
    pub fingerprint: Fingerprint,
    /// Its fence: 1 for the first claim, bumped by every takeover and by a
    /// [`Records::resolve`]. How many times its action was started, at
    /// most, since the record was made (a released claim leaves none).
    pub fence: u64,
    /// Whether the current claim took over from a holder whose lease ran
    /// out.
    pub taken_over: bool,
    /// The holder's owner token, while held.
    pub owner: Option<u128>,
    /// When the holder's lease runs (or ran) out, while held. `None` in the
    /// memory store, whose leases never run out under a live process.
    pub lease_until: Option<SystemTime>,
    /// The result or recorded error, once finished; for an unknown outcome,
    /// why it is unknown and the error that left it so
    /// (`{"why": "...", "error": "..."}`), for the operator who resolves it.
    pub result: Option<RecordValue>,
    /// When the action finished.
    pub completed_at: Option<SystemTime>,
    /// When a purge may remove the record. `None` for a claim held in the
    /// memory store, which is never purged.
    pub expires_at: Option<SystemTime>,
}

impl Record {
    /// Whether a holder's lease is live at `now`: its action may be running,
    /// so forgetting the key could let the action run twice at once.
    pub fn lease_is_live(&self, now: SystemTime) -> bool {
        self.state == RecordState::Held && self.lease_until.is_none_or(|until| until > now)
    }

    /// The key's SHA-256 in hex, as the guard's traces name it.
    pub fn key_digest(&self) -> String {
        hex::encode(self.key.digest())
    }

    /// Why the outcome is unknown, as the guard recorded it: the action
    /// failed in a way that may have taken effect, the provider contradicts
    /// the ask, its verification could not tell. `None` for a record whose
    /// outcome is not unknown, or that holds no reason.
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// use idempotent_tools::call::{Call, Key};
    /// use idempotent_tools::records::{RecordQuery, Records};
    /// use idempotent_tools::{Classify, Failure, MemoryStore};
    ///
    /// #[derive(Debug, thiserror::Error)]
    /// enum RefundError {
    ///     #[error("the payment service did not answer")]
    ///     TimedOut,
    ///     #[error(transparent)]
    ///     Guard(#[from] idempotent_tools::Error),
    /// }
    ///
    /// impl Classify for RefundError {
    ///     fn failure(&self) -> Failure {
    ///         Failure::Unknown
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryStore::new());
    /// let key = Key::parse("run-7:refund:1182")?;
    /// let lost = Call::new("shop::refund_order", key.clone())
    ///     .store(&store)
    ///     .run_classified(async { Err::<String, _>(RefundError::TimedOut) })
    ///     .await;
    /// assert!(lost.is_err());
    ///
    /// // What is pending, and why.
    /// let pending = store.list(&RecordQuery::pending()).await?;
    /// let record = &pending.records[0];
    /// assert_eq!(record.key, key);
    /// assert_eq!(
    ///     record.why().as_deref(),
    ///     Some("the action failed in a way that may have taken effect")
    /// );
    /// assert_eq!(
    ///     record.last_error().as_deref(),
    ///     Some("the payment service did not answer")
    /// );
    /// // Tried once, when it finished, with these arguments.
    /// assert_eq!(record.fence, 1);
    /// assert!(record.completed_at.is_some());
    /// println!("{:?}", record.fingerprint);
    /// # Ok(()) }
    /// ```
    pub fn why(&self) -> Option<String> {
        self.detail("why")
    }

    /// The error that left the outcome unknown, as the guard recorded it
    /// (its `Display`). `None` for a record whose outcome is not unknown,
    /// or that holds no error (a holder that stopped mid-action leaves
    /// none). See [`Record::why`].
    pub fn last_error(&self) -> Option<String> {
        self.detail("error")
    }

    /// A text field of the detail an unknown outcome is recorded with.
    fn detail(&self, field: &str) -> Option<String> {
        if self.state != RecordState::Unknown {
            return None;
        }
        let json = self.result.as_ref()?.to_json().ok()?;
        let detail: serde_json::Value = serde_json::from_str(&json).ok()?;
        detail.get(field)?.as_str().map(str::to_owned)
    }
}

/// How many records a store holds of one tool in one state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordCount {
    /// The tool.
    pub tool: ToolId,
    /// The state.
    pub state: RecordState,
    /// How many.
    pub count: u64,
}

impl RecordCount {
    /// A count.
    pub fn new(tool: ToolId, state: RecordState, count: u64) -> RecordCount {
        RecordCount { tool, state, count }
    }
}
