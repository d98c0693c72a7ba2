//! Fingerprints: what a call asked for, beyond its key.

use std::cell::Cell;
use std::fmt;
use std::io;

use serde::Serialize;
use xxhash_rust::xxh3::{Xxh3, xxh3_128};

mod call_ids;

use call_ids::WithoutCallIds;

thread_local! {
    static FINGERPRINTING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with [`FreeText`](crate::FreeText) and [`CallId`](crate::CallId) serializing as nothing, so that
/// a fingerprint never covers free text or a call id, wherever they sit: an
/// argument, an `Option`, a field of an argument struct. A value named as a
/// call id is left out by the serializer the fingerprint writes through.
pub(crate) fn fingerprinting<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            FINGERPRINTING.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(FINGERPRINTING.with(|c| c.replace(true)));
    f()
}

/// Whether this thread is computing a fingerprint, so that [`FreeText`] and
/// [`CallId`] serialize as nothing.
///
/// [`FreeText`]: crate::FreeText
/// [`CallId`]: crate::CallId
pub(crate) fn is_fingerprinting() -> bool {
    FINGERPRINTING.with(Cell::get)
}

/// A digest of the arguments that are not in the key: the amount of a refund,
/// say. The same key with a different fingerprint is a conflict (refund 42,
/// then 41, on one order), never a replay.
///
/// Arguments are serialized as JSON (serde) into XXH3-128, which is stable
/// across platforms and versions. [`FreeText`](crate::FreeText) and
/// [`CallId`](crate::CallId) serialize as nothing here, wherever they sit, and
/// so does a struct field or map entry named as a call id (`tool_call_id`,
/// `toolUseId`, `request_id`, ...), so neither model wording nor a new call
/// id makes a conflict. Use ordered maps
/// (`BTreeMap`) in arguments: a `HashMap` serializes in a random order.
///
/// ```
/// use idempotent_tools::call::Fingerprint;
///
/// let a = Fingerprint::builder().arg("usd", &42)?.finish();
/// let b = Fingerprint::builder().arg("usd", &41)?.finish();
/// assert_ne!(a, b);
/// # Ok::<(), idempotent_tools::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Fingerprint(pub [u8; 16]);

impl Fingerprint {
    /// The fingerprint of a call with no arguments beyond its key.
    pub const EMPTY: Fingerprint = Fingerprint([0; 16]);

    /// Starts a fingerprint.
    pub fn builder() -> FingerprintBuilder {
        FingerprintBuilder {
            bytes: [0; ONE_PASS],
            len: 0,
            stream: None,
            args: 0,
        }
    }

    /// The bytes, for storage.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", hex::encode(self.0))
    }
}

/// How many bytes of arguments are hashed in one pass; longer argument lists
/// are streamed into the hasher (the digest is the same either way).
const ONE_PASS: usize = 96;

/// Feeds arguments into a [`Fingerprint`].
pub struct FingerprintBuilder {
    bytes: [u8; ONE_PASS],
    len: usize,
    stream: Option<Box<Xxh3>>,
    args: usize,
}

impl FingerprintBuilder {
    // Inlined, so that the fixed-size writes (a name's length, the end
    // marker) are plain stores rather than calls to `memcpy`.
    #[inline(always)]
    fn write(&mut self, buf: &[u8]) {
        if self.stream.is_none()
            && let Some(room) = self.bytes.get_mut(self.len..self.len + buf.len())
        {
            room.copy_from_slice(buf);
            self.len += buf.len();
            return;
        }
        self.write_long(buf);
    }

    /// Arguments past [`ONE_PASS`] bytes go to a streaming hasher.
    #[cold]
    #[inline(never)]
    fn write_long(&mut self, buf: &[u8]) {
        let (bytes, len) = (&self.bytes, self.len);
        self.stream
            .get_or_insert_with(|| {
                let mut stream = Box::new(Xxh3::new());
                stream.update(&bytes[..len]);
                stream
            })
            .update(buf);
    }
}

struct HashWriter<'a>(&'a mut FingerprintBuilder);

impl io::Write for HashWriter<'_> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Why an argument could not be fingerprinted: it does not serialize (a
/// map with non-string keys, a `Serialize` impl that fails).
#[derive(Debug, thiserror::Error)]
#[error("argument `{argument}` does not serialize")]
pub struct FingerprintError {
    argument: String,
    #[source]
    cause: serde_json::Error,
}

impl FingerprintError {
    /// The argument's name.
    pub fn argument(&self) -> &str {
        &self.argument
    }
}

impl FingerprintBuilder {
    /// Adds one named argument. Within it, a field or map entry named as a
    /// call id is written as nothing; the argument's own name is yours.
    ///
    /// Takes the builder by reference, so a chain of `.arg(..)?` calls does
    /// not move its buffer at every step.
    pub fn arg<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
    ) -> Result<&mut FingerprintBuilder, FingerprintError> {
        self.add(name, &WithoutCallIds(value))?;
        Ok(self)
    }

    /// Adds one argument whose names the user vouched for as ids
    /// (`#[identifier]`): a field named as a call id is fingerprinted.
    pub(crate) fn arg_vouched<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
    ) -> Result<(), FingerprintError> {
        self.add(name, value)
    }

    fn add<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
    ) -> Result<(), FingerprintError> {
        // Length-prefixed names keep `("ab", 1)` apart from `("a", b1)`.
        self.write(&(name.len() as u64).to_le_bytes());
        self.write(name.as_bytes());
        fingerprinting(|| serde_json::to_writer(HashWriter(self), value)).map_err(|cause| {
            FingerprintError {
                argument: name.to_owned(),
                cause,
            }
        })?;
        self.write(&[0xff]);
        self.args += 1;
        Ok(())
    }

    /// Finishes the fingerprint.
    pub fn finish(&self) -> Fingerprint {
        if self.args == 0 {
            return Fingerprint::EMPTY;
        }
        let digest = match &self.stream {
            Some(stream) => stream.digest128(),
            None => xxh3_128(&self.bytes[..self.len]),
        };
        Fingerprint(digest.to_le_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fingerprints are stored: hashing short argument lists in one pass and
    /// long ones in a stream must give the digest a stream always gave.
    #[test]
    fn one_pass_and_streamed_arguments_hash_as_one_stream_would() {
        for text in ["", "x", &"long argument ".repeat(40)] {
            let mut stream = Xxh3::new();
            for (name, value) in [("usd", "42"), ("note", text)] {
                stream.update(&(name.len() as u64).to_le_bytes());
                stream.update(name.as_bytes());
                stream.update(serde_json::to_string(value).unwrap().as_bytes());
                stream.update(&[0xff]);
            }
            let built = Fingerprint::builder()
                .arg("usd", "42")
                .and_then(|b| b.arg("note", text))
                .map(|b| b.finish())
                .unwrap();
            assert_eq!(built.0, stream.digest128().to_le_bytes(), "{text:?}");
        }
    }
}
