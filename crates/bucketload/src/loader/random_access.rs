//! Random-access sources: files (one GET per object) and indexed shards (one ranged GET per
//! sample, close ranges merged).
//!
//! The worker's [`WorkerIter`] gives the samples in order. They become fetch *units* — one file,
//! or a run of samples of one shard whose byte ranges lie within `coalesce_gap` of each other
//! among the next `coalesce_window` samples — and units run `concurrency` at a time. Indexed
//! shards: each chunk of `coalesce_window` samples is planned on its own task once the indexes
//! of its shards are at hand ([`index_of`]: from the index cache, else fetched, all of the
//! chunk's at once); [`lookahead_chunks`] chunks are planned ahead of the units running, so in
//! the steady state the indexes are there before their samples' turn. Each unit
//! first takes its bytes from the memory budget (a semaphore, released when the consumer takes
//! the sample), so fetched-but-unconsumed bytes never exceed the budget. Completion delivery
//! yields units as they finish; strict delivery runs them in order and restores the exact order
//! of samples inside a coalescing window.

use std::collections::BTreeMap;
use std::sync::Arc;

use bucketload_cache::{CacheKey, ObjectVersion};
use bucketload_format::{IndexSample, split_key};
use bucketload_store::object_store::{GetOptions, GetRange};
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{FutureExt, StreamExt, TryStreamExt};
use tokio::sync::OwnedSemaphorePermit;

use super::catalog::Catalog;
use super::compact_index::CompactIndex;
use super::config::{Delivery, MAX_COALESCED_BYTES};
use super::indexed_blocks::{Versions, sample_bytes};
use super::indexes::index_of;
use super::{Inner, Item, Sample};
use crate::shards::index_key;
use crate::source::{SampleRef, WorkerIter};
use crate::{Error, Result};

type Unit = futures::future::BoxFuture<'static, Result<Vec<Item>>>;

/// The samples of `iter` fetched with the loader's concurrency and delivery.
pub(crate) fn samples(inner: Arc<Inner>, iter: WorkerIter) -> BoxStream<'static, Result<Item>> {
    let start = iter.position();
    let refs = (start..).zip(iter);
    let concurrency = inner.config.concurrency;
    let units: BoxStream<'static, Unit> = match &inner.catalog {
        Catalog::Files(_) => {
            let inner = inner.clone();
            stream::iter(refs)
                .map(move |(pos, r)| fetch_file(inner.clone(), pos, r).boxed())
                .boxed()
        }
        Catalog::Shards { .. } => {
            let window = inner.config.coalesce_window;
            let chunks = Chunks { refs, window };
            let lookahead = lookahead_chunks(concurrency, window);
            let inner = inner.clone();
            // One look at each shard's version per stream (per worker and epoch).
            let versions = Arc::new(Versions::default());
            stream::iter(chunks)
                .map(move |chunk| planned(inner.clone(), chunk, versions.clone()))
                .buffered(lookahead)
                .flat_map(stream::iter)
                .boxed()
        }
    };
    match inner.config.delivery {
        Delivery::Completion => units
            .buffer_unordered(concurrency)
            .map_ok(|items| stream::iter(items.into_iter().map(Ok)))
            .try_flatten()
            .boxed(),
        Delivery::Strict => {
            let ordered = units
                .buffered(concurrency)
                .map_ok(|items| stream::iter(items.into_iter().map(Ok)))
                .try_flatten();
            reorder(inner, start, ordered.boxed())
        }
    }
}

/// Consecutive runs of `window` (position, sample) pairs.
struct Chunks<I> {
    refs: I,
    window: usize,
}

impl<I: Iterator<Item = (u64, SampleRef)>> Iterator for Chunks<I> {
    type Item = Vec<(u64, SampleRef)>;

    fn next(&mut self) -> Option<Self::Item> {
        let chunk: Vec<_> = self.refs.by_ref().take(self.window).collect();
        (!chunk.is_empty()).then_some(chunk)
    }
}

/// Chunks planned ahead of the units running: enough to cover the units in flight
/// (`concurrency` of them, at least one per `window` samples) and two more, so that the next
/// chunks' index fetches overlap the running units' sample fetches.
fn lookahead_chunks(concurrency: usize, window: usize) -> usize {
    concurrency.div_ceil(window.max(1)) + 2
}

/// A chunk's units, planned on its own task, started now (so that its index fetches go on
/// while the units ahead of it run); dropping the future aborts the task.
fn planned(
    inner: Arc<Inner>,
    chunk: Vec<(u64, SampleRef)>,
    versions: Arc<Versions>,
) -> impl std::future::Future<Output = Vec<Unit>> {
    let what = format!("planning samples of {}", inner.location);
    let mut task = AbortOnDrop(tokio::spawn(plan_units(inner, chunk, versions)));
    async move {
        let error = match (&mut task.0).await {
            Ok(units) => return units,
            Err(e) if e.is_panic() => crate::panics::error(what, e.into_panic().as_ref()),
            Err(e) => Error::Task {
                reason: format!("{what}: {e}"),
            },
        };
        vec![futures::future::ready(Err(error)).boxed()]
    }
}

/// Aborts a task when dropped.
pub(crate) struct AbortOnDrop<T>(pub(crate) tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Restores the source's order: holds samples until every earlier position was yielded.
fn reorder(
    inner: Arc<Inner>,
    start: u64,
    items: BoxStream<'static, Result<Item>>,
) -> BoxStream<'static, Result<Item>> {
    let state = (items, BTreeMap::<u64, Item>::new(), start);
    stream::try_unfold(state, move |(mut items, mut held, next)| {
        let inner = inner.clone();
        async move {
            loop {
                if let Some(item) = held.remove(&next) {
                    return Ok(Some((item, (items, held, next + 1))));
                }
                match items.next().await {
                    Some(item) => {
                        let item = item?;
                        held.insert(item.sample.position, item);
                        inner.counters.note_held(held.len() as u64);
                    }
                    None if held.is_empty() => return Ok(None),
                    None => {
                        return Err(Error::Task {
                            reason: format!("sample {next} of the order never arrived"),
                        });
                    }
                }
            }
        }
    })
    .boxed()
}

/// Takes `bytes` from the memory budget (at least one unit, at most the whole budget).
async fn reserve(inner: &Inner, bytes: u64) -> Result<OwnedSemaphorePermit> {
    let kib = bytes.div_ceil(1024).clamp(1, u64::from(inner.budget_kib));
    let kib = u32::try_from(kib).unwrap_or(inner.budget_kib);
    inner
        .budget
        .clone()
        .acquire_many_owned(kib)
        .await
        .map_err(|e| Error::Task {
            reason: format!("the loader's memory budget closed: {e}"),
        })
}

async fn fetch_file(inner: Arc<Inner>, position: u64, sref: SampleRef) -> Result<Vec<Item>> {
    let SampleRef::File { index } = sref else {
        return Err(Error::invalid_input(
            "a files loader was given a shard sample",
        ));
    };
    let file = inner.file(index)?;
    let permit = reserve(&inner, file.size).await?;
    let Some(bytes) = super::file_bytes::file_bytes(&inner, &file).await? else {
        return Ok(vec![Item::skipped(sref, position)]);
    };
    let name = file.key.as_ref();
    let sample = Sample {
        key: name.to_owned(),
        label: file.label,
        members: vec![(split_key(name).1.to_owned(), bytes)],
        source: sref,
        position,
        dataset: 0,
    };
    Ok(vec![Item {
        sample,
        permit: Some(permit),
        skipped: false,
    }])
}

/// One sample of an indexed shard with its place in the order and its index entry.
#[derive(Debug, Clone)]
struct Wanted {
    position: u64,
    sref: SampleRef,
    shard: usize,
    range: (u64, u64),
    entry: IndexSample,
}

/// Groups a chunk's samples by shard and merges close ranges, once the indexes of the chunk's
/// shards are at hand (fetched together); units come in order of their first position.
async fn plan_units(
    inner: Arc<Inner>,
    chunk: Vec<(u64, SampleRef)>,
    versions: Arc<Versions>,
) -> Vec<Unit> {
    match locate_all(&inner, chunk).await {
        Ok(wanted) => units_of(&inner, wanted, &versions),
        Err(e) => vec![futures::future::ready(Err(e)).boxed()],
    }
}

/// Every sample of `chunk` located in its shard's index.
async fn locate_all(inner: &Arc<Inner>, chunk: Vec<(u64, SampleRef)>) -> Result<Vec<Wanted>> {
    let mut shards: Vec<usize> = Vec::with_capacity(chunk.len());
    for (_, sref) in &chunk {
        shards.push(shard_of(*sref)?);
    }
    shards.sort_unstable();
    shards.dedup();
    let fetches = shards.iter().map(|&s| index_of(inner, s));
    let indexes = futures::future::try_join_all(fetches).await?;
    let mut wanted = Vec::with_capacity(chunk.len());
    for (position, sref) in chunk {
        let shard = shard_of(sref)?;
        let at = shards.binary_search(&shard).unwrap_or_default();
        wanted.push(locate(inner, &indexes[at], position, sref)?);
    }
    Ok(wanted)
}

fn units_of(inner: &Arc<Inner>, mut wanted: Vec<Wanted>, versions: &Arc<Versions>) -> Vec<Unit> {
    wanted.sort_by_key(|w| (w.shard, w.range.0));
    let mut groups: Vec<Vec<Wanted>> = Vec::new();
    for w in wanted {
        match groups.last_mut() {
            Some(group) if mergeable(group, &w, inner.config.coalesce_gap) => group.push(w),
            _ => groups.push(vec![w]),
        }
    }
    groups.sort_by_key(|g| g.iter().map(|w| w.position).min());
    groups
        .into_iter()
        .map(|group| fetch_group(inner.clone(), group, versions.clone()).boxed())
        .collect()
}

fn mergeable(group: &[Wanted], next: &Wanted, gap: u64) -> bool {
    let (Some(first), Some(last)) = (group.first(), group.last()) else {
        return false;
    };
    first.shard == next.shard
        && next.range.0 <= last.range.1.saturating_add(gap)
        && next.range.1.saturating_sub(first.range.0) <= MAX_COALESCED_BYTES
}

fn shard_of(sref: SampleRef) -> Result<usize> {
    match sref {
        SampleRef::Shard { shard, .. } => Ok(usize::try_from(shard).unwrap_or(usize::MAX)),
        SampleRef::File { .. } => Err(Error::invalid_input(
            "an indexed loader was given a file sample",
        )),
    }
}

fn locate(inner: &Inner, index: &CompactIndex, position: u64, sref: SampleRef) -> Result<Wanted> {
    let SampleRef::Shard { shard, sample } = sref else {
        return Err(Error::invalid_input(
            "an indexed loader was given a file sample",
        ));
    };
    let s = usize::try_from(shard).unwrap_or(usize::MAX);
    let key = || inner.shards().key(s);
    let entry = usize::try_from(sample)
        .ok()
        .and_then(|i| index.sample(i))
        .ok_or_else(|| Error::Corrupt {
            uri: inner.location.uri_of(&key()),
            reason: format!("its index has no sample {sample}; rebuild the index"),
        })?;
    let range = entry
        .byte_range()
        .filter(|(start, end)| start <= end)
        .ok_or_else(|| Error::Corrupt {
            uri: inner.location.uri_of(&index_key(&key())),
            reason: format!(
                "sample {sample} has no members or its members are out of order; rebuild the \
                 index with `bucketload index`"
            ),
        })?;
    Ok(Wanted {
        position,
        sref,
        shard: s,
        range,
        entry,
    })
}

/// Fetches a group: cached samples from disk (from their blocks, when the loader reads in
/// blocks), the others with one ranged GET covering them.
async fn fetch_group(
    inner: Arc<Inner>,
    group: Vec<Wanted>,
    versions: Arc<Versions>,
) -> Result<Vec<Item>> {
    let bytes = group.iter().fold(0u64, |sum, w| {
        sum.saturating_add(w.range.1.saturating_sub(w.range.0))
    });
    let permit = reserve(&inner, bytes).await?;
    let mut found: Vec<Option<Bytes>> = vec![None; group.len()];
    if inner.blocks.is_some() {
        for (slot, w) in found.iter_mut().zip(&group) {
            if let SampleRef::Shard { sample, .. } = w.sref {
                *slot = sample_bytes(&inner, &versions, w.shard, sample, w.range).await?;
            }
        }
    } else if let Some(cache) = &inner.cache {
        for (slot, w) in found.iter_mut().zip(&group) {
            let (key, version) = range_key(&inner, w);
            *slot = cache.get(&key, &version).await;
        }
    }
    let missing: Vec<&Wanted> = group
        .iter()
        .zip(&found)
        .filter(|(_, f)| f.is_none())
        .map(|(w, _)| w)
        .collect();
    let fresh: Vec<bool> = found.iter().map(Option::is_none).collect();
    if let Some(first) = missing.first() {
        let start = first.range.0;
        let end = missing.iter().map(|w| w.range.1).max().unwrap_or(start);
        let body = get_range(&inner, first.shard, start..end).await?;
        super::stats::add(&inner.counters.coalesced, missing.len() as u64 - 1);
        for (slot, w) in found.iter_mut().zip(&group) {
            if slot.is_none() {
                let piece = cut(&inner, w, &body, start)?;
                *slot = Some(piece);
            }
        }
    }
    let mut items = Vec::with_capacity(group.len());
    for ((w, bytes), fresh) in group.iter().zip(found).zip(fresh) {
        let bytes = bytes.unwrap_or_default();
        let sample = parse_sample(&inner, w, bytes.clone())?;
        // Cached only once its members matched the index: bytes of a changed shard never are.
        // (A sample outside its block is read on its own and not cached.)
        if let (true, Some(cache), None) = (fresh, &inner.cache, &inner.blocks) {
            let (key, version) = range_key(&inner, w);
            cache.insert_later(key, version, bytes).await;
        }
        items.push(Item {
            sample,
            permit: None,
            skipped: false,
        });
    }
    items.sort_by_key(|i| i.sample.position);
    // The group's bytes are released when its last sample is taken.
    if let Some(last) = items.last_mut() {
        last.permit = Some(permit);
    }
    Ok(items)
}

/// The bytes of `w` in `body`, the shard's bytes from `start`; an error, never a panic, when
/// they are not all there.
fn cut(inner: &Inner, w: &Wanted, body: &Bytes, start: u64) -> Result<Bytes> {
    let offset = |at: u64| at.checked_sub(start).and_then(|o| usize::try_from(o).ok());
    match (offset(w.range.0), offset(w.range.1)) {
        (Some(from), Some(to)) if from <= to && to <= body.len() => Ok(body.slice(from..to)),
        _ => Err(Error::Corrupt {
            uri: inner.location.uri_of(&inner.shards().key(w.shard)),
            reason: format!(
                "bytes {}..{} of a sample are not within the {} bytes read from byte {start}; \
                 rebuild the index with `bucketload index`",
                w.range.0,
                w.range.1,
                body.len()
            ),
        }),
    }
}

fn range_key(inner: &Inner, w: &Wanted) -> (CacheKey, ObjectVersion) {
    let shards = inner.shards();
    let key = CacheKey::new(inner.store_uri.clone(), shards.name(w.shard))
        .with_range(w.range.0..w.range.1);
    (key, ObjectVersion::size_only(shards.size(w.shard)))
}

async fn get_range(inner: &Inner, shard: usize, range: std::ops::Range<u64>) -> Result<Bytes> {
    Ok(get_range_versioned(inner, shard, range).await?.0)
}

/// The bytes of `range` of shard `shard` (exactly that many, or an error naming the shard) and
/// the version the store returned them as.
pub(crate) async fn get_range_versioned(
    inner: &Inner,
    shard: usize,
    range: std::ops::Range<u64>,
) -> Result<(Bytes, ObjectVersion)> {
    let loc = &inner.location;
    let key = &inner.shards().key(shard);
    let _request = inner.counters.request(true);
    let options = GetOptions {
        range: Some(GetRange::Bounded(range.clone())),
        ..GetOptions::default()
    };
    let got = async {
        let got = loc.store().get_opts(key, options).await?;
        let etag = bucketload_store::ETag::from_store(got.meta.e_tag.as_deref());
        let version = ObjectVersion::with_etag(etag, got.meta.size);
        Ok::<_, bucketload_store::object_store::Error>((got.bytes().await?, version))
    };
    let (body, version) = got.await.map_err(|e| loc.error(key, e))?;
    if Some(body.len() as u64) != range.end.checked_sub(range.start) {
        return Err(Error::Corrupt {
            uri: loc.uri_of(key),
            reason: format!(
                "bytes {}..{} came back as {} bytes; the shard is shorter than its index says",
                range.start,
                range.end,
                body.len()
            ),
        });
    }
    Ok((body, version))
}

/// Cuts a sample's members out of its byte range by the index, checking each member's CRC32C.
fn parse_sample(inner: &Inner, w: &Wanted, bytes: Bytes) -> Result<Sample> {
    let entry = &w.entry;
    let uri = || inner.location.uri_of(&inner.shards().key(w.shard));
    let mut members = Vec::with_capacity(entry.members.len());
    for m in &entry.members {
        let at = m.data_offset.checked_sub(w.range.0);
        let piece = at
            .and_then(|s| Some((usize::try_from(s).ok()?, usize::try_from(m.size).ok()?)))
            .and_then(|(s, len)| Some(s..s.checked_add(len)?))
            .filter(|r| r.end <= bytes.len())
            .map(|r| bytes.slice(r));
        let Some(piece) = piece else {
            return Err(Error::Corrupt {
                uri: uri(),
                reason: format!(
                    "member {}.{} lies outside its sample's range",
                    entry.key, m.ext
                ),
            });
        };
        if crc32c::crc32c(&piece) != m.crc32c {
            return Err(Error::Corrupt {
                uri: uri(),
                reason: format!(
                    "member {}.{} at byte {} does not match its index checksum; the shard \
                     changed since it was indexed: run `bucketload index` again",
                    entry.key, m.ext, m.data_offset
                ),
            });
        }
        members.push((m.ext.clone(), piece));
    }
    Ok(Sample {
        key: entry.key.clone(),
        label: super::label_of(&members),
        members,
        source: w.sref,
        position: w.position,
        dataset: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(shard: usize, start: u64, end: u64) -> Wanted {
        Wanted {
            position: start,
            sref: SampleRef::Shard {
                shard: shard as u64,
                sample: 0,
            },
            shard,
            range: (start, end),
            entry: IndexSample {
                key: String::new(),
                members: Vec::new(),
            },
        }
    }

    #[test]
    fn close_ranges_of_one_shard_merge() {
        let group = vec![wanted(0, 0, 1000)];
        assert!(mergeable(&group, &wanted(0, 1000, 2000), 0), "adjacent");
        assert!(
            mergeable(&group, &wanted(0, 1500, 2000), 512),
            "within the gap"
        );
        assert!(
            !mergeable(&group, &wanted(0, 1600, 2000), 512),
            "past the gap"
        );
        assert!(
            !mergeable(&group, &wanted(1, 1000, 2000), 512),
            "another shard"
        );
        let far = wanted(0, 1000, MAX_COALESCED_BYTES + 1);
        assert!(
            !mergeable(&group, &far, 1 << 30),
            "larger than one GET may be"
        );
    }

    #[test]
    fn chunks_cover_every_sample_in_order() {
        let refs = (0..10u64).map(|i| (i, SampleRef::File { index: i }));
        let chunks: Vec<Vec<_>> = Chunks { refs, window: 4 }.collect();
        let sizes: Vec<usize> = chunks.iter().map(Vec::len).collect();
        assert_eq!(sizes, [4, 4, 2]);
        let flat: Vec<u64> = chunks.concat().into_iter().map(|(p, _)| p).collect();
        assert_eq!(flat, (0..10).collect::<Vec<_>>());
    }
}
