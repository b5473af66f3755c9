//! The loader: turns a dataset into a stream of samples, fetched ahead of the consumer.
//!
//! Reach for [`Loader`]: [`Loader::open`] reads the dataset's manifest (one GET; else one
//! listing, and shard indexes for a listing's sample counts) as a [`LoaderConfig`] says, then
//! [`Loader::epoch`] gives a [`SampleStream`] of this rank's and worker's [`Sample`]s for one
//! epoch, in the order of [`crate::source`]. [`SampleStream::state`] is the
//! [`SourceState`] to checkpoint; [`Loader::resume`] continues from it.
//!
//! # Parts and data flow
//!
//! ```text
//!  manifest / listing ──► Source (order, rank, worker) ──► WorkerIter of SampleRefs
//!                                                             │
//!   files:   one GET per object ─┐                            │
//!   indexed: one ranged GET per  ├─ `concurrency` in flight ◄─┘ (memory budget: semaphore)
//!            run of close samples┘   completion or strict order
//!   shards:  WorkItems ──► `shards_in_flight` shard streams (prefetch window, tar parsed
//!            as bytes arrive) ──► reorder to the worker's order (≤ shuffle buffer + 1 held)
//!                                                             │
//!   cache (optional): files whole, indexed samples by range ◄─┤ hits served from disk
//!                                                             ▼
//!                                                    SampleStream ──► consumer
//! ```
//!
//! Where each part lives: `catalog.rs` (manifest or listing → the files or the shards, packed in
//! `shard_table.rs`, and their [`Plan`](crate::source::Plan)); `indexes.rs` (shard indexes
//! fetched when their shard comes up, in a bounded cache); `random_access.rs` (files and
//! indexed shards: fetch units, coalescing, delivery order), with `file_bytes.rs` (one file through the cache, checked
//! against the manifest); `streamed_shards.rs` (a worker's shards streamed several at once and
//! reordered), each stream a `shard_stream.rs` ([`shard_samples`]: the tar of one shard span
//! parsed as bytes arrive from [`read_range`](crate::io::read_range)). The cache is a
//! [`DiskCache`], shared with the mount. `mixture.rs` ([`Mixture`]) reads several datasets,
//! each through its own `Loader`, as one weighted stream.
//!
//! Back-pressure: nothing is requested that the memory budget (files, indexed) or the prefetch
//! windows and channels (shards) cannot hold. From its first poll a [`SampleStream`] fetches on
//! a task of its own, `concurrency` samples ahead of the consumer at most, so the requests go
//! on while the consumer computes; a consumer that stops polling stops new requests once that
//! queue is full. Cancellation: dropping a [`SampleStream`] aborts that task, its requests and
//! its shard tasks.
//!
//! ```no_run
//! use bucketload::loader::{Loader, LoaderConfig};
//! use futures::TryStreamExt;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = LoaderConfig::builder("s3://demo/train").with_concurrency(256).build()?;
//! let loader = Loader::open(config).await?;
//! let mut samples = loader.epoch(0)?;
//! while let Some(sample) = samples.try_next().await? {
//!     println!("{} label {:?}: {} bytes", sample.key, sample.label, sample.bytes());
//! }
//! println!("{:.0} samples/s", loader.stats().samples_per_s());
//! # Ok(()) }
//! ```

mod catalog;
mod compact_index;
mod config;
mod file_bytes;
mod files_table;
mod indexed_blocks;
mod indexes;
mod mixture;
mod random_access;
mod shard_stream;
mod shard_table;
mod shared_catalog;
mod stats;
mod streamed_shards;

use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bucketload_cache::ObjectVersion;
use bucketload_store::Store;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use bucketload_cache::{Cache, CacheBuilder, CacheStats};
pub use config::{
    DEFAULT_COALESCE_GAP, DEFAULT_COALESCE_WINDOW, DEFAULT_INDEX_CACHE, DEFAULT_LOADER_CONCURRENCY,
    DEFAULT_MEMORY_BUDGET, DEFAULT_SHARDS_IN_FLIGHT, Delivery, Format, LoaderBuilder, LoaderConfig,
    MAX_COALESCED_BYTES, ManifestUse,
};
pub use mixture::{MixState, MixStream, MixTracker, Mixture};
pub use shard_stream::{ShardSample, ShardSpan, shard_samples};
pub use stats::{InFlight, LoaderStats, RequestStats, StageTime};

pub use shared_catalog::CATALOG_DIR_ENV;

use catalog::{Catalog, FileObject, ManifestOrigin, ShareWith};
use config::Dataset;
use indexes::IndexCache;
use shard_table::ShardTable;
use stats::Counters;

use crate::Result;
use crate::base::Location;
use crate::io::{DiskCache, PrefetchCounters};
use crate::source::{EpochProgress, SampleRef, Source, SourceState};

/// Extension of the WebDataset member that holds a class label (ASCII decimal).
const LABEL_EXT: &str = "cls";

/// Bit where a mixture's dataset number starts in [`Sample::dataset_index`].
pub const DATASET_SHIFT: u32 = 56;

/// Extensions of the member taken as a sample's image, in order of preference.
pub const IMAGE_EXTENSIONS: [&str; 3] = ["jpg", "jpeg", "png"];

/// One sample.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Sample {
    /// The object key (files) or WebDataset key (shards).
    pub key: String,
    /// The class: the sorted index of the class folder (files), or the `.cls` member (shards).
    pub label: Option<u32>,
    /// `(extension, bytes)` in shard order; one member for files.
    pub members: Vec<(String, Bytes)>,
    /// Where the sample is in the dataset.
    pub source: SampleRef,
    /// Its position in this worker's order for the epoch.
    pub position: u64,
    /// The dataset it comes from: its place in a [`Mixture`]'s list, 0 for a [`Loader`].
    pub dataset: u32,
}

impl Sample {
    /// Total member bytes.
    pub fn bytes(&self) -> u64 {
        self.members.iter().map(|(_, b)| b.len() as u64).sum()
    }

    /// The bytes of the member with extension `ext`.
    pub fn get(&self, ext: &str) -> Option<&Bytes> {
        self.members.iter().find(|(e, _)| e == ext).map(|(_, b)| b)
    }

    /// The sample's image: a files dataset's object whatever its extension, else the first
    /// member with one of [`IMAGE_EXTENSIONS`] (any case).
    pub fn image(&self) -> Option<&Bytes> {
        if let [(_, only)] = self.members.as_slice() {
            return Some(only);
        }
        IMAGE_EXTENSIONS.iter().find_map(|ext| {
            self.members
                .iter()
                .find(|(e, _)| e.eq_ignore_ascii_case(ext))
                .map(|(_, b)| b)
        })
    }

    /// A number unique to the sample in the dataset (while shards hold fewer than 2^32
    /// samples), stable across epochs, ranks and workers: with a seed and the epoch it fixes
    /// the sample's random augmentation. A [`Mixture`] sets the top byte to the sample's
    /// [`dataset`](Self::dataset) (bits 56–63; [`DATASET_SHIFT`]), so samples of different
    /// datasets never share a number while files number fewer than 2^56 and shards fewer
    /// than 2^24; dataset 0 keeps the numbers it has alone.
    pub fn dataset_index(&self) -> u64 {
        let index = match self.source {
            SampleRef::File { index } => index,
            SampleRef::Shard { shard, sample } => (shard << 32) | (sample & 0xffff_ffff),
        };
        index | (u64::from(self.dataset) << DATASET_SHIFT)
    }
}

/// What resumes a [`SampleStream`] after any number of its samples, once the stream itself
/// has moved on (to a task that reads ahead of the consumer).
#[derive(Debug, Clone)]
pub struct StateTracker {
    progress: EpochProgress,
    worker: u32,
}

impl StateTracker {
    /// The state after the stream's first `consumed` samples were consumed. Exact with
    /// [`Delivery::Strict`] (samples arrive in the worker's order).
    pub fn state(&self, consumed: u64) -> Result<SourceState> {
        let mut progress = self.progress.clone();
        progress.record(self.worker, consumed)?;
        Ok(progress.state())
    }
}

/// A sample with its share of the memory budget, released when the consumer takes it.
#[derive(Debug)]
pub(crate) struct Item {
    pub(crate) sample: Sample,
    pub(crate) permit: Option<OwnedSemaphorePermit>,
    /// The sample was left out (its object changed): the stream counts its position as done
    /// and yields nothing for it.
    pub(crate) skipped: bool,
}

impl Item {
    /// The place of a sample left out.
    pub(crate) fn skipped(source: SampleRef, position: u64) -> Item {
        Item {
            sample: Sample {
                key: String::new(),
                label: None,
                members: Vec::new(),
                source,
                position,
                dataset: 0,
            },
            permit: None,
            skipped: true,
        }
    }
}

/// The label of a WebDataset sample: its `.cls` member as ASCII decimal.
pub(crate) fn label_of(members: &[(String, Bytes)]) -> Option<u32> {
    let (_, data) = members.iter().find(|(e, _)| e == LABEL_EXT)?;
    std::str::from_utf8(data).ok()?.trim().parse().ok()
}

/// A version as the store gave it, and when.
pub(crate) type CheckedVersion = (ObjectVersion, Instant);

/// Everything the loader's tasks share.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: LoaderConfig,
    pub(crate) location: Location,
    pub(crate) store: Store,
    pub(crate) store_uri: String,
    pub(crate) catalog: Catalog,
    /// Shard indexes fetched so far, bounded (indexed shards; streamed shards that start
    /// mid-shard).
    pub(crate) indexes: IndexCache,
    /// The manifest the catalog was read from, if it was.
    pub(crate) manifest: Option<ManifestOrigin>,
    pub(crate) source: Source,
    pub(crate) counters: Arc<Counters>,
    pub(crate) prefetch: Arc<PrefetchCounters>,
    pub(crate) budget: Arc<Semaphore>,
    pub(crate) budget_kib: u32,
    pub(crate) cache: Option<DiskCache>,
    /// Each streamed shard's version (ETag and size) as last asked of the store, and when: kept
    /// only with a cache and a [`LoaderBuilder::with_metadata_ttl`] above zero (see
    /// `streamed_shards::shard_version`).
    pub(crate) shard_versions: Box<[std::sync::Mutex<Option<CheckedVersion>>]>,
    /// Indexed shards' cached blocks held in memory, when they are read in blocks
    /// (`indexed_blocks`: a cache that holds the whole dataset).
    pub(crate) blocks: Option<indexed_blocks::Blocks>,
}

impl Inner {
    /// File `index` of a files dataset; an error when there is none (a sample of another
    /// dataset's plan).
    pub(crate) fn file(&self, index: u64) -> Result<FileObject> {
        self.catalog.file(index).ok_or_else(|| crate::Error::Task {
            reason: format!(
                "file {index} of {} is not in its catalog ({} files)",
                self.location,
                self.source.plan().samples()
            ),
        })
    }

    pub(crate) fn shards(&self) -> &ShardTable {
        inner_shards(&self.catalog)
    }
}

/// The shards of `catalog` (none for files).
fn inner_shards(catalog: &Catalog) -> &ShardTable {
    static NONE: std::sync::LazyLock<ShardTable> = std::sync::LazyLock::new(ShardTable::default);
    match catalog {
        Catalog::Shards { shards, .. } => shards,
        Catalog::Files(_) => &NONE,
    }
}

/// A dataset opened for loading: cheap to clone, shared by every epoch's stream.
#[derive(Debug, Clone)]
pub struct Loader {
    inner: Arc<Inner>,
}

impl Loader {
    /// Opens the dataset: the store, then its manifest (or a listing, and the shard indexes
    /// that give a listing's sample counts). With a manifest, no shard index is read: an indexed
    /// loader fetches each when its shard comes up.
    pub async fn open(config: LoaderConfig) -> Result<Loader> {
        Loader::open_counted(config, None).await
    }

    /// Opens the dataset, counting into `shared`'s counters when given (the datasets of a
    /// mixture report as one).
    pub(crate) async fn open_counted(
        config: LoaderConfig,
        shared: Option<&Loader>,
    ) -> Result<Loader> {
        let store = match &config.dataset {
            Dataset::Store(store) => store.clone(),
            Dataset::Uri(uri, store_config) => {
                let mut store_config = (**store_config).clone();
                if store_config.concurrency() < config.concurrency {
                    store_config = store_config.with_concurrency(config.concurrency);
                }
                Store::open(uri, &store_config)?
            }
        };
        if store.config().concurrency() < config.concurrency {
            tracing::warn!(
                store = %store,
                store_limit = store.config().concurrency(),
                loader = config.concurrency,
                "loader: the store allows fewer requests in flight than the loader asks for"
            );
        }
        let location = Location::from_store(&store);
        let indexes = IndexCache::new(config.index_cache);
        let share = ShareWith {
            store_uri: store.uri().to_string(),
            cache_dir: config.cache.as_ref().map(|c| c.dir().to_path_buf()),
        };
        // Boxed as `Send` here, where its lifetimes are concrete: callers that need a `Send`
        // future (Python's detached threads) could not prove it through the borrows inside.
        let (catalog, manifest) = Catalog::open(
            &location,
            config.format,
            config.manifest,
            config.allow_incomplete,
            &share,
            &indexes,
        )
        .boxed()
        .await?;
        let source = Source::new(catalog.plan(), config.order, config.partition)?;
        // Budget in KiB permits: a semaphore counts at most `usize::MAX >> 3` permits.
        let budget_kib = u32::try_from(config.memory_budget.div_ceil(1024)).unwrap_or(u32::MAX);
        tracing::info!(
            dataset = %location,
            format = ?catalog.format(),
            samples = source.plan().samples(),
            shards = inner_shards(&catalog).len(),
            shard_table_bytes = inner_shards(&catalog).resident_bytes(),
            shared_catalog = catalog.is_shared(),
            "loader: dataset opened"
        );
        let cache = config.cache.clone().map(DiskCache::new);
        let shard_versions = match &catalog {
            Catalog::Shards { shards, .. } if cache.is_some() && !config.metadata_ttl.is_zero() => {
                (0..shards.len())
                    .map(|_| std::sync::Mutex::new(None))
                    .collect()
            }
            _ => Box::default(),
        };
        let mut inner = Inner {
            store_uri: store.uri().to_string(),
            budget: Arc::new(Semaphore::new(budget_kib as usize)),
            budget_kib,
            prefetch: shared.map_or_else(Arc::default, |l| l.inner.prefetch.clone()),
            counters: shared.map_or_else(Arc::default, |l| l.inner.counters.clone()),
            location,
            store,
            catalog,
            indexes,
            manifest,
            source,
            cache,
            shard_versions,
            blocks: None,
            config,
        };
        let indexed = matches!(inner.catalog, Catalog::Shards { indexed: true, .. });
        if indexed && indexed_blocks::enabled(&inner) {
            inner.blocks = Some(indexed_blocks::Blocks::default());
        }
        Ok(Loader {
            inner: Arc::new(inner),
        })
    }

    /// The format in effect (never [`Format::Auto`]).
    pub fn format(&self) -> Format {
        self.inner.catalog.format()
    }

    /// The order, partition and resume logic.
    pub fn source(&self) -> &Source {
        &self.inner.source
    }

    /// The configuration.
    pub fn config(&self) -> &LoaderConfig {
        &self.inner.config
    }

    /// The store read from (its metrics count every request).
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Samples this worker yields in a full epoch.
    pub fn samples_per_epoch(&self) -> Result<u64> {
        let (worker, workers) = self.inner.config.worker();
        self.inner.source.begin(0, workers)?.worker_len(worker)
    }

    /// This worker's samples of epoch `epoch`, from the start. With a cache, it first tells the
    /// cache a new epoch began (its eviction policy keeps the previous epoch's entries).
    pub fn epoch(&self, epoch: u64) -> Result<SampleStream> {
        let (_, workers) = self.inner.config.worker();
        let progress = self.inner.source.begin(epoch, workers)?;
        let mut samples = self.stream(progress)?;
        if let Some(cache) = self.inner.cache.clone() {
            // On a blocking thread at the first poll, before any lookup of the epoch.
            let uri = self.inner.store_uri.clone();
            let begin = futures::stream::once(async move {
                cache.fills().idle().await;
                let cache = Arc::clone(cache.cache());
                let begun = tokio::task::spawn_blocking(move || cache.begin_epoch(&uri, epoch));
                if let Ok(Err(e)) = begun.await {
                    tracing::warn!(error = %e, "loader: the cache could not start a new epoch");
                }
            })
            .filter_map(|()| futures::future::ready(None));
            let items = std::mem::replace(&mut samples.items, futures::stream::empty().boxed());
            samples.items = begin.chain(items).boxed();
        }
        Ok(samples)
    }

    /// Continues a saved epoch: no sample before the saved position is read again (with
    /// [`Delivery::Strict`]; see [`SampleStream::state`] for completion order).
    pub fn resume(&self, state: &SourceState) -> Result<SampleStream> {
        let (_, workers) = self.inner.config.worker();
        let progress = self.inner.source.resume(state, workers)?;
        self.stream(progress)
    }

    /// Epochs `0..epochs` of the configuration, one after the other, as one stream.
    pub fn epochs(&self) -> BoxStream<'static, Result<Sample>> {
        let loader = self.clone();
        futures::stream::iter(0..self.inner.config.epochs)
            .map(move |epoch| match loader.epoch(epoch) {
                Ok(samples) => samples.boxed(),
                Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            })
            .flatten()
            .boxed()
    }

    fn stream(&self, progress: EpochProgress) -> Result<SampleStream> {
        let (worker, _) = self.inner.config.worker();
        let iter = progress.worker(worker)?;
        let start = iter.position();
        let remaining = iter.len() as u64;
        let inner = self.inner.clone();
        let items = match &inner.catalog {
            Catalog::Shards { indexed: false, .. } => streamed_shards::samples(inner.clone(), iter),
            _ => random_access::samples(inner.clone(), iter),
        };
        // The epoch ends once what it read is in the cache (the writes went on in the
        // background; only the last ones can still be running), so that a process that stops
        // after its last epoch leaves every sample cached.
        let items = match inner.cache.clone() {
            Some(cache) => items
                .chain(
                    futures::stream::once(async move { cache.fills().idle().await })
                        .filter_map(|()| futures::future::ready(None)),
                )
                .boxed(),
            None => items,
        };
        Ok(SampleStream {
            items,
            inner,
            progress,
            worker,
            start,
            prefix: start,
            ahead: BTreeSet::new(),
            remaining,
            planned: remaining,
            ended: false,
            waiting_since: None,
            driven: Driven::NotYet,
        })
    }

    /// Counters since the loader opened.
    pub fn stats(&self) -> LoaderStats {
        let cache = self.inner.cache.as_ref().map(DiskCache::counts);
        let cache = cache.unwrap_or_default();
        self.inner
            .counters
            .snapshot(self.inner.prefetch.snapshot(), cache)
    }
}

/// One worker's samples of one epoch ([`futures::Stream`] of `Result<Sample>`).
pub struct SampleStream {
    items: BoxStream<'static, Result<Item>>,
    inner: Arc<Inner>,
    progress: EpochProgress,
    worker: u32,
    /// Position of the first sample of this stream in the worker's order.
    start: u64,
    /// Every position below `prefix` was yielded.
    prefix: u64,
    /// Positions yielded beyond `prefix` (completion order).
    ahead: BTreeSet<u64>,
    remaining: u64,
    /// Samples this stream must yield (`remaining` at its start).
    planned: u64,
    /// Set once the stream yielded its end or an error that ends it.
    ended: bool,
    waiting_since: Option<Instant>,
    /// Whether `items` runs on a task of its own (from the first poll on).
    driven: Driven,
}

impl std::fmt::Debug for SampleStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SampleStream")
            .field("epoch", &self.progress.epoch())
            .field("worker", &self.worker)
            .field("position", &self.prefix)
            .field("remaining", &self.remaining)
            .finish_non_exhaustive()
    }
}

impl SampleStream {
    /// The epoch.
    pub fn epoch(&self) -> u64 {
        self.progress.epoch()
    }

    /// Samples not yet yielded.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// The state to checkpoint: every sample before the first one not yet yielded counts as
    /// consumed. With [`Delivery::Strict`] that is exactly what was yielded, so a resume
    /// neither replays nor skips. With [`Delivery::Completion`] samples that overtook a slower
    /// one (at most the requests in flight) are read again after a resume; none is skipped.
    pub fn state(&self) -> Result<SourceState> {
        let mut progress = self.progress.clone();
        progress.record(self.worker, self.consumed())?;
        Ok(progress.state())
    }

    /// Samples of this stream that count as consumed in [`state`](Self::state), for this
    /// worker. A training loop that merges several worker processes keeps one rank-level
    /// [`EpochProgress`] (from [`Loader::source`]) and records each worker's count into it.
    pub fn consumed(&self) -> u64 {
        self.prefix - self.start
    }

    /// This stream's worker number.
    pub fn worker(&self) -> u32 {
        self.worker
    }

    /// A [`StateTracker`] of this stream, counted from its start.
    pub fn tracker(&self) -> StateTracker {
        StateTracker {
            progress: self.progress.clone(),
            worker: self.worker,
        }
    }

    /// Polls the samples; a panic in them ends the stream with an error naming the dataset
    /// and carrying the panic's message (the stream is not polled again).
    fn poll_items(&mut self, cx: &mut Context<'_>) -> Result<Poll<Option<Result<Item>>>> {
        if matches!(self.driven, Driven::NotYet) {
            self.driven = match tokio::runtime::Handle::try_current() {
                Ok(runtime) => self.drive(&runtime),
                Err(_) => Driven::Inline,
            };
        }
        if let Driven::Task { items, .. } = &mut self.driven {
            return match items.poll_recv(cx) {
                Poll::Ready(Some(Next::Item(item))) => Ok(Poll::Ready(Some(item))),
                Poll::Ready(Some(Next::Panicked(e))) => {
                    self.ended = true;
                    Err(e)
                }
                Poll::Ready(None) => Ok(Poll::Ready(None)),
                Poll::Pending => Ok(Poll::Pending),
            };
        }
        let items = &mut self.items;
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| items.as_mut().poll_next(cx)));
        polled.map_err(|payload| {
            self.ended = true;
            let what = format!("reading {}", self.inner.location);
            crate::panics::error(what, payload.as_ref())
        })
    }

    /// Moves `items` onto a task of `runtime` that keeps fetching while the consumer is busy
    /// (a training step, a decode), up to `concurrency` items queued ahead and within the
    /// memory budget; dropping the stream aborts it.
    fn drive(&mut self, runtime: &tokio::runtime::Handle) -> Driven {
        let mut items = std::mem::replace(&mut self.items, futures::stream::empty().boxed());
        let (tx, rx) = tokio::sync::mpsc::channel(self.inner.config.concurrency.clamp(1, 4096));
        let what = format!("reading {}", self.inner.location);
        let task = runtime.spawn(async move {
            loop {
                let next = match AssertUnwindSafe(items.next()).catch_unwind().await {
                    Ok(Some(item)) => Next::Item(item),
                    Ok(None) => return,
                    Err(payload) => {
                        Next::Panicked(crate::panics::error(what.clone(), payload.as_ref()))
                    }
                };
                let last = matches!(next, Next::Panicked(_));
                if tx.send(next).await.is_err() || last {
                    return;
                }
            }
        });
        Driven::Task {
            items: rx,
            _task: random_access::AbortOnDrop(task),
        }
    }

    /// The end of the inner stream: an [`Error::Incomplete`](crate::Error::Incomplete) if
    /// samples are missing (once), then the end.
    fn end(&mut self) -> Option<Result<Sample>> {
        if std::mem::replace(&mut self.ended, true) || self.remaining == 0 {
            return None;
        }
        tracing::error!(
            dataset = %self.inner.location,
            missing = self.remaining,
            "loader: an epoch ended early"
        );
        Some(Err(crate::Error::Incomplete {
            dataset: self.inner.location.to_string(),
            delivered: self.planned - self.remaining,
            planned: self.planned,
        }))
    }

    fn mark(&mut self, position: u64) {
        if position != self.prefix {
            self.ahead.insert(position);
            return;
        }
        self.prefix += 1;
        while self.ahead.remove(&self.prefix) {
            self.prefix += 1;
        }
    }
}

/// How a [`SampleStream`]'s items are fetched.
enum Driven {
    /// Not polled yet: nothing has been requested.
    NotYet,
    /// On a task of their own, which fills `items` ahead of the consumer.
    Task {
        items: tokio::sync::mpsc::Receiver<Next>,
        /// Held to abort the task when the stream is dropped.
        _task: random_access::AbortOnDrop<()>,
    },
    /// Polled by the consumer itself (no Tokio runtime at the first poll).
    Inline,
}

/// What the task fetching a stream's items sends.
enum Next {
    Item(Result<Item>),
    /// The fetching panicked; the stream ends.
    Panicked(crate::Error),
}

impl Stream for SampleStream {
    type Item = Result<Sample>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        this.inner.counters.start();
        loop {
            let polled = match this.poll_items(cx) {
                Ok(polled) => polled,
                Err(e) => return Poll::Ready(Some(Err(e))),
            };
            if polled.is_pending() {
                this.waiting_since.get_or_insert_with(Instant::now);
                return Poll::Pending;
            }
            if let Some(since) = this.waiting_since.take() {
                this.inner.counters.consumer_waited(since.elapsed());
            }
            return Poll::Ready(match polled {
                Poll::Ready(Some(Ok(item))) => {
                    let sample = item.sample;
                    this.mark(sample.position);
                    this.remaining = this.remaining.saturating_sub(1);
                    if item.skipped {
                        // Counted where it was skipped; its place is done, nothing is yielded.
                        continue;
                    }
                    stats::add(&this.inner.counters.samples, 1);
                    stats::add(&this.inner.counters.bytes, sample.bytes());
                    Some(Ok(sample))
                }
                Poll::Ready(Some(Err(e))) => Some(Err(match &this.inner.manifest {
                    Some(manifest) => manifest.explain(e),
                    None => e,
                })),
                _ => this.end(),
            });
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.remaining).unwrap_or(usize::MAX);
        (0, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketload_store::StoreConfig;
    use bucketload_store::object_store::{ObjectStoreExt, PutPayload};
    use futures::TryStreamExt;
    use std::time::Duration;

    /// An epoch of three objects in a memory store, not yet polled.
    async fn epoch_of_three(name: &str) -> SampleStream {
        let store = Store::open(&format!("mem://{name}"), &StoreConfig::default()).unwrap();
        for key in ["a/1.jpg", "a/2.jpg", "b/3.jpg"] {
            let path = bucketload_store::key_path(key);
            let put = PutPayload::from_static(b"jpeg");
            store.object_store().put(&path, put).await.unwrap();
        }
        let config = LoaderConfig::for_store(store).build().unwrap();
        Loader::open(config).await.unwrap().epoch(0).unwrap()
    }

    #[tokio::test]
    async fn an_epoch_that_ends_short_is_an_error_naming_the_dataset() {
        let mut stream = epoch_of_three("short-epoch").await;
        // The fetching ends after one sample of three, without an error of its own.
        let items = std::mem::replace(&mut stream.items, futures::stream::empty().boxed());
        stream.items = items.take(1).boxed();
        assert!(stream.try_next().await.unwrap().is_some());
        let err = stream.try_next().await.unwrap_err().to_string();
        assert!(err.contains("mem://short-epoch"), "{err}");
        assert!(err.contains("after 1 of its 3 samples"), "{err}");
        assert!(
            stream.try_next().await.unwrap().is_none(),
            "the error ends it"
        );
    }

    #[tokio::test]
    async fn a_panic_while_fetching_is_an_error_naming_the_dataset() {
        let mut stream = epoch_of_three("panic-epoch").await;
        stream.items = futures::stream::poll_fn(|_| panic!("index math")).boxed();
        let err = stream.try_next().await.unwrap_err().to_string();
        assert!(
            err.contains("reading mem://panic-epoch panicked: index math"),
            "{err}"
        );
        assert!(stream.try_next().await.unwrap().is_none());
    }

    /// A consumer busy between samples (a training step, a decode) does not stop the
    /// fetching: requests go on while it is away, up to the queue ahead of it, and no further.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_fetching_goes_on_while_the_consumer_is_busy() {
        let store = Store::open("mem://busy-consumer", &StoreConfig::default()).unwrap();
        for i in 0..64 {
            let path = bucketload_store::key_path(&format!("c/{i:02}.jpg"));
            let put = PutPayload::from_static(b"jpeg");
            store.object_store().put(&path, put).await.unwrap();
        }
        let concurrency = 4;
        let config = LoaderConfig::for_store(store)
            .with_concurrency(concurrency)
            .build()
            .unwrap();
        let loader = Loader::open(config).await.unwrap();
        let mut stream = loader.epoch(0).unwrap();
        assert!(stream.try_next().await.unwrap().is_some());
        let gets = || {
            stream
                .inner
                .counters
                .gets
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        // Not polled again: the fetching goes on past the `concurrency` requests of the first
        // poll, until `concurrency` samples wait for the consumer (and one more for room).
        let ahead = 1 + concurrency as u64 + 1;
        tokio::time::timeout(Duration::from_secs(20), async {
            while gets() < ahead {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{} GETs while the consumer was away", gets()));
        // And stops at the queue ahead of the consumer (its items and the requests in flight).
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            gets() <= ahead + concurrency as u64,
            "{} GETs: no bound",
            gets()
        );
        let mut samples = 1;
        while stream.try_next().await.unwrap().is_some() {
            samples += 1;
        }
        assert_eq!(samples, 64);
    }

    /// Without a Tokio runtime at the first poll, the consumer's polls do the fetching.
    #[test]
    fn a_stream_polled_outside_a_runtime_is_fetched_by_its_polls() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let mut stream = runtime.block_on(epoch_of_three("inline-epoch"));
        let samples = futures::executor::block_on(async {
            let mut n = 0;
            while stream.try_next().await.unwrap().is_some() {
                n += 1;
            }
            n
        });
        assert_eq!(samples, 3);
        assert!(matches!(stream.driven, Driven::Inline));
    }

    #[test]
    fn labels_come_from_the_cls_member() {
        let member = |ext: &str, data: &'static [u8]| (ext.to_owned(), Bytes::from_static(data));
        assert_eq!(
            label_of(&[member("jpg", b"x"), member("cls", b"7\n")]),
            Some(7)
        );
        assert_eq!(label_of(&[member("jpg", b"x")]), None);
        assert_eq!(label_of(&[member("cls", b"cat")]), None);
    }
}
