//! What an entry is filed under: [`CacheKey`] names the bytes, and
//! [`ObjectVersion`] says which version of the object they came from.

use std::fmt;
use std::ops::Range;

use bucketload_store::ETag;

use sha2::{Digest, Sha256};

/// The identity of cached bytes: a store, an object key in it and optionally
/// a byte range of that object (block caching of shards).
///
/// `store` is whatever identifies the store to the caller, usually the
/// dataset or bucket URI (`s3://bucket/prefix`); two stores must never share
/// a `store` string unless they hold the same objects.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    store: String,
    key: String,
    range: Option<Range<u64>>,
}

impl CacheKey {
    /// The whole object `key` of `store`.
    pub fn new(store: impl Into<String>, key: impl Into<String>) -> Self {
        Self {
            store: store.into(),
            key: key.into(),
            range: None,
        }
    }

    /// Only the bytes `range` of the object (default: the whole object).
    #[must_use]
    pub fn with_range(mut self, range: Range<u64>) -> Self {
        self.range = Some(range);
        self
    }

    /// The store identity.
    pub fn store(&self) -> &str {
        &self.store
    }

    /// The object key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The byte range, if only part of the object is cached.
    pub fn range(&self) -> Option<Range<u64>> {
        self.range.clone()
    }

    /// The entry's file name: 32 hex digits of the SHA-256 of the key's
    /// fields, each length-prefixed so that no two keys encode alike.
    pub(crate) fn file_name(&self) -> String {
        let mut hasher = Sha256::new();
        for part in [self.store.as_bytes(), self.key.as_bytes()] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
        match &self.range {
            Some(r) => {
                hasher.update([1]);
                hasher.update(r.start.to_le_bytes());
                hasher.update(r.end.to_le_bytes());
            }
            None => hasher.update([0]),
        }
        // 128 bits: collisions are not a practical concern, and the header
        // check on every read turns one into a miss anyway.
        hex::encode(&hasher.finalize()[..16])
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.store.trim_end_matches('/'), self.key)?;
        if let Some(r) = &self.range {
            write!(f, " bytes {}..{}", r.start, r.end)?;
        }
        Ok(())
    }
}

/// The version of the object that cached bytes came from: its ETag (when
/// the store gives one), its size in bytes (of the whole object, also for
/// a range entry) and, for a lookup, optionally the CRC32C its bytes must
/// have.
///
/// An entry is served only to a lookup that presents the same version: a
/// different size, or a different ETag when both sides know one, means the
/// object changed, and the entry is a stale miss. ETags are compared as
/// [`ETag`]s, so `"abc"` (S3's spelling) and `abc` (a manifest's) are one
/// version. A lookup that knows the object's CRC32C (a manifest records
/// it) is served only an entry whose body has that CRC32C.
///
/// Insert an entry under the version the store *returned* for its bytes
/// (the GET response's ETag and size), never under the version a manifest
/// expected: then an entry is served only as the version it was fetched as.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectVersion {
    /// The object's ETag, if the store gives one.
    pub etag: Option<ETag>,
    /// The size of the whole object in bytes.
    pub size: u64,
    /// For lookups: the CRC32C the entry's body must have (of the whole
    /// object for whole-object entries). Not stored: an entry's CRC32C is
    /// that of its body, checked on every read.
    pub crc32c: Option<u32>,
    /// For lookups without [`etag`](Self::etag): the [`ETag::fingerprint`] the entry's ETag
    /// must have (a compact catalog keeps only that of each ETag). Not stored.
    pub etag_fingerprint: Option<u64>,
}

impl ObjectVersion {
    /// A version with an ETag (any spelling: quotes and `W/` are ignored).
    pub fn new(etag: impl Into<ETag>, size: u64) -> Self {
        Self {
            etag: Some(etag.into()),
            size,
            crc32c: None,
            etag_fingerprint: None,
        }
    }

    /// A version known only by its size (stores without ETags, such as
    /// some local file systems).
    pub fn size_only(size: u64) -> Self {
        Self {
            etag: None,
            size,
            crc32c: None,
            etag_fingerprint: None,
        }
    }

    /// A version with the ETag `etag` if there is one.
    pub fn with_etag(etag: Option<ETag>, size: u64) -> Self {
        Self {
            etag,
            size,
            crc32c: None,
            etag_fingerprint: None,
        }
    }

    /// A version known by its size and, if there is one, the [`ETag::fingerprint`] of its ETag:
    /// served an entry whose ETag has that fingerprint.
    pub fn with_etag_fingerprint(fingerprint: Option<u64>, size: u64) -> Self {
        Self {
            etag: None,
            size,
            crc32c: None,
            etag_fingerprint: fingerprint,
        }
    }

    /// The same version, serving only an entry whose body has CRC32C `crc32c`
    /// (default: any).
    #[must_use]
    pub fn with_crc32c(mut self, crc32c: Option<u32>) -> Self {
        self.crc32c = crc32c;
        self
    }

    /// Whether an entry stored as `self`, whose body has CRC32C `body_crc`,
    /// may be served to a lookup for `wanted`: same size, same ETag unless
    /// the lookup has none, and the CRC32C the lookup asks for, if any.
    pub(crate) fn serves(&self, wanted: &ObjectVersion, body_crc: u32) -> bool {
        self.size == wanted.size
            && wanted.crc32c.is_none_or(|c| c == body_crc)
            && match (&wanted.etag, wanted.etag_fingerprint, &self.etag) {
                (Some(w), _, Some(s)) => w == s,
                (None, Some(f), Some(s)) => s.fingerprint() == f,
                (None, None, _) => true,
                (_, _, None) => false,
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_differ_by_every_field() {
        let a = CacheKey::new("s3://b", "k");
        let names = [
            a.file_name(),
            CacheKey::new("s3://b", "k2").file_name(),
            CacheKey::new("s3://b2", "k").file_name(),
            CacheKey::new("s3://bk", "").file_name(),
            a.clone().with_range(0..10).file_name(),
            a.clone().with_range(0..11).file_name(),
        ];
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        assert_eq!(a.file_name(), CacheKey::new("s3://b", "k").file_name());
        assert_eq!(a.file_name().len(), 32);
    }

    #[test]
    fn version_matching() {
        let stored = ObjectVersion::new("\"abc\"", 10);
        assert!(stored.serves(&ObjectVersion::new("\"abc\"", 10), 0));
        assert!(stored.serves(&ObjectVersion::size_only(10), 0));
        assert!(!stored.serves(&ObjectVersion::new("\"abd\"", 10), 0));
        assert!(!stored.serves(&ObjectVersion::size_only(11), 0));
        let no_etag = ObjectVersion::size_only(10);
        assert!(!no_etag.serves(&ObjectVersion::new("\"abc\"", 10), 0));
        assert!(no_etag.serves(&ObjectVersion::size_only(10), 0));
    }

    #[test]
    fn a_fingerprint_serves_the_entry_whose_etag_has_it() {
        let stored = ObjectVersion::new("\"abc\"", 10);
        let fp = |e: &str| Some(ETag::parse(e).fingerprint());
        assert!(stored.serves(&ObjectVersion::with_etag_fingerprint(fp("abc"), 10), 0));
        assert!(!stored.serves(&ObjectVersion::with_etag_fingerprint(fp("abd"), 10), 0));
        assert!(!stored.serves(&ObjectVersion::with_etag_fingerprint(fp("abc"), 11), 0));
        let no_etag = ObjectVersion::size_only(10);
        assert!(!no_etag.serves(&ObjectVersion::with_etag_fingerprint(fp("abc"), 10), 0));
        assert!(no_etag.serves(&ObjectVersion::with_etag_fingerprint(None, 10), 0));
    }

    #[test]
    fn quoted_and_bare_etags_are_one_version() {
        let stored = ObjectVersion::new("\"abc\"", 10);
        assert!(stored.serves(&ObjectVersion::new("abc", 10), 0));
        assert!(ObjectVersion::new("abc", 10).serves(&stored, 0));
        assert!(stored.serves(&ObjectVersion::new("W/\"abc\"", 10), 0));
    }

    #[test]
    fn a_wanted_crc32c_must_be_the_bodys() {
        let stored = ObjectVersion::new("abc", 10);
        let wanted = ObjectVersion::new("abc", 10).with_crc32c(Some(7));
        assert!(stored.serves(&wanted, 7));
        assert!(!stored.serves(&wanted, 8));
    }

    #[test]
    fn display_names_the_object() {
        let k = CacheKey::new("s3://b/", "x/y.jpg").with_range(5..9);
        assert_eq!(k.to_string(), "s3://b/x/y.jpg bytes 5..9");
    }
}
