//! `NativeLoader` and `NativeEpoch`: the engine's loader, and its samples decoded into
//! batches, for `bucketload.Loader` and the connector-style datasets.
//!
//! A decoding epoch goes through the engine's decode bridge ([`bucketload::decode`]): a Tokio
//! task drives the loader's [`SampleStream`], a thread turns the samples into batches, and
//! Python takes them, without the GIL while it waits. Dropping the epoch stops both.

use std::sync::Arc;

use bucketload::decode::{DecodedBatches, Decoder, image_sample};
use bucketload::loader::{
    CacheBuilder, Delivery, Format, Loader, LoaderConfig, ManifestUse, Sample, SampleStream,
    StateTracker,
};
use bucketload::panics;
use bucketload::source::{Order, Partition, Remainder, SampleRef, SourceState};
use bucketload_image::{Batch, BatchData};
use futures::StreamExt;
use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

use crate::buffer::Buffer;
use crate::errors;
use crate::runtime::{ForkSafe, runtime};
use crate::store::{ClientOptions, store_config};
use bucketload::ErrorKind;

/// Samples read ahead of the consumer when samples are handed out undecoded.
const SAMPLES_AHEAD: usize = 64;

/// The loader of one rank and worker, with its image pipeline when it decodes.
#[pyclass(module = "bucketload._native")]
pub struct NativeLoader {
    parts: ForkSafe<Parts>,
    batch_size: usize,
    drop_last: bool,
    rt: Arc<Runtime>,
}

/// What a loader holds that must not be dropped in a forked child.
struct Parts {
    loader: Loader,
    decoder: Option<Decoder>,
}

fn parse_format(format: &str) -> PyResult<Format> {
    format.parse().map_err(|_| {
        errors::raise(
            ErrorKind::InvalidInput,
            format!("format {format:?} is not one of 'auto', 'files', 'shards', 'indexed'"),
        )
    })
}

/// The engine's manifest use of the keywords `use_manifest` and `check_manifest`.
pub(crate) fn manifest_use(use_manifest: bool, check_manifest: bool) -> PyResult<ManifestUse> {
    match (use_manifest, check_manifest) {
        (true, false) => Ok(ManifestUse::Trust),
        (true, true) => Ok(ManifestUse::Check),
        (false, false) => Ok(ManifestUse::Ignore),
        (false, true) => Err(errors::raise(
            ErrorKind::InvalidInput,
            "check_manifest=True checks the manifest that use_manifest=False ignores: give one \
             of them"
                .to_owned(),
        )),
    }
}

#[pymethods]
impl NativeLoader {
    #[new]
    #[pyo3(signature = (
        uri, *, format="auto", batch_size=64, image_size=224, decode=true, dtype="float32",
        shuffle=true, seed=0, shuffle_buffer=None, cache_dir=None, cache_size=bucketload_cache::DEFAULT_CAPACITY,
        concurrency=None, decode_threads=None, rank=0, world_size=1, worker=0, num_workers=1,
        drop_last=false, skip_corrupt=false, endpoint=None, region=None, jpeg_decode="region",
        client=None, transform=None, use_manifest=true, check_manifest=false,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        uri: &str,
        format: &str,
        batch_size: usize,
        image_size: u32,
        decode: bool,
        dtype: &str,
        shuffle: bool,
        seed: u64,
        shuffle_buffer: Option<u64>,
        cache_dir: Option<std::path::PathBuf>,
        cache_size: u64,
        concurrency: Option<usize>,
        decode_threads: Option<usize>,
        rank: u32,
        world_size: u32,
        worker: u32,
        num_workers: u32,
        drop_last: bool,
        skip_corrupt: bool,
        endpoint: Option<String>,
        region: Option<String>,
        jpeg_decode: &str,
        client: Option<ClientOptions>,
        transform: Option<crate::decoder::Transform>,
        use_manifest: bool,
        check_manifest: bool,
    ) -> PyResult<NativeLoader> {
        if batch_size == 0 {
            return Err(errors::raise(
                ErrorKind::InvalidInput,
                "batch_size must be at least 1".to_owned(),
            ));
        }
        let mut order = match shuffle {
            true => Order::shuffled(seed),
            false => Order::sequential(),
        };
        if let Some(samples) = shuffle_buffer {
            order = order.with_shuffle_buffer(samples);
        }
        let remainder = match drop_last {
            true => Remainder::Drop,
            false => Remainder::Pad,
        };
        let mut store = store_config(endpoint, region);
        if let Some(client) = client {
            store = client.apply(store);
        }
        let mut builder = LoaderConfig::builder(uri)
            .with_format(parse_format(format)?)
            .with_order(order)
            .with_partition(Partition::new(rank, world_size).with_remainder(remainder))
            .with_worker(worker, num_workers)
            .with_manifest(manifest_use(use_manifest, check_manifest)?)
            // Batches are checkpointed by count: samples must arrive in the worker's order.
            .with_delivery(Delivery::Strict);
        if let Some(n) = concurrency {
            store = store.with_concurrency(n);
            builder = builder.with_concurrency(n);
        }
        builder = builder.with_store_config(store);
        if let Some(dir) = cache_dir {
            let cache = CacheBuilder::new(&dir, cache_size).build().map_err(|e| {
                errors::raise(
                    ErrorKind::InvalidInput,
                    format!("cannot open the cache at {}: {e}", dir.display()),
                )
            })?;
            builder = builder.with_cache(Arc::new(cache));
        }
        let config = builder.build().map_err(errors::engine)?;
        let decoder = match decode {
            false => None,
            true => {
                let config = crate::decoder::decode_config(
                    image_size,
                    dtype,
                    seed,
                    decode_threads,
                    skip_corrupt,
                    jpeg_decode,
                    transform.as_ref(),
                )?;
                let config = bucketload::decode::DecodeConfig {
                    batch_size,
                    drop_last,
                    ..config
                };
                Some(Decoder::new(&config).map_err(errors::engine)?)
            }
        };
        let rt = runtime()?;
        let opened = py.detach(|| rt.block_on(Loader::open(config)));
        Ok(NativeLoader {
            parts: ForkSafe::new(Parts {
                loader: opened.map_err(errors::engine)?,
                decoder,
            }),
            batch_size,
            drop_last,
            rt,
        })
    }

    /// Samples this worker reads per epoch.
    fn samples_per_epoch(&self) -> PyResult<u64> {
        let parts = self.parts.get("loader")?;
        parts.loader.samples_per_epoch().map_err(errors::engine)
    }

    /// Batches this worker yields per epoch (the last one short unless `drop_last`).
    fn batches_per_epoch(&self) -> PyResult<u64> {
        let n = self.samples_per_epoch()?;
        let b = self.batch_size as u64;
        Ok(match self.drop_last {
            true => n / b,
            false => n.div_ceil(b),
        })
    }

    /// Samples in the dataset.
    fn dataset_samples(&self) -> PyResult<u64> {
        Ok(self.parts.get("loader")?.loader.source().plan().samples())
    }

    /// Starts epoch `epoch`, or continues the one a state (JSON from
    /// [`NativeEpoch::state`]) was taken in.
    #[pyo3(signature = (epoch, state=None))]
    fn epoch(&self, epoch: u64, state: Option<&str>) -> PyResult<NativeEpoch> {
        let parts = self.parts.get("loader")?;
        let _guard = self.rt.enter();
        let stream = match state {
            None => parts.loader.epoch(epoch),
            Some(json) => {
                let state: SourceState = serde_json::from_str(json).map_err(|e| {
                    errors::raise(ErrorKind::InvalidInput, format!("not a loader state: {e}"))
                })?;
                parts.loader.resume(&state)
            }
        }
        .map_err(errors::engine)?;
        let epoch = stream.epoch();
        let tracker = stream.tracker();
        let planned = stream.remaining();
        let dataset = parts.loader.store().uri().to_string();
        let (flow, expected) = match &parts.decoder {
            Some(decoder) => {
                // A short last batch is left out with drop_last: its samples are not handed out.
                let expected = match self.drop_last {
                    true => planned - planned % self.batch_size as u64,
                    false => planned,
                };
                let batches = decoder.batches(self.rt.handle(), stream, epoch);
                (Flow::Batches(batches), expected)
            }
            None => (feed_samples(&self.rt, stream), planned),
        };
        Ok(NativeEpoch {
            flow: ForkSafe::new(flow),
            tracker,
            consumed: 0,
            expected,
            dataset,
            epoch,
            pending: None,
        })
    }
}

enum Flow {
    Batches(DecodedBatches),
    Samples {
        rx: tokio::sync::mpsc::Receiver<bucketload::Result<Sample>>,
        feeder: JoinHandle<()>,
    },
    Done,
}

/// The epoch's samples, undecoded, sent to a channel by a task; a panic in the task is sent as
/// its error, never a channel that closes early.
fn feed_samples(rt: &Runtime, stream: SampleStream) -> Flow {
    let (tx, rx) = tokio::sync::mpsc::channel(SAMPLES_AHEAD);
    let report = tx.clone();
    let feeder = rt.spawn(async move {
        let feed = async move {
            let mut stream = stream;
            while let Some(item) = stream.next().await {
                let stop = item.is_err();
                if tx.send(item).await.is_err() || stop {
                    break;
                }
            }
            Ok(())
        };
        if let Err(e) = panics::catch("the sample feeder", feed).await {
            let _ = report.send(Err(e)).await;
        }
    });
    Flow::Samples { rx, feeder }
}

/// One epoch of one worker: batches (or samples) in order, and the state to resume from.
#[pyclass(module = "bucketload._native")]
pub struct NativeEpoch {
    flow: ForkSafe<Flow>,
    tracker: StateTracker,
    consumed: u64,
    /// Samples the epoch hands out (decoded or skipped) before its end.
    expected: u64,
    /// The dataset's URI, for errors.
    dataset: String,
    epoch: u64,
    /// An error that follows samples already handed out.
    pending: Option<bucketload::Error>,
}

impl Drop for Flow {
    fn drop(&mut self) {
        match self {
            Flow::Samples { feeder, .. } => feeder.abort(),
            Flow::Batches(_) | Flow::Done => {}
        }
    }
}

pub(crate) fn batch_tuple<'py>(py: Python<'py>, batch: Batch) -> PyResult<Bound<'py, PyTuple>> {
    let shape = batch.shape;
    let count: usize = shape.iter().product();
    let images = match batch.data {
        BatchData::ChwF32(mut data) => {
            data.truncate(count);
            Buffer::f32(data, &shape)
        }
        BatchData::HwcU8(mut data) => {
            data.truncate(count);
            Buffer::u8(data, &shape)
        }
        _ => {
            return Err(errors::raise(
                ErrorKind::Other,
                "unknown batch layout".to_owned(),
            ));
        }
    };
    let labels = Buffer::i64(batch.labels);
    let indices = Buffer::i64(batch.indices.iter().map(|i| *i as i64).collect());
    let skipped: Vec<(String, String)> = batch
        .skipped
        .into_iter()
        .map(|s| (s.key, s.reason))
        .collect();
    (images, labels, indices, skipped).into_pyobject(py)
}

impl NativeEpoch {
    /// Up to `n` samples, at least one unless the epoch ended; an error that follows samples
    /// is raised on the next call.
    fn take_samples(&mut self, py: Python<'_>, n: usize) -> PyResult<Vec<Sample>> {
        if let Some(e) = self.pending.take() {
            return Err(errors::engine(e));
        }
        let Flow::Samples { rx, .. } = self.flow.get_mut("epoch")? else {
            return Ok(Vec::new());
        };
        let mut taken = Vec::with_capacity(n);
        let mut failure = None;
        let mut ended = false;
        py.detach(|| {
            while taken.len() < n.max(1) {
                let next = match taken.is_empty() {
                    true => rx.blocking_recv(),
                    // After the first sample, only what is already there.
                    false => match rx.try_recv() {
                        Ok(item) => Some(item),
                        Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                        Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => None,
                    },
                };
                match next {
                    Some(Ok(sample)) => taken.push(sample),
                    Some(Err(e)) => {
                        failure = Some(e);
                        break;
                    }
                    None => {
                        ended = true;
                        break;
                    }
                }
            }
        });
        self.consumed += taken.len() as u64;
        if failure.is_some() || ended {
            *self.flow.get_mut("epoch")? = Flow::Done;
        }
        if let Some(e) = failure.or_else(|| ended.then(|| self.shortfall()).flatten()) {
            if taken.is_empty() {
                return Err(errors::engine(e));
            }
            // The samples before the error first; the error on the next call.
            self.pending = Some(e);
        }
        Ok(taken)
    }

    /// The error of an epoch that ended before handing out every sample it planned (the
    /// engine raises its own first; this holds every part of the way to Python to the same).
    fn shortfall(&self) -> Option<bucketload::Error> {
        (self.consumed < self.expected).then(|| bucketload::Error::Incomplete {
            dataset: self.dataset.clone(),
            delivered: self.consumed,
            planned: self.expected,
        })
    }
}

#[pymethods]
impl NativeEpoch {
    /// The epoch.
    #[getter]
    fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The next batch as `(images, labels, indices, skipped)`: images and labels are
    /// [`Buffer`]s (float32 NCHW or uint8 NHWC; int64), indices the samples' dataset indices,
    /// skipped the `(key, reason)` of images left out. Raises `StopIteration` at the end.
    fn next_batch<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let Flow::Batches(batches) = self.flow.get("epoch")? else {
            return Err(PyStopIteration::new_err(()));
        };
        let got = py.detach(|| batches.next_blocking());
        match got {
            Some(Ok(batch)) => {
                self.consumed += (batch.len() + batch.skipped.len()) as u64;
                batch_tuple(py, batch)
            }
            Some(Err(e)) => {
                *self.flow.get_mut("epoch")? = Flow::Done;
                Err(errors::engine(e))
            }
            None => {
                *self.flow.get_mut("epoch")? = Flow::Done;
                match self.shortfall() {
                    Some(e) => Err(errors::engine(e)),
                    None => Err(PyStopIteration::new_err(())),
                }
            }
        }
    }

    /// Up to `n` undecoded samples as `(key, label, [(extension, bytes)], index, is_object)`
    /// (`is_object`: one object per sample, `key` its key); an empty list at the end.
    fn next_samples<'py>(&mut self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for sample in self.take_samples(py, n)? {
            let members = PyList::empty(py);
            for (ext, bytes) in &sample.members {
                members.append((ext.as_str(), PyBytes::new(py, bytes)))?;
            }
            let index = sample.dataset_index();
            let is_object = matches!(sample.source, SampleRef::File { .. });
            out.append((sample.key, sample.label, members, index, is_object))?;
        }
        Ok(out)
    }

    /// Up to `n` undecoded samples as `(key, label, image, index)`: each sample's image member
    /// as the decoder picks it (a sample without one raises); an empty list at the end.
    fn next_images<'py>(&mut self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for sample in self.take_samples(py, n)? {
            let image = image_sample(&sample).map_err(errors::engine)?;
            out.append((
                image.key,
                sample.label,
                PyBytes::new(py, &image.bytes),
                image.index,
            ))?;
        }
        Ok(out)
    }

    /// The state after what was handed out so far (JSON): resumes with neither replay nor
    /// skip.
    fn state(&self) -> PyResult<String> {
        let state = self.tracker.state(self.consumed).map_err(errors::engine)?;
        serde_json::to_string(&state)
            .map_err(|e| errors::raise(ErrorKind::Other, format!("cannot encode the state: {e}")))
    }

    /// Samples handed out so far (decoded or skipped).
    #[getter]
    fn consumed(&self) -> u64 {
        self.consumed
    }
}
