//! `read --decode`: the loader's samples decoded and augmented into batches by
//! `bucketload-image` (RandomResizedCrop, horizontal flip, normalise), as a training loop
//! would receive them, so `read` reports images/s next to samples/s.
//!
//! The loader's async stream feeds a bounded channel; one blocking thread drains it through
//! [`ImagePipeline::batches`], which decodes each batch on the pipeline's rayon pool. Memory
//! is the channel (two batches of encoded samples) plus the pipeline's recycled batch buffers.

use std::sync::Arc;

use anyhow::{Context, bail};
use bucketload::loader::Sample;
use bucketload_image::{
    Augment, Geometry, ImagePipeline, JpegDecode, LastBatch, OnError, OutputFormat, PipelineStats,
};
use clap::{Args, ValueEnum};
use serde::Serialize;
use tokio::sync::mpsc;

/// Flags of `read` that turn decoding on.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Decode (images into batches)")]
pub struct DecodeArgs {
    /// Decode every sample's image (.jpg, .jpeg or .png member) and augment it into batches:
    /// RandomResizedCrop, horizontal flip, normalise
    #[arg(long)]
    pub decode: bool,
    /// Side of the square crop, in pixels
    #[arg(long, default_value_t = 224, value_name = "PX")]
    pub image_size: u32,
    /// Images per batch
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub batch_size: usize,
    /// Decode threads [default: the cores available]
    #[arg(long, value_name = "N")]
    pub decode_threads: Option<usize>,
    /// Batch element type: f32 (CHW, normalised with ImageNet's mean and std) or u8 (HWC)
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    pub dtype: Dtype,
    /// Drop the last batch of an epoch when it is short
    #[arg(long)]
    pub drop_last: bool,
    /// Leave out images that cannot be decoded (counted and reported) instead of stopping
    #[arg(long)]
    pub skip_corrupt: bool,
    /// How much of each JPEG to decode: region (only the crop box; the pixels of a whole
    /// decode), region-scaled (the crop box at a 1/2, 1/4 or 1/8 DCT scale when it is that many
    /// times the output: faster, not pixel-identical to torchvision) or whole
    #[arg(long, value_enum, default_value_t = JpegMode::Region)]
    pub jpeg_decode: JpegMode,
}

/// `--jpeg-decode`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum JpegMode {
    /// Only the rows and columns the crop box needs, at full resolution
    Region,
    /// The crop box, DCT-scaled when it is at least twice the output
    RegionScaled,
    /// The whole image
    Whole,
}

/// `--dtype`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Dtype {
    /// 32-bit floats, channels first
    F32,
    /// Bytes, channels last
    U8,
}

/// What decoding did in one epoch.
#[derive(Debug, Default, Serialize)]
pub struct DecodeEpoch {
    /// Images in the batches.
    pub images: u64,
    /// Batches produced.
    pub batches: u64,
    /// Images left out because they could not be decoded (`--skip-corrupt`).
    pub skipped: u64,
    /// Images per second of the epoch's wall time (the last batch included).
    pub images_per_s: f64,
    /// Thread time spent decoding, seconds (all decode threads).
    pub decode_s: f64,
    /// Thread time spent cropping, resizing and normalising, seconds.
    pub augment_s: f64,
}

/// The decode stage of `read`.
pub struct Decoder {
    pipeline: Arc<ImagePipeline>,
}

impl Decoder {
    /// Builds the pipeline; `None` when `--decode` was not given.
    pub fn new(args: &DecodeArgs, seed: u64) -> anyhow::Result<Option<Decoder>> {
        if !args.decode {
            return Ok(None);
        }
        let output = match args.dtype {
            Dtype::F32 => OutputFormat::imagenet(),
            Dtype::U8 => OutputFormat::HwcU8,
        };
        let mut builder = ImagePipeline::builder()
            .with_augment(Augment {
                geometry: Geometry::random_resized_crop(args.image_size),
                flip: 0.5,
                antialias: false,
            })
            .with_output(output)
            .with_batch_size(args.batch_size)
            .with_seed(seed)
            .with_jpeg_decode(match args.jpeg_decode {
                JpegMode::Region => JpegDecode::Region,
                JpegMode::RegionScaled => JpegDecode::RegionScaled,
                JpegMode::Whole => JpegDecode::Whole,
            })
            .with_last_batch(match args.drop_last {
                true => LastBatch::Drop,
                false => LastBatch::Keep,
            })
            .with_on_error(match args.skip_corrupt {
                true => OnError::Skip,
                false => OnError::Fail,
            });
        if let Some(threads) = args.decode_threads {
            builder = builder.with_threads(threads);
        }
        let pipeline = builder.build().context("invalid decode settings")?;
        Ok(Some(Decoder {
            pipeline: Arc::new(pipeline),
        }))
    }

    /// Starts decoding epoch `epoch`: samples sent to the returned [`EpochDecode`] come out as
    /// batches on a blocking thread, which recycles them.
    pub fn start(&self, epoch: u64) -> EpochDecode {
        self.start_with_sink(epoch, None)
    }

    /// Like [`Decoder::start`], but every batch is handed to `sink` on the decode thread
    /// instead of being recycled (the receiver gives it back with [`Decoder::recycle`]); `sink`
    /// returns false when the consumer stopped, and decoding stops too.
    pub fn start_with_sink(
        &self,
        epoch: u64,
        mut sink: Option<Box<dyn FnMut(bucketload_image::Batch) -> bool + Send>>,
    ) -> EpochDecode {
        let (tx, mut rx) =
            mpsc::channel::<bucketload_image::Sample>(2 * self.pipeline.batch_size().max(1));
        let pipeline = Arc::clone(&self.pipeline);
        let before = pipeline.stats();
        let worker = tokio::task::spawn_blocking(move || {
            let samples = std::iter::from_fn(|| rx.blocking_recv());
            let mut done = DecodeEpoch::default();
            for batch in pipeline.batches(epoch, samples) {
                let batch = batch?;
                done.images += batch.len() as u64;
                done.batches += 1;
                done.skipped += batch.skipped.len() as u64;
                match &mut sink {
                    Some(sink) => {
                        if !sink(batch) {
                            break;
                        }
                    }
                    None => pipeline.recycle(batch),
                }
            }
            thread_times(&mut done, &before, &pipeline.stats());
            Ok(done)
        });
        EpochDecode {
            tx: Some(tx),
            worker,
        }
    }

    /// Returns a batch's buffers to the pipeline for reuse.
    pub fn recycle(&self, batch: bucketload_image::Batch) {
        self.pipeline.recycle(batch);
    }

    /// Decode and augment thread time so far, seconds.
    pub fn busy_s(&self) -> f64 {
        let s = self.pipeline.stats();
        (s.decode_nanos + s.augment_nanos) as f64 / 1e9
    }

    /// Decode threads.
    pub fn threads(&self) -> usize {
        self.pipeline.threads()
    }
}

fn thread_times(done: &mut DecodeEpoch, before: &PipelineStats, after: &PipelineStats) {
    let seconds = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e9;
    done.decode_s = seconds(before.decode_nanos, after.decode_nanos);
    done.augment_s = seconds(before.augment_nanos, after.augment_nanos);
}

/// One epoch being decoded.
pub struct EpochDecode {
    tx: Option<mpsc::Sender<bucketload_image::Sample>>,
    worker: tokio::task::JoinHandle<bucketload_image::Result<DecodeEpoch>>,
}

impl EpochDecode {
    /// Hands a sample to the decode thread, waiting while two batches are queued.
    pub async fn push(&mut self, sample: &Sample) -> anyhow::Result<()> {
        let image = image_sample(sample)?;
        let sent = match &self.tx {
            Some(tx) => tx.send(image).await.is_ok(),
            None => false,
        };
        if !sent {
            // The decode thread stopped early: its error says why.
            self.tx = None;
            return self.finish_error().await;
        }
        Ok(())
    }

    async fn finish_error(&mut self) -> anyhow::Result<()> {
        let worker = &mut self.worker;
        match worker.await.map_err(decode_panic)? {
            Err(e) => Err(e.into()),
            Ok(_) => bail!("the decode thread stopped before the epoch ended"),
        }
    }

    /// Waits for the last batch.
    pub async fn finish(mut self) -> anyhow::Result<DecodeEpoch> {
        self.tx = None;
        Ok(self.worker.await.map_err(decode_panic)??)
    }
}

/// The error of a decode thread that panicked (in a rayon task or the thread itself).
fn decode_panic(e: tokio::task::JoinError) -> bucketload::Error {
    bucketload::panics::join_error("the decode thread", e)
}

/// The loader's sample as the image pipeline's: its image member, its label (-1 when the
/// dataset has none) and a dataset-wide index that fixes its random crop.
fn image_sample(sample: &Sample) -> anyhow::Result<bucketload_image::Sample> {
    let Some(bytes) = sample.image() else {
        let found: Vec<&str> = sample.members.iter().map(|(e, _)| e.as_str()).collect();
        return Err(bucketload::Error::invalid_input(format!(
            "sample {} has no .jpg, .jpeg or .png member (it has {found:?}); \
             --decode needs one image per sample",
            sample.key
        ))
        .into());
    };
    Ok(bucketload_image::Sample {
        key: sample.key.clone(),
        index: sample.dataset_index(),
        label: sample.label.map_or(-1, i64::from),
        bytes: bytes.clone(),
    })
}

/// The kind of an image pipeline error: bytes that are not a usable image are corrupt data,
/// a bad setting is invalid input.
pub fn image_kind(err: &bucketload_image::Error) -> bucketload::ErrorKind {
    use bucketload::ErrorKind;
    use bucketload_image::Error as E;
    match err {
        E::InvalidConfig { .. } => ErrorKind::InvalidInput,
        E::ThreadPool(_) => ErrorKind::Other,
        _ => ErrorKind::Corrupt,
    }
}
