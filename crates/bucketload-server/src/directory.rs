//! Directory buckets, as S3 Express One Zone names them: `base--zone-id--x-s3`
//! (`train--use1-az4--x-s3`). The embedded server makes every bucket so named behave as S3
//! Express does: sessions from CreateSession on every request, listings not in key order,
//! `/` the only delimiter and prefixes that end in it, appends, ETags that are not MD5s.
//!
//! <https://docs.aws.amazon.com/AmazonS3/latest/userguide/directory-bucket-naming-rules.html>

/// The suffix every directory bucket's name ends in.
pub(crate) const SUFFIX: &str = "--x-s3";

/// Whether `bucket` is named as a directory bucket: a base name, `--`, a zone ID of letters,
/// digits and `-` (`use1-az4`, `usw2-lax1-az1`), then `--x-s3`.
pub(crate) fn is_directory_bucket(bucket: &str) -> bool {
    zone_of(bucket).is_some()
}

/// The zone ID in a directory bucket's name (`use1-az4` in `train--use1-az4--x-s3`).
pub(crate) fn zone_of(bucket: &str) -> Option<&str> {
    let rest = bucket.strip_suffix(SUFFIX)?;
    let (base, zone) = rest.rsplit_once("--")?;
    let zone_ok = !zone.is_empty()
        && zone
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !zone.starts_with('-')
        && !zone.ends_with('-');
    (!base.is_empty() && zone_ok).then_some(zone)
}

/// A directory bucket's ETag for an object whose S3 ETag would be `plain` (the content MD5,
/// or a multipart `md5-N`, or an append's chain): opaque as S3 Express makes them, so no
/// client can take it for the MD5 of the content; deterministic, so the same write gives the
/// same ETag.
pub(crate) fn etag(plain: &str) -> String {
    use md5::{Digest, Md5};
    let mut h = Md5::new();
    // A fixed tag keeps the result apart from any MD5 of content.
    h.update(b"bucketload-directory-bucket-etag:");
    h.update(plain.as_bytes());
    hex::encode(h.finalize())
}

/// What [`etag`] is taken over for an append of bytes whose MD5 is `appended` to the object
/// whose ETag is `before`.
pub(crate) fn appended_etag(before: &str, appended: &[u8; 16]) -> String {
    format!("{before}+{}", hex::encode(appended))
}

/// A rank that scrambles the entries of one listing page: a hash of the name, the same on
/// every request (FNV-1a, then splitmix64's finaliser to spread near names apart).
pub(crate) fn scramble_rank(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The bucket a path-style request names: its first path segment (`None` for the root).
pub(crate) fn bucket_of_path(path: &str) -> Option<&str> {
    let rest = path.strip_prefix('/')?;
    let bucket = rest.split('/').next()?;
    (!bucket.is_empty()).then_some(bucket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(zone_of("train--use1-az4--x-s3"), Some("use1-az4"));
        assert_eq!(zone_of("a--usw2-lax1-az1--x-s3"), Some("usw2-lax1-az1"));
        assert!(is_directory_bucket("my--bucket--use1-az4--x-s3"));
        for name in [
            "train",
            "train--x-s3",
            "--use1-az4--x-s3",
            "t--USE1--x-s3",
            "t--use1-az4",
        ] {
            assert!(!is_directory_bucket(name), "{name}");
        }
    }

    #[test]
    fn etags_are_not_the_md5_and_are_stable() {
        let md5 = "5d41402abc4b2a76b9719d911017c592";
        assert_eq!(etag(md5), etag(md5));
        assert_ne!(etag(md5), md5);
        assert_eq!(etag(md5).len(), 32);
        assert_ne!(etag(md5), etag("00000000000000000000000000000000"));
    }

    #[test]
    fn bucket_of_paths() {
        assert_eq!(
            bucket_of_path("/b--use1-az4--x-s3/k/x"),
            Some("b--use1-az4--x-s3")
        );
        assert_eq!(bucket_of_path("/bkt"), Some("bkt"));
        assert_eq!(bucket_of_path("/"), None);
    }
}
