//! The future a store's step returns: ready at once, without allocating,
//! for a store in memory; boxed for a store that does I/O.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A store's future: ready at once for in-memory stores (no allocation),
/// boxed for stores that do I/O.
pub struct StoreFuture<'a, T>(Inner<'a, T>);

enum Inner<'a, T> {
    Ready(Option<T>),
    Boxed(Pin<Box<dyn Future<Output = T> + Send + 'a>>),
}

impl<'a, T> StoreFuture<'a, T> {
    /// A value that is already there.
    pub fn ready(value: T) -> StoreFuture<'a, T> {
        StoreFuture(Inner::Ready(Some(value)))
    }

    /// A future that does I/O.
    pub fn boxed(fut: impl Future<Output = T> + Send + 'a) -> StoreFuture<'a, T> {
        StoreFuture(Inner::Boxed(Box::pin(fut)))
    }

    /// The value, if the store answered without waiting.
    pub(crate) fn into_ready(self) -> Result<T, StoreFuture<'a, T>> {
        match self.0 {
            Inner::Ready(Some(value)) => Ok(value),
            other => Err(StoreFuture(other)),
        }
    }
}

// The ready value is moved out, never pinned, so the future is always Unpin.
impl<T> Unpin for StoreFuture<'_, T> {}

impl<T> Future for StoreFuture<'_, T> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match &mut self.0 {
            Inner::Ready(value) => match value.take() {
                Some(value) => Poll::Ready(value),
                None => Poll::Pending,
            },
            Inner::Boxed(fut) => fut.as_mut().poll(cx),
        }
    }
}
