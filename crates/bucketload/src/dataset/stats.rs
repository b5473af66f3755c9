//! Describes a dataset: what it is made of, counts, per-class counts, size percentiles, image
//! dimensions of a sample, and the request cost of reading it once.
//!
//! Three ways in, cheapest first:
//!
//! 1. The manifest at the root (`_bucketload/manifest.bin`, else `_bucketload/manifest.json`):
//!    one GET gives the kind (shards or files), the
//!    samples, bytes, shards or files with their sizes, the classes and how the dataset was made.
//!    Nothing is listed.
//! 2. No manifest, and the objects are mostly `*.tar` shards and their `.idx`: one recursive
//!    listing, then each index (one GET each, many in flight) gives the samples per shard, their
//!    member extensions and sizes; classes are the folders of the sample keys. Shards without an
//!    index are named.
//! 3. Otherwise a dataset of one object per sample: one recursive listing gives keys and sizes;
//!    classes are the first folders below the root.
//!
//! The dimensions come from the JPEG frame header of a deterministic sample of images (evenly
//! spaced in key order), each read with one ranged GET of at most 64 KiB; the sample's GETs run
//! concurrently. In shards the image members located by the indexes are sampled the same way.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use bucketload_format::{DatasetKind, Manifest, Parameters};
use bucketload_store::object_store::{ObjectStoreExt, path::Path};
use bucketload_store::{PriceTable, key_path};
use futures::{StreamExt, TryStreamExt};

use super::jpeg::parse_header;
use crate::base::{DataKey, Entry, Location, Progress, list};
use crate::error::Result;
use crate::shards::stats::{ImageMember, IndexTally, image_members};
use crate::shards::{
    INDEX_SUFFIX, SHARD_EXT, ShardObject, read_all_indexes, read_index, shards_in,
};

use super::tally::FilesTally;

/// Bytes fetched per sampled image: enough for the frame header even behind an EXIF thumbnail.
const HEADER_BYTES: u64 = 64 * 1024;
/// S3 returns at most 1,000 keys per LIST request.
const KEYS_PER_LIST: u64 = 1000;
/// Prefix of bucketload's own objects at a dataset root (never part of the dataset).
const RESERVED: &str = "_bucketload/";

/// Options of [`stats`].
#[derive(Debug, Clone)]
pub struct StatsOptions {
    pub(crate) sample: usize,
    pub(crate) concurrency: usize,
    pub(crate) prices: PriceTable,
    pub(crate) manifest: bool,
}

impl Default for StatsOptions {
    fn default() -> Self {
        StatsOptions {
            sample: 32,
            concurrency: 32,
            prices: PriceTable::default(),
            manifest: true,
        }
    }
}

impl StatsOptions {
    /// Describe the dataset from its manifest when it has one (default `true`), or from a
    /// listing (`false`), which sees objects added or removed since the manifest was written.
    pub fn with_manifest(mut self, yes: bool) -> Self {
        self.manifest = yes;
        self
    }

    /// Images whose header is read (default 32; 0 skips the dimensions).
    pub fn with_sample(mut self, n: usize) -> Self {
        self.sample = n;
        self
    }

    /// Index and header GETs in flight (default 32).
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Prices of requests and transfer (default: S3 Standard in us-east-1, read in-region).
    pub fn with_prices(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }
}

/// SizePercentiles (nearest rank) of sizes in bytes, or of counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SizePercentiles {
    /// Smallest.
    pub p0: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
}

/// Dimensions found in the sampled images.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SampledImages {
    /// Images whose header was read.
    pub sampled: usize,
    /// Count per `WIDTHxHEIGHT`.
    pub dimensions: BTreeMap<String, usize>,
    /// Images whose header could not be read, with the reason.
    pub unreadable: Vec<String>,
}

/// Requests and dollars of one pass over the dataset.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct CostEstimate {
    /// LIST requests (one per 1,000 keys; none when the manifest lists the dataset).
    pub list_requests: u64,
    /// GET requests: one per file, or one streaming GET per shard, plus the manifest's.
    pub get_requests: u64,
    /// Price of the requests in USD.
    pub requests_usd: f64,
    /// Price of the transfer in USD (0 when read in the bucket's region).
    pub transfer_usd: f64,
    /// Shards only: reading every sample in random order instead, one ranged GET per sample
    /// after one GET per index.
    pub random_access: Option<RandomAccessCost>,
}

/// Requests and dollars of reading every sample of a shard dataset by ranged GET.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct RandomAccessCost {
    /// GET requests: the indexes (and the manifest) plus one per sample.
    pub get_requests: u64,
    /// Price of the requests in USD.
    pub requests_usd: f64,
}

/// Where the numbers of a [`DatasetStats`] come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StatsFrom {
    /// The manifest (`_bucketload/manifest.bin` or `_bucketload/manifest.json`; one GET,
    /// nothing listed).
    Manifest,
    /// A listing and the shards' `.idx` objects (one GET each).
    Indexes,
    /// A listing of the objects.
    Listing,
}

/// How the classes of a [`DatasetStats`] were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClassesFrom {
    /// Recorded in the manifest.
    Manifest,
    /// The first folder below the dataset root of each object.
    FirstFolder,
    /// The folder of each sample key inside the shards (`class_003/000123` → `class_003`).
    KeyFolder,
}

/// The shards of a shard dataset.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ShardStats {
    /// Number of shards.
    pub count: u64,
    /// Indexes read (none when the manifest describes the dataset).
    pub indexes_read: u64,
    /// Full URIs of the shards without an index, whose samples are not counted.
    pub unindexed: Vec<String>,
    /// Samples per shard (over the shards whose samples are known).
    pub samples_per_shard: SizePercentiles,
    /// Bytes per shard (every shard).
    pub bytes_per_shard: SizePercentiles,
    /// Bytes of member data per sample, from the indexes.
    pub sample_bytes: Option<SizePercentiles>,
    /// Members per extension (`jpg`, `cls`), from the indexes.
    pub extensions: BTreeMap<String, u64>,
}

/// What [`stats`] found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DatasetStats {
    /// URI of the dataset.
    pub uri: String,
    /// `shards` (tar shards) or `files` (one object per sample).
    pub kind: DatasetKind,
    /// Where the numbers come from.
    pub from: StatsFrom,
    /// Objects one pass reads: the files, or the shards.
    pub objects: u64,
    /// Samples: one per file, or as the manifest and indexes count them in shards.
    pub samples: u64,
    /// Total size of those objects in bytes.
    pub bytes: u64,
    /// Samples per class (empty when no class is known).
    pub classes: BTreeMap<String, u64>,
    /// How the classes were found (absent without classes).
    pub classes_from: Option<ClassesFrom>,
    /// Size percentiles of the objects (files, or shards).
    pub sizes: SizePercentiles,
    /// Shard datasets: shards, samples per shard and what the indexes say.
    pub shards: Option<ShardStats>,
    /// How the dataset was made, from its manifest.
    pub parameters: Option<Parameters>,
    /// The manifest read, relative to the root (`_bucketload/manifest.bin` or
    /// `_bucketload/manifest.json`), when the numbers come from one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    /// Image dimensions of a sample.
    pub images: SampledImages,
    /// Cost of reading every object once.
    pub cost: CostEstimate,
}

impl DatasetStats {
    /// Stats of `kind` found `from` somewhere, with every count zero.
    pub(crate) fn empty(uri: String, kind: DatasetKind, from: StatsFrom) -> DatasetStats {
        DatasetStats {
            uri,
            kind,
            from,
            objects: 0,
            samples: 0,
            bytes: 0,
            classes: BTreeMap::new(),
            classes_from: None,
            sizes: SizePercentiles::default(),
            shards: None,
            parameters: None,
            manifest: None,
            images: SampledImages::default(),
            cost: CostEstimate::default(),
        }
    }
}

/// Describes the dataset in `location`: from its manifest if it has one, else from a listing
/// (and the indexes of its shards if it is made of shards). An empty dataset has no objects.
pub async fn stats(
    location: &Location,
    options: &StatsOptions,
    progress: &dyn Progress,
) -> Result<DatasetStats> {
    let read = match options.manifest {
        true => read_manifest(location).await?,
        false => None,
    };
    if let Some((key, mut manifest, files)) = read {
        let mut stats = match manifest.kind {
            DatasetKind::Files => files_from_manifest(location, manifest, files, options).await,
            DatasetKind::Shards => {
                manifest.files.clear();
                shards_from_manifest(location, manifest, options).await
            }
        }?;
        stats.manifest = Some(key.to_string());
        return Ok(stats);
    }
    let listed = list_dataset(location, progress).await?;
    let shards = shards_in(&listed.shard_files);
    let found = shards.len() as u64;
    let stats = match is_shard_dataset(listed.files.objects as usize, &shards) {
        true => shards_from_indexes(location, listed.paths, shards, options).await?,
        false => files_from_listing(location, listed.files, options).await?,
    };
    if listed.unfinished {
        warn_unfinished(location, found, stats.samples).await?;
    }
    Ok(stats)
}

/// What stats keeps of a manifest's entries as they stream by: files tallied (never held),
/// shards kept (one entry a shard), and the first error of the tally.
#[derive(Default)]
struct ManifestEntries {
    files: FilesTally,
    shards: Vec<bucketload_format::ShardEntry>,
    failed: Option<crate::Error>,
}

/// The dataset's manifest, if it has one: where it was, its metadata with its shards (a files
/// manifest's entries are not kept), and its files tallied.
async fn read_manifest(location: &Location) -> Result<Option<(Path, Manifest, FilesTally)>> {
    let kept = Arc::new(Mutex::new(ManifestEntries::default()));
    let into = Arc::clone(&kept);
    let sink = move |entry: bucketload_format::Entry<'_>| {
        let mut into = into.lock().unwrap_or_else(PoisonError::into_inner);
        match entry {
            bucketload_format::Entry::File(file) if into.failed.is_none() => {
                if let Err(e) = into.files.add(&DataKey::new(&file.key), file.size) {
                    into.failed = Some(e);
                }
            }
            bucketload_format::Entry::File(_) => {}
            bucketload_format::Entry::Shard(shard) => into.shards.push(shard.clone()),
        }
        Ok(())
    };
    let Some(read) = location.read_manifest(sink).await? else {
        return Ok(None);
    };
    drop(read.sink);
    let kept = std::mem::take(&mut *kept.lock().unwrap_or_else(PoisonError::into_inner));
    if let Some(e) = kept.failed {
        return Err(e);
    }
    let mut manifest = read.header.into_manifest();
    manifest.shards = kept.shards;
    Ok(Some((read.key, manifest, kept.files)))
}

/// Warns that the `bucketload shard` run whose run record is at the root of `location` never
/// finished (there is no manifest), with how much is missing: the figures describe only the
/// `found` shards.
async fn warn_unfinished(location: &Location, found: u64, samples: u64) -> Result<()> {
    if let Some(planned) = crate::shards::planned(location).await? {
        let unfinished = crate::Error::Unfinished {
            dataset: location.to_string(),
            run: location.uri_of(&Path::from(crate::shards::RUN_PATH)),
            planned_shards: planned.shards,
            planned_samples: planned.samples,
            found_shards: found,
            found_samples: samples,
        };
        tracing::warn!("{unfinished}");
    }
    Ok(())
}

/// Shards and their indexes make more than half of the objects.
fn is_shard_dataset(objects: usize, shards: &[ShardObject]) -> bool {
    let indexed = shards.iter().filter(|s| s.has_index).count();
    !shards.is_empty() && 2 * (shards.len() + indexed) > objects
}

/// Describes a shard dataset from its manifest. Images are sampled from the first shard (one
/// more GET for its index), when it has one.
async fn shards_from_manifest(
    location: &Location,
    manifest: Manifest,
    options: &StatsOptions,
) -> Result<DatasetStats> {
    let mut out = DatasetStats::empty(
        location.to_string(),
        DatasetKind::Shards,
        StatsFrom::Manifest,
    );
    let bytes: Vec<u64> = manifest.shards.iter().map(|s| s.bytes).collect();
    out.objects = manifest.shards.len() as u64;
    out.samples = manifest.samples;
    out.bytes = manifest.bytes;
    out.sizes = percentiles_of(bytes);
    out.shards = Some(ShardStats {
        count: out.objects,
        samples_per_shard: percentiles_of(manifest.shards.iter().map(|s| s.samples).collect()),
        bytes_per_shard: out.sizes,
        ..ShardStats::default()
    });
    out.classes = manifest_classes(&manifest);
    out.classes_from = (!out.classes.is_empty()).then_some(ClassesFrom::Manifest);
    if let Some(first) = manifest.shards.first().filter(|_| options.sample > 0) {
        let key = key_path(&first.name);
        if let Some(index) = read_index(location, &key).await? {
            out.images = sample_images(
                location,
                probes(image_members(location, &key, &index)),
                options,
            )
            .await?;
        }
    }
    let prices = &options.prices;
    out.cost = shard_cost(0, 1, out.objects, out.samples, out.bytes, prices);
    out.parameters = Some(manifest.parameters);
    Ok(out)
}

/// Describes a shard dataset without manifest from the indexes of `shards`, found in the
/// recursive listing of `objects` objects (whose keys object_store spells).
async fn shards_from_indexes(
    location: &Location,
    objects: u64,
    shards: Vec<ShardObject>,
    options: &StatsOptions,
) -> Result<DatasetStats> {
    let mut out = DatasetStats::empty(
        location.to_string(),
        DatasetKind::Shards,
        StatsFrom::Indexes,
    );
    let read = read_all_indexes(location, shards, options.concurrency).await?;
    out.objects = read.len() as u64;
    out.bytes = read.iter().map(|s| s.size).sum();
    out.sizes = percentiles_of(read.iter().map(|s| s.size).collect());
    let tally = IndexTally::of(location, &read);
    out.samples = tally.samples.iter().sum();
    out.classes_from = (!tally.classes.is_empty()).then_some(ClassesFrom::KeyFolder);
    out.classes = tally.classes;
    let indexed = tally.samples.len() as u64;
    out.shards = Some(ShardStats {
        count: out.objects,
        indexes_read: indexed,
        unindexed: tally.unindexed,
        samples_per_shard: percentiles_of(tally.samples),
        bytes_per_shard: out.sizes,
        sample_bytes: (indexed > 0).then(|| percentiles_of(tally.sample_bytes)),
        extensions: tally.extensions,
    });
    out.images = sample_images(location, probes(tally.images), options).await?;
    let list_requests = objects.div_ceil(KEYS_PER_LIST).max(1);
    let prices = &options.prices;
    out.cost = shard_cost(
        list_requests,
        0,
        out.objects,
        out.samples,
        out.bytes,
        prices,
    );
    Ok(out)
}

/// The JPEG members of shards as places to read a header from.
fn probes(members: Vec<ImageMember>) -> Vec<Probe> {
    members
        .into_iter()
        .map(|m| Probe {
            key: DataKey::Path(m.shard),
            start: m.offset,
            size: m.size,
            name: m.name,
        })
        .collect()
}

/// One pass: `manifest` GETs (0 or 1) and one streaming GET per shard; and the random-access
/// alternative: the same plus one ranged GET per sample (each index is read once in place of
/// its shard).
fn shard_cost(
    list_requests: u64,
    manifest: u64,
    shards: u64,
    samples: u64,
    bytes: u64,
    prices: &PriceTable,
) -> CostEstimate {
    let mut estimate = cost(list_requests, manifest + shards, bytes, prices);
    let random = manifest + shards + samples;
    estimate.random_access = Some(RandomAccessCost {
        get_requests: random,
        requests_usd: cost(list_requests, random, bytes, prices).requests_usd,
    });
    estimate
}

/// What the listing of a dataset without manifest found.
struct Listed {
    /// The objects but bucketload's own, as a files dataset.
    files: FilesTally,
    /// How many of them have a key object_store spells.
    paths: u64,
    /// Those among them that are tar shards or shard indexes, with their sizes.
    shard_files: Vec<(Path, u64)>,
    /// A run record is there without a manifest (a `bucketload shard` run that never finished).
    unfinished: bool,
}

/// Tallies every object below `location` but bucketload's own, as the listing streams past.
async fn list_dataset(location: &Location, progress: &dyn Progress) -> Result<Listed> {
    let mut listed = Listed {
        files: FilesTally::default(),
        paths: 0,
        shard_files: Vec::new(),
        unfinished: false,
    };
    let (mut run, mut manifest) = (false, false);
    let mut listing = list(location, None, true);
    while let Some(entry) = listing.try_next().await? {
        match entry {
            Entry::Object(meta) => {
                progress.advance(1, meta.size);
                let key = meta.location.as_ref();
                run |= key == crate::shards::RUN_PATH;
                manifest |= bucketload_format::MANIFEST_PATHS.contains(&key);
                if key.starts_with(RESERVED) {
                    continue;
                }
                listed.paths += 1;
                if key.ends_with(SHARD_EXT) || key.ends_with(INDEX_SUFFIX) {
                    listed.shard_files.push((meta.location.clone(), meta.size));
                }
                listed.files.add(&DataKey::Path(meta.location), meta.size)?;
            }
            Entry::Unaddressable(found) => {
                progress.advance(1, found.size);
                listed.files.add(&DataKey::new(&found.key), found.size)?;
            }
            // Folder markers are folders, not samples.
            _ => {}
        }
    }
    progress.finish();
    listed.unfinished = run && !manifest;
    Ok(listed)
}

async fn files_from_listing(
    location: &Location,
    files: FilesTally,
    options: &StatsOptions,
) -> Result<DatasetStats> {
    let mut out = DatasetStats::empty(location.to_string(), DatasetKind::Files, StatsFrom::Listing);
    let classes = describe_files(&mut out, location, files, options).await?;
    out.classes = classes;
    out.classes_from = (!out.classes.is_empty()).then_some(ClassesFrom::FirstFolder);
    let list_requests = out.objects.div_ceil(KEYS_PER_LIST).max(1);
    out.cost = cost(list_requests, out.objects, out.bytes, &options.prices);
    Ok(out)
}

/// Describes a `files` dataset from its manifest: the metadata, and the files tallied as they
/// streamed by.
async fn files_from_manifest(
    location: &Location,
    manifest: Manifest,
    files: FilesTally,
    options: &StatsOptions,
) -> Result<DatasetStats> {
    let mut out = DatasetStats::empty(
        location.to_string(),
        DatasetKind::Files,
        StatsFrom::Manifest,
    );
    describe_files(&mut out, location, files, options).await?;
    out.classes = manifest_classes(&manifest);
    out.classes_from = (!out.classes.is_empty()).then_some(ClassesFrom::Manifest);
    out.parameters = Some(manifest.parameters);
    // The manifest's GET, then one per file.
    out.cost = cost(0, out.objects + 1, out.bytes, &options.prices);
    Ok(out)
}

/// Counts, sizes and sampled dimensions of one-object-per-sample `files`; returns the
/// objects per first folder.
async fn describe_files(
    out: &mut DatasetStats,
    location: &Location,
    files: FilesTally,
    options: &StatsOptions,
) -> Result<BTreeMap<String, u64>> {
    out.objects = files.objects;
    out.samples = out.objects;
    out.bytes = files.bytes;
    out.sizes = files.sizes.percentiles();
    let sample = options.sample;
    let jpegs: Vec<Probe> = files
        .jpegs
        .pick(|n| spread(n, sample))?
        .into_iter()
        .map(|(key, size)| Probe::whole(location, &key, size))
        .collect();
    // Already the sample: take every one.
    let every = StatsOptions {
        sample: jpegs.len(),
        ..options.clone()
    };
    out.images = sample_images(location, jpegs, &every).await?;
    Ok(files.classes)
}

/// The manifest's classes as a map.
fn manifest_classes(manifest: &Manifest) -> BTreeMap<String, u64> {
    manifest
        .classes
        .iter()
        .map(|c| (c.name.clone(), c.count))
        .collect()
}

/// Nearest-rank percentiles of `values` (any order).
fn percentiles_of(mut values: Vec<u64>) -> SizePercentiles {
    values.sort_unstable();
    percentiles(&values)
}

/// Nearest-rank percentiles of sorted `sizes`.
pub(crate) fn percentiles(sorted: &[u64]) -> SizePercentiles {
    let rank = |q: f64| -> u64 {
        if sorted.is_empty() {
            return 0;
        }
        let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
        sorted[i]
    };
    SizePercentiles {
        p0: sorted.first().copied().unwrap_or(0),
        p50: rank(0.5),
        p90: rank(0.9),
        p99: rank(0.99),
        max: sorted.last().copied().unwrap_or(0),
    }
}

/// `n` indices evenly spaced over `0..len` (all of them when `n >= len`).
fn spread(len: usize, n: usize) -> Vec<usize> {
    let n = n.min(len);
    (0..n).map(|i| i * len / n).collect()
}

/// Where to read an image's header: in object `key`, `size` bytes from `start`; `name` is how
/// reports name it.
#[derive(Debug, Clone)]
struct Probe {
    key: DataKey,
    start: u64,
    size: u64,
    name: String,
}

impl Probe {
    /// The whole object `key`.
    fn whole(location: &Location, key: &DataKey, size: u64) -> Probe {
        Probe {
            key: key.clone(),
            start: 0,
            size,
            name: location.uri_of_data_key(key),
        }
    }
}

/// Reads the header of `options.sample` of `images`, evenly spread in the order given.
async fn sample_images(
    location: &Location,
    images: Vec<Probe>,
    options: &StatsOptions,
) -> Result<SampledImages> {
    let chosen: Vec<&Probe> = spread(images.len(), options.sample)
        .into_iter()
        .map(|i| &images[i])
        .collect();
    let results: Vec<Result<(String, std::result::Result<String, String>)>> =
        futures::stream::iter(chosen)
            .map(|probe| read_dimensions(location, probe))
            .buffered(options.concurrency)
            .collect()
            .await;
    let mut images = SampledImages::default();
    for result in results {
        let (name, dims) = result?;
        images.sampled += 1;
        match dims {
            Ok(d) => *images.dimensions.entry(d).or_insert(0) += 1,
            Err(reason) => images.unreadable.push(format!("{name}: {reason}")),
        }
    }
    Ok(images)
}

/// Reads the header of one image: `Ok((name, Ok("WxH")))`, or `Ok((name, Err(reason)))` for an
/// image that is not a readable JPEG; store failures are errors.
async fn read_dimensions(
    location: &Location,
    probe: &Probe,
) -> Result<(String, std::result::Result<String, String>)> {
    let name = probe.name.clone();
    if probe.size == 0 {
        return Ok((name, Err("empty file".to_string())));
    }
    let range = probe.start..probe.start + probe.size.min(HEADER_BYTES);
    let (store, path) = location.address(&probe.key)?;
    let head = store
        .get_range(&path, range)
        .await
        .map_err(|e| location.error_of_key(&probe.key, e))?;
    let dims = parse_header(&head)
        .map(|i| format!("{}x{}", i.width, i.height))
        .map_err(|e| e.to_string());
    Ok((name, dims))
}

/// `list_requests` LIST and `get_requests` GET requests reading `bytes`. LIST is priced as a
/// write-tier request and GET as a read-tier one, as S3 does.
fn cost(list_requests: u64, get_requests: u64, bytes: u64, prices: &PriceTable) -> CostEstimate {
    let requests_usd = list_requests as f64 / 1000.0 * prices.write_per_1000
        + get_requests as f64 / 1000.0 * prices.read_per_1000;
    let transfer_usd = if prices.in_region {
        0.0
    } else {
        bytes as f64 / 1e9 * prices.transfer_out_per_gb
    };
    CostEstimate {
        list_requests,
        get_requests,
        requests_usd,
        transfer_usd,
        random_access: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let sizes: Vec<u64> = (1..=100).collect();
        assert_eq!(
            percentiles(&sizes),
            SizePercentiles {
                p0: 1,
                p50: 50,
                p90: 90,
                p99: 99,
                max: 100
            }
        );
        assert_eq!(
            percentiles_of(vec![7]),
            SizePercentiles {
                p0: 7,
                p50: 7,
                p90: 7,
                p99: 7,
                max: 7
            }
        );
        assert_eq!(percentiles_of(vec![3, 1, 2]).p50, 2);
        assert_eq!(percentiles(&[]), SizePercentiles::default());
    }

    #[test]
    fn sample_is_evenly_spread_and_bounded() {
        assert_eq!(spread(10, 5), vec![0, 2, 4, 6, 8]);
        assert_eq!(spread(3, 32), vec![0, 1, 2]);
        assert!(spread(0, 4).is_empty());
    }

    #[test]
    fn classes_are_first_folders() {
        let objs = vec![
            (DataKey::new("a/1.jpg"), 1),
            (DataKey::new("a/b/2.jpg"), 1),
            (DataKey::new("top.jpg"), 1),
            (DataKey::new("a//3.jpg"), 1),
        ];
        let mut tally = FilesTally::default();
        for (key, size) in &objs {
            tally.add(key, *size).unwrap();
        }
        let c = tally.classes;
        assert_eq!(c.len(), 1);
        assert_eq!(c["a"], 3);
    }

    #[test]
    fn shards_and_indexes_must_be_most_objects() {
        let objs = |keys: &[&str]| -> Vec<(Path, u64)> {
            keys.iter().map(|k| (Path::from(*k), 1)).collect()
        };
        let yes = objs(&["a.tar", "a.tar.idx", "b.tar", "README"]);
        assert!(is_shard_dataset(yes.len(), &shards_in(&yes)));
        let no = objs(&["a.tar", "1.jpg", "2.jpg"]);
        assert!(!is_shard_dataset(no.len(), &shards_in(&no)));
        let half = objs(&["a.tar", "1.jpg"]);
        assert!(!is_shard_dataset(half.len(), &shards_in(&half)));
        assert!(!is_shard_dataset(0, &[]));
    }

    #[test]
    fn cost_prices_lists_as_writes_and_gets_as_reads() {
        let prices = PriceTable::default();
        let c = cost(3, 2001, 2_000_000_000, &prices);
        assert_eq!((c.list_requests, c.get_requests), (3, 2001));
        assert!((c.requests_usd - (3.0 * 0.000005 + 2001.0 * 0.0000004)).abs() < 1e-12);
        assert_eq!(c.transfer_usd, 0.0);
        let out = PriceTable {
            in_region: false,
            ..PriceTable::default()
        };
        assert!((cost(0, 1, 2_000_000_000, &out).transfer_usd - 0.18).abs() < 1e-9);
    }
}

#[cfg(test)]
mod shard_tests {
    use std::sync::Arc;

    use bucketload_format::{ShardIndexBuilder, TarWriter};
    use bucketload_store::object_store::{ObjectStore, ObjectStoreExt, memory::InMemory};

    use super::*;
    use crate::base::NoProgress;

    /// A shard of `samples` (`<class>/<n>.txt` + `.cls`, data `n` bytes long) and its index.
    fn shard(samples: &[(&str, usize)]) -> (Vec<u8>, Vec<u8>) {
        let (mut tar, mut writer) = (Vec::new(), TarWriter::new("s.tar"));
        let mut index = ShardIndexBuilder::new();
        for (class, n) in samples {
            for (ext, data) in [("txt", vec![b'x'; *n]), ("cls", b"0".to_vec())] {
                let name = format!("{class}/{n:04}.{ext}");
                let at = writer.append(&mut tar, &name, &data).unwrap();
                index.add(&name, at, &data);
            }
        }
        let summary = writer.finish(&mut tar).unwrap();
        let idx = index.finish(&summary).to_bytes("s.tar.idx").unwrap();
        (tar, idx)
    }

    #[tokio::test]
    async fn indexes_give_samples_classes_and_extensions_and_name_unindexed_shards() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let shards = [
            shard(&[("a", 1), ("a", 2), ("b", 3)]),
            shard(&[("b", 4)]),
            shard(&[("a", 5), ("a", 6)]),
        ];
        for (i, (tar, idx)) in shards.iter().enumerate() {
            let key = format!("{i}.tar");
            store
                .put(&Path::from(key.as_str()), tar.clone().into())
                .await
                .unwrap();
            if i != 2 {
                let idx_key = Path::from(format!("{key}.idx"));
                store.put(&idx_key, idx.clone().into()).await.unwrap();
            }
        }
        store
            .put(&Path::from("README"), vec![1].into())
            .await
            .unwrap();
        let loc = Location::new(store, "mem://d", "memory");
        let options = StatsOptions::default();
        let s = stats(&loc, &options, &NoProgress).await.unwrap();
        assert_eq!((s.kind, s.from), (DatasetKind::Shards, StatsFrom::Indexes));
        assert_eq!((s.objects, s.samples), (3, 4));
        let want: u64 = shards.iter().map(|(t, _)| t.len() as u64).sum();
        assert_eq!(s.bytes, want);
        assert_eq!(
            s.classes,
            BTreeMap::from([("a".into(), 2), ("b".into(), 2)])
        );
        assert_eq!(s.classes_from, Some(ClassesFrom::KeyFolder));
        let sh = s.shards.unwrap();
        assert_eq!((sh.count, sh.indexes_read), (3, 2));
        assert_eq!(sh.unindexed, ["mem://d/2.tar"]);
        assert_eq!((sh.samples_per_shard.p0, sh.samples_per_shard.max), (1, 3));
        let bytes = sh.sample_bytes.unwrap();
        assert_eq!((bytes.p0, bytes.max), (2, 5));
        assert_eq!(
            sh.extensions,
            BTreeMap::from([("cls".into(), 4), ("txt".into(), 4)])
        );
        // One listing of 6 objects; 3 streaming GETs; 3 index + 4 sample GETs at random.
        assert_eq!((s.cost.list_requests, s.cost.get_requests), (1, 3));
        assert_eq!(s.cost.random_access.unwrap().get_requests, 7);
        assert_eq!(s.images.sampled, 0);
    }

    #[test]
    fn random_access_reads_every_index_and_sample() {
        let prices = PriceTable::default();
        // From a manifest: 1 + 3 GETs in a pass; 1 + 3 indexes + 30 samples at random.
        let c = shard_cost(0, 1, 3, 30, 3000, &prices);
        assert_eq!((c.list_requests, c.get_requests), (0, 4));
        assert_eq!(c.random_access.unwrap().get_requests, 34);
        // From a listing: 3 GETs in a pass; 3 indexes + 20 samples at random.
        let c = shard_cost(1, 0, 3, 20, 3000, &prices);
        assert_eq!(c.get_requests, 3);
        let random = c.random_access.unwrap();
        assert_eq!(random.get_requests, 23);
        let want = 0.000005 + 23.0 * 0.0000004;
        assert!((random.requests_usd - want).abs() < 1e-12, "{random:?}");
    }
}
