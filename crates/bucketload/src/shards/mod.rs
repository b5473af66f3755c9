//! Shard tools: index tar shards that other tools wrote (GNU tar, Python's `tarfile`,
//! WebDataset writers).
//!
//! [`find_shards`] lists the `*.tar` objects below a prefix (or heads one shard) and notes which
//! already have an index; [`index_shards`] streams each shard that needs one with sequential
//! ranged GETs through the format crate's [`TarReader`](bucketload_format::TarReader), several
//! shards in flight, and PUTs `<shard>.idx` beside it only after the whole shard parsed cleanly.
//! A corrupt or truncated shard gets no index; its error (naming the shard and the byte offset)
//! is kept in [`IndexReport::failures`] and the other shards are still indexed.
//!
//! [`write_files_manifest`] describes a one-object-per-sample dataset: it reads every object
//! once for its CRC32C and writes the `files` manifest (`_bucketload/manifest.json`) last.
//!
//! [`verify`] reads a dataset once and compares it with its `files` manifest or its shard
//! indexes, reporting every [`Problem`].
//!
//! ```no_run
//! use bucketload::base::NoProgress;
//! use bucketload::shards::{IndexOptions, find_shards, index_shards};
//! use bucketload_store::{Store, StoreConfig};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Store::open("s3://demo/shards", &StoreConfig::from_env())?;
//! let shards = find_shards(&store, None).await?;
//! let report = index_shards(&store, shards, &IndexOptions::builder().build()?, &NoProgress).await;
//! println!("indexed {} shards, {} failed", report.indexed, report.failures.len());
//! # Ok(()) }
//! ```

pub(crate) mod build;
mod indexes;
mod manifest;
mod scan;
pub(crate) mod stats;
mod verify;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

pub use bucketload_format as format;
use bucketload_format::ShardIndex;
use bucketload_store::Store;
use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path};
use futures::{StreamExt, TryStreamExt};

use crate::base::{DataKey, Location, Progress};
use crate::error::{Error, Result};

pub(crate) use build::planned;
pub use build::{
    Cut, DEFAULT_GETS_IN_FLIGHT, DEFAULT_SHARD_SIZE, LABEL_EXT, LabelFrom, MergeReport, PARTS_DIR,
    Plan, PlannedSample, RUN_PATH, ShardOptions, ShardOptionsBuilder, ShardReport, SourceObject,
    make_plan, merge_parts, part_manifest_key, shard_dataset,
};
pub use indexes::{
    ShardSamples, extensions, read_all_indexes, read_index, read_indexes, sample_bytes, shards_in,
};
pub use manifest::{ManifestReport, write_files_manifest, write_inventory_manifest};
pub use scan::index_shard;
pub use verify::{Problem, VerifyReport, verify};

/// Extension of the shards this module indexes.
pub const SHARD_EXT: &str = ".tar";
/// Suffix appended to a shard's key to name its index.
pub const INDEX_SUFFIX: &str = ".idx";

/// How [`index_shards`] works.
#[derive(Debug, Clone)]
pub struct IndexOptions {
    force: bool,
    shards_in_flight: usize,
    gets_per_shard: usize,
    part_size: u64,
    md5: bool,
}

/// Builder of [`IndexOptions`].
#[derive(Debug, Clone)]
pub struct IndexOptionsBuilder {
    inner: IndexOptions,
}

impl IndexOptions {
    /// Defaults: skip indexed shards, 4 shards in flight, 4 ranged GETs of 8 MiB per shard, no
    /// MD5.
    pub fn builder() -> IndexOptionsBuilder {
        IndexOptionsBuilder {
            inner: IndexOptions {
                force: false,
                shards_in_flight: 4,
                gets_per_shard: 4,
                part_size: 8 << 20,
                md5: false,
            },
        }
    }

    /// Whether shards that already have an index are indexed again.
    pub fn force(&self) -> bool {
        self.force
    }

    /// These options, hashing shards with MD5 or not.
    pub(crate) fn with_md5(&self, yes: bool) -> IndexOptions {
        IndexOptions {
            md5: yes,
            ..self.clone()
        }
    }
}

impl IndexOptionsBuilder {
    /// Re-index shards that already have an index.
    pub fn with_force(mut self, yes: bool) -> Self {
        self.inner.force = yes;
        self
    }

    /// Shards read at the same time.
    pub fn with_shards_in_flight(mut self, n: usize) -> Self {
        self.inner.shards_in_flight = n;
        self
    }

    /// Ranged GETs in flight per shard.
    pub fn with_gets_per_shard(mut self, n: usize) -> Self {
        self.inner.gets_per_shard = n;
        self
    }

    /// Bytes per ranged GET.
    pub fn with_part_size(mut self, bytes: u64) -> Self {
        self.inner.part_size = bytes;
        self
    }

    /// Also record each shard's MD5 in its index (CRC32C is always recorded; MD5 costs about
    /// 1.5 ms of CPU per MB).
    pub fn with_md5(mut self, yes: bool) -> Self {
        self.inner.md5 = yes;
        self
    }

    /// Validates the options.
    pub fn build(self) -> Result<IndexOptions> {
        let o = &self.inner;
        if o.shards_in_flight == 0 || o.gets_per_shard == 0 {
            return Err(Error::invalid_input(
                "shards in flight and GETs per shard must be at least 1",
            ));
        }
        if o.part_size == 0 {
            return Err(Error::invalid_input(
                "the part size must be at least 1 byte",
            ));
        }
        Ok(self.inner)
    }
}

/// A shard found by [`find_shards`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardObject {
    /// Key relative to the store's prefix.
    pub key: Path,
    /// Size in bytes.
    pub size: u64,
    /// Whether `<key>.idx` exists.
    pub has_index: bool,
}

/// A shard that could not be indexed.
#[derive(Debug)]
pub struct ShardFailure {
    /// Full URI of the shard.
    pub uri: String,
    /// Why (a format error names the byte offset).
    pub error: Error,
}

/// What [`index_shards`] did.
#[derive(Debug, Default)]
pub struct IndexReport {
    /// Shards considered.
    pub shards: u64,
    /// Shards indexed (an index was written).
    pub indexed: u64,
    /// Shards skipped because they already had an index.
    pub skipped: u64,
    /// Samples in the indexed shards.
    pub samples: u64,
    /// Members in the indexed shards.
    pub members: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Wall time in seconds.
    pub seconds: f64,
    /// Shards that failed, in completion order.
    pub failures: Vec<ShardFailure>,
}

/// The key of the index of `shard`.
pub fn index_key(shard: &Path) -> Path {
    Path::from(format!("{shard}{INDEX_SUFFIX}"))
}

/// The shards to index: `Some(key)` heads one shard; `None` lists every `*.tar` below the
/// store's prefix. Each notes whether its index exists.
pub async fn find_shards(store: &Store, key: Option<&Path>) -> Result<Vec<ShardObject>> {
    let location = Location::from_store(store);
    let os = store.object_store();
    if let Some(key) = key {
        let meta = os.head(key).await.map_err(|e| location.error(key, e))?;
        let idx = index_key(key);
        let has_index = match os.head(&idx).await {
            Ok(_) => true,
            Err(bucketload_store::object_store::Error::NotFound { .. }) => false,
            Err(e) => return Err(location.error(&idx, e)),
        };
        return Ok(vec![ShardObject {
            key: key.clone(),
            size: meta.size,
            has_index,
        }]);
    }
    // Streamed: only the shards and their indexes are kept, not the listing.
    let (mut shards, mut indexes) = (Vec::new(), HashSet::new());
    let mut listing = crate::base::list_each(&location);
    while let Some(object) = listing.try_next().await? {
        let key = match object.key {
            DataKey::Path(path) => path,
            DataKey::Raw(key) => {
                crate::base::warn_unaddressable(&location, &key);
                continue;
            }
        };
        if key.as_ref().ends_with(SHARD_EXT) {
            shards.push(ShardObject {
                key,
                size: object.size,
                has_index: false,
            });
        } else if key.as_ref().ends_with(INDEX_SUFFIX) {
            indexes.insert(key.to_string());
        }
    }
    for shard in &mut shards {
        shard.has_index = indexes.contains(index_key(&shard.key).as_ref());
    }
    shards.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(shards)
}

/// Indexes `shards` (skipping those with an index unless forced), several in flight, and writes
/// each `<shard>.idx`. Failures of single shards are collected, never returned early.
pub async fn index_shards(
    store: &Store,
    shards: Vec<ShardObject>,
    options: &IndexOptions,
    progress: &dyn Progress,
) -> IndexReport {
    let started = Instant::now();
    let mut report = IndexReport {
        shards: shards.len() as u64,
        ..IndexReport::default()
    };
    let (todo, done): (Vec<_>, Vec<_>) = shards
        .into_iter()
        .partition(|s| options.force || !s.has_index);
    report.skipped = done.len() as u64;
    let total: u64 = todo.iter().map(|s| s.size).sum();
    progress.set_total(todo.len() as u64, Some(total));
    let on_bytes: Arc<dyn Fn(u64) + Send + Sync + '_> = Arc::new(|n| progress.advance(0, n));
    let mut results = futures::stream::iter(todo)
        .map(|shard| {
            let on_bytes = on_bytes.clone();
            async move {
                let result = index_and_write(store, &shard, options, &*on_bytes).await;
                (shard, result)
            }
        })
        .buffer_unordered(options.shards_in_flight);
    while let Some((shard, result)) = results.next().await {
        match result {
            Ok(index) => {
                report.indexed += 1;
                report.samples += index.samples.len() as u64;
                report.members += index.member_count();
                report.bytes += index.shard_size;
            }
            Err(error) => {
                let uri = store.object_uri(&shard.key);
                tracing::debug!(shard = %uri, %error, "shard not indexed");
                report.failures.push(ShardFailure { uri, error });
            }
        }
        progress.advance(1, 0);
    }
    progress.finish();
    report.seconds = started.elapsed().as_secs_f64();
    report
}

/// Indexes one shard and PUTs its index (only after the whole shard parsed).
async fn index_and_write(
    store: &Store,
    shard: &ShardObject,
    options: &IndexOptions,
    on_bytes: &(dyn Fn(u64) + Send + Sync),
) -> Result<ShardIndex> {
    let index = index_shard(store, &shard.key, shard.size, options, on_bytes).await?;
    let key = index_key(&shard.key);
    let uri = store.object_uri(&key);
    let bytes = index.to_bytes(&uri)?;
    store
        .object_store()
        .put(&key, PutPayload::from(bytes))
        .await
        .map_err(|e| Location::from_store(store).error(&key, e))?;
    tracing::info!(shard = %store.object_uri(&shard.key), samples = index.samples.len(), "indexed");
    Ok(index)
}
