//! Adapters for agent frameworks and for the HTTP client a tool calls its
//! provider with, each behind its cargo feature.
//!
//! The guard itself knows no framework. An adapter only teaches a framework
//! the guard's types: where a tool finds its [`Run`](crate::Run), and how an
//! [`Outcome`](crate::Outcome) reaches the model; or teaches the guard a
//! client's errors, and the client the call's key.

#[cfg(feature = "reqwest")]
pub mod reqwest;
#[cfg(feature = "rig")]
pub mod rig;
#[cfg(feature = "rmcp")]
pub mod rmcp;

#[cfg(any(feature = "rig", feature = "rmcp"))]
mod schema {
    use std::borrow::Cow;

    use schemars::{JsonSchema, Schema, SchemaGenerator};

    use crate::free_text::FreeText;

    /// Free text is described to the model exactly as the text it wraps: the
    /// model writes a reason as it always would, and only the fingerprint
    /// skips it. Both rig and rmcp build tool schemas with schemars 1.
    impl<T: JsonSchema> JsonSchema for FreeText<T> {
        fn inline_schema() -> bool {
            T::inline_schema()
        }

        fn schema_name() -> Cow<'static, str> {
            T::schema_name()
        }

        fn schema_id() -> Cow<'static, str> {
            T::schema_id()
        }

        fn json_schema(generator: &mut SchemaGenerator) -> Schema {
            T::json_schema(generator)
        }
    }
}
