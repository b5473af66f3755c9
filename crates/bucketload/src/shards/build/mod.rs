//! `bucketload shard`: turn a dataset of one object per sample into tar shards with indexes and a
//! manifest.
//!
//! 1. **Plan.** The source is read from its `files` manifest if it has one (one GET), otherwise
//!    listed once. Objects sharing a WebDataset key form a sample; samples are labelled from
//!    their class folder, optionally shuffled with a fixed algorithm and seed, and cut into
//!    shards by size or count ([`plan`]). The plan's digest identifies the run.
//! 2. **Destination check.** The destination must be empty or hold an earlier run of the same
//!    plan: shards whose index exists and agrees with the plan are kept (resume), everything
//!    else is redone ([`dest`]).
//! 3. **Write.** Objects are fetched with hundreds of GETs in flight under a byte budget, in
//!    plan order; each shard streams out as a multipart upload (completed only when the whole
//!    shard is written, so no partial shard is ever visible) and its index is PUT after it
//!    ([`write`]).
//! 4. **Manifest last.** `_bucketload/manifest.json` (or, for `--part i/N`, the slice's manifest
//!    under `_bucketload/parts/`, stitched later by [`merge_parts`]) is written only after
//!    every shard it names is complete.

mod dest;
mod plan;
pub(crate) mod table;
mod write;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bucketload_format::{
    ClassCount, DatasetKind, MANIFEST_VERSION, Manifest, ManifestFormat, Parameters, PartSpec,
    ShardEntry, merge_manifests,
};
use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path};
use bucketload_store::{ETag, Store, key_path};
use futures::TryStreamExt;

use super::manifest::{now_rfc3339, publish_manifest};
use crate::Setting;
use crate::base::{DataKey, Location, Progress, list_each, warn_unaddressable};
use crate::error::{Error, Result};

pub(crate) use dest::planned;
pub use plan::{LABEL_EXT, Plan, PlanBuilder, PlannedSample, SourceObject, make_plan};

/// Folder of the slices' manifests at the destination root.
pub const PARTS_DIR: &str = "_bucketload/parts";
/// The run file: which plan the shards at the destination belong to.
pub const RUN_PATH: &str = "_bucketload/run.json";

/// How samples are cut into shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Shards of at most this many bytes (a sample never spans two shards).
    Bytes(u64),
    /// Shards of this many samples (the last may have fewer).
    Samples(u64),
}

/// Where labels come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelFrom {
    /// Folder labels when every sample sits in a folder and none has a `.cls` member already.
    Auto,
    /// The sample's folder (`n01/000123.jpg` → class `n01`); an error for samples outside one.
    Folder,
    /// No labels.
    None,
}

impl std::str::FromStr for LabelFrom {
    type Err = Error;

    /// `auto`, `folder` or `none`.
    fn from_str(s: &str) -> Result<LabelFrom> {
        match s {
            "auto" => Ok(LabelFrom::Auto),
            "folder" => Ok(LabelFrom::Folder),
            "none" => Ok(LabelFrom::None),
            other => Err(Error::invalid_input(format!(
                "{} {other:?} is not \"auto\", \"folder\" or \"none\"",
                Setting::LabelFrom
            ))),
        }
    }
}

impl LabelFrom {
    fn name(self) -> &'static str {
        match self {
            LabelFrom::Auto | LabelFrom::Folder => "folder",
            LabelFrom::None => "none",
        }
    }
}

/// Options of [`shard_dataset`].
#[derive(Debug, Clone)]
pub struct ShardOptions {
    cut: Cut,
    seed: Option<u64>,
    label_from: LabelFrom,
    part: Option<PartSpec>,
    gets_in_flight: usize,
    buffer_bytes: u64,
    parts_per_shard: usize,
    skip_missing: bool,
    skip_changed: bool,
    overwrite: bool,
    md5: bool,
    source_manifest: bool,
    manifest_format: ManifestFormat,
}

/// Builder of [`ShardOptions`].
#[derive(Debug, Clone)]
pub struct ShardOptionsBuilder {
    inner: ShardOptions,
}

/// Default shard size: 256 MiB.
pub const DEFAULT_SHARD_SIZE: u64 = 256 << 20;
/// Default GETs of source objects in flight: sharding small objects is latency-bound. The
/// source store must allow as many requests at once (its concurrency).
pub const DEFAULT_GETS_IN_FLIGHT: usize = 256;

impl ShardOptions {
    /// Defaults: 256 MiB shards, sorted order, automatic labels, 256 GETs in flight, 256 MiB of
    /// fetched objects buffered, 8 upload parts in flight per shard, CRC32C but no MD5.
    pub fn builder() -> ShardOptionsBuilder {
        ShardOptionsBuilder {
            inner: ShardOptions {
                cut: Cut::Bytes(DEFAULT_SHARD_SIZE),
                seed: None,
                label_from: LabelFrom::Auto,
                part: None,
                gets_in_flight: DEFAULT_GETS_IN_FLIGHT,
                buffer_bytes: 256 << 20,
                parts_per_shard: 8,
                skip_missing: false,
                skip_changed: false,
                overwrite: false,
                md5: false,
                source_manifest: true,
                manifest_format: ManifestFormat::Binary,
            },
        }
    }
}

impl ShardOptionsBuilder {
    /// How samples are cut into shards.
    pub fn with_cut(mut self, cut: Cut) -> Self {
        self.inner.cut = cut;
        self
    }

    /// Shuffle samples with this seed before cutting (`None`: key order).
    pub fn with_seed(mut self, seed: Option<u64>) -> Self {
        self.inner.seed = seed;
        self
    }

    /// Where labels come from.
    pub fn with_label_from(mut self, from: LabelFrom) -> Self {
        self.inner.label_from = from;
        self
    }

    /// Build only slice `part` of the shards.
    pub fn with_part(mut self, part: Option<PartSpec>) -> Self {
        self.inner.part = part;
        self
    }

    /// Source GETs in flight.
    pub fn with_gets_in_flight(mut self, n: usize) -> Self {
        self.inner.gets_in_flight = n;
        self
    }

    /// Bytes of fetched objects held before they are written (an object larger than this is
    /// still fetched, alone).
    pub fn with_buffer_bytes(mut self, bytes: u64) -> Self {
        self.inner.buffer_bytes = bytes;
        self
    }

    /// Upload parts in flight per shard.
    pub fn with_parts_per_shard(mut self, n: usize) -> Self {
        self.inner.parts_per_shard = n;
        self
    }

    /// Leave out objects deleted since they were listed (counted and reported) instead of
    /// failing.
    pub fn with_skip_missing(mut self, yes: bool) -> Self {
        self.inner.skip_missing = yes;
        self
    }

    /// Leave out objects that differ from what the source's manifest or listing says of them
    /// (size, ETag, CRC32C when recorded), counted and reported, instead of failing (the
    /// default). A changed object is never packaged.
    pub fn with_skip_changed(mut self, yes: bool) -> Self {
        self.inner.skip_changed = yes;
        self
    }

    /// Delete what an earlier run of another plan left at the destination and start over.
    pub fn with_overwrite(mut self, yes: bool) -> Self {
        self.inner.overwrite = yes;
        self
    }

    /// Also hash every shard with MD5 and record it in the index and the manifest (the shard's
    /// CRC32C is always recorded). MD5 costs about 1.5 ms of CPU per MB written.
    pub fn with_md5(mut self, yes: bool) -> Self {
        self.inner.md5 = yes;
        self
    }

    /// Take the source's objects from its `files` manifest when it has one (the default), or
    /// list the source (`false`): objects added since the manifest was written are then
    /// packaged too.
    pub fn with_source_manifest(mut self, yes: bool) -> Self {
        self.inner.source_manifest = yes;
        self
    }

    /// The format of the dataset manifest written (default: format 2,
    /// `_bucketload/manifest.bin`; format 1, `_bucketload/manifest.json`, for bucketload
    /// versions that read only it). The manifest of the other format is deleted first. Slice
    /// manifests of `--part` runs are JSON either way.
    pub fn with_manifest_format(mut self, format: ManifestFormat) -> Self {
        self.inner.manifest_format = format;
        self
    }

    /// Validates the options.
    pub fn build(self) -> Result<ShardOptions> {
        let o = &self.inner;
        if matches!(o.cut, Cut::Bytes(0) | Cut::Samples(0)) {
            return Err(Error::invalid_input(
                "the shard size and samples per shard must be at least 1",
            ));
        }
        if o.gets_in_flight == 0 || o.parts_per_shard == 0 || o.buffer_bytes == 0 {
            return Err(Error::invalid_input(
                "GETs in flight, upload parts per shard and the buffer must be at least 1",
            ));
        }
        if let Some(p) = o.part
            && (p.count == 0 || p.index >= p.count)
        {
            return Err(Error::invalid_input(format!(
                "{} {}/{} is not a slice: slice i of N needs 0 <= i < N",
                Setting::Part,
                p.index,
                p.count
            )));
        }
        Ok(self.inner)
    }
}

/// What [`shard_dataset`] did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardReport {
    /// Digest of the plan.
    pub plan: String,
    /// Shards in the whole plan.
    pub planned_shards: u64,
    /// Shards of this run's slice.
    pub shards: u64,
    /// Shards written now.
    pub written: u64,
    /// Shards an earlier run had finished (kept).
    pub kept: u64,
    /// Samples in this slice's shards.
    pub samples: u64,
    /// Source objects fetched now.
    pub objects: u64,
    /// Source bytes fetched now.
    pub object_bytes: u64,
    /// Bytes of the slice's shards.
    pub shard_bytes: u64,
    /// Source objects left out because they were gone (`--skip-missing`), full URIs.
    pub missing: Vec<String>,
    /// Source objects left out because they changed since the manifest or listing
    /// (`--skip-changed`): full URI, then how it differs.
    pub changed: Vec<String>,
    /// Full URI of the manifest written (the slice's manifest for `--part`).
    pub manifest: String,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Shards the dataset at `src` into `dst`; see the module docs.
pub async fn shard_dataset(
    src: &Store,
    dst: &Store,
    options: &ShardOptions,
    progress: &dyn Progress,
) -> Result<ShardReport> {
    let started = Instant::now();
    check_disjoint(src, dst)?;
    let plan = source_objects(src, options.source_manifest)
        .await?
        .finish(options)?;
    tracing::debug!(
        samples = plan.len(),
        bytes = plan.heap_bytes(),
        "planned (bytes: the plan's tables)"
    );
    let part = plan.part_shards(options.part);
    let source = src.uri().to_string();
    let state = dest::prepare(dst, &plan, part.clone(), options, &source).await?;
    let todo: Vec<usize> = part
        .clone()
        .filter(|i| !state.kept.contains_key(i))
        .collect();
    let (objects, bytes) = todo.iter().fold((0, 0), |(o, b), &i| {
        let (objects, bytes) = plan.shard_sources(i);
        (o + objects, b + bytes)
    });
    progress.set_total(objects, Some(bytes));
    let written = write::write_shards(src, dst, &plan, &todo, options, progress).await;
    progress.finish();
    let written = written?;
    let mut report = ShardReport {
        plan: plan.digest.clone(),
        planned_shards: plan.shards.len() as u64,
        shards: part.len() as u64,
        written: written.len() as u64,
        kept: state.kept.len() as u64,
        samples: 0,
        objects: written.iter().map(|w| w.objects).sum(),
        object_bytes: written.iter().map(|w| w.object_bytes).sum(),
        shard_bytes: 0,
        missing: written.iter().flat_map(|w| w.missing.clone()).collect(),
        changed: written.iter().flat_map(|w| w.changed.clone()).collect(),
        manifest: String::new(),
        seconds: 0.0,
    };
    let done: HashMap<usize, write::Finished> = state
        .kept
        .into_iter()
        .chain(written.into_iter().map(|w| (w.shard, w.finished)))
        .collect();
    let manifest = slice_manifest(src, &plan, part, &done, options)?;
    report.samples = manifest.samples;
    report.shard_bytes = manifest.bytes;
    report.manifest = put_manifest(dst, &manifest, options.part, options.manifest_format).await?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Refuses a destination inside the source or the other way round (a second run would shard
/// its own shards).
fn check_disjoint(src: &Store, dst: &Store) -> Result<()> {
    let dir = |store: &Store| format!("{}/", store.uri().to_string().trim_end_matches('/'));
    let (s, d) = (dir(src), dir(dst));
    let same_endpoint = src.config().endpoint() == dst.config().endpoint();
    if same_endpoint && (s.starts_with(&d) || d.starts_with(&s)) {
        return Err(Error::invalid_input(format!(
            "the destination {} and the source {} overlap; write the shards to a prefix outside \
             the source",
            dst.uri(),
            src.uri()
        )));
    }
    Ok(())
}

/// The source's objects, gathered for the plan: from its `files` manifest if it has one and
/// `use_manifest`, else from one listing; streamed either way, never held as a list.
async fn source_objects(src: &Store, use_manifest: bool) -> Result<PlanBuilder> {
    let location = Location::from_store(src);
    if use_manifest && let Some(builder) = from_manifest(src, &location).await? {
        tracing::info!(files = builder.objects(), "source read from its manifest");
        return Ok(builder);
    }
    // Keys object_store cannot spell are left out, as shards are read and written through
    // paths.
    let mut builder = PlanBuilder::new();
    let mut listing = list_each(&location);
    while let Some(object) = listing.try_next().await? {
        let path = match object.key {
            DataKey::Path(path) => path,
            DataKey::Raw(key) => {
                warn_unaddressable(&location, &key);
                continue;
            }
        };
        let key = path.as_ref();
        if !key.starts_with("_bucketload/") {
            builder.push(SourceObject {
                key: key.to_owned(),
                size: object.size,
                etag: ETag::from_store(object.e_tag.as_deref()),
                crc32c: None,
            });
        }
    }
    Ok(builder)
}

/// The objects of the source's `files` manifest, streamed into a plan; `None` without one.
async fn from_manifest(src: &Store, location: &Location) -> Result<Option<PlanBuilder>> {
    // The parser runs the sink on a blocking thread; the builder comes back through this.
    let builder = Arc::new(Mutex::new(PlanBuilder::new()));
    let into = Arc::clone(&builder);
    let sink = move |entry: bucketload_format::Entry<'_>| {
        if let bucketload_format::Entry::File(f) = entry {
            let mut builder = into.lock().unwrap_or_else(PoisonError::into_inner);
            builder.push(SourceObject {
                etag: ETag::from_store(f.etag.as_deref()),
                crc32c: f
                    .crc32c
                    .as_deref()
                    .and_then(|c| u32::from_str_radix(c, 16).ok()),
                key: f.key.clone(),
                size: f.size,
            });
        }
        Ok(())
    };
    let Some(read) = location.read_manifest(sink).await? else {
        return Ok(None);
    };
    if read.header.kind != DatasetKind::Files {
        return Err(Error::invalid_input(format!(
            "{} already is a shard dataset; shard a one-object-per-sample dataset",
            src.uri()
        )));
    }
    drop(read);
    let mut builder = builder.lock().unwrap_or_else(PoisonError::into_inner);
    Ok(Some(std::mem::take(&mut *builder)))
}

/// The manifest of the slice's shards (the whole dataset without `--part`).
fn slice_manifest(
    src: &Store,
    plan: &Plan,
    part: std::ops::Range<usize>,
    done: &HashMap<usize, write::Finished>,
    options: &ShardOptions,
) -> Result<Manifest> {
    let mut counts = vec![0u64; plan.classes.len()];
    let mut shards: Vec<ShardEntry> = Vec::with_capacity(part.len());
    for i in part {
        let finished = done.get(&i).ok_or_else(|| Error::Task {
            reason: format!("shard {i} was neither written nor kept"),
        })?;
        if !counts.is_empty() {
            let positions = plan.shards[i].clone();
            let held = positions.filter(|p| !finished.left_out.contains(p));
            for class in held.filter_map(|p| plan.sample(p).class) {
                counts[class as usize] += 1;
            }
        }
        shards.push(finished.entry.clone());
    }
    shards.sort_by(|a, b| a.name.cmp(&b.name));
    let classes = plan
        .classes
        .iter()
        .zip(counts)
        // Classes without samples stay: a label is a position in this list.
        .map(|(name, count)| ClassCount {
            name: name.clone(),
            count,
        })
        .collect();
    let (shard_size, samples_per_shard) = match options.cut {
        Cut::Bytes(b) => (Some(b), None),
        Cut::Samples(n) => (None, Some(n)),
    };
    Ok(Manifest {
        format_version: MANIFEST_VERSION,
        kind: DatasetKind::Shards,
        parameters: Parameters {
            source: src.uri().to_string(),
            shard_size,
            samples_per_shard,
            seed: options.seed,
            plan: Some(plan.digest.clone()),
            label_policy: if plan.classes.is_empty() {
                LabelFrom::None.name()
            } else {
                options.label_from.name()
            }
            .to_owned(),
            tool_version: env!("CARGO_PKG_VERSION").to_owned(),
            created: now_rfc3339(),
            part: options.part,
        },
        samples: shards.iter().map(|s| s.samples).sum(),
        bytes: shards.iter().map(|s| s.bytes).sum(),
        classes,
        shards,
        files: Vec::new(),
    })
}

/// Key of the manifest of slice `part`.
pub fn part_manifest_key(part: PartSpec) -> Path {
    Path::from(format!(
        "{PARTS_DIR}/part-{:05}-of-{:05}.json",
        part.index, part.count
    ))
}

/// Writes the manifest of slice `part` (JSON), or the dataset's in `format`.
async fn put_manifest(
    dst: &Store,
    manifest: &Manifest,
    part: Option<PartSpec>,
    format: ManifestFormat,
) -> Result<String> {
    let Some(part) = part else {
        let uri = dst.object_uri(&Path::from(format.path()));
        manifest.validate(&uri)?;
        return publish_manifest(dst, format, manifest.encode(&uri, format)?).await;
    };
    let key = part_manifest_key(part);
    let uri = dst.object_uri(&key);
    manifest.validate(&uri)?;
    dst.object_store()
        .put(&key, PutPayload::from(manifest.to_json()))
        .await
        .map_err(|e| Location::from_store(dst).error(&key, e))?;
    Ok(uri)
}

/// What [`merge_parts`] did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MergeReport {
    /// Slices merged.
    pub parts: u64,
    /// Shards in the merged manifest.
    pub shards: u64,
    /// Samples in the merged manifest.
    pub samples: u64,
    /// Full URI of the manifest written.
    pub manifest: String,
}

/// Stitches the slices' manifests under `_bucketload/parts/` into the dataset manifest, after
/// checking that every slice is there, that they come from one plan, and that every shard and
/// index they name exists with the recorded size.
/// The merged manifest is written in `format` (the other format's is deleted first).
pub async fn merge_parts(dst: &Store, format: ManifestFormat) -> Result<MergeReport> {
    let location = Location::from_store(dst);
    let os = dst.object_store();
    // Only what sharding runs write: slices' manifests, shards and their indexes.
    let (listing, _) = dest::list(dst).await?;
    let mut keys: Vec<&String> = listing
        .keys()
        .filter(|k| k.starts_with(&format!("{PARTS_DIR}/")) && k.ends_with(".json"))
        .collect();
    keys.sort();
    if keys.is_empty() {
        return Err(Error::invalid_input(format!(
            "no slice manifests under {}/{PARTS_DIR}; shard each slice first (a run with {} i/N)",
            dst.uri(),
            Setting::Part
        )));
    }
    let mut parts = Vec::with_capacity(keys.len());
    for key in keys {
        let path = key_path(key);
        let get = os.get(&path).await.map_err(|e| location.error(&path, e))?;
        let bytes = get.bytes().await.map_err(|e| location.error(&path, e))?;
        parts.push(Manifest::from_json(&location.uri_of(&path), &bytes)?);
    }
    let merged = merge_manifests(&parts)?;
    for shard in &merged.shards {
        let missing = |name: &str| Error::Corrupt {
            uri: location.uri_of(&Path::from(name)),
            reason: "a slice manifest names it but it is missing or has another size; run that \
                     slice again"
                .to_owned(),
        };
        if listing.get(&shard.name) != Some(&shard.bytes) {
            return Err(missing(&shard.name));
        }
        if !listing.contains_key(&shard.index) {
            return Err(missing(&shard.index));
        }
    }
    let manifest = put_manifest(dst, &merged, None, format).await?;
    Ok(MergeReport {
        parts: parts.len() as u64,
        shards: merged.shards.len() as u64,
        samples: merged.samples,
        manifest,
    })
}
