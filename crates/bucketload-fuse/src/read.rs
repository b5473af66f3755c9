//! Reading one object through an open handle.
//!
//! - **Small objects** (at most one part, 8 MiB by default) are read whole on the first read:
//!   one GET, from the disk cache when it holds the same ETag and size, inserted into it after.
//!   Later reads are slices of the same bytes.
//! - **Sequential reads** of larger objects go through the engine's prefetcher
//!   ([`read_range`]): its window starts at 1 MiB and doubles as the reader drains it, up to
//!   64 MiB or what the memory budget allows. With a disk cache they are read instead in
//!   part-sized blocks aligned on part boundaries, as many in flight as the window holds, each
//!   from the cache when it holds the same version. A read just ahead of the stream skips forward; a
//!   read up to [`BACK`] behind it is served from bytes kept (the kernel's asynchronous reads
//!   arrive slightly out of order).
//! - **Random reads** (a jump the stream cannot serve, not continuing the previous read) are one
//!   ranged GET each; a read that continues the previous one starts a new stream there.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use bucketload::base::Location;
use bucketload::io::{DiskCache, PrefetchConfig, PrefetchCounters, read_range};
use bucketload_cache::{CacheKey, ObjectVersion};
use bucketload_store::object_store::path::Path;
use bucketload_store::object_store::{GetOptions, GetRange};
use bucketload_store::{ETag, Store};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use futures::stream::BoxStream;

use crate::error::{Error, Result, errno};
use crate::memory::{Memory, Reservation};

/// Bytes kept behind the stream's position for reads that arrive out of order: the kernel
/// issues readahead in parallel, up to its readahead size (at most 1 MiB here).
pub(crate) const BACK: u64 = 2 << 20;
/// The farthest a read may land ahead of the stream and still be served by it (skipping).
const FORWARD: u64 = 16 << 20;
/// The smallest prefetch window worth a stream; below it reads are single ranged GETs.
const MIN_WINDOW: u64 = 1 << 20;

/// What every reader shares.
#[derive(Debug, Clone)]
pub(crate) struct ReadContext {
    pub(crate) store: Store,
    pub(crate) location: Location,
    pub(crate) memory: Memory,
    pub(crate) cache: Option<DiskCache>,
    pub(crate) prefetch: PrefetchConfig,
    pub(crate) counters: Arc<PrefetchCounters>,
    /// Objects up to this size are read whole.
    pub(crate) whole_limit: u64,
}

/// One open file's reader.
#[derive(Debug)]
pub(crate) struct FileReader {
    ctx: ReadContext,
    key: Path,
    size: u64,
    /// The version opened: reads ask the store for it (`If-Match`) and fail if it changed.
    etag: Option<ETag>,
    whole: Option<(Bytes, Reservation)>,
    seq: Option<Seq>,
    /// End of the previous read: a read starting here is sequential.
    last_end: u64,
}

/// A sequential stream and the bytes it has produced that are still kept.
struct Seq {
    stream: BoxStream<'static, bucketload::Result<Bytes>>,
    /// Offset of the first kept byte.
    start: u64,
    /// Kept chunks, contiguous from `start`.
    chunks: VecDeque<Bytes>,
    /// Offset just past the last kept byte: where the stream continues.
    end: u64,
    _memory: Reservation,
}

impl std::fmt::Debug for Seq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seq")
            .field("start", &self.start)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

impl FileReader {
    pub(crate) fn new(ctx: ReadContext, key: &str, size: u64, etag: Option<ETag>) -> Self {
        FileReader {
            ctx,
            key: bucketload_store::key_path(key),
            size,
            etag,
            whole: None,
            seq: None,
            last_end: 0,
        }
    }

    /// Up to `len` bytes at `offset` (fewer only at the end of the object).
    pub(crate) async fn read(&mut self, offset: u64, len: u32) -> Result<Bytes> {
        let end = self.size.min(offset.saturating_add(u64::from(len)));
        if offset >= end {
            return Ok(Bytes::new());
        }
        let range = offset..end;
        let bytes = if self.size <= self.ctx.whole_limit {
            self.read_whole(range).await?
        } else {
            self.read_large(range).await?
        };
        self.last_end = end;
        Ok(bytes)
    }

    async fn read_whole(&mut self, range: Range<u64>) -> Result<Bytes> {
        if self.whole.is_none() {
            let memory = self
                .ctx
                .memory
                .reserve(self.size)
                .await
                .ok_or_else(|| self.no_memory(self.size))?;
            let bytes = self.fetch_whole().await?;
            self.whole = Some((bytes, memory));
        }
        let Some((bytes, _)) = &self.whole else {
            return Ok(Bytes::new());
        };
        let (start, end) = (to_usize(range.start), to_usize(range.end).min(bytes.len()));
        Ok(bytes.slice(start.min(end)..end))
    }

    /// The version a cache entry must have been fetched as to be served.
    fn version(&self) -> ObjectVersion {
        ObjectVersion::with_etag(self.etag.clone(), self.size)
    }

    /// `If-Match` of the version opened, spelled as the store expects it.
    fn if_match(&self) -> Option<String> {
        self.etag.as_ref().map(|e| self.ctx.store.if_match(e))
    }

    fn cache_key(&self) -> CacheKey {
        CacheKey::new(self.ctx.store.uri().to_string(), self.key.as_ref())
    }

    /// The whole object: from the disk cache when it holds this version, else one GET.
    async fn fetch_whole(&self) -> Result<Bytes> {
        if let Some(cache) = &self.ctx.cache
            && let Some(bytes) = cache.get(&self.cache_key(), &self.version()).await
        {
            return Ok(bytes);
        }
        let opts = GetOptions {
            if_match: self.if_match(),
            ..GetOptions::default()
        };
        let store = self.ctx.store.object_store();
        let got = async {
            let response = store.get_opts(&self.key, opts).await?;
            let version = returned(&response.meta);
            Ok((response.bytes().await?, version))
        };
        let (bytes, version) = got.await.map_err(|e| self.store_error(e))?;
        if bytes.len() as u64 != self.size || version.size != self.size {
            return Err(self.changed());
        }
        if let Some(cache) = &self.ctx.cache {
            // Filed under the version the store returned, never the one expected.
            cache
                .insert(&self.cache_key(), &version, bytes.clone())
                .await;
        }
        Ok(bytes)
    }

    async fn read_large(&mut self, range: Range<u64>) -> Result<Bytes> {
        if let Some(seq) = &mut self.seq
            && range.start >= seq.start
            && range.start <= seq.end.saturating_add(FORWARD)
        {
            return seq.read(range).await.map_err(Error::from);
        }
        let sequential = range.start == self.last_end || range.start == 0;
        if sequential {
            self.seq = None;
            if let Some(seq) = self.start_stream(range.start) {
                let seq = self.seq.insert(seq);
                return seq.read(range).await.map_err(Error::from);
            }
        }
        self.read_range_once(range).await
    }

    /// A stream from `offset` with as large a window as memory allows, or none.
    fn start_stream(&self, offset: u64) -> Option<Seq> {
        let mut window = self.ctx.prefetch.max_window;
        let part = self.ctx.prefetch.part_size;
        loop {
            // The window, a part being handed over, and the bytes kept behind.
            if let Some(memory) = self.ctx.memory.try_reserve(window + part + BACK) {
                let config = self.ctx.prefetch.with_max_window(window);
                let config = match config.first_request > window {
                    true => config.with_first_request(window),
                    false => config,
                };
                let stream = match &self.ctx.cache {
                    Some(cache) => self.cached_stream(offset, window, cache.clone()),
                    None => read_range(
                        self.ctx.location.clone(),
                        self.key.clone(),
                        offset..self.size,
                        config,
                        Arc::clone(&self.ctx.counters),
                    ),
                };
                return Some(Seq {
                    stream,
                    start: offset,
                    chunks: VecDeque::new(),
                    end: offset,
                    _memory: memory,
                });
            }
            window /= 2;
            if window < MIN_WINDOW {
                tracing::debug!(key = %self.key, "mount: memory limit reached; reading without prefetch");
                return None;
            }
        }
    }

    /// With a disk cache: the object in blocks of one part, aligned on part boundaries so that
    /// every reader asks for the same blocks; each block from the cache when it holds this
    /// version, else one ranged GET (`If-Match` the ETag) inserted after. As many blocks in
    /// flight as the window holds, in order.
    fn cached_stream(
        &self,
        offset: u64,
        window: u64,
        cache: DiskCache,
    ) -> BoxStream<'static, bucketload::Result<Bytes>> {
        let part = self.ctx.prefetch.part_size.max(1);
        let first = offset / part * part;
        let size = self.size;
        let ranges = (first..size)
            .step_by(to_usize(part))
            .map(move |start| start..size.min(start + part));
        let block = Block {
            store: self.ctx.store.clone(),
            key: self.key.clone(),
            if_match: self.if_match(),
            version: self.version(),
            cache,
        };
        let skip = to_usize(offset - first);
        futures::stream::iter(ranges)
            .map(move |range| block.clone().fetch(range))
            .buffered(to_usize((window / part).max(1)))
            .enumerate()
            .map(move |(i, got)| match (i, got) {
                (0, Ok(bytes)) => Ok(bytes.slice(skip.min(bytes.len())..)),
                (_, got) => got,
            })
            .boxed()
    }

    /// One ranged GET.
    async fn read_range_once(&self, range: Range<u64>) -> Result<Bytes> {
        let len = range.end - range.start;
        let _memory = self
            .ctx
            .memory
            .reserve(len)
            .await
            .ok_or_else(|| self.no_memory(len))?;
        let opts = GetOptions {
            range: Some(GetRange::Bounded(range.clone())),
            if_match: self.if_match(),
            ..GetOptions::default()
        };
        let store = self.ctx.store.object_store();
        let got = async { store.get_opts(&self.key, opts).await?.bytes().await }.await;
        let bytes = got.map_err(|e| self.store_error(e))?;
        if bytes.len() as u64 != len {
            return Err(self.changed());
        }
        Ok(bytes)
    }

    fn store_error(&self, e: bucketload_store::object_store::Error) -> Error {
        if matches!(
            e,
            bucketload_store::object_store::Error::Precondition { .. }
        ) {
            return self.changed();
        }
        Error::Store(self.ctx.store.map_error(e, &self.key))
    }

    fn changed(&self) -> Error {
        Error::refused(
            self.key.as_ref(),
            errno::EIO,
            format!(
                "{} is no longer the version the mount knows ({} bytes, ETag {}): it changed in \
                 the store; open it again, or remount if the dataset's manifest is stale",
                self.ctx.store.object_uri(&self.key),
                self.size,
                self.etag.as_ref().map_or("unknown", ETag::as_str)
            ),
        )
    }

    fn no_memory(&self, bytes: u64) -> Error {
        Error::refused(
            self.key.as_ref(),
            errno::ENOMEM,
            format!(
                "reading needs {bytes} bytes of buffer and the mount's --memory-limit ({} bytes) \
                 stayed full; close other files or raise --memory-limit",
                self.ctx.memory.limit()
            ),
        )
    }
}

/// What fetching one cached block needs.
#[derive(Debug, Clone)]
struct Block {
    store: Store,
    key: Path,
    if_match: Option<String>,
    version: ObjectVersion,
    cache: DiskCache,
}

impl Block {
    async fn fetch(self, range: Range<u64>) -> bucketload::Result<Bytes> {
        let key = CacheKey::new(self.store.uri().to_string(), self.key.as_ref())
            .with_range(range.clone());
        if let Some(bytes) = self.cache.get(&key, &self.version).await {
            return Ok(bytes);
        }
        let opts = GetOptions {
            range: Some(GetRange::Bounded(range.clone())),
            if_match: self.if_match.clone(),
            ..GetOptions::default()
        };
        let store = self.store.object_store();
        let got = async {
            let response = store.get_opts(&self.key, opts).await?;
            let version = returned(&response.meta);
            Ok((response.bytes().await?, version))
        };
        let (bytes, version) = got
            .await
            .map_err(|e| bucketload::Error::Store(self.store.map_error(e, &self.key)))?;
        if bytes.len() as u64 != range.end - range.start {
            return Err(bucketload::Error::Store(bucketload_store::Error::Corrupt {
                uri: self.store.object_uri(&self.key),
                detail: format!(
                    "bytes {}-{}: expected {} bytes, got {}",
                    range.start,
                    range.end - 1,
                    range.end - range.start,
                    bytes.len()
                ),
            }));
        }
        // Filed under the version the store returned, never the one expected.
        self.cache.insert(&key, &version, bytes.clone()).await;
        Ok(bytes)
    }
}

impl Seq {
    /// The bytes of `range`, pulling from the stream as needed; `range.start >= self.start`.
    async fn read(&mut self, range: Range<u64>) -> bucketload::Result<Bytes> {
        while self.end < range.end {
            match self.stream.next().await {
                Some(Ok(chunk)) => {
                    self.end += chunk.len() as u64;
                    self.chunks.push_back(chunk);
                }
                Some(Err(e)) => return Err(e),
                None => break,
            }
            self.trim(range.start.saturating_sub(BACK));
        }
        let out = self.copy(range.start..range.end.min(self.end));
        self.trim(range.end.saturating_sub(BACK));
        Ok(out)
    }

    /// Drops kept chunks that end at or before `offset`.
    fn trim(&mut self, offset: u64) {
        while let Some(front) = self.chunks.front() {
            let front_end = self.start + front.len() as u64;
            if front_end > offset {
                break;
            }
            self.start = front_end;
            self.chunks.pop_front();
        }
    }

    fn copy(&self, range: Range<u64>) -> Bytes {
        if range.start >= range.end {
            return Bytes::new();
        }
        let mut pos = self.start;
        let mut out: Option<BytesMut> = None;
        for chunk in &self.chunks {
            let chunk_end = pos + chunk.len() as u64;
            if chunk_end > range.start && pos < range.end {
                let from = to_usize(range.start.max(pos) - pos);
                let to = to_usize(range.end.min(chunk_end) - pos);
                // A read inside one chunk is a slice of it, without a copy.
                if out.is_none() && range.start >= pos && range.end <= chunk_end {
                    return chunk.slice(from..to);
                }
                out.get_or_insert_with(|| {
                    BytesMut::with_capacity(to_usize(range.end - range.start))
                })
                .extend_from_slice(&chunk[from..to]);
            }
            pos = chunk_end;
            if pos >= range.end {
                break;
            }
        }
        out.map(BytesMut::freeze).unwrap_or_default()
    }
}

/// The version a response's bytes are: its ETag and the whole object's size.
fn returned(meta: &bucketload_store::object_store::ObjectMeta) -> ObjectVersion {
    ObjectVersion::with_etag(ETag::from_store(meta.e_tag.as_deref()), meta.size)
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn seq(chunks: &[&'static [u8]], start: u64) -> Seq {
        let memory = Memory::new(1 << 20, std::time::Duration::ZERO)
            .try_reserve(0)
            .unwrap();
        let chunks: VecDeque<Bytes> = chunks.iter().map(|c| Bytes::from_static(c)).collect();
        let end = start + chunks.iter().map(|c| c.len() as u64).sum::<u64>();
        Seq {
            stream: futures::stream::empty().boxed(),
            start,
            chunks,
            end,
            _memory: memory,
        }
    }

    #[test]
    fn copies_across_chunk_boundaries() {
        let s = seq(&[b"abc", b"def", b"gh"], 10);
        assert_eq!(s.copy(10..13), "abc");
        assert_eq!(s.copy(11..12), "b");
        assert_eq!(s.copy(12..16), "cdef");
        assert_eq!(s.copy(14..18), "efgh");
        assert_eq!(s.copy(18..18), "");
    }

    #[test]
    fn trim_keeps_the_chunk_holding_the_offset() {
        let mut s = seq(&[b"abc", b"def", b"gh"], 0);
        s.trim(4);
        assert_eq!((s.start, s.chunks.len()), (3, 2));
        s.trim(0);
        assert_eq!(s.start, 3);
        assert_eq!(s.copy(3..8), "defgh");
    }
}
