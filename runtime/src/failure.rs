//! "Don't know" is an answer: whether a failed action may have taken
//! effect, and what the provider says when asked.
//!
//! An error that comes after the request may have reached the provider (a
//! timeout, a connection reset once the request was written, a 502 from a
//! gateway in front of it) does not mean the action did not happen. A retry
//! that acts again on such an error refunds twice wherever the provider
//! ignores idempotency keys. So a tool's error says which it is, through
//! [`Classify`]: a [definite](Failure::Definite) failure releases the claim
//! and the retry acts; an [unknown](Failure::Unknown) one never does. It
//! goes to the tool's verification, if it has one, or is recorded as an
//! unknown outcome, which every later call is told of until an operator
//! resolves it.

use std::fmt;
use std::io;
use std::sync::Arc;

/// How a tool's action failed, as far as the provider is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// The action did not take effect: the request was refused, declined,
    /// or never sent. The claim is released, and a retry acts again.
    Definite,
    /// The action may have taken effect: the request may have reached the
    /// provider before the error. The claim is never released on it.
    Unknown,
}

/// An error that says whether the action may have taken effect before it.
///
/// Implement it on a tool's error type, and the guard keeps a retry from
/// acting twice when the provider may already have acted: with
/// [`Call::run_classified`](crate::call::Call::run_classified). The crate
/// classifies [`std::io::Error`] (a refused connection is definite; a
/// timeout, a reset or a broken pipe is unknown), so an error that wraps
/// one usually delegates:
///
/// ```
/// use idempotent_tools::{Classify, Failure};
///
/// #[derive(Debug, thiserror::Error)]
/// enum RefundError {
///     #[error("the card was declined")]
///     Declined,
///     #[error("the payment service did not answer")]
///     Network(#[from] std::io::Error),
/// }
///
/// impl Classify for RefundError {
///     fn failure(&self) -> Failure {
///         match self {
///             RefundError::Declined => Failure::Definite,
///             RefundError::Network(err) => err.failure(),
///         }
///     }
/// }
///
/// let timed_out = RefundError::Network(std::io::ErrorKind::TimedOut.into());
/// assert_eq!(timed_out.failure(), Failure::Unknown);
/// assert_eq!(RefundError::Declined.failure(), Failure::Definite);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not say whether the action may have taken effect before it failed",
    label = "this error is classified as definite or unknown",
    note = "implement `idempotent_tools::Classify` for it, or, in `#[derive(Classify)]`, mark the variant `#[classify(definite)]` (the action did not take effect) or `#[classify(unknown)]` (it may have)"
)]
pub trait Classify {
    /// Whether the action may have taken effect before this error.
    fn failure(&self) -> Failure;
}

/// A connection that was never made, an address or a file that is not
/// there, a refusal: definite. A timeout, a reset, an aborted or broken
/// connection, an end of stream in the middle of a reply: the request may
/// have been written, so unknown. Anything else is unknown too: when in
/// doubt, the guard must not act twice.
impl Classify for io::Error {
    fn failure(&self) -> Failure {
        use io::ErrorKind::*;
        match self.kind() {
            ConnectionRefused | AddrNotAvailable | AddrInUse | NotFound | PermissionDenied
            | InvalidInput | Unsupported | HostUnreachable | NetworkUnreachable | NetworkDown => {
                Failure::Definite
            }
            _ => Failure::Unknown,
        }
    }
}

/// The guard's own errors, as a tool that calls another guarded tool gets
/// them: definite when the inner action did not run
/// ([`Error::action_ran`](crate::Error::action_ran) is `Some(false)`),
/// unknown when it ran or may have.
impl Classify for crate::Error {
    fn failure(&self) -> Failure {
        match self.action_ran() {
            Some(false) => Failure::Definite,
            Some(true) | None => Failure::Unknown,
        }
    }
}

impl<E: Classify + ?Sized> Classify for Box<E> {
    fn failure(&self) -> Failure {
        (**self).failure()
    }
}

impl<E: Classify + ?Sized> Classify for Arc<E> {
    fn failure(&self) -> Failure {
        (**self).failure()
    }
}

impl<E: Classify + ?Sized> Classify for &E {
    fn failure(&self) -> Failure {
        (**self).failure()
    }
}

/// What the provider says, when asked whether an action under a key
/// happened: a tool's verification answers with it (see
/// [`Call::verify`](crate::call::Call::verify)).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verified<T> {
    /// It happened, with this result: it becomes the record's, and every
    /// later call replays it.
    Applied(T),
    /// It did not happen: acting is safe. Trusted only once the call's
    /// settle time has passed since the action may last have run, for
    /// lookups that lag behind writes.
    NotApplied,
    /// The provider cannot tell yet: asked again later, and never read as
    /// "not applied".
    NotYet,
    /// The provider has something under this key that does not match the
    /// ask (a refund of another amount, say): an operator must look.
    Contradicts(String),
}

impl<T> fmt::Debug for Verified<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verified::Applied(_) => f.write_str("Applied(..)"),
            Verified::NotApplied => f.write_str("NotApplied"),
            Verified::NotYet => f.write_str("NotYet"),
            Verified::Contradicts(why) => f.debug_tuple("Contradicts").field(why).finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_before_the_request_are_definite_and_after_it_unknown() {
        let refused: io::Error = io::ErrorKind::ConnectionRefused.into();
        let reset: io::Error = io::ErrorKind::ConnectionReset.into();
        let timed_out: io::Error = io::ErrorKind::TimedOut.into();
        let cut: io::Error = io::ErrorKind::UnexpectedEof.into();
        assert_eq!(refused.failure(), Failure::Definite);
        assert_eq!(reset.failure(), Failure::Unknown);
        assert_eq!(timed_out.failure(), Failure::Unknown);
        assert_eq!(cut.failure(), Failure::Unknown);
        assert_eq!(Box::new(timed_out).failure(), Failure::Unknown);
    }
}
