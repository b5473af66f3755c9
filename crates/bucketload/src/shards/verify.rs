//! Integrity check of a dataset: every object is read once, many in flight, and compared with
//! what the dataset's metadata records.
//!
//! A `files` manifest (`_bucketload/manifest.bin`, or `_bucketload/manifest.json`) records each object's size, ETag and CRC32C;
//! otherwise (no manifest, or a `shards` manifest) every `*.tar` must have a `.idx` and is streamed
//! once through the index scanner, its size, CRC32C, MD5 and every member's (offset, size,
//! CRC32C) compared with the index. Every problem is collected; nothing stops early.
//!
//! # A `files` dataset: two sorted streams merged
//!
//! Both manifest formats hold their files sorted by key (as UTF-8 bytes, the readers refuse a
//! manifest that is not), and S3 lists in the same order. Where the store lists in key order
//! ([`lists_in_key_order`]), [`verify_merged`] walks the two streams side by side, one entry of
//! each at a time: the manifest is parsed on a blocking thread and its entries come over a
//! bounded channel ([`ManifestEntries`]), the listing is one flat listing page after page
//! ([`list_in_order`]). A key in both has its size compared and, when it matches, is GET once
//! ([`check_file`], `concurrency` in flight); a key only in the manifest is missing; a key only
//! in the listing is a warning. Memory holds a few pages of the listing, a channel of entries
//! and the GETs in flight, whatever the dataset's size: the cost is one LIST request per 1,000
//! keys in sequence (listed ahead, overlapped with the GETs) instead of folders listed in
//! parallel. A manifest that is not sorted or names a key twice fails as it always did, when
//! its reader reaches the entry (the whole `verify` fails, naming it). The progress has
//! no total until both streams are through (format 2 keeps its totals in its trailer, read
//! last), then the exact count of objects to read.
//!
//! The order is checked, never trusted: a listing that goes backwards (a store that lists in
//! another order while claiming S3's) stops the merge, drops its GETs in flight and its
//! findings, and the dataset is verified again from the start by the table path below; so
//! does a manifest that would go backwards (its reader refuses one first).
//!
//! A store that does not list in key order (a local folder, an S3 directory bucket) takes the
//! table path from the start ([`verify_table`]): the manifest streamed into an [`ObjectTable`]
//! (a few tens of bytes a file) plus one state byte per file, then the listing (any order)
//! looked up in it; memory grows with the manifest.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bucketload_format::{
    DatasetKind, FileEntry, MANIFEST_BIN_PATH, MANIFEST_PATH, Manifest, ShardEntry, ShardIndex,
};
use bucketload_store::object_store::ObjectStoreExt;
use bucketload_store::object_store::{GetResult, path::Path};
use bucketload_store::{ETag, Store, key_path};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use super::build::SourceObject;
use super::build::table::{ObjectTable, TableBuilder};
use super::{IndexOptions, SHARD_EXT, ShardObject, find_shards, index_key, index_shard};
use crate::base::{DataKey, KeyedObject, Location, Progress, list_in_order, lists_in_key_order};
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
    let location = Location::from_store(store);
    let mut report = match lists_in_key_order(&location) {
        true => match verify_merged(&location, concurrency, progress).await? {
            Merged::Verified(report) => report,
            Merged::Shards(manifest) => {
                verify_shards(store, Some(manifest), options, progress).await?
            }
            Merged::NoManifest => verify_shards(store, None, options, progress).await?,
            Merged::OutOfOrder { key, after } => {
                tracing::warn!(
                    "{}: the listing is not in key order ({key:?} came after {after:?}); \
                     verifying again from the start with the manifest held in memory",
                    location
                );
                progress.restart();
                verify_table(store, concurrency, options, progress).await?
            }
        },
        false => verify_table(store, concurrency, options, progress).await?,
    };
    progress.finish();
    report.problems.sort_by(|a, b| a.uri.cmp(&b.uri));
    report.warnings.sort_by(|a, b| a.uri.cmp(&b.uri));
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Verifies the dataset by the table path, whatever order the store lists in (see the module
/// docs).
async fn verify_table(
    store: &Store,
    concurrency: usize,
    options: &IndexOptions,
    progress: &dyn Progress,
) -> Result<VerifyReport> {
    Ok(match read_manifest(store).await? {
        Some(Held::Files(files)) => verify_files(store, files, concurrency, progress).await?,
        Some(Held::Shards(manifest)) => {
            verify_shards(store, Some(manifest), options, progress).await?
        }
        None => verify_shards(store, None, options, progress).await?,
    })
}

/// What [`verify_merged`] did.
enum Merged {
    /// A `files` dataset, verified.
    Verified(VerifyReport),
    /// The manifest is a `shards` one (read whole: a few entries a shard).
    Shards(Manifest),
    /// There is no manifest.
    NoManifest,
    /// A stream went backwards at `key`, which came after `after`: nothing was kept.
    OutOfOrder { key: String, after: String },
}

/// Entries of a `files` manifest in flight between the parser and the merge: enough to keep
/// both busy, few enough to be nothing next to the GETs (~150 bytes an entry).
const ENTRIES_IN_FLIGHT: usize = 1024;

/// The entries of a manifest, pulled one at a time: a task streams the manifest
/// ([`Location::stream_manifest`]) and its sink sends each file entry over a bounded channel, so
/// the parser waits for the merge. Shard entries are kept aside (a `shards` manifest is small).
/// Dropping it stops the read.
struct ManifestEntries {
    rx: tokio::sync::mpsc::Receiver<FileEntry>,
    read: Option<tokio::task::JoinHandle<Result<bucketload_format::ManifestHeader>>>,
    shards: Arc<Mutex<Vec<ShardEntry>>>,
    /// The header, once every entry came and the manifest was checked whole.
    header: Option<bucketload_format::ManifestHeader>,
}

impl ManifestEntries {
    /// Starts reading the manifest `key` from the response `got` of its GET.
    fn start(location: &Location, key: Path, got: GetResult) -> ManifestEntries {
        let (tx, rx) = tokio::sync::mpsc::channel(ENTRIES_IN_FLIGHT);
        let shards = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&shards);
        let name = location.uri_of(&key);
        let sink = move |entry: bucketload_format::Entry<'_>| match entry {
            // The sink runs on the parser's blocking thread: it may block.
            bucketload_format::Entry::File(f) => {
                tx.blocking_send(f.clone())
                    .map_err(|_| bucketload_format::Error::Manifest {
                        manifest: name.clone(),
                        reason: "its reader stopped".to_owned(),
                    })
            }
            bucketload_format::Entry::Shard(s) => {
                into.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(s.clone());
                Ok(())
            }
        };
        let location = location.clone();
        let read = tokio::spawn(async move {
            let read = location.stream_manifest(key, got, sink).await?;
            Ok(read.header)
        });
        ManifestEntries {
            rx,
            read: Some(read),
            shards,
            header: None,
        }
    }

    /// The next file entry; `None` once the manifest was read whole and checked (then
    /// [`ManifestEntries::header`] is set). An error means the manifest did not read whole.
    async fn next(&mut self) -> Result<Option<FileEntry>> {
        if let Some(entry) = self.rx.recv().await {
            return Ok(Some(entry));
        }
        // The sink is gone: the read is over, well or not.
        if let Some(read) = self.read.take() {
            let header = read.await.map_err(|e| Error::Task {
                reason: format!("the reader of the manifest failed: {e}"),
            })??;
            self.header = Some(header);
        }
        Ok(None)
    }

    /// The file entries that are left, as a stream.
    fn into_stream(self) -> BoxStream<'static, Result<FileEntry>> {
        futures::stream::try_unfold(self, |mut entries| async move {
            Ok(entries.next().await?.map(|entry| (entry, entries)))
        })
        .boxed()
    }
}

impl Drop for ManifestEntries {
    fn drop(&mut self) {
        if let Some(read) = &self.read {
            read.abort();
        }
    }
}

/// Verifies the dataset at `location` by merging its manifest with its listing, both in key
/// order (see the module docs), or says why it could not.
async fn verify_merged(
    location: &Location,
    concurrency: usize,
    progress: &dyn Progress,
) -> Result<Merged> {
    let Some((key, got)) = location.manifest_get().await? else {
        return Ok(Merged::NoManifest);
    };
    let mut entries = ManifestEntries::start(location, key, got);
    let first = entries.next().await?;
    if first.is_none()
        && let Some(header) = entries.header.take()
        && header.kind != DatasetKind::Files
    {
        let mut manifest = header.into_manifest();
        manifest.shards = std::mem::take(
            &mut *entries
                .shards
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        return Ok(Merged::Shards(manifest));
    }
    tracing::debug!(
        "{location}: verifying by merging the manifest with the listing, both in key order"
    );
    let manifest = futures::stream::iter(first.map(Ok))
        .chain(entries.into_stream())
        .boxed();
    let steps = merge(manifest, list_in_order(location));
    let mut report = VerifyReport {
        files_manifest: true,
        ..VerifyReport::default()
    };
    let mut outcomes = steps
        .map_ok(|step| async move {
            Ok(match step {
                Step::Check(file) => Outcome::Checked(check_file(location, file, progress).await),
                step => Outcome::Step(step),
            })
        })
        .try_buffer_unordered(concurrency.max(1));
    while let Some(outcome) = outcomes.try_next().await? {
        match outcome {
            Outcome::Checked(checked) => {
                report.objects += 1;
                report.bytes += checked.bytes;
                report.problems.extend(checked.problems);
                report.warnings.extend(checked.warnings);
            }
            Outcome::Step(Step::Missing(key)) => {
                let uri = location.uri_of_data_key(&DataKey::new(&key));
                report.problems.push(problem(uri, "missing"));
            }
            Outcome::Step(Step::WrongSize { key, listed, size }) => {
                let uri = location.uri_of_data_key(&key);
                let message = format!("wrong size: {listed} bytes, the manifest says {size}");
                report.problems.push(problem(uri, message));
            }
            Outcome::Step(Step::Extra(key)) => {
                let uri = location.uri_of_data_key(&key);
                report.warnings.push(problem(uri, "not in the manifest"));
            }
            Outcome::Step(Step::Through { objects, bytes }) => {
                progress.set_total(objects, Some(bytes));
            }
            Outcome::Step(Step::OutOfOrder { key, after }) => {
                return Ok(Merged::OutOfOrder { key, after });
            }
            Outcome::Step(Step::Check(_)) => unreachable!("checks are run, not passed on"),
        }
    }
    Ok(Merged::Verified(report))
}

/// One finding of [`merge`].
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// In both, same size: to be read.
    Check(FileEntry),
    /// In the manifest only.
    Missing(String),
    /// In both, listed with another size than the manifest's.
    WrongSize {
        key: DataKey,
        listed: u64,
        size: u64,
    },
    /// Listed only.
    Extra(DataKey),
    /// Both streams are through: `objects` of `bytes` are to be read in all.
    Through { objects: u64, bytes: u64 },
    /// A stream went backwards: `key` came after `after`. The last step.
    OutOfOrder { key: String, after: String },
}

/// A step run: a file read, or a finding passed on.
enum Outcome {
    Checked(Checked),
    Step(Step),
}

/// Where [`merge`] is: the next entry of each stream and the last key of each.
struct Merge {
    manifest: BoxStream<'static, Result<FileEntry>>,
    listing: BoxStream<'static, Result<KeyedObject>>,
    file: Option<FileEntry>,
    object: Option<KeyedObject>,
    /// The last key of each stream (the order check).
    last_file: Option<String>,
    last_object: Option<String>,
    /// Objects and bytes to read so far.
    objects: u64,
    bytes: u64,
    /// Started (both heads pulled), and over.
    started: bool,
    over: bool,
}

/// The steps of merging the sorted `manifest` with the sorted `listing` (`_bucketload/` left
/// out), ending with [`Step::Through`], or with [`Step::OutOfOrder`] as soon as either goes
/// backwards.
fn merge(
    manifest: BoxStream<'static, Result<FileEntry>>,
    listing: BoxStream<'static, Result<KeyedObject>>,
) -> BoxStream<'static, Result<Step>> {
    let merge = Merge {
        manifest,
        listing,
        file: None,
        object: None,
        last_file: None,
        last_object: None,
        objects: 0,
        bytes: 0,
        started: false,
        over: false,
    };
    futures::stream::try_unfold(merge, |mut merge| async move {
        Ok(merge.step().await?.map(|step| (step, merge)))
    })
    .boxed()
}

/// [`Step::OutOfOrder`] if `key` does not come strictly after `last`, else records it there.
fn went_back(last: &mut Option<String>, key: &str) -> Option<Step> {
    match last {
        Some(after) if after.as_str() >= key => Some(Step::OutOfOrder {
            key: key.to_owned(),
            after: after.clone(),
        }),
        _ => {
            *last = Some(key.to_owned());
            None
        }
    }
}

impl Merge {
    /// Pulls the next manifest entry; a step if it goes backwards.
    async fn pull_file(&mut self) -> Result<Option<Step>> {
        self.file = self.manifest.try_next().await?;
        let back = match &self.file {
            Some(file) => went_back(&mut self.last_file, &file.key),
            None => None,
        };
        self.over |= back.is_some();
        Ok(back)
    }

    /// Pulls the next listed object, `_bucketload/` skipped; a step if it goes backwards.
    async fn pull_object(&mut self) -> Result<Option<Step>> {
        loop {
            self.object = self.listing.try_next().await?;
            let Some(object) = &self.object else {
                return Ok(None);
            };
            let key = object.key.as_str();
            if let Some(back) = went_back(&mut self.last_object, key) {
                self.over = true;
                return Ok(Some(back));
            }
            if !key.starts_with(RESERVED) {
                return Ok(None);
            }
        }
    }

    /// The next step; `None` when over.
    async fn step(&mut self) -> Result<Option<Step>> {
        use std::cmp::Ordering::{Equal, Greater, Less};
        if self.over {
            return Ok(None);
        }
        if !self.started {
            self.started = true;
            if let Some(back) = self.pull_file().await? {
                return Ok(Some(back));
            }
            if let Some(back) = self.pull_object().await? {
                return Ok(Some(back));
            }
        }
        let order = match (&self.file, &self.object) {
            (Some(file), Some(object)) => file.key.as_str().cmp(object.key.as_str()),
            (Some(_), None) => Less,
            (None, _) => Greater,
        };
        let (step, back) = match (order, self.file.take(), self.object.take()) {
            (_, None, None) => {
                self.over = true;
                let (objects, bytes) = (self.objects, self.bytes);
                return Ok(Some(Step::Through { objects, bytes }));
            }
            (Less, Some(file), object) | (_, Some(file), object @ None) => {
                self.object = object;
                (Step::Missing(file.key), self.pull_file().await?)
            }
            (Greater, file, Some(object)) | (_, file @ None, Some(object)) => {
                self.file = file;
                (Step::Extra(object.key), self.pull_object().await?)
            }
            (Equal, Some(file), Some(object)) => {
                let step = match object.size == file.size {
                    true => {
                        (self.objects, self.bytes) = (self.objects + 1, self.bytes + file.size);
                        Step::Check(file)
                    }
                    false => Step::WrongSize {
                        key: object.key,
                        listed: object.size,
                        size: file.size,
                    },
                };
                let back = match self.pull_file().await? {
                    Some(back) => Some(back),
                    None => self.pull_object().await?,
                };
                (step, back)
            }
        };
        // A stream that went backwards ends the merge: what was found is dropped anyway.
        Ok(Some(back.unwrap_or(step)))
    }
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

    fn manifest(files: &[(&str, u64)]) -> BoxStream<'static, Result<FileEntry>> {
        let files: Vec<Result<FileEntry>> = files
            .iter()
            .map(|&(key, size)| {
                Ok(FileEntry {
                    key: key.to_owned(),
                    size,
                    etag: None,
                    crc32c: None,
                })
            })
            .collect();
        futures::stream::iter(files).boxed()
    }

    fn listing(objects: &[(&str, u64)]) -> BoxStream<'static, Result<KeyedObject>> {
        let objects: Vec<Result<KeyedObject>> = objects
            .iter()
            .map(|&(key, size)| {
                Ok(KeyedObject {
                    key: DataKey::new(key),
                    size,
                    e_tag: None,
                })
            })
            .collect();
        futures::stream::iter(objects).boxed()
    }

    fn merged(files: &[(&str, u64)], objects: &[(&str, u64)]) -> Vec<Step> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime
            .block_on(merge(manifest(files), listing(objects)).try_collect())
            .unwrap()
    }

    fn check(key: &str, size: u64) -> Step {
        Step::Check(FileEntry {
            key: key.to_owned(),
            size,
            etag: None,
            crc32c: None,
        })
    }

    #[test]
    fn the_merge_meets_every_interleaving_in_byte_order() {
        // UTF-8 byte order: `.` < `/` < `0`, ASCII < `ü` < U+FFFD < U+10000 (UTF-16 would put
        // U+10000, a surrogate pair, before U+FFFD).
        let files = [
            ("a.b", 1),
            ("a/b", 2),
            ("a0", 3),
            ("b//c", 4),
            ("mid", 5),
            ("u", 6),
            ("\u{fc}", 7),
            ("\u{fffd}", 8),
            ("\u{10000}", 9),
        ];
        let objects = [
            ("0", 1),
            ("_bucketload/manifest.bin", 100),
            ("a.b", 1),
            ("a/b", 20),
            ("a0", 3),
            ("aa", 1),
            ("b//c", 4),
            ("u", 6),
            ("z", 1),
            ("\u{fc}", 7),
            ("\u{fffd}", 8),
            ("\u{10000}", 9),
            ("\u{10000}z", 1),
        ];
        assert_eq!(
            merged(&files, &objects),
            [
                Step::Extra(DataKey::new("0")),
                check("a.b", 1),
                Step::WrongSize {
                    key: DataKey::new("a/b"),
                    listed: 20,
                    size: 2
                },
                check("a0", 3),
                Step::Extra(DataKey::new("aa")),
                check("b//c", 4),
                Step::Missing("mid".to_owned()),
                check("u", 6),
                Step::Extra(DataKey::new("z")),
                check("\u{fc}", 7),
                check("\u{fffd}", 8),
                check("\u{10000}", 9),
                Step::Extra(DataKey::new("\u{10000}z")),
                Step::Through {
                    objects: 7,
                    bytes: 38
                },
            ]
        );
        // Missing first and last; either stream empty.
        assert_eq!(
            merged(&[("a", 1), ("m", 2), ("z", 3)], &[("m", 2)]),
            [
                Step::Missing("a".to_owned()),
                check("m", 2),
                Step::Missing("z".to_owned()),
                Step::Through {
                    objects: 1,
                    bytes: 2
                },
            ]
        );
        assert_eq!(
            merged(&[], &[("_bucketload/x", 1), ("k", 1)]),
            [
                Step::Extra(DataKey::new("k")),
                Step::Through {
                    objects: 0,
                    bytes: 0
                },
            ]
        );
        assert_eq!(
            merged(&[("k", 1)], &[]),
            [
                Step::Missing("k".to_owned()),
                Step::Through {
                    objects: 0,
                    bytes: 0
                },
            ]
        );
    }

    #[test]
    fn a_stream_that_goes_backwards_ends_the_merge() {
        let back = |key: &str, after: &str| Step::OutOfOrder {
            key: key.to_owned(),
            after: after.to_owned(),
        };
        let steps = merged(
            &[("a", 1), ("b", 1), ("c", 1)],
            &[("a", 1), ("c", 1), ("b", 1)],
        );
        assert_eq!(steps.last(), Some(&back("b", "c")), "{steps:?}");
        // A listing that repeats a key goes backwards too.
        let steps = merged(&[("a", 1)], &[("a", 1), ("a", 1)]);
        assert_eq!(steps, [back("a", "a")]);
        let steps = merged(&[("b", 1), ("a", 1)], &[("a", 1), ("b", 1)]);
        assert_eq!(steps, [Step::Extra(DataKey::new("a")), back("a", "b")]);
        // The listing's order counts `_bucketload/` keys too.
        let steps = merged(&[], &[("b", 1), ("_bucketload/x", 1)]);
        assert_eq!(steps.last(), Some(&back("_bucketload/x", "b")), "{steps:?}");
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
