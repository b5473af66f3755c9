//! Bytes checked against what a dataset promises of them.
//!
//! A files dataset's manifest records each object's size, ETag and CRC32C (a listing: size and
//! ETag); [`compare`] tells how a GET's response differs from them: a different size or ETag
//! means the object changed since; where either side has no ETag, a different CRC32C of the
//! bytes does. The loader checks every file it reads this way, and the sharder every object it
//! copies into a shard.

use bucketload_cache::ObjectVersion;
use bucketload_store::ETag;
use bytes::Bytes;

/// Bodies up to this size are checksummed on the Tokio worker: CRC32C runs at several GB/s
/// with SSE 4.2, so 1 MiB takes well under 100 µs; larger ones go to a blocking thread.
const INLINE_CRC_BYTES: usize = 1 << 20;

/// What a dataset's manifest or listing says of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Promise {
    pub(crate) size: u64,
    pub(crate) etag: Option<ETag>,
    /// Without [`etag`](Self::etag): its [`ETag::fingerprint`] (what a compact catalog keeps).
    pub(crate) etag_fingerprint: Option<u64>,
    pub(crate) crc32c: Option<u32>,
}

/// How an object differs from what the dataset says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    Size {
        expected: u64,
        got: u64,
    },
    ETag {
        expected: ETag,
        got: ETag,
    },
    /// The ETag has another fingerprint than the one the catalog keeps.
    ETagFingerprint {
        expected: u64,
        got: ETag,
    },
    Checksum {
        expected: u32,
        got: u32,
    },
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Size { expected, got } => write!(f, "is {got} bytes, expected {expected}"),
            Change::ETag { expected, got } => write!(f, "has ETag {got}, expected {expected}"),
            Change::ETagFingerprint { expected, got } => write!(
                f,
                "has ETag {got}, expected another (one whose fingerprint is {expected:016x})"
            ),
            Change::Checksum { expected, got } => {
                write!(f, "has CRC32C {got:08x}, expected {expected:08x}")
            }
        }
    }
}

/// The first way `bytes`, returned as `returned`, differ from `file`. The ETag and size tell a
/// changed object (every write gives it a new ETag); the CRC32C of the bytes is computed only
/// when there is no pair of ETags to compare and the dataset records one: hashing every sample
/// cost 8% of the files loader's throughput at 0 ms (docs/BENCHMARKS.md) for no change the ETag
/// would miss.
pub(crate) async fn compare(
    file: &Promise,
    returned: &ObjectVersion,
    bytes: &Bytes,
) -> Option<Change> {
    if returned.size != file.size {
        return Some(Change::Size {
            expected: file.size,
            got: returned.size,
        });
    }
    if let (Some(expected), Some(got)) = (&file.etag, &returned.etag) {
        return (expected != got).then(|| Change::ETag {
            expected: expected.clone(),
            got: got.clone(),
        });
    }
    if let (Some(expected), Some(got)) = (file.etag_fingerprint, &returned.etag) {
        return (expected != got.fingerprint()).then(|| Change::ETagFingerprint {
            expected,
            got: got.clone(),
        });
    }
    let expected = file.crc32c?;
    let got = crc32c_of(bytes).await;
    (got != expected).then_some(Change::Checksum { expected, got })
}

/// CRC32C of `bytes`, on a blocking thread when they are large.
pub(crate) async fn crc32c_of(bytes: &Bytes) -> u32 {
    if bytes.len() <= INLINE_CRC_BYTES {
        return crc32c::crc32c(bytes);
    }
    let body = bytes.clone();
    match tokio::task::spawn_blocking(move || crc32c::crc32c(&body)).await {
        Ok(crc) => crc,
        // The blocking pool is shutting down: compute it here rather than guess.
        Err(_) => crc32c::crc32c(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(etag: Option<&str>, crc32c: Option<u32>) -> Promise {
        Promise {
            size: 3,
            etag: etag.map(ETag::parse),
            etag_fingerprint: None,
            crc32c,
        }
    }

    #[tokio::test]
    async fn every_promise_is_compared() {
        let body = Bytes::from_static(b"abc");
        let crc = crc32c::crc32c(b"abc");
        let same = ObjectVersion::new("\"e1\"", 3);
        assert_eq!(
            compare(&file(Some("e1"), Some(crc)), &same, &body).await,
            None
        );
        let size = compare(&file(None, None), &ObjectVersion::size_only(4), &body).await;
        assert!(matches!(size, Some(Change::Size { got: 4, .. })));
        let etag = compare(&file(Some("e0"), None), &same, &body).await;
        assert!(matches!(etag, Some(Change::ETag { .. })));
        // Without an ETag on one side, the bytes' CRC32C decides.
        let unknown = ObjectVersion::size_only(3);
        let crc_bad = compare(&file(Some("e1"), Some(crc ^ 1)), &unknown, &body).await;
        assert!(matches!(crc_bad, Some(Change::Checksum { .. })));
        let crc_bad = compare(&file(None, Some(crc ^ 1)), &same, &body).await;
        assert!(matches!(crc_bad, Some(Change::Checksum { .. })));
        assert_eq!(compare(&file(None, Some(crc)), &same, &body).await, None);
        // With ETags on both sides, equal ETags are the same version: no hashing.
        assert_eq!(
            compare(&file(Some("e1"), Some(crc ^ 1)), &same, &body).await,
            None
        );
    }

    #[tokio::test]
    async fn a_fingerprint_stands_for_its_etag() {
        let body = Bytes::from_static(b"abc");
        let same = ObjectVersion::new("\"e1\"", 3);
        let promise = |etag: &str, crc32c| Promise {
            size: 3,
            etag: None,
            etag_fingerprint: Some(ETag::parse(etag).fingerprint()),
            crc32c,
        };
        assert_eq!(compare(&promise("e1", None), &same, &body).await, None);
        let changed = compare(&promise("e0", None), &same, &body).await;
        assert!(matches!(changed, Some(Change::ETagFingerprint { .. })));
        // A store without ETags: the CRC32C decides, as with a whole ETag.
        let unknown = ObjectVersion::size_only(3);
        let crc_bad = compare(&promise("e1", Some(1)), &unknown, &body).await;
        assert!(matches!(crc_bad, Some(Change::Checksum { .. })));
    }
}
