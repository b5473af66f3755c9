//! `NativeDecoder`: bucketload's decode and augmentation as a batch function, for pipelines
//! that read elsewhere (Ray Data's `map_batches`).

use std::sync::Arc;

use bucketload::decode::DecodeConfig;
use bucketload_image::ImagePipeline;
use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::errors;
use crate::loader::batch_tuple;
use crate::runtime::ForkSafe;
use bucketload::ErrorKind;

/// The decode settings of the Python keywords: RandomResizedCrop to `image_size`, flip, and
/// `dtype` "float32" (NCHW, ImageNet-normalised) or "uint8" (NHWC); `jpeg_decode` "region",
/// "region-scaled" or "whole".
pub(crate) fn decode_config(
    image_size: u32,
    dtype: &str,
    seed: u64,
    decode_threads: Option<usize>,
    skip_corrupt: bool,
    jpeg_decode: &str,
) -> PyResult<DecodeConfig> {
    Ok(DecodeConfig {
        image_size,
        dtype: dtype.parse().map_err(errors::engine)?,
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
        jpeg_decode="region",
    ))]
    fn new(
        image_size: u32,
        seed: u64,
        dtype: &str,
        decode_threads: Option<usize>,
        skip_corrupt: bool,
        jpeg_decode: &str,
    ) -> PyResult<NativeDecoder> {
        let config = decode_config(
            image_size,
            dtype,
            seed,
            decode_threads,
            skip_corrupt,
            jpeg_decode,
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
        batch_tuple(py, batch.map_err(errors::image)?)
    }
}
