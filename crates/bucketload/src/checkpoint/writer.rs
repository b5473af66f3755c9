//! [`CheckpointWriter`]: a byte stream saved as one checkpoint, all or nothing.

use std::time::Instant;

use bucketload_store::{MultipartOptions, MultipartWriter};
use bytes::{Bytes, BytesMut};

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
}

#[derive(Debug)]
enum Sink {
    Object(Box<MultipartWriter>),
    Local(LocalWriter),
}

impl CheckpointWriter {
    pub(super) async fn open(ckpt: &Checkpoints, name: &str) -> Result<CheckpointWriter> {
        let uri = ckpt.uri_of(name);
        let sink = match &ckpt.target {
            Target::Object(store) => {
                let opts = MultipartOptions {
                    part_size: ckpt.config.part_size,
                    concurrency: ckpt.config.parts_in_flight,
                };
                let (objects, key) = ckpt.object(store, name)?;
                let writer = MultipartWriter::new(objects, key, opts)
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
        BlockingWriter {
            writer: Some(self),
            runtime,
            pending: BytesMut::new(),
        }
    }
}

/// [`CheckpointWriter`] as `std::io::Write`: small writes are gathered into 4 MiB chunks.
/// Call [`BlockingWriter::finish`] to make the checkpoint visible; dropping it unfinished
/// aborts the save.
#[derive(Debug)]
pub struct BlockingWriter {
    writer: Option<CheckpointWriter>,
    runtime: tokio::runtime::Handle,
    pending: BytesMut,
}

impl BlockingWriter {
    fn send_pending(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let chunk = self.pending.split().freeze();
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
        self.pending.extend_from_slice(buf);
        if self.pending.len() >= BLOCKING_CHUNK {
            self.send_pending().map_err(std::io::Error::other)?;
        }
        Ok(buf.len())
    }

    /// Hands the gathered bytes to the upload (it does not make the checkpoint visible).
    fn flush(&mut self) -> std::io::Result<()> {
        self.send_pending().map_err(std::io::Error::other)
    }
}
