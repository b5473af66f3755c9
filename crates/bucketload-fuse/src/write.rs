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
//! While the file fits in one part, the writer holds it whole in memory (within the memory the
//! handle reserved) and sends nothing before `finish`: it may then be written at any offset,
//! resized (`ftruncate`), and read back, as editors do with a file they open without
//! `O_TRUNC` (loaded from the store first) and with their swap files. A write after the upload
//! completed, through another descriptor of the same open file
//! (`exec 3>f; echo a >&3; echo b >&3`), changes the held bytes, and the next `finish` uploads
//! them again. Once the file grows past one part, the held bytes go to the upload as its first
//! part and every later write must be at the end.
//!
//! On an S3 Express One Zone directory bucket a file opened with `O_APPEND` is appended to
//! instead ([`Start::Append`]): nothing is read or rewritten, the bytes written at the end go to
//! the store as appends (`x-amz-write-offset-bytes`) when the file is closed or a part's worth
//! has gathered, each at the size the object had. An append is whole or not at all; one made at
//! a size the object no longer has (another writer appended or replaced it) is refused by the
//! store and appends nothing, and the file's later writes and close fail (`EIO`). What earlier
//! appends of the same open added stays: a file appended in several parts shows each part as it
//! goes, as a file on disk shows its writes.

use bucketload_store::{MultipartOptions, MultipartWriter, Store};
use bytes::Bytes;

use crate::error::{Error, Result, errno};
use crate::memory::Reservation;
use crate::tree::Saved;

/// What a file opened for writing starts from.
#[derive(Debug)]
pub(crate) enum Start {
    /// Nothing: a new file, or `O_TRUNC`.
    Empty,
    /// The object, at most one part, read into memory (opened without `O_TRUNC`).
    Content(Vec<u8>),
    /// An object of this many bytes, over one part, not read (opened without `O_TRUNC`): it
    /// can only be emptied (`ftruncate` to 0) and then written, or closed unchanged.
    TooLarge(u64),
    /// An object of this many bytes in a directory bucket, opened with `O_APPEND`: written
    /// bytes are appended to it (see the module docs).
    Append(u64),
}

/// A writer appending to an object (see [`Start::Append`]).
#[derive(Debug)]
struct Appending {
    /// The object's size as the last append left it (or as it was at the open).
    at: u64,
    /// Bytes written and not appended yet.
    pending: Vec<u8>,
    /// The ETag of the last append.
    e_tag: Option<String>,
}

/// Where an open file's upload stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// Being written; the upload completes on close.
    Open,
    /// Completed: the object holds every byte written (its ETag).
    Done(Option<String>),
    /// Failed or abandoned (why): the upload was aborted and made no object.
    Failed(String),
    /// The name was deleted while the file was open: the upload was aborted, and the bytes
    /// still written go nowhere, as to an unlinked file on a disk.
    Discarded,
}

/// One open file's writer.
#[derive(Debug)]
pub(crate) struct FileWriter {
    store: Store,
    key: String,
    opts: MultipartOptions,
    upload: Option<MultipartWriter>,
    written: u64,
    /// The whole file, while it fits in one part (see the module docs).
    held: Option<Vec<u8>>,
    /// Whether the held bytes differ from what the store holds (a file opened without
    /// `O_TRUNC` and not written is not uploaded again).
    dirty: bool,
    /// Started from an object over one part, not read ([`Start::TooLarge`]).
    unloaded: bool,
    /// Appending to the object ([`Start::Append`]).
    appending: Option<Appending>,
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
            held: Some(Vec::new()),
            dirty: true,
            unloaded: false,
            appending: None,
            state: State::Open,
            owner,
            previous,
            memory: Some(memory),
        };
        writer.upload = Some(writer.new_upload());
        writer
    }

    /// Starts from `start`. A file opened without `O_TRUNC` and closed unwritten uploads
    /// nothing.
    pub(crate) fn with_start(mut self, start: Start) -> FileWriter {
        match start {
            Start::Empty => {}
            Start::Content(content) => {
                self.written = content.len() as u64;
                self.held = Some(content);
                self.dirty = false;
            }
            Start::TooLarge(size) => {
                self.written = size;
                self.held = None;
                self.dirty = false;
                self.unloaded = true;
            }
            Start::Append(size) => {
                self.written = size;
                self.held = None;
                self.dirty = false;
                self.upload = None;
                self.appending = Some(Appending {
                    at: size,
                    pending: Vec::new(),
                    e_tag: self.previous.as_ref().and_then(|p| p.etag.clone()),
                });
            }
        }
        self
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

    /// Whether there is anything to upload: bytes written since the open or the last upload
    /// (a new file, or one opened with `O_TRUNC`, is new content from the start).
    pub(crate) fn changed(&self) -> bool {
        self.dirty
    }

    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    /// Moves to `state`; a writer that can no longer upload gives its memory back.
    fn set_state(&mut self, state: State) {
        let ended = match &state {
            State::Open => false,
            State::Done(_) => self.held.is_none() && self.appending.is_none(),
            State::Failed(_) | State::Discarded => true,
        };
        if ended {
            self.held = None;
            self.memory = None;
            if let Some(appending) = &mut self.appending {
                appending.pending = Vec::new();
            }
        }
        self.state = state;
    }

    pub(crate) fn is_open(&self) -> bool {
        self.state == State::Open
    }

    /// Whether a write after completion can continue the object (see the module docs).
    pub(crate) fn can_reopen(&self) -> bool {
        matches!(self.state, State::Done(_)) && (self.held.is_some() || self.appending.is_some())
    }

    /// Makes the held bytes writable again after the last upload completed; the next
    /// `finish` uploads them. An appending writer appends again.
    pub(crate) async fn reopen(&mut self) -> Result<()> {
        if self.appending.is_some() {
            self.set_state(State::Open);
            return Ok(());
        }
        if self.held.is_none() {
            return Err(self.closed());
        }
        self.upload = Some(self.new_upload());
        self.set_state(State::Open);
        Ok(())
    }

    /// `len` bytes at `offset` of the held file; `None` once it grew past one part.
    pub(crate) fn read_held(&self, offset: u64, len: u32) -> Option<Bytes> {
        let held = self.held.as_ref()?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(held.len());
        let end = start.saturating_add(len as usize).min(held.len());
        Some(Bytes::copy_from_slice(&held[start..end]))
    }

    /// Resizes the held file (`ftruncate`, zero-filled when it grows); `false` when the file
    /// is not held or `size` is over one part.
    pub(crate) fn resize(&mut self, size: u64) -> bool {
        if self.unloaded && size == 0 && self.state == State::Open {
            // `truncate -s 0`, or an open without O_TRUNC then ftruncate: a new file.
            self.unloaded = false;
            self.held = Some(Vec::new());
        }
        match (&mut self.held, self.state == State::Open) {
            (Some(held), true) if size <= self.opts.part_size => {
                held.resize(size as usize, 0);
                self.written = size;
                self.dirty = true;
                true
            }
            _ => false,
        }
    }

    /// Appends `data` written at `offset`. A write out of order abandons the upload: the file
    /// could never hold what the program meant to write.
    pub(crate) async fn write(&mut self, offset: u64, data: Bytes) -> Result<u32> {
        match &self.state {
            State::Open => {}
            State::Done(_) => return Err(self.closed()),
            State::Failed(reason) => return Err(self.failure(reason)),
            State::Discarded => return Ok(u32::try_from(data.len()).unwrap_or(u32::MAX)),
        }
        if self.unloaded {
            return Err(Error::refused(
                &self.key,
                errno::ENOTSUP,
                format!(
                    "the object is over one part (--part-size, {} bytes) and cannot be modified \
                     in place; it is unchanged: open it with O_TRUNC to replace it whole",
                    self.opts.part_size
                ),
            ));
        }
        let len = data.len() as u64;
        if self.appending.is_some() {
            return self.write_appended(offset, data).await;
        }
        let end = offset.saturating_add(len);
        if let Some(held) = &mut self.held {
            if end <= self.opts.part_size {
                let (start, end) = (offset as usize, end as usize);
                if held.len() < end {
                    held.resize(end, 0);
                }
                held[start..end].copy_from_slice(&data);
                self.written = held.len() as u64;
                self.dirty = true;
                return Ok(u32::try_from(len).unwrap_or(u32::MAX));
            }
            if offset == self.written {
                // Past one part: the held bytes become the upload's start.
                let first = Bytes::from(std::mem::take(held));
                self.held = None;
                self.send(first).await?;
            }
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
        self.send(data).await?;
        self.written += len;
        self.dirty = true;
        Ok(u32::try_from(len).unwrap_or(u32::MAX))
    }

    /// A write to an appending writer: at the end only; a part's worth gathered is appended.
    async fn write_appended(&mut self, offset: u64, data: Bytes) -> Result<u32> {
        let len = data.len() as u64;
        if offset != self.written {
            let reason = format!(
                "write at offset {offset} of a file opened for appending, whose end is at {}: \
                 only appends are possible on a directory bucket",
                self.written
            );
            self.abandon(&reason).await;
            return Err(Error::refused(&self.key, errno::EINVAL, reason));
        }
        let Some(appending) = self.appending.as_mut() else {
            return Err(self.closed());
        };
        appending.pending.extend_from_slice(&data);
        self.written += len;
        self.dirty = true;
        if appending.pending.len() as u64 >= self.opts.part_size {
            self.append_pending().await?;
        }
        Ok(u32::try_from(len).unwrap_or(u32::MAX))
    }

    /// Appends the bytes written since the last append; a refusal fails the writer.
    async fn append_pending(&mut self) -> Result<()> {
        let Some(appending) = self.appending.as_mut() else {
            return Ok(());
        };
        if appending.pending.is_empty() {
            return Ok(());
        }
        let data = Bytes::from(std::mem::take(&mut appending.pending));
        match self.store.append(&self.key, appending.at, data).await {
            Ok(appended) => {
                appending.at = appended.size;
                appending.e_tag = appended.e_tag;
                Ok(())
            }
            Err(e) => {
                self.set_state(State::Failed(e.to_string()));
                Err(Error::Store(e))
            }
        }
    }

    /// Hands `data` to the upload; a failure aborts it.
    async fn send(&mut self, data: Bytes) -> Result<()> {
        let Some(upload) = self.upload.as_mut() else {
            return Err(self.closed());
        };
        if let Err(e) = upload.write(data).await {
            // The writer aborted the upload.
            self.upload = None;
            self.set_state(State::Failed(e.to_string()));
            return Err(Error::Store(e));
        }
        Ok(())
    }

    /// Completes the upload (once); returns the new object's ETag.
    pub(crate) async fn finish(&mut self) -> Result<Option<String>> {
        match &self.state {
            State::Open => {}
            State::Done(etag) => return Ok(etag.clone()),
            State::Failed(reason) => return Err(self.failure(reason)),
            State::Discarded => return Ok(None),
        }
        if self.appending.is_some() {
            self.append_pending().await?;
            self.dirty = false;
            let e_tag = self.appending.as_ref().and_then(|a| a.e_tag.clone());
            self.set_state(State::Done(e_tag.clone()));
            return Ok(e_tag);
        }
        if !self.dirty {
            // Opened without O_TRUNC and not written: the object stays as it is.
            if let Some(upload) = self.upload.take() {
                let _ = upload.abort().await;
            }
            let etag = self.previous.as_ref().and_then(|p| p.etag.clone());
            self.set_state(State::Done(etag.clone()));
            return Ok(etag);
        }
        if let Some(held) = &self.held {
            let whole = Bytes::copy_from_slice(held);
            self.send(whole).await?;
        }
        let Some(upload) = self.upload.take() else {
            return Err(self.closed());
        };
        match upload.finish().await {
            Ok(put) => {
                self.dirty = false;
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

    /// The name was deleted: aborts the upload if there is one; later writes and closes
    /// succeed and upload nothing. Returns whether the upload was still open.
    pub(crate) async fn discard(&mut self) -> bool {
        let was_open = self.is_open();
        if let Some(upload) = self.upload.take()
            && let Err(e) = upload.abort().await
        {
            tracing::warn!(key = %self.key, error = %e, "mount: aborting an upload failed");
        }
        self.set_state(State::Discarded);
        was_open
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
