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
}
