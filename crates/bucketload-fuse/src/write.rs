//! Writing one object through an open handle: a multipart upload that becomes the object on
//! close.
//!
//! Bytes must arrive in order (offset = bytes written so far); each full part is uploaded while
//! the program keeps writing, at most `concurrency` parts at once, within the memory the handle
//! reserved. Closing the file (the first `flush` from the process that opened it, or the release
//! of the handle) completes the upload: the object appears whole, at once, or not at all. A
//! failed upload, or a mount process that dies, leaves no object: S3 never shows an incomplete
//! multipart upload, and a dropped writer aborts it.

use bucketload_store::{MultipartOptions, MultipartWriter, Store};
use bytes::Bytes;

use crate::error::{Error, Result, errno};
use crate::memory::Reservation;

/// One open file's writer.
#[derive(Debug)]
pub(crate) struct FileWriter {
    key: String,
    writer: Option<MultipartWriter>,
    written: u64,
    /// The process that opened the file: its `close` completes the upload.
    pub(crate) pid: u32,
    /// The upload finished (or failed); later writes fail.
    finished: Option<Result<Option<String>, String>>,
    _memory: Reservation,
}

impl FileWriter {
    pub(crate) fn new(
        store: &Store,
        key: &str,
        part_size: u64,
        concurrency: usize,
        pid: u32,
        memory: Reservation,
    ) -> FileWriter {
        let path = bucketload_store::key_path(key);
        let opts = MultipartOptions {
            part_size,
            concurrency,
        };
        let writer = MultipartWriter::new(store.object_store(), path.clone(), opts)
            .with_uri(store.object_uri(&path));
        FileWriter {
            key: key.to_owned(),
            writer: Some(writer),
            written: 0,
            pid,
            finished: None,
            _memory: memory,
        }
    }

    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// Appends `data` written at `offset`.
    pub(crate) async fn write(&mut self, offset: u64, data: Bytes) -> Result<u32> {
        if offset != self.written {
            return Err(Error::refused(
                &self.key,
                errno::EINVAL,
                format!(
                    "write at offset {offset} but {} bytes were written: files are written \
                     sequentially from the start (write to local disk, then copy)",
                    self.written
                ),
            ));
        }
        let Some(writer) = self.writer.as_mut() else {
            return Err(self.closed());
        };
        let len = data.len();
        if let Err(e) = writer.write(data).await {
            self.writer = None;
            self.finished = Some(Err(e.to_string()));
            return Err(Error::Store(e));
        }
        self.written += len as u64;
        Ok(u32::try_from(len).unwrap_or(u32::MAX))
    }

    /// Completes the upload (once); returns the new object's ETag.
    pub(crate) async fn finish(&mut self) -> Result<Option<String>> {
        if let Some(done) = &self.finished {
            return done.clone().map_err(|reason| {
                Error::refused(
                    &self.key,
                    errno::EIO,
                    format!("the upload failed: {reason}"),
                )
            });
        }
        let Some(writer) = self.writer.take() else {
            return Err(self.closed());
        };
        let result = writer.finish().await;
        match result {
            Ok(put) => {
                self.finished = Some(Ok(put.e_tag.clone()));
                Ok(put.e_tag)
            }
            Err(e) => {
                self.finished = Some(Err(e.to_string()));
                Err(Error::Store(e))
            }
        }
    }

    /// Whether the upload is complete or failed.
    pub(crate) fn is_finished(&self) -> bool {
        self.finished.is_some()
    }

    fn closed(&self) -> Error {
        Error::refused(
            &self.key,
            errno::EBADF,
            "the file was already closed and uploaded; open it again (with O_TRUNC) to replace it",
        )
    }
}
