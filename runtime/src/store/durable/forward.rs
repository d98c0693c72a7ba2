//! The one `impl Store` of every durable store: what the steps share, done
//! once, around the [`Backend`]'s statements.

use std::sync::Arc;
use std::time::Duration;

use super::verdict::{self, Found, Verdict};
use super::{Backend, CompletionRow, Durable, Holder, Resolved, encode};
use crate::key::Key;
use crate::store::record::Completion;
use crate::{
    store::records::{
        Forget, PurgedBatch, Record, RecordCount, RecordPage, RecordQuery, Records, Resolution,
    },
    store::{Claim, ClaimAnswer, ClaimRequest, Store, StoreError, StoreFuture, StoreResult},
};

impl<D: Durable> Store for D {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, StoreResult<ClaimAnswer>> {
        StoreFuture::boxed(claim(self.backend(), req))
    }

    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        completion: Completion,
    ) -> StoreFuture<'a, StoreResult<()>> {
        let backend = self.backend();
        StoreFuture::boxed(async move {
            // Refused before any I/O, so nothing is written that could not
            // be replayed as itself.
            let json = completion.value.to_json()?.into_owned();
            let done = CompletionRow {
                state: completion.state.as_str(),
                json,
                completed_at: completion.completed_at,
                retention: claim.retention,
            };
            still_held(backend.complete(Holder::of(claim), done).await?)
        })
    }

    fn release<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, StoreResult<()>> {
        let backend = self.backend();
        StoreFuture::boxed(async move { still_held(backend.release(Holder::of(claim)).await?) })
    }

    fn renew<'a>(&'a self, claim: &'a Claim, lease: Duration) -> StoreFuture<'a, StoreResult<()>> {
        let backend = self.backend();
        StoreFuture::boxed(async move {
            let renewed = backend
                .renew(Holder::of(claim), lease, claim.retention)
                .await?;
            still_held(renewed)
        })
    }

    fn kind(&self) -> &'static str {
        D::Backend::KIND
    }

    /// A third of the lease: two renewals may fail or come late before
    /// another process takes the claim over.
    fn renew_every(&self, lease: Duration) -> Option<Duration> {
        Some(lease / 3)
    }
}

impl<D: Durable> Records for D {
    fn purge_expired(&self) -> StoreFuture<'_, StoreResult<u64>> {
        let backend = self.backend();
        StoreFuture::boxed(async move {
            let batch = backend.purge_batch() as u64;
            let mut total = 0;
            loop {
                // Each batch is its own statement, so claims get in between.
                let deleted = backend.purge_some().await?;
                total += deleted;
                if deleted < batch {
                    return Ok(total);
                }
            }
        })
    }

    fn purge_expired_batch(&self) -> StoreFuture<'_, StoreResult<PurgedBatch>> {
        let backend = self.backend();
        StoreFuture::boxed(async move {
            let batch = backend.purge_batch() as u64;
            let removed = backend.purge_some().await?;
            Ok(PurgedBatch {
                removed,
                more: removed >= batch,
            })
        })
    }

    fn forget_with<'a>(&'a self, key: &'a Key, how: Forget) -> StoreFuture<'a, StoreResult<bool>> {
        let backend = self.backend();
        StoreFuture::boxed(async move {
            let forgotten = backend.forget(key.digest(), how == Forget::Force).await?;
            if !forgotten.removed && forgotten.live {
                return Err(StoreError::LiveClaim {
                    key: key.as_str().to_owned(),
                });
            }
            Ok(forgotten.removed)
        })
    }

    fn resolve<'a>(&'a self, key: &'a Key, how: Resolution) -> StoreFuture<'a, StoreResult<()>> {
        let backend = self.backend();
        StoreFuture::boxed(async move {
            // Refused before any I/O, as a completion's result is.
            let applied = match &how {
                Resolution::Applied(value) => Some(value.to_json()?.into_owned()),
                Resolution::NotApplied => None,
            };
            let key_text = || key.as_str().to_owned();
            match backend.resolve(key.digest(), applied).await? {
                Resolved::Changed => Ok(()),
                Resolved::Missing => Err(StoreError::NoRecord { key: key_text() }),
                Resolved::Live => Err(StoreError::LiveClaim { key: key_text() }),
                Resolved::Known(state) => Err(StoreError::NotUnknown {
                    key: key_text(),
                    state,
                }),
            }
        })
    }

    fn list<'a>(&'a self, query: &'a RecordQuery) -> StoreFuture<'a, StoreResult<RecordPage>> {
        let backend = self.backend();
        StoreFuture::boxed(async move {
            let page = query.page_size();
            // One more than a page, to tell whether another page follows.
            let limit = i64::try_from(page + 1).unwrap_or(i64::MAX);
            let records = backend.list(query, limit).await?;
            Ok(RecordPage::from_overfetch(records, page))
        })
    }

    fn inspect<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, StoreResult<Option<Record>>> {
        let backend = self.backend();
        StoreFuture::boxed(async move {
            match backend.inspect(key).await? {
                Some(record) if record.key.as_str() != key.as_str() => {
                    Err(StoreError::Corrupt(format!(
                        "key `{key}` shares its digest with the stored key `{}`",
                        record.key
                    )))
                }
                found => Ok(found),
            }
        })
    }

    fn count(&self) -> StoreFuture<'_, StoreResult<Vec<RecordCount>>> {
        let backend = self.backend();
        StoreFuture::boxed(async move {
            let mut counts = backend.count().await?;
            counts.sort_by(|a, b| (&a.tool, a.state).cmp(&(&b.tool, b.state)));
            Ok(counts)
        })
    }
}

/// A claim: subscribed to wake-ups before the statement, so a completion
/// after it is never missed; then the statement, then the verdict on what
/// it found.
async fn claim<B: Backend>(backend: &Arc<B>, req: ClaimRequest<'_>) -> StoreResult<ClaimAnswer> {
    let owner = encode::new_owner()?;
    let digest = req.key.digest();
    let subscription = backend.subscribe(digest);
    let row = match backend.claim(&req, owner).await? {
        Found::Mine { fence, taken_over } => {
            return Ok(ClaimAnswer::Claimed(Claim {
                key: req.key.clone(),
                owner,
                fence,
                taken_over,
                retention: req.retention,
            }));
        }
        Found::Other(row) => row,
    };
    match verdict::judge(&req, row)? {
        Verdict::Answer(answer) => Ok(answer),
        Verdict::InFlight {
            owner,
            fence,
            lease_left,
        } => {
            let holder = Holder {
                digest,
                owner,
                fence,
            };
            let wait = Arc::clone(backend).wait(subscription, holder, lease_left);
            Ok(ClaimAnswer::InFlight(wait))
        }
    }
}

/// The owner and fence check of `complete`, `release` and `renew`: a step
/// that changed no row found the claim no longer held by its caller.
fn still_held(changed: u64) -> StoreResult<()> {
    if changed == 0 {
        Err(StoreError::LeaseLost)
    } else {
        Ok(())
    }
}
