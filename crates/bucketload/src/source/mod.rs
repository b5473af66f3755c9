//! Which samples a rank and worker read, in which order, and how to resume mid-epoch.
//!
//! Pure logic, no I/O: a loader drives it. Reach for [`Source`]: built from a [`Plan`] (the
//! dataset's shape, usually [`Plan::from_manifest`]), an [`Order`] (seed, shuffle buffer) and a
//! [`Partition`] (this process's rank among `world_size`), it starts an epoch with
//! [`Source::begin`] or continues a saved one with [`Source::resume`]. Both give an
//! [`EpochProgress`], from which each worker takes its [`WorkerIter`] of [`SampleRef`]s, and into
//! which the training loop records what it consumed; [`EpochProgress::state`] is the
//! [`SourceState`] to checkpoint.
//!
//! # Parts and data flow
//!
//! ```text
//!  (seed, epoch) ──► permutation ──► rank split (pad, drop or exact) ─────────► worker shares
//!                    files/indexed: of samples, O(1) memory          │ (contiguous, ±1)
//!                    shards: of shards, then cut by sample count     ▼
//!                                                       streams: shuffle buffer (size B)
//!                                                                    ▼
//!                                                         WorkerIter: SampleRef, in order
//! ```
//!
//! - **Random access** (files, indexed shards): one keyed [`Permutation`] of all samples per
//!   epoch (a table up to 65,536 samples, a Feistel network in O(1) memory above), any position
//!   in O(1). Rank `r` of `w` takes positions `r, r + w, …`
//!   (the layout of PyTorch's `DistributedSampler`); with [`Remainder::Pad`] the positions past
//!   the end wrap to the start of the permutation, with [`Remainder::Drop`] the last `N mod w`
//!   positions are left out (different samples every epoch), with [`Remainder::Exact`] rank `r`
//!   stops at the last position below `N` (every sample once; ranks differ by at most one).
//!   Shuffle quality: a pseudo-random permutation; any sample can land anywhere, neighbours are
//!   unrelated.
//! - **Streams** (shards read front to back): the shards are permuted per epoch, concatenated,
//!   and cut into `world_size` runs of exactly the same number of samples (with
//!   [`Remainder::Exact`], the first `N mod w` runs one longer), so a rank may read part of a shard (a [`WorkItem`] is a shard and a sample range). Each worker then passes its
//!   samples through a shuffle buffer of `B` samples, which yields from the start: it holds
//!   `min(B, 100)` samples before its first yield and one more after each yield until it holds
//!   `B`. Shuffle quality: the shard order is fully random; the `k`-th sample yielded (from 0) is
//!   one of the first `min(B, 100 + k) + k + 1` read (so of the first `B + k + 1`), and once the
//!   buffer is full (after `2B − 100` samples read) samples move about `B` places on average, so
//!   a batch draws mostly from the last `B` samples read; the first `2B` samples of a worker's
//!   epoch are mixed less, over the growing buffer. Choose
//!   `B` of 5–10 shards' worth of samples to mix shards within a batch (memory: `B` samples per
//!   worker); docs/LOADER.md has measurements.
//!
//! # Resume
//!
//! The order is a pure function of (plan, order, partition, epoch, worker count), so the state
//! is small: the epoch and, per worker, how many samples training consumed. Resuming with the
//! same number of workers continues each worker at its count; with another number, what the old
//! workers had not yet yielded is split anew among the new ones. In both cases no sample of the
//! epoch is replayed or skipped.
//!
//! Resume is elastic: training runs in step (every rank has handed out the same number of
//! batches at a checkpoint), so one rank's state — rank 0's, saved once — says what every rank
//! consumed, and every rank of the new world resumes from it. At the same world size each rank
//! continues exactly where it stood. At another, the positions of the epoch's order that no old
//! rank had consumed (for streams, counting what shuffle buffers held as not consumed) are shared
//! out among the new ranks with the same layouts and remainder as a fresh epoch, then among their
//! workers; the state records the old world's positions, so changes compose. See
//! docs/LOADER.md, "Order, partitions and resume".
//!
//! ```
//! use bucketload::source::{Order, Partition, Plan, Remainder, Source, SourceState};
//!
//! # fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let partition = Partition::new(1, 4).with_remainder(Remainder::Drop); // rank 1 of 4
//! let source = Source::new(Plan::files(10_001), Order::shuffled(42), partition)?;
//! let mut progress = source.begin(0, 2)?; // epoch 0, two workers
//! assert_eq!(progress.samples(), 2_500);
//! let first: Vec<_> = progress.worker(0)?.take(3).collect();
//! progress.record(0, first.len() as u64)?;
//!
//! let saved = serde_json::to_string(&progress.state())?;
//! let state: SourceState = serde_json::from_str(&saved)?;
//! let resumed = source.resume(&state, 3)?; // now with three workers
//! assert_eq!(resumed.remaining(), 2_497);
//!
//! // Every rank of a world of two resumes from that one state: ranks 0, 2 and 3 had consumed
//! // three samples too, 12 of 10,001 in all.
//! let half = Partition::new(0, 2).with_remainder(Remainder::Drop);
//! let elastic = Source::new(Plan::files(10_001), Order::shuffled(42), half)?.resume(&state, 2)?;
//! assert_eq!(elastic.remaining(), (10_001 - 12) / 2);
//! # Ok(()) }
//! # run().unwrap();
//! ```

// Spans are lists of index ranges, and a list of one span is the common case.
#![allow(clippy::single_range_in_vec_init)]

mod elastic;
pub mod mix;
mod partition;
pub(crate) mod permute;
mod state;
mod worker;

use std::ops::Range;
use std::sync::Arc;

use bucketload_format::{DatasetKind, Manifest};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};
use partition::{EpochOrder, Place, RankSeq};
pub use permute::Permutation;
use permute::derive_key;
pub use state::{EpochProgress, STATE_VERSION, SourceState};
use state::{PastWorld, PlanStamp};
pub use worker::WorkerIter;

/// Largest dataset a plan accepts, in samples: keeps position arithmetic far from overflow.
pub const MAX_SAMPLES: u64 = 1 << 62;

/// Largest shuffle buffer, in samples: more could never fit in memory.
pub const MAX_SHUFFLE_BUFFER: u64 = u32::MAX as u64;

/// How a shards dataset is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Access {
    /// Any sample on its own (one ranged GET per sample through the shard index).
    Random,
    /// Shards front to back, through a shuffle buffer.
    Stream,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Files,
    Indexed,
    Shards,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Files => "files",
            Kind::Indexed => "indexed",
            Kind::Shards => "shards",
        }
    }
}

/// The shape of a dataset: how many samples, in which shards, read how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    kind: Kind,
    /// Samples per shard (empty for files).
    counts: Arc<[u64]>,
    /// First sample of each shard, for indexed plans.
    starts: Arc<[u64]>,
    total: u64,
}

impl Plan {
    /// `n` files, one sample each, read in any order.
    pub fn files(n: u64) -> Plan {
        Plan {
            kind: Kind::Files,
            counts: Arc::new([]),
            starts: Arc::new([]),
            total: n,
        }
    }

    /// Indexed shards holding `samples_per_shard[i]` samples each, read sample by sample.
    pub fn indexed(samples_per_shard: &[u64]) -> Plan {
        Plan::indexed_shared(samples_per_shard.into())
    }

    /// [`Plan::indexed`] keeping `counts` itself (a loader's shard table shares it).
    pub(crate) fn indexed_shared(counts: Arc<[u64]>) -> Plan {
        let mut starts = Vec::with_capacity(counts.len());
        let mut total = 0u64;
        for &count in counts.iter() {
            starts.push(total);
            total = total.saturating_add(count);
        }
        Plan {
            kind: Kind::Indexed,
            counts,
            starts: starts.into(),
            total,
        }
    }

    /// Shards holding `samples_per_shard[i]` samples each, streamed front to back.
    pub fn shards(samples_per_shard: &[u64]) -> Plan {
        Plan::shards_shared(samples_per_shard.into())
    }

    /// [`Plan::shards`] keeping `counts` itself (a loader's shard table shares it).
    pub(crate) fn shards_shared(counts: Arc<[u64]>) -> Plan {
        let total = counts.iter().fold(0u64, |t, &c| t.saturating_add(c));
        Plan {
            kind: Kind::Shards,
            counts,
            starts: Arc::new([]),
            total,
        }
    }

    /// The plan of a dataset manifest: its files, or its shards read with `access`. Indices in
    /// [`SampleRef`]s are positions in the manifest's `files` or `shards` lists.
    pub fn from_manifest(manifest: &Manifest, access: Access) -> Plan {
        let counts: Vec<u64> = manifest.shards.iter().map(|s| s.samples).collect();
        match (manifest.kind, access) {
            (DatasetKind::Files, _) => Plan::files(manifest.files.len() as u64),
            (_, Access::Random) => Plan::indexed(&counts),
            (_, Access::Stream) => Plan::shards(&counts),
        }
    }

    /// Total samples.
    pub fn samples(&self) -> u64 {
        self.total
    }

    /// Whether samples are streamed shard by shard (rather than read one by one).
    pub fn is_streamed(&self) -> bool {
        self.kind == Kind::Shards
    }

    fn stamp(&self) -> PlanStamp {
        let mut parts = vec![self.total, self.counts.len() as u64];
        parts.extend(self.counts.iter());
        PlanStamp {
            kind: self.kind.name().to_owned(),
            samples: self.total,
            shards: self.counts.len() as u64,
            digest: format!("{:016x}", derive_key(&parts)),
        }
    }
}

/// The order of samples in an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Order {
    seed: Option<u64>,
    shuffle_buffer: u64,
}

impl Order {
    /// Default shuffle buffer of streams, in samples: a few shards' worth of typical 100 KB
    /// images (about 100 MB per worker) — mixes neighbouring shards without much memory.
    pub const DEFAULT_SHUFFLE_BUFFER: u64 = 1_000;

    /// Samples in dataset order, every epoch the same.
    pub fn sequential() -> Order {
        Order {
            seed: None,
            shuffle_buffer: 0,
        }
    }

    /// A different shuffle every epoch, determined by `seed` and the epoch.
    pub fn shuffled(seed: u64) -> Order {
        Order {
            seed: Some(seed),
            shuffle_buffer: Order::DEFAULT_SHUFFLE_BUFFER,
        }
    }

    /// Samples held by each worker's shuffle buffer when streaming shards (default
    /// [`DEFAULT_SHUFFLE_BUFFER`](Self::DEFAULT_SHUFFLE_BUFFER); 0 keeps shard order within the
    /// shuffled shard order). Ignored by sequential orders and random-access plans.
    pub fn with_shuffle_buffer(mut self, samples: u64) -> Order {
        self.shuffle_buffer = samples;
        self
    }

    /// The seed, `None` for sequential order.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }

    /// The shuffle buffer in samples; 0 for sequential order.
    pub fn shuffle_buffer(&self) -> u64 {
        if self.seed.is_some() {
            self.shuffle_buffer
        } else {
            0
        }
    }
}

/// What to do with the samples that do not divide evenly among ranks. For training, ranks must
/// get the same number of samples: a rank that runs out first leaves the others waiting in a
/// collective. Evaluation wants every sample exactly once instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Remainder {
    /// Give every rank `ceil(N / world_size)` samples, repeating samples from the start of the
    /// epoch's order (the default, like PyTorch's `DistributedSampler`).
    #[default]
    Pad,
    /// Give every rank `floor(N / world_size)` samples, leaving out the last `N mod world_size`
    /// of the epoch's order.
    Drop,
    /// Give every sample to exactly one rank, repeating and leaving out none: ranks get
    /// `floor(N / world_size)` or one more sample (the first `N mod world_size` ranks). For
    /// evaluation; a training loop must cope with ranks that differ by one batch (all-reduce
    /// sums of metrics, or `torch.distributed.algorithms.Join`).
    Exact,
}

/// This process's share of the dataset: rank `rank` of `world_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    rank: u32,
    world_size: u32,
    remainder: Remainder,
}

impl Partition {
    /// Rank `rank` of `world_size` (checked by [`Source::new`]), padding the remainder.
    pub fn new(rank: u32, world_size: u32) -> Partition {
        Partition {
            rank,
            world_size,
            remainder: Remainder::Pad,
        }
    }

    /// The whole dataset: rank 0 of 1.
    pub fn single() -> Partition {
        Partition::new(0, 1)
    }

    /// How uneven remainders are handled (default [`Remainder::Pad`]).
    pub fn with_remainder(mut self, remainder: Remainder) -> Partition {
        self.remainder = remainder;
        self
    }

    /// The rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    /// The remainder policy.
    pub fn remainder(&self) -> Remainder {
        self.remainder
    }
}

/// One sample to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SampleRef {
    /// Object `index` of a files plan.
    File {
        /// Position in the files list.
        index: u64,
    },
    /// Sample `sample` (in member order) of shard `shard`.
    Shard {
        /// Position in the shards list.
        shard: u64,
        /// Position of the sample within the shard.
        sample: u64,
    },
}

/// A run of consecutive samples of one shard, read front to back.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkItem {
    /// Position in the shards list.
    pub shard: u64,
    /// Samples of the shard, in member order.
    pub samples: Range<u64>,
}

/// The order, partition and resume logic of one rank over one dataset.
#[derive(Debug, Clone)]
pub struct Source {
    plan: Plan,
    order: Order,
    partition: Partition,
}

impl Source {
    /// Checks the partition and sizes; reports every problem at once.
    pub fn new(plan: Plan, order: Order, partition: Partition) -> Result<Source> {
        let mut problems = Vec::new();
        if partition.world_size == 0 {
            problems.push("world_size must be at least 1".to_owned());
        } else if partition.rank >= partition.world_size {
            problems.push(format!(
                "rank {} is out of range for world_size {} (ranks count from 0)",
                partition.rank, partition.world_size
            ));
        }
        if plan.total > MAX_SAMPLES {
            problems.push(format!(
                "{} samples is more than the {MAX_SAMPLES} a plan supports",
                plan.total
            ));
        }
        if order.shuffle_buffer() > MAX_SHUFFLE_BUFFER {
            problems.push(format!(
                "a shuffle buffer of {} samples cannot fit in memory; use at most {MAX_SHUFFLE_BUFFER}",
                order.shuffle_buffer()
            ));
        }
        if !problems.is_empty() {
            return Err(Error::invalid_input(problems.join("; ")));
        }
        Ok(Source {
            plan,
            order,
            partition,
        })
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The order.
    pub fn order(&self) -> Order {
        self.order
    }

    /// The partition.
    pub fn partition(&self) -> Partition {
        self.partition
    }

    /// Samples this rank reads per epoch: the same on every rank, except with
    /// [`Remainder::Exact`], where ranks differ by at most one.
    pub fn samples_per_rank(&self) -> u64 {
        let p = &self.partition;
        let (rank, world) = (u64::from(p.rank), u64::from(p.world_size));
        partition::per_rank(self.plan.total, world, rank, p.remainder)
    }

    /// The shuffle buffer in effect: streamed plans only.
    fn shuffle_buffer(&self) -> u64 {
        if self.plan.is_streamed() {
            self.order.shuffle_buffer()
        } else {
            0
        }
    }

    /// Starts epoch `epoch` with `num_workers` workers (at least 1).
    pub fn begin(&self, epoch: u64, num_workers: u32) -> Result<EpochProgress> {
        check_workers(num_workers)?;
        let state = SourceState {
            version: STATE_VERSION,
            plan: self.plan.stamp(),
            seed: self.order.seed(),
            shuffle_buffer: self.shuffle_buffer(),
            rank: self.partition.rank,
            world_size: self.partition.world_size,
            remainder: self.partition.remainder,
            epoch,
            past_worlds: Vec::new(),
            history: Vec::new(),
            consumed: vec![0; num_workers as usize],
        };
        let seq = self.rank_seq(&state)?;
        EpochProgress::new(state, seq)
    }

    /// Continues a saved epoch with `num_workers` workers, which may differ from the number
    /// when `state` was saved. Fails if `state` belongs to another dataset, order or remainder.
    ///
    /// The state may come from another rank, and from a world of another size (elastic
    /// resume): training runs in step, so one rank's state says what every rank consumed. At the
    /// same world size each rank continues where it stood; at another, the ranks share out
    /// what the old world had not consumed (see the module docs).
    pub fn resume(&self, state: &SourceState, num_workers: u32) -> Result<EpochProgress> {
        check_workers(num_workers)?;
        self.check_state(state)?;
        let mut state = self.adopt(state, num_workers)?;
        let seq = self.rank_seq(&state)?;
        if state.history.is_empty() && state.consumed.iter().all(|&c| c == 0) {
            // Nothing consumed since the last change of world size: a fresh start of the rest.
            state.consumed = vec![0; num_workers as usize];
            return EpochProgress::new(state, seq);
        }
        let progress = EpochProgress::new(state, seq)?;
        if progress.num_workers() == num_workers {
            return Ok(progress);
        }
        let resumed = progress.repartition(num_workers)?;
        tracing::debug!(
            epoch = progress.epoch(),
            rank = self.partition.rank,
            from = progress.num_workers(),
            to = num_workers,
            remaining = resumed.remaining(),
            "source: worker count changed mid-epoch, remaining samples split anew"
        );
        Ok(resumed)
    }

    fn check_state(&self, state: &SourceState) -> Result<()> {
        let refuse = |what: String| {
            Err(Error::invalid_input(format!(
                "cannot resume: the state was saved {what}; build the source as it was, or \
                 start the epoch over with begin"
            )))
        };
        if state.version == 1 && state.shuffle_buffer > worker::INITIAL_HELD as u64 {
            return refuse(format!(
                "by an older bucketload (state version 1) whose shuffle buffer of {} samples \
                 gave another stream order",
                state.shuffle_buffer
            ));
        }
        if !(1..=STATE_VERSION).contains(&state.version) {
            return refuse(format!(
                "by state version {} (this build reads {STATE_VERSION})",
                state.version
            ));
        }
        let stamp = self.plan.stamp();
        if state.plan != stamp {
            return refuse(format!(
                "for a {} plan of {} samples in {} shards (digest {}), this source has a {} plan \
                 of {} samples in {} shards (digest {})",
                state.plan.kind,
                state.plan.samples,
                state.plan.shards,
                state.plan.digest,
                stamp.kind,
                stamp.samples,
                stamp.shards,
                stamp.digest
            ));
        }
        if (state.seed, state.shuffle_buffer) != (self.order.seed(), self.shuffle_buffer()) {
            return refuse(format!(
                "with seed {:?} and shuffle buffer {}, this source has seed {:?} and buffer {}",
                state.seed,
                state.shuffle_buffer,
                self.order.seed(),
                self.shuffle_buffer()
            ));
        }
        if state.remainder != self.partition.remainder {
            return refuse(format!(
                "with remainder {:?}, this source has {:?}",
                state.remainder, self.partition.remainder
            ));
        }
        let mut positions = state.past_worlds.iter().flat_map(|p| p.generations());
        let mut current = state.history.iter().chain([&state.consumed]);
        if positions.any(|p| p.is_empty()) || current.any(|p| p.is_empty()) {
            return Err(Error::invalid_input(
                "a source state needs at least one worker position; it is not a saved state",
            ));
        }
        let worlds = state.past_worlds.iter().map(|p| (p.rank, p.world_size));
        for (rank, world) in worlds.chain([(state.rank, state.world_size)]) {
            if rank >= world {
                return Err(Error::invalid_input(format!(
                    "source state says rank {rank} of {world}; it is not a saved state"
                )));
            }
        }
        Ok(())
    }

    /// `state` as this rank's own: the same, or the rank's positions in step with those of
    /// the rank that saved it, or a new world over what the saved one left.
    fn adopt(&self, state: &SourceState, num_workers: u32) -> Result<SourceState> {
        let p = &self.partition;
        if (state.rank, state.world_size) == (p.rank, p.world_size) {
            return Ok(state.clone());
        }
        let mut adopted = state.clone();
        (adopted.rank, adopted.world_size) = (p.rank, p.world_size);
        if state.history.is_empty() && state.consumed.iter().all(|&c| c == 0) {
            return Ok(adopted);
        }
        if state.world_size == p.world_size {
            let generations: Vec<&Vec<u64>> =
                state.history.iter().chain([&state.consumed]).collect();
            let lens = elastic::saved_lens(self.rank_seq(state)?, state.keys(), &generations)?;
            let seq = self.rank_seq(&adopted)?;
            let aligned = elastic::replay_aligned(seq, adopted.keys(), &generations, &lens)?;
            let mut positions = aligned.positions;
            adopted.consumed = positions.pop().unwrap_or_default();
            adopted.history = positions;
            return Ok(adopted);
        }
        adopted.past_worlds.push(PastWorld {
            world_size: state.world_size,
            rank: state.rank,
            history: std::mem::take(&mut adopted.history),
            consumed: std::mem::replace(&mut adopted.consumed, vec![0; num_workers as usize]),
        });
        tracing::debug!(
            epoch = state.epoch,
            from = state.world_size,
            to = p.world_size,
            "source: world size changed mid-epoch, what is left split among the new ranks"
        );
        Ok(adopted)
    }

    /// This rank's samples in the epoch of `state`, after its changes of world size.
    fn rank_seq(&self, state: &SourceState) -> Result<Arc<RankSeq>> {
        let place = Place {
            rank: u64::from(state.rank),
            world: u64::from(state.world_size),
            remainder: state.remainder,
        };
        let order = EpochOrder::new(&self.plan, self.order.seed(), state.epoch);
        let left = elastic::positions_left(&order, &self.plan, state)?;
        Ok(Arc::new(order.rank(place, left.as_ref())))
    }
}

fn check_workers(num_workers: u32) -> Result<()> {
    if num_workers == 0 {
        return Err(Error::invalid_input(
            "num_workers must be at least 1 (the loader's own thread counts as one worker)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
