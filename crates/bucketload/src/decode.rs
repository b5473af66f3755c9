//! The decode bridge: the loader's [`Sample`]s become the image pipeline's batches.
//!
//! Every front end that decodes (the CLI's `read --decode` and `bench`, Python's `Loader`)
//! goes through here, so they build the same pipeline from the same settings
//! ([`DecodeConfig`]), pick the same image member of a sample ([`image_sample`]) and hand
//! samples over the same way:
//!
//! ```text
//! loader (async stream) --push--> channel of two batches' samples --> batch thread
//!     --> ImagePipeline::batches (decode + augment on its rayon pool) --> sink or recycle
//! ```
//!
//! [`EpochDecode::push`] runs in the loader's task and waits while two batches' samples are
//! queued, so decoding that falls behind slows the reads instead of filling memory.
//! [`Decoder::batches`] wraps that for a consumer outside the runtime (Python): a task drives
//! the stream and the batches wait in a channel of [`PREFETCH_BATCHES`].
//!
//! Built with the `image` feature, which brings in `bucketload-image`.

use std::str::FromStr;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, Weak};

use bucketload_image::{
    Augment, Batch, Geometry, IMAGENET_MEAN, IMAGENET_STD, ImagePipeline, ImagePipelineBuilder,
    JpegDecode, LastBatch, OnError, OutputFormat, PipelineStats,
};
use futures::{Stream, StreamExt};
use serde::Serialize;
use tokio::sync::mpsc;

use crate::loader::Sample;
use crate::{Error, Result, Setting, panics};

/// Batches decoded ahead of a consumer outside the runtime ([`Decoder::batches`]).
pub const PREFETCH_BATCHES: usize = 2;

/// The element type of a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Dtype {
    /// 32-bit floats, channels first (NCHW), normalised with the configured mean and std.
    #[default]
    F32,
    /// Bytes, channels last (NHWC).
    U8,
}

impl FromStr for Dtype {
    type Err = Error;

    /// `float32` (or `f32`) and `uint8` (or `u8`).
    fn from_str(s: &str) -> Result<Dtype> {
        match s {
            "float32" | "f32" => Ok(Dtype::F32),
            "uint8" | "u8" => Ok(Dtype::U8),
            other => Err(Error::invalid_input(format!(
                "dtype {other:?} is not 'float32' (NCHW, normalised) or 'uint8' (NHWC)"
            ))),
        }
    }
}

/// torchvision's default range of `RandomResizedCrop`'s share of the image area.
pub const DEFAULT_SCALE: (f64, f64) = (0.08, 1.0);
/// torchvision's default range of `RandomResizedCrop`'s width / height.
pub const DEFAULT_RATIO: (f64, f64) = (3.0 / 4.0, 4.0 / 3.0);

/// Which transform each image gets: a training run's random crops and flips, or the
/// deterministic evaluation transform of a validation loop.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Augmentation {
    /// torchvision's `RandomResizedCrop(image_size, scale, ratio)` (without antialias, as the
    /// reference training pipelines) then `RandomHorizontalFlip(0.5)`.
    Train {
        /// Range of the crop's share of the image area; torchvision's default (0.08, 1.0).
        scale: (f64, f64),
        /// Range of the crop's width / height; torchvision's default (3/4, 4/3).
        ratio: (f64, f64),
    },
    /// torchvision's `Resize(resize)` (the shorter side, antialiased as on PIL images) then
    /// `CenterCrop(image_size)`; no flip, no randomness.
    Eval {
        /// Length the shorter side is resized to; `None`: [`eval_resize`] of the image size
        /// (256 for 224).
        resize: Option<u32>,
    },
}

impl Augmentation {
    /// Training with torchvision's default scale and ratio ranges.
    pub const TRAIN: Augmentation = Augmentation::Train {
        scale: DEFAULT_SCALE,
        ratio: DEFAULT_RATIO,
    };

    /// Evaluation with the default resize ([`eval_resize`]).
    pub const EVAL: Augmentation = Augmentation::Eval { resize: None };
}

impl Default for Augmentation {
    fn default() -> Self {
        Augmentation::TRAIN
    }
}

impl FromStr for Augmentation {
    type Err = Error;

    /// `train` or `eval`, with their defaults.
    fn from_str(s: &str) -> Result<Augmentation> {
        match s {
            "train" => Ok(Augmentation::TRAIN),
            "eval" => Ok(Augmentation::EVAL),
            other => Err(Error::invalid_input(format!(
                "{} {other:?} is not 'train' (random crops and flips) or 'eval' (resize and \
                 centre crop)",
                Setting::Augment
            ))),
        }
    }
}

/// The transform settings as a front end takes them: the transform chosen (its defaults) and
/// each setting the user gave, `None` when not given. [`TransformSettings::resolve`] checks that
/// every given setting applies to the transform and dtype chosen, and fills in the defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TransformSettings {
    /// [`Augmentation::TRAIN`] or [`Augmentation::EVAL`] (`"train"`/`"eval"` parse to them).
    pub augmentation: Augmentation,
    /// The evaluation transform's resize.
    pub resize: Option<u32>,
    /// The normalisation's channel means.
    pub mean: Option<[f32; 3]>,
    /// The normalisation's channel standard deviations.
    pub std: Option<[f32; 3]>,
    /// The training crop's area range.
    pub scale: Option<(f64, f64)>,
    /// The training crop's aspect-ratio range.
    pub ratio: Option<(f64, f64)>,
}

impl TransformSettings {
    /// The augmentation, mean and std for batches of `dtype`; a setting given that does not
    /// apply (`resize` to training, `scale` or `ratio` to evaluation, `mean` or `std` to
    /// unnormalised `U8` batches) is an error naming it rather than ignored.
    pub fn resolve(&self, dtype: Dtype) -> Result<(Augmentation, [f32; 3], [f32; 3])> {
        let mut wrong = Vec::new();
        let augmentation = match self.augmentation {
            Augmentation::Train { scale, ratio } => {
                if self.resize.is_some() {
                    wrong.push(format!(
                        "{} applies to {} eval",
                        Setting::Resize,
                        Setting::Augment
                    ));
                }
                Augmentation::Train {
                    scale: self.scale.unwrap_or(scale),
                    ratio: self.ratio.unwrap_or(ratio),
                }
            }
            Augmentation::Eval { resize } => {
                if self.scale.is_some() || self.ratio.is_some() {
                    wrong.push(format!(
                        "{} and {} apply to {} train",
                        Setting::Scale,
                        Setting::Ratio,
                        Setting::Augment
                    ));
                }
                Augmentation::Eval {
                    resize: self.resize.or(resize),
                }
            }
        };
        if dtype == Dtype::U8 && (self.mean.is_some() || self.std.is_some()) {
            wrong.push(format!(
                "{} and {} apply to float32 batches (uint8 batches are not normalised)",
                Setting::Mean,
                Setting::Std
            ));
        }
        if !wrong.is_empty() {
            return Err(Error::invalid_input(wrong.join("; ")));
        }
        let mean = self.mean.unwrap_or(IMAGENET_MEAN);
        Ok((augmentation, mean, self.std.unwrap_or(IMAGENET_STD)))
    }
}

/// The shorter side an evaluation transform resizes to by default: ImageNet's convention,
/// `round(image_size / 0.875)`, 256 for a 224 crop (the crop keeps 87.5% of the side).
pub fn eval_resize(image_size: u32) -> u32 {
    // In range: image_size / 0.875 < 2^32 * 1.15, and the cast saturates above.
    (f64::from(image_size) / 0.875).round() as u32
}

/// How a run's images are decoded and transformed into batches: the [`Augmentation`] to
/// `image_size`, then `dtype` (floats normalised with `mean` and `std`).
#[derive(Debug, Clone)]
pub struct DecodeConfig {
    /// Side of the square crop, in pixels.
    pub image_size: u32,
    /// Training or evaluation transform.
    pub augmentation: Augmentation,
    /// Channel means (R, G, B) of pixels scaled to [0, 1], subtracted from `F32` batches.
    pub mean: [f32; 3],
    /// Channel standard deviations (R, G, B), dividing `F32` batches.
    pub std: [f32; 3],
    /// Images per batch.
    pub batch_size: usize,
    /// Batch element type.
    pub dtype: Dtype,
    /// How much of each JPEG to decode.
    pub jpeg: JpegDecode,
    /// Decode threads; `None`: the cores available.
    pub threads: Option<usize>,
    /// Drop the last batch of an epoch when it is short.
    pub drop_last: bool,
    /// Leave out images that cannot be decoded (counted in each batch) instead of failing.
    pub skip_corrupt: bool,
    /// Seed of the crops and flips (with the epoch and each sample's index).
    pub seed: u64,
}

impl Default for DecodeConfig {
    fn default() -> Self {
        DecodeConfig {
            image_size: 224,
            augmentation: Augmentation::TRAIN,
            mean: IMAGENET_MEAN,
            std: IMAGENET_STD,
            batch_size: 64,
            dtype: Dtype::F32,
            jpeg: JpegDecode::Region,
            threads: None,
            drop_last: false,
            skip_corrupt: false,
            seed: 0,
        }
    }
}

impl DecodeConfig {
    /// The image pipeline's builder with these settings.
    pub fn builder(&self) -> ImagePipelineBuilder {
        let output = match self.dtype {
            Dtype::F32 => OutputFormat::ChwF32 {
                mean: self.mean,
                std: self.std,
            },
            Dtype::U8 => OutputFormat::HwcU8,
        };
        let mut builder = ImagePipeline::builder()
            .with_augment(self.augment())
            .with_output(output)
            .with_batch_size(self.batch_size)
            .with_seed(self.seed)
            .with_jpeg_decode(self.jpeg)
            .with_last_batch(match self.drop_last {
                true => LastBatch::Drop,
                false => LastBatch::Keep,
            })
            .with_on_error(match self.skip_corrupt {
                true => OnError::Skip,
                false => OnError::Fail,
            });
        if let Some(threads) = self.threads {
            builder = builder.with_threads(threads);
        }
        builder
    }

    /// The image pipeline's augmentation.
    fn augment(&self) -> Augment {
        let size = self.image_size;
        match self.augmentation {
            Augmentation::Train { scale, ratio } => Augment {
                geometry: Geometry::RandomResizedCrop {
                    size: (size, size),
                    scale,
                    ratio,
                },
                flip: 0.5,
                antialias: false,
            },
            Augmentation::Eval { resize } => Augment {
                geometry: Geometry::ResizeCenterCrop {
                    shorter: resize.unwrap_or_else(|| eval_resize(size)),
                    crop: (size, size),
                },
                flip: 0.0,
                // torchvision's Resize of a PIL image always antialiases.
                antialias: true,
            },
        }
    }

    /// Every problem with these settings, naming each setting (empty when valid).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.image_size == 0 {
            problems.push(format!("{} must be at least 1 pixel", Setting::ImageSize));
        }
        match self.augmentation {
            Augmentation::Train { scale, ratio } => {
                if !(scale.0 > 0.0 && scale.0 <= scale.1 && scale.1 <= 1.0) {
                    problems.push(format!(
                        "{} {scale:?} must satisfy 0 < low <= high <= 1 (shares of the image area)",
                        Setting::Scale
                    ));
                }
                if !(ratio.0 > 0.0 && ratio.0 <= ratio.1 && ratio.1.is_finite()) {
                    problems.push(format!(
                        "{} {ratio:?} must satisfy 0 < low <= high (width / height)",
                        Setting::Ratio
                    ));
                }
            }
            Augmentation::Eval { resize } => {
                let shorter = resize.unwrap_or_else(|| eval_resize(self.image_size));
                if shorter < self.image_size {
                    problems.push(format!(
                        "{} {shorter} is smaller than {} {}: the centre crop must fit in the \
                         resized image",
                        Setting::Resize,
                        Setting::ImageSize,
                        self.image_size
                    ));
                }
            }
        }
        if self.mean.iter().any(|m| !m.is_finite()) {
            problems.push(format!("{} {:?} must be finite", Setting::Mean, self.mean));
        }
        if self.std.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            problems.push(format!(
                "{} {:?} must be finite and positive",
                Setting::Std,
                self.std
            ));
        }
        problems
    }

    /// Builds the pipeline; invalid settings are one error listing every problem.
    pub fn pipeline(&self) -> Result<ImagePipeline> {
        let problems = self.problems();
        if !problems.is_empty() {
            return Err(Error::invalid_input(problems.join("; ")));
        }
        Ok(self.builder().build()?)
    }
}

/// The loader's sample as the image pipeline's: its image member (the first `.jpg`, `.jpeg`
/// or `.png`), its label (-1 when the dataset has none) and its dataset-wide index, which
/// fixes its random crop.
pub fn image_sample(sample: &Sample) -> Result<bucketload_image::Sample> {
    let Some(bytes) = sample.image() else {
        let found: Vec<&str> = sample.members.iter().map(|(e, _)| e.as_str()).collect();
        return Err(Error::invalid_input(format!(
            "sample {} has no .jpg, .jpeg or .png member (it has {found:?}); decoding needs \
             one image per sample: read the samples undecoded instead",
            sample.key
        )));
    };
    Ok(bucketload_image::Sample {
        key: sample.key.clone(),
        index: sample.dataset_index(),
        label: sample.label.map_or(-1, i64::from),
        bytes: bytes.clone(),
    })
}

/// What decoding did in one epoch.
#[derive(Debug, Default, Clone, Serialize)]
pub struct DecodeEpoch {
    /// Images in the batches.
    pub images: u64,
    /// Batches produced.
    pub batches: u64,
    /// Images left out because they could not be decoded (`skip_corrupt`).
    pub skipped: u64,
    /// Images per second of the epoch's wall time (set by the caller, who knows that time).
    pub images_per_s: f64,
    /// Thread time spent decoding, seconds (all decode threads).
    pub decode_s: f64,
    /// Thread time spent cropping, resizing and normalising, seconds.
    pub augment_s: f64,
}

/// Where a decoding epoch's batches go: `false` when the consumer stopped (decoding stops).
pub type BatchSink = Box<dyn FnMut(Batch) -> bool + Send>;

/// An image pipeline that decodes epochs of the loader's samples.
#[derive(Debug, Clone)]
pub struct Decoder {
    pipeline: Arc<ImagePipeline>,
}

impl Decoder {
    /// Builds the pipeline of `config`.
    pub fn new(config: &DecodeConfig) -> Result<Decoder> {
        Ok(Decoder::from_pipeline(config.pipeline()?))
    }

    /// A decoder over a pipeline built elsewhere.
    pub fn from_pipeline(pipeline: ImagePipeline) -> Decoder {
        Decoder {
            pipeline: Arc::new(pipeline),
        }
    }

    /// The pipeline.
    pub fn pipeline(&self) -> &Arc<ImagePipeline> {
        &self.pipeline
    }

    /// Starts decoding epoch `epoch`: samples pushed to the returned [`EpochDecode`] come out
    /// as batches on a blocking thread, which recycles them (for a reader that only measures).
    pub fn start(&self, epoch: u64) -> EpochDecode {
        self.start_with_sink(epoch, None)
    }

    /// Like [`Decoder::start`], but every batch is handed to `sink` on the batch thread
    /// instead of being recycled (the receiver gives it back with [`Decoder::recycle`]).
    /// Call from inside a Tokio runtime.
    pub fn start_with_sink(&self, epoch: u64, mut sink: Option<BatchSink>) -> EpochDecode {
        let capacity = 2 * self.pipeline.batch_size().max(1);
        let (tx, mut rx) = mpsc::channel::<bucketload_image::Sample>(capacity);
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
            worker: Some(worker),
        }
    }

    /// Decodes epoch `epoch` of `samples` for a consumer outside the runtime: a task on
    /// `runtime` drives the stream, and the batches wait in a channel of
    /// [`PREFETCH_BATCHES`]. The first error (the loader's, a sample without an image, the
    /// pipeline's, a panic) ends the batches. Dropping the result stops the epoch.
    pub fn batches<S>(
        &self,
        runtime: &tokio::runtime::Handle,
        samples: S,
        epoch: u64,
    ) -> DecodedBatches
    where
        S: Stream<Item = Result<Sample>> + Send + Unpin + 'static,
    {
        let (out, rx) = sync_channel::<Result<Batch>>(PREFETCH_BATCHES);
        let decoder = self.clone();
        let report = out.clone();
        let feeder = runtime.spawn(async move {
            let feed = drive(decoder, samples, epoch, out);
            // A panic is the epoch's failure, never an early end of the batches.
            if let Err(e) = panics::catch("the sample feeder", feed).await {
                let _ = report.send(Err(e));
            }
        });
        DecodedBatches {
            rx: Mutex::new(rx),
            feeder,
            pipeline: Arc::downgrade(&self.pipeline),
        }
    }

    /// Returns a batch's buffers to the pipeline for reuse.
    pub fn recycle(&self, batch: Batch) {
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

/// Pushes `samples` through an epoch whose batches go to `out`; the first error goes there
/// too, after the batches of the samples pushed before it.
async fn drive<S>(
    decoder: Decoder,
    mut samples: S,
    epoch: u64,
    out: SyncSender<Result<Batch>>,
) -> Result<()>
where
    S: Stream<Item = Result<Sample>> + Send + Unpin + 'static,
{
    let to_consumer = out.clone();
    let sink: BatchSink = Box::new(move |batch| to_consumer.send(Ok(batch)).is_ok());
    let mut decode = decoder.start_with_sink(epoch, Some(sink));
    let mut failed = None;
    while let Some(item) = samples.next().await {
        let image = item.and_then(|sample| image_sample(&sample));
        let image = match image {
            Ok(image) => image,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        if let Err(e) = decode.push_image(image).await {
            // The batch thread failed: it has sent every batch it made.
            let _ = out.send(Err(e));
            return Ok(());
        }
    }
    let finished = decode.finish().await;
    if let Some(e) = failed.or(finished.err()) {
        let _ = out.send(Err(e));
    }
    Ok(())
}

fn thread_times(done: &mut DecodeEpoch, before: &PipelineStats, after: &PipelineStats) {
    let seconds = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e9;
    done.decode_s = seconds(before.decode_nanos, after.decode_nanos);
    done.augment_s = seconds(before.augment_nanos, after.augment_nanos);
}

/// One epoch being decoded; see [`Decoder::start`].
#[derive(Debug)]
pub struct EpochDecode {
    tx: Option<mpsc::Sender<bucketload_image::Sample>>,
    /// The batch thread; `None` once its failure was returned.
    worker: Option<tokio::task::JoinHandle<bucketload_image::Result<DecodeEpoch>>>,
}

impl EpochDecode {
    /// Hands a sample to the batch thread, waiting while two batches' samples are queued.
    /// After an error, the epoch is over: do not call [`EpochDecode::finish`].
    pub async fn push(&mut self, sample: &Sample) -> Result<()> {
        self.push_image(image_sample(sample)?).await
    }

    async fn push_image(&mut self, image: bucketload_image::Sample) -> Result<()> {
        let sent = match &self.tx {
            Some(tx) => tx.send(image).await.is_ok(),
            None => false,
        };
        if !sent {
            // The batch thread stopped early: its error says why.
            self.tx = None;
            return Err(match self.worker.take() {
                Some(worker) => ended_early(worker.await),
                None => already_failed(),
            });
        }
        Ok(())
    }

    /// Waits for the last batch.
    pub async fn finish(mut self) -> Result<DecodeEpoch> {
        self.tx = None;
        let worker = self.worker.take().ok_or_else(already_failed)?;
        match worker.await {
            Err(e) => Err(panics::join_error("the batch thread", e)),
            Ok(done) => Ok(done?),
        }
    }
}

type Joined = std::result::Result<bucketload_image::Result<DecodeEpoch>, tokio::task::JoinError>;

/// Why a batch thread that stopped taking samples stopped.
fn ended_early(joined: Joined) -> Error {
    match joined {
        Err(e) => panics::join_error("the batch thread", e),
        Ok(Err(e)) => e.into(),
        Ok(Ok(_)) => Error::Task {
            reason: "the batch thread stopped before the epoch ended".to_owned(),
        },
    }
}

fn already_failed() -> Error {
    Error::Task {
        reason: "the epoch's decoding already failed".to_owned(),
    }
}

/// The batches of one epoch for a consumer outside the runtime; see [`Decoder::batches`].
#[derive(Debug)]
pub struct DecodedBatches {
    rx: Mutex<Receiver<Result<Batch>>>,
    feeder: tokio::task::JoinHandle<()>,
    pipeline: Weak<ImagePipeline>,
}

impl DecodedBatches {
    /// The pipeline the batches come from, to hand their buffers back to
    /// ([`ImagePipeline::recycle_data`]) once nothing refers to them; weak, so that a batch
    /// kept after its loader is gone does not keep the pipeline's threads.
    pub fn pipeline(&self) -> Weak<ImagePipeline> {
        Weak::clone(&self.pipeline)
    }

    /// The next batch, waiting for it; `None` after the last one (or after an error was
    /// returned).
    pub fn next_blocking(&self) -> Option<Result<Batch>> {
        self.rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .recv()
            .ok()
    }
}

impl Drop for DecodedBatches {
    fn drop(&mut self) {
        self.feeder.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eval_resizes_by_imagenet_convention() {
        assert_eq!(eval_resize(224), 256);
        assert_eq!(eval_resize(32), 37);
        assert_eq!("eval".parse::<Augmentation>().unwrap(), Augmentation::EVAL);
        assert!("test".parse::<Augmentation>().is_err());
    }

    #[test]
    fn problems_name_every_setting() {
        let config = DecodeConfig {
            augmentation: Augmentation::Eval { resize: Some(100) },
            std: [0.2, 0.0, 0.2],
            mean: [f32::NAN, 0.0, 0.0],
            ..DecodeConfig::default()
        };
        let problems = config.problems().join("; ");
        for setting in [Setting::Resize, Setting::Mean, Setting::Std] {
            assert!(problems.contains(&setting.to_string()), "{problems}");
        }
        let config = DecodeConfig {
            augmentation: Augmentation::Train {
                scale: (0.5, 0.1),
                ratio: (0.0, 1.0),
            },
            ..DecodeConfig::default()
        };
        let problems = config.problems().join("; ");
        for setting in [Setting::Scale, Setting::Ratio] {
            assert!(problems.contains(&setting.to_string()), "{problems}");
        }
        assert!(DecodeConfig::default().problems().is_empty());
    }

    #[test]
    fn settings_that_do_not_apply_are_named() {
        let eval = TransformSettings {
            augmentation: Augmentation::EVAL,
            resize: Some(300),
            scale: Some(DEFAULT_SCALE),
            mean: Some([0.5; 3]),
            ..TransformSettings::default()
        };
        let err = eval.resolve(Dtype::U8).unwrap_err().to_string();
        assert!(
            err.contains("`scale` and `ratio` apply to `augment` train"),
            "{err}"
        );
        assert!(err.contains("`mean` and `std` apply to float32"), "{err}");
        let given = TransformSettings {
            scale: None,
            ..eval
        };
        let (augmentation, mean, std) = given.resolve(Dtype::F32).unwrap();
        assert_eq!(augmentation, Augmentation::Eval { resize: Some(300) });
        assert_eq!((mean, std), ([0.5; 3], IMAGENET_STD));
        let train = TransformSettings {
            resize: Some(300),
            ..TransformSettings::default()
        };
        let err = train.resolve(Dtype::F32).unwrap_err().to_string();
        assert!(err.contains("`resize` applies to `augment` eval"), "{err}");
    }
}
