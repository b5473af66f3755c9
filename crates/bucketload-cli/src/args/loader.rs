//! How the loader reads a dataset: the flags shared by `read` and `bench`, and the loader's
//! configuration they make.

use std::sync::Arc;

use anyhow::Context;
use bucketload::io::PrefetchConfig;
use bucketload::loader::{
    CacheBuilder, DEFAULT_LOADER_CONCURRENCY, Delivery, Format, Loader, LoaderConfig, LoaderStats,
    ManifestUse, MixStream, Mixture, SampleStream,
};
use bucketload::source::{Order, Partition, Remainder};
use bucketload_store::Store;
use clap::{Args, ValueEnum};
use futures::future::Either;

use crate::args::store::{StoreArgs, parse_size};

/// How the loader reads a dataset: flags shared by `read` and `bench`.
#[derive(Debug, Clone, Args)]
pub struct LoaderArgs {
    /// How to read it: auto (the manifest's kind; shards are streamed), files, shards, indexed
    #[arg(long, value_enum, default_value_t = FormatArg::Auto)]
    pub format: FormatArg,
    /// Local disk cache of object bytes (shared safely by processes on this node)
    #[arg(long, value_name = "DIR")]
    pub cache: Option<std::path::PathBuf>,
    /// Cache capacity, e.g. 20GiB
    #[arg(long, value_parser = parse_size, value_name = "SIZE", requires = "cache")]
    pub cache_size: Option<u64>,
    /// With --cache, how long a streamed shard's version (one HEAD) is trusted by later epochs:
    /// e.g. 10m, or `indefinite` for data that never changes in place [default: 0, every epoch]
    #[arg(long, value_parser = crate::args::parse_ttl, value_name = "TTL", requires = "cache")]
    pub metadata_ttl: Option<std::time::Duration>,
    /// This process's rank
    #[arg(long, default_value_t = 0, value_name = "R")]
    pub rank: u32,
    /// Number of ranks
    #[arg(long, default_value_t = 1, value_name = "W")]
    pub world_size: u32,
    /// Samples that do not divide among ranks: pad (repeat), drop, or exact (every sample on one
    /// rank; ranks differ by one)
    #[arg(long, value_enum, default_value_t = RemainderArg::Pad)]
    pub remainder: RemainderArg,
    /// Shuffle seed (a new order every epoch)
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub seed: u64,
    /// Read in dataset order, without shuffling
    #[arg(long, conflicts_with = "seed")]
    pub no_shuffle: bool,
    /// Shuffle buffer of streamed shards, in samples
    #[arg(long, value_name = "N")]
    pub shuffle_buffer: Option<u64>,
    /// Shards streamed at once
    #[arg(long, value_name = "N")]
    pub shards_in_flight: Option<usize>,
    /// Bytes of fetched samples held in memory at most, e.g. 1GiB [default: 1GiB]
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub memory_budget: Option<u64>,
    /// Bytes of shard indexes held in memory at most (indexed reads), e.g. 256MiB [default:
    /// 128MiB]
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub index_cache: Option<u64>,
    /// Bytes each shard stream requests ahead of the parser at most [default: 64MiB]
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub max_window: Option<u64>,
    /// Deliver samples in the source's exact order rather than as they complete
    #[arg(long)]
    pub strict_order: bool,
    /// Leave out samples whose object differs from the dataset's manifest or listing (size,
    /// ETag, CRC32C), counted and reported, instead of failing
    #[arg(long)]
    pub skip_changed: bool,
    /// Read a dataset whose `bucketload shard` run never finished (a run record without a
    /// manifest): the shards that are there, with a warning naming how much is missing, instead
    /// of failing
    #[arg(long)]
    pub allow_incomplete: bool,
    /// List the dataset (and read its shard indexes) even when it has a bucketload manifest:
    /// objects added since the manifest was written are read, removed ones are not missed
    #[arg(long)]
    pub no_manifest: bool,
    /// Before reading, list the dataset once and fail if its manifest differs (objects added,
    /// removed or resized), naming them and the command that refreshes the manifest
    #[arg(long, conflicts_with = "no_manifest")]
    pub check_manifest: bool,
    /// Mix several datasets: the share of samples drawn from each, in their order, e.g.
    /// 0.7,0.3 (normalised by their sum) [default: equal]
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "W,W,...",
        allow_hyphen_values = true
    )]
    pub weights: Option<Vec<f64>>,
    /// Samples of a mixture's epoch over all ranks [default: the datasets' sizes added]
    #[arg(long, value_name = "N")]
    pub samples_per_epoch: Option<u64>,
}

impl LoaderArgs {
    /// How the dataset's manifest is used.
    pub fn manifest(&self) -> ManifestUse {
        match (self.no_manifest, self.check_manifest) {
            (true, _) => ManifestUse::Ignore,
            (false, true) => ManifestUse::Check,
            (false, false) => ManifestUse::Trust,
        }
    }
}

/// `--format`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FormatArg {
    /// The manifest's kind
    Auto,
    /// One object per sample
    Files,
    /// Tar shards streamed front to back
    Shards,
    /// Tar shards read sample by sample through their index
    Indexed,
}

/// `--remainder`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RemainderArg {
    /// Repeat samples so every rank gets ceil(N / world)
    Pad,
    /// Leave out samples so every rank gets floor(N / world)
    Drop,
    /// Every sample exactly once: the first N mod world ranks get one more (for evaluation)
    Exact,
}

/// The loader's configuration from the flags.
pub fn loader_config(
    store: &StoreArgs,
    a: &LoaderArgs,
    uri: &str,
    epochs: u64,
) -> anyhow::Result<LoaderConfig> {
    let concurrency = store.concurrency.unwrap_or(DEFAULT_LOADER_CONCURRENCY);
    let store_config = store.config().with_concurrency(concurrency);
    let mut order = match a.no_shuffle {
        true => Order::sequential(),
        false => Order::shuffled(a.seed),
    };
    if let Some(buffer) = a.shuffle_buffer {
        order = order.with_shuffle_buffer(buffer);
    }
    let remainder = match a.remainder {
        RemainderArg::Pad => Remainder::Pad,
        RemainderArg::Drop => Remainder::Drop,
        RemainderArg::Exact => Remainder::Exact,
    };
    let format = match a.format {
        FormatArg::Auto => Format::Auto,
        FormatArg::Files => Format::Files,
        FormatArg::Shards => Format::Shards,
        FormatArg::Indexed => Format::Indexed,
    };
    let mut builder = LoaderConfig::builder(uri)
        .with_store_config(store_config)
        .with_format(format)
        .with_concurrency(concurrency)
        .with_epochs(epochs)
        .with_skip_changed(a.skip_changed)
        .with_allow_incomplete(a.allow_incomplete)
        .with_manifest(a.manifest())
        .with_order(order)
        .with_partition(Partition::new(a.rank, a.world_size).with_remainder(remainder));
    if a.strict_order {
        builder = builder.with_delivery(Delivery::Strict);
    }
    if let Some(bytes) = a.memory_budget {
        builder = builder.with_memory_budget(bytes);
    }
    if let Some(bytes) = a.index_cache {
        builder = builder.with_index_cache(bytes);
    }
    if let Some(n) = a.shards_in_flight {
        builder = builder.with_shards_in_flight(n);
    }
    if let Some(window) = a.max_window {
        let prefetch = PrefetchConfig::for_streams()
            .with_max_window(window)
            .with_part_size(window.min(PrefetchConfig::default().part_size));
        builder = builder.with_prefetch(prefetch);
    }
    if let Some(dir) = &a.cache {
        let size = a.cache_size.unwrap_or(bucketload_cache::DEFAULT_CAPACITY);
        let cache = CacheBuilder::new(dir, size)
            .build()
            .with_context(|| format!("cannot open the cache at {}", dir.display()))?;
        builder = builder.with_cache(Arc::new(cache));
        if let Some(ttl) = a.metadata_ttl {
            builder = builder.with_metadata_ttl(ttl);
        }
    }
    Ok(builder.build()?)
}

/// The dataset a command reads: one, or a weighted mixture of several.
#[derive(Debug)]
pub enum Datasets {
    /// One dataset, read by its loader.
    One(Loader),
    /// Several, mixed by `--weights`.
    Mix(Mixture),
}

/// One epoch of [`Datasets`].
pub type EpochStream = Either<SampleStream, MixStream>;

impl Datasets {
    /// Opens `uris` (local paths already absolute): one dataset as it is, or a mixture when
    /// there are several, or `--weights` or `--samples-per-epoch` are given.
    pub async fn open(
        store: &StoreArgs,
        a: &LoaderArgs,
        uris: &[String],
        epochs: u64,
    ) -> anyhow::Result<Datasets> {
        let configs = uris
            .iter()
            .map(|uri| loader_config(store, a, uri, epochs))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let datasets = match (configs.len(), &a.weights, a.samples_per_epoch) {
            (1, None, None) => {
                let config = configs.into_iter().next().context("one dataset")?;
                Datasets::One(Loader::open(config).await?)
            }
            (n, weights, samples) => {
                let equal = vec![1.0; n];
                let weights = weights.as_deref().unwrap_or(&equal);
                Datasets::Mix(Mixture::open(configs, weights, samples).await?)
            }
        };
        for store in datasets.stores() {
            crate::metrics::register(store);
        }
        Ok(datasets)
    }

    /// The stores read, one per dataset.
    pub fn stores(&self) -> Vec<&Store> {
        match self {
            Datasets::One(loader) => vec![loader.store()],
            Datasets::Mix(mix) => mix.loaders().iter().map(Loader::store).collect(),
        }
    }

    /// This worker's samples of epoch `epoch`.
    pub fn epoch(&self, epoch: u64) -> bucketload::Result<EpochStream> {
        Ok(match self {
            Datasets::One(loader) => Either::Left(loader.epoch(epoch)?),
            Datasets::Mix(mix) => Either::Right(mix.epoch(epoch)?),
        })
    }

    /// Samples this worker reads per epoch.
    pub fn samples_per_epoch(&self) -> bucketload::Result<u64> {
        match self {
            Datasets::One(loader) => loader.samples_per_epoch(),
            Datasets::Mix(mix) => Ok(mix.worker_samples_per_epoch()),
        }
    }

    /// The loaders' counters (all of a mixture's together).
    pub fn stats(&self) -> LoaderStats {
        match self {
            Datasets::One(loader) => loader.stats(),
            Datasets::Mix(mix) => mix.stats(),
        }
    }

    /// The format read, lowercase; a mixture's formats joined by `+`.
    pub fn format(&self) -> String {
        let name = |l: &Loader| format!("{:?}", l.format()).to_lowercase();
        match self {
            Datasets::One(loader) => name(loader),
            Datasets::Mix(mix) => mix.loaders().iter().map(name).collect::<Vec<_>>().join("+"),
        }
    }

    /// Whether every dataset is streamed shard by shard.
    pub fn streams_shards(&self) -> bool {
        match self {
            Datasets::One(loader) => loader.format() == Format::Shards,
            Datasets::Mix(mix) => mix.loaders().iter().all(|l| l.format() == Format::Shards),
        }
    }
}
