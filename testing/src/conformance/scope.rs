//! What a case tells the factory that makes its store.

use std::path::{Path, PathBuf};

/// The environment variables that hand a parent's scope to its children.
const CASE: &str = "IDEMPOTENT_CONFORMANCE_CASE";
const ID: &str = "IDEMPOTENT_CONFORMANCE_ID";
const DIR: &str = "IDEMPOTENT_CONFORMANCE_DIR";

/// One case's place: the factory makes the case's store in it.
///
/// A store on a file opens a file in [`dir`](Scope::dir); a store on a
/// server names its schema, database or key prefix after [`id`](Scope::id),
/// and drops it in [`Suite::cleaning_up`](super::Suite::cleaning_up).
#[derive(Debug, Clone)]
pub struct Scope {
    case: String,
    id: String,
    dir: PathBuf,
    purge_batch: Option<usize>,
    child: bool,
}

impl Scope {
    /// A new scope for `case` in `dir`.
    pub(crate) fn new(case: &str, dir: &Path, purge_batch: Option<usize>) -> Scope {
        Scope {
            case: case.to_owned(),
            id: super::kit::unique_id(),
            dir: dir.to_owned(),
            purge_batch,
            child: false,
        }
    }

    /// The scope a child process was started in: its parent's.
    pub(crate) fn from_env() -> Option<Scope> {
        Some(Scope {
            case: std::env::var(CASE).ok()?,
            id: std::env::var(ID).ok()?,
            dir: PathBuf::from(std::env::var_os(DIR)?),
            purge_batch: None,
            child: true,
        })
    }

    /// The scope of another connection to the store this case already
    /// made: the factory opens that store, and creates nothing new.
    pub(crate) fn another_connection(&self) -> Scope {
        Scope {
            purge_batch: None,
            child: true,
            ..self.clone()
        }
    }

    /// The environment that gives a child process this scope.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            (CASE, self.case.clone()),
            (ID, self.id.clone()),
            (DIR, self.dir.display().to_string()),
        ]
    }

    /// The case's name, such as `concurrent_identical_calls_act_once`.
    pub fn case(&self) -> &str {
        &self.case
    }

    /// An id no other case uses, in this process or another, made of ASCII
    /// digits and `_` (a valid part of an SQL identifier, 40 characters at
    /// most). A child process gets its parent's.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A directory of the case's own, removed after it. A child process
    /// gets its parent's.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The rows a purge may delete per statement, when the case needs a
    /// store that purges in batches.
    pub fn purge_batch(&self) -> Option<usize> {
        self.purge_batch
    }

    /// Whether the case has made its store already, and this scope opens it
    /// again: in a child process of an OS-process case, or as another
    /// connection of a case that races claims from several. The factory
    /// opens the store the case made, and creates nothing new.
    pub fn is_child(&self) -> bool {
        self.child
    }
}
