//! Files open for writing: when the upload completes, what `close` returns, and what the name
//! shows when the upload fails.
//!
//! The upload of an open file completes at the first of:
//! - a `flush` (a `close`) by the process that opened the file, once at least one byte was
//!   written (and, opened without `O_TRUNC`, changed). A flush before any write does nothing: shells (`echo x > f`) and `dd` open the
//!   file, `dup2` it and close the original descriptor before writing. A flush from another
//!   process (a forked child closing its copy) does nothing either;
//! - an `fsync`;
//! - the `release` of the open file (its last descriptor closed), which the kernel sends after
//!   `close` returned; an empty file (`: > f`, `touch f`) is completed there.
//!
//! A flush by the opener when a signal killed it abandons the upload instead: the kernel closes
//! a killed program's descriptors, and a half-written file must not replace the object. A write
//! the mount refuses (out of order) or a refused `ftruncate` abandons it too. A store failure
//! fails the upload; in every case the name goes back to what the store holds (a new file
//! disappears, a replaced one shows the old object) and every later write and close of the
//! handle fails with `EIO`.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bucketload_store::MultipartOptions;
use bytes::Bytes;
use tokio::sync::Mutex as AsyncMutex;

use super::{Fs, Handle, OpenMode};
use crate::error::{Error, Result, errno};
use crate::memory::Reservation;
use crate::process;
use crate::tree::{Checked, Kind, Stat, join};
use crate::write::{FileWriter, Start, State};

impl Fs {
    /// Closes every handle at unmount: the upload of a file still open for writing is aborted,
    /// as a program killed with it open would have it (the object stays as it was).
    pub async fn shutdown(&self) {
        let handles: Vec<Handle> = self.handles().drain().map(|(_, h)| h).collect();
        for handle in handles {
            if let Handle::Write(ino, writer) = handle {
                let mut writer = writer.lock().await;
                if writer.is_open() {
                    writer
                        .abandon("the mount was unmounted with the file open")
                        .await;
                    self.settle_failed(ino, &writer);
                }
            }
        }
    }

    /// Whether a file opened with `mode` is appended to: `O_APPEND` on an S3 Express One Zone
    /// directory bucket, which appends to an object where it stands (see `crate::write`).
    pub(super) fn appends(&self, mode: OpenMode) -> bool {
        mode.append && self.inner.store.is_directory_bucket()
    }

    pub(super) fn check_replace(&self, key: &str) -> Result<()> {
        self.refuse_if_read_only(key)?;
        if !self.inner.config.allow_overwrite {
            return Err(Error::refused(
                key,
                errno::EPERM,
                "replacing an existing object needs --allow-overwrite",
            ));
        }
        Ok(())
    }

    /// Reserves memory for a writer: all its parts in flight if free, fewer if not, and waits
    /// for two (one filling, one uploading) when even those are taken.
    async fn writer_memory(&self, key: &str) -> Result<(Reservation, usize)> {
        let part = self.inner.config.part_size;
        let memory = &self.inner.read.memory;
        let mut parts = self.inner.config.upload_concurrency;
        while parts > 1 {
            if let Some(r) = memory.try_reserve((parts as u64 + 1) * part) {
                return Ok((r, parts));
            }
            parts /= 2;
        }
        match memory.reserve(2 * part).await {
            Some(r) => Ok((r, 1)),
            None => Err(Error::refused(
                key,
                errno::ENOMEM,
                format!(
                    "writing needs two parts of {part} bytes and the mount's --memory-limit ({} \
                     bytes) stayed full; close other files or raise --memory-limit",
                    memory.limit()
                ),
            )),
        }
    }

    /// What a program that opened `ino` for writing without `O_TRUNC` starts from: the object,
    /// read into memory, if it is at most one part (`--part-size`); else only its size.
    pub(super) async fn load_for_edit(&self, ino: u64, key: &str) -> Result<Start> {
        let stat = self.getattr(ino).await?;
        let limit = self.inner.config.part_size;
        if stat.size > limit {
            return Ok(Start::TooLarge(stat.size));
        }
        let etag = self
            .tree()
            .get(ino)
            .and_then(|n| bucketload_store::ETag::from_store(n.etag.as_deref()));
        let options = bucketload_store::object_store::GetOptions {
            if_match: etag.map(|e| self.inner.store.if_match(&e)),
            ..Default::default()
        };
        let path = bucketload_store::key_path(key);
        let store = self.inner.store.object_store();
        let got = match store.get_opts(&path, options).await {
            Ok(got) => got.bytes().await,
            Err(e) => Err(e),
        };
        got.map(|b| Start::Content(b.to_vec()))
            .map_err(|e| self.map(key, e))
    }

    /// Opens `ino` for writing by thread `pid` from `start`.
    pub(super) async fn start_writer(
        &self,
        ino: u64,
        key: &str,
        pid: u32,
        start: Start,
    ) -> Result<u64> {
        let (memory, parts) = self.writer_memory(key).await?;
        let opts = MultipartOptions {
            part_size: self.inner.config.part_size,
            concurrency: parts,
        };
        let owner = process::process_of(pid);
        let mut tree = self.tree();
        let node = tree.get_mut(ino).ok_or_else(|| Error::not_found(key))?;
        if node.writing {
            return Err(Error::refused(
                key,
                errno::EBUSY,
                "the file is already being written",
            ));
        }
        let writer = FileWriter::new(&self.inner.store, key, opts, owner, node.saved(), memory)
            .with_start(start);
        node.writing = true;
        node.size = writer.written();
        node.mtime = SystemTime::now();
        drop(tree);
        Ok(self.add_handle(Handle::Write(ino, Arc::new(AsyncMutex::new(writer)))))
    }

    /// Creates `name` in `parent` and opens it for writing; an existing file is opened as
    /// [`Fs::open`] opens it (the kernel creates when its dentry cache did not know the name).
    pub async fn create(
        &self,
        parent: u64,
        name: &str,
        mode: OpenMode,
        pid: u32,
    ) -> Result<(Stat, u64)> {
        let parent_key = self.dir_key(parent)?;
        let key = join(&parent_key, name);
        self.refuse_if_read_only(&key)?;
        let ino = match self.lookup(parent, name).await {
            Ok(stat) if stat.kind == Kind::Dir => {
                return Err(Error::refused(&key, errno::EISDIR, "is a directory"));
            }
            Ok(stat) => {
                let replace = OpenMode {
                    write: true,
                    ..mode
                };
                return self.opened(stat.ino, self.open(stat.ino, replace, pid).await?);
            }
            Err(Error::NotFound { .. }) => {
                if !self.appends(mode) {
                    refuse_append(&key, mode)?;
                }
                self.tree().insert_local(parent, name, Kind::File)
            }
            Err(e) => return Err(e),
        };
        match self.start_writer(ino, &key, pid, Start::Empty).await {
            Ok(fh) => self.opened(ino, fh),
            Err(e) => {
                self.tree().unlink(ino);
                Err(e)
            }
        }
    }

    /// The attributes of a file just opened for writing as `fh`.
    fn opened(&self, ino: u64, fh: u64) -> Result<(Stat, u64)> {
        let stat = self.tree().get(ino).map(|n| n.stat(ino));
        match stat {
            Some(stat) => Ok((stat, fh)),
            None => {
                // Not reachable while the handle marks the node as written; never leak it.
                self.handles().remove(&fh);
                Err(Error::refused(
                    "",
                    errno::ENOENT,
                    format!("inode {ino} is gone"),
                ))
            }
        }
    }

    fn writer(&self, fh: u64) -> Result<(u64, Arc<AsyncMutex<FileWriter>>)> {
        match self.handle(fh)? {
            Handle::Write(ino, writer) => Ok((ino, writer)),
            _ => Err(Error::refused(
                "",
                errno::EBADF,
                "the file is not open for writing",
            )),
        }
    }

    /// Writes `data` at `offset` of a file open for writing.
    pub async fn write(&self, fh: u64, offset: u64, data: Bytes) -> Result<u32> {
        let (ino, writer) = self.writer(fh)?;
        let mut writer = writer.lock().await;
        if writer.can_reopen() {
            self.reopen(ino, &mut writer).await?;
        }
        let was_open = writer.is_open();
        let result = writer.write(offset, data).await;
        match &result {
            Ok(_) => {
                if let Some(node) = self.tree().get_mut(ino) {
                    node.size = writer.written();
                }
            }
            Err(_) if was_open && !writer.is_open() => self.settle_failed(ino, &writer),
            Err(_) => {}
        }
        result
    }

    /// A write after the upload completed (the writer kept the bytes): continues the object if
    /// the name still stands for it (not renamed, deleted or opened again), else `EBADF`.
    async fn reopen(&self, ino: u64, writer: &mut FileWriter) -> Result<()> {
        {
            let mut tree = self.tree();
            match tree.get_mut(ino) {
                Some(node) if node.key == writer.key() && !node.writing => node.writing = true,
                _ => {
                    return Err(Error::refused(
                        writer.key(),
                        errno::EBADF,
                        "the file was closed and uploaded, then renamed, deleted or opened \
                         again; open it again (with O_TRUNC) to write more",
                    ));
                }
            }
        }
        if let Err(e) = writer.reopen().await {
            self.settle_failed(ino, writer);
            return Err(e);
        }
        Ok(())
    }

    /// `close` of a descriptor; see the module docs for when it completes the upload.
    pub async fn flush(&self, fh: u64, pid: u32) -> Result<()> {
        let Handle::Write(ino, writer) = self.handle(fh)? else {
            return Ok(());
        };
        let mut writer = writer.lock().await;
        match writer.state() {
            State::Failed(reason) => return Err(writer.failure(reason)),
            State::Done(_) | State::Discarded => return Ok(()),
            State::Open => {}
        }
        if process::process_of(pid) != writer.owner {
            return Ok(());
        }
        if process::killed(pid) {
            let reason = "the program was killed before it closed the file";
            writer.abandon(reason).await;
            self.settle_failed(ino, &writer);
            return Err(writer.failure(reason));
        }
        if writer.written() == 0 || !writer.changed() {
            // `dd` and shells close the descriptor they opened before writing through its
            // copy; a file opened without O_TRUNC has nothing new until written.
            tracing::debug!(
                key = writer.key(),
                "mount: close before any write; not completed"
            );
            return Ok(());
        }
        self.complete(ino, &mut writer).await
    }

    /// `fsync` of a file being written completes its upload: the bytes are then durable in the
    /// store.
    pub async fn fsync(&self, fh: u64) -> Result<()> {
        match self.handle(fh)? {
            Handle::Write(ino, writer) => self.complete(ino, &mut *writer.lock().await).await,
            _ => Ok(()),
        }
    }

    /// The last descriptor of an open file is closed: completes an upload not yet completed.
    /// The kernel does not pass this result on to the program; the adapter logs it.
    ///
    /// The handle stays in the table until its upload settled, so that an `unlink` of the name
    /// finds it and waits for it.
    pub async fn release(&self, fh: u64) -> Result<()> {
        let handle = self.handles().get(&fh).cloned();
        let result = match handle {
            Some(Handle::Write(ino, writer)) => self.complete(ino, &mut *writer.lock().await).await,
            _ => Ok(()),
        };
        self.handles().remove(&fh);
        result
    }

    /// The name of `ino` is being deleted: every upload to it is aborted and makes no object
    /// (its handles' later writes and closes succeed and upload nothing), and the name shows
    /// what the store holds. Waits for an upload completing now (a release just after the
    /// program's `close`); the object it made is then in the store.
    pub(super) async fn discard_writers(&self, ino: u64, key: &str) {
        let writers: Vec<_> = self
            .handles()
            .values()
            .filter_map(|h| match h {
                Handle::Write(i, w) if *i == ino => Some(w.clone()),
                _ => None,
            })
            .collect();
        for writer in writers {
            let mut writer = writer.lock().await;
            // A handle that wrote the file under another name before a rename keeps its own.
            if writer.key() == key && writer.discard().await {
                self.settle_failed(ino, &writer);
            }
        }
    }

    /// Completes the upload unless it is done (`Ok`) or failed (its error).
    async fn complete(&self, ino: u64, writer: &mut FileWriter) -> Result<()> {
        if !writer.is_open() {
            return writer.finish().await.map(|_| ());
        }
        match writer.finish().await {
            Ok(etag) => {
                self.settle_done(ino, writer, etag);
                Ok(())
            }
            Err(e) => {
                self.settle_failed(ino, writer);
                Err(e)
            }
        }
    }

    /// The upload completed: the name stands for the new object.
    fn settle_done(&self, ino: u64, writer: &mut FileWriter, etag: Option<String>) {
        let mut tree = self.tree();
        let Some(node) = tree.get_mut(ino).filter(|n| n.key == writer.key()) else {
            return;
        };
        node.writing = false;
        node.local = false;
        node.size = writer.written();
        node.etag = etag;
        node.mtime = SystemTime::now();
        node.checked = Checked::At(Instant::now());
        writer.previous = node.saved();
    }

    /// The upload failed: the name shows what the store holds, the object it would have
    /// replaced or nothing.
    fn settle_failed(&self, ino: u64, writer: &FileWriter) {
        let mut tree = self.tree();
        let Some(node) = tree.get_mut(ino).filter(|n| n.key == writer.key()) else {
            return;
        };
        node.writing = false;
        match &writer.previous {
            Some(saved) => node.restore(saved),
            None => tree.unlink(ino),
        }
    }

    /// Changes a file's size: only to what it already is (e.g. `O_TRUNC` of a file being
    /// written from scratch); anything else is `ENOTSUP`, and abandons the upload of `fh` (an
    /// `ftruncate` of a file being written), which could not hold what the program meant.
    pub async fn truncate(&self, ino: u64, size: u64, fh: Option<u64>) -> Result<Stat> {
        let stat = self.getattr(ino).await?;
        let (key, _) = self.node_key(ino)?;
        if stat.kind == Kind::Dir {
            return Err(Error::refused(&key, errno::EISDIR, "is a directory"));
        }
        let writer = fh.and_then(|fh| self.writer(fh).ok());
        let size_now = match &writer {
            Some((_, w)) => w.lock().await.written(),
            None => stat.size,
        };
        if size_now == size {
            return Ok(stat);
        }
        self.refuse_if_read_only(&key)?;
        if let Some((ino, writer)) = &writer {
            // A file held in memory (at most one part) is resized there, also after a close or
            // fsync uploaded it (the next completion uploads it again).
            let mut writer = writer.lock().await;
            if writer.can_reopen() && size <= self.inner.config.part_size {
                self.reopen(*ino, &mut writer).await?;
            }
            if writer.resize(size) {
                let mut tree = self.tree();
                let node = tree.get_mut(*ino).ok_or_else(|| Error::not_found(&key))?;
                node.size = size;
                return Ok(node.stat(*ino));
            }
        }
        let reason = "objects cannot be resized in place; write the whole file again with O_TRUNC";
        if let Some((ino, writer)) = writer {
            let mut writer = writer.lock().await;
            if writer.is_open() {
                writer.abandon(reason).await;
                self.settle_failed(ino, &writer);
            }
        }
        Err(Error::refused(&key, errno::ENOTSUP, reason))
    }
}

/// Appends are refused on a general purpose bucket: it has no append, and rewriting the object
/// whole would silently drop what another writer appended in between. A directory bucket
/// appends ([`Fs::appends`]).
pub(super) fn refuse_append(key: &str, mode: OpenMode) -> Result<()> {
    match mode.append {
        true => Err(Error::refused(
            key,
            errno::ENOTSUP,
            "appending to an object is not supported on a general purpose bucket (an S3 Express One Zone directory bucket appends); write the whole file again (O_TRUNC) or a new file",
        )),
        false => Ok(()),
    }
}
