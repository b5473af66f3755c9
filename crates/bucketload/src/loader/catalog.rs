//! What a dataset holds: its files or shards, read once when a loader opens (the manifest, one
//! GET; else one listing). A manifest can be stale: [`ManifestUse::Check`] compares it with one
//! listing before use, and [`ManifestOrigin::explain`] turns an object it lists that is gone
//! into an error that says so.
//!
//! Shards are kept in a [`ShardTable`] (tens of bytes per shard). Their indexes are not read
//! here when a manifest gives the sample counts: an indexed loader fetches each when its shard
//! comes up (`indexes.rs`). A listing without a manifest reads every index once for its count
//! (many in flight), keeps the count and drops the index.

use std::path::PathBuf;
use std::sync::Arc;

use bucketload_format::{DatasetKind, Entry, Manifest};
use bucketload_store::object_store::{GetResult, path::Path};

use std::collections::BTreeMap;

use super::compact_index::CompactIndex;
use super::config::{Format, ManifestUse};
use super::files_table::{FilesTable, FilesTableBuilder, Identity};
use super::indexes::{IndexCache, checked};
use super::shard_table::{ShardRow, ShardTable};
use super::shared_catalog::{ManifestVersion, SharedCatalog};
use crate::base::{DataKey, Location, for_each_key, list_all_keys};
use crate::shards::{
    INDEX_SUFFIX, IndexOptions, RUN_PATH, SHARD_EXT, ShardObject, index_key, index_shard, planned,
    read_indexes, shards_in,
};
use crate::source::Plan;
use crate::{Error, ErrorKind, Result, Setting};
use futures::{StreamExt, TryStreamExt};

/// Prefix of bucketload's own objects at a dataset root (never samples).
const RESERVED: &str = "_bucketload/";

/// Indexes read at once when a loader counts the samples of a listing's shards.
const INDEX_READS_IN_FLIGHT: usize = 64;

/// The identity of a files table no other process shares (from a listing).
const PRIVATE: Identity = [0; 32];

/// One object of a files dataset, as [`Catalog::file`] decodes it from the files table.
#[derive(Debug, Clone)]
pub(crate) struct FileObject {
    /// The key as the store holds it, relative to the dataset's root.
    pub(crate) key: DataKey,
    pub(crate) size: u64,
    /// [`ETag::fingerprint`](bucketload_store::ETag::fingerprint) of its ETag, when known.
    pub(crate) etag_fingerprint: Option<u64>,
    /// CRC32C of the whole object, when the manifest records it.
    pub(crate) crc32c: Option<u32>,
    pub(crate) label: Option<u32>,
}

/// A dataset's contents and the format it is read in.
#[derive(Debug)]
pub(crate) enum Catalog {
    /// One object per sample, a few bytes each (`files_table.rs`), shared by the processes of
    /// a node when it comes from a manifest (`shared_catalog.rs`).
    Files(FilesTable),
    Shards {
        shards: ShardTable,
        indexed: bool,
    },
}

/// Where a files catalog read from a manifest may be shared with the node's other processes.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShareWith {
    /// The dataset's store URI (part of the catalog's name).
    pub(crate) store_uri: String,
    /// The loader's disk cache directory, beside which the catalog is kept.
    pub(crate) cache_dir: Option<PathBuf>,
}

impl Catalog {
    /// Reads the manifest (unless `manifest` ignores it; checked against a listing when it
    /// asks), else lists the dataset and counts its shards' samples (plain tars scanned for an
    /// indexed read leave their indexes in `indexes`). Returns the manifest's origin when the
    /// catalog came from one. No index is read when a manifest gives the counts.
    pub(crate) async fn open(
        location: &Location,
        format: Format,
        manifest: ManifestUse,
        allow_incomplete: bool,
        share: &ShareWith,
        indexes: &IndexCache,
    ) -> Result<(Catalog, Option<ManifestOrigin>)> {
        let found = match manifest {
            ManifestUse::Ignore => None,
            ManifestUse::Trust | ManifestUse::Check => location.manifest_get().await?,
        };
        match found {
            Some((key, got)) => {
                let (catalog, origin) =
                    from_manifest_get(location, key, got, format, manifest, share).await?;
                Ok((catalog, Some(origin)))
            }
            None => {
                let catalog = from_listing(location, format, allow_incomplete, indexes).await?;
                Ok((catalog, None))
            }
        }
    }

    /// The source plan of this catalog.
    pub(crate) fn plan(&self) -> Plan {
        match self {
            Catalog::Files(files) => Plan::files(files.len()),
            Catalog::Shards { shards, indexed } => {
                let counts = Arc::clone(shards.counts());
                match indexed {
                    true => Plan::indexed_shared(counts),
                    false => Plan::shards_shared(counts),
                }
            }
        }
    }

    /// The format in effect.
    pub(crate) fn format(&self) -> Format {
        match self {
            Catalog::Files(_) => Format::Files,
            Catalog::Shards { indexed: true, .. } => Format::Indexed,
            Catalog::Shards { .. } => Format::Shards,
        }
    }

    /// Whether the catalog is a files table mapped from a file the node's processes share.
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self, Catalog::Files(table) if table.is_mapped())
    }

    /// File `index` of a files catalog, its key rebuilt; `None` past the end or for shards.
    pub(crate) fn file(&self, index: u64) -> Option<FileObject> {
        let Catalog::Files(table) = self else {
            return None;
        };
        let entry = table.get(index)?;
        Some(FileObject {
            key: DataKey::new(&entry.key),
            size: entry.size,
            etag_fingerprint: entry.etag_fingerprint,
            crc32c: entry.crc32c,
            label: entry.label,
        })
    }
}

/// The catalog of the manifest whose GET is `got`. A files catalog of this manifest version
/// that a process of the node shares already is mapped without reading the manifest's body
/// (with [`ManifestUse::Trust`]); else the manifest is read, the catalog built (by one process
/// of the node at a time) and shared.
async fn from_manifest_get(
    location: &Location,
    key: Path,
    got: GetResult,
    format: Format,
    manifest: ManifestUse,
    share: &ShareWith,
) -> Result<(Catalog, ManifestOrigin)> {
    let version = ManifestVersion {
        etag: got.meta.e_tag.clone(),
        size: got.meta.size,
        modified_ns: got.meta.last_modified.timestamp_nanos_opt().unwrap_or(0),
    };
    let shared = match format {
        Format::Auto | Format::Files => {
            SharedCatalog::new(&share.store_uri, &version, share.cache_dir.as_deref())
        }
        Format::Shards | Format::Indexed => None,
    };
    let mut lock = None;
    if let Some(shared) = &shared
        && manifest == ManifestUse::Trust
    {
        if let Some(table) = shared.find() {
            return Ok((Catalog::Files(table), ManifestOrigin::files(location, &key)));
        }
        lock = shared.lock().await;
        if let Some(table) = shared.find() {
            return Ok((Catalog::Files(table), ManifestOrigin::files(location, &key)));
        }
    }
    if manifest == ManifestUse::Check {
        // The check compares every entry with a listing: the manifest is collected whole.
        let found = location.manifest_of(key.clone(), got).await?;
        let origin = ManifestOrigin::new(location, &key, found.kind, &found.parameters.source);
        origin.check(location, &found).await?;
        if let (Some(shared), DatasetKind::Files) = (&shared, found.kind)
            && let Some(table) = shared.find()
        {
            return Ok((Catalog::Files(table), origin));
        }
        let identity = match (&shared, found.kind) {
            (Some(shared), DatasetKind::Files) => shared.identity(),
            _ => &PRIVATE,
        };
        let catalog = from_manifest(location, &found, format, identity)?;
        drop(found);
        let catalog = match (catalog, &shared) {
            (Catalog::Files(table), Some(shared)) => Catalog::Files(shared.publish(table)),
            (catalog, _) => catalog,
        };
        drop(lock);
        return Ok((catalog, origin));
    }
    // Streamed: each entry goes into the files table (written into the shared file as it is
    // built) or the shard rows as the GET's body is parsed, so no whole manifest is ever held.
    let files = match (format, &shared) {
        (Format::Auto | Format::Files, Some(shared)) => Some(shared.builder()),
        (Format::Auto | Format::Files, None) => Some(FilesTableBuilder::default()),
        (Format::Shards | Format::Indexed, _) => None,
    };
    let building = Arc::new(std::sync::Mutex::new(Building {
        files,
        shards: Vec::new(),
    }));
    let into = Arc::clone(&building);
    let sink = move |entry: Entry<'_>| {
        let mut into = into
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        into.add(entry);
        Ok(())
    };
    let read = location.stream_manifest(key.clone(), got, sink).await?;
    drop(read.sink);
    let header = read.header;
    let built = std::mem::take(
        &mut *building
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let origin = ManifestOrigin::new(location, &key, header.kind, &header.parameters.source);
    let catalog = match (header.kind, format, built.files) {
        (DatasetKind::Files, Format::Auto | Format::Files, Some(files)) => {
            let table = match &shared {
                Some(shared) => shared.publish_built(files).map_err(|source| Error::Io {
                    path: format!("the files catalog of {}", location.uri_of(&key)),
                    action: "build (free space where shared catalogs are kept, or set \
                             BUCKETLOAD_CATALOG_DIR)"
                        .to_owned(),
                    source,
                })?,
                None => files.finish_in_memory(&PRIVATE),
            };
            Catalog::Files(table)
        }
        (DatasetKind::Shards, Format::Auto | Format::Shards | Format::Indexed, _) => {
            let rows = built
                .shards
                .iter()
                .map(|(name, bytes, samples, has_index)| ShardRow {
                    name,
                    bytes: *bytes,
                    samples: *samples,
                    has_index: *has_index,
                });
            shards_catalog(location, rows, format == Format::Indexed)?
        }
        (kind, format, _) => return Err(mismatch(location, kind, format)),
    };
    drop(lock);
    Ok((catalog, origin))
}

/// A manifest's entries on their way into a catalog.
#[derive(Default)]
struct Building {
    files: Option<FilesTableBuilder>,
    /// Name, bytes, samples and whether it has an index, of each shard.
    shards: Vec<(String, u64, u64, bool)>,
}

impl Building {
    fn add(&mut self, entry: Entry<'_>) {
        match entry {
            Entry::File(f) => {
                if let Some(files) = &mut self.files {
                    let crc32c = f
                        .crc32c
                        .as_deref()
                        .and_then(|c| u32::from_str_radix(c, 16).ok());
                    files.push(&f.key, f.size, f.etag.as_deref(), crc32c);
                }
            }
            Entry::Shard(s) => {
                let has_index = !s.index.is_empty();
                self.shards
                    .push((s.name.clone(), s.bytes, s.samples, has_index));
            }
        }
    }
}

/// The shards catalog of `rows`; an indexed read needs every shard to have an index.
fn shards_catalog<'a>(
    location: &Location,
    rows: impl Iterator<Item = ShardRow<'a>>,
    indexed: bool,
) -> Result<Catalog> {
    let shards = ShardTable::from_rows(rows);
    if indexed && let Some(bare) = shards.first_unindexed() {
        return Err(Error::invalid_input(format!(
            "{} has no index, so it cannot be read sample by sample; run `bucketload \
             index` or use --format shards",
            location.uri_of(&shards.key(bare))
        )));
    }
    Ok(Catalog::Shards { shards, indexed })
}

fn from_manifest(
    location: &Location,
    manifest: &Manifest,
    format: Format,
    identity: &Identity,
) -> Result<Catalog> {
    match (manifest.kind, format) {
        (DatasetKind::Files, Format::Auto | Format::Files) => {
            let mut files = FilesTableBuilder::default();
            for f in &manifest.files {
                let crc32c = f
                    .crc32c
                    .as_deref()
                    .and_then(|c| u32::from_str_radix(c, 16).ok());
                files.push(&f.key, f.size, f.etag.as_deref(), crc32c);
            }
            Ok(Catalog::Files(files.finish_in_memory(identity)))
        }
        (DatasetKind::Shards, Format::Auto | Format::Shards | Format::Indexed) => {
            let rows = manifest.shards.iter().map(|s| ShardRow {
                name: &s.name,
                bytes: s.bytes,
                samples: s.samples,
                has_index: !s.index.is_empty(),
            });
            shards_catalog(location, rows, format == Format::Indexed)
        }
        (kind, format) => Err(mismatch(location, kind, format)),
    }
}

fn mismatch(location: &Location, kind: DatasetKind, format: Format) -> Error {
    let kind = match kind {
        DatasetKind::Files => "one object per sample",
        _ => "tar shards",
    };
    Error::invalid_input(format!(
        "{location} holds {kind}, which cannot be read as {format:?}; set {} to \"auto\"",
        Setting::Format
    ))
}

/// What one pass over a listing found: the files table (unless the format rules files out),
/// the shard-related objects, and bucketload's own run records.
#[derive(Debug, Default)]
struct Listing {
    files: Option<FilesTableBuilder>,
    /// `.tar` shards and their `.idx` indexes that object_store spells.
    shard_objects: Vec<(Path, u64)>,
    objects: u64,
    has_shards: bool,
    has_run: bool,
    has_manifest: bool,
}

impl Listing {
    fn add(&mut self, location: &Location, key: &str, size: u64, etag: Option<&str>) {
        self.has_run |= key == RUN_PATH;
        self.has_manifest |= bucketload_format::MANIFEST_PATHS.contains(&key);
        if key.starts_with(RESERVED) {
            return;
        }
        self.objects += 1;
        if key.ends_with(SHARD_EXT) || key.ends_with(INDEX_SUFFIX) {
            self.has_shards |= key.ends_with(SHARD_EXT);
            match DataKey::new(key) {
                DataKey::Path(path) => self.shard_objects.push((path, size)),
                DataKey::Raw(key) => warn_unspellable_shard(location, &key),
            }
        }
        if let Some(files) = &mut self.files {
            files.push(key, size, etag, None);
        }
    }
}

/// The catalog of a listing, built as the listing streams in (folder by folder, see
/// [`for_each_key`]): a files table holds a few bytes per object, never the listing.
async fn from_listing(
    location: &Location,
    format: Format,
    allow_incomplete: bool,
    indexes: &IndexCache,
) -> Result<Catalog> {
    let mut listing = Listing {
        files: matches!(format, Format::Auto | Format::Files).then(FilesTableBuilder::default),
        ..Listing::default()
    };
    for_each_key(location, |key, size, etag| {
        listing.add(location, key, size, etag);
    })
    .await?;
    let unfinished = listing.has_run && !listing.has_manifest;
    if unfinished && listing.objects == 0 {
        let nothing = Catalog::Shards {
            shards: ShardTable::default(),
            indexed: false,
        };
        refuse_unfinished(location, &nothing, false).await?; // nothing to read, even if allowed
    }
    let catalog = catalog_of(location, format, listing, indexes).await?;
    if unfinished {
        refuse_unfinished(location, &catalog, allow_incomplete).await?;
    }
    Ok(catalog)
}

/// Fails naming the run record of an unfinished `bucketload shard` run and how much is missing,
/// or, when `allow` says so, logs that as a warning.
async fn refuse_unfinished(location: &Location, catalog: &Catalog, allow: bool) -> Result<()> {
    let Some(planned) = planned(location).await? else {
        return Ok(()); // deleted since the listing
    };
    let (found_shards, found_samples) = match catalog {
        Catalog::Shards { shards, .. } => {
            (shards.len() as u64, shards.counts().iter().sum::<u64>())
        }
        Catalog::Files(files) => (
            files.iter().filter(|f| f.key.ends_with(SHARD_EXT)).count() as u64,
            0,
        ),
    };
    let error = Error::Unfinished {
        dataset: location.to_string(),
        run: location.uri_of(&Path::from(RUN_PATH)),
        planned_shards: planned.shards,
        planned_samples: planned.samples,
        found_shards,
        found_samples,
    };
    if !allow {
        return Err(error);
    }
    tracing::warn!("{error}");
    Ok(())
}

async fn catalog_of(
    location: &Location,
    format: Format,
    listing: Listing,
    indexes: &IndexCache,
) -> Result<Catalog> {
    if listing.objects == 0 {
        return Err(Error::invalid_input(format!(
            "no objects below {location}; check the URI"
        )));
    }
    match (format, listing.has_shards, listing.files) {
        (Format::Files, _, Some(files)) | (Format::Auto, false, Some(files)) => {
            Ok(Catalog::Files(files.finish_in_memory(&PRIVATE)))
        }
        (Format::Shards | Format::Indexed | Format::Auto, true, _) => {
            let indexed = format == Format::Indexed;
            shards_of(location, &listing.shard_objects, indexed, indexes).await
        }
        (format, _, _) => Err(mismatch(location, DatasetKind::Files, format)),
    }
}

/// Logs that a shard whose key object_store cannot spell is left out: a shard is read in
/// ranges through object_store (the files of a files dataset can have such keys).
fn warn_unspellable_shard(location: &Location, key: &str) {
    if key.ends_with(SHARD_EXT) {
        let why = bucketload_store::unspellable(key).unwrap_or("cannot be spelled");
        tracing::warn!(
            "{}: the key {why}, which a shard of a shards dataset cannot have (the \
             files of a files dataset can), so the shard is skipped; copy it to a \
             key without it to read it",
            location.uri_of_key(key)
        );
    }
}

/// Shards of a listing without a manifest: their sample counts come from their indexes (read
/// many at once, each checked, then dropped), or, for plain tars without one, from reading them
/// once (see [`scanned`]).
async fn shards_of(
    location: &Location,
    objects: &[(Path, u64)],
    indexed: bool,
    indexes: &IndexCache,
) -> Result<Catalog> {
    let found = shards_in(objects);
    let mut counts = vec![0u64; found.len()];
    let (with, without): (Vec<usize>, Vec<usize>) =
        (0..found.len()).partition(|&i| found[i].has_index);
    count_indexed(location, &found, &with, &mut counts).await?;
    for (i, index) in scanned(location, &found, &without).await? {
        counts[i] = index.samples.len() as u64;
        if indexed {
            let uri = location.uri_of(&found[i].key);
            indexes.insert(i, CompactIndex::new(&index, &uri)?);
        }
    }
    let rows = found.iter().zip(&counts).map(|(s, &samples)| ShardRow {
        name: s.key.as_ref(),
        bytes: s.size,
        samples,
        has_index: s.has_index,
    });
    Ok(Catalog::Shards {
        shards: ShardTable::from_rows(rows),
        indexed,
    })
}

/// Sets `counts[i]` for each shard `found[i]` of `with` (those with an index) from its index,
/// [`INDEX_READS_IN_FLIGHT`] at once; each index is checked against its shard, then dropped.
async fn count_indexed(
    location: &Location,
    found: &[ShardObject],
    with: &[usize],
    counts: &mut [u64],
) -> Result<()> {
    let objects = with.iter().map(|&i| found[i].clone()).collect();
    let mut read = read_indexes(location, objects, INDEX_READS_IN_FLIGHT);
    let mut positions = with.iter();
    while let Some(got) = read.try_next().await? {
        let Some(&i) = positions.next() else { break };
        let Some(index) = got.index else {
            return Err(Error::invalid_input(format!(
                "{} is missing; run `bucketload index` on the dataset",
                location.uri_of(&index_key(&got.key))
            )));
        };
        checked(location, &got.key, got.size, &index)?;
        counts[i] = index.samples.len() as u64;
    }
    Ok(())
}

/// Plain tar shards (no index, no manifest) read whole at once, several in flight.
const SCANS_IN_FLIGHT: usize = 4;

/// Indexes plain tar shards `found[i]` for each `i` of `without`, which have neither an index
/// nor a manifest entry: each is read once, front to back, and indexed in memory as `bucketload
/// index` would (nothing is written). Planning needs every shard's sample count (equal counts
/// per rank, `len()`); `bucketload index` saves this read on every later open.
async fn scanned(
    location: &Location,
    found: &[ShardObject],
    without: &[usize],
) -> Result<Vec<(usize, bucketload_format::ShardIndex)>> {
    let Some(&bare) = without.first() else {
        return Ok(Vec::new());
    };
    let Some(store) = location.handle() else {
        return Err(Error::invalid_input(format!(
            "{} has no index and the dataset no manifest, so its samples cannot be planned; \
             run `bucketload index {location}` first",
            location.uri_of(&found[bare].key)
        )));
    };
    tracing::info!(shards = without.len(), %location, "counting the samples of shards without an index");
    let options = IndexOptions::builder().build()?;
    let shards = without.iter().map(|&i| (i, found[i].clone()));
    let shards: Vec<(usize, ShardObject)> = shards.collect();
    futures::stream::iter(shards)
        .map(|(i, shard)| {
            let options = &options;
            async move {
                let index = index_shard(store, &shard.key, shard.size, options, &|_| {}).await?;
                Ok::<_, Error>((i, index))
            }
        })
        .buffered(SCANS_IN_FLIGHT)
        .try_collect()
        .await
}

/// The manifest a catalog was read from: where it is and the command that writes it again.
#[derive(Debug, Clone)]
pub(crate) struct ManifestOrigin {
    uri: String,
    refresh: String,
}

/// Objects named per kind of difference in a stale-manifest error.
const NAMED_DIFFERENCES: usize = 3;

impl ManifestOrigin {
    /// The manifest `key` of a files dataset at `location`.
    fn files(location: &Location, key: &Path) -> ManifestOrigin {
        ManifestOrigin {
            uri: location.uri_of(key),
            refresh: format!("bucketload manifest {location}"),
        }
    }

    fn new(location: &Location, key: &Path, kind: DatasetKind, source: &str) -> ManifestOrigin {
        let refresh = match kind {
            DatasetKind::Files => format!("bucketload manifest {location}"),
            _ => format!("bucketload shard {source} {location} --overwrite"),
        };
        ManifestOrigin {
            uri: location.uri_of(key),
            refresh,
        }
    }

    /// One listing of the dataset against the manifest: the same objects (files; shards for a
    /// shards dataset) with the same sizes, or an error naming what differs.
    async fn check(&self, location: &Location, manifest: &Manifest) -> Result<()> {
        let listed = list_all_keys(location).await?;
        let listed: BTreeMap<&str, u64> = listed
            .iter()
            .map(|o| (o.key.as_str(), o.size))
            .filter(|(key, _)| !key.starts_with(RESERVED))
            .filter(|(key, _)| manifest.kind == DatasetKind::Files || key.ends_with(SHARD_EXT))
            .collect();
        let recorded: BTreeMap<&str, u64> = match manifest.kind {
            DatasetKind::Files => manifest
                .files
                .iter()
                .map(|f| (f.key.as_str(), f.size))
                .collect(),
            _ => manifest
                .shards
                .iter()
                .map(|s| (s.name.as_str(), s.bytes))
                .collect(),
        };
        let added: Vec<&str> = listed
            .keys()
            .filter(|k| !recorded.contains_key(*k))
            .copied()
            .collect();
        let removed: Vec<&str> = recorded
            .keys()
            .filter(|k| !listed.contains_key(*k))
            .copied()
            .collect();
        let resized: Vec<&str> = recorded
            .iter()
            .filter(|(k, size)| listed.get(*k).is_some_and(|l| l != *size))
            .map(|(k, _)| *k)
            .collect();
        let parts: Vec<String> = [
            ("added since it was written", added),
            ("listed but gone", removed),
            ("of another size than it records", resized),
        ]
        .into_iter()
        .filter(|(_, keys)| !keys.is_empty())
        .map(|(what, keys)| differences(what, &keys))
        .collect();
        if parts.is_empty() {
            return Ok(());
        }
        Err(Error::StaleManifest {
            manifest: self.uri.clone(),
            what: parts.join(", "),
            refresh: self.refresh.clone(),
            kind: ErrorKind::Corrupt,
        })
    }

    /// `err`, an error of an epoch, said as a stale manifest when it is an object the manifest
    /// lists that the store no longer holds.
    pub(crate) fn explain(&self, err: Error) -> Error {
        let Some(uri) = missing_object(&err) else {
            return err;
        };
        Error::StaleManifest {
            manifest: self.uri.clone(),
            what: format!("it lists {uri}, which is not found"),
            refresh: self.refresh.clone(),
            kind: ErrorKind::NotFound,
        }
    }
}

/// "2 objects added since it was written (a.jpg, b.jpg)", naming at most
/// [`NAMED_DIFFERENCES`].
fn differences(what: &str, keys: &[&str]) -> String {
    let named = keys[..keys.len().min(NAMED_DIFFERENCES)].join(", ");
    let more = match keys.len() > NAMED_DIFFERENCES {
        true => ", …",
        false => "",
    };
    let objects = match keys.len() {
        1 => "object",
        _ => "objects",
    };
    format!("{} {objects} {what} ({named}{more})", keys.len())
}

/// The URI of the object whose absence `err` (or one of its causes, also inside an I/O error)
/// reports; `None` for any other error, a missing bucket included.
fn missing_object(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let not_found = crate::error::causes(err).find_map(|e| {
        match e
            .downcast_ref::<Error>()
            .and_then(Error::as_store)
            .or_else(|| e.downcast_ref::<bucketload_store::Error>())
        {
            Some(bucketload_store::Error::NotFound { uri, what, .. }) => Some((uri, *what)),
            _ => None,
        }
    });
    not_found.and_then(|(uri, what)| (what == "object").then(|| uri.clone()))
}

/// Class labels from folders, as `bucketload shard` assigns them: when every key has a folder,
/// the index of its folder among the sorted folder names; otherwise no labels. The files table
/// keeps them per folder run; this is the plain form its tests compare with.
#[cfg(test)]
pub(crate) fn folder_labels(keys: &[&str]) -> Vec<Option<u32>> {
    use bucketload_format::class_of_key;
    let folders: Option<Vec<&str>> = keys.iter().map(|k| class_of_key(k)).collect();
    let Some(folders) = folders else {
        return vec![None; keys.len()];
    };
    let mut classes = folders.clone();
    classes.sort_unstable();
    classes.dedup();
    folders
        .iter()
        .map(|f| {
            let index = classes.binary_search(f).unwrap_or_default();
            Some(u32::try_from(index).unwrap_or(u32::MAX))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_sorted_folder_indices() {
        let keys = ["b/1.jpg", "a/2.jpg", "c/3.jpg", "a/4.jpg"];
        assert_eq!(folder_labels(&keys), [Some(1), Some(0), Some(2), Some(0)]);
    }

    #[test]
    fn differences_name_a_few_objects_and_count_all() {
        assert_eq!(differences("added", &["a"]), "1 object added (a)");
        let many = differences("gone", &["a", "b", "c", "d"]);
        assert_eq!(many, "4 objects gone (a, b, c, …)");
    }

    #[test]
    fn only_a_missing_object_is_a_stale_manifest() {
        let missing = |what| {
            Error::Store(bucketload_store::Error::NotFound {
                uri: "s3://b/x.jpg".to_owned(),
                what,
                hint: bucketload_store::Hint::CheckBucket,
            })
        };
        assert_eq!(
            missing_object(&missing("object")).as_deref(),
            Some("s3://b/x.jpg")
        );
        let carried = std::io::Error::other(missing("object"));
        assert_eq!(missing_object(&carried).as_deref(), Some("s3://b/x.jpg"));
        assert_eq!(missing_object(&missing("bucket")), None);
        assert_eq!(missing_object(&Error::invalid_input("x")), None);
    }

    #[test]
    fn a_key_without_a_folder_turns_labels_off() {
        assert_eq!(folder_labels(&["a/1.jpg", "2.jpg"]), [None, None]);
    }
}
