//! Copies objects between any two stores (local folder, S3, memory, ...).
//!
//! Small objects (up to one part) take one GET and one PUT. Larger ones stream through
//! [`get_parallel`] (ranged GETs in flight, bytes in order) into a [`MultipartWriter`], so a
//! transfer holds a few parts in memory whatever the object size; at most [`BIG_TRANSFERS`] large
//! objects move at once. A failed transfer aborts its multipart upload (local files are written to
//! a temporary name and renamed), so no partial object is ever visible. Errors name the object.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path};
use bucketload_store::{
    DEFAULT_PARALLEL_GETS, MultipartOptions, MultipartWriter, ParallelGet, get_parallel,
};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::Semaphore;

use crate::base::{DataKey, Entry, Location, Progress, list};
use crate::error::{Error, Result};

/// Large objects copied at once; each keeps its own parts in flight.
const BIG_TRANSFERS: usize = 4;

/// Options of a copy. Defaults: 8 MiB parts, 64 requests in flight.
#[derive(Debug, Clone, Copy)]
pub struct CopyOptions {
    part_size: u64,
    concurrency: usize,
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            part_size: 8 << 20,
            concurrency: 64,
        }
    }
}

impl CopyOptions {
    /// Part size of ranged GETs and multipart uploads; objects up to this size are copied whole
    /// (default 8 MiB; at least 5 MiB is needed by S3 for multipart parts).
    pub fn with_part_size(mut self, bytes: u64) -> Self {
        self.part_size = bytes.max(1);
        self
    }

    /// Objects (and parts) in flight (default 64).
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Parts in flight per large object: a share of the requests, at most the store's default
    /// for one object (8), so a large transfer holds about 2 × 8 parts (reading and writing).
    fn part_concurrency(&self) -> usize {
        (self.concurrency / BIG_TRANSFERS).clamp(2, DEFAULT_PARALLEL_GETS.max(2))
    }
}

/// What a copy did.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct CopyReport {
    /// Objects copied.
    pub objects: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Objects left out because their key cannot name a file in the destination folder (a
    /// `.` or `..` segment), each logged as a warning naming it.
    pub skipped: u64,
}

/// Makes the local folder of the folder marker `folder` (a key ending in `/`, relative to
/// the root of `src`) below a local `dst`, so empty folders are copied too. Other stores need
/// no folder: it exists as soon as an object is below it.
async fn make_folder(src: &Location, dst: &Location, folder: &str) -> Result<()> {
    let Some(root) = dst.handle().and_then(|s| s.uri().local_dir()) else {
        return Ok(());
    };
    let segments: Vec<&str> = folder.split('/').filter(|s| !s.is_empty()).collect();
    if segments.iter().any(|s| *s == "." || *s == "..") {
        tracing::warn!(
            "{}: a folder marker whose key leaves its folder (`.` or `..`): skipped",
            src.uri_of_key(folder)
        );
        return Ok(());
    }
    let dir = segments.iter().fold(root, |dir, s| dir.join(s));
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(|source| Error::Io {
            path: dir.display().to_string(),
            action: "create the folder".to_owned(),
            source,
        })
}

/// Copies every object below the root of `src` to the same relative key below `dst`; the
/// folder markers of `src` become folders when `dst` is a local folder. Nothing below `src`
/// (a missing prefix, folder or bucket) is [`ErrorKind::NotFound`]: a copy of nothing is a
/// mistyped source, not a success.
///
/// [`ErrorKind::NotFound`]: crate::ErrorKind::NotFound
pub async fn copy_tree(
    src: &Location,
    dst: &Location,
    options: CopyOptions,
    progress: &dyn Progress,
) -> Result<CopyReport> {
    let started = Instant::now();
    let big = Arc::new(Semaphore::new(BIG_TRANSFERS));
    let skipped = AtomicU64::new(0);
    let skipped = &skipped;
    let result = list(src, None, true)
        .try_filter_map(|entry| async move {
            Ok(match entry {
                Entry::Object(meta) => Some((DataKey::Path(meta.location), meta.size)),
                Entry::Dir(folder) => {
                    make_folder(src, dst, &folder).await?;
                    None
                }
                // Read and written as the store holds it, as boto3 copies it.
                Entry::Unaddressable(listed) => match copyable(src, dst, &listed.key) {
                    true => Some((DataKey::new(&listed.key), listed.size)),
                    false => {
                        skipped.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                },
            })
        })
        .map_ok(|(key, size)| {
            let big = Arc::clone(&big);
            async move {
                let size =
                    copy_one(src, &key, dst, &key, Some(size), options, &big, progress).await?;
                progress.advance(1, 0);
                Ok(size)
            }
        })
        .try_buffer_unordered(options.concurrency)
        .try_fold(CopyReport::default(), |mut report, size| async move {
            report.objects += 1;
            report.bytes += size;
            Ok(report)
        })
        .await;
    progress.finish();
    let mut report = result?;
    if report.objects == 0 {
        let uri = src.to_string();
        return Err(bucketload_store::Error::NotFound {
            what: if uri.starts_with("file://") {
                "folder"
            } else {
                "prefix"
            },
            uri,
            hint: "there is nothing below it to copy; check the name with `bucketload ls` on its \
                   parent"
                .into(),
        }
        .into());
    }
    report.seconds = started.elapsed().as_secs_f64();
    report.skipped = skipped.load(Ordering::Relaxed);
    Ok(report)
}

/// Copies one object; returns its size.
pub async fn copy_object(
    src: &Location,
    src_key: &Path,
    dst: &Location,
    dst_key: &Path,
    options: CopyOptions,
    progress: &dyn Progress,
) -> Result<CopyReport> {
    let started = Instant::now();
    let big = Semaphore::new(1);
    let (src_key, dst_key) = (
        DataKey::Path(src_key.clone()),
        DataKey::Path(dst_key.clone()),
    );
    let bytes = match copy_one(src, &src_key, dst, &dst_key, None, options, &big, progress).await {
        Err(e) => Err(src.explain_not_found(e).await),
        ok => ok,
    };
    progress.advance(u64::from(bytes.is_ok()), 0);
    progress.finish();
    Ok(CopyReport {
        objects: 1,
        bytes: bytes?,
        seconds: started.elapsed().as_secs_f64(),
        skipped: 0,
    })
}

/// Whether the key `key` of `src`, which object_store cannot spell, can be copied to `dst`:
/// anywhere on S3; to a local folder unless it has a `.` or `..` segment (it would leave its
/// folder), which is logged naming it.
fn copyable(src: &Location, dst: &Location, key: &str) -> bool {
    let local = dst.handle().is_some_and(|s| s.uri().local_dir().is_some());
    match bucketload_store::unaddressable(key) {
        Some(why) if local => {
            tracing::warn!(
                "{}: the key {why}, so it is not copied into a folder; copy it to a key \
                 without it (e.g. with `aws s3 cp`)",
                src.uri_of_key(key)
            );
            false
        }
        _ => true,
    }
}

#[allow(clippy::too_many_arguments)]
async fn copy_one(
    src: &Location,
    src_key: &DataKey,
    dst: &Location,
    dst_key: &DataKey,
    size: Option<u64>,
    options: CopyOptions,
    big: &Semaphore,
    progress: &dyn Progress,
) -> Result<u64> {
    let (src_store, src_path) = src.address(src_key)?;
    let size = match size {
        Some(s) => s,
        None => {
            src_store
                .head(&src_path)
                .await
                .map_err(|e| src.error_of_key(src_key, e))?
                .size
        }
    };
    tracing::debug!(src = %src.uri_of_data_key(src_key), dst = %dst.uri_of_data_key(dst_key), size, "copy");
    if size <= options.part_size {
        let data = src_store
            .get(&src_path)
            .await
            .map_err(|e| src.error_of_key(src_key, e))?;
        let data = data
            .bytes()
            .await
            .map_err(|e| src.error_of_key(src_key, e))?;
        let len = data.len() as u64;
        let (dst_store, dst_path) = dst.address(dst_key)?;
        dst_store
            .put(&dst_path, PutPayload::from_bytes(data))
            .await
            .map_err(|e| dst.error_of_key(dst_key, e))?;
        progress.advance(0, len);
        return Ok(len);
    }
    let _permit = big.acquire().await.map_err(|e| Error::Task {
        reason: e.to_string(),
    })?;
    copy_large(src, src_key, dst, dst_key, size, options, progress).await
}

async fn copy_large(
    src: &Location,
    src_key: &DataKey,
    dst: &Location,
    dst_key: &DataKey,
    size: u64,
    options: CopyOptions,
    progress: &dyn Progress,
) -> Result<u64> {
    let get = ParallelGet {
        part_size: options.part_size,
        concurrency: options.part_concurrency(),
        size: Some(size),
    };
    let (src_store, src_path) = src.address(src_key)?;
    let mut parts = get_parallel(src_store, src_path, get);
    let put = MultipartOptions {
        part_size: options.part_size,
        concurrency: options.part_concurrency(),
    };
    let (dst_store, dst_path) = dst.address(dst_key)?;
    let mut writer =
        MultipartWriter::new(dst_store, dst_path, put).with_uri(dst.uri_of_data_key(dst_key));
    // Listing the key's uploads goes through the location's paths: not for a raw key.
    if let (Some(store), DataKey::Path(_)) = (dst.handle(), dst_key) {
        writer = writer.with_store(store);
    }
    let mut copied = 0u64;
    let failed = |source| Error::Copy {
        src: src.uri_of_data_key(src_key),
        dst: dst.uri_of_data_key(dst_key),
        source,
    };
    while let Some(chunk) = parts.next().await {
        let written = match chunk {
            Ok(chunk) => {
                copied += chunk.len() as u64;
                progress.advance(0, chunk.len() as u64);
                writer.write(chunk).await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            abort(writer).await;
            return Err(failed(e));
        }
    }
    if copied != size {
        abort(writer).await;
        return Err(Error::Corrupt {
            uri: src.uri_of_data_key(src_key),
            reason: format!(
                "read {copied} bytes of {size}; the object changed during the copy, copy it again"
            ),
        });
    }
    writer.finish().await.map_err(failed)?;
    Ok(copied)
}

/// Aborts an upload after a failure; the failure is what the caller reports.
async fn abort(writer: MultipartWriter) {
    if let Err(e) = writer.abort().await {
        tracing::warn!(error = %e, "aborting a failed multipart upload failed; the store's lifecycle rules must clean it");
    }
}
