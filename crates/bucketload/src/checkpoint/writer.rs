//! [`CheckpointWriter`]: a byte stream saved as one checkpoint, all or nothing.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use bucketload_store::{MultipartOptions, MultipartWriter};
use bytes::Bytes;

use super::local::LocalWriter;
use super::{Checkpoints, Saved, Target};
use crate::{Error, Result};

/// Bytes the blocking writer gathers before handing them to the upload: `torch.save` writes
/// in small pieces, and each hand-over costs a trip through the runtime.
const BLOCKING_CHUNK: usize = 4 << 20;

/// Writes one checkpoint; see the module docs. Dropping it unfinished aborts the save.
#[derive(Debug)]
pub struct CheckpointWriter {
    sink: Sink,
    name: String,
    uri: String,
    bytes: u64,
    started: Instant,
    /// Bytes the upload may hold at once: the blocking writer keeps that many in its pool.
    in_flight: u64,
}

#[derive(Debug)]
enum Sink {
    Object(Box<MultipartWriter>),
    Local(LocalWriter),
}

impl CheckpointWriter {
    pub(super) async fn open(ckpt: &Checkpoints, name: &str) -> Result<CheckpointWriter> {
        let uri = ckpt.uri_of(name);
        let parts = ckpt.config.parts_in_flight as u64 + 1;
        let in_flight = ckpt.config.part_size.saturating_mul(parts);
        let sink = match &ckpt.target {
            Target::Object(store) => {
                let opts = MultipartOptions {
                    part_size: ckpt.config.part_size,
                    concurrency: ckpt.config.parts_in_flight,
                };
                let object = ckpt.object(store, name)?;
                let writer =
                    MultipartWriter::new(Arc::clone(object.store()), object.path().clone(), opts)
                        .with_uri(uri.clone())
                        .with_store(store);
                Sink::Object(Box::new(writer))
            }
            Target::Local(dir) => Sink::Local(LocalWriter::create(dir, name).await?),
        };
        Ok(CheckpointWriter {
            sink,
            name: name.to_owned(),
            uri,
            bytes: 0,
            started: Instant::now(),
            in_flight,
        })
    }

    /// Appends `data`; waits while the parts in flight are at their limit. On error the save
    /// is aborted.
    pub async fn write(&mut self, data: Bytes) -> Result<()> {
        self.bytes += data.len() as u64;
        match &mut self.sink {
            Sink::Object(w) => Ok(w.write(data).await?),
            Sink::Local(w) => w.write(&data).await,
        }
    }

    /// Uploads what is left and makes the checkpoint visible; only then is it durable.
    pub async fn finish(self) -> Result<Saved> {
        match self.sink {
            Sink::Object(w) => {
                w.finish().await?;
            }
            Sink::Local(w) => w.finish().await?,
        }
        tracing::info!(uri = %self.uri, bytes = self.bytes, "checkpoint saved");
        Ok(Saved {
            name: self.name,
            uri: self.uri,
            bytes: self.bytes,
            seconds: self.started.elapsed().as_secs_f64(),
        })
    }

    /// Abandons the save: the parts uploaded are deleted and nothing becomes visible.
    pub async fn abort(self) -> Result<()> {
        match self.sink {
            Sink::Object(w) => Ok(w.abort().await?),
            Sink::Local(w) => w.abort().await,
        }
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The checkpoint's full URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// A `std::io::Write` over this writer that runs the upload on `runtime`; for a thread
    /// outside the runtime (e.g. `torch.save` called from Python).
    pub fn into_blocking(self, runtime: tokio::runtime::Handle) -> BlockingWriter {
        let chunks = self.in_flight.div_ceil(BLOCKING_CHUNK as u64) as usize + 1;
        BlockingWriter {
            writer: Some(self),
            runtime,
            pending: Vec::new(),
            pool: Arc::new(ChunkPool {
                free: Mutex::new(Vec::new()),
                keep: chunks,
            }),
        }
    }
}

/// [`CheckpointWriter`] as `std::io::Write`: writes are gathered into 4 MiB chunks.
/// Call [`BlockingWriter::finish`] to make the checkpoint visible; dropping it unfinished
/// aborts the save.
#[derive(Debug)]
pub struct BlockingWriter {
    writer: Option<CheckpointWriter>,
    runtime: tokio::runtime::Handle,
    /// The chunk being filled (capacity [`BLOCKING_CHUNK`] once taken from the pool).
    pending: Vec<u8>,
    pool: Arc<ChunkPool>,
}

/// Chunk buffers the upload has sent, kept for the next chunks: a buffer used again is
/// already backed by memory, where a fresh one costs a page fault per 4 KiB as it is filled
/// (a third of the writer's CPU for a large checkpoint). Holds at most what the upload can
/// hold in flight, and is freed with the writer and its last chunk.
#[derive(Debug)]
struct ChunkPool {
    free: Mutex<Vec<Vec<u8>>>,
    keep: usize,
}

impl ChunkPool {
    fn take(&self) -> Vec<u8> {
        let reused = self.free.lock().ok().and_then(|mut free| free.pop());
        reused.unwrap_or_else(|| Vec::with_capacity(BLOCKING_CHUNK))
    }

    fn give_back(&self, mut buf: Vec<u8>) {
        buf.clear();
        if let Ok(mut free) = self.free.lock()
            && free.len() < self.keep
        {
            free.push(buf);
        }
    }
}

/// A chunk handed to the upload; its buffer goes back to the pool when the upload drops it.
struct PooledChunk {
    buf: Vec<u8>,
    pool: Arc<ChunkPool>,
}

impl AsRef<[u8]> for PooledChunk {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for PooledChunk {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

impl BlockingWriter {
    fn send_pending(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from_owner(PooledChunk {
            buf: std::mem::take(&mut self.pending),
            pool: Arc::clone(&self.pool),
        });
        let Some(writer) = self.writer.as_mut() else {
            return Err(closed());
        };
        let outcome = self.runtime.block_on(writer.write(chunk));
        if outcome.is_err() {
            // The upload was aborted: nothing more can be written.
            self.writer = None;
        }
        outcome
    }

    /// Flushes, completes the upload and makes the checkpoint visible.
    pub fn finish(mut self) -> Result<Saved> {
        self.send_pending()?;
        let writer = self.writer.take().ok_or_else(closed)?;
        self.runtime.block_on(writer.finish())
    }

    /// Abandons the save.
    pub fn abort(mut self) -> Result<()> {
        match self.writer.take() {
            Some(writer) => self.runtime.block_on(writer.abort()),
            None => Ok(()),
        }
    }
}

impl Drop for BlockingWriter {
    fn drop(&mut self) {
        if let Some(writer) = self.writer.take() {
            // Inside the runtime's context, so the unfinished upload is aborted.
            let _guard = self.runtime.enter();
            drop(writer);
        }
    }
}

fn closed() -> Error {
    Error::invalid_input("the checkpoint writer failed or was closed; start a new save")
}

impl std::io::Write for BlockingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.writer.is_none() {
            return Err(std::io::Error::other(closed()));
        }
        let mut rest = buf;
        while !rest.is_empty() {
            if self.pending.capacity() == 0 {
                self.pending = self.pool.take();
            }
            let room = BLOCKING_CHUNK - self.pending.len();
            let (now, later) = rest.split_at(room.min(rest.len()));
            self.pending.extend_from_slice(now);
            rest = later;
            if self.pending.len() >= BLOCKING_CHUNK {
                self.send_pending().map_err(std::io::Error::other)?;
            }
        }
        Ok(buf.len())
    }

    /// Hands the gathered bytes to the upload (it does not make the checkpoint visible).
    fn flush(&mut self) -> std::io::Result<()> {
        self.send_pending().map_err(std::io::Error::other)
    }
}
