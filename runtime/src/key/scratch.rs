//! The buffer keys are rendered in, reused on each thread: a key is
//! rendered into it and copied once into its final allocation, so building
//! a key costs one allocation.

use std::cell::Cell;

thread_local! {
    static SCRATCH: Cell<String> = const { Cell::new(String::new()) };
}

/// This thread's buffer, empty, or a new one.
#[inline]
pub(super) fn take() -> String {
    let mut buf = SCRATCH.try_with(Cell::take).unwrap_or_default();
    buf.clear();
    buf
}

/// Keeps a buffer for the next key rendered on this thread; huge ones are
/// dropped.
#[inline]
pub(super) fn give_back(buf: String) {
    if buf.capacity() > 0 && buf.capacity() <= 4096 {
        // A thread being torn down has no scratch left to keep it in.
        let _ = SCRATCH.try_with(|cell| cell.set(buf));
    }
}
