//! Writing one object through an open handle: a multipart upload that becomes the object when
//! it completes.
//!
//! Bytes must arrive in order (offset = bytes written so far); each full part is uploaded while
//! the program keeps writing, at most `concurrency` parts at once, within the memory the handle
//! reserved. [`FileWriter::finish`] completes the upload: the object appears whole, at once, or
//! not at all; *when* it is called (which close) is decided by [`Fs`](crate::Fs). A writer is in
//! one of three [`State`]s: open (uploading), done (the object holds every byte written) or
//! failed (the upload was aborted: this handle made no object). A failed upload, a refused
//! write, or a mount process that dies leaves no object: S3 never shows an incomplete multipart
//! upload, a small file is one PUT sent only by `finish`, and a dropped writer aborts.
//!
//! While everything written fits in one part, the writer keeps the bytes (handles to the same
//! buffers the upload holds, so no copy): a write after the upload completed, through another
//! descriptor of the same open file (`exec 3>f; echo a >&3; echo b >&3`), starts a new upload
//! of the kept bytes and the new ones, which replaces the object when it completes.

use bucketload_store::{MultipartOptions, MultipartWriter, Store};
use bytes::Bytes;

use crate::error::{Error, Result, errno};
use crate::memory::Reservation;
use crate::tree::Saved;

/// Where an open file's upload stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// Being written; the upload completes on close.
    Open,
    /// Completed: the object holds every byte written (its ETag).
    Done(Option<String>),
    /// Failed or abandoned (why): the upload was aborted and made no object.
    Failed(String),
}

/// One open file's writer.
#[derive(Debug)]
pub(crate) struct FileWriter {
    store: Store,
    key: String,
    opts: MultipartOptions,
    upload: Option<MultipartWriter>,
    written: u64,
    /// Every byte written, while they fit in one part (see the module docs).
    kept: Option<Vec<Bytes>>,
    state: State,
    /// The process (thread group) that opened the file: its `close` completes the upload.
    pub(crate) owner: u32,
    /// What the store holds at the key apart from this upload (`None`: nothing); the name
    /// shows it again when the upload fails.
    pub(crate) previous: Option<Saved>,
    /// Buffer memory, held while the writer may still upload.
    memory: Option<Reservation>,
}

impl FileWriter {
    pub(crate) fn new(
        store: &Store,
        key: &str,
        opts: MultipartOptions,
        owner: u32,
        previous: Option<Saved>,
        memory: Reservation,
    ) -> FileWriter {
        let mut writer = FileWriter {
            store: store.clone(),
            key: key.to_owned(),
            opts,
            upload: None,
            written: 0,
            kept: Some(Vec::new()),
            state: State::Open,
            owner,
            previous,
            memory: Some(memory),
        };
        writer.upload = Some(writer.new_upload());
        writer
    }

    fn new_upload(&self) -> MultipartWriter {
        let path = bucketload_store::key_path(&self.key);
        MultipartWriter::new(self.store.object_store(), path.clone(), self.opts.clone())
            .with_uri(self.store.object_uri(&path))
            .with_store(&self.store)
    }

    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    /// Moves to `state`; a writer that can no longer upload gives its memory back.
    fn set_state(&mut self, state: State) {
        let ended = match &state {
            State::Open => false,
            State::Done(_) => self.kept.is_none(),
            State::Failed(_) => true,
        };
        if ended {
            self.kept = None;
            self.memory = None;
        }
        self.state = state;
    }

    pub(crate) fn is_open(&self) -> bool {
        self.state == State::Open
    }

    /// Whether a write after completion can continue the object (see the module docs).
    pub(crate) fn can_reopen(&self) -> bool {
        matches!(self.state, State::Done(_)) && self.kept.is_some()
    }

    /// Starts a new upload of the bytes written so far, after the last one completed.
    pub(crate) async fn reopen(&mut self) -> Result<()> {
        let Some(kept) = self.kept.clone() else {
            return Err(self.closed());
        };
        let mut upload = self.new_upload();
        for bytes in kept {
            if let Err(e) = upload.write(bytes).await {
                self.set_state(State::Failed(e.to_string()));
                return Err(Error::Store(e));
            }
        }
        self.upload = Some(upload);
        self.set_state(State::Open);
        Ok(())
    }

    /// Appends `data` written at `offset`. A write out of order abandons the upload: the file
    /// could never hold what the program meant to write.
    pub(crate) async fn write(&mut self, offset: u64, data: Bytes) -> Result<u32> {
        match &self.state {
            State::Open => {}
            State::Done(_) => return Err(self.closed()),
            State::Failed(reason) => return Err(self.failure(reason)),
        }
        if offset != self.written {
            let reason = format!(
                "write at offset {offset} but {} bytes were written: files are written \
                 sequentially from the start (write to local disk, then copy)",
                self.written
            );
            self.abandon(&reason).await;
            return Err(Error::refused(&self.key, errno::EINVAL, reason));
        }
        let Some(upload) = self.upload.as_mut() else {
            return Err(self.closed());
        };
        let len = data.len() as u64;
        if let Err(e) = upload.write(data.clone()).await {
            // The writer aborted the upload.
            self.upload = None;
            self.set_state(State::Failed(e.to_string()));
            return Err(Error::Store(e));
        }
        self.keep(data);
        self.written += len;
        Ok(u32::try_from(len).unwrap_or(u32::MAX))
    }

    fn keep(&mut self, data: Bytes) {
        let fits = self.written + data.len() as u64 <= self.opts.part_size;
        match (&mut self.kept, fits) {
            (Some(kept), true) => kept.push(data),
            _ => self.kept = None,
        }
    }

    /// Completes the upload (once); returns the new object's ETag.
    pub(crate) async fn finish(&mut self) -> Result<Option<String>> {
        match &self.state {
            State::Open => {}
            State::Done(etag) => return Ok(etag.clone()),
            State::Failed(reason) => return Err(self.failure(reason)),
        }
        let Some(upload) = self.upload.take() else {
            return Err(self.closed());
        };
        match upload.finish().await {
            Ok(put) => {
                self.set_state(State::Done(put.e_tag.clone()));
                Ok(put.e_tag)
            }
            Err(e) => {
                self.set_state(State::Failed(e.to_string()));
                Err(Error::Store(e))
            }
        }
    }

    /// Aborts the upload: this handle makes no object, and later writes and closes fail.
    pub(crate) async fn abandon(&mut self, reason: &str) {
        if let Some(upload) = self.upload.take()
            && let Err(e) = upload.abort().await
        {
            tracing::warn!(key = %self.key, error = %e, "mount: aborting an upload failed");
        }
        self.set_state(State::Failed(reason.to_owned()));
    }

    /// The error of every operation on a failed writer.
    pub(crate) fn failure(&self, reason: &str) -> Error {
        Error::refused(
            &self.key,
            errno::EIO,
            format!("the upload failed, so the object was not replaced: {reason}"),
        )
    }

    fn closed(&self) -> Error {
        Error::refused(
            &self.key,
            errno::EBADF,
            format!(
                "the file was closed and uploaded; writing more through another descriptor is \
                 only possible while the file fits in one part ({} bytes): open it again with \
                 O_TRUNC to replace it",
                self.opts.part_size
            ),
        )
    }
}
