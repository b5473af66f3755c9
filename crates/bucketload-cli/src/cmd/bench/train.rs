//! The emulated training loop of `bench`: the loader's samples become batches (decoded and
//! augmented, or left encoded with `--no-decode`), and each step waits for its batch, then
//! "computes" for a fixed time in place of a model, as MLPerf Storage and DLIO do.
//!
//! A producer task drains the loader and fills a queue of [`PREFETCH_BATCHES`] batches, so
//! input and compute overlap the way a DataLoader's prefetching makes them overlap. Each
//! step's wait for its batch is the data wait; compute time ÷ wall time is the accelerator
//! utilisation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bucketload::base::Progress;
use bucketload::loader::{LoaderStats, Sample};
use futures::TryStreamExt;
use tokio::sync::mpsc;

use super::ckpt::Checkpointer;
use super::log::{EpochLog, StageSeconds, WaitPercentiles};
use super::prom::Live;
use crate::args::loader::Datasets;
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
    /// Runs epoch `epoch`; `expected` samples size the progress bar.
    pub async fn epoch(
        &self,
        epoch: u64,
        expected: u64,
        ckpt: &mut Option<Checkpointer>,
    ) -> anyhow::Result<EpochRun> {
        let before = self.loader.stats();
        let decode_before = self.decoder.map(Decoder::busy_s);
        let bar = Arc::new(Bar::new(&format!("epoch {epoch}")));
        bar.set_total(expected, None);
        let started = Instant::now();
        let (tx, mut rx) = mpsc::channel::<Item>(PREFETCH_BATCHES);
        let producer = self.spawn_producer(epoch, tx, Arc::clone(&bar))?;
        let mut run = EpochRun {
            log: EpochLog {
                epoch,
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
            tokio::time::sleep(self.compute).await;
            if let (Item::Decoded(batch), Some(decoder)) = (item, self.decoder) {
                decoder.recycle(batch);
            }
            run.waits.push(wait.as_secs_f64() * 1e3);
            run.compute_s += self.compute.as_secs_f64();
            run.log.samples += images;
            run.log.batches += 1;
            bar.advance(images, 0);
            self.live
                .step(images, wait, self.compute, &self.loader.stats());
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
        self.finish(&mut run, seconds, skipped, &before, decode_before);
        Ok(run)
    }

    fn finish(
        &self,
        run: &mut EpochRun,
        seconds: f64,
        skipped: u64,
        before: &LoaderStats,
        decode_before: Option<f64>,
    ) {
        let after = self.loader.stats();
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
        tx: mpsc::Sender<Item>,
        bar: Arc<Bar>,
    ) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<u64>>> {
        let mut samples = self.loader.epoch(epoch)?;
        let Some(decoder) = self.decoder else {
            let (size, drop_last) = (self.batch_size.max(1), self.drop_last);
            return Ok(tokio::spawn(async move {
                let mut batch = Vec::with_capacity(size);
                while let Some(sample) = samples.try_next().await? {
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
            }));
        };
        let sink = Box::new(move |batch| tx.blocking_send(Item::Decoded(batch)).is_ok());
        let mut decode = decoder.start_with_sink(epoch, Some(sink));
        Ok(tokio::spawn(async move {
            while let Some(sample) = samples.try_next().await? {
                bar.advance(0, sample.bytes());
                decode.push(&sample).await?;
            }
            Ok(decode.finish().await?.skipped)
        }))
    }
}

fn per_s(x: f64, seconds: f64) -> f64 {
    if seconds > 0.0 { x / seconds } else { 0.0 }
}
