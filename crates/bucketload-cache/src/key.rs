//! What an entry is filed under: [`CacheKey`] names the bytes, and
//! [`ObjectVersion`] says which version of the object they came from.

use std::fmt;
use std::ops::Range;

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
/// the store gives one) and its size in bytes (of the whole object, also for
/// a range entry).
///
/// An entry is served only to a lookup that presents the same version: a
/// different size, or a different ETag when both sides know one, means the
/// object changed, and the entry is a stale miss.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectVersion {
    /// The object's ETag as the store reports it, quotes included or not,
    /// as long as the caller is consistent.
    pub etag: Option<String>,
    /// The size of the whole object in bytes.
    pub size: u64,
}

impl ObjectVersion {
    /// A version with an ETag.
    pub fn new(etag: impl Into<String>, size: u64) -> Self {
        Self {
            etag: Some(etag.into()),
            size,
        }
    }

    /// A version known only by its size (stores without ETags, such as
    /// some local file systems).
    pub fn size_only(size: u64) -> Self {
        Self { etag: None, size }
    }

    /// Whether an entry stored as `self` may be served to a lookup for
    /// `wanted`: same size, and same ETag unless the lookup has none.
    pub(crate) fn serves(&self, wanted: &ObjectVersion) -> bool {
        self.size == wanted.size
            && match (&wanted.etag, &self.etag) {
                (None, _) => true,
                (Some(w), Some(s)) => w == s,
                (Some(_), None) => false,
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
        assert!(stored.serves(&ObjectVersion::new("\"abc\"", 10)));
        assert!(stored.serves(&ObjectVersion::size_only(10)));
        assert!(!stored.serves(&ObjectVersion::new("\"abd\"", 10)));
        assert!(!stored.serves(&ObjectVersion::size_only(11)));
        let no_etag = ObjectVersion::size_only(10);
        assert!(!no_etag.serves(&ObjectVersion::new("\"abc\"", 10)));
        assert!(no_etag.serves(&ObjectVersion::size_only(10)));
    }

    #[test]
    fn display_names_the_object() {
        let k = CacheKey::new("s3://b/", "x/y.jpg").with_range(5..9);
        assert_eq!(k.to_string(), "s3://b/x/y.jpg bytes 5..9");
    }
}
