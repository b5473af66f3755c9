//! [`LoaderConfig`]: what to read, how much at once, in which order, for which rank and worker.

use std::sync::Arc;
use std::time::Duration;

use bucketload_cache::Cache;
use bucketload_store::{Store, StoreConfig};

use crate::io::PrefetchConfig;
use crate::source::{Order, Partition};
use crate::{Error, Result};

/// Default requests the loader keeps in flight (files and indexed datasets); a loader that
/// opens its store from a URI raises the store's limit
/// ([`bucketload_store::DEFAULT_STORE_CONCURRENCY`]) to its own. Little's law at a 50 ms first-byte latency gives
/// 256 / 0.05 s ≈ 5,000 samples/s, more than two cores hand to a consumer of 100 KB samples.
pub const DEFAULT_LOADER_CONCURRENCY: usize = 256;

/// Default shards streamed at once: each shard's prefetch window starts at 1 MiB and needs
/// about six round trips to reach 64 MiB, so at 50 ms first-byte latency eight shards ramping
/// side by side read 64 MiB shards about 1.4× faster than four (docs/LOADER.md has the numbers).
pub const DEFAULT_SHARDS_IN_FLIGHT: usize = 8;

/// Default byte budget of fetched samples held in memory (files and indexed sources): 1 GiB,
/// ten thousand 100 KB samples — far above what 256 requests in flight hold.
pub const DEFAULT_MEMORY_BUDGET: u64 = 1 << 30;

/// Default look-ahead of the indexed source, in samples: ranges of the same shard among the
/// next 64 samples of the order are merged when close (see [`DEFAULT_COALESCE_GAP`]).
pub const DEFAULT_COALESCE_WINDOW: usize = 64;

/// Default largest gap between two sample ranges merged into one ranged GET: 64 KiB costs
/// under 1 ms of transfer at 100 MB/s, far less than the 50 ms first byte of a second GET.
pub const DEFAULT_COALESCE_GAP: u64 = 64 << 10;

/// Default bound of the shard indexes an indexed loader holds in memory: 128 MiB, some 1,800
/// indexes of 1,000 two-member samples (about 72 KB each, held compact) — the indexes of the
/// chunks being planned and the units in flight many times over, and every index of a dataset
/// of up to a million samples, so that its later epochs fetch none again.
pub const DEFAULT_INDEX_CACHE: u64 = 128 << 20;

/// Largest coalesced ranged GET (8 MiB, the prefetcher's part size): bigger reads gain
/// nothing over parallel ones and delay every sample in them.
pub const MAX_COALESCED_BYTES: u64 = 8 << 20;

/// How a dataset is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Format {
    /// Whatever the dataset is: the manifest's kind, else `shards` when the listing holds tar
    /// shards, else `files`. Shards are streamed (not read sample by sample) by default.
    #[default]
    Auto,
    /// One object per sample.
    Files,
    /// Tar shards streamed front to back through a shuffle buffer.
    Shards,
    /// Tar shards with indexes, one ranged GET per sample (close ranges merged).
    Indexed,
}

impl std::str::FromStr for Format {
    type Err = Error;

    fn from_str(s: &str) -> Result<Format> {
        match s {
            "auto" => Ok(Format::Auto),
            "files" => Ok(Format::Files),
            "shards" => Ok(Format::Shards),
            "indexed" => Ok(Format::Indexed),
            other => Err(Error::invalid_input(format!(
                "unknown format {other:?}; use auto, files, shards or indexed"
            ))),
        }
    }
}

/// In which order samples reach the consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Delivery {
    /// As requests complete (the default): a slow request never stalls the others. A saved
    /// state may replay up to the samples then in flight (see [`super::SampleStream::state`]).
    #[default]
    Completion,
    /// Exactly the source's order; resume is exact.
    Strict,
}

/// Whether a dataset's manifest (`_bucketload/manifest.json`) says what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ManifestUse {
    /// The manifest, when there is one, replaces the listing (one GET): objects added since
    /// it was written are not read, and one removed fails its epoch with an error saying the
    /// manifest is stale.
    #[default]
    Trust,
    /// The manifest, after one listing of the dataset agrees with it (the same keys and
    /// sizes); otherwise opening fails naming what was added, removed or resized.
    Check,
    /// The listing (and the shards' indexes), as for a dataset without a manifest.
    Ignore,
}

/// Where the dataset lives.
#[derive(Debug, Clone)]
pub(crate) enum Dataset {
    Uri(String, Box<StoreConfig>),
    Store(Store),
}

/// Everything a [`super::Loader`] needs. Built with [`LoaderConfig::builder`] (a URI) or
/// [`LoaderConfig::for_store`] (an open store).
#[derive(Debug, Clone)]
pub struct LoaderConfig {
    pub(crate) dataset: Dataset,
    pub(crate) format: Format,
    pub(crate) concurrency: usize,
    pub(crate) shards_in_flight: usize,
    pub(crate) prefetch: PrefetchConfig,
    pub(crate) epochs: u64,
    pub(crate) order: Order,
    pub(crate) partition: Partition,
    pub(crate) worker: u32,
    pub(crate) num_workers: u32,
    pub(crate) delivery: Delivery,
    pub(crate) memory_budget: u64,
    pub(crate) coalesce_window: usize,
    pub(crate) coalesce_gap: u64,
    pub(crate) index_cache: u64,
    pub(crate) cache: Option<Arc<Cache>>,
    pub(crate) skip_changed: bool,
    pub(crate) manifest: ManifestUse,
    pub(crate) allow_incomplete: bool,
    pub(crate) metadata_ttl: Duration,
}

impl LoaderConfig {
    /// A loader of the dataset at `uri` (`s3://bucket/prefix`, `file:///dir`, a local path),
    /// with the store configured from the AWS environment (see [`LoaderBuilder::with_store_config`]).
    pub fn builder(uri: impl Into<String>) -> LoaderBuilder {
        LoaderBuilder::new(Dataset::Uri(uri.into(), Box::new(StoreConfig::from_env())))
    }

    /// A loader of the dataset at the root of `store`. The store's own concurrency limit caps
    /// the requests in flight: open it with at least [`LoaderBuilder::with_concurrency`].
    pub fn for_store(store: Store) -> LoaderBuilder {
        LoaderBuilder::new(Dataset::Store(store))
    }

    /// The format asked for.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Requests in flight.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// Bytes of shard indexes held in memory (see [`LoaderBuilder::with_index_cache`]).
    pub fn index_cache(&self) -> u64 {
        self.index_cache
    }

    /// Epochs [`super::Loader::epochs`] runs.
    pub fn epochs(&self) -> u64 {
        self.epochs
    }

    /// Whether changed objects are skipped (see [`LoaderBuilder::with_skip_changed`]).
    pub fn skip_changed(&self) -> bool {
        self.skip_changed
    }

    /// Whether an unfinished dataset is read (see [`LoaderBuilder::with_allow_incomplete`]).
    pub fn allow_incomplete(&self) -> bool {
        self.allow_incomplete
    }

    /// How the dataset's manifest is used (see [`LoaderBuilder::with_manifest`]).
    pub fn manifest(&self) -> ManifestUse {
        self.manifest
    }

    /// This process's worker number and the number of workers of its rank.
    pub fn worker(&self) -> (u32, u32) {
        (self.worker, self.num_workers)
    }
}

/// Builder of a [`LoaderConfig`]; setters never fail, [`build`](Self::build) checks.
#[derive(Debug, Clone)]
pub struct LoaderBuilder {
    config: LoaderConfig,
}

impl LoaderBuilder {
    fn new(dataset: Dataset) -> LoaderBuilder {
        LoaderBuilder {
            config: LoaderConfig {
                dataset,
                format: Format::Auto,
                concurrency: DEFAULT_LOADER_CONCURRENCY,
                shards_in_flight: DEFAULT_SHARDS_IN_FLIGHT,
                prefetch: PrefetchConfig::for_streams(),
                epochs: 1,
                order: Order::shuffled(0),
                partition: Partition::single(),
                worker: 0,
                num_workers: 1,
                delivery: Delivery::Completion,
                memory_budget: DEFAULT_MEMORY_BUDGET,
                coalesce_window: DEFAULT_COALESCE_WINDOW,
                coalesce_gap: DEFAULT_COALESCE_GAP,
                index_cache: DEFAULT_INDEX_CACHE,
                cache: None,
                skip_changed: false,
                manifest: ManifestUse::Trust,
                allow_incomplete: false,
                metadata_ttl: Duration::ZERO,
            },
        }
    }

    /// The store configuration for a URI dataset (default: [`StoreConfig::from_env`]); its
    /// concurrency is raised to the loader's when lower. Ignored by [`LoaderConfig::for_store`].
    pub fn with_store_config(mut self, store: StoreConfig) -> Self {
        if let Dataset::Uri(_, config) = &mut self.config.dataset {
            **config = store;
        }
        self
    }

    /// How the dataset is read (default [`Format::Auto`]).
    pub fn with_format(mut self, format: Format) -> Self {
        self.config.format = format;
        self
    }

    /// Requests in flight for files and indexed datasets (default [`DEFAULT_LOADER_CONCURRENCY`]).
    pub fn with_concurrency(mut self, requests: usize) -> Self {
        self.config.concurrency = requests;
        self
    }

    /// Shards streamed at once (default [`DEFAULT_SHARDS_IN_FLIGHT`]).
    pub fn with_shards_in_flight(mut self, shards: usize) -> Self {
        self.config.shards_in_flight = shards;
        self
    }

    /// How far each shard stream reads ahead (default [`PrefetchConfig::default`]).
    pub fn with_prefetch(mut self, prefetch: PrefetchConfig) -> Self {
        self.config.prefetch = prefetch;
        self
    }

    /// Epochs run by [`super::Loader::epochs`] (default 1).
    pub fn with_epochs(mut self, epochs: u64) -> Self {
        self.config.epochs = epochs;
        self
    }

    /// Order of samples (default `Order::shuffled(0)`: a new shuffle every epoch, seed 0, a
    /// shuffle buffer of [`Order::DEFAULT_SHUFFLE_BUFFER`] samples for streamed shards).
    pub fn with_order(mut self, order: Order) -> Self {
        self.config.order = order;
        self
    }

    /// This process's rank among `world_size` with its remainder policy (default rank 0 of 1).
    pub fn with_partition(mut self, partition: Partition) -> Self {
        self.config.partition = partition;
        self
    }

    /// This process is worker `worker` of `num_workers` of its rank (default 0 of 1). A
    /// PyTorch DataLoader worker is one process: each reads a disjoint share of the rank.
    pub fn with_worker(mut self, worker: u32, num_workers: u32) -> Self {
        self.config.worker = worker;
        self.config.num_workers = num_workers;
        self
    }

    /// Order of delivery (default [`Delivery::Completion`]).
    pub fn with_delivery(mut self, delivery: Delivery) -> Self {
        self.config.delivery = delivery;
        self
    }

    /// Bytes of fetched samples held at once by files and indexed sources (default
    /// [`DEFAULT_MEMORY_BUDGET`]); a sample larger than the budget is fetched alone.
    pub fn with_memory_budget(mut self, bytes: u64) -> Self {
        self.config.memory_budget = bytes;
        self
    }

    /// Indexed source: look-ahead in samples and largest gap in bytes between ranges merged
    /// into one GET (defaults [`DEFAULT_COALESCE_WINDOW`], [`DEFAULT_COALESCE_GAP`]); a window
    /// of 1 turns merging off.
    pub fn with_coalescing(mut self, window: usize, gap: u64) -> Self {
        self.config.coalesce_window = window;
        self.config.coalesce_gap = gap;
        self
    }

    /// Bytes of shard indexes held in memory (default [`DEFAULT_INDEX_CACHE`]): an indexed
    /// loader fetches a shard's index when the shard comes up in its order and keeps it until
    /// the indexes held exceed this bound, least recently used first; an index evicted and met
    /// again is fetched again. The index in use is kept whatever the bound (0 keeps only that).
    pub fn with_index_cache(mut self, bytes: u64) -> Self {
        self.config.index_cache = bytes;
        self
    }

    /// A local disk cache of object bytes (default none): files are cached whole, indexed
    /// samples by byte range and shard indexes whole (validated against the index object's
    /// ETag and size, asked with one HEAD), streamed shards by the byte ranges their
    /// prefetcher reads.
    pub fn with_cache(mut self, cache: Arc<Cache>) -> Self {
        self.config.cache = Some(cache);
        self
    }

    /// What to do with an object that differs from what the dataset's manifest (or the
    /// listing the loader opened with) says of it — another size, ETag or CRC32C: `false`
    /// (the default) fails the stream with an error naming the object; `true` leaves the
    /// sample out, logs it, and counts it in [`LoaderStats::skipped_changed`](super::LoaderStats).
    pub fn with_skip_changed(mut self, skip: bool) -> Self {
        self.config.skip_changed = skip;
        self
    }

    /// How long a streamed shard's version (ETag and size), once asked of the store with
    /// [`LoaderBuilder::with_cache`], is trusted by this loader's later epochs: zero (the default)
    /// asks again with one `HEAD` per shard at every epoch, so a shard rewritten in place is read
    /// anew; [`Duration::MAX`] asks once per loader, for datasets that never change in place, so a
    /// warm epoch from the cache sends no request. Within the time, a shard replaced since is
    /// still served as the version first read: from cached blocks, and a block not cached fails
    /// the epoch with an error naming the shard (never a mix of two versions). Files and indexed
    /// shards are checked against the listing or manifest the loader opened with, at any time.
    pub fn with_metadata_ttl(mut self, ttl: Duration) -> Self {
        self.config.metadata_ttl = ttl;
        self
    }

    /// Whether a dataset that its own run record says is unfinished is read (default `false`):
    /// a `bucketload shard` run writes `_bucketload/run.json` before its first shard and the
    /// manifest after its last, so a run record without a manifest means shards are missing.
    /// By default opening such a dataset fails naming the record and how many shards and samples
    /// are missing; `true` reads the shards that are there and logs that as a warning.
    pub fn with_allow_incomplete(mut self, allow: bool) -> Self {
        self.config.allow_incomplete = allow;
        self
    }

    /// Whether the dataset's manifest is used, checked against a listing first, or ignored
    /// (default [`ManifestUse::Trust`]).
    pub fn with_manifest(mut self, manifest: ManifestUse) -> Self {
        self.config.manifest = manifest;
        self
    }

    /// Checks the settings; reports every problem at once.
    pub fn build(self) -> Result<LoaderConfig> {
        let c = &self.config;
        let mut problems = Vec::new();
        if c.concurrency == 0 {
            problems.push("concurrency must be at least 1 request in flight".to_owned());
        }
        if c.shards_in_flight == 0 {
            problems.push("shards in flight must be at least 1".to_owned());
        }
        if c.num_workers == 0 {
            problems.push("num_workers must be at least 1".to_owned());
        } else if c.worker >= c.num_workers {
            problems.push(format!(
                "worker {} is out of range for {} workers (workers count from 0)",
                c.worker, c.num_workers
            ));
        }
        if c.memory_budget == 0 {
            problems.push("the memory budget must be at least 1 byte".to_owned());
        }
        if c.coalesce_window == 0 {
            problems.push("the coalescing window must be at least 1 sample".to_owned());
        }
        if let Err(e) = c.prefetch.validate() {
            problems.push(e.to_string());
        }
        if !problems.is_empty() {
            return Err(Error::invalid_input(problems.join("; ")));
        }
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_reports_every_problem() {
        let err = LoaderConfig::builder("mem://x")
            .with_concurrency(0)
            .with_worker(3, 2)
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.contains("concurrency"), "{err}");
        assert!(err.contains("worker 3"), "{err}");
    }

    #[test]
    fn formats_parse() {
        assert_eq!("indexed".parse::<Format>().unwrap(), Format::Indexed);
        assert!("tar".parse::<Format>().is_err());
    }
}
