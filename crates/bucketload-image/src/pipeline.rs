//! The decode stage: a rayon pool that turns encoded samples into batches.
//!
//! The loader hands [`ImagePipeline::process`] a slice of [`Sample`]s (encoded bytes, key,
//! label, dataset index); every sample is planned from its own
//! [`SampleRng`](crate::SampleRng) (seeded by `(seed, epoch, index)`), decoded (for a JPEG,
//! the header first, then only the region the plan reads: [`JpegDecode`]) and resampled
//! straight into its slot of the batch buffer, in parallel on the pipeline's own pool. Nothing is
//! queued here: the caller bounds how many batches are in flight. Each pool thread keeps its
//! decode and resample buffers between images.

use std::cell::RefCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use rayon::prelude::*;

use crate::batch::{AlignedBuf, Batch, BatchData, Skipped};
use crate::decode::{
    DEFAULT_MAX_PIXELS, ImageFormat, RgbImage, decode_into, decode_jpeg_region, jpeg_size, scaled,
};
use crate::error::{Error, Result};
use crate::resample::{Normalize, ResamplePlan, Scratch, Sink, Source, resample_from};
use crate::rng::SampleRng;
use crate::transform::{Augment, Geometry, IMAGENET_MEAN, IMAGENET_STD};
use crate::turbo::Region;

/// One encoded sample.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Object key or tar member name, used in error messages.
    pub key: String,
    /// Position of the sample in the dataset; with the seed and epoch it fixes the sample's
    /// random augmentation.
    pub index: u64,
    /// Class label.
    pub label: i64,
    /// The encoded image (JPEG or PNG).
    pub bytes: Bytes,
}

/// Pixel layout and type of a batch.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum OutputFormat {
    /// `[n, h, w, 3]` bytes, as decoded (no normalisation).
    HwcU8,
    /// `[n, 3, h, w]` floats, `(v / 255 - mean) / std` per channel.
    ChwF32 {
        /// Channel means (R, G, B).
        mean: [f32; 3],
        /// Channel standard deviations (R, G, B).
        std: [f32; 3],
    },
}

impl OutputFormat {
    /// Float CHW normalised with the ImageNet statistics.
    pub fn imagenet() -> OutputFormat {
        OutputFormat::ChwF32 {
            mean: IMAGENET_MEAN,
            std: IMAGENET_STD,
        }
    }
}

/// How much of a JPEG the pipeline decodes (PNGs are always decoded whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum JpegDecode {
    /// The whole image, at full resolution.
    Whole,
    /// Only the rows and columns that the crop box needs, at full resolution (libjpeg-turbo's
    /// `jpeg_skip_scanlines` and `jpeg_crop_scanline`): the pixels are those of a whole decode
    /// and of Pillow, so batches match PIL + torchvision exactly, and less is decoded.
    #[default]
    Region,
    /// [`Region`](JpegDecode::Region), and decoded at the smallest DCT scale of 1/8, 1/4 or
    /// 1/2 that keeps the box at least as large as its resized size: the resampler then reads
    /// fewer pixels that were already low-pass filtered by the scaled IDCT. Faster still, and
    /// a different (less aliased) result than torchvision's resize of full-resolution pixels:
    /// docs/IMAGE.md states by how much.
    RegionScaled,
}

impl std::str::FromStr for JpegDecode {
    type Err = crate::Error;

    /// `region`, `region-scaled` or `whole`.
    fn from_str(s: &str) -> Result<JpegDecode, crate::Error> {
        match s {
            "region" => Ok(JpegDecode::Region),
            "region-scaled" => Ok(JpegDecode::RegionScaled),
            "whole" => Ok(JpegDecode::Whole),
            other => Err(crate::Error::InvalidConfig {
                problems: vec![format!(
                    "jpeg decode mode {other:?} is not 'region', 'region-scaled' or 'whole'"
                )],
            }),
        }
    }
}

/// What a sample that cannot be decoded does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnError {
    /// The batch fails with the sample's error (naming its key).
    #[default]
    Fail,
    /// The sample is left out of its batch, listed in [`Batch::skipped`] and counted.
    Skip,
}

/// What happens to a final batch shorter than the batch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LastBatch {
    /// Yield it.
    #[default]
    Keep,
    /// Drop it (every batch then has exactly `batch_size` samples, unless some were skipped).
    Drop,
}

/// Counters of a pipeline since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PipelineStats {
    /// Images decoded and augmented.
    pub images: u64,
    /// Samples skipped under [`OnError::Skip`].
    pub skipped: u64,
    /// Thread time spent decoding, in nanoseconds.
    pub decode_nanos: u64,
    /// Thread time spent cropping, resizing, flipping and normalising, in nanoseconds.
    pub augment_nanos: u64,
    /// Batch buffers allocated because none was handed back for reuse
    /// ([`ImagePipeline::recycle`]); each new one is page-faulted in as it is first written.
    pub buffers_allocated: u64,
}

#[derive(Debug, Default)]
struct Counters {
    images: AtomicU64,
    skipped: AtomicU64,
    decode_nanos: AtomicU64,
    augment_nanos: AtomicU64,
    buffers_allocated: AtomicU64,
}

/// Builds an [`ImagePipeline`]; every setter states its default.
#[derive(Debug, Clone)]
pub struct ImagePipelineBuilder {
    augment: Augment,
    output: OutputFormat,
    threads: Option<usize>,
    max_pixels: u64,
    on_error: OnError,
    batch_size: usize,
    last_batch: LastBatch,
    seed: u64,
    jpeg: JpegDecode,
}

impl Default for ImagePipelineBuilder {
    fn default() -> Self {
        ImagePipelineBuilder {
            augment: Augment {
                geometry: Geometry::random_resized_crop(224),
                flip: 0.5,
                antialias: false,
            },
            output: OutputFormat::imagenet(),
            threads: None,
            max_pixels: DEFAULT_MAX_PIXELS,
            on_error: OnError::Fail,
            batch_size: 64,
            last_batch: LastBatch::Keep,
            seed: 0,
            jpeg: JpegDecode::default(),
        }
    }
}

impl ImagePipelineBuilder {
    /// The augmentation. Default: `RandomResizedCrop(224)` (scale 0.08–1, ratio 3/4–4/3,
    /// no antialias), flip with probability 0.5.
    pub fn with_augment(mut self, augment: Augment) -> Self {
        self.augment = augment;
        self
    }

    /// Output layout. Default: float CHW normalised with ImageNet mean and std.
    pub fn with_output(mut self, output: OutputFormat) -> Self {
        self.output = output;
        self
    }

    /// Decode threads. Default: the cores available to the process.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads);
        self
    }

    /// Largest `width * height` decoded. Default: [`DEFAULT_MAX_PIXELS`] (Pillow's limit).
    pub fn with_max_pixels(mut self, max_pixels: u64) -> Self {
        self.max_pixels = max_pixels;
        self
    }

    /// Undecodable samples fail the batch or are skipped. Default: [`OnError::Fail`].
    pub fn with_on_error(mut self, on_error: OnError) -> Self {
        self.on_error = on_error;
        self
    }

    /// Samples per batch for [`ImagePipeline::batches`]. Default: 64.
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// The short final batch is kept or dropped. Default: [`LastBatch::Keep`].
    pub fn with_last_batch(mut self, last_batch: LastBatch) -> Self {
        self.last_batch = last_batch;
        self
    }

    /// Seed of the augmentation randomness. Default: 0.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// How much of each JPEG is decoded. Default: [`JpegDecode::Region`], which gives the same
    /// pixels as a whole decode.
    pub fn with_jpeg_decode(mut self, jpeg: JpegDecode) -> Self {
        self.jpeg = jpeg;
        self
    }

    /// Checks every setting and starts the pool.
    pub fn build(self) -> Result<ImagePipeline> {
        let mut problems = self.augment.problems();
        if self.threads == Some(0) {
            problems.push("threads must be at least 1".to_owned());
        }
        if self.batch_size == 0 {
            problems.push("batch_size must be at least 1".to_owned());
        }
        if self.max_pixels == 0 {
            problems.push("max_pixels must be at least 1".to_owned());
        }
        if let OutputFormat::ChwF32 { std, .. } = self.output
            && std.iter().any(|s| !(s.is_finite() && *s != 0.0))
        {
            problems.push(format!("std {std:?} must be finite and non-zero"));
        }
        if !problems.is_empty() {
            return Err(Error::InvalidConfig { problems });
        }
        let threads = self.threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        });
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("bucketload-decode-{i}"))
            .build()?;
        let norm = match self.output {
            OutputFormat::ChwF32 { mean, std } => Some(Normalize::new(mean, std)),
            OutputFormat::HwcU8 => None,
        };
        Ok(ImagePipeline {
            config: self,
            pool,
            threads,
            norm,
            counters: Counters::default(),
            recycled: Mutex::new(Vec::new()),
        })
    }
}

/// Batch buffers kept for reuse by [`ImagePipeline::recycle`]: enough for one batch being
/// filled while the previous one is consumed, without holding memory for more.
const RECYCLED_BUFFERS: usize = 2;

/// Decodes and augments samples into batches on its own rayon pool. See the module docs.
#[derive(Debug)]
pub struct ImagePipeline {
    config: ImagePipelineBuilder,
    pool: rayon::ThreadPool,
    threads: usize,
    norm: Option<Normalize>,
    counters: Counters,
    recycled: Mutex<Vec<BatchData>>,
}

thread_local! {
    static BUFFERS: RefCell<(RgbImage, Scratch)> = RefCell::new(Default::default());
}

impl ImagePipeline {
    /// A builder with the defaults of the workshop's training pipeline.
    pub fn builder() -> ImagePipelineBuilder {
        ImagePipelineBuilder::default()
    }

    /// Number of decode threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The configured batch size.
    pub fn batch_size(&self) -> usize {
        self.config.batch_size
    }

    /// Counters since the pipeline was built.
    pub fn stats(&self) -> PipelineStats {
        let c = &self.counters;
        PipelineStats {
            images: c.images.load(Ordering::Relaxed),
            skipped: c.skipped.load(Ordering::Relaxed),
            decode_nanos: c.decode_nanos.load(Ordering::Relaxed),
            augment_nanos: c.augment_nanos.load(Ordering::Relaxed),
            buffers_allocated: c.buffers_allocated.load(Ordering::Relaxed),
        }
    }

    /// Pixels per image in the output buffer.
    fn item_len(&self) -> usize {
        let (h, w) = self.config.augment.geometry.output_size();
        h as usize * w as usize * 3
    }

    fn shape(&self, n: usize) -> [usize; 4] {
        let (h, w) = self.config.augment.geometry.output_size();
        let (h, w) = (h as usize, w as usize);
        match self.config.output {
            OutputFormat::HwcU8 => [n, h, w, 3],
            OutputFormat::ChwF32 { .. } => [n, 3, h, w],
        }
    }

    /// Decodes and augments `samples` of `epoch` into one batch, in input order.
    ///
    /// With [`OnError::Fail`] the first undecodable sample (in input order) fails the call;
    /// with [`OnError::Skip`] it is left out and listed in [`Batch::skipped`].
    pub fn process(&self, epoch: u64, samples: &[Sample]) -> Result<Batch> {
        let item = self.item_len();
        let len = item * samples.len();
        let (data, outcomes) = match self.norm.as_ref() {
            None => {
                let mut buf = match self.take_recycled() {
                    Some(BatchData::HwcU8(b)) => b.reuse(len),
                    _ => None,
                }
                .unwrap_or_else(|| self.allocate(len));
                let outcomes = self.run(epoch, samples, &mut buf, item, |chunk| Sink::HwcU8(chunk));
                (BatchData::HwcU8(buf), outcomes)
            }
            Some(norm) => {
                let mut buf = match self.take_recycled() {
                    Some(BatchData::ChwF32(b)) => b.reuse(len),
                    _ => None,
                }
                .unwrap_or_else(|| self.allocate(len));
                let outcomes = self.run(epoch, samples, &mut buf, item, |out| Sink::ChwF32 {
                    out,
                    norm,
                });
                (BatchData::ChwF32(buf), outcomes)
            }
        };
        self.collect(samples, data, outcomes, item)
    }

    /// Hands a consumed batch's buffer back, so a later [`process`](Self::process) fills it
    /// instead of allocating (and page-faulting in) a new one. At most two are kept.
    pub fn recycle(&self, batch: Batch) {
        self.recycle_data(batch.data);
    }

    /// [`recycle`](Self::recycle) for a batch's pixels alone, as a consumer that handed them
    /// on (a tensor over the memory) gives them back once nothing refers to them.
    pub fn recycle_data(&self, data: BatchData) {
        if let Ok(mut kept) = self.recycled.lock()
            && kept.len() < RECYCLED_BUFFERS
        {
            kept.push(data);
        }
    }

    fn allocate<T: Copy + Default>(&self, len: usize) -> AlignedBuf<T> {
        self.counters
            .buffers_allocated
            .fetch_add(1, Ordering::Relaxed);
        AlignedBuf::zeroed(len)
    }

    fn take_recycled(&self) -> Option<BatchData> {
        self.recycled.lock().ok()?.pop()
    }

    fn run<'l, T: Send>(
        &self,
        epoch: u64,
        samples: &[Sample],
        buf: &mut [T],
        item: usize,
        sink: impl for<'a> Fn(&'a mut [T]) -> Sink<'a, 'l> + Sync,
    ) -> Vec<Result<()>> {
        self.pool.install(|| {
            buf.par_chunks_mut(item.max(1))
                .zip(samples.par_iter())
                .map(|(chunk, sample)| self.one(epoch, sample, sink(chunk)))
                .collect()
        })
    }

    /// Decodes and augments one sample into its slot.
    fn one(&self, epoch: u64, sample: &Sample, sink: Sink<'_, '_>) -> Result<()> {
        BUFFERS.with_borrow_mut(|(image, scratch)| {
            let started = Instant::now();
            let mut rng = SampleRng::new(self.config.seed, epoch, sample.index);
            let (plan, source) = self.decode(sample, &mut rng, image)?;
            let decoded = Instant::now();
            resample_from(&source.over(&image.pixels), &plan, sink, scratch);
            let c = &self.counters;
            c.decode_nanos
                .fetch_add(nanos(decoded - started), Ordering::Relaxed);
            c.augment_nanos
                .fetch_add(nanos(decoded.elapsed()), Ordering::Relaxed);
            c.images.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
    }

    /// Draws the sample's plan and decodes what it needs into `image`.
    fn decode(
        &self,
        sample: &Sample,
        rng: &mut SampleRng,
        image: &mut RgbImage,
    ) -> Result<(ResamplePlan, Decoded)> {
        let (key, bytes) = (sample.key.as_str(), &sample.bytes[..]);
        let max_pixels = self.config.max_pixels;
        let augment = &self.config.augment;
        if self.config.jpeg != JpegDecode::Whole
            && ImageFormat::sniff(bytes) == Some(ImageFormat::Jpeg)
            && let Some((width, height)) = jpeg_size(key, bytes, max_pixels)?
        {
            let plan = augment.plan(width, height, rng);
            let scale = match self.config.jpeg {
                JpegDecode::RegionScaled => dct_scale(&plan),
                _ => 8,
            };
            let want = needed(&plan, scale, (width, height));
            let region =
                decode_jpeg_region(key, bytes, (width, height), want, scale, &mut image.pixels)?;
            if let Some(region) = region {
                return Ok((plan, Decoded::region(&plan, scale, region)));
            }
        }
        decode_into(key, bytes, max_pixels, image)?;
        let plan = augment.plan(image.width, image.height, rng);
        Ok((plan, Decoded::whole(&plan, image)))
    }

    /// Turns per-sample outcomes into a batch: fails, or compacts the images that decoded.
    fn collect(
        &self,
        samples: &[Sample],
        mut data: BatchData,
        outcomes: Vec<Result<()>>,
        item: usize,
    ) -> Result<Batch> {
        let mut labels = Vec::with_capacity(samples.len());
        let mut indices = Vec::with_capacity(samples.len());
        let mut skipped = Vec::new();
        for (sample, outcome) in samples.iter().zip(outcomes) {
            match outcome {
                Ok(()) => {
                    let (from, to) = (labels.len() + skipped.len(), labels.len());
                    if from != to {
                        move_item(&mut data, from, to, item);
                    }
                    labels.push(sample.label);
                    indices.push(sample.index);
                }
                Err(e) if self.config.on_error == OnError::Skip => {
                    tracing::warn!(key = %sample.key, error = %e, "skipping undecodable image");
                    self.counters.skipped.fetch_add(1, Ordering::Relaxed);
                    skipped.push(Skipped {
                        key: sample.key.clone(),
                        reason: e.to_string(),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        let n = labels.len();
        match &mut data {
            BatchData::HwcU8(b) => b.truncate(n * item),
            BatchData::ChwF32(b) => b.truncate(n * item),
        }
        Ok(Batch {
            data,
            labels,
            indices,
            shape: self.shape(n),
            skipped,
        })
    }

    /// Batches of `batch_size` samples from `samples`, processed one after another; the short
    /// final batch is kept or dropped as configured.
    pub fn batches<I>(&self, epoch: u64, samples: I) -> Batches<'_, I::IntoIter>
    where
        I: IntoIterator<Item = Sample>,
    {
        Batches {
            pipeline: self,
            epoch,
            samples: samples.into_iter(),
            chunk: Vec::with_capacity(self.config.batch_size),
        }
    }
}

fn move_item(data: &mut BatchData, from: usize, to: usize, item: usize) {
    match data {
        BatchData::HwcU8(b) => b.copy_within(from * item..(from + 1) * item, to * item),
        BatchData::ChwF32(b) => b.copy_within(from * item..(from + 1) * item, to * item),
    }
}

/// Which pixels of the thread's buffer hold what a plan needs, and where its box lies in them.
#[derive(Debug, Clone, Copy)]
struct Decoded {
    width: u32,
    height: u32,
    x: f64,
    y: f64,
    box_width: f64,
    box_height: f64,
}

impl Decoded {
    fn whole(plan: &ResamplePlan, image: &RgbImage) -> Decoded {
        let c = plan.crop;
        Decoded {
            width: image.width,
            height: image.height,
            x: f64::from(c.x),
            y: f64::from(c.y),
            box_width: f64::from(c.width),
            box_height: f64::from(c.height),
        }
    }

    /// `region` of the image scaled by `scale / 8`.
    fn region(plan: &ResamplePlan, scale: u32, region: Region) -> Decoded {
        let s = f64::from(scale) / 8.0;
        let c = plan.crop;
        Decoded {
            width: region.width,
            height: region.height,
            x: f64::from(c.x) * s - f64::from(region.x),
            y: f64::from(c.y) * s - f64::from(region.y),
            box_width: f64::from(c.width) * s,
            box_height: f64::from(c.height) * s,
        }
    }

    fn over<'a>(&self, pixels: &'a [u8]) -> Source<'a> {
        Source {
            pixels,
            width: self.width,
            height: self.height,
            x: self.x,
            y: self.y,
            box_width: self.box_width,
            box_height: self.box_height,
        }
    }
}

/// DCT scale numerators (of 8) that the scaled path uses, smallest first. libjpeg-turbo has
/// SIMD code for the 1/2 and 1/4 reduced IDCTs (1/8 is the DC term alone); its 3/8, 5/8, 6/8
/// and 7/8 IDCTs are plain C and, on 500x375 4:2:0 photos, made the decode slower than at full
/// scale (measured: 8/8 1.01 ms, 7/8 1.35, 6/8 1.14, 5/8 1.12, 4/8 0.93, 3/8 0.98, 2/8 0.88,
/// 1/8 0.86 ms per image), so they are not used.
const DCT_SCALES: [u32; 3] = [1, 2, 4];

/// The smallest of [`DCT_SCALES`] at which the crop box is still at least as large as its
/// resized size on both axes; 8 (full scale) when none is.
fn dct_scale(plan: &ResamplePlan) -> u32 {
    let (rh, rw) = plan.resized;
    let c = plan.crop;
    let fits = |m: u32| {
        u64::from(c.width) * u64::from(m) >= 8 * u64::from(rw)
            && u64::from(c.height) * u64::from(m) >= 8 * u64::from(rh)
    };
    DCT_SCALES.into_iter().find(|m| fits(*m)).unwrap_or(8)
}

/// Pixels decoded beyond what the filter taps reach: libjpeg's fancy upsampling treats the
/// edge of a cropped or skipped region as the edge of the image, so the outermost decoded row
/// and column may differ from a whole decode (without a margin,
/// `region_decode_gives_the_pixels_of_a_whole_decode` fails; with one it passes); two keep a
/// pixel of slack.
const REGION_MARGIN: f64 = 2.0;

/// The region of the image scaled by `scale / 8` (of `size` at full scale) whose pixels the
/// filter taps of `plan` reach, plus [`REGION_MARGIN`].
fn needed(plan: &ResamplePlan, scale: u32, size: (u32, u32)) -> Region {
    let s = f64::from(scale) / 8.0;
    let c = plan.crop;
    let axis = |origin: u32, len: u32, resized: u32, first: u32, count: u32, limit: u32| {
        let (origin, len) = (f64::from(origin) * s, f64::from(len) * s);
        let step = len / f64::from(resized);
        let support = if plan.antialias && step >= 1.0 {
            step
        } else {
            1.0
        };
        let lo = (origin + f64::from(first) * step - support - 1.0).max(origin.floor());
        let hi =
            (origin + f64::from(first + count) * step + support + 1.0).min((origin + len).ceil());
        let limit = scaled(limit, scale);
        // Both ends are clamped to 0 ..= limit, so the casts are exact.
        let lo = (lo - REGION_MARGIN)
            .floor()
            .clamp(0.0, f64::from(limit - 1)) as u32;
        let hi = (hi + REGION_MARGIN)
            .ceil()
            .clamp(f64::from(lo + 1), f64::from(limit)) as u32;
        (lo, hi - lo)
    };
    let (oh, ow) = plan.output;
    let (rh, rw) = plan.resized;
    let (top, left) = plan.window;
    let (x, width) = axis(c.x, c.width, rw, left, ow, size.0);
    let (y, height) = axis(c.y, c.height, rh, top, oh, size.1);
    Region {
        x,
        y,
        width,
        height,
    }
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Iterator of [`ImagePipeline::batches`].
#[derive(Debug)]
pub struct Batches<'p, I> {
    pipeline: &'p ImagePipeline,
    epoch: u64,
    samples: I,
    chunk: Vec<Sample>,
}

impl<I: Iterator<Item = Sample>> Iterator for Batches<'_, I> {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        let size = self.pipeline.config.batch_size;
        self.chunk.clear();
        self.chunk.extend(self.samples.by_ref().take(size));
        let short = self.chunk.len() < size;
        if self.chunk.is_empty() || (short && self.pipeline.config.last_batch == LastBatch::Drop) {
            return None;
        }
        Some(self.pipeline.process(self.epoch, &self.chunk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resample::CropBox;

    fn plan(width: u32, height: u32, output: u32) -> ResamplePlan {
        ResamplePlan {
            crop: CropBox {
                x: 3,
                y: 5,
                width,
                height,
            },
            resized: (output, output),
            window: (0, 0),
            output: (output, output),
            flip: false,
            antialias: false,
        }
    }

    #[test]
    fn dct_scale_keeps_the_box_at_least_the_output_size() {
        assert_eq!(dct_scale(&plan(224, 224, 224)), 8);
        assert_eq!(dct_scale(&plan(447, 900, 224)), 8);
        assert_eq!(dct_scale(&plan(448, 448, 224)), 4);
        assert_eq!(dct_scale(&plan(900, 896, 224)), 2);
        assert_eq!(dct_scale(&plan(1792, 2000, 224)), 1);
        assert_eq!(dct_scale(&plan(10, 10, 224)), 8);
    }

    #[test]
    fn needed_region_covers_the_taps_and_stays_inside() {
        // Full scale: the box plus the margin, clamped to the image.
        let r = needed(&plan(100, 50, 32), 8, (200, 100));
        assert!(r.x <= 3 && r.y <= 5, "{r:?}");
        assert!(r.x + r.width >= 103 && r.y + r.height >= 55, "{r:?}");
        assert!(r.x + r.width <= 200 && r.y + r.height <= 100, "{r:?}");
        // Quarter scale: the box is 25x12.5 pixels at (0.75, 1.25).
        let r = needed(&plan(100, 50, 16), 2, (200, 100));
        assert_eq!((r.x, r.y), (0, 0));
        assert!(r.x + r.width >= 26 && r.y + r.height >= 14, "{r:?}");
        assert!(r.x + r.width <= 50 && r.y + r.height <= 25, "{r:?}");
    }
}
