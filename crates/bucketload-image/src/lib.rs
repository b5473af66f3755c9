//! Native image pipeline of bucketload: decode, augment, normalise and batch, on rayon.
//!
//! Reach for [`ImagePipeline`]: build it once (augmentation, output layout, threads, pixel
//! limit, error policy, batch size, seed), then hand it [`Sample`]s and get [`Batch`]es — one
//! contiguous 64-byte aligned buffer (`u8` HWC or normalised `f32` CHW) plus labels. The
//! workshop's reference pipeline (PIL decode, torchvision v2 `RandomResizedCrop(224,
//! antialias=False)`, `ToDtype(float32, scale=True)`, `Normalize(ImageNet)`) is the default.
//!
//! Parts: [`mod@decode`] (JPEG through libjpeg-turbo, whole or only the crop box, PNG through png), [`transform`] (torchvision's
//! parameter sampling), [`mod@resample`] (the fused crop/resize/flip/normalise/layout kernel),
//! [`batch`] (aligned buffers), [`SampleRng`] (randomness from `(seed, epoch, index)`, so a run
//! is reproducible whatever the thread scheduling). docs/IMAGE.md has the details.
//!
//! ```
//! use bucketload_image::{ImagePipeline, OnError, Sample};
//!
//! let pipeline = ImagePipeline::builder()
//!     .with_threads(2)
//!     .with_on_error(OnError::Skip)
//!     .build()?;
//! let samples = vec![Sample {
//!     key: "train/broken.jpg".into(),
//!     index: 0,
//!     label: 3,
//!     bytes: bytes::Bytes::from_static(b"not an image"),
//! }];
//! let batch = pipeline.process(0, &samples)?;
//! assert_eq!(batch.len(), 0);
//! assert_eq!(batch.skipped[0].key, "train/broken.jpg");
//! assert_eq!(pipeline.stats().skipped, 1);
//! # Ok::<(), bucketload_image::Error>(())
//! ```

pub mod batch;
pub mod decode;
mod error;
mod hugepages;
mod pipeline;
pub mod resample;
mod rng;
#[cfg(target_arch = "x86_64")]
mod simd;
pub mod transform;
mod turbo;

pub use batch::{AlignedBuf, BATCH_ALIGN, Batch, BatchData, Skipped};
pub use decode::{DEFAULT_MAX_PIXELS, ImageFormat, RgbImage, decode, decode_into};
pub use error::{Error, Result};
pub use pipeline::{
    Batches, ImagePipeline, ImagePipelineBuilder, JpegDecode, LastBatch, OnError, OutputFormat,
    PipelineStats, Sample,
};
pub use rng::SampleRng;
pub use transform::{Augment, Geometry, IMAGENET_MEAN, IMAGENET_STD};
