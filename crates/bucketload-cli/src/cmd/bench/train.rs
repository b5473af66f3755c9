//! The emulated training loop of `bench`: the loader's samples become batches (decoded and
//! augmented, or left encoded with `--no-decode`), and each step waits for its batch, then
//! "computes" for a fixed time in place of a model, as MLPerf Storage and DLIO do.
//!
//! A producer task drains the loader and fills a queue of [`PREFETCH_BATCHES`] batches, so
//! input and compute overlap the way a DataLoader's prefetching makes them overlap. Each
//! step's wait for its batch is the data wait; compute time ÷ wall time is the accelerator
//! utilisation. The compute is a sleep on a blocking thread (the accelerator is another
//! device), measured: what counts as busy is the time slept, not the time asked for.
//!
//! Epochs overlap as a loader with persistent workers lets them: once the samples left in an
//! epoch are no more than the loader holds ahead of its consumer (`lead`: its requests in
//! flight, the shuffle buffer of streamed shards and the queued batches), all of the epoch's
//! input has arrived or is on its way, and the next epoch's stream is opened and polled, so its
//! first requests (and a shard stream's shuffle buffer) fill while the last batches train. The
//! shuffle buffer counts twice: while it grows to its size, it takes in two samples for every
//! one it hands out. Memory: the next stream's own buffers (up to the memory budget) on top of
//! the current epoch's last `lead` samples.
//! With a disk cache the next epoch waits until every sample of the current one has arrived,
//! so that it reads them from the cache instead of fetching them a second time.
//! `--no-epoch-overlap` opens each epoch after the last batch of the one before.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bucketload::base::Progress;
use bucketload::loader::{LoaderStats, Sample};
use futures::TryStreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::ckpt::Checkpointer;
use super::log::{EpochLog, StageSeconds, WaitPercentiles};
use super::prom::Live;
use crate::args::loader::{Datasets, EpochStream};
use crate::progress::Bar;
use bucketload::decode::{Decoder, PREFETCH_BATCHES};

/// A batch as the training step receives it.
enum Item {
    Decoded(bucketload_image::Batch),
    Encoded(Vec<Sample>),
}

impl Item {
    fn len(&self) -> usize {
        match self {
            Item::Decoded(b) => b.len(),
            Item::Encoded(s) => s.len(),
        }
    }
}

/// What the training loop needs besides the loader.
pub struct Trainer<'a> {
    pub loader: &'a Datasets,
    pub decoder: Option<&'a Decoder>,
    pub batch_size: usize,
    pub drop_last: bool,
    pub compute: Duration,
    /// `compute` as asked for, milliseconds (for the log).
    pub compute_ms: f64,
    pub live: Arc<Live>,
    /// Open the next epoch once this many samples or fewer are left in the current one
    /// (`None`: only after its last batch).
    pub lead: Option<u64>,
    /// Whether the loader has a disk cache: then the next epoch opens only once every sample
    /// of the current one has arrived (and is in the cache), or it would fetch again what the
    /// current epoch's requests in flight are about to bring.
    pub cached: bool,
}

/// The next epoch's stream, opened and polled for its first sample while the current epoch's
/// last batches train; dropping it aborts the polling (and, with the stream, its requests).
pub struct Opened {
    epoch: u64,
    task: Option<JoinHandle<First>>,
    /// The loader's counters when it was opened: its epoch's counters start there (and the
    /// epoch before ends there), so that what it fetched early counts as its own.
    stats: Box<LoaderStats>,
    /// Samples of the epoch before still to train when it was opened.
    left: u64,
}

/// A stream and the outcome of its first poll.
type First = (EpochStream, bucketload::Result<Option<Sample>>);

impl Drop for Opened {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Where an epoch's samples come from: a stream opened now, or one opened ahead.
enum Input {
    Fresh(Box<EpochStream>),
    Opened(Opened),
}

impl Input {
    /// The stream, and the sample already taken from it, if any.
    async fn stream(self) -> anyhow::Result<(EpochStream, Option<Sample>)> {
        match self {
            Input::Fresh(stream) => Ok((*stream, None)),
            Input::Opened(mut opened) => {
                let Some(task) = opened.task.take() else {
                    anyhow::bail!("epoch {} was opened twice", opened.epoch);
                };
                let (stream, first) = task
                    .await
                    .map_err(|e| bucketload::panics::join_error("the next epoch's loader", e))?;
                Ok((stream, first?))
            }
        }
    }
}

/// One epoch's outcome.
pub struct EpochRun {
    pub log: EpochLog,
    /// Each step's data wait, milliseconds.
    pub waits: Vec<f64>,
    /// Emulated compute, seconds.
    pub compute_s: f64,
    /// Seconds the steps stalled for checkpoints.
    pub ckpt_s: f64,
    pub fetch: StageSeconds,
    pub decode: StageSeconds,
}

impl Trainer<'_> {
    /// Runs epoch `epoch` (from `opened`, when it was opened ahead); `expected` samples size the
    /// progress bar. Opens epoch `next`, if any, once `lead` samples or fewer are left, and
    /// returns it.
    pub async fn epoch(
        &self,
        epoch: u64,
        expected: u64,
        ckpt: &mut Option<Checkpointer>,
        opened: Option<Opened>,
        next: Option<u64>,
    ) -> anyhow::Result<(EpochRun, Option<Opened>)> {
        let (before, opened_ahead_samples) = match &opened {
            Some(opened) if opened.epoch == epoch => (*opened.stats.clone(), opened.left),
            _ => (self.loader.stats(), 0),
        };
        let decode_before = self.decoder.map(Decoder::busy_s);
        let bar = Arc::new(Bar::new(&format!("epoch {epoch}")));
        bar.set_total(expected, None);
        let started = Instant::now();
        let (tx, mut rx) = mpsc::channel::<Item>(PREFETCH_BATCHES);
        let input = match opened {
            Some(opened) if opened.epoch == epoch => Input::Opened(opened),
            _ => Input::Fresh(Box::new(self.loader.epoch(epoch)?)),
        };
        let producer = self.spawn_producer(epoch, input, tx, Arc::clone(&bar));
        let mut ahead = None;
        let mut run = EpochRun {
            log: EpochLog {
                epoch,
                opened_ahead_samples,
                ..EpochLog::default()
            },
            waits: Vec::new(),
            compute_s: 0.0,
            ckpt_s: 0.0,
            fetch: StageSeconds::default(),
            decode: StageSeconds::default(),
        };
        loop {
            let asked = Instant::now();
            let Some(item) = rx.recv().await else { break };
            let wait = asked.elapsed();
            let images = item.len() as u64;
            let busy = accelerator(self.compute).await?;
            if let (Item::Decoded(batch), Some(decoder)) = (item, self.decoder) {
                decoder.recycle(batch);
            }
            run.waits.push(wait.as_secs_f64() * 1e3);
            run.compute_s += busy.as_secs_f64();
            run.log.samples += images;
            run.log.batches += 1;
            bar.advance(images, 0);
            self.live.step(images, wait, busy, &self.loader.stats());
            if let (Some(next), Some(lead), None) = (next, self.lead, &ahead)
                && expected.saturating_sub(run.log.samples) <= lead
                && (!self.cached || producer.is_finished())
            {
                ahead = Some(self.open(next, expected.saturating_sub(run.log.samples))?);
            }
            if let Some(ckpt) = ckpt.as_mut() {
                run.ckpt_s += ckpt.after_step().await?;
            }
        }
        drop(rx);
        let skipped = producer
            .await
            .map_err(|e| bucketload::panics::join_error("the loader task", e))??;
        bar.finish();
        let seconds = started.elapsed().as_secs_f64();
        let after = ahead
            .as_ref()
            .map_or_else(|| self.loader.stats(), |o: &Opened| *o.stats.clone());
        self.finish(&mut run, seconds, skipped, (&before, &after), decode_before);
        Ok((run, ahead))
    }

    /// Opens epoch `epoch`'s stream and polls it on a task of its own until its first sample,
    /// so that its fetching begins now.
    fn open(&self, epoch: u64, left: u64) -> anyhow::Result<Opened> {
        let stats = Box::new(self.loader.stats());
        let mut stream = self.loader.epoch(epoch)?;
        let task = tokio::spawn(async move {
            let first = stream.try_next().await;
            (stream, first)
        });
        Ok(Opened {
            epoch,
            task: Some(task),
            stats,
            left,
        })
    }

    fn finish(
        &self,
        run: &mut EpochRun,
        seconds: f64,
        skipped: u64,
        (before, after): (&LoaderStats, &LoaderStats),
        decode_before: Option<f64>,
    ) {
        let log = &mut run.log;
        log.seconds = seconds;
        log.skipped = skipped;
        log.ckpt_s = run.ckpt_s;
        log.bytes = after.bytes - before.bytes;
        log.samples_per_second = per_s(log.samples as f64, seconds);
        log.accelerator_utilization = per_s(run.compute_s, seconds).min(1.0);
        log.data_wait_ms = WaitPercentiles::of(&run.waits);
        log.cache_hits = after.cache.hits - before.cache.hits;
        log.cache_misses = after.cache.misses - before.cache.misses;
        let busy = (after.fetch.busy_s - before.fetch.busy_s).clamp(0.0, seconds);
        run.fetch = StageSeconds {
            busy_s: busy,
            wait_s: seconds - busy,
        };
        if let (Some(decoder), Some(b)) = (self.decoder, decode_before) {
            let busy = decoder.busy_s() - b;
            let capacity = seconds * decoder.threads() as f64;
            run.decode = StageSeconds {
                busy_s: busy,
                wait_s: (capacity - busy).max(0.0),
            };
        }
    }

    /// Drains the loader into `tx`: batches of encoded samples, or through the decoder.
    /// Returns the images skipped as corrupt.
    fn spawn_producer(
        &self,
        epoch: u64,
        input: Input,
        tx: mpsc::Sender<Item>,
        bar: Arc<Bar>,
    ) -> JoinHandle<anyhow::Result<u64>> {
        let Some(decoder) = self.decoder else {
            let (size, drop_last) = (self.batch_size.max(1), self.drop_last);
            return tokio::spawn(async move {
                let (mut samples, mut first) = input.stream().await?;
                let mut batch = Vec::with_capacity(size);
                while let Some(sample) = match first.take() {
                    Some(sample) => Some(sample),
                    None => samples.try_next().await?,
                } {
                    bar.advance(0, sample.bytes());
                    batch.push(sample);
                    if batch.len() == size {
                        let full = std::mem::replace(&mut batch, Vec::with_capacity(size));
                        if tx.send(Item::Encoded(full)).await.is_err() {
                            return Ok(0);
                        }
                    }
                }
                if !batch.is_empty() && !drop_last {
                    let _ = tx.send(Item::Encoded(batch)).await;
                }
                Ok(0)
            });
        };
        let sink = Box::new(move |batch| tx.blocking_send(Item::Decoded(batch)).is_ok());
        let mut decode = decoder.start_with_sink(epoch, Some(sink));
        tokio::spawn(async move {
            let (mut samples, mut first) = input.stream().await?;
            while let Some(sample) = match first.take() {
                Some(sample) => Some(sample),
                None => samples.try_next().await?,
            } {
                bar.advance(0, sample.bytes());
                decode.push(&sample).await?;
            }
            Ok(decode.finish().await?.skipped)
        })
    }
}

/// The emulated accelerator's step: `compute` slept on a blocking thread (to within tens of
/// microseconds, where the runtime's timer rounds up to the next millisecond); returns the
/// time it was busy.
async fn accelerator(compute: Duration) -> anyhow::Result<Duration> {
    if compute.is_zero() {
        return Ok(Duration::ZERO);
    }
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        std::thread::sleep(compute);
        started.elapsed()
    })
    .await
    .map_err(|e| bucketload::panics::join_error("the emulated accelerator", e).into())
}

fn per_s(x: f64, seconds: f64) -> f64 {
    if seconds > 0.0 { x / seconds } else { 0.0 }
}
