//! [`CheckpointReader`]: parallel ranged GETs of one checkpoint, pinned to the version that was
//! there when it was opened (If-Match on its ETag), so a checkpoint overwritten mid-read fails
//! loudly instead of mixing two versions.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use bucketload_store::ETag;
use bucketload_store::object_store::path::Path;
use bucketload_store::object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use bytes::{Bytes, BytesMut};
use futures::{StreamExt, TryStreamExt, stream};
use tokio::task::JoinHandle;

use super::local::io_error;
use super::{Checkpoints, Target};
use crate::{Error, Result};

/// Reads one checkpoint; cheap to share (`Arc`) between tasks.
#[derive(Debug)]
pub struct CheckpointReader {
    source: Source,
    uri: String,
    size: u64,
    part_size: u64,
    concurrency: usize,
}

#[derive(Debug)]
enum Source {
    Object {
        object: bucketload_store::Object,
        objects: Arc<dyn ObjectStore>,
        key: Path,
        /// The version opened, in the store's `If-Match` spelling.
        if_match: Option<String>,
    },
    Local(PathBuf),
}

impl CheckpointReader {
    pub(super) async fn open(ckpt: &Checkpoints, name: &str) -> Result<CheckpointReader> {
        let uri = ckpt.uri_of(name);
        let (source, size) = match &ckpt.target {
            Target::Object(store) => {
                let object = ckpt.object(store, name)?;
                let (objects, key) = (Arc::clone(object.store()), object.path().clone());
                let meta = match objects.head(&key).await {
                    Ok(meta) => meta,
                    Err(e) => {
                        let err = crate::Error::Store(object.map_error(e));
                        let location = crate::base::Location::from_store(store);
                        return Err(location.explain_not_found(err).await);
                    }
                };
                let source = Source::Object {
                    object: object.clone(),
                    objects,
                    key,
                    if_match: ETag::from_store(meta.e_tag.as_deref()).map(|e| store.if_match(&e)),
                };
                (source, meta.size)
            }
            Target::Local(dir) => {
                let path = dir.join(name);
                let meta = tokio::fs::metadata(&path)
                    .await
                    .map_err(|e| io_error(&path, "open the checkpoint", e))?;
                (Source::Local(path), meta.len())
            }
        };
        Ok(CheckpointReader {
            source,
            uri,
            size,
            part_size: ckpt.config.part_size.max(1),
            concurrency: ckpt.config.parts_in_flight.max(1),
        })
    }

    /// The checkpoint's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The checkpoint's full URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Bytes `range` of the checkpoint (one ranged GET, or one `pread`).
    pub async fn read_range(&self, range: Range<u64>) -> Result<Bytes> {
        let range = range.start.min(self.size)..range.end.min(self.size);
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let expected = range.end - range.start;
        let bytes = match &self.source {
            Source::Object {
                object,
                objects,
                key,
                if_match,
            } => {
                let opts = GetOptions {
                    range: Some(GetRange::Bounded(range.clone())),
                    if_match: if_match.clone(),
                    ..GetOptions::default()
                };
                let got = objects.get_opts(key, opts).await;
                let got = match got {
                    Ok(got) => got.bytes().await,
                    Err(e) => Err(e),
                };
                got.map_err(|e| self.changed_or(object, e))?
            }
            Source::Local(path) => {
                let (path, start) = (path.clone(), range.start);
                let len = usize::try_from(expected).unwrap_or(usize::MAX);
                tokio::task::spawn_blocking(move || pread(&path, start, len))
                    .await
                    .map_err(|e| Error::Task {
                        reason: e.to_string(),
                    })??
            }
        };
        if bytes.len() as u64 != expected {
            return Err(Error::Corrupt {
                uri: self.uri.clone(),
                reason: format!(
                    "bytes {}-{} came back as {} bytes instead of {expected}",
                    range.start,
                    range.end - 1,
                    bytes.len()
                ),
            });
        }
        Ok(bytes)
    }

    fn changed_or(
        &self,
        object: &bucketload_store::Object,
        e: bucketload_store::object_store::Error,
    ) -> Error {
        if matches!(
            e,
            bucketload_store::object_store::Error::Precondition { .. }
        ) {
            return Error::Corrupt {
                uri: self.uri.clone(),
                reason: "the checkpoint was overwritten while it was being read; read it again"
                    .to_owned(),
            };
        }
        Error::Store(object.map_error(e))
    }

    /// The whole checkpoint in one buffer: `parts_in_flight` ranged GETs of `part_size` at
    /// once, copied into place in order.
    pub async fn read_all(&self) -> Result<Bytes> {
        let size = usize::try_from(self.size)
            .map_err(|_| Error::invalid_input(format!("{} does not fit in memory", self.uri)))?;
        let mut out = BytesMut::with_capacity(size);
        let mut parts = stream::iter(ranges(self.size, self.part_size))
            .map(|r| self.read_range(r))
            .buffered(self.concurrency);
        while let Some(part) = parts.try_next().await? {
            out.extend_from_slice(&part);
        }
        Ok(out.freeze())
    }

    /// `std::io::Read + Seek` over this checkpoint for a thread outside the runtime (e.g.
    /// `torch.load` from Python), reading ahead `parts_in_flight` parts while reads go forward.
    /// The first parts are requested at once (readers start at the beginning), and the last
    /// part is kept aside once read (zip readers such as `torch.load` read the directory at
    /// the end first, then the records from the start).
    pub fn into_blocking(self, runtime: tokio::runtime::Handle) -> BlockingReader {
        let mut reader = BlockingReader {
            reader: Arc::new(self),
            runtime,
            pos: 0,
            current: None,
            tail: None,
            ahead: BTreeMap::new(),
        };
        reader.read_ahead(0, reader.reader.concurrency as u64);
        reader
    }
}

fn ranges(size: u64, part: u64) -> impl Iterator<Item = Range<u64>> {
    (0..size.div_ceil(part)).map(move |i| i * part..size.min((i + 1) * part))
}

fn pread(path: &std::path::Path, start: u64, len: usize) -> Result<Bytes> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).map_err(|e| io_error(path, "open", e))?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, start)
        .map_err(|e| io_error(path, "read", e))?;
    Ok(Bytes::from(buf))
}

/// [`CheckpointReader`] as `std::io::Read + Seek`; see [`CheckpointReader::into_blocking`].
#[derive(Debug)]
pub struct BlockingReader {
    reader: Arc<CheckpointReader>,
    runtime: tokio::runtime::Handle,
    pos: u64,
    /// The part under `pos`: (index, bytes).
    current: Option<(u64, Bytes)>,
    /// The last part, once read out of order (a zip file's directory).
    tail: Option<Bytes>,
    /// Parts being read ahead, by index.
    ahead: BTreeMap<u64, JoinHandle<Result<Bytes>>>,
}

impl BlockingReader {
    /// The checkpoint's size in bytes.
    pub fn size(&self) -> u64 {
        self.reader.size
    }

    fn part_range(&self, index: u64) -> Range<u64> {
        let part = self.reader.part_size;
        index * part..self.reader.size.min((index + 1) * part)
    }

    fn parts(&self) -> u64 {
        self.reader.size.div_ceil(self.reader.part_size)
    }

    /// Starts reading parts `from..from + n` (those that exist and are not under way).
    fn read_ahead(&mut self, from: u64, n: u64) {
        for next in from..(from + n).min(self.parts()) {
            if !self.ahead.contains_key(&next) {
                let (reader, range) = (Arc::clone(&self.reader), self.part_range(next));
                let task = self
                    .runtime
                    .spawn(async move { reader.read_range(range).await });
                self.ahead.insert(next, task);
            }
        }
    }

    /// Part `index`: read ahead already, or read now.
    fn fetch(&mut self, index: u64) -> Result<Bytes> {
        match self.ahead.remove(&index) {
            Some(task) => self.runtime.block_on(task).map_err(|e| Error::Task {
                reason: e.to_string(),
            })?,
            None => {
                let range = self.part_range(index);
                self.runtime.block_on(self.reader.read_range(range))
            }
        }
    }

    /// Makes part `index` current, and reads ahead the parts after it.
    fn load(&mut self, index: u64) -> Result<()> {
        // Parts behind the reader, or beyond the window after a jump back, are not needed.
        let window = index..=index + self.reader.concurrency as u64;
        let stale: Vec<u64> = self
            .ahead
            .keys()
            .copied()
            .filter(|i| !window.contains(i))
            .collect();
        for i in stale {
            if let Some(task) = self.ahead.remove(&i) {
                task.abort();
            }
        }
        // The next parts go out before waiting for this one, so the window stays full.
        self.read_ahead(index + 1, self.reader.concurrency as u64);
        let bytes = self.fetch(index)?;
        self.current = Some((index, bytes));
        Ok(())
    }

    /// The bytes of the part under `pos` (a handle, not a copy) and the offset of `pos` in
    /// them.
    fn part_at_pos(&mut self) -> Result<(Bytes, usize)> {
        let index = self.pos / self.reader.part_size;
        let offset = usize::try_from(self.pos - index * self.reader.part_size).unwrap_or(0);
        let is_current = self.current.as_ref().is_some_and(|(i, _)| *i == index);
        let last = self.parts().saturating_sub(1);
        if !is_current && index == last && index > 0 {
            // The last part, read before the parts in front of it: keep it aside and leave
            // the read-ahead of the first parts alone.
            let tail = match &self.tail {
                Some(tail) => tail.clone(),
                None => self.fetch(index)?,
            };
            self.tail = Some(tail.clone());
            return Ok((tail, offset));
        }
        if !is_current {
            self.load(index)?;
        }
        match &self.current {
            Some((_, bytes)) => Ok((bytes.clone(), offset)),
            None => Err(Error::Task {
                reason: "checkpoint part missing after it was read".to_owned(),
            }),
        }
    }

    fn drop_read_ahead(&mut self) {
        for (_, task) in std::mem::take(&mut self.ahead) {
            task.abort();
        }
    }
}

impl Read for BlockingReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() || self.pos >= self.reader.size {
            return Ok(0);
        }
        let (bytes, offset) = self.part_at_pos().map_err(std::io::Error::other)?;
        let n = buf.len().min(bytes.len().saturating_sub(offset));
        buf[..n].copy_from_slice(&bytes[offset..offset + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for BlockingReader {
    /// Moves the position; what was read ahead stays until a read shows it is not needed.
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let size = self.reader.size as i128;
        let target = match to {
            SeekFrom::Start(n) => i128::from(n),
            SeekFrom::End(d) => size + i128::from(d),
            SeekFrom::Current(d) => i128::from(self.pos) + i128::from(d),
        };
        let Ok(pos) = u64::try_from(target) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("seek to {target}, before the start of {}", self.reader.uri),
            ));
        };
        self.pos = pos;
        Ok(pos)
    }
}

impl Drop for BlockingReader {
    fn drop(&mut self) {
        self.drop_read_ahead();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_the_checkpoint() {
        let r: Vec<_> = ranges(10, 4).collect();
        assert_eq!(r, vec![0..4, 4..8, 8..10]);
        assert_eq!(ranges(0, 4).count(), 0);
        assert_eq!(ranges(8, 4).count(), 2);
    }
}
