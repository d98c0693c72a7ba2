//! A guarded tool's call, prepared from tables the attribute writes: the
//! key template's pieces and the fingerprinted arguments, each a trait
//! object. The preparation is one function compiled once, not a chain of
//! builder calls and `?`s instantiated for every tool.

use std::borrow::Cow;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use serde::Serialize;

use super::site::fn_tool;
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

/// A free function's identity, `plain` or, nested, with the functions
/// around it, read from `site`.
fn name_from_site(call: &mut Result<Call, Error>, plain: &'static str, site: &'static str) {
    let tool = fn_tool(plain, site);
    if !std::ptr::eq(tool, plain)
        && let Ok(call) = call
    {
        call.set_tool(tool.into());
    }
}

/// [`prepare_with`] for a call site that names no option of the policy and
/// no store, as most do: two arguments fewer for each tool to check.
pub fn prepare(tool: Tool, key: &[Piece<'_>], args: &[Arg<'_>]) -> Prepared {
    prepare_with(tool, key, args, &Policy::DEFAULT, None)
}

/// Who the tool is, as its call site names it.
#[derive(Clone, Copy)]
pub enum Tool {
    /// A free function, `module::name`. The functions it may be nested in
    /// are read at the guard from the type of its body
    /// (`Prepared::into_call`), which costs each tool's `cargo check` no
    /// item of its own.
    Function(&'static str),
    /// A method's identity, or the call site's `tool = "..."`, as it is.
    Named(&'static str),
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
pub struct Prepared {
    call: ManuallyDrop<Result<Call, Error>>,
    /// A free function's `module::name`, whose identity is completed by
    /// [`into_call`](Prepared::into_call).
    function: Option<&'static str>,
}

impl Prepared {
    /// The call, now dropped as any value is, with a free function's
    /// identity read from `B`, the type of the body the tool hands the
    /// guard: an `async move` block or closure declared in the tool's body,
    /// whose path names the functions the tool is nested in.
    #[inline]
    pub(crate) fn into_call<B>(self) -> Result<Call, Error> {
        let mut call = ManuallyDrop::into_inner(self.call);
        if let Some(plain) = self.function {
            name_from_site(&mut call, plain, std::any::type_name::<B>());
        }
        call
    }

    /// The call with `f` applied to it, still on its way to the guard.
    pub(crate) fn map(self, f: impl FnOnce(Call) -> Call) -> Prepared {
        let Prepared { call, function } = self;
        Prepared {
            call: ManuallyDrop::new(ManuallyDrop::into_inner(call).map(f)),
            function,
        }
    }
}

/// Prepares the call of a guarded tool: its key rendered from `key` into a
/// reused buffer, allocated only if a store must keep it (a replay from
/// memory allocates none), its fingerprint from `args`, the call site's
/// `static` policy, and its store (`store = ...`, see [`store`]), if it
/// names one.
///
/// A call that cannot be made (a key part that is empty, no run in scope
/// for `<run>`, an argument that does not serialize) carries its error to
/// the guard, which returns it through the tool's error type without
/// running the body.
pub fn prepare_with(
    tool: Tool,
    key: &[Piece<'_>],
    args: &[Arg<'_>],
    policy: &'static Policy,
    store: Option<Arc<dyn Store>>,
) -> Prepared {
    let (name, function) = match tool {
        Tool::Function(plain) => (plain, Some(plain)),
        Tool::Named(name) => (name, None),
    };
    Prepared {
        call: ManuallyDrop::new(prepared(name, key, args, policy, store)),
        function,
    }
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
