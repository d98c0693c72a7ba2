//! The code users write, compiled as they would compile it: what
//! `#[idempotent]` refuses, with the compiler's message (`tests/ui`, cases
//! under `fail/` and `frameworks/`), what it accepts (`tests/pass/`), and
//! the README's sections, each a crate of its own (`tests/ui/readme.rs`).
