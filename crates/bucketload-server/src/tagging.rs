//! Object and bucket tags, as S3 keeps them: at most 10 per object (more: 400 `BadRequest`,
//! as S3 answers) and 50 per bucket, keys of 1 to 128 characters, values of at most 256, no key
//! twice (400 `InvalidTag`); a refused request changes nothing. Tags are stored with the object's metadata; writing or
//! deleting them leaves the bytes, the ETag and Last-Modified as they are.

use std::collections::BTreeMap;

use s3s::dto::{Tag, TagSet};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};

/// S3's most tags on one object.
pub(crate) const MAX_OBJECT_TAGS: usize = 10;
/// S3's most tags on one bucket.
pub(crate) const MAX_BUCKET_TAGS: usize = 50;

/// Checks `pairs` against S3's limits and returns them as a map.
fn check(pairs: Vec<(String, String)>, max: usize) -> S3Result<BTreeMap<String, String>> {
    if pairs.len() > max {
        // S3's answer to too many object tags is 400 BadRequest (InvalidTag for the rest).
        let code = if max == MAX_OBJECT_TAGS {
            S3ErrorCode::Custom("BadRequest".into())
        } else {
            S3ErrorCode::InvalidTag
        };
        let mut err = S3Error::with_message(
            code,
            format!(
                "Object tags cannot be greater than {max} ({} were given)",
                pairs.len()
            ),
        );
        err.set_status_code(http::StatusCode::BAD_REQUEST);
        return Err(err);
    }
    let mut tags = BTreeMap::new();
    for (key, value) in pairs {
        let key_chars = key.chars().count();
        if key_chars == 0 || key_chars > 128 {
            return Err(s3_error!(
                InvalidTag,
                "a tag key must hold 1 to 128 characters; {key:?} holds {key_chars}"
            ));
        }
        if value.chars().count() > 256 {
            return Err(s3_error!(
                InvalidTag,
                "the value of tag {key:?} holds more than 256 characters"
            ));
        }
        if tags.insert(key.clone(), value).is_some() {
            return Err(s3_error!(
                InvalidTag,
                "Cannot provide multiple Tags with the same key: {key:?}"
            ));
        }
    }
    Ok(tags)
}

/// The tags of an `x-amz-tagging` header (`k1=v1&k2=v2`, URL-encoded).
pub(crate) fn from_header(header: Option<&str>) -> S3Result<BTreeMap<String, String>> {
    let Some(header) = header.filter(|h| !h.is_empty()) else {
        return Ok(BTreeMap::new());
    };
    let decode = |s: &str| {
        percent_decode(&s.replace('+', " ")).ok_or_else(|| {
            s3_error!(
                InvalidArgument,
                "x-amz-tagging is not a valid URL-encoded query string"
            )
        })
    };
    let mut pairs = Vec::new();
    for pair in header.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        pairs.push((decode(k)?, decode(v)?));
    }
    check(pairs, MAX_OBJECT_TAGS)
}

/// The tags of a TagSet (PutObjectTagging, PutBucketTagging).
pub(crate) fn from_set(set: TagSet, max: usize) -> S3Result<BTreeMap<String, String>> {
    let pairs = set
        .into_iter()
        .map(|t| (t.key.unwrap_or_default(), t.value.unwrap_or_default()))
        .collect();
    check(pairs, max)
}

/// Tags as a TagSet, in key order.
pub(crate) fn to_set(tags: &BTreeMap<String, String>) -> TagSet {
    tags.iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn headers_decode_and_limits_hold() {
        let tags = from_header(Some("a=1&b%20c=d%2Fe&f=")).unwrap();
        assert_eq!(tags["a"], "1");
        assert_eq!(tags["b c"], "d/e");
        assert_eq!(tags["f"], "");
        assert!(from_header(None).unwrap().is_empty());
        let eleven: Vec<String> = (0..11).map(|i| format!("k{i}=v")).collect();
        let err = from_header(Some(&eleven.join("&"))).unwrap_err();
        assert_eq!(err.code().as_str(), "BadRequest");
        assert_eq!(err.status_code().map(|s| s.as_u16()), Some(400));
        assert!(from_header(Some("a=1&a=2")).is_err());
        assert!(from_header(Some(&format!("{}=v", "k".repeat(129)))).is_err());
        assert!(from_header(Some(&format!("{}=v", "k".repeat(128)))).is_ok());
        assert!(from_header(Some(&format!("k={}", "v".repeat(257)))).is_err());
        assert!(from_header(Some("k=%zz")).is_err());
    }
}
