//! The streamed shards source: a worker's [`WorkItem`]s read front to back, several at once,
//! and its samples handed out in the worker iterator's order.
//!
//! Each work item (a shard and a sample range) runs on its own task: [`shard_samples`] (ranged
//! GETs fetched ahead in a growing window, tar parsed as bytes arrive) pumped into a channel.
//! `shards_in_flight` tasks run at once, started in work-item order; the consumer drains them in
//! that order, so the samples arrive exactly as the source's shuffle-buffer simulation expects,
//! and at most `shuffle_buffer + 1` arrived samples wait in the reorder map. Each task may hold
//! `memory_budget / shards_in_flight` bytes of parsed samples the consumer has not taken yet
//! (its own semaphore, so a task ahead can never starve the one the consumer waits on): shards
//! after the current one keep streaming at full speed instead of stalling behind it. Dropping
//! the stream aborts the tasks (and with them their GETs).
//!
//! Memory: `shards_in_flight × (max_window + part_size) + memory_budget` plus the shuffle
//! buffer.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use futures::stream::{self, BoxStream};
use futures::{FutureExt, StreamExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use super::shard_stream::{ShardSample, ShardSpan, shard_samples_with};
use super::{Inner, Item, Sample};
use crate::io::Blocks;
use crate::source::{SampleRef, WorkItem, WorkerIter};
use crate::{Error, Result};
use bucketload_cache::ObjectVersion;
use bucketload_store::object_store::ObjectStoreExt;

/// Most samples a shard task may read ahead of the consumer; its byte share of the memory
/// budget is the real bound.
const SPAN_CHANNEL: usize = 4096;

/// A parsed sample and its bytes of the task's share of the budget.
type Parsed = (Result<ShardSample>, Option<OwnedSemaphorePermit>);

/// Samples a stream hands out with its first shards read one at a time (see [`Ramp`]).
pub(crate) const RAMP_SAMPLES: u64 = 256;

/// How a stream starts: its first shard nearly alone, so that the first batch does not wait
/// while `shards_in_flight` shards share the bandwidth. The other shards send their first
/// requests at once (their round trips overlap the first shard's reading) and read on only
/// once the shard before them has arrived whole, until the consumer has taken
/// [`RAMP_SAMPLES`] samples (a first batch or two, after the shuffle buffer's first fill);
/// from then on `shards_in_flight` stream at once.
#[derive(Debug, Clone, Copy, Default)]
struct Ramp {
    /// Spans (in the stream's order) whose samples have all arrived, or that stopped.
    done: usize,
    /// Whether every span may start (the consumer took its first samples).
    open: bool,
}

/// Marks span `number` done when dropped (its task ended, however it ended).
struct SpanDone(Arc<watch::Sender<Ramp>>, usize);

impl Drop for SpanDone {
    fn drop(&mut self) {
        let number = self.1;
        self.0.send_modify(|r| r.done = r.done.max(number + 1));
    }
}

/// The samples of `iter`, in its order.
pub(crate) fn samples(inner: Arc<Inner>, iter: WorkerIter) -> BoxStream<'static, Result<Item>> {
    let reads = iter.reads().unwrap_or_default();
    let in_flight = inner.config.shards_in_flight;
    let spawner = inner.clone();
    let ramp = Arc::new(watch::Sender::new(Ramp::default()));
    let starts = Arc::clone(&ramp);
    let arrivals = stream::iter(reads.into_iter().enumerate())
        .map(move |(number, item)| {
            let done = SpanDone(Arc::clone(&starts), number);
            futures::future::ready(spawn_span(spawner.clone(), item, done))
        })
        .buffered(in_flight)
        .flatten()
        .boxed();
    let start = iter.position();
    let state = Reorder {
        inner,
        refs: (start..).zip(iter),
        arrivals,
        held: HashMap::new(),
        handed: 0,
        ramp,
    };
    stream::try_unfold(state, |mut state| async move {
        match state.next().await? {
            Some(item) => Ok(Some((item, state))),
            None => Ok(None),
        }
    })
    .boxed()
}

struct Reorder<I> {
    inner: Arc<Inner>,
    refs: I,
    arrivals: BoxStream<'static, Result<ShardSample>>,
    held: HashMap<(usize, u64), ShardSample>,
    /// Samples handed out, counted up to [`RAMP_SAMPLES`].
    handed: u64,
    ramp: Arc<watch::Sender<Ramp>>,
}

impl<I: Iterator<Item = (u64, SampleRef)>> Reorder<I> {
    async fn next(&mut self) -> Result<Option<Item>> {
        let Some((position, sref)) = self.refs.next() else {
            return Ok(None);
        };
        let SampleRef::Shard { shard, sample } = sref else {
            return Err(Error::invalid_input(
                "a shards loader was given a file sample",
            ));
        };
        let want = (usize::try_from(shard).unwrap_or(usize::MAX), sample);
        loop {
            if let Some(got) = self.held.remove(&want) {
                if self.handed < RAMP_SAMPLES {
                    self.handed += 1;
                    if self.handed == RAMP_SAMPLES {
                        self.ramp.send_modify(|r| r.open = true);
                    }
                }
                let sample = Sample {
                    label: super::label_of(&got.members),
                    key: got.key,
                    members: got.members,
                    source: sref,
                    position,
                    dataset: 0,
                };
                return Ok(Some(Item {
                    sample,
                    permit: None,
                    skipped: false,
                }));
            }
            let Some(arrived) = self.arrivals.next().await else {
                let uri = self.inner.location.uri_of(&self.inner.shards().key(want.0));
                return Err(Error::Corrupt {
                    uri,
                    reason: format!(
                        "ended before sample {sample}: it holds fewer samples than the \
                         manifest or index says; rebuild them"
                    ),
                });
            };
            let arrived = arrived?;
            self.held.insert((arrived.shard, arrived.index), arrived);
            self.inner.counters.note_held(self.held.len() as u64);
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts reading one work item on its own task; the stream yields its samples.
fn spawn_span(
    inner: Arc<Inner>,
    item: WorkItem,
    done: SpanDone,
) -> BoxStream<'static, Result<ShardSample>> {
    let (tx, rx) = mpsc::channel::<Parsed>(SPAN_CHANNEL);
    let share = (inner.budget_kib / inner.config.shards_in_flight.max(1) as u32).max(1);
    let shard = usize::try_from(item.shard).ok();
    let what = match shard.filter(|&s| s < inner.shards().len()) {
        Some(shard) => format!(
            "reading {}",
            inner.location.uri_of(&inner.shards().key(shard))
        ),
        None => format!("reading shard {} of {}", item.shard, inner.location),
    };
    let report = tx.clone();
    let run = async move {
        // Opened at once (its HEAD and index lookups are small), read on its turn (see
        // [`Ramp`]). The ramp's sender outlives every span of the stream.
        let opened = open_span(&inner, &item).await;
        let number = done.1;
        let ready = |r: &Ramp| r.open || r.done >= number;
        let mut turn = done.0.subscribe();
        let mut samples = match opened {
            Ok(samples) => samples,
            Err(e) => {
                let _ = turn.wait_for(ready).await;
                let _ = tx.send((Err(e), None)).await;
                return;
            }
        };
        // Its first requests go out at once, beside the shards before it (at a high latency
        // their round trip then overlaps the first shard's reading); the rest waits for its
        // turn, holding at most the stream's first window.
        let early = {
            let wait = turn.wait_for(ready);
            tokio::pin!(wait);
            tokio::select! {
                biased;
                _ = &mut wait => None,
                first = samples.next() => Some(first),
            }
        };
        if early.is_some() {
            let _ = turn.wait_for(ready).await;
        }
        let _done = done;
        let _active = inner.counters.busy();
        let budget = Arc::new(Semaphore::new(share as usize));
        let mut early = early;
        loop {
            let next = match early.take() {
                Some(first) => first,
                None => samples.next().await,
            };
            let Some(sample) = next else { break };
            let bytes: u64 = sample
                .as_ref()
                .map_or(0, |s| s.members.iter().map(|(_, b)| b.len() as u64).sum());
            let kib = u32::try_from(bytes.div_ceil(1024))
                .unwrap_or(share)
                .clamp(1, share);
            let Ok(permit) = budget.clone().acquire_many_owned(kib).await else {
                return;
            };
            if tx.send((sample, Some(permit))).await.is_err() {
                return;
            }
        }
    };
    let task = tokio::spawn(async move {
        // A panic while reading is sent on as the span's error, never a span that ends early.
        if let Err(e) = crate::panics::catch(what, run.map(Ok)).await {
            let _ = report.send((Err(e), None)).await;
        }
    });
    let guard = AbortOnDrop(task);
    stream::unfold((rx, guard), |(mut rx, guard)| async move {
        // The sample leaves the task's share here: the reorder map is bounded by the shuffle
        // buffer instead.
        let (next, _permit) = rx.recv().await?;
        Some((next, (rx, guard)))
    })
    .boxed()
}

async fn open_span(
    inner: &Arc<Inner>,
    item: &WorkItem,
) -> Result<BoxStream<'static, Result<ShardSample>>> {
    let number = usize::try_from(item.shard).unwrap_or(usize::MAX);
    let shards = inner.shards();
    let key = shards.key(number);
    let first = item.samples.start;
    let offset = match first {
        0 => 0,
        _ => first_header(inner, number, first).await?,
    };
    let span = ShardSpan {
        shard: number,
        size: shards.size(number),
        first,
        count: Some(item.samples.end - first),
        offset,
    };
    let counters = inner.prefetch.clone();
    let blocks = match &inner.cache {
        None => None,
        Some(cache) => Some(Blocks {
            cache: cache.clone(),
            store_uri: inner.store_uri.clone(),
            key: key.to_string(),
            version: shard_version(inner, number).await?,
        }),
    };
    let stream = shard_samples_with(
        inner.location.clone(),
        key,
        span,
        inner.config.prefetch,
        counters,
        blocks,
    );
    Ok(stream)
}

/// The version a shard's cached blocks are filed and looked up under: its ETag and size now, from
/// one HEAD per span (shard manifests record no ETag, and a shard rewritten in place to the same
/// size must never be served from its old blocks). The prefetcher then refuses any response of
/// another ETag, so no block of another version is cached under this one. A size other than the
/// manifest's is an error naming the shard. With a metadata TTL
/// ([`LoaderBuilder::with_metadata_ttl`](super::LoaderBuilder::with_metadata_ttl)), a version
/// asked less than the TTL ago is used without asking again (a failed HEAD keeps nothing).
pub(crate) async fn shard_version(inner: &Inner, number: usize) -> Result<ObjectVersion> {
    let key = inner.shards().key(number);
    let size = inner.shards().size(number);
    let ask = || async {
        let meta = inner
            .location
            .store()
            .head(&key)
            .await
            .map_err(|e| inner.location.error(&key, e))?;
        if meta.size != size {
            return Err(Error::Corrupt {
                uri: inner.location.uri_of(&key),
                reason: format!(
                    "the shard has {} bytes in the store but {size} in the dataset's manifest: \
                     it changed since the manifest was written; rebuild the dataset with \
                     `bucketload shard`",
                    meta.size
                ),
            });
        }
        let etag = bucketload_store::ETag::from_store(meta.e_tag.as_deref());
        Ok(ObjectVersion::with_etag(etag, meta.size))
    };
    let Some(kept) = inner.shard_versions.get(number) else {
        return ask().await;
    };
    let fresh = |k: &Option<super::CheckedVersion>| match k {
        Some((version, at)) if at.elapsed() < inner.config.metadata_ttl => Some(version.clone()),
        _ => None,
    };
    if let Some(version) = fresh(&kept.lock().unwrap_or_else(PoisonError::into_inner)) {
        return Ok(version);
    }
    let version = ask().await?;
    *kept.lock().unwrap_or_else(PoisonError::into_inner) = Some((version.clone(), Instant::now()));
    Ok(version)
}

/// Byte offset of sample `sample`'s first header, from the shard's index (from the loader's
/// index cache, else fetched; 0 without one: the stream then reads from the start and skips).
async fn first_header(inner: &Inner, shard: usize, sample: u64) -> Result<u64> {
    if !inner.shards().has_index(shard) {
        return Ok(0);
    }
    let index = super::indexes::index_of(inner, shard).await?;
    Ok(offset_in(&index, sample))
}

fn offset_in(index: &super::compact_index::CompactIndex, sample: u64) -> u64 {
    usize::try_from(sample)
        .ok()
        .and_then(|s| index.first_header_offset(s))
        .unwrap_or(0)
}
