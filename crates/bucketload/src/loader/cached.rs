//! The loader's use of the disk cache: lookups and inserts on blocking threads, failures of the
//! cache directory counted and logged but never fatal (the bytes are still in the store).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bucketload_cache::{Cache, CacheKey, ObjectVersion};
use bytes::Bytes;
use tokio::sync::Notify;

use super::stats::{Counters, add};

/// The cache of a loader and what it counts into.
#[derive(Debug, Clone)]
pub(crate) struct CacheUse {
    pub(crate) cache: Arc<Cache>,
    /// Block fetches still filling the cache, possibly after their reader went away.
    pub(crate) fills: Arc<Fills>,
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

impl CacheUse {
    /// The cached bytes of `key` at `version`, counted as a hit or a miss.
    pub(crate) async fn get(
        &self,
        key: &CacheKey,
        version: &ObjectVersion,
        counters: &Counters,
    ) -> Option<Bytes> {
        let (cache, k, v) = (self.cache.clone(), key.clone(), version.clone());
        let found = tokio::task::spawn_blocking(move || cache.get(&k, &v)).await;
        match found {
            Ok(Ok(lookup)) => {
                let hit = lookup.hit();
                add(
                    match hit {
                        Some(_) => &counters.cache_hits,
                        None => &counters.cache_misses,
                    },
                    1,
                );
                hit
            }
            Ok(Err(e)) => self.failed(counters, "lookup", key, &e.to_string()),
            Err(e) => self.failed(counters, "lookup", key, &e.to_string()),
        }
    }

    /// Stores `body` as `key` at `version`; waits until it is visible to other processes.
    pub(crate) async fn insert(
        &self,
        key: &CacheKey,
        version: &ObjectVersion,
        body: Bytes,
        counters: &Counters,
    ) {
        let (cache, k, v) = (self.cache.clone(), key.clone(), version.clone());
        let done = tokio::task::spawn_blocking(move || cache.insert(&k, &v, body)).await;
        match done {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                self.failed(counters, "insert", key, &e.to_string());
            }
            Err(e) => {
                self.failed(counters, "insert", key, &e.to_string());
            }
        }
    }

    fn failed(&self, counters: &Counters, op: &str, key: &CacheKey, error: &str) -> Option<Bytes> {
        add(&counters.cache_errors, 1);
        tracing::warn!(
            cache = %self.cache.dir().display(),
            key = key.key(),
            op,
            error,
            "loader: cache failed, reading from the store instead"
        );
        None
    }
}

/// A streamed shard's blocks in the cache: each ranged GET of its prefetcher is one entry (the
/// range is part of the key), looked up before the GET and stored after it. The prefetcher's
/// requests are the same every epoch for the same span, so epoch 2 finds every block.
/// Validated by the shard's size (and the cache's checksum of every entry).
#[derive(Debug, Clone)]
pub(crate) struct Blocks {
    pub(crate) inner: Arc<super::Inner>,
    pub(crate) key: String,
    pub(crate) version: ObjectVersion,
}

impl Blocks {
    /// Marks a fill of the cache as in progress until the returned guard drops.
    pub(crate) fn fill(&self) -> Option<Fill> {
        self.inner.cache.as_ref().map(|c| c.fills.start())
    }

    fn cache_key(&self, range: std::ops::Range<u64>) -> CacheKey {
        CacheKey::new(self.inner.store_uri.clone(), self.key.clone()).with_range(range)
    }

    /// The cached bytes of `range`, counted as a hit or a miss.
    pub(crate) async fn get(&self, range: std::ops::Range<u64>) -> Option<Bytes> {
        let cache = self.inner.cache.as_ref()?;
        let key = self.cache_key(range);
        cache.get(&key, &self.version, &self.inner.counters).await
    }

    /// Stores the bytes of `range`.
    pub(crate) async fn put(&self, range: std::ops::Range<u64>, body: Bytes) {
        if let Some(cache) = &self.inner.cache {
            let key = self.cache_key(range);
            cache
                .insert(&key, &self.version, body, &self.inner.counters)
                .await;
        }
    }
}
