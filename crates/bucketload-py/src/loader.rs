//! `NativeLoader` and `NativeEpoch`: the engine's loader, and its samples decoded into
//! batches, for `bucketload.Loader` and the connector-style datasets.
//!
//! A decoding epoch goes through the engine's decode bridge ([`bucketload::decode`]): a Tokio
//! task drives the loader's [`SampleStream`], a thread turns the samples into batches, and
//! Python takes them, without the GIL while it waits. Dropping the epoch stops both.

use std::sync::{Arc, Weak};
use std::time::Duration;

use bucketload::decode::{DecodedBatches, Decoder, image_sample};
use bucketload::loader::{
    CacheBuilder, Delivery, Format, Loader, LoaderConfig, ManifestUse, MixState, MixTracker,
    Mixture, Sample, StateTracker,
};
use bucketload::panics;
use bucketload::source::{Order, Partition, Remainder, SampleRef};
use bucketload_image::{Batch, BatchData, ImagePipeline};
use futures::{Stream, StreamExt};
use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
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
    loader: Reader,
    decoder: Option<Decoder>,
    members: Option<Arc<MemberDecode>>,
}

/// The members of raw samples decoded natively, batch by batch (`decode_members`).
struct MemberDecode {
    /// The members' extensions, as named in samples.
    exts: Vec<String>,
    pipeline: Arc<ImagePipeline>,
}

impl MemberDecode {
    /// Member `ext` of every sample, decoded and augmented as the image mode would (the
    /// samples' indices and `epoch` fix each augmentation), without the GIL.
    fn decode(&self, py: Python<'_>, epoch: u64, ext: &str, samples: &[Sample]) -> PyResult<Batch> {
        let images = samples
            .iter()
            .map(|s| {
                let bytes = s.get(ext).ok_or_else(|| {
                    errors::raise(
                        ErrorKind::InvalidInput,
                        format!(
                            "sample {} has no {ext:?} member to decode: name members every \
                             sample has in decode_members",
                            s.key
                        ),
                    )
                })?;
                Ok(bucketload_image::Sample {
                    key: s.key.clone(),
                    index: s.dataset_index(),
                    label: s.label.map_or(-1, i64::from),
                    bytes: bytes.clone(),
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        py.detach(|| self.pipeline.process(epoch, &images))
            .map_err(errors::image)
    }
}

/// One dataset, or a weighted mixture of several.
enum Reader {
    One(Loader),
    Mix(Mixture),
}

impl Reader {
    fn samples_per_epoch(&self) -> bucketload::Result<u64> {
        match self {
            Reader::One(loader) => loader.samples_per_epoch(),
            Reader::Mix(mix) => Ok(mix.worker_samples_per_epoch()),
        }
    }

    /// The dataset's samples; a mixture's epoch over all ranks.
    fn dataset_samples(&self) -> u64 {
        match self {
            Reader::One(loader) => loader.source().plan().samples(),
            Reader::Mix(mix) => mix.samples_per_epoch(),
        }
    }

    /// The dataset's URI; a mixture's joined by ` + `.
    fn name(&self) -> String {
        let uri = |l: &Loader| l.store().uri().to_string();
        match self {
            Reader::One(loader) => uri(loader),
            Reader::Mix(mix) => mix
                .loaders()
                .iter()
                .map(uri)
                .collect::<Vec<_>>()
                .join(" + "),
        }
    }
}

/// A dataset URI, or a list of them to mix.
#[derive(FromPyObject)]
enum Uris {
    One(String),
    Many(Vec<String>),
}

/// Where an epoch stands after a number of its samples were handed out.
enum Tracker {
    One(StateTracker),
    Mix(MixTracker),
}

impl Tracker {
    /// The state (JSON) after `consumed` samples.
    fn state(&self, consumed: u64) -> bucketload::Result<String> {
        let json = match self {
            Tracker::One(t) => serde_json::to_string(&t.state(consumed)?),
            Tracker::Mix(t) => serde_json::to_string(&t.state(consumed)?),
        };
        json.map_err(|e| bucketload::Error::invalid_input(format!("cannot encode the state: {e}")))
    }
}

fn parse_state<T: serde::de::DeserializeOwned>(json: &str) -> PyResult<T> {
    serde_json::from_str(json)
        .map_err(|e| errors::raise(ErrorKind::InvalidInput, format!("not a loader state: {e}")))
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
        uri, *, weights=None, samples_per_epoch=None, format="auto", batch_size=64, image_size=224, decode=true, dtype="float32",
        shuffle=true, seed=0, shuffle_buffer=None, cache_dir=None, cache_size=bucketload_cache::DEFAULT_CAPACITY,
        concurrency=None, decode_threads=None, rank=0, world_size=1, worker=0, num_workers=1,
        drop_last=false, pad=true, skip_corrupt=false, endpoint=None, region=None,
        jpeg_decode="region", client=None, transform=None, use_manifest=true,
        check_manifest=false, decode_members=Vec::new(), metadata_ttl=0.0, allow_incomplete=false,
        index_cache=bucketload::loader::DEFAULT_INDEX_CACHE,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        uri: Uris,
        weights: Option<Vec<f64>>,
        samples_per_epoch: Option<u64>,
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
        pad: bool,
        skip_corrupt: bool,
        endpoint: Option<String>,
        region: Option<String>,
        jpeg_decode: &str,
        client: Option<ClientOptions>,
        transform: Option<crate::decoder::Transform>,
        use_manifest: bool,
        check_manifest: bool,
        decode_members: Vec<String>,
        metadata_ttl: f64,
        allow_incomplete: bool,
        index_cache: u64,
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
        let remainder = match (drop_last, pad) {
            (true, true) => Remainder::Drop,
            (false, true) => Remainder::Pad,
            (false, false) => Remainder::Exact,
            (true, false) => {
                return Err(errors::raise(
                    ErrorKind::InvalidInput,
                    "pad=False reads every sample exactly once and drop_last=True leaves some \
                     out; pass one of them"
                        .to_owned(),
                ));
            }
        };
        let mut store = store_config(endpoint, region);
        if let Some(client) = client {
            store = client.apply(store);
        }
        let manifest = manifest_use(use_manifest, check_manifest)?;
        let metadata_ttl = match metadata_ttl {
            s if s == f64::INFINITY => Duration::MAX,
            s => Duration::try_from_secs_f64(s).map_err(|_| {
                errors::raise(
                    ErrorKind::InvalidInput,
                    format!("metadata_ttl={s} is not a number of seconds ≥ 0 or \"indefinite\""),
                )
            })?,
        };
        if let Some(n) = concurrency {
            store = store.with_concurrency(n);
        }
        let cache = match cache_dir {
            None => None,
            Some(dir) => Some(Arc::new(
                CacheBuilder::new(&dir, cache_size).build().map_err(|e| {
                    errors::raise(
                        ErrorKind::InvalidInput,
                        format!("cannot open the cache at {}: {e}", dir.display()),
                    )
                })?,
            )),
        };
        let config = |uri: &str| -> PyResult<LoaderConfig> {
            let mut builder = LoaderConfig::builder(uri)
                .with_store_config(store.clone())
                .with_format(parse_format(format)?)
                .with_order(order)
                .with_partition(Partition::new(rank, world_size).with_remainder(remainder))
                .with_worker(worker, num_workers)
                .with_manifest(manifest)
                .with_allow_incomplete(allow_incomplete)
                .with_metadata_ttl(metadata_ttl)
                .with_index_cache(index_cache)
                // Batches are checkpointed by count: samples must arrive in the worker's order.
                .with_delivery(Delivery::Strict);
            if let Some(n) = concurrency {
                builder = builder.with_concurrency(n);
            }
            if let Some(cache) = &cache {
                builder = builder.with_cache(Arc::clone(cache));
            }
            builder.build().map_err(errors::engine)
        };
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
        let members = match (decode, decode_members.is_empty()) {
            (_, true) => None,
            (true, false) => {
                return Err(errors::raise(
                    ErrorKind::InvalidInput,
                    "decode_members= decodes members of raw samples: pass decode=False".to_owned(),
                ));
            }
            (false, false) => {
                let config = crate::decoder::decode_config(
                    image_size,
                    dtype,
                    seed,
                    decode_threads,
                    false,
                    jpeg_decode,
                    transform.as_ref(),
                )?;
                Some(Arc::new(MemberDecode {
                    exts: decode_members,
                    pipeline: Arc::new(config.pipeline().map_err(errors::engine)?),
                }))
            }
        };
        let rt = runtime()?;
        let opened = match (uri, weights, samples_per_epoch) {
            (Uris::One(uri), None, None) => {
                let config = config(&uri)?;
                py.detach(|| rt.block_on(Loader::open(config)).map(Reader::One))
            }
            (uris, weights, samples) => {
                let uris = match uris {
                    Uris::One(uri) => vec![uri],
                    Uris::Many(uris) => uris,
                };
                let configs = uris
                    .iter()
                    .map(|u| config(u))
                    .collect::<PyResult<Vec<_>>>()?;
                let weights = weights.unwrap_or_else(|| vec![1.0; uris.len()]);
                let open = Mixture::open(configs, &weights, samples);
                py.detach(|| rt.block_on(open).map(Reader::Mix))
            }
        };
        Ok(NativeLoader {
            parts: ForkSafe::new(Parts {
                loader: opened.map_err(errors::engine)?,
                decoder,
                members,
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

    /// The image pipeline's counters since the loader was built, `None` when it does not
    /// decode: `images`, `skipped`, `decode_s` and `augment_s` (thread time) and
    /// `buffers_allocated` (batch buffers made new because none had come back for reuse).
    fn decode_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let parts = self.parts.get("loader")?;
        let Some(decoder) = &parts.decoder else {
            return Ok(None);
        };
        let s = decoder.pipeline().stats();
        let dict = PyDict::new(py);
        dict.set_item("images", s.images)?;
        dict.set_item("skipped", s.skipped)?;
        dict.set_item("decode_s", s.decode_nanos as f64 / 1e9)?;
        dict.set_item("augment_s", s.augment_nanos as f64 / 1e9)?;
        dict.set_item("buffers_allocated", s.buffers_allocated)?;
        Ok(Some(dict))
    }

    /// Samples in the dataset.
    fn dataset_samples(&self) -> PyResult<u64> {
        Ok(self.parts.get("loader")?.loader.dataset_samples())
    }

    /// Checks that a state (JSON from [`NativeEpoch::state`]) continues this loader's dataset
    /// as it is built (its plan, order, rank and workers), without reading: raises
    /// `ConfigError` naming what differs. A mixture's state is checked when it resumes.
    fn check_state(&self, state: &str) -> PyResult<()> {
        let parts = self.parts.get("loader")?;
        match &parts.loader {
            Reader::One(loader) => {
                let state = parse_state(state)?;
                let (_, workers) = loader.config().worker();
                let checked = loader.source().resume(&state, workers);
                checked.map(drop).map_err(errors::engine)
            }
            Reader::Mix(_) => parse_state::<MixState>(state).map(drop),
        }
    }

    /// Starts epoch `epoch`, or continues the one a state (JSON from
    /// [`NativeEpoch::state`]) was taken in.
    #[pyo3(signature = (epoch, state=None))]
    fn epoch(&self, epoch: u64, state: Option<&str>) -> PyResult<NativeEpoch> {
        let parts = self.parts.get("loader")?;
        let _guard = self.rt.enter();
        let dataset = parts.loader.name();
        match &parts.loader {
            Reader::One(loader) => {
                let stream = match state {
                    None => loader.epoch(epoch),
                    Some(json) => loader.resume(&parse_state(json)?),
                }
                .map_err(errors::engine)?;
                let (epoch, planned) = (stream.epoch(), stream.remaining());
                let tracker = Tracker::One(stream.tracker());
                self.start(parts, stream, (epoch, planned), tracker, dataset)
            }
            Reader::Mix(mix) => {
                let stream = match state {
                    None => mix.epoch(epoch),
                    Some(json) => mix.resume(&parse_state::<MixState>(json)?),
                }
                .map_err(errors::engine)?;
                let (epoch, planned) = (stream.epoch(), stream.remaining());
                let tracker = Tracker::Mix(stream.tracker());
                self.start(parts, stream, (epoch, planned), tracker, dataset)
            }
        }
    }
}

impl NativeLoader {
    /// The epoch of `stream`, decoded or not; `at` is its epoch and the samples it plans.
    fn start<S>(
        &self,
        parts: &Parts,
        stream: S,
        at: (u64, u64),
        tracker: Tracker,
        dataset: String,
    ) -> PyResult<NativeEpoch>
    where
        S: Stream<Item = bucketload::Result<Sample>> + Send + Unpin + 'static,
    {
        let (epoch, planned) = at;
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
            members: ForkSafe::new(parts.members.clone()),
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
fn feed_samples<S>(rt: &Runtime, stream: S) -> Flow
where
    S: Stream<Item = bucketload::Result<Sample>> + Send + Unpin + 'static,
{
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
    /// The members decoded natively in raw samples.
    members: ForkSafe<Option<Arc<MemberDecode>>>,
    tracker: Tracker,
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

/// A batch's images: float32 NCHW or uint8 NHWC.
fn batch_images(data: BatchData, shape: &[usize]) -> PyResult<Buffer> {
    let count: usize = shape.iter().product();
    Ok(match data {
        BatchData::ChwF32(mut data) => {
            data.truncate(count);
            Buffer::f32(data, shape)
        }
        BatchData::HwcU8(mut data) => {
            data.truncate(count);
            Buffer::u8(data, shape)
        }
        _ => {
            return Err(errors::raise(
                ErrorKind::Other,
                "unknown batch layout".to_owned(),
            ));
        }
    })
}

/// A batch as Python receives it; its pixels go back to `pipeline` when Python frees them.
pub(crate) fn batch_tuple<'py>(
    py: Python<'py>,
    batch: Batch,
    pipeline: Weak<ImagePipeline>,
) -> PyResult<Bound<'py, PyTuple>> {
    let images = batch_images(batch.data, &batch.shape)?.returning_to(pipeline);
    let labels = Buffer::i64(batch.labels);
    let indices = Buffer::i64(batch.indices.iter().map(|i| *i as i64).collect());
    let skipped: Vec<(String, String)> = batch
        .skipped
        .into_iter()
        .map(|s| (s.key, s.reason))
        .collect();
    (images, labels, indices, skipped).into_pyobject(py)
}

/// A sample as a dict in WebDataset's convention (see [`NativeEpoch::next_sample_batch`]).
fn sample_dict(py: Python<'_>, sample: Sample) -> PyResult<Bound<'_, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("__key__", sample.key.as_str())?;
    dict.set_item("__index__", sample.dataset_index())?;
    dict.set_item("__label__", sample.label)?;
    for (ext, bytes) in sample.members {
        dict.set_item(ext, Buffer::bytes(bytes))?;
    }
    Ok(dict)
}

impl NativeEpoch {
    /// Up to `n` samples, at least one unless the epoch ended: with `fill`, exactly `n` unless
    /// the epoch ends first, else only those already there after the first. An error that
    /// follows samples is raised on the next call.
    fn take_samples(&mut self, py: Python<'_>, n: usize, fill: bool) -> PyResult<Vec<Sample>> {
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
                let next = match taken.is_empty() || fill {
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
                batch_tuple(py, batch, batches.pipeline())
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
        for sample in self.take_samples(py, n, false)? {
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
        for sample in self.take_samples(py, n, false)? {
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

    /// The next `n` undecoded samples (fewer only at the end of the epoch; an empty list
    /// there), each a dict in WebDataset's convention: `__key__`, `__index__` (as
    /// `next_batch`'s indices), `__label__` (`None` without labels) and one entry per member
    /// by extension, a read-only [`Buffer`] over the bytes the loader read (no copy). Also
    /// the members of `decode_members` decoded, by extension: one images [`Buffer`] each.
    fn next_sample_batch<'py>(
        &mut self,
        py: Python<'py>,
        n: usize,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>)> {
        let samples = self.take_samples(py, n, true)?;
        let decoded = PyDict::new(py);
        if let Some(members) = self
            .members
            .get("epoch")?
            .as_ref()
            .filter(|_| !samples.is_empty())
        {
            for ext in &members.exts {
                let batch = members.decode(py, self.epoch, ext, &samples)?;
                let images = batch_images(batch.data, &batch.shape)?;
                decoded.set_item(ext, images.returning_to(Arc::downgrade(&members.pipeline)))?;
            }
        }
        let out = PyList::empty(py);
        for sample in samples {
            out.append(sample_dict(py, sample)?)?;
        }
        Ok((out, decoded))
    }

    /// The state after what was handed out so far (JSON): resumes with neither replay nor
    /// skip.
    fn state(&self) -> PyResult<String> {
        self.tracker.state(self.consumed).map_err(errors::engine)
    }

    /// Samples handed out so far (decoded or skipped).
    #[getter]
    fn consumed(&self) -> u64 {
        self.consumed
    }
}
