//! Fingerprints: what a call asked for, beyond its key.

use std::fmt;
use std::io;

use serde::Serialize;
use xxhash_rust::xxh3::Xxh3;

use crate::error::Error;
use crate::text::fingerprinting;

/// A digest of the arguments that are not in the key: the amount of a refund,
/// say. The same key with a different fingerprint is a conflict (refund 42,
/// then 41, on one order), never a replay.
///
/// Arguments are serialized as JSON (serde) into XXH3-128, which is stable
/// across platforms and versions. [`FreeText`](crate::FreeText) and
/// [`CallId`](crate::CallId) serialize as nothing here, wherever they sit, so
/// neither model wording nor a new call id makes a conflict. Use ordered maps
/// (`BTreeMap`) in arguments: a `HashMap` serializes in a random order.
///
/// ```
/// use idempotent_tools::Fingerprint;
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
            hasher: Xxh3::new(),
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

/// Feeds arguments into a [`Fingerprint`].
pub struct FingerprintBuilder {
    hasher: Xxh3,
    args: usize,
}

struct HashWriter<'a>(&'a mut Xxh3);

impl io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl FingerprintBuilder {
    /// Adds one named argument.
    ///
    /// Takes the builder by reference: its hasher state is large, and a
    /// chain of `.arg(..)?` calls should not move it at every step.
    pub fn arg<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
    ) -> Result<&mut FingerprintBuilder, Error> {
        // Length-prefixed names keep `("ab", 1)` apart from `("a", b1)`.
        self.hasher.update(&(name.len() as u64).to_le_bytes());
        self.hasher.update(name.as_bytes());
        let hasher = &mut self.hasher;
        fingerprinting(|| serde_json::to_writer(HashWriter(hasher), value))
            .map_err(Error::Fingerprint)?;
        self.hasher.update(&[0xff]);
        self.args += 1;
        Ok(self)
    }

    /// Finishes the fingerprint.
    pub fn finish(&self) -> Fingerprint {
        if self.args == 0 {
            return Fingerprint::EMPTY;
        }
        Fingerprint(self.hasher.digest128().to_le_bytes())
    }
}
