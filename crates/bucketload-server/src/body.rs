//! GET bodies. Tiny ones are read in one `pread` into a pooled buffer; others are
//! memory-mapped and handed to hyper in large slices that the socket sends with `sendfile`
//! ([`crate::mapped`]), falling back to a blocking reader that stays [`READ_AHEAD`] chunks
//! ahead when mapping fails.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;
use s3s::dto::Range;
use s3s::stream::{ByteStream, RemainingLength};
use s3s::{S3Result, s3_error};

use crate::bufpool::BufferPool;
use crate::mapped::MappedRange;
use crate::storage::ObjectMeta;

/// Bodies up to this size are read at once: a `pread` of a few KiB costs less than a map,
/// `sendfile` and unmap.
const READ_MAX: u64 = 16 * 1024;
/// Size of each read of the fallback reader.
const CHUNK: u64 = 1 << 20;
/// Chunks the fallback reader reads ahead of the network.
const READ_AHEAD: usize = 2;

enum Source {
    Ready(Option<Bytes>),
    Mapped(MappedRange),
    Reader(tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>),
}

/// An object body.
pub(crate) struct FileBody {
    source: Source,
    remaining: u64,
}

impl Stream for FileBody {
    type Item = Result<Bytes, s3s::StdError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = match &mut self.source {
            Source::Ready(first) => first.take().map(Ok),
            Source::Mapped(range) => range.next_slice().map(Ok),
            Source::Reader(rx) => match std::task::ready!(rx.poll_recv(cx)) {
                Some(Ok(bytes)) => Some(Ok(bytes)),
                Some(Err(e)) => return Poll::Ready(Some(Err(Box::new(e)))),
                None => None,
            },
        };
        if let Some(Ok(bytes)) = &next {
            self.remaining = self.remaining.saturating_sub(bytes.len() as u64);
        }
        Poll::Ready(next)
    }
}

impl ByteStream for FileBody {
    fn remaining_length(&self) -> RemainingLength {
        RemainingLength::new_exact(usize::try_from(self.remaining).unwrap_or(usize::MAX))
    }
}

/// Opens a body of `len` bytes at `start`.
fn body_from(
    buffers: &Arc<BufferPool>,
    file: File,
    start: u64,
    len: u64,
) -> std::io::Result<FileBody> {
    let source = if len <= READ_MAX {
        let first = buffers.read_with(len as usize, |buf| file.read_exact_at(buf, start))?;
        Source::Ready(Some(first))
    } else {
        match MappedRange::new(file, start, len) {
            Ok(range) => Source::Mapped(range),
            Err((e, file)) => {
                tracing::debug!(error = %e, "cannot map an object; reading it instead");
                Source::Reader(spawn_reader(buffers, file, start, len))
            }
        }
    };
    Ok(FileBody {
        source,
        remaining: len,
    })
}

/// Reads `len` bytes at `start` on the blocking pool, stopping when the client goes away.
/// A file that shrinks while being read ends the body with an error.
fn spawn_reader(
    buffers: &Arc<BufferPool>,
    file: File,
    start: u64,
    len: u64,
) -> tokio::sync::mpsc::Receiver<std::io::Result<Bytes>> {
    let (tx, rx) = tokio::sync::mpsc::channel(READ_AHEAD);
    let buffers = Arc::clone(buffers);
    tokio::task::spawn_blocking(move || {
        let (mut offset, end) = (start, start + len);
        while offset < end {
            let n = (end - offset).min(CHUNK);
            let chunk = buffers.read_with(n as usize, |buf| file.read_exact_at(buf, offset));
            let failed = chunk.is_err();
            offset += n;
            if tx.blocking_send(chunk).is_err() || failed {
                return;
            }
        }
    });
    rx
}

/// Opens the body of an object described by `meta` for the requested range.
pub(crate) fn body_for(
    buffers: &Arc<BufferPool>,
    meta: ObjectMeta,
    file: File,
    range: Option<Range>,
) -> S3Result<(ObjectMeta, std::ops::Range<u64>, FileBody)> {
    let span = match range {
        Some(r) => r.check(meta.size).map_err(|_| {
            s3_error!(
                InvalidRange,
                "the requested range is not satisfiable for an object of {} bytes",
                meta.size
            )
        })?,
        None => 0..meta.size,
    };
    let body = body_from(buffers, file, span.start, span.end - span.start)
        .map_err(crate::storage::internal)?;
    Ok((meta, span, body))
}
