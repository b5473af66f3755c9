//! `NativeDecoder`: bucketload's decode and augmentation as a batch function, for pipelines
//! that read elsewhere (Ray Data's `map_batches`).

use std::sync::Arc;

use bucketload::decode::{DEFAULT_RATIO, DEFAULT_SCALE, DecodeConfig, TransformSettings};
use bucketload_image::{IMAGENET_MEAN, IMAGENET_STD, ImagePipeline};
use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::errors;
use crate::loader::batch_tuple;
use crate::runtime::ForkSafe;
use bucketload::ErrorKind;

/// The transform of decoded images, read from the `transform=` dict of the Python layer
/// (`bucketload._types.Transform`): `augment` "train" (RandomResizedCrop with `scale` and
/// `ratio`, flip) or "eval" (resize the shorter side to `resize`, centre crop), and the
/// normalisation's `mean` and `std`; `None` is the default of each. Each range and triple is any
/// sequence (a tuple or a list).
#[derive(FromPyObject)]
pub(crate) struct Transform {
    #[pyo3(item)]
    augment: String,
    #[pyo3(item)]
    resize: Option<u32>,
    #[pyo3(item)]
    mean: Option<[f32; 3]>,
    #[pyo3(item)]
    std: Option<[f32; 3]>,
    #[pyo3(item)]
    scale: Option<[f64; 2]>,
    #[pyo3(item)]
    ratio: Option<[f64; 2]>,
}

impl Transform {
    /// The settings given: a keyword at its default (the Python signatures show the defaults)
    /// counts as not given.
    fn settings(&self) -> PyResult<TransformSettings> {
        Ok(TransformSettings {
            augmentation: self.augment.parse().map_err(errors::engine)?,
            resize: self.resize,
            mean: self.mean.filter(|m| *m != IMAGENET_MEAN),
            std: self.std.filter(|s| *s != IMAGENET_STD),
            scale: self
                .scale
                .map(|[lo, hi]| (lo, hi))
                .filter(|s| *s != DEFAULT_SCALE),
            ratio: self
                .ratio
                .map(|[lo, hi]| (lo, hi))
                .filter(|r| *r != DEFAULT_RATIO),
        })
    }
}

/// The decode settings of the Python keywords: `transform` to `image_size`, and `dtype`
/// "float32" (NCHW, normalised) or "uint8" (NHWC); `jpeg_decode` "region", "region-scaled" or
/// "whole".
pub(crate) fn decode_config(
    image_size: u32,
    dtype: &str,
    seed: u64,
    decode_threads: Option<usize>,
    skip_corrupt: bool,
    jpeg_decode: &str,
    transform: Option<&Transform>,
) -> PyResult<DecodeConfig> {
    let dtype = dtype.parse().map_err(errors::engine)?;
    let settings = match transform {
        Some(transform) => transform.settings()?,
        None => TransformSettings::default(),
    };
    let (augmentation, mean, std) = settings.resolve(dtype).map_err(errors::engine)?;
    Ok(DecodeConfig {
        image_size,
        augmentation,
        mean,
        std,
        dtype,
        jpeg: jpeg_decode.parse().map_err(|_| {
            errors::raise(
                ErrorKind::InvalidInput,
                format!("jpeg_decode {jpeg_decode:?} is not 'region', 'region-scaled' or 'whole'"),
            )
        })?,
        threads: decode_threads,
        skip_corrupt,
        seed,
        ..DecodeConfig::default()
    })
}

/// Decodes encoded images (JPEG, PNG) into one augmented batch on native threads.
#[pyclass(module = "bucketload._native")]
pub struct NativeDecoder {
    pipeline: ForkSafe<Arc<ImagePipeline>>,
}

#[pymethods]
impl NativeDecoder {
    #[new]
    #[pyo3(signature = (
        *, image_size=224, seed=0, dtype="float32", decode_threads=None, skip_corrupt=false,
        jpeg_decode="region", transform=None,
    ))]
    fn new(
        image_size: u32,
        seed: u64,
        dtype: &str,
        decode_threads: Option<usize>,
        skip_corrupt: bool,
        jpeg_decode: &str,
        transform: Option<Transform>,
    ) -> PyResult<NativeDecoder> {
        let config = decode_config(
            image_size,
            dtype,
            seed,
            decode_threads,
            skip_corrupt,
            jpeg_decode,
            transform.as_ref(),
        )?;
        let pipeline = config.pipeline().map_err(errors::engine)?;
        Ok(NativeDecoder {
            pipeline: ForkSafe::new(Arc::new(pipeline)),
        })
    }

    /// One batch of `images` (encoded bytes) of `epoch`: `(images, labels, indices, skipped)`
    /// as `NativeEpoch.next_batch` returns it. `indices` (dataset-wide sample numbers) and
    /// the seed fix each image's augmentation; `keys` name samples in errors.
    #[pyo3(signature = (epoch, images, indices, labels, keys=None))]
    fn decode<'py>(
        &self,
        py: Python<'py>,
        epoch: u64,
        images: Vec<Bound<'py, PyBytes>>,
        indices: Vec<u64>,
        labels: Vec<i64>,
        keys: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let pipeline = Arc::clone(self.pipeline.get("decoder")?);
        let n = images.len();
        if indices.len() != n || labels.len() != n || keys.as_ref().is_some_and(|k| k.len() != n) {
            return Err(errors::raise(
                ErrorKind::InvalidInput,
                format!(
                    "{n} images but {} indices, {} labels and {} keys: give one of each per image",
                    indices.len(),
                    labels.len(),
                    keys.as_ref().map_or(n, Vec::len)
                ),
            ));
        }
        let samples: Vec<bucketload_image::Sample> = images
            .iter()
            .enumerate()
            .map(|(i, bytes)| bucketload_image::Sample {
                key: keys
                    .as_ref()
                    .map_or_else(|| format!("sample {}", indices[i]), |k| k[i].clone()),
                index: indices[i],
                label: labels[i],
                bytes: Bytes::copy_from_slice(bytes.as_bytes()),
            })
            .collect();
        let batch = py.detach(|| pipeline.process(epoch, &samples));
        batch_tuple(py, batch.map_err(errors::image)?, Arc::downgrade(&pipeline))
    }
}
