//! The disk cache as readers use it: lookups and inserts on blocking threads (the cache does
//! file I/O), hits, misses and failures counted, a failure of the cache directory logged but
//! never fatal (the bytes are still in the store).
//!
//! Readers look an object (or a byte range of it) up under the version they expect, and insert
//! what they fetched under the version the store *returned* (its ETag and size), never under the
//! one expected: an entry is served only as the version it was fetched as (docs/CACHE.md). The
//! loader and the mount both read through a [`DiskCache`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bucketload_cache::{Cache, CacheKey, ObjectVersion};
use bytes::Bytes;
use serde::Serialize;
use tokio::sync::Notify;

/// A disk cache and what its readers count into; cheap to clone (every clone counts into the
/// same counters).
#[derive(Debug, Clone)]
pub struct DiskCache {
    cache: Arc<Cache>,
    counters: Arc<Counters>,
    /// Block fetches still filling the cache, possibly after their reader went away.
    fills: Arc<Fills>,
}

#[derive(Debug, Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    errors: AtomicU64,
}

/// Cache lookups.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CacheCounts {
    /// Served from disk.
    pub hits: u64,
    /// Fetched from the store (absent, stale or corrupt entries).
    pub misses: u64,
    /// Cache I/O failures (the sample was fetched from the store instead).
    pub errors: u64,
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl DiskCache {
    /// Reads through `cache`, counting from zero.
    pub fn new(cache: Arc<Cache>) -> DiskCache {
        DiskCache {
            cache,
            counters: Arc::default(),
            fills: Arc::default(),
        }
    }

    /// The cache.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// Lookups since [`DiskCache::new`].
    pub fn counts(&self) -> CacheCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CacheCounts {
            hits: get(&self.counters.hits),
            misses: get(&self.counters.misses),
            errors: get(&self.counters.errors),
        }
    }

    /// The cached bytes of `key` at `version`, counted as a hit or a miss; `None` also when the
    /// cache failed (counted and logged).
    pub async fn get(&self, key: &CacheKey, version: &ObjectVersion) -> Option<Bytes> {
        let (cache, k, v) = (self.cache.clone(), key.clone(), version.clone());
        let found = tokio::task::spawn_blocking(move || cache.get(&k, &v)).await;
        match found {
            Ok(Ok(lookup)) => {
                let hit = lookup.hit();
                add(
                    match hit {
                        Some(_) => &self.counters.hits,
                        None => &self.counters.misses,
                    },
                    1,
                );
                hit
            }
            Ok(Err(e)) => self.failed("lookup", key, &e.to_string()),
            Err(e) => self.failed("lookup", key, &e.to_string()),
        }
    }

    /// Stores `body` as `key` at `version` (the version the store returned); waits until it is
    /// visible to other processes. A failure is counted and logged.
    pub async fn insert(&self, key: &CacheKey, version: &ObjectVersion, body: Bytes) {
        let (cache, k, v) = (self.cache.clone(), key.clone(), version.clone());
        let done = tokio::task::spawn_blocking(move || cache.insert(&k, &v, body)).await;
        match done {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                self.failed("insert", key, &e.to_string());
            }
            Err(e) => {
                self.failed("insert", key, &e.to_string());
            }
        }
    }

    /// The fills in progress.
    pub(crate) fn fills(&self) -> &Arc<Fills> {
        &self.fills
    }

    fn failed(&self, op: &str, key: &CacheKey, error: &str) -> Option<Bytes> {
        add(&self.counters.errors, 1);
        tracing::warn!(
            cache = %self.cache.dir().display(),
            key = key.key(),
            op,
            error,
            "cache failed, reading from the store instead"
        );
        None
    }
}

/// Counts the cache fills in progress, so that an epoch starts only once the previous one's
/// blocks are all in the cache (a reader that stops at its last sample leaves the request for
/// the archive's trailing bytes running; it finishes and fills the cache on its own).
#[derive(Debug, Default)]
pub(crate) struct Fills {
    running: AtomicUsize,
    idle: Notify,
}

/// One fill in progress; dropping it ends the fill.
#[derive(Debug)]
pub(crate) struct Fill(Arc<Fills>);

impl Fills {
    pub(crate) fn start(self: &Arc<Self>) -> Fill {
        self.running.fetch_add(1, Ordering::AcqRel);
        Fill(Arc::clone(self))
    }

    /// Returns once no fill is in progress.
    pub(crate) async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.running.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Fill {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// A streamed object's blocks in the cache: each ranged GET of its prefetcher is one entry (the
/// range is part of the key), looked up before the GET and stored after it. The prefetcher's
/// requests are the same every epoch for the same span, so epoch 2 finds every block.
/// Validated by the object's size (and the cache's checksum of every entry).
#[derive(Debug, Clone)]
pub(crate) struct Blocks {
    pub(crate) cache: DiskCache,
    /// The store's URI, part of every cache key.
    pub(crate) store_uri: String,
    pub(crate) key: String,
    pub(crate) version: ObjectVersion,
}

impl Blocks {
    /// Marks a fill of the cache as in progress until the returned guard drops.
    pub(crate) fn fill(&self) -> Fill {
        self.cache.fills.start()
    }

    fn cache_key(&self, range: std::ops::Range<u64>) -> CacheKey {
        CacheKey::new(self.store_uri.clone(), self.key.clone()).with_range(range)
    }

    /// The cached bytes of `range`, counted as a hit or a miss.
    pub(crate) async fn get(&self, range: std::ops::Range<u64>) -> Option<Bytes> {
        self.cache.get(&self.cache_key(range), &self.version).await
    }

    /// Stores the bytes of `range`.
    pub(crate) async fn put(&self, range: std::ops::Range<u64>, body: Bytes) {
        let key = self.cache_key(range);
        self.cache.insert(&key, &self.version, body).await;
    }
}
