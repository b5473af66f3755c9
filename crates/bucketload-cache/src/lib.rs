//! A local disk cache of object bytes for bucketload (`--cache DIR
//! --cache-size 20GiB`): bounded, validated before use, shared safely by
//! the processes of one node (DataLoader workers, ranks) and repaired
//! automatically after a crash.
//!
//! - [`CacheBuilder`] opens a directory with a capacity and a [`Policy`];
//!   [`Cache`] is the handle, `Send + Sync`, shared with an `Arc`.
//! - [`Cache::get`] looks up a [`CacheKey`] (store URI, object key,
//!   optional byte range) expecting an [`ObjectVersion`] (ETag, size). A
//!   changed object, a failed checksum or a truncated entry is a miss, and
//!   the entry is removed; damaged bytes are never served.
//! - [`Cache::insert`] stores a body. It becomes visible atomically (temp
//!   file, then `rename`), so no process ever reads half an entry.
//! - [`Cache::begin_epoch`] drives the default [`Policy::Resident`]: once
//!   the cache is full it keeps the entries read in the previous epoch and
//!   admits new ones only in place of entries idle for a whole epoch, so a
//!   dataset larger than the cache still hits on a stable share of it every
//!   epoch (see `docs/CACHE.md` for the policy and its measured hit rates).
//! - [`Cache::stats`] returns a [`CacheStats`] snapshot (serde
//!   `Serialize`) for the loader's report.
//!
//! Processes coordinate through `flock` locks only, which the kernel
//! releases when a process dies: there is no lock file that can go stale.
//! The size bound is kept exactly for entry files (in 4 KiB blocks); files
//! being written add at most one entry per concurrent writer. All calls do
//! blocking I/O: from async code, use `tokio::task::spawn_blocking`.
//!
//! ```
//! use bucketload_cache::{CacheBuilder, CacheKey, Lookup, Miss, ObjectVersion};
//! use bytes::Bytes;
//!
//! let dir = tempfile::tempdir()?;
//! let cache = CacheBuilder::new(dir.path(), 64 << 20).build()?;
//! cache.begin_epoch("s3://bucket/train", 0)?;
//!
//! let key = CacheKey::new("s3://bucket/train", "n01/000001.jpg");
//! let version = ObjectVersion::new("\"9b2cf535f27731c974343645a3985328\"", 5);
//! assert_eq!(cache.get(&key, &version)?, Lookup::Miss(Miss::Absent));
//! cache.insert(&key, &version, Bytes::from_static(b"jpeg!"))?;
//! assert_eq!(cache.get(&key, &version)?.hit(), Some(Bytes::from_static(b"jpeg!")));
//!
//! // The object changed in the store: the old bytes are not served.
//! let changed = ObjectVersion::new("\"0cc175b9c0f1b6a831c399e269772661\"", 5);
//! assert_eq!(cache.get(&key, &changed)?, Lookup::Miss(Miss::Stale));
//! assert_eq!(cache.stats()?.stale, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(unsafe_code)]

/// The capacity of a cache when its user names a directory and no size: 20 GiB.
pub const DEFAULT_CAPACITY: u64 = 20 << 30;

mod builder;
mod cache;
mod entry;
mod error;
mod evict;
mod key;
mod mapped;
mod policy;
mod scan;
mod state;
mod stats;

pub use builder::CacheBuilder;
pub use cache::{Cache, Inserted, Lookup, Miss, Rejection};
pub use entry::{ENTRY_MAGIC, ENTRY_VERSION};
pub use error::{Error, Result};
pub use key::{CacheKey, ObjectVersion};
pub use policy::Policy;
pub use scan::BLOCK;
pub use stats::CacheStats;

#[cfg(test)]
mod tests {
    #[test]
    fn handles_can_be_shared_across_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<crate::Cache>();
        shareable::<crate::Error>();
    }
}
