//! Indexed shards through the disk cache in *blocks*: runs of whole samples of one shard, about
//! [`BLOCK_BYTES`] each, cached as one entry per block (the range is part of the key), so that a
//! warm epoch serves each sample as a slice of a mapped block instead of one cache entry per
//! sample.
//!
//! Parts and data flow:
//! - A shard's blocks come from its index alone: block `b` holds samples `b·n .. (b+1)·n` with
//!   `n` = [`BLOCK_BYTES`] × samples / shard size (at least one), its range from the first
//!   sample's first header to the last sample's last byte. Every process derives the same blocks
//!   from the same index, so the processes of a node share them; a sample outside its block's
//!   range (an index out of order) is read on its own, as without blocks.
//! - Each sample stream asks the store for each shard's version (ETag and size) once — one
//!   `HEAD`, or the one kept within the loader's metadata TTL — and blocks are looked up and filed
//!   under it: a shard rewritten in place is never served from its old blocks.
//! - A block is held in memory once loaded ([`Held`]): mapped blocks (cache hits) by the
//!   thousand, since they are the page cache's pages; blocks fetched from the store (heap) by a
//!   few dozen, long enough for their neighbours to find them before the cache holds them. A
//!   held block serves only the version it was loaded as. Concurrent requests of one block wait
//!   for one load: one ranged GET per block, however many of its samples are asked at once.
//! - Samples of a mapped block are slices of it (no copy); samples of a fetched block are copied
//!   out of it, so that samples waiting in the loader's budget never pin whole heap blocks.
//!
//! Blocks are used only when the dataset fits in the cache: beyond it, the cache's policy keeps
//! part of it and a block read for one sample would be read again for its neighbours; each sample
//! is then its own entry, as before (`random_access`).

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use bucketload_cache::{CacheKey, ObjectVersion};
use bytes::Bytes;
use tokio::sync::OnceCell;

use super::Inner;
use crate::io::DiskCache;
use crate::{Error, Result};

/// The size a block aims at: large enough that a warm epoch's lookups are few and each hit is a
/// memory map (entries of at least 1 MiB are mapped), small enough that a cold epoch's first
/// samples wait for little more than one round trip's worth of bytes.
pub(crate) const BLOCK_BYTES: u64 = 4 << 20;

/// Blocks fetched from the store held in memory (heap, at most `BLOCK_BYTES` each): enough for
/// the blocks being written to the cache (its write backlog holds 128 MiB).
const HELD_FETCHED: usize = 32;

/// Mapped blocks held: address space and page-cache pages only, so many (16 GiB of mappings).
const HELD_MAPPED: usize = 4096;

/// Which block of which shard.
type BlockId = (usize, u64);

/// The loader's blocks of indexed shards, shared by its sample streams.
#[derive(Debug, Default)]
pub(crate) struct Blocks {
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    cells: HashMap<BlockId, Arc<Cell>>,
    fetched: VecDeque<(BlockId, Weak<Cell>)>,
    mapped: VecDeque<(BlockId, Weak<Cell>)>,
}

/// One block of one version of its shard, loaded once.
#[derive(Debug)]
struct Cell {
    version: ObjectVersion,
    block: OnceCell<Block>,
}

#[derive(Debug, Clone)]
struct Block {
    range: Range<u64>,
    bytes: Bytes,
    /// Fetched from the store now (heap), rather than found in the cache (mapped or read).
    fetched: bool,
}

/// The shards' versions as one sample stream found them: one `HEAD` per shard per stream (or
/// the loader's kept one, within its metadata TTL).
#[derive(Debug, Default)]
pub(crate) struct Versions {
    shards: Mutex<HashMap<usize, Arc<OnceCell<ObjectVersion>>>>,
}

impl Versions {
    async fn of(&self, inner: &Inner, shard: usize) -> Result<ObjectVersion> {
        let cell = {
            let mut shards = self.shards.lock().unwrap_or_else(PoisonError::into_inner);
            shards.entry(shard).or_default().clone()
        };
        let version = cell
            .get_or_try_init(|| super::streamed_shards::shard_version(inner, shard))
            .await?;
        Ok(version.clone())
    }
}

/// Whether `inner` reads its indexed shards in blocks: with a cache that holds the whole dataset.
pub(crate) fn enabled(inner: &Inner) -> bool {
    let Some(cache) = &inner.cache else {
        return false;
    };
    let shards = inner.shards();
    let total = (0..shards.len()).fold(0u64, |sum, s| sum.saturating_add(shards.size(s)));
    total <= cache.cache().capacity()
}

/// Sample `sample`'s bytes `range` of shard `shard`, from its block; `None` when the sample lies
/// outside its block (then the caller reads it on its own).
pub(crate) async fn sample_bytes(
    inner: &Inner,
    versions: &Versions,
    shard: usize,
    sample: u64,
    range: (u64, u64),
) -> Result<Option<Bytes>> {
    let (Some(blocks), Some(cache)) = (&inner.blocks, &inner.cache) else {
        return Ok(None);
    };
    let version = versions.of(inner, shard).await?;
    let per_block = samples_per_block(inner.shards().size(shard), inner.shards().samples(shard));
    let id = (shard, sample / per_block);
    let cell = blocks.cell(id, &version);
    let block = cell
        .block
        .get_or_try_init(|| async {
            let block = load(inner, cache, id, per_block, &version).await?;
            blocks.note_loaded(id, &cell, block.fetched);
            Ok::<_, Error>(block)
        })
        .await?
        .clone();
    let Some(bytes) = slice(&block, range) else {
        return Ok(None);
    };
    Ok(Some(match block.fetched {
        true => Bytes::copy_from_slice(&bytes),
        false => bytes,
    }))
}

/// Samples per block of a shard of `size` bytes and `samples` samples (at least one).
fn samples_per_block(size: u64, samples: u64) -> u64 {
    let n = u128::from(BLOCK_BYTES) * u128::from(samples) / u128::from(size.max(1));
    u64::try_from(n).unwrap_or(u64::MAX).max(1)
}

/// The bytes of `range` within `block`, if they lie in it.
fn slice(block: &Block, range: (u64, u64)) -> Option<Bytes> {
    let from = range.0.checked_sub(block.range.start)?;
    let to = range.1.checked_sub(block.range.start)?;
    let (from, to) = (usize::try_from(from).ok()?, usize::try_from(to).ok()?);
    (from <= to && to <= block.bytes.len()).then(|| block.bytes.slice(from..to))
}

impl Blocks {
    /// The held cell of block `id` at `version`, a new one in place of one of another version.
    fn cell(&self, id: BlockId, version: &ObjectVersion) -> Arc<Cell> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        match held.cells.get(&id) {
            Some(cell) if cell.version == *version => cell.clone(),
            _ => {
                let cell = Arc::new(Cell {
                    version: version.clone(),
                    block: OnceCell::new(),
                });
                held.cells.insert(id, cell.clone());
                cell
            }
        }
    }

    /// Holds block `id`, just loaded into `cell`, letting go of the oldest beyond the bounds.
    fn note_loaded(&self, id: BlockId, cell: &Arc<Cell>, fetched: bool) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let Held {
            cells,
            fetched: fetched_ids,
            mapped,
        } = &mut *held;
        let (queue, bound) = match fetched {
            true => (fetched_ids, HELD_FETCHED),
            false => (mapped, HELD_MAPPED),
        };
        queue.push_back((id, Arc::downgrade(cell)));
        while queue.len() > bound {
            let Some((old, old_cell)) = queue.pop_front() else {
                break;
            };
            // Only the cell queued, not a newer one of the same block.
            if matches!(cells.get(&old), Some(c) if Weak::ptr_eq(&Arc::downgrade(c), &old_cell)) {
                cells.remove(&old);
            }
        }
    }
}

/// Block `id` at `version`: from the cache, else one ranged GET, queued for the cache.
async fn load(
    inner: &Inner,
    cache: &DiskCache,
    id: BlockId,
    per_block: u64,
    version: &ObjectVersion,
) -> Result<Block> {
    let range = block_range(inner, id, per_block).await?;
    let key =
        CacheKey::new(inner.store_uri.clone(), inner.shards().name(id.0)).with_range(range.clone());
    if let Some(bytes) = cache.get(&key, version).await {
        return Ok(Block {
            range,
            bytes,
            fetched: false,
        });
    }
    let (bytes, returned) =
        super::random_access::get_range_versioned(inner, id.0, range.clone()).await?;
    if returned != *version {
        return Err(changed(inner, id.0));
    }
    cache.insert_later(key, returned, bytes.clone()).await;
    Ok(Block {
        range,
        bytes,
        fetched: true,
    })
}

/// The byte range of block `id`: from its first sample's first header to its last sample's end.
async fn block_range(inner: &Inner, id: BlockId, per_block: u64) -> Result<Range<u64>> {
    let (shard, block) = id;
    let index = super::indexes::index_of(inner, shard).await?;
    let samples = inner.shards().samples(shard);
    let first = block.saturating_mul(per_block);
    let last = first
        .saturating_add(per_block)
        .min(samples)
        .saturating_sub(1);
    let range_of = |i: u64| {
        usize::try_from(i)
            .ok()
            .and_then(|i| index.sample(i))
            .and_then(|s| s.byte_range())
    };
    match (range_of(first), range_of(last)) {
        (Some((start, _)), Some((_, end))) if start <= end => Ok(start..end),
        _ => Err(Error::Corrupt {
            uri: inner
                .location
                .uri_of(&crate::shards::index_key(&inner.shards().key(shard))),
            reason: format!(
                "samples {first}..={last} have no byte range or are out of order; rebuild the \
                 index with `bucketload index`"
            ),
        }),
    }
}

fn changed(inner: &Inner, shard: usize) -> Error {
    Error::Corrupt {
        uri: inner.location.uri_of(&inner.shards().key(shard)),
        reason: "the shard changed while it was read (another ETag or size than a moment \
                 before); read the epoch again"
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_hold_about_block_bytes_of_samples() {
        assert_eq!(samples_per_block(400 << 20, 4000), 40);
        assert_eq!(
            samples_per_block(1 << 30, 1),
            1,
            "a sample larger than a block"
        );
        assert_eq!(samples_per_block(0, 0), 1);
    }

    #[test]
    fn a_sample_is_cut_only_from_within_its_block() {
        let block = Block {
            range: 100..200,
            bytes: Bytes::from(vec![7u8; 100]),
            fetched: false,
        };
        assert_eq!(slice(&block, (150, 160)).map(|b| b.len()), Some(10));
        assert_eq!(slice(&block, (100, 200)).map(|b| b.len()), Some(100));
        assert!(slice(&block, (90, 120)).is_none(), "starts before");
        assert!(slice(&block, (150, 201)).is_none(), "ends after");
        assert!(slice(&block, (160, 150)).is_none(), "reversed");
    }
}
