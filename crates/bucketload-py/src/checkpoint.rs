//! Checkpoints: streamed multipart writes for `torch.save`, parallel reads for `torch.load`,
//! background saves of a snapshot.

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;

use bucketload::checkpoint::{
    BlockingReader, BlockingWriter, CheckpointConfig, Checkpoints, SaveHandle, Saved,
};
use bytes::{Bytes, BytesMut};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use tokio::runtime::Runtime;

use crate::buffer::{self, Buffer};
use crate::errors;
use crate::runtime::{ForkSafe, Slot, runtime};
use crate::store::store_config;

const WRITER: &str = "checkpoint writer";
const READER: &str = "checkpoint reader";

fn saved_dict<'py>(py: Python<'py>, saved: &Saved) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &saved.name)?;
    d.set_item("uri", &saved.uri)?;
    d.set_item("bytes", saved.bytes)?;
    d.set_item("seconds", saved.seconds)?;
    Ok(d)
}

fn closed(what: &str) -> PyErr {
    PyValueError::new_err(format!("I/O operation on a closed checkpoint {what}"))
}

/// The checkpoints under one prefix (`s3://bucket/run1`, `file:///ckpt`, a directory).
#[pyclass(module = "bucketload._native")]
pub struct NativeCheckpoints {
    checkpoints: ForkSafe<Arc<Checkpoints>>,
    uri: String,
    rt: Arc<Runtime>,
}

#[pymethods]
impl NativeCheckpoints {
    #[new]
    #[pyo3(signature = (uri, endpoint=None, region=None, part_size=None, parts_in_flight=None))]
    fn new(
        uri: &str,
        endpoint: Option<String>,
        region: Option<String>,
        part_size: Option<u64>,
        parts_in_flight: Option<usize>,
    ) -> PyResult<NativeCheckpoints> {
        let mut config = CheckpointConfig::default();
        if let Some(bytes) = part_size {
            config = config.with_part_size(bytes);
        }
        if let Some(n) = parts_in_flight {
            config = config.with_parts_in_flight(n);
        }
        let rt = runtime()?;
        let checkpoints = {
            let _guard = rt.enter();
            Checkpoints::open(uri, &store_config(endpoint, region), config)
                .map_err(errors::engine)?
        };
        Ok(NativeCheckpoints {
            uri: checkpoints.uri().to_owned(),
            checkpoints: ForkSafe::new(Arc::new(checkpoints)),
            rt,
        })
    }

    /// The full URI of checkpoint `name`.
    fn uri_of(&self, name: &str) -> String {
        format!("{}/{}", self.uri.trim_end_matches('/'), name)
    }

    /// A streaming writer of checkpoint `name`: visible only after `close()`.
    fn writer(&self, py: Python<'_>, name: &str) -> PyResult<NativeWriter> {
        let checkpoints = self.checkpoints.get("checkpoint store")?;
        let opened = py.detach(|| self.rt.block_on(checkpoints.writer(name)));
        let writer = opened.map_err(errors::engine)?;
        Ok(NativeWriter {
            writer: Slot::new(writer.into_blocking(self.rt.handle().clone())),
            written: 0,
        })
    }

    /// A reader of checkpoint `name` with `read`, `seek` and read-ahead.
    fn reader(&self, py: Python<'_>, name: &str) -> PyResult<NativeReader> {
        let checkpoints = self.checkpoints.get("checkpoint store")?;
        let opened = py.detach(|| self.rt.block_on(checkpoints.reader(name)));
        let reader = opened.map_err(errors::engine)?;
        let size = reader.size();
        Ok(NativeReader {
            reader: Slot::new(reader.into_blocking(self.rt.handle().clone())),
            size,
        })
    }

    /// The whole checkpoint `name`, read with parallel ranged GETs, as a read-only buffer.
    fn load(&self, py: Python<'_>, name: &str) -> PyResult<Buffer> {
        let checkpoints = self.checkpoints.get("checkpoint store")?;
        let loaded = py.detach(|| self.rt.block_on(checkpoints.load(name)));
        Ok(Buffer::bytes(loaded.map_err(errors::engine)?))
    }

    /// An empty in-memory snapshot to serialise into (`torch.save(obj, snapshot)`) before
    /// `save_background`.
    fn snapshot(&self) -> NativeSnapshot {
        NativeSnapshot {
            chunks: Some(Vec::new()),
            pending: BytesMut::new(),
            written: 0,
        }
    }

    /// Saves `data` as checkpoint `name` in the background; returns a handle. `data` is a
    /// [`NativeSnapshot`] (taken: it is empty afterwards), or any bytes-like object (copied
    /// first: the caller may change it as soon as this returns).
    fn save_background(
        &self,
        py: Python<'_>,
        name: &str,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<NativeSaveHandle> {
        let checkpoints = self.checkpoints.get("checkpoint store")?;
        let chunks = match data.cast::<NativeSnapshot>() {
            Ok(snapshot) => snapshot.borrow_mut().take()?,
            Err(_) => vec![Bytes::from(data.extract::<PyBuffer<u8>>()?.to_vec(py)?)],
        };
        let started = py.detach(|| {
            self.rt
                .block_on(checkpoints.save_background_chunks(name, chunks))
        });
        Ok(NativeSaveHandle {
            handle: Slot::new(started.map_err(errors::engine)?),
            uri: self.uri_of(name),
            rt: Arc::clone(&self.rt),
        })
    }

    /// Saves `data` as checkpoint `name` and returns when it is visible.
    fn save<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        data: PyBuffer<u8>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let checkpoints = self.checkpoints.get("checkpoint store")?;
        let bytes = Bytes::from(data.to_vec(py)?);
        let saved = py.detach(|| self.rt.block_on(checkpoints.save(name, bytes)));
        saved_dict(py, &saved.map_err(errors::engine)?)
    }

    /// Waits for every background save; raises the first failure nobody waited for.
    fn wait_background(&self, py: Python<'_>) -> PyResult<()> {
        let checkpoints = self.checkpoints.get("checkpoint store")?;
        let waited = py.detach(|| self.rt.block_on(checkpoints.wait_background()));
        waited.map_err(errors::engine)
    }

    /// Checkpoints under the prefix as `(name, bytes)`.
    fn list(&self, py: Python<'_>) -> PyResult<Vec<(String, u64)>> {
        let checkpoints = self.checkpoints.get("checkpoint store")?;
        let listed = py.detach(|| self.rt.block_on(checkpoints.list()));
        Ok(listed
            .map_err(errors::engine)?
            .into_iter()
            .map(|c| (c.name, c.bytes))
            .collect())
    }
}

/// Bytes gathered in memory for a background save: a write-only file for `torch.save`.
#[pyclass(module = "bucketload._native")]
pub struct NativeSnapshot {
    /// Full chunks; `None` once handed to a save.
    chunks: Option<Vec<Bytes>>,
    /// The chunk being filled.
    pending: BytesMut,
    written: u64,
}

/// Bytes a snapshot gathers per chunk: `torch.save` writes many small pieces between tensors.
const SNAPSHOT_CHUNK: usize = 4 << 20;

#[pymethods]
impl NativeSnapshot {
    /// Appends `data` (any bytes-like object, copied once without the GIL); returns its
    /// length.
    fn write(&mut self, py: Python<'_>, data: PyBuffer<u8>) -> PyResult<usize> {
        let copied;
        let bytes = match buffer::contiguous(&data) {
            Some(bytes) => bytes,
            None => {
                copied = data.to_vec(py)?;
                &copied
            }
        };
        let Some(chunks) = self.chunks.as_mut() else {
            return Err(closed("snapshot"));
        };
        let pending = &mut self.pending;
        py.detach(|| {
            pending.extend_from_slice(bytes);
            if pending.len() >= SNAPSHOT_CHUNK {
                chunks.push(pending.split().freeze());
            }
        });
        self.written += bytes.len() as u64;
        Ok(bytes.len())
    }

    /// Bytes written so far.
    fn tell(&self) -> u64 {
        self.written
    }

    /// Nothing to do: the bytes are in memory.
    fn flush(&self) {}
}

impl NativeSnapshot {
    /// The bytes written, in order; the snapshot is closed afterwards.
    fn take(&mut self) -> PyResult<Vec<Bytes>> {
        let mut chunks = self.chunks.take().ok_or_else(|| closed("snapshot"))?;
        if !self.pending.is_empty() {
            chunks.push(self.pending.split().freeze());
        }
        Ok(chunks)
    }
}

/// A checkpoint being written (`io.RawIOBase`-like, used by `bucketload` Python writers).
#[pyclass(module = "bucketload._native")]
pub struct NativeWriter {
    writer: Slot<BlockingWriter>,
    written: u64,
}

#[pymethods]
impl NativeWriter {
    /// Appends `data` (any bytes-like object); returns its length. Contiguous data (what
    /// `torch.save` writes) is copied once, into the part being filled, without the GIL.
    fn write(&mut self, py: Python<'_>, data: PyBuffer<u8>) -> PyResult<usize> {
        let copied;
        let bytes = match buffer::contiguous(&data) {
            Some(bytes) => bytes,
            None => {
                copied = data.to_vec(py)?;
                &copied
            }
        };
        let n = bytes.len();
        self.writer.with(WRITER, |writer| {
            let writer = writer.ok_or_else(|| closed("writer"))?;
            py.detach(|| writer.write_all(bytes)).map_err(errors::io)
        })?;
        self.written += n as u64;
        Ok(n)
    }

    /// Bytes written so far.
    fn tell(&self) -> u64 {
        self.written
    }

    /// Completes the upload: the checkpoint becomes visible, whole. Returns what was saved.
    fn close<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let taken = self.writer.take(WRITER)?;
        let Some(writer) = taken else {
            return Ok(None);
        };
        let saved = py.detach(|| writer.finish()).map_err(errors::engine)?;
        Ok(Some(saved_dict(py, &saved)?))
    }

    /// Abandons the save: nothing becomes visible, an older checkpoint stays.
    fn abort(&mut self, py: Python<'_>) -> PyResult<()> {
        let taken = self.writer.take(WRITER)?;
        match taken {
            Some(writer) => py.detach(|| writer.abort()).map_err(errors::engine),
            None => Ok(()),
        }
    }

    /// Whether `close()` or `abort()` was called.
    #[getter]
    fn closed(&self) -> PyResult<bool> {
        self.writer.with(WRITER, |writer| Ok(writer.is_none()))
    }
}

/// A checkpoint being read, with read-ahead while reads go forward.
#[pyclass(module = "bucketload._native")]
pub struct NativeReader {
    reader: Slot<BlockingReader>,
    size: u64,
}

#[pymethods]
impl NativeReader {
    /// Size of the checkpoint in bytes.
    #[getter]
    fn size(&self) -> u64 {
        self.size
    }

    /// Up to `n` bytes (all that is left when `n` < 0).
    #[pyo3(signature = (n=-1))]
    fn read<'py>(&self, py: Python<'py>, n: i64) -> PyResult<Bound<'py, PyBytes>> {
        self.open(|reader| {
            let pos = reader.stream_position().map_err(errors::io)?;
            let left = self.size.saturating_sub(pos);
            let want = if n < 0 { left } else { left.min(n as u64) } as usize;
            let mut got = 0;
            // Filled in place, without the GIL: nothing else sees the new object yet.
            let bytes = PyBytes::new_with(py, want, |buf| {
                got = py.detach(|| read_full(reader, buf)).map_err(errors::io)?;
                Ok(())
            })?;
            if got == want {
                return Ok(bytes);
            }
            // The checkpoint ended early (it cannot, pinned to one version; kept for safety).
            Ok(PyBytes::new(py, &bytes.as_bytes()[..got]))
        })
    }

    /// Reads into a writable buffer; returns the bytes read. A contiguous buffer (what
    /// `torch.load` passes: a tensor's memory) is filled straight from the downloaded parts,
    /// without the GIL.
    fn readinto(&self, py: Python<'_>, mut target: PyBuffer<u8>) -> PyResult<usize> {
        if target.readonly() {
            return Err(PyValueError::new_err("readinto needs a writable buffer"));
        }
        if let Some(buf) = buffer::contiguous_mut(&mut target) {
            return self.open(|reader| py.detach(|| read_full(reader, buf)).map_err(errors::io));
        }
        let mut buf = vec![0u8; target.item_count()];
        let got = self.open(|reader| {
            py.detach(|| read_full(reader, &mut buf))
                .map_err(errors::io)
        })?;
        target.copy_from_slice(py, &buf)?;
        Ok(got)
    }

    /// Moves to `offset` from the start (0), the current position (1) or the end (2).
    #[pyo3(signature = (offset, whence=0))]
    fn seek(&self, offset: i64, whence: i32) -> PyResult<u64> {
        let from =
            match whence {
                0 => SeekFrom::Start(u64::try_from(offset).map_err(|_| {
                    PyValueError::new_err(format!("negative seek position {offset}"))
                })?),
                1 => SeekFrom::Current(offset),
                2 => SeekFrom::End(offset),
                _ => return Err(PyValueError::new_err(format!("invalid whence ({whence})"))),
            };
        self.open(|reader| reader.seek(from).map_err(errors::io))
    }

    /// The current position.
    fn tell(&self) -> PyResult<u64> {
        self.open(|reader| reader.stream_position().map_err(errors::io))
    }

    /// Stops reading ahead and releases the reader.
    fn close(&self) -> PyResult<()> {
        self.reader.take(READER)?;
        Ok(())
    }
}

impl NativeReader {
    /// Runs `f` on the reader; fails once it is closed.
    fn open<R>(&self, f: impl FnOnce(&mut BlockingReader) -> PyResult<R>) -> PyResult<R> {
        self.reader
            .with(READER, |reader| f(reader.ok_or_else(|| closed("reader"))?))
    }
}

/// Reads until `buf` is full or the end.
fn read_full(reader: &mut BlockingReader, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// A background save.
#[pyclass(module = "bucketload._native")]
pub struct NativeSaveHandle {
    handle: Slot<SaveHandle>,
    uri: String,
    rt: Arc<Runtime>,
}

#[pymethods]
impl NativeSaveHandle {
    /// The checkpoint's URI.
    #[getter]
    fn uri(&self) -> String {
        self.uri.clone()
    }

    /// Whether the save ended (successfully or not).
    fn done(&self) -> PyResult<bool> {
        self.handle.with("save handle", |handle| {
            Ok(handle.is_none_or(|h| h.is_finished()))
        })
    }

    /// Waits for the save; raises its error. A second call returns `None`.
    fn wait<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let taken = self.handle.take("save handle")?;
        let Some(handle) = taken else {
            return Ok(None);
        };
        let rt = self.rt.handle().clone();
        let saved = py.detach(|| handle.wait_blocking(&rt));
        Ok(Some(saved_dict(py, &saved.map_err(errors::engine)?)?))
    }
}
