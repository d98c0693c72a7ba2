//! The HTTP client side: a provider's API called with [`reqwest`], the
//! call's key sent as its `Idempotency-Key`, and its failures sorted into
//! [definite](Failure::Definite) and [unknown](Failure::Unknown) by when
//! they happened.
//!
//! - [`IdempotencyKey`], a [`reqwest_middleware`] middleware, and
//!   [`RequestBuilderExt::idempotency_key`] for a plain client, set the
//!   header from [`current_key`](crate::current_key) inside a guarded
//!   action (a request that already has the header keeps it).
//! - [`Classify`] for [`reqwest::Error`] and [`reqwest_middleware::Error`]:
//!   nothing sent (the request could not be built, the connection could
//!   not be made) is definite; a timeout, a broken connection, a body or a
//!   reply that could not be read is unknown, as the request may have been
//!   written. A status is read by [`status_failure`].
//!
//! ```no_run
//! use idempotent_tools::reqwest::{IdempotencyKey, status_failure};
//! use idempotent_tools::{Classify, Failure};
//!
//! #[derive(Debug, thiserror::Error)]
//! enum RefundError {
//!     #[error("the payment service failed")]
//!     Http(#[from] reqwest_middleware::Error),
//!     #[error("the payment service answered {0}")]
//!     Status(reqwest::StatusCode),
//!     #[error(transparent)]
//!     Idempotency(#[from] idempotent_tools::Error),
//! }
//!
//! impl Classify for RefundError {
//!     fn failure(&self) -> Failure {
//!         match self {
//!             RefundError::Http(err) => err.failure(),
//!             RefundError::Status(status) => status_failure(*status),
//!             RefundError::Idempotency(_) => Failure::Definite,
//!         }
//!     }
//! }
//!
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(IdempotencyKey)
//!     .build();
//! # let _ = client;
//! ```

use http::HeaderValue;
use reqwest::header::HeaderName;
use reqwest::{Request, RequestBuilder, Response, StatusCode};
use reqwest_middleware::{Middleware, Next};

use crate::failure::{Classify, Failure};
use crate::guard::current_key;

/// The header the key is sent in, as the IETF's `Idempotency-Key` draft
/// and most payment APIs name it.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The current guarded action's key, as a header value: its provider key.
fn key_header() -> Option<HeaderValue> {
    let key = current_key()?;
    HeaderValue::from_str(&key.provider_key()).ok()
}

/// Sets the `Idempotency-Key` header of every request sent inside a
/// guarded action to the action's provider key.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdempotencyKey;

#[async_trait::async_trait]
impl Middleware for IdempotencyKey {
    async fn handle(
        &self,
        mut req: Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        if !req.headers().contains_key(&IDEMPOTENCY_KEY)
            && let Some(value) = key_header()
        {
            req.headers_mut().insert(IDEMPOTENCY_KEY, value);
        }
        next.run(req, extensions).await
    }
}

/// The same header on a plain [`reqwest`] request.
pub trait RequestBuilderExt {
    /// Sets `Idempotency-Key` to the current guarded action's provider key;
    /// outside a guarded action, changes nothing.
    fn idempotency_key(self) -> Self;
}

impl RequestBuilderExt for RequestBuilder {
    fn idempotency_key(self) -> RequestBuilder {
        match key_header() {
            Some(value) => self.header(IDEMPOTENCY_KEY, value),
            None => self,
        }
    }
}

/// What a provider's answer says about an action that did not succeed:
///
/// | Status | Means | Failure |
/// |---|---|---|
/// | 409 Conflict | a request with this key is still in progress (the IETF draft) | unknown |
/// | 422 Unprocessable | this key was used with another payload (the draft): nothing done | definite |
/// | 408, 500, 502, 504 | the request may have been acted on before the error | unknown |
/// | 429, other 4xx, 503 | refused before acting | definite |
/// | other 5xx | | unknown |
///
/// A success status is definite: it is not a failure of the action.
pub fn status_failure(status: StatusCode) -> Failure {
    match status.as_u16() {
        409 | 408 => Failure::Unknown,
        503 => Failure::Definite,
        500..=599 => Failure::Unknown,
        _ => Failure::Definite,
    }
}

/// Nothing sent is definite; anything after the request may have been
/// written is unknown.
impl Classify for reqwest::Error {
    fn failure(&self) -> Failure {
        if self.is_builder() || self.is_connect() {
            Failure::Definite
        } else if let Some(status) = self.status() {
            status_failure(status)
        } else {
            Failure::Unknown
        }
    }
}

/// A middleware's own error may come after the request went out: unknown.
impl Classify for reqwest_middleware::Error {
    fn failure(&self) -> Failure {
        match self {
            reqwest_middleware::Error::Reqwest(err) => err.failure(),
            reqwest_middleware::Error::Middleware(_) => Failure::Unknown,
        }
    }
}
