//! DELETE, retried when its answer is lost.
//!
//! object_store retries a DELETE that was refused (5xx, 429) or never sent, but not one whose
//! connection broke after it was sent: it treats DELETE as a write that may have taken effect.
//! In S3 a DELETE is idempotent (deleting a key that has no object answers 204), so a DELETE
//! whose answer was lost is sent again within the store's retry budget (`max_retries`,
//! `retry_timeout`), and a key found missing is deleted. On a versioned bucket the second
//! DELETE adds a second delete marker, which changes nothing a reader sees.

use std::time::Instant;

use object_store::client::HttpErrorKind;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::config::StoreConfig;

/// Deletes `key` from `store`, sending the DELETE again while its answer is lost (see the
/// module docs) within `config`'s retry budget. A key without an object is success; a bucket
/// that does not exist is the store's `NotFound` error (its chain names `NoSuchBucket`).
pub async fn delete_retried(
    store: &dyn ObjectStore,
    key: &Path,
    config: &StoreConfig,
) -> object_store::Result<()> {
    let start = Instant::now();
    let mut backoff = crate::store::backoff_config().init_backoff;
    let mut attempt = 0;
    loop {
        let err = match store.delete(key).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if matches!(err, object_store::Error::NotFound { .. })
            && !crate::error::chain_text(&err).contains("NoSuchBucket")
        {
            return Ok(());
        }
        let exhausted =
            attempt >= config.max_retries() || start.elapsed() + backoff > config.retry_timeout();
        if !answer_lost(&err) || exhausted {
            return Err(err);
        }
        tracing::debug!(%key, attempt, error = %err, "the answer to a DELETE was lost; sending it again");
        tokio::time::sleep(backoff).await;
        backoff = crate::store::next_backoff(backoff);
        attempt += 1;
    }
}

/// Whether the DELETE was sent and its answer lost: the transport failures object_store does
/// not retry for a request it does not know to be idempotent (a refused connection, or a
/// request that was never sent, it has retried already).
fn answer_lost(err: &object_store::Error) -> bool {
    matches!(
        crate::error::http_error_kind(err),
        Some(HttpErrorKind::Interrupted | HttpErrorKind::Timeout | HttpErrorKind::Unknown)
    )
}

impl crate::Store {
    /// Deletes `key` (a path of [`Store::object_store`](crate::Store::object_store)) with
    /// [`delete_retried`] and this store's retry budget: every DELETE bucketload sends goes
    /// through here.
    pub async fn delete_key(&self, key: &Path) -> object_store::Result<()> {
        delete_retried(self.object_store().as_ref(), key, self.config()).await
    }
}
