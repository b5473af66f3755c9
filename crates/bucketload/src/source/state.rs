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
pub const STATE_VERSION: u32 = 1;

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
    /// Worker positions at each change of worker count in this epoch, oldest first: replaying
    /// them gives the spans the current workers share.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) history: Vec<Vec<u64>>,
    /// Samples each current worker has handed to training; its length is the number of workers.
    pub(crate) consumed: Vec<u64>,
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
        let mut spans = join(vec![0..seq.len()]);
        for (index, consumed) in state.history.iter().enumerate() {
            check_positions(&spans, consumed)?;
            let generation = Generation {
                spans: &spans,
                workers: consumed.len() as u64,
                index: index as u64,
            };
            let mut remaining = Vec::new();
            for (w, &position) in consumed.iter().enumerate() {
                let it = worker_iter(&seq, &state, generation, w as u32, position);
                remaining.extend(it.remaining_spans());
            }
            spans = join(remaining);
        }
        let lens = check_positions(&spans, &state.consumed)?;
        Ok(EpochProgress {
            state,
            seq,
            spans,
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

    /// Samples of this rank in the epoch: the same on every rank.
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
        worker_iter(&self.seq, &self.state, generation, worker, position)
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
    state: &SourceState,
    generation: Generation<'_>,
    worker: u32,
    position: u64,
) -> WorkerIter {
    let spans = worker_share(generation.spans, u64::from(worker), generation.workers);
    let buffer = buffer(seq, state, generation, worker);
    WorkerIter::new(seq.clone(), worker, spans, buffer, position)
}

/// The shuffle buffer of a worker, keyed by everything that determines its input: streams with
/// a buffer only.
fn buffer(
    seq: &RankSeq,
    state: &SourceState,
    generation: Generation<'_>,
    worker: u32,
) -> Option<(usize, u64)> {
    let (RankSeq::Stream(_), Some(seed)) = (seq, state.seed) else {
        return None;
    };
    let capacity = usize::try_from(state.shuffle_buffer)
        .ok()
        .filter(|&c| c > 0)?;
    let key = derive_key(&[
        TAG_BUFFER,
        seed,
        state.epoch,
        u64::from(state.rank),
        u64::from(worker),
        generation.workers,
        generation.index,
    ]);
    Some((capacity, key))
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
