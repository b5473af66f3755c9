//! Shard formats for bucketload, synchronous and pure: bytes in, typed
//! values out.
//!
//! - [`TarReader`]: an incremental tar parser (ustar, PAX, GNU long names,
//!   base-256 sizes) fed byte chunks from async code; [`read_members`] wraps
//!   a [`std::io::Read`].
//! - [`TarWriter`]: appends members to a caller-owned buffer and returns
//!   each member's offsets so the index is built while writing.
//! - [`Grouper`]: WebDataset grouping of members into [`Sample`]s, and
//!   class-per-folder labels.
//! - [`ShardIndex`]: the binary per-shard index (`.idx`) with per-member
//!   offsets, sizes and CRC32C.
//! - [`read_manifest`]: the dataset manifest, format 2 (`_bucketload/manifest.bin`, written
//!   by [`ManifestWriter`]) or format 1 (`_bucketload/manifest.json`), streamed one
//!   [`Entry`] at a time; [`Manifest`] collects a whole one, and [`merge_manifests`] stitches
//!   `--part i/N` slices.
//!
//! Byte-level layouts are specified in `docs/FORMATS.md`.
//!
//! ```
//! use bucketload_format::{TarReader, TarWriter};
//!
//! let mut shard = Vec::new();
//! let mut writer = TarWriter::new("shard-000000.tar");
//! writer.append(&mut shard, "n01/000001.jpg", b"jpeg bytes")?;
//! writer.append(&mut shard, "n01/000001.cls", b"3")?;
//! let summary = writer.finish(&mut shard)?;
//! assert_eq!(summary.size, shard.len() as u64);
//!
//! let mut reader = TarReader::new("shard-000000.tar");
//! reader.push(shard.into());
//! reader.finish_input();
//! let first = reader.next_member()?.expect("a member");
//! assert_eq!(first.header.name, "n01/000001.jpg");
//! assert_eq!(&first.data[..], b"jpeg bytes");
//! # Ok::<(), bucketload_format::Error>(())
//! ```

#![deny(unsafe_code)]

mod error;
#[doc(hidden)]
pub mod fuzzing;
mod header;
mod index;
mod manifest;
mod reader;
mod wds;
mod writer;

pub use error::{Error, Hint};
pub use header::{BLOCK, EntryKind, MAX_OCTAL_SIZE};
pub use index::{
    INDEX_MAGIC, INDEX_VERSION, IndexMember, IndexSample, ShardIndex, ShardIndexBuilder,
};
pub use manifest::{
    ClassCount, DatasetKind, Entry, EntrySink, FileEntry, MANIFEST_BIN_PATH, MANIFEST_PATH,
    MANIFEST_PATHS, MANIFEST_VERSION, MANIFEST2_MAGIC, MANIFEST2_VERSION, Manifest, ManifestFormat,
    ManifestHeader, ManifestWriter, Parameters, PartSpec, ShardEntry, merge_manifests,
    read_manifest,
};
pub use reader::{
    DEFAULT_MAX_EXTENDED_HEADER, EntryHeader, EntryPolicy, Event, Member, ReadMembers, TarReader,
    read_members,
};
pub use wds::{Grouper, Sample, class_label, class_of_key, split_key};
pub use writer::encode_header;
pub use writer::{DEFAULT_MODE, DEFAULT_MTIME, MemberLocation, ShardSummary, TarWriter};
