//! The serializer a fingerprint is written through: a struct field or a map
//! entry named as a call id is written as `null`, at any depth, as a
//! [`CallId`](crate::CallId) is. Everything else is passed on unchanged, so a
//! fingerprint of arguments without such a name is the one it always was.

use std::fmt::{self, Display};

use serde::ser::{
    self, Impossible, Serialize, SerializeMap, SerializeSeq, SerializeStruct,
    SerializeStructVariant, SerializeTuple, SerializeTupleStruct, SerializeTupleVariant,
    Serializer,
};

/// A value, serialized with the fields under it named as call ids left out.
pub(crate) struct WithoutCallIds<'a, T: ?Sized>(pub(crate) &'a T);

impl<T: Serialize + ?Sized> Serialize for WithoutCallIds<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(Skipping(serializer))
    }
}

/// Wraps a serializer, or one of its compounds, to leave call ids out.
pub(crate) struct Skipping<S>(pub(crate) S);

/// What a call id's value is written as: `null`.
const LEFT_OUT: () = ();

macro_rules! forward {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $method(self, $($arg: $ty),*) -> Result<S::Ok, S::Error> {
                self.0.$method($($arg),*)
            }
        )*
    };
}

impl<S: Serializer> Serializer for Skipping<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = Skipping<S::SerializeSeq>;
    type SerializeTuple = Skipping<S::SerializeTuple>;
    type SerializeTupleStruct = Skipping<S::SerializeTupleStruct>;
    type SerializeTupleVariant = Skipping<S::SerializeTupleVariant>;
    type SerializeMap = Entries<S::SerializeMap>;
    type SerializeStruct = Skipping<S::SerializeStruct>;
    type SerializeStructVariant = Skipping<S::SerializeStructVariant>;

    forward! {
        serialize_bool(v: bool);
        serialize_i8(v: i8);
        serialize_i16(v: i16);
        serialize_i32(v: i32);
        serialize_i64(v: i64);
        serialize_i128(v: i128);
        serialize_u8(v: u8);
        serialize_u16(v: u16);
        serialize_u32(v: u32);
        serialize_u64(v: u64);
        serialize_u128(v: u128);
        serialize_f32(v: f32);
        serialize_f64(v: f64);
        serialize_char(v: char);
        serialize_str(v: &str);
        serialize_bytes(v: &[u8]);
        serialize_none();
        serialize_unit();
        serialize_unit_struct(name: &'static str);
        serialize_unit_variant(name: &'static str, index: u32, variant: &'static str);
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<S::Ok, S::Error> {
        self.0.serialize_some(&WithoutCallIds(value))
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0
            .serialize_newtype_struct(name, &WithoutCallIds(value))
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0
            .serialize_newtype_variant(name, index, variant, &WithoutCallIds(value))
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        self.0.serialize_seq(len).map(Skipping)
    }

    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        self.0.serialize_tuple(len).map(Skipping)
    }

    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        self.0.serialize_tuple_struct(name, len).map(Skipping)
    }

    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        self.0
            .serialize_tuple_variant(name, index, variant, len)
            .map(Skipping)
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        self.0.serialize_map(len).map(|inner| Entries {
            inner,
            left_out: false,
        })
    }

    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        self.0.serialize_struct(name, len).map(Skipping)
    }

    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        self.0
            .serialize_struct_variant(name, index, variant, len)
            .map(Skipping)
    }

    fn collect_str<T: Display + ?Sized>(self, value: &T) -> Result<S::Ok, S::Error> {
        self.0.collect_str(value)
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// The compounds whose elements have no names: each element is written
/// with the call ids under it left out.
macro_rules! unnamed {
    ($($compound:ident, $method:ident;)*) => {
        $(
            impl<S: $compound> $compound for Skipping<S> {
                type Ok = S::Ok;
                type Error = S::Error;
                fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), S::Error> {
                    self.0.$method(&WithoutCallIds(value))
                }
                fn end(self) -> Result<S::Ok, S::Error> {
                    self.0.end()
                }
            }
        )*
    };
}

unnamed! {
    SerializeSeq, serialize_element;
    SerializeTuple, serialize_element;
    SerializeTupleStruct, serialize_field;
    SerializeTupleVariant, serialize_field;
}

/// The compounds whose fields have names: a field named as a call id is
/// written as `null`.
macro_rules! named {
    ($($compound:ident;)*) => {
        $(
            impl<S: $compound> $compound for Skipping<S> {
                type Ok = S::Ok;
                type Error = S::Error;
                fn serialize_field<T: Serialize + ?Sized>(
                    &mut self,
                    key: &'static str,
                    value: &T,
                ) -> Result<(), S::Error> {
                    if is_call_id_name(key) {
                        self.0.serialize_field(key, &LEFT_OUT)
                    } else {
                        self.0.serialize_field(key, &WithoutCallIds(value))
                    }
                }
                fn skip_field(&mut self, key: &'static str) -> Result<(), S::Error> {
                    self.0.skip_field(key)
                }
                fn end(self) -> Result<S::Ok, S::Error> {
                    self.0.end()
                }
            }
        )*
    };
}

named! {
    SerializeStruct;
    SerializeStructVariant;
}

/// A map's entries, whose text keys are read as field names are: a map is
/// what `#[serde(flatten)]` and a `serde_json::Value` argument write.
pub(crate) struct Entries<M> {
    inner: M,
    /// The key just written names a call id.
    left_out: bool,
}

impl<M: SerializeMap> SerializeMap for Entries<M> {
    type Ok = M::Ok;
    type Error = M::Error;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), M::Error> {
        self.left_out = names_call_id(key);
        self.inner.serialize_key(&WithoutCallIds(key))
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), M::Error> {
        if std::mem::take(&mut self.left_out) {
            self.inner.serialize_value(&LEFT_OUT)
        } else {
            self.inner.serialize_value(&WithoutCallIds(value))
        }
    }

    fn serialize_entry<K: Serialize + ?Sized, V: Serialize + ?Sized>(
        &mut self,
        key: &K,
        value: &V,
    ) -> Result<(), M::Error> {
        if names_call_id(key) {
            self.inner.serialize_entry(&WithoutCallIds(key), &LEFT_OUT)
        } else {
            self.inner
                .serialize_entry(&WithoutCallIds(key), &WithoutCallIds(value))
        }
    }

    fn end(self) -> Result<M::Ok, M::Error> {
        self.inner.end()
    }
}

/// Whether a map key is text that names a call id.
fn names_call_id<K: Serialize + ?Sized>(key: &K) -> bool {
    key.serialize(KeyName).unwrap_or(false)
}

/// Reads a map key: text, through any newtype around it, or nothing.
struct KeyName;

/// A key that is not text.
#[derive(Debug)]
struct NotText;

impl Display for NotText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map key that is not text")
    }
}

impl std::error::Error for NotText {}

impl ser::Error for NotText {
    fn custom<T: Display>(_: T) -> NotText {
        NotText
    }
}

macro_rules! not_text {
    ($($method:ident($($ty:ty),*);)*) => {
        $(
            fn $method(self, $(_: $ty),*) -> Result<bool, NotText> {
                Ok(false)
            }
        )*
    };
}

impl Serializer for KeyName {
    type Ok = bool;
    type Error = NotText;
    type SerializeSeq = Impossible<bool, NotText>;
    type SerializeTuple = Impossible<bool, NotText>;
    type SerializeTupleStruct = Impossible<bool, NotText>;
    type SerializeTupleVariant = Impossible<bool, NotText>;
    type SerializeMap = Impossible<bool, NotText>;
    type SerializeStruct = Impossible<bool, NotText>;
    type SerializeStructVariant = Impossible<bool, NotText>;

    fn serialize_str(self, v: &str) -> Result<bool, NotText> {
        Ok(is_call_id_name(v))
    }

    not_text! {
        serialize_bool(bool);
        serialize_i8(i8);
        serialize_i16(i16);
        serialize_i32(i32);
        serialize_i64(i64);
        serialize_u8(u8);
        serialize_u16(u16);
        serialize_u32(u32);
        serialize_u64(u64);
        serialize_f32(f32);
        serialize_f64(f64);
        serialize_char(char);
        serialize_bytes(&[u8]);
        serialize_none();
        serialize_unit();
        serialize_unit_struct(&'static str);
        serialize_unit_variant(&'static str, u32, &'static str);
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<bool, NotText> {
        value.serialize(self)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<bool, NotText> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<bool, NotText> {
        Ok(false)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, NotText> {
        Err(NotText)
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, NotText> {
        Err(NotText)
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, NotText> {
        Err(NotText)
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, NotText> {
        Err(NotText)
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, NotText> {
        Err(NotText)
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, NotText> {
        Err(NotText)
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, NotText> {
        Err(NotText)
    }

    fn collect_str<T: Display + ?Sized>(self, value: &T) -> Result<bool, NotText> {
        Ok(is_call_id_name(&value.to_string()))
    }
}

/// Whether a name is that of a call's id, as the model APIs and agent
/// frameworks name one: `call_id`, `tool_call_id`, `tool_use_id`,
/// `function_call_id`, `invocation_id` or `request_id`. Only ASCII letters
/// and digits count, in lower case, so `toolUseId`, `TOOL_USE_ID` and
/// `tool-use-id` are `tool_use_id`. The attribute refuses the same names in
/// a key (`macros/src/names.rs`).
fn is_call_id_name(name: &str) -> bool {
    // Every one ends in `id`: most names of a fingerprinted value are
    // turned away at their last letter.
    let last = name.bytes().rev().find(u8::is_ascii_alphanumeric);
    if !matches!(last, Some(b'd' | b'D')) {
        return false;
    }
    // The longest of the names, squashed, is 14 bytes.
    let mut squashed = [0u8; 16];
    let mut len = 0;
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() {
            let Some(slot) = squashed.get_mut(len) else {
                return false;
            };
            *slot = byte.to_ascii_lowercase();
            len += 1;
        } else if !byte.is_ascii() {
            return false;
        }
    }
    matches!(
        squashed.get(..len),
        Some(
            b"callid"
                | b"toolcallid"
                | b"tooluseid"
                | b"functioncallid"
                | b"invocationid"
                | b"requestid"
        )
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Serialize;

    use super::*;

    #[test]
    fn a_call_id_name_is_read_in_any_case_and_with_any_separator() {
        for name in [
            "call_id",
            "tool_call_id",
            "toolCallId",
            "TOOL_USE_ID",
            "tool-use-id",
            "function_call_id",
            "invocationId",
            "RequestID",
        ] {
            assert!(is_call_id_name(name), "{name}");
        }
        for name in [
            "order_id",
            "run_id",
            "id",
            "recall_id",
            "call",
            "tóol_call_id",
            "",
        ] {
            assert!(!is_call_id_name(name), "{name}");
        }
    }

    fn json<T: Serialize>(value: &T) -> String {
        let mut out = Vec::new();
        let written = WithoutCallIds(value).serialize(&mut serde_json::Serializer::new(&mut out));
        assert!(written.is_ok(), "{written:?}");
        String::from_utf8(out).unwrap_or_default()
    }

    #[derive(Serialize)]
    struct Meta {
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        source: String,
    }

    #[derive(Serialize)]
    enum Ask {
        Refund { order_id: u64, request_id: String },
    }

    #[derive(Serialize)]
    struct Args {
        order_id: u64,
        meta: Meta,
        asks: Vec<Ask>,
        #[serde(flatten)]
        extra: BTreeMap<String, String>,
    }

    #[test]
    fn call_ids_by_name_are_null_at_any_depth() {
        let args = Args {
            order_id: 1182,
            meta: Meta {
                tool_call_id: "call_1".into(),
                source: "chat".into(),
            },
            asks: vec![Ask::Refund {
                order_id: 7,
                request_id: "rq".into(),
            }],
            extra: BTreeMap::from([
                ("invocationId".to_owned(), "inv".to_owned()),
                ("tier".to_owned(), "gold".to_owned()),
            ]),
        };
        assert_eq!(
            json(&args),
            r#"{"order_id":1182,"meta":{"toolCallId":null,"source":"chat"},"asks":[{"Refund":{"order_id":7,"request_id":null}}],"invocationId":null,"tier":"gold"}"#
        );
    }

    #[test]
    fn values_without_call_ids_are_written_as_serde_json_writes_them() {
        let value = serde_json::json!({"a": [1, 2.5, null, "x"], "b": {"c": true}});
        let plain = serde_json::to_string(&value).unwrap_or_default();
        assert_eq!(json(&value), plain);
        let map = BTreeMap::from([(1u8, "one"), (2, "two")]);
        assert_eq!(json(&map), r#"{"1":"one","2":"two"}"#);
    }
}
