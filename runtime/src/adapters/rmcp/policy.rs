//! Which of a request's signs a server accepts as its run.

/// A place a request's run can come from, in the order they are tried.
///
/// Each names a wider circle of calls than the one before: a run a client
/// names is one agent run; a session or a principal may hold several
/// conversations, whose refunds of one order then count as one. Wider is the
/// safe direction: it can merge two asks into one action, never split one ask
/// into two.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunSource {
    /// `_meta["idempotent/run"]` of the `tools/call` request, for clients
    /// that name their agent run.
    Meta,
    /// A [`Run`](crate::Run) the application put on the request, in its
    /// extensions or in those of the HTTP request it came in; else the run
    /// header that [`RunHeaderLayer`](super::RunHeaderLayer) read.
    Extension,
    /// A [`Principal`](super::Principal) the application put on the request
    /// after authenticating it: every call of one user is one run.
    Principal,
    /// The client's MCP session, as the server issued it: over streamable
    /// HTTP, a session that [`SessionRuns`](super::SessionRuns) saw rmcp's
    /// session manager issue (an `Mcp-Session-Id` nobody issued is
    /// ignored); over stdio or any other stream, the connection. Only
    /// clients that opened with `initialize` (protocol 2025-11-25 and older)
    /// have one.
    Session,
}

impl RunSource {
    /// Every source, in the order they are tried.
    pub const ALL: [RunSource; 4] = [
        RunSource::Meta,
        RunSource::Extension,
        RunSource::Principal,
        RunSource::Session,
    ];

    /// The source's name, as run texts and traces write it (`run_source`).
    pub const fn name(self) -> &'static str {
        match self {
            RunSource::Meta => "meta",
            RunSource::Extension => "extension",
            RunSource::Principal => "principal",
            RunSource::Session => "session",
        }
    }

    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// What a request that no allowed source scopes gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unscoped {
    /// The run [`SERVER_WIDE_RUN`](super::SERVER_WIDE_RUN), the same for
    /// every such request: the key's object alone decides, so the action runs
    /// once per order (say) for the store's retention, whoever asks.
    ServerWide,
    /// Refuse the call with `invalid_params`, doing nothing. For a server
    /// that would rather fail than cap an action server-wide.
    Refuse,
}

/// Which [`RunSource`]s a server accepts, and what it does when none
/// applies.
///
/// The default accepts every source and falls back to
/// [`Unscoped::ServerWide`]: any client works unconfigured, and a request is
/// never given a run of its own (which would let every repeat act again).
/// A server gives its policy through
/// [`ResolvesRuns::run_policy`](super::ResolvesRuns::run_policy).
///
/// ```
/// use idempotent_tools::rmcp::{RunPolicy, RunSource, Unscoped};
///
/// // Trust only runs the application sets; refuse everything else.
/// let policy = RunPolicy::new()
///     .without(RunSource::Meta)
///     .without(RunSource::Session)
///     .refuse_unscoped();
/// assert!(policy.allows(RunSource::Extension));
/// assert!(!policy.allows(RunSource::Meta));
/// assert_eq!(policy.unscoped(), Unscoped::Refuse);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RunPolicy {
    refused: u8,
    unscoped: Unscoped,
}

impl RunPolicy {
    /// Every source, then the server-wide run.
    pub const fn new() -> RunPolicy {
        RunPolicy {
            refused: 0,
            unscoped: Unscoped::ServerWide,
        }
    }

    /// The same policy without `source`: it is skipped, and the next one
    /// tried. A request that carries it is not refused for it.
    pub const fn without(self, source: RunSource) -> RunPolicy {
        RunPolicy {
            refused: self.refused | source.bit(),
            ..self
        }
    }

    /// The same policy, refusing requests no allowed source scopes instead
    /// of giving them the server-wide run.
    pub const fn refuse_unscoped(self) -> RunPolicy {
        RunPolicy {
            unscoped: Unscoped::Refuse,
            ..self
        }
    }

    /// Whether `source` is tried.
    pub const fn allows(&self, source: RunSource) -> bool {
        self.refused & source.bit() == 0
    }

    /// What a request no allowed source scopes gets.
    pub const fn unscoped(&self) -> Unscoped {
        self.unscoped
    }
}

impl Default for RunPolicy {
    fn default() -> RunPolicy {
        RunPolicy::new()
    }
}
