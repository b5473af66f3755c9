//! Dataset tools: generate, list, describe and copy datasets in any object store.
//!
//! Every tool works on a [`Location`](crate::base::Location) (a store with keys relative to its
//! prefix), which names the full URI of an object in its errors.
//!
//! - [`generate`] uploads a synthetic image-classification dataset (`class_000/000000.jpg`, ...):
//!   JPEG encoding on blocking threads (at most one per core), PUTs with many requests in flight.
//! - [`list`](crate::base::list) (in the base layer) lists one level (directories and objects)
//!   or everything below a prefix.
//! - [`stats`] describes a dataset of files or of tar shards: from its manifest when it has one
//!   (one GET), else from a listing and the shards' indexes; samples per class and per shard, size
//!   percentiles, image dimensions of a sample and the request cost of one pass.
//!   What a shard dataset's indexes say is tallied in [`shards`](crate::shards), which also
//!   reads them ([`read_indexes`](crate::shards::read_indexes)).
//! - [`copy_object`] / [`copy_tree`] copy between any two stores (local folder, S3, memory); large
//!   objects stream through ranged GETs and a multipart upload, so memory stays bounded and a failed
//!   copy never leaves a partial object.
//!
//! Long operations report to a [`Progress`](crate::base::Progress); the CLI draws bars from it.

mod copy;
mod generate;
mod inventory;
pub mod jpeg;
mod stats;
pub mod synth;
mod tally;

pub use copy::{CopyOptions, CopyReport, NotCopied, copy_object, copy_tree};
pub use generate::{GenReport, GenSpec, class_name, generate, sample_key};
pub use inventory::{InventoryObject, InventorySummary, read_inventory};
pub use stats::{
    ClassesFrom, CostEstimate, DatasetStats, RandomAccessCost, SampledImages, ShardStats,
    SizePercentiles, StatsFrom, StatsOptions, stats,
};

/// Number of decimal digits needed to write `n - 1` (at least `min`), for zero-padded names.
pub(crate) fn pad_width(n: u64, min: usize) -> usize {
    n.saturating_sub(1).to_string().len().max(min)
}
