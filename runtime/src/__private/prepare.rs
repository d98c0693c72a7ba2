//! A guarded tool's call, prepared from tables the attribute writes: the
//! key template's pieces and the fingerprinted arguments, each a trait
//! object. The preparation is one function compiled once, not a chain of
//! builder calls and `?`s instantiated for every tool.

use std::borrow::Cow;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use serde::Serialize;

use crate::error::Error;
use crate::fingerprint::{Fingerprint, FingerprintBuilder};
use crate::guard::Call;
use crate::key::{Key, KeyPart};
use crate::policy::Policy;
use crate::store::{IntoStore, Store};

/// One piece of a key template, in the template's order.
pub enum Piece<'a> {
    /// Literal text, which the attribute proved keeps the key injective
    /// while the crate compiled, so it is not checked again.
    Literal(&'static str),
    /// The run in scope (`<run>`).
    Run,
    /// A placeholder and its value.
    Part(&'static str, &'a dyn KeyPart),
}

/// An argument's part in the fingerprint: any `Serialize` value.
pub trait FingerprintArg {
    /// Adds the argument, under its name, with any field named as a call id
    /// left out.
    fn add_to(&self, name: &str, fingerprint: &mut FingerprintBuilder) -> Result<(), Error>;

    /// Adds the argument with the names under it vouched for as ids.
    fn add_vouched_to(&self, name: &str, fingerprint: &mut FingerprintBuilder)
    -> Result<(), Error>;
}

impl<T: Serialize + ?Sized> FingerprintArg for T {
    fn add_to(&self, name: &str, fingerprint: &mut FingerprintBuilder) -> Result<(), Error> {
        fingerprint.arg(name, self)?;
        Ok(())
    }

    fn add_vouched_to(
        &self,
        name: &str,
        fingerprint: &mut FingerprintBuilder,
    ) -> Result<(), Error> {
        Ok(fingerprint.arg_vouched(name, self)?)
    }
}

/// A fingerprinted argument, as [`fingerprinted`](super::fingerprinted)
/// hands it to [`prepare()`].
#[derive(Clone, Copy)]
pub struct Arg<'a> {
    pub(super) name: &'static str,
    pub(super) value: &'a dyn FingerprintArg,
    /// Marked `#[identifier]`: the names under it are vouched for as ids.
    pub(super) vouched: bool,
}

/// [`prepare_with`] for a call site that names no option of the policy and
/// no store, as most do: two arguments fewer for each tool to check.
///
/// # Errors
///
/// As [`prepare_with`]'s.
pub fn prepare(tool: &'static str, key: &[Piece<'_>], args: &[Arg<'_>]) -> Prepared {
    prepare_with(tool, key, args, &Policy::DEFAULT, None)
}

/// A call as [`prepare()`] made it, or why it could not be made, on its way
/// to the guard ([`run`](super::run)) in the same statement or the next.
///
/// It has no drop glue: a value that needs dropping in a tool's `async fn`
/// makes `cargo check` take its drops and unwinding paths through MIR
/// optimization for every tool (BENCHMARKS.md, section 6). Nothing awaits
/// between `prepare` and the guard, so it is always handed over; dropped
/// instead (a panic in a `Clone` of `verify`'s arguments, or in a
/// transactional tool's `store = ...` expression), it leaks the call's
/// memory, before any claim was made.
pub struct Prepared(ManuallyDrop<Result<Call, Error>>);

impl Prepared {
    fn new(call: Result<Call, Error>) -> Prepared {
        Prepared(ManuallyDrop::new(call))
    }

    /// The call, now dropped as any value is.
    pub(crate) fn into_call(self) -> Result<Call, Error> {
        ManuallyDrop::into_inner(self.0)
    }

    /// The call with `f` applied to it, still on its way to the guard.
    pub(crate) fn map(self, f: impl FnOnce(Call) -> Call) -> Prepared {
        Prepared::new(self.into_call().map(f))
    }
}

/// Prepares the call of a guarded tool: its key rendered from `key` into a
/// reused buffer, allocated only if a store must keep it (a replay from
/// memory allocates none), its fingerprint from `args`, the call site's
/// `static` policy, and its store (`store = ...`, see [`store`]), if it
/// names one.
///
/// # Errors
///
/// The key's: an empty part, or no run in scope for `<run>`; or an argument
/// that does not serialize.
pub fn prepare_with(
    tool: &'static str,
    key: &[Piece<'_>],
    args: &[Arg<'_>],
    policy: &'static Policy,
    store: Option<Arc<dyn Store>>,
) -> Prepared {
    Prepared::new(prepared(tool, key, args, policy, store))
}

fn prepared(
    tool: &'static str,
    key: &[Piece<'_>],
    args: &[Arg<'_>],
    policy: &'static Policy,
    store: Option<Arc<dyn Store>>,
) -> Result<Call, Error> {
    let mut builder = Key::builder();
    for piece in key {
        match piece {
            Piece::Literal(text) => builder.push_proven_literal(text),
            Piece::Run => builder.push_run()?,
            Piece::Part(name, value) => builder.push_part(name, *value)?,
        }
    }
    let fingerprint = match args {
        [] => Fingerprint::EMPTY,
        args => {
            let mut fingerprint = Fingerprint::builder();
            for arg in args {
                if arg.vouched {
                    arg.value.add_vouched_to(arg.name, &mut fingerprint)?;
                } else {
                    arg.value.add_to(arg.name, &mut fingerprint)?;
                }
            }
            fingerprint.finish()
        }
    };
    Ok(Call::prepared(
        tool.into(),
        builder.finish_pending()?,
        fingerprint,
        policy,
        store,
    ))
}

/// The call site's `store = ...`, for [`prepare()`].
pub fn store(store: impl IntoStore) -> Option<Arc<dyn Store>> {
    Some(store.into_store())
}

/// A call site's note, in its `static` policy.
pub const fn note(text: &'static str) -> Option<Cow<'static, str>> {
    Some(Cow::Borrowed(text))
}
