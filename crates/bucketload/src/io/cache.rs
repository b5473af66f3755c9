//! The disk cache as readers use it: lookups and inserts on blocking threads (the cache does
//! file I/O), hits, misses and failures counted, a failure of the cache directory logged but
//! never fatal (the bytes are still in the store).
//!
//! Readers look an object (or a byte range of it) up under the version they expect, and insert
//! what they fetched under the version the store *returned* (its ETag and size), never under the
//! one expected: an entry is served only as the version it was fetched as (docs/CACHE.md). The
//! loader and the mount both read through a [`DiskCache`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bucketload_cache::{Cache, CacheKey, ObjectVersion};
use bytes::Bytes;
use serde::Serialize;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// A disk cache and what its readers count into; cheap to clone (every clone counts into the
/// same counters).
#[derive(Debug, Clone)]
pub struct DiskCache {
    cache: Arc<Cache>,
    counters: Arc<Counters>,
    /// Block fetches and inserts still filling the cache, possibly after their reader went away.
    fills: Arc<Fills>,
    /// Bytes (in KiB) that [`DiskCache::insert_later`] may hold while they wait to be written.
    backlog: Arc<Semaphore>,
    /// Cache calls running at once (see [`IO_SLOTS`]).
    slots: Arc<Semaphore>,
    /// Entries waiting for [`DiskCache::insert_later`]'s writer.
    queue: Arc<Mutex<Queue>>,
}

#[derive(Debug, Default)]
struct Queue {
    entries: VecDeque<Pending>,
    /// Whether a blocking thread is writing the queue.
    writing: bool,
}

/// An entry waiting to be written, holding its room in the backlog and its fill.
#[derive(Debug)]
struct Pending {
    key: CacheKey,
    version: ObjectVersion,
    body: Bytes,
    _room: OwnedSemaphorePermit,
    _fill: Fill,
}

/// Cache calls (file I/O on blocking threads) running at once. Every call is short, and the
/// page cache serves them at memory speed: a few threads keep up with hundreds of requests in
/// flight, where one thread per request would spend more time creating and ending threads than
/// reading and writing.
const IO_SLOTS: usize = 4;

/// What [`DiskCache::insert_later`] may hold in memory, in KiB: beyond it, a caller waits for
/// the writes (the disk is slower than the store), so memory stays bounded.
const BACKLOG_KIB: u32 = 128 << 10;

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
            backlog: Arc::new(Semaphore::new(BACKLOG_KIB as usize)),
            slots: Arc::new(Semaphore::new(IO_SLOTS)),
            queue: Arc::default(),
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
        // A cold cache answers here, without a trip to a blocking thread.
        if self.cache.absent(key) {
            add(&self.counters.misses, 1);
            return None;
        }
        let (cache, k, v) = (self.cache.clone(), key.clone(), version.clone());
        let found = self.blocking(move || cache.get(&k, &v)).await;
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
        self.insert_chunks(key, version, vec![body]).await;
    }

    /// [`DiskCache::insert`] of a body in pieces, written without joining them.
    pub(crate) async fn insert_chunks(
        &self,
        key: &CacheKey,
        version: &ObjectVersion,
        body: Vec<Bytes>,
    ) {
        let (cache, k, v) = (self.cache.clone(), key.clone(), version.clone());
        let done = self
            .blocking(move || cache.insert_chunks(&k, &v, &body))
            .await;
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

    /// Stores `body` in the background and returns at once, so that a reader never waits for
    /// the disk: only when more than [`BACKLOG_KIB`] wait to be written does it wait for room.
    /// The write counts as a fill in progress ([`Fills::idle`] waits for it).
    /// Writes go to one blocking thread at a time, which writes every queued entry before it
    /// returns: no thread hand-off per entry.
    pub(crate) async fn insert_later(&self, key: CacheKey, version: ObjectVersion, body: Bytes) {
        let kib = u32::try_from(body.len().div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(BACKLOG_KIB);
        let Ok(room) = Arc::clone(&self.backlog).acquire_many_owned(kib).await else {
            return;
        };
        let pending = Pending {
            key,
            version,
            body,
            _room: room,
            _fill: self.fills.start(),
        };
        let start_writer = {
            let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.entries.push_back(pending);
            !std::mem::replace(&mut queue.writing, true)
        };
        if start_writer {
            let this = self.clone();
            tokio::task::spawn_blocking(move || this.write_queued());
        }
    }

    /// Writes queued entries until the queue is empty (on a blocking thread).
    fn write_queued(&self) {
        loop {
            let next = {
                let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                let next = queue.entries.pop_front();
                queue.writing = next.is_some();
                next
            };
            let Some(p) = next else { return };
            let stored = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.cache
                    .insert_chunks(&p.key, &p.version, std::slice::from_ref(&p.body))
            }));
            match stored {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    self.failed("insert", &p.key, &e.to_string());
                }
                Err(_) => {
                    self.failed("insert", &p.key, "the write panicked");
                }
            }
        }
    }

    /// Runs `f` on a blocking thread once one of the [`IO_SLOTS`] is free.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::result::Result<T, tokio::task::JoinError> {
        // The semaphore is never closed.
        let slot = self.slots.acquire().await;
        let done = tokio::task::spawn_blocking(f).await;
        drop(slot);
        done
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

    /// Stores the bytes of `range`, as they arrived.
    pub(crate) async fn put(&self, range: std::ops::Range<u64>, body: Vec<Bytes>) {
        let key = self.cache_key(range);
        self.cache.insert_chunks(&key, &self.version, body).await;
    }
}
