//! The crate's single error type.

/// Advice appended to errors caused by a damaged shard ([`Hint::VerifyShards`]).
const CORRUPT: &str = "the shard is corrupt, re-create it or verify the dataset";

/// What the user can do about an error, as data: each front end words it in its own vocabulary
/// (the CLI names its commands, see [`Error::hint`]). `Display` says it in words that name no
/// command, as the errors' own messages do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Hint {
    /// A shard is damaged: re-create it, or verify the dataset to find every damaged shard.
    VerifyShards,
    /// A shard index is damaged: index the shard again.
    Reindex,
    /// An index does not describe its shard: index the shard again, or re-create the shards.
    ReindexOrReshard,
    /// A dataset manifest is damaged or truncated: write it again with the tool that made it,
    /// or read the dataset without it.
    RewriteManifest,
}

impl std::fmt::Display for Hint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Hint::VerifyShards => CORRUPT,
            Hint::Reindex => "re-create it by indexing the shard again",
            Hint::ReindexOrReshard => {
                "rebuild it by indexing the shard again (or re-create the shards)"
            }
            Hint::RewriteManifest => {
                "write it again with the tool that made it (describe the files again, or \
                 shard again with overwrite), or read the dataset without its manifest"
            }
        })
    }
}

/// Everything that can go wrong while reading or writing shards, indexes and
/// manifests. Every variant names the object it concerns and, for parsers,
/// the byte offset inside it where the problem was found.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tar header's stored checksum does not match its contents.
    #[error(
        "{shard} at byte {offset}: bad header checksum (stored {stored}, computed {computed}); {CORRUPT}"
    )]
    HeaderChecksum {
        /// Shard name or URI.
        shard: String,
        /// Offset of the header block.
        offset: u64,
        /// Checksum stored in the header.
        stored: u64,
        /// Checksum computed over the header.
        computed: u64,
    },
    /// The shard ended before a member's data, a header or the end-of-archive
    /// blocks were complete.
    #[error("{shard} at byte {offset}: truncated shard: {what}; {CORRUPT}")]
    Truncated {
        /// Shard name or URI.
        shard: String,
        /// Offset where the input ended.
        offset: u64,
        /// What was missing.
        what: String,
    },
    /// A numeric header field holds garbage or a value too large.
    #[error("{shard} at byte {offset}: invalid number in header field `{field}`; {CORRUPT}")]
    BadNumber {
        /// Shard name or URI.
        shard: String,
        /// Offset of the field.
        offset: u64,
        /// Header field name (`size`, `mtime`, ...).
        field: &'static str,
    },
    /// A member name is absolute, climbs out with `..`, holds a NUL byte,
    /// is empty or is not UTF-8.
    #[error("{shard} at byte {offset}: unsafe member name {name:?}: {reason}; {CORRUPT}")]
    UnsafeName {
        /// Shard name or URI.
        shard: String,
        /// Offset of the member's header.
        offset: u64,
        /// The offending name (lossily decoded).
        name: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A PAX extended header or GNU long-name entry is malformed.
    #[error("{shard} at byte {offset}: bad extended header: {reason}; {CORRUPT}")]
    BadExtendedHeader {
        /// Shard name or URI.
        shard: String,
        /// Offset of the offending record.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The archive structure is broken in a way not covered above.
    #[error("{shard} at byte {offset}: malformed archive: {reason}; {CORRUPT}")]
    Malformed {
        /// Shard name or URI.
        shard: String,
        /// Offset of the problem.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A non-regular entry was found and the entry policy is
    /// [`EntryPolicy::Error`](crate::EntryPolicy::Error).
    #[error(
        "{shard} at byte {offset}: entry {name:?} is a {kind}, not a regular file; \
         repack the shard with regular files only or use a skipping entry policy"
    )]
    UnsupportedEntry {
        /// Shard name or URI.
        shard: String,
        /// Offset of the entry's header.
        offset: u64,
        /// Entry name.
        name: String,
        /// Entry kind (`directory`, `symlink`, ...).
        kind: &'static str,
    },
    /// An extended header is larger than the reader accepts.
    #[error(
        "{shard} at byte {offset}: extended header of {size} bytes exceeds the {limit}-byte limit; {CORRUPT}"
    )]
    ExtendedHeaderTooLarge {
        /// Shard name or URI.
        shard: String,
        /// Offset of the header.
        offset: u64,
        /// Declared size.
        size: u64,
        /// Configured limit.
        limit: u64,
    },
    /// A member cannot be written as given.
    #[error("{shard}: cannot write member {name:?}: {reason}")]
    InvalidMember {
        /// Shard being written.
        shard: String,
        /// Member name.
        name: String,
        /// Why it was refused.
        reason: String,
    },
    /// Data written for a member does not match its declared size, or the
    /// writer was used out of order.
    #[error("{shard} at byte {offset}: writer misuse: {reason}")]
    WriterState {
        /// Shard being written.
        shard: String,
        /// Offset in the shard.
        offset: u64,
        /// What went wrong.
        reason: String,
    },
    /// A shard index is malformed or does not match its checksum.
    #[error(
        "{index} at byte {offset}: corrupt shard index: {reason}; {}",
        Hint::Reindex
    )]
    CorruptIndex {
        /// Index name or URI.
        index: String,
        /// Offset of the problem.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A shard index parses but does not describe its shard: members out of order or
    /// overlapping, outside the shard, or for a shard of another size.
    #[error(
        "{index}: the index does not describe {shard}: {reason}; {}",
        Hint::ReindexOrReshard
    )]
    IndexLayout {
        /// Index name or URI.
        index: String,
        /// Shard name or URI.
        shard: String,
        /// What is wrong.
        reason: String,
    },
    /// A manifest could not be parsed.
    #[error("{manifest}: invalid manifest: {source}; {}", Hint::RewriteManifest)]
    ManifestJson {
        /// Manifest name or URI.
        manifest: String,
        /// Parser error (carries line and column).
        #[source]
        source: serde_json::Error,
    },
    /// Manifests are inconsistent or cannot be merged.
    #[error("{manifest}: {reason}")]
    Manifest {
        /// Manifest name or URI (or the part being merged).
        manifest: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A manifest is truncated, damaged (a checksum does not match) or not a manifest at all.
    #[error(
        "{manifest} at byte {offset}: corrupt manifest: {reason}; {}",
        Hint::RewriteManifest
    )]
    CorruptManifest {
        /// Manifest name or URI.
        manifest: String,
        /// Offset of the problem.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// Reading or writing a manifest's bytes failed (the stream, not its contents).
    #[error("{manifest} at byte {offset}: {action} failed: {source}")]
    ManifestIo {
        /// Manifest name or URI.
        manifest: String,
        /// Offset reached.
        offset: u64,
        /// `read` or `write`.
        action: &'static str,
        /// Underlying error (a store failure carried in an I/O error when the bytes come
        /// from a GET).
        #[source]
        source: std::io::Error,
    },
    /// An I/O error from a [`std::io::Read`] source (convenience readers only).
    #[error("{shard} at byte {offset}: read failed: {source}")]
    Io {
        /// Shard name or URI.
        shard: String,
        /// Offset reached.
        offset: u64,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// What the user can do about this error, for a front end to word in its own vocabulary
    /// (the message says it in neutral words).
    pub fn hint(&self) -> Option<Hint> {
        match self {
            Error::HeaderChecksum { .. }
            | Error::Truncated { .. }
            | Error::BadNumber { .. }
            | Error::UnsafeName { .. }
            | Error::BadExtendedHeader { .. }
            | Error::Malformed { .. }
            | Error::ExtendedHeaderTooLarge { .. } => Some(Hint::VerifyShards),
            Error::CorruptIndex { .. } => Some(Hint::Reindex),
            Error::IndexLayout { .. } => Some(Hint::ReindexOrReshard),
            Error::CorruptManifest { .. } | Error::ManifestJson { .. } => {
                Some(Hint::RewriteManifest)
            }
            Error::UnsupportedEntry { .. }
            | Error::InvalidMember { .. }
            | Error::WriterState { .. }
            | Error::Manifest { .. }
            | Error::ManifestIo { .. }
            | Error::Io { .. } => None,
        }
    }

    /// The byte offset the error refers to, when it has one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Error::HeaderChecksum { offset, .. }
            | Error::Truncated { offset, .. }
            | Error::BadNumber { offset, .. }
            | Error::UnsafeName { offset, .. }
            | Error::BadExtendedHeader { offset, .. }
            | Error::UnsupportedEntry { offset, .. }
            | Error::Malformed { offset, .. }
            | Error::ExtendedHeaderTooLarge { offset, .. }
            | Error::WriterState { offset, .. }
            | Error::CorruptIndex { offset, .. }
            | Error::CorruptManifest { offset, .. }
            | Error::ManifestIo { offset, .. }
            | Error::Io { offset, .. } => Some(*offset),
            Error::InvalidMember { .. }
            | Error::IndexLayout { .. }
            | Error::ManifestJson { .. }
            | Error::Manifest { .. } => None,
        }
    }
}
