//! What the server does not implement is refused, never accepted and ignored: a request whose
//! headers ask for something S3 would do (an ACL, a storage class, encryption, object lock,
//! tags, appends) and this server cannot is answered 501 NotImplemented (or S3's own error for
//! it) and changes nothing. Requests that change nothing on S3 either — ACL `private`, storage
//! class `STANDARD`, `AES256` encryption (S3 encrypts every object so) — pass. Also here: the
//! write preconditions (`If-Match`, `If-None-Match`), `Content-MD5`, and CopyObject's source
//! conditions, as S3 documents them.

use s3s::dto::{ETagCondition, Timestamp};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};

use crate::storage::{ObjectMeta, Precondition};

/// S3 subresources (query parameters naming an operation) that the S3 request router does not
/// know: without this check they would fall through to PutObject, GetObject or CreateBucket
/// and act (a `PUT ?renameObject` would write an empty object).
const UNROUTED_SUBRESOURCES: &[&str] = &[
    "renameObject",
    "metadataConfiguration",
    "metadataInventoryTable",
    "metadataJournalTable",
    "abac",
];

/// The operation a request names that this server does not route, if any.
pub(crate) fn unrouted(query: &str, headers: &http::HeaderMap) -> Option<String> {
    if headers.contains_key("x-amz-rename-source") {
        return Some("RenameObject (x-amz-rename-source)".into());
    }
    query
        .split('&')
        .map(|pair| pair.split_once('=').map_or(pair, |(name, _)| name))
        .find(|name| UNROUTED_SUBRESOURCES.contains(name))
        .map(|name| format!("?{name}"))
}

/// Writes whose handlers take or refuse each conditional header themselves.
const CONDITIONAL_WRITES: [&str; 6] = [
    "PutObject",
    "CopyObject",
    "CompleteMultipartUpload",
    "DeleteObject",
    "UploadPart",
    "UploadPartCopy",
];

/// The conditional headers of HTTP.
const CONDITIONS: [&str; 4] = [
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
];

/// The conditional header a write `op` carries that no such write takes in S3 (tagging, ACLs,
/// bucket settings, CreateMultipartUpload, DeleteObjects, ...), if any: refused, since it
/// would otherwise be accepted and ignored.
pub(crate) fn ignored_condition(
    op: &str,
    method: &http::Method,
    headers: &http::HeaderMap,
) -> Option<&'static str> {
    let write = matches!(
        *method,
        http::Method::PUT | http::Method::POST | http::Method::DELETE
    );
    if !write || CONDITIONAL_WRITES.contains(&op) {
        return None;
    }
    CONDITIONS.into_iter().find(|n| headers.contains_key(*n))
}

/// The 501 for a feature a request asked for.
pub(crate) fn not_implemented(what: &str) -> S3Error {
    s3_error!(
        NotImplemented,
        "{what} is not implemented by bucketload serve; the request changed nothing"
    )
}

/// The headers of a write (PutObject, CopyObject, CreateMultipartUpload) that ask for features
/// this server lacks. Each field is the header's value as sent.
#[derive(Debug, Default)]
pub(crate) struct WriteFeatures<'a> {
    pub(crate) acl: Option<&'a str>,
    pub(crate) grants: bool,
    pub(crate) lock: bool,
    pub(crate) sse: Option<&'a str>,
    pub(crate) sse_kms_or_customer: bool,
    pub(crate) storage_class: Option<&'a str>,
    pub(crate) website_redirect: bool,
    pub(crate) write_offset: bool,
}

impl WriteFeatures<'_> {
    /// Refuses the first feature asked for that would change something.
    pub(crate) fn refuse_unsupported(&self) -> S3Result<()> {
        if self.write_offset {
            return Err(not_implemented(
                "x-amz-write-offset-bytes (appending to an object; S3 allows it only in directory buckets)",
            ));
        }
        if let Some(acl) = self
            .acl
            .filter(|a| !matches!(*a, "private" | "bucket-owner-full-control"))
        {
            return Err(not_implemented(&format!("x-amz-acl: {acl}")));
        }
        if self.grants {
            return Err(not_implemented("x-amz-grant-* (access control lists)"));
        }
        if self.lock {
            // S3's answer on a bucket made without object lock; this server makes none with it.
            return Err(s3_error!(
                InvalidRequest,
                "Bucket is missing Object Lock Configuration"
            ));
        }
        if let Some(sse) = self.sse.filter(|s| *s != "AES256") {
            return Err(not_implemented(&format!(
                "x-amz-server-side-encryption: {sse}"
            )));
        }
        if self.sse_kms_or_customer {
            return Err(not_implemented(
                "encryption with KMS or customer-provided keys",
            ));
        }
        if let Some(class) = self.storage_class.filter(|c| *c != "STANDARD") {
            return Err(not_implemented(&format!("x-amz-storage-class: {class}")));
        }
        if self.website_redirect {
            return Err(not_implemented("x-amz-website-redirect-location"));
        }
        Ok(())
    }
}

/// The precondition of a write from its `If-Match` / `If-None-Match` headers. S3 accepts only
/// `If-None-Match: *` on writes.
pub(crate) fn write_precondition(
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
) -> S3Result<Precondition> {
    match (if_match, if_none_match) {
        (None, None) => Ok(Precondition::None),
        (Some(_), Some(_)) => Err(not_implemented(
            "If-Match together with If-None-Match on a write",
        )),
        (None, Some(ETagCondition::Any)) => Ok(Precondition::Absent),
        (None, Some(ETagCondition::ETag(_))) => Err(not_implemented(
            "If-None-Match with an ETag on a write (S3 accepts only If-None-Match: *)",
        )),
        (Some(ETagCondition::Any), None) => Ok(Precondition::Matches("*".into())),
        (Some(ETagCondition::ETag(tag)), None) => Ok(Precondition::Matches(tag.value().to_owned())),
    }
}

/// Refuses (501) a request carrying any of the conditional headers `names`: conditions its
/// operation does not take in S3 (general purpose buckets), which would otherwise be
/// accepted and ignored.
pub(crate) fn refuse_conditions(headers: &http::HeaderMap, names: &[&str]) -> S3Result<()> {
    match names.iter().find(|n| headers.contains_key(**n)) {
        Some(name) => Err(not_implemented(&format!(
            "the condition {name} on this operation"
        ))),
        None => Ok(()),
    }
}

/// Conditions on the time an object was modified, which no write of S3 takes.
pub(crate) const TIME_CONDITIONS: [&str; 2] = ["if-modified-since", "if-unmodified-since"];

/// The precondition of a CopyObject destination, from the raw `If-Match` / `If-None-Match`
/// headers (the request model has no fields for them).
pub(crate) fn header_precondition(headers: &http::HeaderMap) -> S3Result<Precondition> {
    let parse = |name: &str| -> S3Result<Option<ETagCondition>> {
        let Some(value) = headers.get(name) else {
            return Ok(None);
        };
        let text = value
            .to_str()
            .map_err(|_| s3_error!(InvalidArgument, "{name} is not valid text"))?
            .trim();
        Ok(Some(if text == "*" {
            ETagCondition::Any
        } else {
            ETagCondition::ETag(s3s::dto::ETag::Strong(text.trim_matches('"').to_owned()))
        }))
    };
    write_precondition(
        parse("if-match")?.as_ref(),
        parse("if-none-match")?.as_ref(),
    )
}

/// The `x-amz-copy-source-if-*` conditions of CopyObject and UploadPartCopy.
pub(crate) struct CopySourceConditions {
    pub(crate) if_match: Option<ETagCondition>,
    pub(crate) if_none_match: Option<ETagCondition>,
    pub(crate) if_modified_since: Option<Timestamp>,
    pub(crate) if_unmodified_since: Option<Timestamp>,
}

impl CopySourceConditions {
    /// Checks `source` (412 when a condition fails): see [`check_copy_source`].
    pub(crate) fn check(&self, source: &ObjectMeta) -> S3Result<()> {
        check_copy_source(
            source,
            self.if_match.as_ref(),
            self.if_none_match.as_ref(),
            self.if_modified_since.as_ref(),
            self.if_unmodified_since.as_ref(),
        )
    }
}

/// The `x-amz-copy-source-if-*` conditions on the source (412 when one fails), with S3's
/// precedence: a true If-Match wins over a false If-Unmodified-Since, a false If-None-Match
/// over a true If-Modified-Since.
fn check_copy_source(
    source: &ObjectMeta,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> S3Result<()> {
    let failed = || {
        s3_error!(
            PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold"
        )
    };
    let matches = |c: &ETagCondition| match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(tag) => tag.value() == source.etag,
    };
    // HTTP dates have whole seconds: compare the modification time at that precision.
    let modified = std::time::SystemTime::UNIX_EPOCH
        + std::time::Duration::from_secs(source.mtime_ns / 1_000_000_000);
    let modified = Timestamp::from(modified);
    let after = |t: &Timestamp| modified > *t;
    match (if_match, if_unmodified_since) {
        (Some(c), _) if !matches(c) => return Err(failed()),
        (None, Some(t)) if after(t) => return Err(failed()),
        _ => {}
    }
    match (if_none_match, if_modified_since) {
        (Some(c), _) if matches(c) => return Err(failed()),
        (None, Some(t)) if !after(t) => return Err(failed()),
        _ => {}
    }
    Ok(())
}

/// The MD5 the request's `Content-MD5` header declares, if it has one (an empty one too).
pub(crate) fn declared_md5(headers: &http::HeaderMap) -> S3Result<Option<[u8; 16]>> {
    match headers.get("content-md5") {
        None => Ok(None),
        Some(value) => content_md5(Some(value.to_str().unwrap_or("\u{fffd}"))),
    }
}

/// The MD5 a `Content-MD5` header declares: 400 InvalidDigest unless it is the base64 of 16
/// bytes.
pub(crate) fn content_md5(header: Option<&str>) -> S3Result<Option<[u8; 16]>> {
    let Some(text) = header else {
        return Ok(None);
    };
    let invalid = || {
        s3_error!(
            InvalidDigest,
            "The Content-MD5 you specified is not valid: {text:?} is not the base64 of an MD5"
        )
    };
    let bytes = base64_decode(text.trim()).ok_or_else(invalid)?;
    bytes.try_into().map(Some).map_err(|_| invalid())
}

/// 400 BadDigest when the body's MD5 is not the one `Content-MD5` declared.
pub(crate) fn verify_md5(declared: Option<[u8; 16]>, computed: &[u8]) -> S3Result<()> {
    match declared {
        Some(md5) if md5.as_slice() != computed => Err(S3Error::with_message(
            S3ErrorCode::BadDigest,
            "The Content-MD5 you specified did not match what we received",
        )),
        _ => Ok(()),
    }
}

/// Standard base64 with padding; `None` when `text` is not that.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = text.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for (i, chunk) in bytes.chunks(4).enumerate() {
        let last = i + 1 == bytes.len() / 4;
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = (n << 6) | value(c)?;
        }
        n <<= 6 * pad as u32;
        let group = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&group[..3 - pad]);
    }
    Some(out)
}

/// The byte range of part `number` (1-based) of an object, for GET and HEAD with
/// `partNumber`: an object written whole has one part. 400 InvalidPart otherwise (S3's
/// answer, which the S3 conformance suite checks).
pub(crate) fn part_range(meta: &ObjectMeta, number: i32) -> S3Result<std::ops::Range<u64>> {
    let whole = [meta.size];
    let parts: &[u64] = if meta.parts.is_empty() {
        &whole
    } else {
        &meta.parts
    };
    let index = usize::try_from(number).ok().and_then(|n| n.checked_sub(1));
    let Some(index) = index.filter(|&i| i < parts.len()) else {
        return Err(s3_error!(
            InvalidPart,
            "The requested partnumber is not satisfiable: the object has {} part(s)",
            parts.len()
        ));
    };
    let start: u64 = parts[..index].iter().sum();
    Ok(start..start + parts[index])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn base64_of_md5s() {
        // md5("") = d41d8cd98f00b204e9800998ecf8427e
        let md5 = content_md5(Some("1B2M2Y8AsgTpgAmY7PhCfg=="))
            .unwrap()
            .unwrap();
        assert_eq!(hex::encode(md5), "d41d8cd98f00b204e9800998ecf8427e");
        for bad in [
            "",
            "abc",
            "1B2M2Y8AsgTpgAmY7PhCfg=",
            "1B2M2Y8A=gTpgAmY7PhCfg==",
            "aGVsbG8=",
        ] {
            let err = content_md5(Some(bad)).unwrap_err();
            assert_eq!(*err.code(), S3ErrorCode::InvalidDigest, "{bad:?}");
        }
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGk=").unwrap(), b"hi");
    }
}
