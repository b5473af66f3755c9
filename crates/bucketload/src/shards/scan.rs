//! Streams one tar shard through the [`TarReader`] and builds its [`ShardIndex`].
//!
//! Bytes arrive from ranged GETs in order; each chunk updates the shard's CRC32C (and MD5 when
//! asked for), is
//! pushed to the reader and the reader is drained before the next chunk is awaited, so memory
//! holds at most the GETs in flight plus one partial header. That CPU work runs on Tokio's
//! blocking pool, one chunk at a time per shard, never on an async worker.

use bucketload_format::{
    EntryHeader, Event, MemberLocation, ShardIndex, ShardIndexBuilder, ShardSummary, TarReader,
};
use bucketload_store::object_store::path::Path;
use bucketload_store::{ParallelGet, Store};
use bytes::Bytes;
use futures::StreamExt;
use md5::{Digest, Md5};

use super::IndexOptions;
use crate::error::{Error, Result};

/// The member whose data is being read.
#[derive(Debug)]
struct Open {
    header: EntryHeader,
    crc: u32,
}

/// Builds the index of one shard from pushed chunks.
#[derive(Debug)]
pub(crate) struct ShardScanner {
    reader: TarReader,
    builder: ShardIndexBuilder,
    open: Option<Open>,
    crc: u32,
    md5: Option<Md5>,
    size: u64,
    members: u64,
}

impl ShardScanner {
    /// A scanner for the shard `uri` (named in errors); `md5` also hashes the shard with MD5.
    pub(crate) fn new(uri: impl Into<String>, md5: bool) -> ShardScanner {
        ShardScanner {
            reader: TarReader::new(uri),
            builder: ShardIndexBuilder::new(),
            open: None,
            crc: 0,
            md5: md5.then(Md5::new),
            size: 0,
            members: 0,
        }
    }

    /// Feeds the next chunk of the shard and parses what it completes.
    pub(crate) fn push(&mut self, chunk: Bytes) -> Result<()> {
        self.crc = crc32c::crc32c_append(self.crc, &chunk);
        if let Some(md5) = self.md5.as_mut() {
            md5.update(&chunk);
        }
        self.size += chunk.len() as u64;
        self.reader.push(chunk);
        self.drain()
    }

    /// Declares the end of the shard; fails if the archive is incomplete.
    pub(crate) fn finish(mut self) -> Result<ShardIndex> {
        self.reader.finish_input();
        self.drain()?;
        if !self.reader.is_finished() {
            return Err(bucketload_format::Error::Truncated {
                shard: self.reader.shard().to_owned(),
                offset: self.size,
                what: "the end-of-archive blocks".to_owned(),
            }
            .into());
        }
        let summary = ShardSummary {
            size: self.size,
            crc32c: self.crc,
            md5: self.md5.map_or([0; 16], |m| m.finalize().into()),
            members: self.members,
        };
        Ok(self.builder.finish(&summary))
    }

    fn drain(&mut self) -> Result<()> {
        while let Some(event) = self.reader.next_event()? {
            match event {
                Event::Member(header) => {
                    self.close_member();
                    self.open = Some(Open { header, crc: 0 });
                }
                Event::Data(data) => {
                    if let Some(open) = &mut self.open {
                        open.crc = crc32c::crc32c_append(open.crc, &data);
                    }
                }
                Event::Entry(_) => self.close_member(),
                Event::End => self.close_member(),
            }
        }
        Ok(())
    }

    fn close_member(&mut self) {
        if let Some(Open { header, crc }) = self.open.take() {
            let location = MemberLocation {
                header_offset: header.header_offset,
                data_offset: header.data_offset,
                size: header.size,
            };
            self.builder.add_with_crc(&header.name, location, crc);
            self.members += 1;
        }
    }
}

/// Reads the shard `key` of `size` bytes with sequential ranged GETs and returns its index.
///
/// `on_bytes` is called with the length of every chunk as it arrives (for progress).
pub async fn index_shard(
    store: &Store,
    key: &Path,
    size: u64,
    options: &IndexOptions,
    on_bytes: &(dyn Fn(u64) + Send + Sync),
) -> Result<ShardIndex> {
    let opts = ParallelGet {
        part_size: options.part_size,
        concurrency: options.gets_per_shard,
        size: Some(size),
    };
    let mut chunks = store.get_parallel(key, opts);
    let mut scanner = ShardScanner::new(store.object_uri(key), options.md5);
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(Error::Store)?;
        on_bytes(chunk.len() as u64);
        // Checksums and parsing of a multi-MiB chunk are CPU work: run them off the Tokio
        // workers while the ranged GETs already in flight keep arriving.
        scanner = tokio::task::spawn_blocking(move || scanner.push(chunk).map(|()| scanner))
            .await
            .map_err(|e| Error::Task {
                reason: e.to_string(),
            })??;
    }
    scanner.finish()
}

#[cfg(test)]
mod tests {
    use bucketload_format::TarWriter;

    use super::*;

    fn shard() -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = TarWriter::new("s.tar");
        w.append(&mut out, "000001.jpg", b"jpeg one").unwrap();
        w.append(&mut out, "000001.cls", b"3").unwrap();
        w.append(&mut out, "000002.jpg", b"").unwrap();
        w.append(&mut out, "000002.cls", b"4").unwrap();
        w.finish(&mut out).unwrap();
        out
    }

    fn scan(bytes: &[u8], chunk: usize) -> Result<ShardIndex> {
        let mut s = ShardScanner::new("mem://x/s.tar", true);
        for piece in bytes.chunks(chunk) {
            s.push(Bytes::copy_from_slice(piece))?;
        }
        s.finish()
    }

    #[test]
    fn every_member_is_located_whatever_the_chunking() {
        let bytes = shard();
        for chunk in [1, 7, 512, 100_000] {
            let index = scan(&bytes, chunk).unwrap();
            assert_eq!(index.shard_size, bytes.len() as u64);
            assert_eq!(index.shard_crc32c, crc32c::crc32c(&bytes));
            assert_eq!(index.samples.len(), 2);
            for sample in &index.samples {
                assert_eq!(sample.members.len(), 2);
                for m in &sample.members {
                    let data = &bytes[m.data_offset as usize..(m.data_offset + m.size) as usize];
                    assert_eq!(crc32c::crc32c(data), m.crc32c);
                }
            }
            assert_eq!(index.samples[1].members[0].size, 0);
        }
    }

    #[test]
    fn truncated_and_garbage_shards_fail_with_an_offset() {
        let bytes = shard();
        let err = scan(&bytes[..700], 64).unwrap_err();
        assert!(err.to_string().contains("mem://x/s.tar at byte"), "{err}");
        let err = scan(&vec![0x5a; 4096], 512).unwrap_err();
        assert!(
            err.to_string().contains("mem://x/s.tar at byte 148"),
            "{err}"
        );
        // Without the end-of-archive blocks.
        let err = scan(&bytes[..bytes.len() - 1024], 512).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
    }
}
