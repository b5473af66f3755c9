//! Integrity check of a dataset: every object is read once, many in flight, and compared with
//! what the dataset's metadata records.
//!
//! A `files` manifest (`_bucketload/manifest.bin`, or `_bucketload/manifest.json`) records each object's size, ETag and CRC32C;
//! otherwise (no manifest, or a `shards` manifest) every `*.tar` must have a `.idx` and is streamed
//! once through the index scanner, its size, CRC32C, MD5 and every member's (offset, size,
//! CRC32C) compared with the index. Every problem is collected; nothing stops early.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bucketload_format::{
    DatasetKind, FileEntry, MANIFEST_BIN_PATH, MANIFEST_PATH, Manifest, ShardEntry, ShardIndex,
};
use bucketload_store::object_store::ObjectStoreExt;
use bucketload_store::{ETag, Store, key_path};
use futures::{StreamExt, TryStreamExt};

use super::build::SourceObject;
use super::build::table::{ObjectTable, TableBuilder};
use super::{IndexOptions, SHARD_EXT, ShardObject, find_shards, index_key, index_shard};
use crate::base::{DataKey, Location, Progress};
use crate::error::{Error, Result};

/// Prefix of bucketload's own objects at a dataset root (never part of the dataset).
const RESERVED: &str = "_bucketload/";
/// Chunks at least this large are hashed on the blocking pool.
const BLOCKING_HASH: usize = 256 << 10;

/// One problem found by [`verify`], naming the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Full URI of the object.
    pub uri: String,
    /// What is wrong (names the member and its offset when relevant).
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.uri, self.message)
    }
}

/// What [`verify`] checked and found.
#[derive(Debug, Default)]
pub struct VerifyReport {
    /// The dataset was checked against a `files` manifest (else against shard indexes).
    pub files_manifest: bool,
    /// Objects read.
    pub objects: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Wall time in seconds.
    pub seconds: f64,
    /// Failures, sorted by object.
    pub problems: Vec<Problem>,
    /// Objects present but not in the `files` manifest (not failures).
    pub warnings: Vec<Problem>,
}

/// Verifies the dataset below `store`'s prefix: objects of a `files` manifest with `concurrency`
/// GETs in flight, else every `*.tar` against its `.idx` as `options` says.
///
/// Fails only when the dataset cannot be listed or the manifest cannot be read or parsed;
/// everything else is a [`Problem`] in the report.
pub async fn verify(
    store: &Store,
    concurrency: usize,
    options: &IndexOptions,
    progress: &dyn Progress,
) -> Result<VerifyReport> {
    let started = Instant::now();
    let mut report = match read_manifest(store).await? {
        Some(Held::Files(files)) => verify_files(store, files, concurrency, progress).await?,
        Some(Held::Shards(manifest)) => {
            verify_shards(store, Some(manifest), options, progress).await?
        }
        None => verify_shards(store, None, options, progress).await?,
    };
    progress.finish();
    report.problems.sort_by(|a, b| a.uri.cmp(&b.uri));
    report.warnings.sort_by(|a, b| a.uri.cmp(&b.uri));
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// A dataset manifest as [`verify`] holds it.
enum Held {
    /// The files of a `files` manifest, sorted by key in a compact table (a few tens of bytes a
    /// file instead of a [`FileEntry`]'s ~150).
    Files(ObjectTable),
    /// A `shards` manifest (a few entries a shard).
    Shards(Manifest),
}

/// The dataset's manifest, streamed into what [`verify`] keeps of it; `None` without one.
async fn read_manifest(store: &Store) -> Result<Option<Held>> {
    #[derive(Default)]
    struct Kept {
        files: TableBuilder,
        shards: Vec<ShardEntry>,
    }
    let kept = Arc::new(Mutex::new(Kept {
        files: TableBuilder::by_key(),
        shards: Vec::new(),
    }));
    let into = Arc::clone(&kept);
    let sink = move |entry: bucketload_format::Entry<'_>| {
        let mut kept = into.lock().unwrap_or_else(PoisonError::into_inner);
        match entry {
            bucketload_format::Entry::File(f) => kept.files.push(SourceObject {
                key: f.key.clone(),
                size: f.size,
                etag: ETag::from_store(f.etag.as_deref()),
                crc32c: f
                    .crc32c
                    .as_deref()
                    .and_then(|c| u32::from_str_radix(c, 16).ok()),
            }),
            bucketload_format::Entry::Shard(s) => kept.shards.push(s.clone()),
        }
        Ok(())
    };
    let Some(read) = Location::from_store(store).read_manifest(sink).await? else {
        return Ok(None);
    };
    let header = read.header;
    drop(read.sink);
    let kept = std::mem::take(&mut *kept.lock().unwrap_or_else(PoisonError::into_inner));
    Ok(Some(match header.kind {
        DatasetKind::Files => Held::Files(kept.files.finish()),
        _ => {
            let mut manifest = header.into_manifest();
            manifest.shards = kept.shards;
            Held::Shards(manifest)
        }
    }))
}

/// The manifest entry of a file kept in a table.
fn file_entry(object: SourceObject) -> FileEntry {
    FileEntry {
        etag: object.etag.map(|e| e.to_string()),
        crc32c: object.crc32c.map(|c| format!("{c:08x}")),
        key: object.key,
        size: object.size,
    }
}

async fn verify_files(
    store: &Store,
    files: ObjectTable,
    concurrency: usize,
    progress: &dyn Progress,
) -> Result<VerifyReport> {
    let mut report = VerifyReport {
        files_manifest: true,
        ..VerifyReport::default()
    };
    // Every key as the store holds it: a manifest may name `a//b.jpg`. The listing streams
    // past the manifest's files, sorted by key to be found: one state byte per file.
    let location = Location::from_store(store);
    let mut state = vec![Listing::Missing; files.len()];
    let mut listing = crate::base::list_each(&location);
    while let Some(object) = listing.try_next().await? {
        let key = object.key.as_str();
        if key.starts_with(RESERVED) {
            continue;
        }
        let Some(at) = files.find(key) else {
            let uri = location.uri_of_data_key(&object.key);
            report.warnings.push(problem(uri, "not in the manifest"));
            continue;
        };
        let file = files.get(at..at + 1).remove(0);
        state[at] = match object.size == file.size {
            true => Listing::Found,
            false => {
                let uri = location.uri_of_data_key(&object.key);
                let message = format!(
                    "wrong size: {} bytes, the manifest says {}",
                    object.size, file.size
                );
                report.problems.push(problem(uri, message));
                Listing::WrongSize
            }
        };
    }
    let (mut count, mut bytes) = (0, 0);
    for (file, state) in files.iter().zip(&state) {
        match *state {
            Listing::Missing => {
                let uri = location.uri_of_data_key(&DataKey::new(&file.key));
                report.problems.push(problem(uri, "missing"));
            }
            Listing::Found => (count, bytes) = (count + 1, bytes + file.size),
            Listing::WrongSize => {}
        }
    }
    progress.set_total(count, Some(bytes));
    let todo = files
        .iter()
        .zip(&state)
        .filter(|(_, s)| **s == Listing::Found);
    let mut results = futures::stream::iter(todo)
        .map(|(file, _)| check_file(&location, file_entry(file), progress))
        .buffer_unordered(concurrency.max(1));
    while let Some(checked) = results.next().await {
        report.objects += 1;
        report.bytes += checked.bytes;
        report.problems.extend(checked.problems);
        report.warnings.extend(checked.warnings);
    }
    Ok(report)
}

/// What the listing said of a file of the manifest.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Listing {
    Missing,
    Found,
    WrongSize,
}

/// What checking one object found.
#[derive(Default)]
struct Checked {
    /// Bytes read.
    bytes: u64,
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
}

/// GETs one object and compares its size, ETag and CRC32C with `file`.
///
/// An ETag that differs while the size and the recorded CRC32C match is a warning, not a
/// problem, when either ETag is a multipart one (`…-N`): the same bytes uploaded with another
/// part size (or as one part) get another ETag.
async fn check_file(location: &Location, file: FileEntry, progress: &dyn Progress) -> Checked {
    let key = DataKey::new(&file.key);
    let uri = location.uri_of_data_key(&key);
    let read = read_crc(location, &key).await;
    progress.advance(1, read.as_ref().map_or(0, |r| r.size));
    let read = match read {
        Ok(read) => read,
        Err(Error::Store(bucketload_store::Error::NotFound { .. })) => {
            return Checked::problem(uri, "missing".to_owned());
        }
        Err(e) => return Checked::problem(uri, format!("cannot be read: {e}")),
    };
    let mut checked = Checked {
        bytes: read.size,
        ..Checked::default()
    };
    let size_ok = read.size == file.size;
    if !size_ok {
        let message = format!(
            "wrong size: {} bytes, the manifest says {}",
            read.size, file.size
        );
        checked.problems.push(problem(uri.clone(), message));
    }
    let crc = format!("{:08x}", read.crc);
    let crc_ok = file
        .crc32c
        .as_ref()
        .map(|want| want.eq_ignore_ascii_case(&crc));
    if let (Some(want), Some(got)) = (ETag::from_store(file.etag.as_deref()), &read.etag)
        && &want != got
    {
        let multipart = is_multipart(&want) || is_multipart(got);
        if size_ok && crc_ok == Some(true) && multipart {
            let message = format!(
                "ETag {got} differs from the manifest's {want}, but the size and CRC32C match: \
                 the same bytes uploaded with another part size"
            );
            checked.warnings.push(problem(uri.clone(), message));
        } else {
            let message = format!("wrong ETag: {got}, the manifest says {want}");
            checked.problems.push(problem(uri.clone(), message));
        }
    }
    if let (Some(false), Some(want)) = (crc_ok, &file.crc32c) {
        let message = format!("checksum mismatch: CRC32C {crc}, the manifest says {want}");
        checked.problems.push(problem(uri, message));
    }
    checked
}

impl Checked {
    fn problem(uri: String, message: String) -> Checked {
        Checked {
            problems: vec![problem(uri, message)],
            ..Checked::default()
        }
    }
}

/// A multipart upload's ETag (`<md5 of the part MD5s>-<parts>`), which depends on the part size.
fn is_multipart(etag: &ETag) -> bool {
    etag.as_str().contains('-')
}

/// What reading one object found.
struct Read {
    size: u64,
    etag: Option<ETag>,
    crc: u32,
}

/// Streams `key` through CRC32C (large chunks hashed on the blocking pool).
async fn read_crc(location: &Location, key: &DataKey) -> Result<Read> {
    let get = location.get_key(key).await?;
    let etag = ETag::from_store(get.meta.e_tag.as_deref());
    let mut body = get.into_stream();
    let (mut crc, mut size) = (0u32, 0u64);
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| location.error_of_key(key, e))?;
        size += chunk.len() as u64;
        crc = if chunk.len() >= BLOCKING_HASH {
            tokio::task::spawn_blocking(move || crc32c::crc32c_append(crc, &chunk))
                .await
                .map_err(|e| Error::Task {
                    reason: e.to_string(),
                })?
        } else {
            crc32c::crc32c_append(crc, &chunk)
        };
    }
    Ok(Read { size, etag, crc })
}

/// A problem naming the run record of a `bucketload shard` run that never finished (a run
/// record without a manifest), with the shards it plans and the `found` ones.
async fn unfinished(store: &Store, found: u64) -> Result<Option<Problem>> {
    let location = Location::from_store(store);
    let Some(planned) = crate::shards::planned(&location).await? else {
        return Ok(None);
    };
    let uri = location.uri_of(&bucketload_store::object_store::path::Path::from(
        crate::shards::RUN_PATH,
    ));
    let message = format!(
        "the `bucketload shard` run it records never finished: it plans {} shards of {} samples, \
         {found} shards are here and there is no manifest ({MANIFEST_BIN_PATH} or {MANIFEST_PATH}; {} shards missing); run it \
         again to finish it (after `--part` runs, each part, then `bucketload merge`)",
        planned.shards,
        planned.samples,
        planned.shards.saturating_sub(found)
    );
    Ok(Some(problem(uri, message)))
}

async fn verify_shards(
    store: &Store,
    manifest: Option<Manifest>,
    options: &IndexOptions,
    progress: &dyn Progress,
) -> Result<VerifyReport> {
    let mut report = VerifyReport::default();
    let shards = find_shards(store, None).await?;
    if shards.is_empty() && manifest.is_none() {
        let message = format!(
            "no manifest ({MANIFEST_BIN_PATH} or {MANIFEST_PATH}) and no *{SHARD_EXT} objects \
             below {}; nothing to verify",
            store.uri()
        );
        return Err(Error::invalid_input(message));
    }
    if manifest.is_none() {
        report
            .problems
            .extend(unfinished(store, shards.len() as u64).await?);
    }
    let names: HashSet<&str> = shards.iter().map(|s| s.key.as_ref()).collect();
    let entries: HashMap<&str, &ShardEntry> = manifest
        .iter()
        .flat_map(|m| &m.shards)
        .map(|e| (e.name.as_str(), e))
        .collect();
    for name in entries.keys().filter(|name| !names.contains(*name)) {
        let uri = store.object_uri(&key_path(name));
        report.problems.push(problem(uri, "missing"));
    }
    let (todo, unindexed): (Vec<_>, Vec<_>) = shards.into_iter().partition(|s| s.has_index);
    for shard in unindexed {
        let uri = store.object_uri(&shard.key);
        report
            .problems
            .push(problem(uri, "no index; run `bucketload index`"));
    }
    progress.set_total(todo.len() as u64, Some(todo.iter().map(|s| s.size).sum()));
    let on_bytes: Arc<dyn Fn(u64) + Send + Sync + '_> = Arc::new(|n| progress.advance(0, n));
    let mut results = futures::stream::iter(todo)
        .map(|shard| {
            let on_bytes = on_bytes.clone();
            let entry = entries.get(shard.key.as_ref()).copied();
            async move { check_shard(store, &shard, entry, options, &*on_bytes).await }
        })
        .buffer_unordered(options.shards_in_flight);
    while let Some((bytes, problems)) = results.next().await {
        report.objects += 1;
        report.bytes += bytes;
        report.problems.extend(problems);
        progress.advance(1, 0);
    }
    Ok(report)
}

/// Reads the index of `shard`, streams the shard once and compares the two (and the shard with
/// its `entry` in a `shards` manifest).
async fn check_shard(
    store: &Store,
    shard: &ShardObject,
    entry: Option<&ShardEntry>,
    options: &IndexOptions,
    on_bytes: &(dyn Fn(u64) + Send + Sync),
) -> (u64, Vec<Problem>) {
    let uri = store.object_uri(&shard.key);
    let idx = index_key(&shard.key);
    let idx_uri = store.object_uri(&idx);
    let recorded = async { store.object_store().get(&idx).await?.bytes().await }.await;
    let recorded = match recorded {
        Ok(bytes) => ShardIndex::parse(&idx_uri, &bytes),
        Err(e) => {
            let error = Location::from_store(store).error(&idx, e);
            return (
                0,
                vec![problem(idx_uri, format!("cannot be read: {error}"))],
            );
        }
    };
    let recorded = match recorded {
        Ok(index) => index,
        Err(e) => return (0, vec![problem(idx_uri, format!("corrupt index: {e}"))]),
    };
    // MD5 is computed only where one was recorded: it is the costliest check per byte.
    let md5 = recorded.md5().is_some() || entry.is_some_and(|e| !e.md5.is_empty());
    let options = options.with_md5(md5);
    match index_shard(store, &shard.key, shard.size, &options, on_bytes).await {
        Ok(actual) => {
            let mut problems = compare(&uri, &recorded, &actual);
            problems.extend(entry.and_then(|e| compare_entry(&uri, e, &actual)));
            (actual.shard_size, problems)
        }
        Err(Error::Format(e)) => (shard.size, vec![problem(uri, format!("corrupt tar: {e}"))]),
        Err(e) => (0, vec![problem(uri, format!("cannot be read: {e}"))]),
    }
}

/// The differences between the index `recorded` of the shard `uri` and the index of its bytes.
fn compare(uri: &str, recorded: &ShardIndex, actual: &ShardIndex) -> Vec<Problem> {
    let mut out = Vec::new();
    if recorded.shard_size != actual.shard_size {
        let message = format!(
            "wrong size: {} bytes, the index says {}",
            actual.shard_size, recorded.shard_size
        );
        out.push(problem(uri, message));
    }
    if recorded.shard_crc32c != actual.shard_crc32c {
        let message = format!(
            "checksum mismatch: CRC32C {:08x}, the index says {:08x}",
            actual.shard_crc32c, recorded.shard_crc32c
        );
        out.push(problem(uri, message));
    }
    if let Some(want) = recorded.md5()
        && want != actual.shard_md5
    {
        let message = format!(
            "checksum mismatch: MD5 {}, the index says {}",
            hex::encode(actual.shard_md5),
            hex::encode(want)
        );
        out.push(problem(uri, message));
    }
    let want = members(recorded);
    let got = members(actual);
    for ((name, w), (got_name, g)) in want.iter().zip(&got) {
        let same = name == got_name
            && (w.header_offset, w.data_offset, w.size, w.crc32c)
                == (g.header_offset, g.data_offset, g.size, g.crc32c);
        if !same {
            let message = format!(
                "index mismatch: member {got_name} at byte {} has {} bytes with CRC32C {:08x}; \
                 the index says {name} at byte {}, {} bytes, CRC32C {:08x}",
                g.data_offset, g.size, g.crc32c, w.data_offset, w.size, w.crc32c
            );
            out.push(problem(uri, message));
        }
    }
    if want.len() != got.len() {
        let message = format!(
            "index mismatch: the shard has {} members, the index lists {}",
            got.len(),
            want.len()
        );
        out.push(problem(uri, message));
    }
    out
}

/// The difference between a shard's `entry` in the manifest and the index of its bytes.
fn compare_entry(uri: &str, entry: &ShardEntry, actual: &ShardIndex) -> Option<Problem> {
    let crc = format!("{:08x}", actual.shard_crc32c);
    let md5 = hex::encode(actual.shard_md5);
    let same = entry.bytes == actual.shard_size
        && entry.crc32c.eq_ignore_ascii_case(&crc)
        && (entry.md5.is_empty() || entry.md5.eq_ignore_ascii_case(&md5));
    let message = if entry.md5.is_empty() {
        format!(
            "manifest mismatch: {} bytes, CRC32C {crc}; the manifest says {} bytes, CRC32C {}",
            actual.shard_size, entry.bytes, entry.crc32c
        )
    } else {
        format!(
            "manifest mismatch: {} bytes, CRC32C {crc}, MD5 {md5}; the manifest says {} bytes, \
             CRC32C {}, MD5 {}",
            actual.shard_size, entry.bytes, entry.crc32c, entry.md5
        )
    };
    (!same).then(|| problem(uri, message))
}

/// Every member of `index` with its name (`key.ext`), in shard order.
fn members(index: &ShardIndex) -> Vec<(String, &bucketload_format::IndexMember)> {
    index
        .samples
        .iter()
        .flat_map(|s| {
            s.members
                .iter()
                .map(move |m| (format!("{}.{}", s.key, m.ext), m))
        })
        .collect()
}

fn problem(uri: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem {
        uri: uri.into(),
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use bucketload_format::{IndexMember, IndexSample};

    use super::*;

    fn index(crc: u32, size: u64) -> ShardIndex {
        let member = |ext: &str, data_offset: u64, size: u64, crc32c: u32| IndexMember {
            ext: ext.to_owned(),
            header_offset: data_offset - 512,
            data_offset,
            size,
            crc32c,
        };
        ShardIndex {
            shard_size: 4096,
            shard_crc32c: 7,
            shard_md5: [1; 16],
            samples: vec![IndexSample {
                key: "000001".to_owned(),
                members: vec![member("jpg", 512, size, crc), member("cls", 1536, 1, 9)],
            }],
        }
    }

    #[test]
    fn equal_indexes_have_no_problem() {
        assert!(compare("u", &index(5, 10), &index(5, 10)).is_empty());
    }

    #[test]
    fn a_changed_member_is_named_with_its_offset() {
        let mut actual = index(6, 10);
        actual.shard_crc32c = 8;
        let problems = compare("s3://b/s.tar", &index(5, 10), &actual);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].message.starts_with("checksum mismatch"));
        let line = problems[1].to_string();
        assert!(line.starts_with("s3://b/s.tar: index mismatch: member 000001.jpg at byte 512"));
        assert!(line.contains("CRC32C 00000006"), "{line}");
    }

    #[test]
    fn a_missing_member_is_reported() {
        let mut actual = index(5, 10);
        actual.samples[0].members.pop();
        let problems = compare("u", &index(5, 10), &actual);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0]
                .message
                .contains("the shard has 1 members, the index lists 2")
        );
    }
}
