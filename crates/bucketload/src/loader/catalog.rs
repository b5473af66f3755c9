//! What a dataset holds: its files or shards, read once when a loader opens (the manifest, one
//! GET; else one listing). A manifest can be stale: [`ManifestUse::Check`] compares it with one
//! listing before use, and [`ManifestOrigin::explain`] turns an object it lists that is gone
//! into an error that says so.
//!
//! Shards are kept in a [`ShardTable`] (tens of bytes per shard). Their indexes are not read
//! here when a manifest gives the sample counts: an indexed loader fetches each when its shard
//! comes up (`indexes.rs`). A listing without a manifest reads every index once for its count
//! (many in flight), keeps the count and drops the index.

use std::sync::Arc;

use bucketload_format::{DatasetKind, Manifest, class_of_key};
use bucketload_store::ETag;
use bucketload_store::object_store::path::Path;

use std::collections::BTreeMap;

use super::config::{Format, ManifestUse};
use super::indexes::{IndexCache, checked};
use super::shard_table::{ShardRow, ShardTable};
use crate::base::{DataKey, KeyedObject, Location, list_all_keys};
use crate::shards::{
    IndexOptions, RUN_PATH, SHARD_EXT, ShardObject, index_key, index_shard, planned, read_indexes,
    shards_in,
};
use crate::source::Plan;
use crate::{Error, ErrorKind, Result, Setting};
use futures::{StreamExt, TryStreamExt};

/// Prefix of bucketload's own objects at a dataset root (never samples).
const RESERVED: &str = "_bucketload/";

/// Indexes read at once when a loader counts the samples of a listing's shards.
const INDEX_READS_IN_FLIGHT: usize = 64;

/// One object of a files dataset.
#[derive(Debug, Clone)]
pub(crate) struct FileObject {
    /// The key as the store holds it, relative to the dataset's root.
    pub(crate) key: DataKey,
    pub(crate) size: u64,
    /// ETag, when known.
    pub(crate) etag: Option<ETag>,
    /// CRC32C of the whole object, when the manifest records it.
    pub(crate) crc32c: Option<u32>,
    pub(crate) label: Option<u32>,
}

/// A dataset's contents and the format it is read in.
#[derive(Debug)]
pub(crate) enum Catalog {
    Files(Vec<FileObject>),
    Shards { shards: ShardTable, indexed: bool },
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
        indexes: &IndexCache,
    ) -> Result<(Catalog, Option<ManifestOrigin>)> {
        let found = match manifest {
            ManifestUse::Ignore => None,
            ManifestUse::Trust | ManifestUse::Check => location.manifest_found().await?,
        };
        match found {
            Some((key, found)) => {
                let origin = ManifestOrigin::new(location, &key, &found);
                if manifest == ManifestUse::Check {
                    origin.check(location, &found).await?;
                }
                Ok((from_manifest(location, &found, format)?, Some(origin)))
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
            Catalog::Files(files) => Plan::files(files.len() as u64),
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
}

fn from_manifest(location: &Location, manifest: &Manifest, format: Format) -> Result<Catalog> {
    match (manifest.kind, format) {
        (DatasetKind::Files, Format::Auto | Format::Files) => {
            let keys: Vec<&str> = manifest.files.iter().map(|f| f.key.as_str()).collect();
            let labels = folder_labels(&keys);
            let files = manifest
                .files
                .iter()
                .zip(labels)
                .map(|(f, label)| FileObject {
                    key: DataKey::new(&f.key),
                    size: f.size,
                    etag: ETag::from_store(f.etag.as_deref()),
                    crc32c: f
                        .crc32c
                        .as_deref()
                        .and_then(|c| u32::from_str_radix(c, 16).ok()),
                    label,
                });
            Ok(Catalog::Files(files.collect()))
        }
        (DatasetKind::Shards, Format::Auto | Format::Shards | Format::Indexed) => {
            let rows = manifest.shards.iter().map(|s| ShardRow {
                name: &s.name,
                bytes: s.bytes,
                samples: s.samples,
                has_index: !s.index.is_empty(),
            });
            let shards = ShardTable::from_rows(rows);
            let indexed = format == Format::Indexed;
            if indexed && let Some(bare) = shards.first_unindexed() {
                return Err(Error::invalid_input(format!(
                    "{} has no index, so it cannot be read sample by sample; run `bucketload \
                     index` or use --format shards",
                    location.uri_of(&shards.key(bare))
                )));
            }
            Ok(Catalog::Shards { shards, indexed })
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

async fn from_listing(
    location: &Location,
    format: Format,
    allow_incomplete: bool,
    indexes: &IndexCache,
) -> Result<Catalog> {
    let mut objects: Vec<KeyedObject> = list_all_keys(location).await?;
    let has = |key: &str| objects.iter().any(|o| o.key.as_str() == key);
    let unfinished = has(RUN_PATH) && !bucketload_format::MANIFEST_PATHS.into_iter().any(has);
    objects.retain(|o| !o.key.as_str().starts_with(RESERVED));
    if unfinished && objects.is_empty() {
        let nothing = Catalog::Shards {
            shards: ShardTable::default(),
            indexed: false,
        };
        refuse_unfinished(location, &nothing, false).await?; // nothing to read, even if allowed
    }
    let catalog = catalog_of(location, format, objects, indexes).await?;
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
            files
                .iter()
                .filter(|f| f.key.as_ref().ends_with(SHARD_EXT))
                .count() as u64,
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
    objects: Vec<KeyedObject>,
    indexes: &IndexCache,
) -> Result<Catalog> {
    if objects.is_empty() {
        return Err(Error::invalid_input(format!(
            "no objects below {location}; check the URI"
        )));
    }
    let has_shards = objects.iter().any(|o| o.key.as_str().ends_with(SHARD_EXT));
    match (format, has_shards) {
        (Format::Files, _) | (Format::Auto, false) => Ok(files_of(objects)),
        (Format::Shards | Format::Indexed | Format::Auto, true) => {
            let metas = shard_objects(location, objects);
            shards_of(location, &metas, format == Format::Indexed, indexes).await
        }
        (format, false) => Err(mismatch(location, DatasetKind::Files, format)),
    }
}

/// The objects of a shards dataset that its paths spell: a shard is read in ranges through
/// object_store, so one whose key it cannot spell is left out, with a warning naming it.
fn shard_objects(location: &Location, objects: Vec<KeyedObject>) -> Vec<(Path, u64)> {
    objects
        .into_iter()
        .filter_map(|o| match o.key {
            DataKey::Path(path) => Some((path, o.size)),
            DataKey::Raw(key) => {
                if key.ends_with(SHARD_EXT) {
                    let why = bucketload_store::unspellable(&key).unwrap_or("cannot be spelled");
                    tracing::warn!(
                        "{}: the key {why}, which a shard of a shards dataset cannot have (the \
                         files of a files dataset can), so the shard is skipped; copy it to a \
                         key without it to read it",
                        location.uri_of_key(&key)
                    );
                }
                None
            }
        })
        .collect()
}

fn files_of(objects: Vec<KeyedObject>) -> Catalog {
    let keys: Vec<&str> = objects.iter().map(|o| o.key.as_str()).collect();
    let labels = folder_labels(&keys);
    let files = objects.iter().zip(labels).map(|(o, label)| FileObject {
        key: o.key.clone(),
        size: o.size,
        etag: ETag::from_store(o.e_tag.as_deref()),
        crc32c: None,
        label,
    });
    Catalog::Files(files.collect())
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
            indexes.insert(i, Arc::new(index));
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
    fn new(location: &Location, key: &Path, manifest: &Manifest) -> ManifestOrigin {
        let refresh = match manifest.kind {
            DatasetKind::Files => format!("bucketload manifest {location}"),
            _ => format!(
                "bucketload shard {} {location} --overwrite",
                manifest.parameters.source
            ),
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
/// the index of its folder among the sorted folder names; otherwise no labels.
pub(crate) fn folder_labels(keys: &[&str]) -> Vec<Option<u32>> {
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
