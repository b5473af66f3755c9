//! Shard indexes on demand: fetched when their shard comes up in a worker's order, held in a
//! cache bounded by bytes, never all up front.
//!
//! [`index_of`] gives shard `i`'s index: from memory when the cache holds it, else one GET of
//! its `.idx` (with a disk cache: from disk when it holds the index's version, asked with one
//! HEAD; a plain tar shard of a listing, without an index, is read and indexed in memory as
//! `bucketload index` would). Each index is checked when it arrives: against the shard's size
//! (its offsets must lie inside the shard) and the sample count the plan was made from; a
//! disagreement is an error naming the index and saying what to rebuild. Concurrent requests
//! for one index share one fetch. A checked index is held as a [`CompactIndex`] (flat arrays,
//! some 70 bytes per two-member sample where the parsed index takes about 250).
//!
//! The cache evicts the least recently used indexes once they hold more than its bound
//! ([`LoaderBuilder::with_index_cache`](super::LoaderBuilder::with_index_cache)); an index in
//! use is dropped when its last user is done. The random-access source copies the few entries
//! it needs out of an index, so an index is held only while a chunk of the order is planned.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use bucketload_cache::{CacheKey, ObjectVersion};
use bucketload_format::ShardIndex;
use bucketload_store::ETag;
use bucketload_store::object_store::{self, ObjectStoreExt, path::Path};
use bytes::Bytes;
use tokio::sync::OnceCell;

use super::Inner;
use super::compact_index::CompactIndex;
use super::stats::add;
use crate::base::Location;
use crate::shards::{IndexOptions, index_key, index_shard};
use crate::{Error, Result};

type Cell = Arc<OnceCell<Arc<CompactIndex>>>;

/// Shard indexes in memory, least recently used evicted past a byte bound.
#[derive(Debug)]
pub(crate) struct IndexCache {
    bound: u64,
    lru: Mutex<Lru>,
}

#[derive(Debug, Default)]
struct Lru {
    entries: HashMap<usize, Entry>,
    /// Ready entries by last use: tick → shard.
    order: BTreeMap<u64, usize>,
    /// Bytes of the ready entries.
    bytes: u64,
    tick: u64,
}

#[derive(Debug)]
struct Entry {
    cell: Cell,
    /// Its bytes and last use, once it is ready and counted.
    ready: Option<(u64, u64)>,
}

impl IndexCache {
    /// A cache holding indexes of at most `bound` bytes (the most recently used one always).
    pub(crate) fn new(bound: u64) -> IndexCache {
        IndexCache {
            bound,
            lru: Mutex::default(),
        }
    }

    /// Shard `shard`'s cell, counted as used now.
    fn cell(&self, shard: usize) -> Cell {
        let mut lru = self.lru.lock().unwrap_or_else(PoisonError::into_inner);
        lru.tick += 1;
        let tick = lru.tick;
        let Lru { entries, order, .. } = &mut *lru;
        let entry = entries.entry(shard).or_insert_with(|| Entry {
            cell: Arc::default(),
            ready: None,
        });
        if let Some((bytes, used)) = entry.ready {
            order.remove(&used);
            order.insert(tick, shard);
            entry.ready = Some((bytes, tick));
        }
        entry.cell.clone()
    }

    /// Counts `cell`'s index once it is ready (a no-op after the first time), then evicts the
    /// least recently used indexes past the bound.
    fn admit(&self, shard: usize, cell: &Cell, index: &CompactIndex) {
        let mut lru = self.lru.lock().unwrap_or_else(PoisonError::into_inner);
        lru.tick += 1;
        let tick = lru.tick;
        let Lru {
            entries,
            order,
            bytes,
            ..
        } = &mut *lru;
        match entries.get_mut(&shard) {
            Some(entry) if Arc::ptr_eq(&entry.cell, cell) && entry.ready.is_none() => {
                let size = index.resident_bytes();
                entry.ready = Some((size, tick));
                order.insert(tick, shard);
                *bytes += size;
            }
            _ => return,
        }
        while *bytes > self.bound && order.len() > 1 {
            let Some((_, oldest)) = order.pop_first() else {
                break;
            };
            if let Some(Entry {
                ready: Some((size, _)),
                ..
            }) = entries.remove(&oldest)
            {
                *bytes -= size;
            }
        }
    }

    /// Forgets a cell whose fetch failed (a later request fetches again).
    fn forget(&self, shard: usize, cell: &Cell) {
        let mut lru = self.lru.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = lru.entries.get(&shard)
            && Arc::ptr_eq(&entry.cell, cell)
            && entry.ready.is_none()
        {
            lru.entries.remove(&shard);
        }
    }

    /// Puts an index made in memory (a plain tar scanned when the loader opened).
    pub(crate) fn insert(&self, shard: usize, index: CompactIndex) {
        let index = Arc::new(index);
        let cell = self.cell(shard);
        if cell.set(index.clone()).is_ok() {
            self.admit(shard, &cell, &index);
        }
    }

    /// Indexes held and their bytes.
    #[cfg(test)]
    fn held(&self) -> (usize, u64) {
        let lru = self.lru.lock().unwrap_or_else(PoisonError::into_inner);
        (lru.order.len(), lru.bytes)
    }
}

/// Shard `shard`'s index, checked: from the cache, else fetched (once, however many ask).
pub(crate) async fn index_of(inner: &Inner, shard: usize) -> Result<Arc<CompactIndex>> {
    let cache = &inner.indexes;
    let cell = cache.cell(shard);
    let got = cell
        .get_or_try_init(|| async { fetch(inner, shard).await.map(Arc::new) })
        .await;
    match got {
        Ok(index) => {
            cache.admit(shard, &cell, index);
            Ok(index.clone())
        }
        Err(e) => {
            cache.forget(shard, &cell);
            Err(e)
        }
    }
}

/// Reads shard `shard`'s index (or indexes a plain tar), checks it and compacts it.
async fn fetch(inner: &Inner, shard: usize) -> Result<CompactIndex> {
    let table = inner.shards();
    let key = table.key(shard);
    let loc = &inner.location;
    let index = match table.has_index(shard) {
        true => read(inner, &key).await?,
        false => scan(loc, &key, table.size(shard)).await?,
    };
    checked(loc, &key, table.size(shard), &index)?;
    let samples = index.samples.len() as u64;
    if samples != table.samples(shard) {
        return Err(Error::Corrupt {
            uri: loc.uri_of(&index_key(&key)),
            reason: format!(
                "lists {samples} samples, the dataset's manifest {}; rebuild the manifest \
                 (`bucketload shard` or `bucketload index`), or read with --manifest ignore",
                table.samples(shard)
            ),
        });
    }
    let named = match table.has_index(shard) {
        true => index_key(&key),
        false => key,
    };
    CompactIndex::new(&index, &loc.uri_of(&named))
}

/// Checks that `index` describes the shard at `key` of `size` bytes, before any of its offsets
/// is used: a bad index is an error naming it, never a panic or a wrong sample.
pub(crate) fn checked(
    location: &Location,
    key: &Path,
    size: u64,
    index: &ShardIndex,
) -> Result<()> {
    let index_uri = location.uri_of(&index_key(key));
    let shard_uri = location.uri_of(key);
    Ok(index.validate(&index_uri, &shard_uri, size)?)
}

/// The index of the shard at `key`, parsed: one GET, or from the disk cache.
async fn read(inner: &Inner, key: &Path) -> Result<ShardIndex> {
    let loc = &inner.location;
    let ikey = index_key(key);
    let bytes = match &inner.cache {
        None => get(inner, &ikey).await?.0,
        Some(cache) => {
            let ckey = CacheKey::new(inner.store_uri.clone(), ikey.as_ref());
            let cached = match cache.cache().absent(&ckey) {
                true => None,
                false => match head(inner, &ikey).await? {
                    Some(version) => cache.get(&ckey, &version).await,
                    None => None,
                },
            };
            match cached {
                Some(bytes) => bytes,
                None => {
                    let (bytes, version) = get(inner, &ikey).await?;
                    cache.insert_later(ckey, version, bytes.clone()).await;
                    bytes
                }
            }
        }
    };
    Ok(ShardIndex::parse(&loc.uri_of(&ikey), &bytes)?)
}

/// The index object at `ikey` and the version the store returned.
async fn get(inner: &Inner, ikey: &Path) -> Result<(Bytes, ObjectVersion)> {
    let loc = &inner.location;
    add(&inner.counters.index_gets, 1);
    let _request = inner.counters.busy();
    let got = async {
        let response = loc.store().get(ikey).await?;
        let version = version_of(&response.meta);
        Ok::<_, object_store::Error>((response.bytes().await?, version))
    };
    got.await.map_err(|e| missing(loc, ikey, e))
}

/// The index object's version (ETag and size), `None` when it is gone.
async fn head(inner: &Inner, ikey: &Path) -> Result<Option<ObjectVersion>> {
    let loc = &inner.location;
    let _request = inner.counters.busy();
    match loc.store().head(ikey).await {
        Ok(meta) => Ok(Some(version_of(&meta))),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(loc.error(ikey, e)),
    }
}

fn version_of(meta: &object_store::ObjectMeta) -> ObjectVersion {
    ObjectVersion::with_etag(ETag::from_store(meta.e_tag.as_deref()), meta.size)
}

/// The error of a failed index GET: a missing index says how to write it.
fn missing(loc: &Location, ikey: &Path, err: object_store::Error) -> Error {
    match err {
        object_store::Error::NotFound { .. } => Error::invalid_input(format!(
            "{} is missing; run `bucketload index` on the dataset, or read it with --format \
             shards",
            loc.uri_of(ikey)
        )),
        e => loc.error(ikey, e),
    }
}

/// A plain tar shard (no index; only from a listing) read once and indexed in memory.
async fn scan(loc: &Location, key: &Path, size: u64) -> Result<ShardIndex> {
    let Some(store) = loc.handle() else {
        return Err(Error::invalid_input(format!(
            "{} has no index, so it cannot be read sample by sample; run `bucketload index` \
             or use --format shards",
            loc.uri_of(key)
        )));
    };
    let options = IndexOptions::builder().build()?;
    index_shard(store, key, size, &options, &|_| {}).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketload_format::MemberLocation;

    fn index(samples: usize) -> CompactIndex {
        let mut builder = bucketload_format::ShardIndexBuilder::new();
        for i in 0..samples {
            let at = i as u64 * 1024;
            let member = MemberLocation {
                header_offset: at,
                data_offset: at + 512,
                size: 10,
            };
            builder.add(&format!("{i:06}.jpg"), member, b"0123456789");
        }
        let index = builder.finish(&bucketload_format::ShardSummary {
            size: samples as u64 * 1024,
            crc32c: 0,
            md5: [0; 16],
            members: samples as u64,
        });
        CompactIndex::new(&index, "s3://b/shard.tar.idx").unwrap()
    }

    #[test]
    fn the_least_recently_used_indexes_go_past_the_bound() {
        let one = index(10).resident_bytes();
        let cache = IndexCache::new(3 * one);
        for shard in 0..3 {
            cache.insert(shard, index(10));
        }
        assert_eq!(cache.held(), (3, 3 * one));
        cache.cell(0); // used: shard 1 is now the oldest
        cache.insert(3, index(10));
        let lru = cache.lru.lock().unwrap();
        let mut held: Vec<usize> = lru.order.values().copied().collect();
        held.sort_unstable();
        assert_eq!(held, [0, 2, 3]);
        assert!(!lru.entries.contains_key(&1));
    }

    #[test]
    fn one_index_larger_than_the_bound_is_still_held_while_it_is_the_newest() {
        let cache = IndexCache::new(1);
        cache.insert(0, index(5));
        assert_eq!(cache.held().0, 1);
        cache.insert(1, index(5));
        assert_eq!(cache.held().0, 1, "the older one went");
    }

    #[test]
    fn the_default_bound_holds_more_indexes_than_the_parsed_ones_did() {
        // 1,000 samples of two members (jpg, cls) with 16-byte keys, as `bucketload shard`
        // writes them: the parsed index took 246,056 bytes, so 256 MiB held 1,090.
        let mut builder = bucketload_format::ShardIndexBuilder::new();
        for i in 0..1000u64 {
            for (m, ext) in ["jpg", "cls"].iter().enumerate() {
                let at = (2 * i + m as u64) * 5120;
                let member = MemberLocation {
                    header_offset: at,
                    data_offset: at + 512,
                    size: 4000,
                };
                builder.add_with_crc(&format!("class_000/{i:06}.{ext}"), member, 0);
            }
        }
        let summary = bucketload_format::ShardSummary {
            size: 2000 * 5120,
            crc32c: 0,
            md5: [0; 16],
            members: 2000,
        };
        let index = CompactIndex::new(&builder.finish(&summary), "s3://b/s.tar.idx").unwrap();
        let held = super::super::DEFAULT_INDEX_CACHE / index.resident_bytes();
        assert!(held >= 1_090, "{held} indexes");
    }

    #[test]
    fn an_index_of_a_thousand_samples_is_counted_near_its_real_size() {
        // Per sample: a 6-byte key, its end, its members' end and one 24-byte row.
        let bytes = index(1000).resident_bytes();
        assert!((38_000..40_000).contains(&bytes), "{bytes}");
    }
}
