//! A case of the suite: its name, what it needs of the store, and its body.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::processes::Scene;
use crate::Store;

/// How many statements the case's store has sent so far.
pub(crate) type Statements = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The store a case runs against, with what the suite knows of it.
pub(crate) struct Subject {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) statements: Option<Statements>,
    pub(crate) callers: usize,
}

impl Subject {
    /// The statement counter; the case needs [`Need::Statements`].
    pub(crate) fn statements(&self) -> Statements {
        self.statements
            .clone()
            .expect("a case that needs a statement count runs only with one")
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
}

pub(crate) type Future_ = Pin<Box<dyn Future<Output = ()>>>;

/// A case's body.
pub(crate) enum Body {
    /// Runs in this process against one store.
    InProcess(fn(Subject) -> Future_),
    /// Plays a scenario with child processes (blocking while they run),
    /// beside a store of the parent's own that is opened first.
    Processes(fn(&Scene)),
}

/// One case of the suite.
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) needs: &'static [Need],
    pub(crate) body: Body,
}

/// A case running in this process: `case!(name, [needs], |subject| body)`.
macro_rules! case {
    ($name:ident, [$($need:ident),*], |$subject:ident| $body:expr) => {
        $crate::testing::conformance::case::Case {
            name: stringify!($name),
            needs: &[$($crate::testing::conformance::case::Need::$need),*],
            body: $crate::testing::conformance::case::Body::InProcess(|$subject| {
                let _ = &$subject;
                Box::pin($body)
            }),
        }
    };
    ($name:ident, [$($need:ident),*]) => {
        case!($name, [$($need),*], |subject| $name(subject.store))
    };
}
pub(crate) use case;
