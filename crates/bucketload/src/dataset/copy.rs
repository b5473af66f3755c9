//! Copies objects between any two stores (local folder, S3, memory, ...).
//!
//! Small objects (up to one part) take one GET and one PUT. Larger ones stream through
//! [`get_parallel`] (ranged GETs in flight, bytes in order) into a [`MultipartWriter`], so a
//! transfer holds a few parts in memory whatever the object size; at most [`BIG_TRANSFERS`] large
//! objects move at once. A failed transfer aborts its multipart upload (local files are written to
//! a temporary name and renamed), so no partial object is ever visible. Errors name the object.

use std::collections::HashSet;
use std::sync::Arc;
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
#[derive(Debug, Clone, Default, serde::Serialize)]
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
    /// Objects that cannot be copied to a local folder (a file and a folder of one name), in
    /// key order; everything else was copied.
    pub not_copied: Vec<NotCopied>,
}

/// An object a copy left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NotCopied {
    /// The object's URI.
    pub uri: String,
    /// Why it cannot be copied, and what to do.
    pub reason: String,
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

/// Objects listed and waiting for a copy slot: the listing runs this far ahead of the copies.
const QUEUE: usize = 1024;

/// Copies every object below the root of `src` to the same relative key below `dst`; the
/// folder markers of `src` become folders when `dst` is a local folder. Nothing below `src`
/// (a missing prefix, folder or bucket) is [`ErrorKind::NotFound`]: a copy of nothing is a
/// mistyped source, not a success.
///
/// The listing streams into the copies through a bounded queue, so memory does not grow with
/// the number of objects; except into a local folder from a store that does not list in key
/// order (another local folder), where every key is listed before the first copy to find the
/// objects a folder of the same name shadows ([`shadowed_files`]).
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
    let local = dst.handle().and_then(|s| s.uri().local_dir());
    let (tx, rx) = tokio::sync::mpsc::channel::<(DataKey, u64)>(QUEUE);
    let listed = list_to_copy(src, dst, local.is_some(), tx);
    let queue = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (Ok::<_, Error>(item), rx))
    });
    let copies = queue
        .map_ok(|(key, size)| {
            let big = Arc::clone(&big);
            let local = local.as_deref();
            async move {
                if let Some(reason) = local_conflict(local, key.as_str()).await {
                    let uri = src.uri_of_data_key(&key);
                    return Ok(Err(NotCopied { uri, reason }));
                }
                let size =
                    copy_one(src, &key, dst, &key, Some(size), options, &big, progress).await?;
                progress.advance(1, 0);
                Ok(Ok(size))
            }
        })
        .try_buffer_unordered(options.concurrency)
        .try_fold(CopyReport::default(), |mut report, copied| async move {
            match copied {
                Ok(size) => {
                    report.objects += 1;
                    report.bytes += size;
                }
                Err(not) => report.not_copied.push(not),
            }
            Ok(report)
        });
    let result = futures::future::try_join(listed, copies).await;
    progress.finish();
    let ((shadowed, skipped), mut report) = result?;
    report.skipped = skipped;
    report.not_copied.extend(shadowed);
    report.not_copied.sort_by(|a, b| a.uri.cmp(&b.uri));
    if report.objects == 0 && report.not_copied.is_empty() {
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
    Ok(report)
}

/// Lists `src` and sends every object to copy into `tx`, making the folders of its folder
/// markers in a local `dst` on the way; returns the objects a folder shadows (into a `local`
/// destination) and the count of keys left out as uncopyable.
async fn list_to_copy(
    src: &Location,
    dst: &Location,
    local: bool,
    tx: tokio::sync::mpsc::Sender<(DataKey, u64)>,
) -> Result<(Vec<NotCopied>, u64)> {
    // Into a local folder, an object is copied once it is known that no folder shadows it:
    // from the key order when the source lists in key order, else after the whole listing.
    let whole = local && !crate::base::lists_in_key_order(src);
    let mut shadow = Shadow::default();
    let (mut objects, mut markers, mut skipped) = (Vec::new(), Vec::new(), 0);
    let mut listing = list(src, None, true);
    while let Some(entry) = listing.try_next().await? {
        let (key, size) = match entry {
            Entry::Object(meta) => (DataKey::Path(meta.location), meta.size),
            Entry::Dir(folder) => {
                make_folder(src, dst, &folder).await?;
                let ready = match (whole, local) {
                    (true, _) => {
                        markers.push(folder);
                        Vec::new()
                    }
                    (false, true) => shadow.marker(src, &folder),
                    (false, false) => Vec::new(),
                };
                if !send(&tx, ready).await {
                    break;
                }
                continue;
            }
            // Read and written as the store holds it, as boto3 copies it.
            Entry::Unaddressable(listed) => match copyable(src, dst, &listed.key) {
                true => (DataKey::new(&listed.key), listed.size),
                false => {
                    skipped += 1;
                    continue;
                }
            },
        };
        let ready = match (whole, local) {
            (true, _) => {
                objects.push((key, size));
                continue;
            }
            (false, true) => shadow.object(src, key, size),
            (false, false) => vec![(key, size)],
        };
        if !send(&tx, ready).await {
            break;
        }
    }
    let (ready, shadowed) = match whole {
        true => shadowed_files(src, objects, &markers),
        false => (shadow.finish(), std::mem::take(&mut shadow.shadowed)),
    };
    send(&tx, ready).await;
    Ok((shadowed, skipped))
}

/// Queues objects to copy; false once the copies stopped (on an error, which they report).
async fn send(tx: &tokio::sync::mpsc::Sender<(DataKey, u64)>, items: Vec<(DataKey, u64)>) -> bool {
    for item in items {
        if tx.send(item).await.is_err() {
            return false;
        }
    }
    true
}

/// The objects of a listing in key order that may still turn out to be shadowed by a folder
/// of the same name: each one a prefix of the next (`d/a`, `d/a!`), since keys that extend a
/// key with a byte below '/' sort between it and its folder (`d/a` < `d/a!` < `d/a/x`).
#[derive(Default)]
struct Shadow {
    pending: Vec<(DataKey, u64)>,
    shadowed: Vec<NotCopied>,
}

impl Shadow {
    /// The object `key` was listed: returns the pending objects it settles as copyable.
    fn object(&mut self, src: &Location, key: DataKey, size: u64) -> Vec<(DataKey, u64)> {
        let ready = self.settle(src, key.as_str());
        self.pending.push((key, size));
        ready
    }

    /// The folder marker `folder` was listed: it shadows the object of its name; returns the
    /// pending objects it settles as copyable.
    fn marker(&mut self, src: &Location, folder: &str) -> Vec<(DataKey, u64)> {
        match folder.trim_end_matches('/').is_empty() {
            true => Vec::new(),
            false => self.settle(src, folder),
        }
    }

    /// Settles the pending objects that the key `next`, listed after them, decides.
    fn settle(&mut self, src: &Location, next: &str) -> Vec<(DataKey, u64)> {
        let mut ready = Vec::new();
        while let Some((top, _)) = self.pending.last() {
            let top = top.as_str();
            match next.strip_prefix(top).and_then(|rest| rest.bytes().next()) {
                Some(b'/') => {
                    let (key, _) = self.pending.pop().expect("the chain is not empty");
                    self.shadowed.push(shadowed(src, &key));
                }
                // A key between `top` and `top/`: `top` may still be shadowed.
                Some(byte) if byte < b'/' => break,
                _ => ready.push(self.pending.pop().expect("the chain is not empty")),
            }
        }
        ready.reverse();
        ready
    }

    /// The pending objects once the listing ended: none is shadowed.
    fn finish(&mut self) -> Vec<(DataKey, u64)> {
        std::mem::take(&mut self.pending)
    }
}

/// Why the object `data_key` is not copied to a local folder: a folder takes its name.
fn shadowed(src: &Location, data_key: &DataKey) -> NotCopied {
    let key = data_key.as_str();
    NotCopied {
        uri: src.uri_of_data_key(data_key),
        reason: format!(
            "`{key}/` holds objects too, and a local folder and file cannot share the name \
             `{key}`: the folder is copied; copy this object on its own to another name"
        ),
    }
}

/// Splits the objects of a copy to a local folder into those that can become files and those
/// that cannot because a folder of the same name is needed (an object `d/a` beside objects
/// below `d/a/`, or a folder marker `d/a/`). The folder always wins, whatever the listing order:
/// it holds the more objects, and the outcome must not depend on which write comes first.
fn shadowed_files(
    src: &Location,
    objects: Vec<(DataKey, u64)>,
    markers: &[String],
) -> (Vec<(DataKey, u64)>, Vec<NotCopied>) {
    let mut folders: HashSet<&str> = markers
        .iter()
        .map(|m| m.trim_end_matches('/'))
        .filter(|m| !m.is_empty())
        .collect();
    for (key, _) in &objects {
        let key = key.as_str();
        folders.extend(key.match_indices('/').map(|(i, _)| &key[..i]));
    }
    let shadowed_keys: HashSet<String> = objects
        .iter()
        .map(|(key, _)| key.as_str())
        .filter(|key| folders.contains(key))
        .map(str::to_owned)
        .collect();
    let (blocked, copyable): (Vec<_>, Vec<_>) = objects
        .into_iter()
        .partition(|(key, _)| shadowed_keys.contains(key.as_str()));
    let not_copied = blocked.iter().map(|(key, _)| shadowed(src, key));
    (copyable, not_copied.collect())
}

/// Why `key` cannot be written below the local folder `root` as it is now: a local file where
/// one of its folders must be, or a local folder where the file must be. `None` for other
/// destinations, and when nothing is in the way.
async fn local_conflict(root: Option<&std::path::Path>, key: &str) -> Option<String> {
    let root = root?;
    let mut path = root.to_path_buf();
    let segments: Vec<&str> = key.split('/').collect();
    for (i, segment) in segments.iter().enumerate() {
        path.push(segment);
        let Ok(meta) = tokio::fs::metadata(&path).await else {
            return None; // nothing there yet: the rest of the path is created
        };
        let last = i + 1 == segments.len();
        if !last && !meta.is_dir() {
            return Some(format!(
                "the local file {} is where its folder must be; move it away and copy again",
                path.display()
            ));
        }
        if last && meta.is_dir() {
            return Some(format!(
                "the local folder {} is where the file must be; move it away and copy again",
                path.display()
            ));
        }
    }
    None
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
        not_copied: Vec::new(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use bucketload_store::object_store::memory::InMemory;

    /// Every key made of up to five characters among the few that decide the order around a
    /// folder (`!` < `-` < `/` < `a`), folder markers among them, listed in key order.
    fn listings() -> Vec<Vec<String>> {
        let alphabet = ['a', '!', '-', '/'];
        let mut all = vec![String::new()];
        let mut keys = Vec::new();
        for _ in 0..4 {
            all = all
                .iter()
                .flat_map(|k| alphabet.iter().map(move |c| format!("{k}{c}")))
                .collect();
            keys.extend(all.iter().filter(|k| k.starts_with('a')).cloned());
        }
        keys.sort();
        // Listings of every 7th, 5th, 3rd and 2nd key from each start, and all of them.
        let mut listings = vec![keys.clone()];
        for step in [2, 3, 5, 7] {
            for start in 0..step {
                listings.push(keys.iter().skip(start).step_by(step).cloned().collect());
            }
        }
        listings
    }

    #[test]
    fn shadowing_in_key_order_finds_what_the_whole_listing_finds() {
        let src = Location::new(Arc::new(InMemory::new()), "mem://", "memory");
        for listing in listings() {
            let (objects, markers): (Vec<&String>, Vec<&String>) =
                listing.iter().partition(|k| !k.ends_with('/'));
            let objects: Vec<(DataKey, u64)> =
                objects.iter().map(|k| (DataKey::new(k), 1)).collect();
            let markers: Vec<String> = markers.into_iter().cloned().collect();
            let (want_ready, want_shadowed) = shadowed_files(&src, objects, &markers);
            let mut shadow = Shadow::default();
            let mut ready = Vec::new();
            for key in &listing {
                match key.ends_with('/') {
                    true => ready.extend(shadow.marker(&src, key)),
                    false => ready.extend(shadow.object(&src, DataKey::new(key), 1)),
                }
            }
            ready.extend(shadow.finish());
            let keys = |v: &[(DataKey, u64)]| -> Vec<String> {
                let mut keys: Vec<String> = v.iter().map(|(k, _)| k.as_str().into()).collect();
                keys.sort();
                keys
            };
            assert_eq!(keys(&ready), keys(&want_ready), "{listing:?}");
            let uris = |v: &[NotCopied]| -> Vec<String> {
                let mut uris: Vec<String> = v.iter().map(|n| n.uri.clone()).collect();
                uris.sort();
                uris
            };
            assert_eq!(uris(&shadow.shadowed), uris(&want_shadowed), "{listing:?}");
        }
    }
}
