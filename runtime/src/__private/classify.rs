//! What the attribute expands into for a tool's errors and its
//! verification: whether the error type says how an action failed
//! ([`Classify`]), found while the tool compiles, and the tool's `verify`
//! function, checked against the tool's arguments and result.
//!
//! The classification is found by method lookup: the expansion calls
//! `Errors::<R>::new().classification()` with the tool's concrete return
//! type `R`. Lookup tries the inherent method first, which exists only
//! when the error implements [`Classify`]; otherwise it finds
//! [`DefiniteErrors`]. So a tool whose error does not classify drives its
//! call exactly as before, with no classification to consult. (An inherent
//! method checks faster than the usual pair of traits on `&&T` and `&T`.)

use std::fmt::Display;
use std::future::Future;
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::GuardedReturn;
use super::Prepared;
use crate::failure::{Classify, Verified};
use crate::guard::{self, Call, Verifier};
use crate::key::Key;

/// The tool's return type `R`, as a receiver for the classification.
pub struct Errors<R>(PhantomData<fn() -> R>);

impl<R> Errors<R> {
    /// The receiver.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Errors<R> {
        Errors(PhantomData)
    }
}

/// The error type classifies its failures.
pub struct Classified;

/// The error type does not classify: every failure is definite.
pub struct Definite;

/// Found first, as an inherent method: the tool's error implements
/// [`Classify`]. Matched on `Result<O, E>` itself, which is what
/// [`GuardedReturn`] is implemented for, rather than through it: the tool's
/// `cargo check` then proves one bound here instead of all of
/// `GuardedReturn`'s (BENCHMARKS.md, section 6).
impl<O, E> Errors<Result<O, E>>
where
    E: Classify,
{
    /// [`Classified`].
    pub fn classification(&self) -> Classified {
        Classified
    }
}

/// Found otherwise: an inherent method whose bounds do not hold is passed
/// over for the trait's.
pub trait DefiniteErrors {
    /// [`Definite`].
    fn classification(&self) -> Definite {
        Definite
    }
}

impl<R> DefiniteErrors for Errors<R> {}

/// Which of the tool's errors may have taken effect, for the guard, given
/// the classification found for the error type `E`.
#[diagnostic::on_unimplemented(
    message = "`{E}` implements `Classify`, so its text is recorded with an unknown outcome for the operator: it needs `Display`",
    label = "the error of this tool says whether the action may have taken effect",
    note = "derive `thiserror::Error` for it, or implement `std::fmt::Display`"
)]
pub trait Unknowns<E> {
    /// The error's text if it may have taken effect, or `None` for a tool
    /// whose errors are all definite.
    fn unknown(self) -> Option<fn(&E) -> Option<String>>;
}

impl<E> Unknowns<E> for Definite {
    fn unknown(self) -> Option<fn(&E) -> Option<String>> {
        None
    }
}

// Not recommended: a miss is reported as this trait's, in its words.
#[diagnostic::do_not_recommend]
impl<E: Classify + Display> Unknowns<E> for Classified {
    fn unknown(self) -> Option<fn(&E) -> Option<String>> {
        Some(guard::unknown_error::<E>)
    }
}

/// The arguments a tool hands its verification, as a tuple, and the
/// signature that takes them: `fn(Key, A0, A1, ..) -> Verified<T>`, named
/// in full when a `verify` function does not fit.
pub trait Arguments<T> {
    /// The verification's signature.
    type Signature;
}

/// A tool's `verify` function, of the signature `S` (see [`Arguments`]):
/// given the key and, by value, a clone of the tool's `Self` (for a
/// method) and of each argument but free text, call ids and the
/// transaction (taken before the body runs), it answers whether the action
/// happened.
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not fit as this tool's `verify`: expected `async {S}`",
    label = "expected `async {S}`",
    note = "a verification takes the key, then, by value and in order, the tool's `Self` (for a method) and each argument but free text, call ids and the transaction, each a clone taken before the body runs; it answers with `Verified<T>`, `T` the tool's result",
    note = "its future is `Send`, and each argument is `Clone + Send + Sync + 'static`"
)]
pub trait Verification<S> {
    /// The arguments, as a tuple.
    type Args;

    /// The call, with this verification and its arguments bound.
    fn verify(self, call: Call, args: Self::Args) -> Call;
}

macro_rules! verification {
    ($($arg:ident $at:tt),*) => {
        impl<T, $($arg),*> Arguments<T> for ($($arg,)*) {
            type Signature = fn(Key, $($arg),*) -> Verified<T>;
        }

        // Not recommended: a function that does not fit is told the
        // signature expected, rather than which of its parts differs.
        #[diagnostic::do_not_recommend]
        impl<F, Fut, T, $($arg),*> Verification<fn(Key, $($arg),*) -> Verified<T>> for F
        where
            F: Fn(Key, $($arg),*) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = Verified<T>> + Send + 'static,
            T: Serialize + DeserializeOwned + Send + Sync + 'static,
            $($arg: Clone + Send + Sync + 'static,)*
        {
            type Args = ($($arg,)*);

            #[allow(unused_variables)]
            fn verify(self, call: Call, args: ($($arg,)*)) -> Call {
                call.with_verifier(Verifier::new(move |key| {
                    let args = args.clone();
                    self(key, $(args.$at),*)
                }))
            }
        }
    };
}

verification!();
verification!(A0 0);
verification!(A0 0, A1 1);
verification!(A0 0, A1 1, A2 2);
verification!(A0 0, A1 1, A2 2, A3 3);
verification!(A0 0, A1 1, A2 2, A3 3, A4 4);
verification!(A0 0, A1 1, A2 2, A3 3, A4 4, A5 5);
verification!(A0 0, A1 1, A2 2, A3 3, A4 4, A5 5, A6 6);
verification!(A0 0, A1 1, A2 2, A3 3, A4 4, A5 5, A6 6, A7 7);
verification!(A0 0, A1 1, A2 2, A3 3, A4 4, A5 5, A6 6, A7 7, A8 8);
verification!(A0 0, A1 1, A2 2, A3 3, A4 4, A5 5, A6 6, A7 7, A8 8, A9 9);
verification!(A0 0, A1 1, A2 2, A3 3, A4 4, A5 5, A6 6, A7 7, A8 8, A9 9, A10 10);
verification!(A0 0, A1 1, A2 2, A3 3, A4 4, A5 5, A6 6, A7 7, A8 8, A9 9, A10 10, A11 11);

/// The prepared call with the tool's verification (`verify = path`),
/// checked at `path` against the tool's arguments and result.
///
/// The expansion binds `args` before this call, and they come before
/// `check`, so that their types are known when `check` is checked: a
/// function that does not fit is told the signature it should have,
/// rather than having the arguments' types inferred from it.
pub fn verified<R, A, F>(call: Prepared, args: A, check: F) -> Prepared
where
    R: GuardedReturn,
    A: Arguments<R::Value>,
    F: Verification<A::Signature, Args = A>,
{
    call.map(|call| check.verify(call, args))
}
