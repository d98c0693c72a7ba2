//! What `#[idempotent]` accepts: each module is a tool written as a user
//! would write it (aliased types, other attributes, destructured and generic
//! arguments, methods, names that shadow the expansion's own, options,
//! verification), and its test calls it. Built with the workspace, so a
//! change to the expansion that breaks one fails the build here; the cases
//! the attribute refuses are `fail/` and `frameworks/`, checked by
//! `tests/ui.rs`.

mod aliases;
mod attributes;
mod destructured;
mod generics;
mod hygiene;
mod identifier;
mod instrument;
mod key_part_derive;
mod methods;
mod options;
mod send;
mod verify;
