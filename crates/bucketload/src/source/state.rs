//! Progress through an epoch, and the serializable state that resumes it.
//!
//! A rank's epoch is a list of sorted, disjoint spans of local indices (at first the whole
//! `0..samples`), split into contiguous, equal (±1) shares, one per worker. The state records how
//! many samples each worker has handed to training; with the order being a pure function of the
//! state, that count is the position. Restoring with the same number of workers moves each
//! worker to its count. Restoring with another number of workers first collects what each old
//! worker had not yet yielded (for streams: the samples its shuffle buffer held plus the unread
//! tail) into a new span list, the next *generation*, which the new workers split afresh.
//!
//! The state does not store span lists (after a buffered stream they hold every sample the
//! buffers held, thousands of scattered indices); it stores the worker positions at each change
//! of worker count, and restoring replays them. The state stays a few hundred bytes of JSON;
//! restoring costs a replay of the buffers (about 30 ns per sample consumed, no I/O).
//!
//! A change of world size starts the epoch's positions afresh: the state's worker positions
//! (and their history) move into `past_worlds`, from which `elastic` computes the positions
//! the new world shares; the generations start again from the new rank's whole sequence.

use std::ops::Range;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Remainder;
use super::partition::{RankSeq, TAG_BUFFER, join, spans_len, worker_share};
use super::permute::derive_key;
use super::worker::WorkerIter;
use crate::{Error, Result};

/// Version of [`SourceState`] and of the order it encodes; a state of another version is
/// refused rather than resumed to a different order.
///
/// Version 2 shuffle buffers yield from the start and grow to their capacity. A version 1 state
/// still resumes when its order is the same under version 2: without a shuffle buffer (files,
/// indexed, sequential or unbuffered streams) or with one of at most 100 samples, which starts
/// full under both versions.
pub const STATE_VERSION: u32 = 2;

/// Which dataset a state belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PlanStamp {
    /// `files`, `indexed` or `shards`.
    pub(crate) kind: String,
    pub(crate) samples: u64,
    pub(crate) shards: u64,
    /// Digest of the per-shard sample counts, 16 hex digits.
    pub(crate) digest: String,
}

/// Everything needed to continue a rank's epoch exactly where it stopped: no sample replayed,
/// none skipped. Serialize it (serde) with the training checkpoint, one per rank.
///
/// Made by [`EpochProgress::state`]; given back to [`Source::resume`](super::Source::resume).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceState {
    pub(crate) version: u32,
    pub(crate) plan: PlanStamp,
    pub(crate) seed: Option<u64>,
    pub(crate) shuffle_buffer: u64,
    pub(crate) rank: u32,
    pub(crate) world_size: u32,
    pub(crate) remainder: Remainder,
    pub(crate) epoch: u64,
    /// The positions of the epoch at each change of world size, oldest first: replaying them
    /// gives the epoch positions left to the current world.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) past_worlds: Vec<PastWorld>,
    /// Worker positions at each change of worker count in this epoch (since the last change of
    /// world size), oldest first: replaying them gives the spans the current workers share.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) history: Vec<Vec<u64>>,
    /// Samples each current worker has handed to training; its length is the number of workers.
    pub(crate) consumed: Vec<u64>,
}

/// Where one rank of a past world size stood when the world size changed: with training in
/// step, what every rank of that world had consumed follows from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PastWorld {
    pub(crate) world_size: u32,
    pub(crate) rank: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) history: Vec<Vec<u64>>,
    pub(crate) consumed: Vec<u64>,
}

impl PastWorld {
    /// The worker positions of each generation, the current one last.
    pub(crate) fn generations(&self) -> impl Iterator<Item = &Vec<u64>> {
        self.history.iter().chain(std::iter::once(&self.consumed))
    }
}

impl SourceState {
    /// The epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The shuffle seed, `None` for sequential order.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }

    /// Number of workers the positions refer to.
    pub fn num_workers(&self) -> u32 {
        self.consumed.len() as u32
    }

    /// Samples each worker had handed to training when the state was taken.
    pub fn worker_positions(&self) -> &[u64] {
        &self.consumed
    }

    /// The rank that took the state.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of ranks when the state was taken.
    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    /// What keys the shuffle buffers of this state's rank.
    pub(crate) fn keys(&self) -> Keys {
        Keys {
            seed: self.seed,
            shuffle_buffer: self.shuffle_buffer,
            epoch: self.epoch,
            rank: self.rank,
            world: self.past_worlds.len() as u64,
        }
    }
}

/// What keys the shuffle buffers of a rank, besides the worker and the generation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keys {
    pub(crate) seed: Option<u64>,
    pub(crate) shuffle_buffer: u64,
    pub(crate) epoch: u64,
    pub(crate) rank: u32,
    /// How many changes of world size came before (0 keeps the keys of a single world).
    pub(crate) world: u64,
}

/// A rank's spans through the changes of worker count of one world: the generations.
#[derive(Debug)]
pub(crate) struct Replay {
    seq: Arc<RankSeq>,
    keys: Keys,
    spans: Vec<Range<u64>>,
    index: u64,
}

impl Replay {
    /// The first generation: the whole rank sequence.
    pub(crate) fn new(seq: Arc<RankSeq>, keys: Keys) -> Replay {
        let spans = join(vec![0..seq.len()]);
        Replay {
            seq,
            keys,
            spans,
            index: 0,
        }
    }

    /// The spans the workers of the current generation share.
    pub(crate) fn spans(&self) -> &[Range<u64>] {
        &self.spans
    }

    /// Checks worker positions against the current generation; returns each worker's length.
    pub(crate) fn check(&self, consumed: &[u64]) -> Result<Vec<u64>> {
        check_positions(&self.spans, consumed)
    }

    /// Moves to the next generation: what the workers had not yielded at `consumed`.
    pub(crate) fn advance(&mut self, consumed: &[u64]) {
        let generation = self.generation(consumed.len() as u64);
        let mut remaining = Vec::new();
        for (w, &position) in consumed.iter().enumerate() {
            let it = worker_iter(&self.seq, self.keys, generation, w as u32, position);
            remaining.extend(it.remaining_spans());
        }
        self.spans = join(remaining);
        self.index += 1;
    }

    fn generation(&self, workers: u64) -> Generation<'_> {
        Generation {
            spans: &self.spans,
            workers,
            index: self.index,
        }
    }
}

/// A rank's progress through one epoch: which samples each worker yields, and how many of them
/// training has consumed.
///
/// Made by [`Source::begin`](super::Source::begin) or [`Source::resume`](super::Source::resume).
/// The process that sees samples arrive (the training loop) calls [`record`](Self::record);
/// each worker, possibly in another process, builds its iterator from the same state with
/// [`worker`](Self::worker).
#[derive(Debug, Clone)]
pub struct EpochProgress {
    pub(crate) state: SourceState,
    pub(crate) seq: Arc<RankSeq>,
    pub(crate) spans: Vec<Range<u64>>,
    pub(crate) lens: Vec<u64>,
}

/// The workers of one generation: their number, the spans they share and the generation's
/// number (which keys their shuffle buffers).
#[derive(Debug, Clone, Copy)]
struct Generation<'a> {
    spans: &'a [Range<u64>],
    workers: u64,
    index: u64,
}

impl EpochProgress {
    /// Progress of `state` over `seq`: replays the worker-count changes of `state.history`, then
    /// checks the current positions.
    pub(crate) fn new(state: SourceState, seq: Arc<RankSeq>) -> Result<EpochProgress> {
        let mut replay = Replay::new(seq.clone(), state.keys());
        for consumed in &state.history {
            replay.check(consumed)?;
            replay.advance(consumed);
        }
        let lens = replay.check(&state.consumed)?;
        Ok(EpochProgress {
            spans: replay.spans,
            state,
            seq,
            lens,
        })
    }

    /// The epoch.
    pub fn epoch(&self) -> u64 {
        self.state.epoch
    }

    /// Number of workers.
    pub fn num_workers(&self) -> u32 {
        self.state.num_workers()
    }

    /// Samples of this rank in the epoch (since the last change of world size): the same on
    /// every rank, except with [`Remainder::Exact`], where ranks differ by at most one.
    pub fn samples(&self) -> u64 {
        self.seq.len()
    }

    /// Samples left for training this epoch.
    pub fn remaining(&self) -> u64 {
        self.lens.iter().sum::<u64>() - self.state.consumed.iter().sum::<u64>()
    }

    /// Samples training has consumed this epoch, counting those before any restore.
    pub fn consumed(&self) -> u64 {
        self.samples() - self.remaining()
    }

    /// Whether the epoch is over for this rank.
    pub fn is_complete(&self) -> bool {
        self.remaining() == 0
    }

    /// Samples worker `worker` yields in this epoch (since the last change of worker count);
    /// workers differ by at most one.
    pub fn worker_len(&self, worker: u32) -> Result<u64> {
        self.check_worker(worker)?;
        Ok(self.lens[worker as usize])
    }

    /// The iterator of worker `worker`, starting after the samples recorded for it.
    pub fn worker(&self, worker: u32) -> Result<WorkerIter> {
        self.check_worker(worker)?;
        let w = worker as usize;
        Ok(self.iter_at(worker, self.state.consumed[w]))
    }

    fn iter_at(&self, worker: u32, position: u64) -> WorkerIter {
        let generation = Generation {
            spans: &self.spans,
            workers: self.lens.len() as u64,
            index: self.state.history.len() as u64,
        };
        worker_iter(&self.seq, self.state.keys(), generation, worker, position)
    }

    /// Notes that training received `samples` more samples from worker `worker`.
    pub fn record(&mut self, worker: u32, samples: u64) -> Result<()> {
        self.check_worker(worker)?;
        let w = worker as usize;
        let done = self.state.consumed[w].saturating_add(samples);
        if done > self.lens[w] {
            return Err(Error::invalid_input(format!(
                "worker {worker} yields {} samples this epoch, {done} were recorded; record only \
                 samples the worker's iterator produced",
                self.lens[w]
            )));
        }
        self.state.consumed[w] = done;
        Ok(())
    }

    /// The state to save with a checkpoint.
    pub fn state(&self) -> SourceState {
        self.state.clone()
    }

    /// The same progress split among `workers` workers: what every current worker has not yet
    /// yielded becomes the spans of a new generation.
    pub(crate) fn repartition(&self, workers: u32) -> Result<EpochProgress> {
        let mut state = self.state.clone();
        state.history.push(std::mem::replace(
            &mut state.consumed,
            vec![0; workers as usize],
        ));
        EpochProgress::new(state, self.seq.clone())
    }

    fn check_worker(&self, worker: u32) -> Result<()> {
        if (worker as usize) < self.lens.len() {
            return Ok(());
        }
        Err(Error::invalid_input(format!(
            "worker {worker} does not exist: there are {} workers (numbered from 0)",
            self.lens.len()
        )))
    }
}

/// Checks worker positions against the spans the workers share; returns each worker's length.
fn check_positions(spans: &[Range<u64>], consumed: &[u64]) -> Result<Vec<u64>> {
    let workers = consumed.len() as u64;
    if workers == 0 {
        return Err(Error::invalid_input(
            "a source state needs at least one worker position; it is not a saved state",
        ));
    }
    let lens: Vec<u64> = (0..workers)
        .map(|w| spans_len(&worker_share(spans, w, workers)))
        .collect();
    for (w, (&done, &len)) in consumed.iter().zip(&lens).enumerate() {
        if done > len {
            return Err(Error::invalid_input(format!(
                "source state says worker {w} consumed {done} samples but it only has {len}; \
                 the state belongs to another dataset or partition"
            )));
        }
    }
    Ok(lens)
}

/// Worker `worker` of `generation`, moved to `position`.
fn worker_iter(
    seq: &Arc<RankSeq>,
    keys: Keys,
    generation: Generation<'_>,
    worker: u32,
    position: u64,
) -> WorkerIter {
    let spans = worker_share(generation.spans, u64::from(worker), generation.workers);
    let buffer = buffer(seq, keys, generation, worker);
    WorkerIter::new(seq.clone(), worker, spans, buffer, position)
}

/// The shuffle buffer of a worker, keyed by everything that determines its input: streams with
/// a buffer only.
fn buffer(
    seq: &RankSeq,
    keys: Keys,
    generation: Generation<'_>,
    worker: u32,
) -> Option<(usize, u64)> {
    let (RankSeq::Stream(_), Some(seed)) = (seq, keys.seed) else {
        return None;
    };
    let capacity = usize::try_from(keys.shuffle_buffer)
        .ok()
        .filter(|&c| c > 0)?;
    let mut parts = vec![
        TAG_BUFFER,
        seed,
        keys.epoch,
        u64::from(keys.rank),
        u64::from(worker),
        generation.workers,
        generation.index,
    ];
    // After a change of world size the buffers are new ones (the keys of a single world stay
    // as they were).
    if keys.world > 0 {
        parts.push(keys.world);
    }
    Some((capacity, derive_key(&parts)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_must_fit_the_shares() {
        assert_eq!(check_positions(&[0..5, 7..9], &[2, 4]).unwrap(), vec![3, 4]);
        assert!(check_positions(&[0..5], &[3, 3]).is_err());
        assert!(check_positions(&[0..5], &[]).is_err());
    }
}
