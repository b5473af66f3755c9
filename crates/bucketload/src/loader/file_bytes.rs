//! The bytes of one file, checked against what the dataset promises.
//!
//! A files dataset's manifest records each object's size, ETag and CRC32C (a listing: size and
//! ETag). Every GET's response is compared with them: a different size or ETag means the
//! object changed since; where either side has no ETag, a different CRC32C of the bytes does. Such a
//! sample fails the stream with an error naming the object, or is left out and counted
//! ([`LoaderBuilder::with_skip_changed`](super::LoaderBuilder::with_skip_changed)).
//!
//! The catalog keeps a 64-bit fingerprint of each ETag, not the ETag (`files_table.rs`): a
//! response's ETag is compared by its fingerprint. The disk cache files bytes under the version
//! the store *returned* (the response's ETag and size), never under the one expected, and is
//! asked for the expected version (the ETag's fingerprint, with the manifest's CRC32C, which the
//! entry's body must have): an entry is served only as the version
//! it was fetched as, so changed bytes are never served for the version the manifest names
//! (docs/CACHE.md).

use bucketload_cache::{CacheKey, ObjectVersion};
use bucketload_store::ETag;
use bytes::Bytes;

use super::Inner;
use super::catalog::FileObject;
use super::stats::add;
use crate::io::checked::{Change, Promise, compare};
use crate::{Error, Result};

/// The bytes of `file`: from the cache when it holds the expected version, else one GET. `None`
/// when the object changed and the loader skips changed samples.
pub(crate) async fn file_bytes(inner: &Inner, file: &FileObject) -> Result<Option<Bytes>> {
    let key = CacheKey::new(inner.store_uri.clone(), file.key.as_str());
    let expected = ObjectVersion::with_etag_fingerprint(file.etag_fingerprint, file.size)
        .with_crc32c(file.crc32c);
    if let Some(cache) = &inner.cache
        && let Some(bytes) = cache.get(&key, &expected).await
    {
        return Ok(Some(bytes));
    }
    let (bytes, returned) = get_file(inner, file).await?;
    let change = compare(&promise_of(file), &returned, &bytes).await;
    // Bytes whose checksum contradicts the manifest for the very version they came as are not
    // trusted as that version: they are not cached.
    if let Some(cache) = &inner.cache
        && !matches!(change, Some(Change::Checksum { .. }))
    {
        cache.insert_later(key, returned, bytes.clone()).await;
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
    let response = loc.get_key(key).await?;
    let version = ObjectVersion::with_etag(ETag::from_store(response.meta.e_tag.as_deref()), {
        response.meta.size
    });
    let body = match response.bytes().await {
        Ok(body) => body,
        Err(e) => return Err(loc.error_of_key(key, e)),
    };
    if body.len() as u64 != version.size {
        return Err(Error::Corrupt {
            uri: loc.uri_of_data_key(key),
            reason: format!(
                "the store said {} bytes and sent {}; read it again",
                version.size,
                body.len()
            ),
        });
    }
    Ok((body, version))
}

/// What the dataset says of `file`.
fn promise_of(file: &FileObject) -> Promise {
    Promise {
        size: file.size,
        etag: None,
        etag_fingerprint: file.etag_fingerprint,
        crc32c: file.crc32c,
    }
}

/// The error for a changed object, or `None` (counted, logged) when changed samples are skipped.
fn changed(inner: &Inner, file: &FileObject, change: &Change) -> Result<Option<Bytes>> {
    let uri = inner.location.uri_of_data_key(&file.key);
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
