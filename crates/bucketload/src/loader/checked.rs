//! The bytes of one file, checked against what the dataset promises.
//!
//! A files dataset's manifest records each object's size, ETag and CRC32C (a listing: size and
//! ETag). Every GET's response is compared with them: a different size or ETag means the
//! object changed since; where either side has no ETag, a different CRC32C of the bytes does. Such a
//! sample fails the stream with an error naming the object, or is left out and counted
//! ([`LoaderBuilder::with_skip_changed`](super::LoaderBuilder::with_skip_changed)).
//!
//! The disk cache files bytes under the version the store *returned* (the response's ETag and
//! size), never under the one expected, and is asked for the expected version (with the
//! manifest's CRC32C, which the entry's body must have): an entry is served only as the version
//! it was fetched as, so changed bytes are never served for the version the manifest names
//! (docs/CACHE.md).

use bucketload_cache::{CacheKey, ObjectVersion};
use bucketload_store::ETag;
use bucketload_store::object_store::ObjectStoreExt;
use bytes::Bytes;

use super::Inner;
use super::catalog::FileObject;
use super::stats::add;
use crate::{Error, Result};

/// Bodies up to this size are checksummed on the Tokio worker: CRC32C runs at several GB/s
/// with SSE 4.2, so 1 MiB takes well under 100 µs; larger ones go to a blocking thread.
const INLINE_CRC_BYTES: usize = 1 << 20;

/// The bytes of `file`: from the cache when it holds the expected version, else one GET. `None`
/// when the object changed and the loader skips changed samples.
pub(crate) async fn file_bytes(inner: &Inner, file: &FileObject) -> Result<Option<Bytes>> {
    let key = CacheKey::new(inner.store_uri.clone(), file.key.as_ref());
    let expected = ObjectVersion::with_etag(file.etag.clone(), file.size).with_crc32c(file.crc32c);
    if let Some(cache) = &inner.cache
        && let Some(bytes) = cache.get(&key, &expected, &inner.counters).await
    {
        return Ok(Some(bytes));
    }
    let (bytes, returned) = get_file(inner, file).await?;
    let change = compare(&Promise::of(file), &returned, &bytes).await;
    // Bytes whose checksum contradicts the manifest for the very version they came as are not
    // trusted as that version: they are not cached.
    if let Some(cache) = &inner.cache
        && !matches!(change, Some(Change::Checksum { .. }))
    {
        cache
            .insert(&key, &returned, bytes.clone(), &inner.counters)
            .await;
    }
    match change {
        None => Ok(Some(bytes)),
        Some(change) => changed(inner, file, &change),
    }
}

/// One GET of the whole object: its bytes and the version the store says they are.
async fn get_file(inner: &Inner, file: &FileObject) -> Result<(Bytes, ObjectVersion)> {
    let loc = &inner.location;
    let key = &file.key;
    let _request = inner.counters.request(false);
    let got = async {
        let response = loc.store().get(key).await?;
        let version = ObjectVersion::with_etag(ETag::from_store(response.meta.e_tag.as_deref()), {
            response.meta.size
        });
        Ok((response.bytes().await?, version))
    };
    let (body, version) = got.await.map_err(|e| loc.error(key, e))?;
    if body.len() as u64 != version.size {
        return Err(Error::Corrupt {
            uri: loc.uri_of(key),
            reason: format!(
                "the store said {} bytes and sent {}; read it again",
                version.size,
                body.len()
            ),
        });
    }
    Ok((body, version))
}

/// What a dataset's manifest or listing says of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Promise {
    pub(crate) size: u64,
    pub(crate) etag: Option<ETag>,
    pub(crate) crc32c: Option<u32>,
}

impl Promise {
    fn of(file: &FileObject) -> Promise {
        Promise {
            size: file.size,
            etag: file.etag.clone(),
            crc32c: file.crc32c,
        }
    }
}

/// How an object differs from what the dataset says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    Size { expected: u64, got: u64 },
    ETag { expected: ETag, got: ETag },
    Checksum { expected: u32, got: u32 },
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Size { expected, got } => write!(f, "is {got} bytes, expected {expected}"),
            Change::ETag { expected, got } => write!(f, "has ETag {got}, expected {expected}"),
            Change::Checksum { expected, got } => {
                write!(f, "has CRC32C {got:08x}, expected {expected:08x}")
            }
        }
    }
}

/// The first way `bytes`, returned as `returned`, differ from `file`. The ETag and size tell a
/// changed object (every write gives it a new ETag); the CRC32C of the bytes is computed only
/// when there is no pair of ETags to compare and the dataset records one: hashing every sample
/// cost 8% of the files loader's throughput at 0 ms (docs/BENCHMARKS.md) for no change the ETag
/// would miss.
pub(crate) async fn compare(
    file: &Promise,
    returned: &ObjectVersion,
    bytes: &Bytes,
) -> Option<Change> {
    if returned.size != file.size {
        return Some(Change::Size {
            expected: file.size,
            got: returned.size,
        });
    }
    if let (Some(expected), Some(got)) = (&file.etag, &returned.etag) {
        return (expected != got).then(|| Change::ETag {
            expected: expected.clone(),
            got: got.clone(),
        });
    }
    let expected = file.crc32c?;
    let got = crc32c_of(bytes).await;
    (got != expected).then_some(Change::Checksum { expected, got })
}

/// CRC32C of `bytes`, on a blocking thread when they are large.
pub(crate) async fn crc32c_of(bytes: &Bytes) -> u32 {
    if bytes.len() <= INLINE_CRC_BYTES {
        return crc32c::crc32c(bytes);
    }
    let body = bytes.clone();
    match tokio::task::spawn_blocking(move || crc32c::crc32c(&body)).await {
        Ok(crc) => crc,
        // The blocking pool is shutting down: compute it here rather than guess.
        Err(_) => crc32c::crc32c(bytes),
    }
}

/// The error for a changed object, or `None` (counted, logged) when changed samples are skipped.
fn changed(inner: &Inner, file: &FileObject, change: &Change) -> Result<Option<Bytes>> {
    let uri = inner.location.uri_of(&file.key);
    if inner.config.skip_changed {
        add(&inner.counters.skipped_changed, 1);
        tracing::warn!(%uri, %change, "loader: sample skipped: the object changed since the dataset's manifest or listing");
        return Ok(None);
    }
    Err(Error::Corrupt {
        uri,
        reason: format!(
            "{change}: the object changed since the dataset's manifest or listing was read; \
             rebuild the manifest (`bucketload manifest`) or restore the object, or leave such \
             samples out with --skip-changed"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(etag: Option<&str>, crc32c: Option<u32>) -> Promise {
        Promise {
            size: 3,
            etag: etag.map(ETag::parse),
            crc32c,
        }
    }

    #[tokio::test]
    async fn every_promise_is_compared() {
        let body = Bytes::from_static(b"abc");
        let crc = crc32c::crc32c(b"abc");
        let same = ObjectVersion::new("\"e1\"", 3);
        assert_eq!(
            compare(&file(Some("e1"), Some(crc)), &same, &body).await,
            None
        );
        let size = compare(&file(None, None), &ObjectVersion::size_only(4), &body).await;
        assert!(matches!(size, Some(Change::Size { got: 4, .. })));
        let etag = compare(&file(Some("e0"), None), &same, &body).await;
        assert!(matches!(etag, Some(Change::ETag { .. })));
        // Without an ETag on one side, the bytes' CRC32C decides.
        let unknown = ObjectVersion::size_only(3);
        let crc_bad = compare(&file(Some("e1"), Some(crc ^ 1)), &unknown, &body).await;
        assert!(matches!(crc_bad, Some(Change::Checksum { .. })));
        let crc_bad = compare(&file(None, Some(crc ^ 1)), &same, &body).await;
        assert!(matches!(crc_bad, Some(Change::Checksum { .. })));
        assert_eq!(compare(&file(None, Some(crc)), &same, &body).await, None);
        // With ETags on both sides, equal ETags are the same version: no hashing.
        assert_eq!(
            compare(&file(Some("e1"), Some(crc ^ 1)), &same, &body).await,
            None
        );
    }
}
