//! Make an LLM agent's tool carry out its real-world action once per ask,
//! however many times the model calls it.
#![deny(missing_docs)]

pub use idempotent_runtime::*;
