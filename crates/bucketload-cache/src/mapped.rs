//! Cache hits of large entries served from a memory map of the entry file: the page cache's own
//! pages, handed out as [`bytes::Bytes`] without a copy (the map lives as long as the last
//! slice of it).
//!
//! Mapping is sound here because the cache never changes an entry file in place: an entry is
//! written whole to a temporary file and renamed into place, and is removed by `unlink` or by
//! another rename over it. A map keeps the inode it was made from, so a replaced or removed
//! entry goes on reading as the bytes that were checked. Only a file truncated in place by
//! something outside the cache could fault a reader (SIGBUS); docs/CACHE.md says not to edit
//! entries.

use std::fs::File;
use std::io;

use memmap2::{Mmap, MmapOptions};

/// Entries of at least this many bytes are mapped; smaller ones are read (for them a read costs
/// less than a map and its unmap).
pub(crate) const MAP_AT_LEAST: u64 = 1 << 20;

/// Maps the whole of `file`, read-only, its pages faulted in at once.
#[allow(unsafe_code)]
pub(crate) fn map(file: &File) -> io::Result<Mmap> {
    // SAFETY: entry files are never modified in place (see the module documentation), so the
    // mapped bytes do not change under the map.
    unsafe { MmapOptions::new().populate().map(file) }
}
