//! [`Mixture`]: several datasets read as one stream, each sample drawn from dataset `i` with
//! proportion `weights[i]`.
//!
//! # Parts and data flow
//!
//! ```text
//!  Draws (source::mix: dataset of each position, blocks of exact counts, shuffled)
//!     │ next draw = i
//!     ▼
//!  dataset i's SampleStream (its own Loader, Source, epoch) ──► sample, tagged `dataset = i`
//!     │ ended: dataset i starts its next epoch (a new permutation); the others go on
//! ```
//!
//! Each dataset keeps its own epoch counter and order, partitioned across ranks and workers
//! as when read alone, and fetches ahead on its own (its own concurrency and memory budget);
//! a stream is polled only when its dataset is drawn. The mixture's epoch is
//! `samples_per_epoch` samples over all ranks (default: the datasets' sizes added), the same
//! number on every rank. Dataset positions carry over from one mixture epoch to the next, and
//! where dataset `i` stands at the start of mixture epoch `e` is a pure function of the draws
//! of epochs `0..e`: [`Mixture::epoch`] needs no state.
//!
//! Resume: [`MixState`] holds the mixture's epoch and position and each dataset's
//! [`SourceState`]; [`Mixture::resume`] continues with no sample repeated or skipped (with
//! [`Delivery::Strict`](super::Delivery::Strict), as for one dataset), for the same ranks and
//! workers.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};

use super::{Loader, LoaderConfig, LoaderStats, Sample, SampleStream};
use crate::io::DiskCache;
use crate::source::SourceState;
use crate::source::mix::{DrawIter, Draws, Weights, worker_draws};
use crate::{Error, Result};

/// Version of [`MixState`] and of the draws it encodes.
const MIX_STATE_VERSION: u32 = 1;

/// Several datasets read as one weighted mixture; cheap to clone.
#[derive(Debug, Clone)]
pub struct Mixture {
    loaders: Vec<Loader>,
    weights: Weights,
    samples_per_epoch: u64,
    /// Samples each dataset gives this worker per epoch of its own.
    shares: Vec<u64>,
    /// Draws this worker makes per mixture epoch.
    draws: u64,
}

impl Mixture {
    /// Opens every dataset of `configs` (the same partition, worker and order in each) and
    /// mixes them with `weights` (one per dataset, normalised by their sum). The mixture's
    /// epoch holds `samples_per_epoch` samples over all ranks, by default the datasets'
    /// sizes added. Fails if the counts differ, a weight is negative or they add up to 0, or a
    /// dataset of positive weight gives this worker no sample.
    pub async fn open(
        configs: Vec<LoaderConfig>,
        weights: &[f64],
        samples_per_epoch: Option<u64>,
    ) -> Result<Mixture> {
        if configs.len() != weights.len() {
            return Err(Error::invalid_input(format!(
                "{} datasets but {} weights; give one weight per dataset",
                configs.len(),
                weights.len()
            )));
        }
        let weights = Weights::new(weights)?;
        check_alike(&configs)?;
        let mut loaders: Vec<Loader> = Vec::with_capacity(configs.len());
        for config in configs {
            let loader = Loader::open_counted(config, loaders.first()).await?;
            loaders.push(loader);
        }
        let mut shares = Vec::with_capacity(loaders.len());
        for (i, loader) in loaders.iter().enumerate() {
            let share = loader.samples_per_epoch()?;
            if share == 0 && weights.is_drawn(i) {
                let (worker, workers) = loader.config().worker();
                let p = loader.source().partition();
                return Err(Error::invalid_input(format!(
                    "dataset {} ({} samples) gives worker {worker} of {workers} on rank {} of \
                     {} no sample; mix larger datasets, or use fewer ranks or workers",
                    loader.store().uri(),
                    loader.source().plan().samples(),
                    p.rank(),
                    p.world_size()
                )));
            }
            shares.push(share);
        }
        let total = samples_per_epoch.unwrap_or_else(|| {
            let sizes = loaders.iter().map(|l| l.source().plan().samples());
            sizes.fold(0u64, u64::saturating_add)
        });
        let first = &loaders[0];
        let (worker, workers) = first.config().worker();
        let draws = worker_draws(total, first.source().partition(), worker, workers);
        tracing::info!(
            datasets = loaders.len(),
            samples_per_epoch = total,
            draws,
            block = weights.block(),
            "mixture: datasets opened"
        );
        Ok(Mixture {
            loaders,
            weights,
            samples_per_epoch: total,
            shares,
            draws,
        })
    }

    /// The datasets' loaders, in the order given.
    pub fn loaders(&self) -> &[Loader] {
        &self.loaders
    }

    /// The normalised weights.
    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    /// Samples of a mixture epoch over all ranks.
    pub fn samples_per_epoch(&self) -> u64 {
        self.samples_per_epoch
    }

    /// Samples this worker yields in a full mixture epoch.
    pub fn worker_samples_per_epoch(&self) -> u64 {
        self.draws
    }

    /// Counters of every dataset's loader together.
    pub fn stats(&self) -> LoaderStats {
        let mut stats = self.loaders[0].stats();
        let caches = self.loaders.iter().skip(1);
        for cache in caches.filter_map(|l| l.inner.cache.as_ref()) {
            let more = DiskCache::counts(cache);
            stats.cache.hits += more.hits;
            stats.cache.misses += more.misses;
            stats.cache.errors += more.errors;
        }
        stats
    }

    fn place(&self) -> (u32, u32, u32) {
        let first = &self.loaders[0];
        let (worker, workers) = first.config().worker();
        (first.source().partition().rank(), worker, workers)
    }

    fn draws_of(&self, epoch: u64) -> Draws {
        let seed = self.loaders[0].source().order().seed();
        Draws::new(&self.weights, seed, epoch, self.place(), self.draws)
    }

    /// Where dataset `i` stands after this worker drew it `drawn` times since the start.
    fn dataset_state(&self, i: usize, drawn: u64) -> Result<SourceState> {
        let share = self.shares[i];
        let (epoch, position) = match share {
            0 => (0, 0),
            _ => (drawn / share, drawn % share),
        };
        let (_, worker, workers) = self.place();
        let mut progress = self.loaders[i].source().begin(epoch, workers)?;
        progress.record(worker, position)?;
        Ok(progress.state())
    }

    /// The state at the start of mixture epoch `epoch`.
    fn start(&self, epoch: u64) -> Result<MixState> {
        let mut drawn = vec![0u64; self.loaders.len()];
        for e in 0..epoch {
            let counts = self.draws_of(e).counts(self.draws);
            drawn.iter_mut().zip(counts).for_each(|(d, c)| *d += c);
        }
        let datasets = (0..self.loaders.len())
            .map(|i| self.dataset_state(i, drawn[i]))
            .collect::<Result<Vec<_>>>()?;
        Ok(self.state_at(epoch, 0, datasets))
    }

    fn state_at(&self, epoch: u64, position: u64, datasets: Vec<SourceState>) -> MixState {
        let (_, worker, workers) = self.place();
        MixState {
            version: MIX_STATE_VERSION,
            weights: self.weights.digest(),
            samples_per_epoch: self.samples_per_epoch,
            worker,
            num_workers: workers,
            epoch,
            position,
            datasets,
        }
    }

    /// This worker's samples of mixture epoch `epoch`, from its start.
    pub fn epoch(&self, epoch: u64) -> Result<MixStream> {
        self.stream(self.start(epoch)?)
    }

    /// Continues a saved mixture epoch. Fails if `state` belongs to other datasets, weights,
    /// epoch length, ranks or workers.
    pub fn resume(&self, state: &MixState) -> Result<MixStream> {
        let expected = self.state_at(state.epoch, 0, Vec::new());
        let refuse = |what: String| {
            Err(Error::invalid_input(format!(
                "cannot resume the mixture: the state was saved {what}; build the mixture as it \
                 was"
            )))
        };
        if state.version != MIX_STATE_VERSION {
            return refuse(format!("by state version {}", state.version));
        }
        if (&state.weights, state.samples_per_epoch)
            != (&expected.weights, expected.samples_per_epoch)
        {
            return refuse(format!(
                "with other weights or another epoch length ({} samples, this mixture has {})",
                state.samples_per_epoch, expected.samples_per_epoch
            ));
        }
        if (state.worker, state.num_workers) != (expected.worker, expected.num_workers) {
            return refuse(format!(
                "by worker {} of {}, this is worker {} of {}",
                state.worker, state.num_workers, expected.worker, expected.num_workers
            ));
        }
        if state.datasets.len() != self.loaders.len() || state.position > self.draws {
            return refuse(format!(
                "for {} datasets at position {}, this mixture has {} datasets and {} samples \
                 per epoch",
                state.datasets.len(),
                state.position,
                self.loaders.len(),
                self.draws
            ));
        }
        for (loader, dataset) in self.loaders.iter().zip(&state.datasets) {
            loader.source().resume(dataset, expected.num_workers)?;
        }
        self.stream(state.clone())
    }

    fn stream(&self, start: MixState) -> Result<MixStream> {
        let draws = self.draws_of(start.epoch);
        Ok(MixStream {
            mixture: self.clone(),
            iter: draws.iter_from(start.position),
            next: None,
            streams: (0..self.loaders.len()).map(|_| None).collect(),
            states: start.datasets.clone(),
            position: start.position,
            tracker: MixTracker {
                mixture: self.clone(),
                draws,
                start,
            },
        })
    }
}

/// The datasets of a mixture must be read by the same ranks and workers in the same order.
fn check_alike(configs: &[LoaderConfig]) -> Result<()> {
    let Some(first) = configs.first() else {
        return Err(Error::invalid_input("a mixture needs at least one dataset"));
    };
    let key = |c: &LoaderConfig| (c.partition, c.worker(), c.order.seed());
    if configs.iter().any(|c| key(c) != key(first)) {
        return Err(Error::invalid_input(
            "the datasets of a mixture must have the same rank, world size, remainder, worker \
             and seed",
        ));
    }
    Ok(())
}

/// Where a mixture stands: its epoch and position, and each dataset's own state. Serialize it
/// (serde) with the training checkpoint, one per rank and worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MixState {
    version: u32,
    /// Digest of the quantised weights.
    weights: String,
    samples_per_epoch: u64,
    worker: u32,
    num_workers: u32,
    epoch: u64,
    /// Draws this worker consumed in the epoch.
    position: u64,
    /// Each dataset's epoch and position, in the mixture's order.
    datasets: Vec<SourceState>,
}

impl MixState {
    /// The mixture's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Samples this worker consumed in the mixture's epoch.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Each dataset's state (its own epoch and position), in the mixture's order.
    pub fn datasets(&self) -> &[SourceState] {
        &self.datasets
    }
}

/// Computes a [`MixState`] after any number of a [`MixStream`]'s samples, once the stream
/// itself has moved on (to a task that reads ahead). Exact with
/// [`Delivery::Strict`](super::Delivery::Strict).
#[derive(Debug, Clone)]
pub struct MixTracker {
    mixture: Mixture,
    draws: Draws,
    start: MixState,
}

impl MixTracker {
    /// The state after the stream's first `consumed` samples were consumed.
    pub fn state(&self, consumed: u64) -> Result<MixState> {
        let from = self.start.position;
        let to = from.saturating_add(consumed).min(self.draws.len());
        let before = self.draws.counts(from);
        let after = self.draws.counts(to);
        let mut datasets = Vec::with_capacity(before.len());
        for (i, state) in self.start.datasets.iter().enumerate() {
            datasets.push(self.advance(i, state, after[i] - before[i])?);
        }
        let m = &self.mixture;
        Ok(m.state_at(self.start.epoch, to, datasets))
    }

    /// Dataset `i`'s state moved `n` samples on from `state`, into its next epochs if need be.
    fn advance(&self, i: usize, state: &SourceState, n: u64) -> Result<SourceState> {
        let m = &self.mixture;
        let (_, worker, workers) = m.place();
        let mut progress = m.loaders[i].source().resume(state, workers)?;
        let left = progress.worker_len(worker)? - state.worker_positions()[worker as usize];
        if n <= left {
            progress.record(worker, n)?;
            return Ok(progress.state());
        }
        let share = m.shares[i];
        let beyond = n - left;
        let epoch = state.epoch() + 1 + beyond / share;
        let mut next = m.loaders[i].source().begin(epoch, workers)?;
        next.record(worker, beyond % share)?;
        Ok(next.state())
    }
}

/// One worker's samples of one mixture epoch ([`futures::Stream`] of `Result<Sample>`), each
/// tagged with its [`Sample::dataset`].
pub struct MixStream {
    mixture: Mixture,
    iter: DrawIter,
    /// The dataset drawn for the next sample, not yet delivered.
    next: Option<usize>,
    streams: Vec<Option<SampleStream>>,
    /// Where each dataset without an open stream stands.
    states: Vec<SourceState>,
    position: u64,
    tracker: MixTracker,
}

impl std::fmt::Debug for MixStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MixStream")
            .field("epoch", &self.tracker.start.epoch)
            .field("position", &self.position)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

impl MixStream {
    /// The mixture's epoch.
    pub fn epoch(&self) -> u64 {
        self.tracker.start.epoch
    }

    /// Samples not yet yielded.
    pub fn remaining(&self) -> u64 {
        self.tracker.draws.len() - self.position
    }

    /// The state to checkpoint: every sample yielded counts as consumed, and each dataset
    /// stands where its own stream's [`SampleStream::state`] says.
    pub fn state(&self) -> Result<MixState> {
        let mut datasets = Vec::with_capacity(self.states.len());
        for (stream, state) in self.streams.iter().zip(&self.states) {
            datasets.push(match stream {
                Some(stream) => stream.state()?,
                None => state.clone(),
            });
        }
        let m = &self.mixture;
        Ok(m.state_at(self.epoch(), self.position, datasets))
    }

    /// A [`MixTracker`] of this stream, counted from its start.
    pub fn tracker(&self) -> MixTracker {
        self.tracker.clone()
    }

    /// The stream of dataset `i`, opened where it stands.
    fn open(&mut self, i: usize) -> Result<&mut SampleStream> {
        match &mut self.streams[i] {
            Some(stream) => Ok(stream),
            slot @ None => {
                let loader = &self.mixture.loaders[i];
                let state = &self.states[i];
                let stream = match state.worker_positions().iter().all(|&p| p == 0) {
                    true => loader.epoch(state.epoch())?,
                    false => loader.resume(state)?,
                };
                Ok(slot.insert(stream))
            }
        }
    }

    /// Dataset `i` read its epoch to the end: its next epoch begins.
    fn next_epoch(&mut self, i: usize) -> Result<()> {
        let Some(ended) = self.streams[i].take() else {
            return Ok(());
        };
        let (_, _, workers) = self.mixture.place();
        let epoch = ended.epoch() + 1;
        self.states[i] = self.mixture.loaders[i]
            .source()
            .begin(epoch, workers)?
            .state();
        tracing::debug!(
            dataset = i,
            epoch,
            "mixture: a dataset starts its next epoch"
        );
        Ok(())
    }
}

impl Stream for MixStream {
    type Item = Result<Sample>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            let i = match this.next {
                Some(i) => i,
                None => match this.iter.next() {
                    Some(i) => *this.next.insert(i),
                    None => return Poll::Ready(None),
                },
            };
            let stream = match this.open(i) {
                Ok(stream) => stream,
                Err(e) => return Poll::Ready(Some(Err(e))),
            };
            match ready!(stream.poll_next_unpin(cx)) {
                Some(Ok(mut sample)) => {
                    sample.dataset = i as u32;
                    this.next = None;
                    this.position += 1;
                    return Poll::Ready(Some(Ok(sample)));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    if let Err(e) = this.next_epoch(i) {
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.remaining()).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}
