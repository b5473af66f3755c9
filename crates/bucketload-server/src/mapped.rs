//! Read-only memory maps of object data files, so GET bodies reach the socket without being
//! copied through our memory.
//!
//! A body is a map of the object's byte range handed to hyper as [`Bytes`] slices, so large
//! bodies go from the page cache to the socket with one copy (the kernel's, into the socket
//! buffer) instead of two. Maps of small bodies (up to [`SENDFILE_MAX`]) are also registered
//! with their file and offset, so the connection's socket ([`crate::conn`]) recognises a
//! slice it is asked to write and sends it with `sendfile` from the page cache instead
//! ([`file_region`]): the server never touches those bytes. Anything else that reads a slice
//! (a bandwidth-capped write, a test) reads the mapped pages.
//!
//! This is the crate's only `unsafe` code. A mapping is sound only while nobody truncates or
//! rewrites the mapped file in place: every write of the server goes to a temporary file that
//! is then renamed over the object (`Storage::commit`), so a map keeps the old inode, whose
//! pages stay valid until the last slice of the body is dropped. Changing a data file in place
//! by hand while it is being served is unsupported (the process may get `SIGBUS`).

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use memmap2::{Advice, Mmap, MmapOptions};

/// Bytes handed to hyper per body frame: large enough that a 1 GiB object is 256 frames.
const SLICE: usize = 4 << 20;
/// Maps up to this size are sent with `sendfile`: for them it saves the server a copy of
/// bytes that are usually not in the CPU cache (~60 of ~200 µs of CPU per 100 KB GET with
/// 64 in flight and latency emulation on). Larger bodies are written from the map, which on
/// loopback streams about 2.5× faster than `sendfile` (measured with `examples/loadgen.rs`:
/// 3.4 GB/s against 1.3 GB/s for one 1 GiB GET).
const SENDFILE_MAX: usize = 1 << 20;

/// A live map: where its bytes come from.
#[derive(Debug)]
struct Entry {
    end: usize,
    file: Arc<File>,
    offset: u64,
}

/// Every live map, by start address. Maps never overlap while they live.
static MAPS: Mutex<BTreeMap<usize, Entry>> = Mutex::new(BTreeMap::new());

fn maps() -> std::sync::MutexGuard<'static, BTreeMap<usize, Entry>> {
    MAPS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where the bytes of a mapped slice live in their file.
#[derive(Debug)]
pub(crate) struct FileRegion {
    pub(crate) file: Arc<File>,
    pub(crate) offset: u64,
    pub(crate) len: usize,
}

/// The file region behind `buf` when `buf` lies inside a live map.
pub(crate) fn file_region(buf: &[u8]) -> Option<FileRegion> {
    let start = buf.as_ptr() as usize;
    let maps = maps();
    let (&base, entry) = maps.range(..=start).next_back()?;
    (start + buf.len() <= entry.end).then(|| FileRegion {
        file: Arc::clone(&entry.file),
        offset: entry.offset + (start - base) as u64,
        len: buf.len(),
    })
}

/// Owns a map for [`Bytes::from_owner`], shared by every slice of one body; unregisters the
/// map before it is unmapped.
struct SharedMap {
    map: Arc<Mmap>,
    registered: bool,
}

impl AsRef<[u8]> for SharedMap {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        if self.registered {
            maps().remove(&(self.map.as_ptr() as usize));
        }
    }
}

/// A byte range of a file, mapped read-only and handed out in [`SLICE`]-sized [`Bytes`].
#[derive(Debug)]
pub(crate) struct MappedRange {
    map: Arc<Mmap>,
    all: Bytes,
    offset: usize,
}

impl MappedRange {
    /// Maps `len` bytes of `file` from `start` (`len` > 0); for large ranges, asks the
    /// kernel to read ahead. On failure the file comes back with the error.
    pub(crate) fn new(file: File, start: u64, len: u64) -> Result<Self, (std::io::Error, File)> {
        let Ok(len) = usize::try_from(len) else {
            return Err((std::io::Error::other("range too large to map"), file));
        };
        // SAFETY: the map is read-only and private to this body. Object data files are only
        // ever replaced by rename, never truncated or written in place (see the module docs),
        // so the pages of this inode stay valid and unchanged for the map's lifetime.
        let map = match unsafe { MmapOptions::new().offset(start).len(len).map(&file) } {
            Ok(map) => map,
            Err(e) => return Err((e, file)),
        };
        let base = map.as_ptr() as usize;
        let registered = len <= SENDFILE_MAX;
        if registered {
            let entry = Entry {
                end: base + len,
                file: Arc::new(file),
                offset: start,
            };
            maps().insert(base, entry);
        }
        let map = Arc::new(map);
        let range = Self {
            all: Bytes::from_owner(SharedMap {
                map: Arc::clone(&map),
                registered,
            }),
            map,
            offset: 0,
        };
        if len > SLICE {
            let _ = range.map.advise(Advice::Sequential);
            range.will_need(0);
        }
        Ok(range)
    }

    /// Bytes not yet handed out.
    pub(crate) fn remaining(&self) -> usize {
        self.all.len() - self.offset
    }

    /// The next slice, after asking the kernel to read the one after it.
    pub(crate) fn next_slice(&mut self) -> Option<Bytes> {
        let n = self.remaining().min(SLICE);
        if n == 0 {
            return None;
        }
        let slice = self.all.slice(self.offset..self.offset + n);
        self.offset += n;
        self.will_need(self.offset);
        Some(slice)
    }

    fn will_need(&self, offset: usize) {
        let n = (self.all.len() - offset).min(SLICE);
        if n > 0 {
            let _ = self.map.advise_range(Advice::WillNeed, offset, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_cover_the_range_and_small_ones_know_their_file_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..(SLICE * 2 + 5)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = File::open(&path).unwrap();
        let mut range = MappedRange::new(file, 3, data.len() as u64 - 3).unwrap();
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        while let Some(slice) = range.next_slice() {
            sizes.push(slice.len());
            assert!(
                file_region(&slice).is_none(),
                "large maps are written, not sent"
            );
            got.extend_from_slice(&slice);
        }
        assert_eq!(sizes, [SLICE, SLICE, 2]);
        assert_eq!(got, data[3..]);
        assert!(
            file_region(&data).is_none(),
            "plain memory is not a file region"
        );
        let mut small = MappedRange::new(File::open(&path).unwrap(), 5000, 100_000).unwrap();
        let slice = small.next_slice().unwrap();
        let region = file_region(&slice[7..]).unwrap();
        assert_eq!((region.offset, region.len), (5007, 100_000 - 7));
        assert!(small.next_slice().is_none());
    }

    #[test]
    fn a_slice_outlives_its_range_and_a_rename_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"original bytes").unwrap();
        let mut range = MappedRange::new(File::open(&path).unwrap(), 0, 8).unwrap();
        let slice = range.next_slice().unwrap();
        drop(range);
        std::fs::write(dir.path().join("g"), b"replacement").unwrap();
        std::fs::rename(dir.path().join("g"), &path).unwrap();
        assert_eq!(&slice[..], b"original");
        let ptr = slice.as_ptr() as usize;
        drop(slice);
        assert!(
            !maps().contains_key(&ptr),
            "the map is unregistered with its last slice"
        );
    }
}
