//! A GET body cut off for good, explained.
//!
//! object_store resumes a body cut off after its headers (a reset connection, a body short of
//! its `Content-Length`) with a ranged GET from the bytes received, as the AWS SDKs' transfer
//! managers do, within the retry budget ([`crate::StoreConfig::retry_timeout`]); every such
//! request is counted as a retry by [`crate::MeteredStore`]. It checks the resumed answer's ETag
//! against the first answer's, so two versions are never spliced, but when they differ it gives
//! back the transport error, which reads as an unreachable endpoint.
//!
//! [`explain_cut`] wraps the body: when it fails, one `HEAD` with `If-Match` of the first
//! answer's ETag asks whether the object is still the version being read. If not (`412`), the
//! error says the object changed while it was read ([`crate::Error::Corrupt`], naming it);
//! otherwise the transport error stands.

use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore, Result};

/// The cause of a read that failed because its object was replaced meanwhile.
#[derive(Debug)]
pub(crate) struct Replaced {
    etag: String,
}

impl std::fmt::Display for Replaced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the object changed while it was read (it is no longer the version with ETag {}, \
             whose first bytes came); read it again",
            self.etag
        )
    }
}

impl std::error::Error for Replaced {}

/// `body`, whose failure is checked against the version `etag` of `location` (see the module
/// notes). Without an ETag there is nothing to compare, and `body` is returned as it is.
pub(crate) fn explain_cut<S: ObjectStore>(
    body: BoxStream<'static, Result<Bytes>>,
    store: Arc<S>,
    location: Path,
    etag: Option<String>,
) -> BoxStream<'static, Result<Bytes>> {
    let Some(etag) = etag else {
        return body;
    };
    // The state moves from one poll to the next: nothing is cloned per chunk.
    let cut = Cut {
        body,
        store,
        location,
        etag,
    };
    stream::unfold(Some(cut), |cut| async move {
        let mut cut = cut?; // nothing after the first error: the body is gone
        match cut.body.next().await? {
            Ok(bytes) => Some((Ok(bytes), Some(cut))),
            Err(e) => {
                let err = explain(&*cut.store, &cut.location, cut.etag, e).await;
                Some((Err(err), None))
            }
        }
    })
    .fuse() // readers may poll again after the end
    .boxed()
}

/// A body being read, and what explains its failure.
struct Cut<S> {
    body: BoxStream<'static, Result<Bytes>>,
    store: Arc<S>,
    location: Path,
    etag: String,
}

/// `err`, or a [`Replaced`] error when `location` is no longer the version `etag`.
async fn explain<S: ObjectStore>(
    store: &S,
    location: &Path,
    etag: String,
    err: object_store::Error,
) -> object_store::Error {
    let check = GetOptions {
        if_match: Some(etag.clone()),
        head: true,
        ..GetOptions::default()
    };
    match store.get_opts(location, check).await {
        Err(object_store::Error::Precondition { .. }) => object_store::Error::Precondition {
            path: location.to_string(),
            source: Box::new(Replaced { etag }),
        },
        _ => err,
    }
}
