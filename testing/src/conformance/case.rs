//! What a case of the suite needs of the store, and the store it is given.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::kit::not_offered;
use idempotent_tools::records::Records;
use idempotent_tools::store::Store;

/// How many statements the case's store has sent so far.
pub(crate) type Statements = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Opens another connection to the case's store: a store of its own (its
/// own pool, its own listener) on the case's scope, and its statement
/// counter.
pub(crate) type Connect =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = (Arc<dyn Store>, Option<Statements>)>>>>;

/// The store a case runs against, with what the suite knows of it.
pub(crate) struct Subject {
    pub(crate) store: Arc<dyn Store>,
    /// The same store as [`Records`], if it offers them.
    pub(crate) records: Option<Arc<dyn Records>>,
    pub(crate) statements: Option<Statements>,
    pub(crate) callers: usize,
    /// `None` for a store within one process: it has one connection.
    pub(crate) connect: Option<Connect>,
}

/// Several connections to one case's store, and the statements they sent.
pub(crate) struct Connections {
    pub(crate) stores: Vec<Arc<dyn Store>>,
    /// All of the connections' statements, if the store counts them.
    pub(crate) statements: Option<Statements>,
}

impl Subject {
    /// The store's operator's calls, or the end of the case, reported
    /// ignored, if the suite was not told the store offers them.
    pub(crate) fn records(&self) -> Arc<dyn Records> {
        self.records.clone().unwrap_or_else(|| {
            not_offered(
                "the operator's calls (`Records`), or the suite was not told: \
                 call `Suite::with_records`",
            )
        })
    }

    /// The statement counter; the case needs [`Need::Statements`].
    pub(crate) fn statements(&self) -> Statements {
        self.statements
            .clone()
            .expect("a case that needs a statement count runs only with one")
    }

    /// `n` connections to the case's store, the case's own first: the others
    /// are opened as the case's children would open it. A store within one
    /// process has one connection, shared `n` times.
    pub(crate) async fn connections(&self, n: usize) -> Connections {
        let mut stores = vec![self.store.clone()];
        let mut counters: Vec<Statements> = self.statements.iter().cloned().collect();
        while stores.len() < n {
            match &self.connect {
                Some(connect) => {
                    let (store, statements) = connect().await;
                    stores.push(store);
                    counters.extend(statements);
                }
                None => stores.push(self.store.clone()),
            }
        }
        let statements = self
            .statements
            .is_some()
            .then(|| Arc::new(move || counters.iter().map(|count| count()).sum()) as Statements);
        Connections { stores, statements }
    }
}

/// What a case needs of a store beyond the [`Store`] trait.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Need {
    /// Claims shared by several OS processes.
    Processes,
    /// Leases that run out while their holder is stuck or dead.
    Leases,
    /// A count of statements sent.
    Statements,
    /// Purges that delete in batches.
    BatchPurge,
    /// A purge job that deletes expired records.
    PurgeJob,
    /// Records that vanish by themselves when their retention runs out.
    Expiry,
    /// A server of the case's own that the case stops and starts again.
    Restarts,
}

/// A case running in this process: `case!(name, [needs], |subject| body)`.
macro_rules! case {
    ($name:ident, [$($need:ident),*], |$subject:ident| $body:expr) => {
        $crate::conformance::Case {
            name: stringify!($name),
            needs: &[$($crate::conformance::case::Need::$need),*],
            body: $crate::conformance::Body::InProcess(|$subject| {
                let _ = &$subject;
                Box::pin($body)
            }),
        }
    };
    ($name:ident, [$($need:ident),*]) => {
        case!($name, [$($need),*], |subject| $name(subject.store))
    };
    // A case handed the whole subject: the store, and its `Records` if any.
    ($name:ident, [$($need:ident),*], subject) => {
        case!($name, [$($need),*], |subject| $name(subject))
    };
    // A case that also calls the store's `Records`: ignored without them.
    ($name:ident, [$($need:ident),*], records) => {
        case!($name, [$($need),*], |subject| $name(subject.records()))
    };
}
pub(crate) use case;
