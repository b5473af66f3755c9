//! Reading objects: the prefetching range reader and the disk cache as readers use it, shared by
//! the loader and the mount (`bucketload-fuse`).
//!
//! - [`read_range`]: one byte range of one object, read front to back with ranged GETs that run
//!   ahead of the consumer in a growing window ([`PrefetchConfig`]), broken bodies requested
//!   again, counted in [`PrefetchCounters`]. The loader's shard streams and the mount's
//!   sequential reads use it.
//! - [`DiskCache`]: lookups and inserts of a [`bucketload_cache::Cache`] on blocking threads,
//!   counted ([`CacheCounts`]), failures logged and never fatal. An entry is looked up under the
//!   version expected and inserted under the version the store returned.
//! - `checked`: how a response differs from what a dataset's manifest promises of the object
//!   (size, ETag, CRC32C).

mod cache;
pub(crate) mod checked;
mod prefetch;

pub(crate) use cache::Blocks;
pub use cache::{CacheCounts, DiskCache};
pub(crate) use prefetch::read_range_with;
pub use prefetch::{PrefetchConfig, PrefetchCounters, PrefetchSnapshot, read_range};
