//! What the attribute expands into for a tool's errors and its
//! verification: whether the error type says how an action failed
//! ([`Classify`]), found while the tool compiles, and the tool's `verify`
//! function, checked against the tool's arguments and result.
//!
//! The classification is autoref-based specialization: the expansion
//! calls `(&&Errors::<R>::new()).classification()` with the tool's
//! concrete return type `R`. Method lookup tries the receiver `&&Errors<R>`
//! first, which [`ClassifiedErrors`] serves only when the error implements
//! [`Classify`]; otherwise it derefs once and finds [`DefiniteErrors`]. So
//! a tool whose error does not classify drives its call exactly as before,
//! with no classification to consult.

use std::fmt::Display;
use std::future::Future;
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::GuardedReturn;
use crate::error::Error;
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

/// Found first: the tool's error implements [`Classify`].
pub trait ClassifiedErrors {
    /// [`Classified`].
    fn classification(&self) -> Classified {
        Classified
    }
}

impl<R> ClassifiedErrors for &Errors<R>
where
    R: GuardedReturn,
    R::Error: Classify,
{
}

/// Found otherwise.
pub trait DefiniteErrors {
    /// [`Definite`].
    fn classification(&self) -> Definite {
        Definite
    }
}

impl<R> DefiniteErrors for Errors<R> {}

/// Which of the tool's errors may have taken effect, for the guard.
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

impl<E: Classify + Display> Unknowns<E> for Classified {
    fn unknown(self) -> Option<fn(&E) -> Option<String>> {
        Some(guard::unknown_error::<E>)
    }
}

/// A tool's `verify` function: given the key and, by value, a clone of the
/// tool's `Self` (for a method) and of each argument but free text, call
/// ids and the transaction (taken before the body runs), it answers
/// whether the action happened.
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not fit as this tool's `verify`: expected `async fn(Key, ...) -> Verified<{T}>`, taking the key and then, by value, the tool's `Self` (for a method) and each argument of the ask and of the context, in order: `{Args}`",
    label = "this function asks the provider whether the action happened",
    note = "a verification is `async fn check(key: idempotent_tools::call::Key, <each argument, in order, by value>) -> idempotent_tools::Verified<{T}>`, where `{T}` is the tool's result; its future is `Send`, and each argument is `Clone + Send + Sync + 'static`",
    note = "the arguments are the tool's own but free text, call ids and the transaction: each a clone, taken before the body runs"
)]
pub trait Verification<Args, T> {
    /// The call, with this verification and its arguments bound.
    fn verify(self, call: Call, args: Args) -> Call;
}

macro_rules! verification {
    ($($arg:ident $at:tt),*) => {
        impl<F, Fut, T, $($arg),*> Verification<($($arg,)*), T> for F
        where
            F: Fn(Key, $($arg),*) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = Verified<T>> + Send + 'static,
            T: Serialize + DeserializeOwned + Send + Sync + 'static,
            $($arg: Clone + Send + Sync + 'static,)*
        {
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
pub fn verified<R, F, A>(call: Result<Call, Error>, check: F, args: A) -> Result<Call, Error>
where
    R: GuardedReturn,
    F: Verification<A, R::Value>,
{
    call.map(|call| check.verify(call, args))
}
