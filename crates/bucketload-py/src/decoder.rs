//! `NativeDecoder`: bucketload's decode and augmentation as a batch function, for pipelines
//! that read elsewhere (Ray Data's `map_batches`).

use std::sync::Arc;

use bucketload_image::{
    Augment, Geometry, ImagePipeline, ImagePipelineBuilder, JpegDecode, OnError, OutputFormat,
};
use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::errors;
use crate::loader::batch_tuple;
use crate::runtime::ForkSafe;
use bucketload::ErrorKind;

/// The `jpeg_decode=` keyword: how JPEGs are decoded (see `JpegDecode`).
pub(crate) fn jpeg_decode_mode(name: &str) -> PyResult<JpegDecode> {
    match name {
        "region" => Ok(JpegDecode::Region),
        "region-scaled" => Ok(JpegDecode::RegionScaled),
        "whole" => Ok(JpegDecode::Whole),
        other => Err(errors::raise(
            ErrorKind::InvalidInput,
            format!("jpeg_decode {other:?} is not 'region', 'region-scaled' or 'whole'"),
        )),
    }
}

/// The loader's and the decoder's image pipeline: RandomResizedCrop to `image_size`, flip,
/// and `dtype` "float32" (NCHW, ImageNet-normalised) or "uint8" (NHWC).
pub(crate) fn pipeline_builder(
    image_size: u32,
    dtype: &str,
    seed: u64,
    decode_threads: Option<usize>,
    skip_corrupt: bool,
    jpeg_decode: &str,
) -> PyResult<ImagePipelineBuilder> {
    let output = match dtype {
        "float32" => OutputFormat::imagenet(),
        "uint8" => OutputFormat::HwcU8,
        other => {
            return Err(errors::raise(
                ErrorKind::InvalidInput,
                format!("dtype {other:?} is not 'float32' (NCHW, normalised) or 'uint8' (NHWC)"),
            ));
        }
    };
    let mut builder = ImagePipeline::builder()
        .with_augment(Augment {
            geometry: Geometry::random_resized_crop(image_size),
            flip: 0.5,
            antialias: false,
        })
        .with_output(output)
        .with_seed(seed)
        .with_on_error(match skip_corrupt {
            true => OnError::Skip,
            false => OnError::Fail,
        })
        .with_jpeg_decode(jpeg_decode_mode(jpeg_decode)?);
    if let Some(n) = decode_threads {
        builder = builder.with_threads(n);
    }
    Ok(builder)
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
        let pipeline = pipeline_builder(
            image_size,
            dtype,
            seed,
            decode_threads,
            skip_corrupt,
            jpeg_decode,
        )?
        .build()
        .map_err(errors::image)?;
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
