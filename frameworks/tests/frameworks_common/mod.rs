//! What the rig tests share: the tools' error and the key they hand
//! to the test kit's stand-in provider.

use idempotent_tools_testing::ProviderError;

/// The key the guard holds, in the provider's form: the provider then
/// deduplicates a retry after a lost reply.
pub fn provider_key() -> Option<String> {
    idempotent_tools::current_key().map(|key| key.provider_key().into_owned())
}

/// The tools' error: the guard's, or the provider's.
#[derive(Debug, thiserror::Error)]
pub enum ShopError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
    #[error(transparent)]
    Provider(#[from] ProviderError),
}
