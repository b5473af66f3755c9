//! Counters of one cache handle and the snapshot the loader reports.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;

/// A snapshot of a cache: this handle's counters since it was opened, and
/// the size of the whole cache directory (shared by every process).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CacheStats {
    /// Lookups served from the cache.
    pub hits: u64,
    /// Lookups not served: absent, stale or corrupt entries.
    pub misses: u64,
    /// Misses whose entry held another version of the object (ETag or
    /// size changed); the entry was removed.
    pub stale: u64,
    /// Misses whose entry failed its checksums or was truncated; the entry
    /// was removed.
    pub corrupt: u64,
    /// Entries written.
    pub inserts: u64,
    /// Entries not written: the cache was full and the policy found no
    /// entry it may evict, or the entry is larger than the cache.
    pub rejected: u64,
    /// Entries this handle evicted to make room.
    pub evictions: u64,
    /// Body bytes served by hits.
    pub bytes_read: u64,
    /// Body bytes written by inserts.
    pub bytes_written: u64,
    /// Temporary files of crashed writers removed by this handle.
    pub temp_removed: u64,
    /// Bytes held by the cache directory, as accounted against the
    /// capacity (entry files rounded up to 4 KiB blocks).
    pub size_bytes: u64,
    /// Entries in the cache directory.
    pub entries: u64,
    /// The configured capacity.
    pub capacity_bytes: u64,
    /// The epoch clock (generations started by `begin_epoch`).
    pub generation: u64,
}

/// Live counters, updated without locks.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub stale: AtomicU64,
    pub corrupt: AtomicU64,
    pub inserts: AtomicU64,
    pub rejected: AtomicU64,
    pub evictions: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub temp_removed: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// The counters into a snapshot; the shared fields are left at 0.
    pub fn snapshot(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            stale: self.stale.load(Relaxed),
            corrupt: self.corrupt.load(Relaxed),
            inserts: self.inserts.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
            bytes_read: self.bytes_read.load(Relaxed),
            bytes_written: self.bytes_written.load(Relaxed),
            temp_removed: self.temp_removed.load(Relaxed),
            ..CacheStats::default()
        }
    }
}
