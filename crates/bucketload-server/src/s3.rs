//! The S3 operations, on top of [`Storage`]. File-system work runs on Tokio's blocking pool;
//! request bodies stream to a blocking writer through a small bounded channel; object bodies
//! come from [`crate::body`] (small objects read at once, large ones memory-mapped).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use s3s::dto::*;
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use crate::bufpool::BufferPool;
use crate::checksum;
use crate::fidelity::{self, WriteFeatures};
use crate::storage::{
    CompletedPart, Deleted, ListItem, ListQuery, ObjectAttrs, ObjectMeta, PartWriter, Precondition,
    Storage, VersionItem, VersionQuery, Versioning,
};
use crate::tagging;

/// GETs of objects up to this size are prepared on the Tokio worker instead of the blocking
/// pool: an open, fstat and map (or a pread of at most 16 KiB) cost less than the two thread
/// wake-ups of a blocking-pool hand-off (~30 µs per request on 2 cores, measured with
/// `examples/loadgen.rs`). Larger objects (whose ETag may still have to be computed, for files
/// placed by hand), writes and listings use the blocking pool.
const INLINE_READ_MAX: u64 = 256 * 1024;
/// S3's page size limit for listings.
const MAX_LIST_KEYS: i32 = 1000;
/// S3's page size limit for ListBuckets.
const MAX_LIST_BUCKETS: i32 = 10_000;
/// S3's limit on the keys of one DeleteObjects request.
const MAX_DELETE_KEYS: usize = 1000;

/// The S3 implementation served by s3s.
#[derive(Debug, Clone)]
pub(crate) struct Backend {
    storage: Arc<Storage>,
    min_part_size: u64,
    buffers: Arc<BufferPool>,
}

impl Backend {
    pub(crate) fn new(storage: Arc<Storage>, min_part_size: u64) -> Self {
        Self {
            storage,
            min_part_size,
            buffers: Arc::default(),
        }
    }

    /// Runs blocking storage work on the blocking pool.
    async fn blocking<T, F>(&self, f: F) -> S3Result<T>
    where
        F: FnOnce(&Storage) -> S3Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let storage = Arc::clone(&self.storage);
        tokio::task::spawn_blocking(move || f(&storage))
            .await
            .map_err(|e| s3_error!(InternalError, "storage task failed: {e}"))?
    }

    /// Streams a request body into a temporary file, computing its MD5 on the way.
    /// Receives a request body into a temporary object, verifying the checksums the request
    /// declared (`x-amz-checksum-*` headers) as it arrives; returns the object and the
    /// checksums computed (those declared, base64).
    async fn receive(
        &self,
        body: Option<StreamingBlob>,
        (declared, also): (Checksum, Option<checksum::Algorithm>),
        open: impl FnOnce(&Storage) -> S3Result<PartWriter> + Send + 'static,
    ) -> S3Result<(PartWriter, Checksum)> {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        let writer = self.blocking(move |storage| {
            let mut writer = open(storage)?;
            while let Some(chunk) = rx.blocking_recv() {
                writer.write(storage, chunk)?;
            }
            Ok(writer)
        });
        let mut wanted = declared.clone();
        if let Some(a) = also
            && a.value(&declared).is_none()
        {
            let extra = a.checksum(String::new());
            wanted.checksum_crc32 = wanted.checksum_crc32.or(extra.checksum_crc32);
            wanted.checksum_crc32c = wanted.checksum_crc32c.or(extra.checksum_crc32c);
            wanted.checksum_crc64nvme = wanted.checksum_crc64nvme.or(extra.checksum_crc64nvme);
            wanted.checksum_sha1 = wanted.checksum_sha1.or(extra.checksum_sha1);
            wanted.checksum_sha256 = wanted.checksum_sha256.or(extra.checksum_sha256);
        }
        let mut hasher = checksum::hasher_for(&wanted);
        let feed = async {
            let Some(mut body) = body else {
                return Ok::<(), S3Error>(());
            };
            while let Some(chunk) = body.next().await {
                let chunk = chunk
                    .map_err(|e| s3_error!(IncompleteBody, "request body ended early: {e}"))?;
                if let Some(h) = hasher.as_mut() {
                    h.update(&chunk);
                }
                if tx.send(chunk).await.is_err() {
                    break; // the writer failed; its error is reported below
                }
            }
            drop(tx);
            Ok(())
        };
        let (temp, fed) = tokio::join!(writer, feed);
        let temp = temp?;
        fed?;
        let computed = hasher.map(|h| h.finalize()).unwrap_or_default();
        checksum::verify(&declared, &computed)?;
        Ok((temp, computed))
    }

    /// 404 NoSuchBucket unless `bucket` exists.
    async fn existing_bucket(&self, bucket: String) -> S3Result<()> {
        self.blocking(move |s| s.bucket_dir(&bucket).map(|_| ()))
            .await
    }

    /// An object (version `version`, the current one for `None`) opened for a GET, with the
    /// metadata of that very file. A key whose latest version is a delete marker answers 404
    /// with the marker's headers.
    async fn open_for_read(
        &self,
        bucket: String,
        key: String,
        version: Option<String>,
        versioned: bool,
    ) -> S3Result<(ObjectMeta, std::fs::File)> {
        if let Some(version) = version {
            return self
                .blocking(move |s| s.open_version(&bucket, &key, Some(&version)))
                .await;
        }
        let (file, stat) = match self.storage.open_file(&bucket, &key) {
            Ok(opened) => opened,
            Err(e) if versioned => {
                let explained = self
                    .blocking(move |s| Ok(s.explain_missing(e, &bucket, &key)))
                    .await;
                return Err(explained.unwrap_or_else(|e| e));
            }
            Err(e) => return Err(e),
        };
        if stat.len() <= INLINE_READ_MAX {
            self.storage.describe(&bucket, &key, file, &stat)
        } else {
            self.blocking(move |s| s.describe(&bucket, &key, file, &stat))
                .await
        }
    }

    /// The body of an opened object for `range` (the whole object for `None`).
    async fn read_body(
        &self,
        meta: ObjectMeta,
        file: std::fs::File,
        range: Option<Range>,
    ) -> S3Result<(ObjectMeta, std::ops::Range<u64>, crate::body::FileBody)> {
        if meta.size <= INLINE_READ_MAX {
            return crate::body::body_for(&self.buffers, meta, file, range);
        }
        let buffers = Arc::clone(&self.buffers);
        self.blocking(move |_| crate::body::body_for(&buffers, meta, file, range))
            .await
    }

    /// Adds to a directory bucket's page, listed with the delimiter `/`, the common prefixes
    /// of multipart uploads in progress under `prefix`, as S3 Express lists them: each in the
    /// page whose key range holds it (after `after`, up to the page's last entry unless it is
    /// the last page), once.
    async fn add_upload_prefixes(
        &self,
        bucket: &str,
        prefix: &str,
        after: Option<String>,
        encode: UrlEncoding,
        listed: &mut Listed,
    ) -> S3Result<()> {
        let (bucket, wanted) = (bucket.to_owned(), prefix.to_owned());
        let uploads = self
            .blocking(move |s| s.list_uploads(&bucket, &wanted))
            .await?;
        let last = listed.truncated.then(|| listed.last.clone()).flatten();
        let mut found = std::collections::BTreeSet::new();
        for upload in uploads {
            let Some(rest) = upload.key.strip_prefix(prefix) else {
                continue;
            };
            let Some(at) = rest.find('/') else {
                continue;
            };
            let common = format!("{prefix}{}", &rest[..=at]);
            let in_range = after.as_ref().is_none_or(|a| common > *a)
                && last.as_ref().is_none_or(|l| common <= *l);
            if in_range {
                found.insert(encode.apply(common));
            }
        }
        for common in found {
            if !listed
                .prefixes
                .iter()
                .any(|p| p.prefix.as_deref() == Some(common.as_str()))
            {
                listed.prefixes.push(CommonPrefix {
                    prefix: Some(common),
                });
                listed.key_count += 1;
            }
        }
        Ok(())
    }

    /// One page of a listing (ListObjects and ListObjectsV2), keys encoded as asked.
    async fn list_page(
        &self,
        bucket: String,
        mut query: ListQuery,
        max_keys: Option<i32>,
        encode: UrlEncoding,
    ) -> S3Result<Listed> {
        let max_keys = page_size("max-keys", max_keys, MAX_LIST_KEYS)?;
        query.max_keys = max_keys as usize;
        let directory = crate::directory::is_directory_bucket(&bucket);
        let mut page = self.blocking(move |s| s.list(&bucket, &query)).await?;
        let last_token = page.items.last().map(encode_token);
        let last = page.items.last().map(|item| match item {
            ListItem::Object(key, _) => key.clone(),
            ListItem::CommonPrefix(p) => p.clone(),
        });
        // A directory bucket's page is not in key order (S3 Express lists so); the page's
        // continuation token above is still its last key in order, so pages follow each
        // other over the whole key space.
        if directory {
            page.items.sort_by_cached_key(|item| match item {
                ListItem::Object(key, _) => crate::directory::scramble_rank(key),
                ListItem::CommonPrefix(p) => crate::directory::scramble_rank(p),
            });
        }
        let (mut contents, mut prefixes) = (Vec::new(), Vec::new());
        let key_count = page.items.len() as i32;
        for item in page.items {
            match item {
                ListItem::Object(key, meta) => contents.push(Object {
                    e_tag: Some(etag(&meta)),
                    last_modified: Some(timestamp(meta.last_modified())),
                    size: Some(meta.size as i64),
                    storage_class: Some(ObjectStorageClass::from_static(
                        ObjectStorageClass::STANDARD,
                    )),
                    key: Some(encode.apply(key)),
                    ..Default::default()
                }),
                ListItem::CommonPrefix(p) => prefixes.push(CommonPrefix {
                    prefix: Some(encode.apply(p)),
                }),
            }
        }
        Ok(Listed {
            contents,
            prefixes,
            key_count,
            max_keys,
            truncated: page.truncated,
            last,
            last_token,
        })
    }
}

/// The refusal of ListObjects (v1) in a directory bucket, where S3 Express lists with
/// ListObjectsV2 only.
fn directory_refuses_list_objects() -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::Custom("NotSupported".into()),
        "ListObjects is not supported by directory buckets; list with ListObjectsV2 (list-type=2)",
    );
    e.set_status_code(http::StatusCode::BAD_REQUEST);
    e
}

/// What S3 Express takes of a listing in a directory bucket: a prefix that ends in `/`, `/`
/// as the only delimiter, and no `start-after`.
fn check_directory_listing(
    prefix: Option<&str>,
    delimiter: Option<&str>,
    start_after: Option<&str>,
) -> S3Result<()> {
    if let Some(p) = prefix.filter(|p| !p.is_empty() && !p.ends_with('/')) {
        return Err(s3_error!(
            InvalidArgument,
            "in a directory bucket a prefix must end in the delimiter /, not {p:?}"
        ));
    }
    if let Some(d) = delimiter.filter(|d| !d.is_empty() && *d != "/") {
        return Err(s3_error!(
            InvalidArgument,
            "in a directory bucket / is the only delimiter, not {d:?}"
        ));
    }
    if start_after.is_some_and(|s| !s.is_empty()) {
        return Err(s3_error!(
            InvalidArgument,
            "start-after is not supported by directory buckets; continue a listing with its continuation token"
        ));
    }
    Ok(())
}

/// A listing page as S3 answers it.
struct Listed {
    contents: Vec<Object>,
    prefixes: Vec<CommonPrefix>,
    key_count: i32,
    max_keys: i32,
    truncated: bool,
    /// The last key or common prefix of the page (ListObjects' NextMarker).
    last: Option<String>,
    /// ListObjectsV2's continuation token after the page.
    last_token: Option<String>,
}

/// Whether a listing URL-encodes the keys, prefixes and delimiter it returns
/// (`encoding-type=url`, which boto3 sends by default and decodes).
#[derive(Clone, Copy, Debug)]
struct UrlEncoding(bool);

impl UrlEncoding {
    /// Percent-encodes every byte but unreserved characters and `/`, as S3 does.
    fn apply(self, text: String) -> String {
        if !self.0 {
            return text;
        }
        let mut out = String::with_capacity(text.len());
        for &b in text.as_bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    }
}

/// True if `name` can name an S3 region (`us-east-1`, `ap-southeast-7`, `us-gov-west-1`), or
/// is `EU`, the old name S3 still takes for eu-west-1.
fn is_region(name: &str) -> bool {
    // The longest region names have about 15 characters; 32 leaves room for new ones.
    let shaped = name.len() <= 32
        && name.contains('-')
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.ends_with(|c: char| c.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    shaped || name == "EU"
}

/// The number of entries a listing's page holds: `most` unless the request asks for fewer; a
/// negative number is refused as S3 refuses it.
fn page_size(name: &str, asked: Option<i32>, most: i32) -> S3Result<i32> {
    match asked {
        None => Ok(most),
        Some(n) if n < 0 => Err(s3_error!(
            InvalidArgument,
            "Argument {name} must be an integer between 0 and 2147483647"
        )),
        Some(n) => Ok(n.min(most)),
    }
}

/// A marker argument (`part-number-marker`): 0 when absent; a negative one is refused as S3
/// refuses it.
fn non_negative(name: &str, asked: Option<i32>) -> S3Result<i32> {
    asked.map_or(Ok(0), |n| page_size(name, Some(n), i32::MAX))
}

fn url_encoding(encoding: Option<&EncodingType>) -> S3Result<UrlEncoding> {
    match encoding.map(EncodingType::as_str) {
        None => Ok(UrlEncoding(false)),
        Some("url") => Ok(UrlEncoding(true)),
        Some(other) => Err(s3_error!(
            InvalidArgument,
            "Invalid Encoding Method specified in Request: {other:?} (only \"url\")"
        )),
    }
}

fn owner() -> Owner {
    Owner {
        display_name: Some("bucketload".into()),
        id: Some("bucketload".into()),
    }
}

fn attrs(
    content_type: Option<String>,
    metadata: Option<Metadata>,
    headers: BTreeMap<String, String>,
) -> ObjectAttrs {
    ObjectAttrs {
        content_type,
        metadata: metadata
            .map(|m| m.into_iter().collect())
            .unwrap_or_default(),
        parts: Vec::new(),
        headers,
        checksum: None,
        tags: BTreeMap::new(),
    }
}

/// Copies `sums` into the `checksum_*` fields (and `checksum_type`) of an S3 output struct.
macro_rules! put_checksums {
    ($out:expr, $sums:expr) => {{
        let sums: Checksum = $sums;
        let mut out = $out;
        out.checksum_crc32 = sums.checksum_crc32;
        out.checksum_crc32c = sums.checksum_crc32c;
        out.checksum_crc64nvme = sums.checksum_crc64nvme;
        out.checksum_sha1 = sums.checksum_sha1;
        out.checksum_sha256 = sums.checksum_sha256;
        out.checksum_type = sums.checksum_type;
        out
    }};
}

/// The checksum a GET or HEAD returns, as S3 returns it: only when the client asks
/// (`x-amz-checksum-mode: ENABLED`), not for a byte range, and for part `n` of a multipart
/// object that part's checksum.
fn returned_checksum(
    meta: &ObjectMeta,
    mode: Option<&ChecksumMode>,
    part_number: Option<i32>,
    ranged: bool,
) -> Checksum {
    let enabled = mode.is_some_and(|m| m.as_str() == ChecksumMode::ENABLED);
    let Some(stored) = meta.checksum.as_deref().filter(|_| enabled && !ranged) else {
        return Checksum::default();
    };
    let mut sums = match part_number {
        Some(n) if !stored.parts.is_empty() => stored.part(n as usize),
        _ => stored.whole(),
    };
    sums.checksum_type = Some(ChecksumType::from(stored.kind.clone()));
    sums
}

/// A stored checksum as an S3 `Checksum`, with its type.
fn typed(stored: Option<&checksum::Stored>) -> Checksum {
    stored.map_or_else(Checksum::default, |c| Checksum {
        checksum_type: Some(ChecksumType::from(c.kind.clone())),
        ..c.whole()
    })
}

/// The standard headers S3 stores with an object and returns on GET and HEAD.
fn stored_headers(
    cache_control: Option<String>,
    content_disposition: Option<String>,
    content_encoding: Option<String>,
    content_language: Option<String>,
    expires: Option<Timestamp>,
) -> BTreeMap<String, String> {
    let expires = expires.and_then(|t| {
        let mut text = Vec::new();
        t.format(TimestampFormat::HttpDate, &mut text).ok()?;
        String::from_utf8(text).ok()
    });
    [
        ("cache-control", cache_control),
        ("content-disposition", content_disposition),
        ("content-encoding", content_encoding),
        ("content-language", content_language),
        ("expires", expires),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some((name.to_owned(), value?)))
    .collect()
}

/// A stored standard header.
fn stored(meta: &ObjectMeta, name: &str) -> Option<String> {
    meta.headers.get(name).cloned()
}

/// The stored `Expires` header.
fn stored_expires(meta: &ObjectMeta) -> Option<Timestamp> {
    Timestamp::parse(TimestampFormat::HttpDate, meta.headers.get("expires")?).ok()
}

/// The object's Content-Type: S3 answers `binary/octet-stream` for one written without.
fn content_type(meta: &ObjectMeta) -> Option<String> {
    Some(
        meta.content_type
            .clone()
            .unwrap_or_else(|| "binary/octet-stream".to_owned()),
    )
}

/// S3's limit on user metadata: the UTF-8 bytes of every key (the name after `x-amz-meta-`)
/// and value together.
const MAX_METADATA_BYTES: usize = 2 * 1024;

/// 400 `MetadataTooLarge` when user metadata is over [`MAX_METADATA_BYTES`], as S3.
fn check_metadata_size(metadata: Option<&Metadata>) -> S3Result<()> {
    let size: usize = metadata.map_or(0, |m| m.iter().map(|(k, v)| k.len() + v.len()).sum());
    if size > MAX_METADATA_BYTES {
        return Err(s3_error!(
            MetadataTooLarge,
            "Your metadata headers exceed the maximum allowed metadata size: {size} bytes, at most {MAX_METADATA_BYTES}"
        ));
    }
    Ok(())
}

fn user_metadata(meta: &BTreeMap<String, String>) -> Option<Metadata> {
    (!meta.is_empty()).then(|| meta.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn etag(meta: &ObjectMeta) -> ETag {
    ETag::Strong(meta.etag.clone())
}

/// `Content-Range` of bytes `span` of an object of `size` bytes.
fn content_range(span: &std::ops::Range<u64>, size: u64) -> String {
    format!("bytes {}-{}/{size}", span.start, span.end.saturating_sub(1))
}

/// `x-amz-mp-parts-count` of a GET or HEAD with `partNumber`: S3 sends it for objects made by
/// a multipart upload.
fn part_count(meta: &ObjectMeta, part_number: Option<i32>) -> Option<i32> {
    (part_number.is_some() && !meta.parts.is_empty()).then_some(meta.parts.len() as i32)
}

fn timestamp(t: std::time::SystemTime) -> Timestamp {
    Timestamp::from(t)
}

/// The [`WriteFeatures`] a PutObject, CopyObject or CreateMultipartUpload request asks for
/// (their models share these fields).
macro_rules! write_features {
    ($input:expr) => {
        WriteFeatures {
            acl: $input.acl.as_ref().map(|a| a.as_str()),
            grants: $input.grant_full_control.is_some()
                || $input.grant_read.is_some()
                || $input.grant_read_acp.is_some()
                || $input.grant_write_acp.is_some(),
            lock: $input.object_lock_mode.is_some()
                || $input.object_lock_retain_until_date.is_some()
                || $input.object_lock_legal_hold_status.is_some(),
            sse: $input.server_side_encryption.as_ref().map(|s| s.as_str()),
            sse_kms_or_customer: $input.ssekms_key_id.is_some()
                || $input.ssekms_encryption_context.is_some()
                || $input.sse_customer_algorithm.is_some()
                || $input.sse_customer_key.is_some(),
            storage_class: $input.storage_class.as_ref().map(|c| c.as_str()),
            website_redirect: $input.website_redirect_location.is_some(),
            write_offset: false,
        }
    };
}

/// The conditions of a GET or HEAD (RFC 9110 with S3's precedence: If-Match decides over
/// If-Unmodified-Since, If-None-Match over If-Modified-Since).
#[derive(Debug, Default)]
struct ReadConditions {
    if_match: Option<ETagCondition>,
    if_none_match: Option<ETagCondition>,
    if_modified_since: Option<Timestamp>,
    if_unmodified_since: Option<Timestamp>,
}

/// The [`ReadConditions`] of a GetObject or HeadObject request (their models share the fields).
macro_rules! read_conditions {
    ($input:expr) => {
        ReadConditions {
            if_match: $input.if_match.clone(),
            if_none_match: $input.if_none_match.clone(),
            if_modified_since: $input.if_modified_since.clone(),
            if_unmodified_since: $input.if_unmodified_since.clone(),
        }
    };
}

/// Answers the conditions as S3 does: 412 PreconditionFailed, or 304 Not Modified carrying
/// the object's ETag and Last-Modified.
fn check_read_conditions(meta: &ObjectMeta, c: &ReadConditions) -> S3Result<()> {
    let matches = |c: &ETagCondition| match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(tag) => tag.value() == meta.etag,
    };
    // HTTP dates have whole seconds.
    let modified = Timestamp::from(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(meta.mtime_ns / 1_000_000_000),
    );
    let failed = match (&c.if_match, &c.if_unmodified_since) {
        (Some(m), _) => !matches(m),
        (None, Some(t)) => modified > *t,
        (None, None) => false,
    };
    if failed {
        return Err(s3_error!(
            PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold"
        ));
    }
    let not_modified = match (&c.if_none_match, &c.if_modified_since) {
        (Some(m), _) => matches(m),
        (None, Some(t)) => modified <= *t,
        (None, None) => false,
    };
    if not_modified {
        let mut e = s3_error!(NotModified);
        let mut headers = http::HeaderMap::new();
        if let Ok(v) = http::HeaderValue::from_str(&format!("\"{}\"", meta.etag)) {
            headers.insert(http::header::ETAG, v);
        }
        let mut date = Vec::new();
        if modified
            .format(TimestampFormat::HttpDate, &mut date)
            .is_ok()
            && let Ok(v) = http::HeaderValue::from_bytes(&date)
        {
            headers.insert(http::header::LAST_MODIFIED, v);
        }
        e.set_headers(headers);
        return Err(e);
    }
    Ok(())
}

/// UploadPartCopy's source conditions (If-Match → 412, If-None-Match → 304).
/// Parses `x-amz-copy-source-range`, which S3 accepts only as `bytes=first-last`.
fn parse_copy_range(text: &str) -> S3Result<std::ops::RangeInclusive<u64>> {
    let parsed = text.strip_prefix("bytes=").and_then(|r| {
        let (first, last) = r.split_once('-')?;
        Some(first.parse::<u64>().ok()?..=last.parse::<u64>().ok()?)
    });
    match parsed {
        Some(range) if range.start() <= range.end() => Ok(range),
        _ => Err(s3_error!(
            InvalidArgument,
            "x-amz-copy-source-range must look like bytes=first-last with first <= last, not {text:?}"
        )),
    }
}

fn encode_token(item: &ListItem) -> String {
    match item {
        ListItem::Object(key, _) => format!("k{}", hex::encode(key)),
        ListItem::CommonPrefix(prefix) => format!("p{}", hex::encode(prefix)),
    }
}

fn decode_token(token: &str, query: &mut ListQuery) -> S3Result<()> {
    let invalid = || {
        s3_error!(
            InvalidArgument,
            "the continuation token is invalid; start the listing again"
        )
    };
    let (kind, hex_part) = token.split_at_checked(1).ok_or_else(invalid)?;
    let marker =
        String::from_utf8(hex::decode(hex_part).map_err(|_| invalid())?).map_err(|_| invalid())?;
    match kind {
        "k" => {}
        "p" => query.skip_prefix = Some(marker.clone()),
        _ => return Err(invalid()),
    }
    query.after = Some(marker);
    Ok(())
}

#[async_trait::async_trait]
impl S3 for Backend {
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let input = req.input;
        let max = match input.max_buckets {
            None => MAX_LIST_BUCKETS,
            Some(n) if (1..=MAX_LIST_BUCKETS).contains(&n) => n,
            Some(n) => {
                return Err(s3_error!(
                    InvalidArgument,
                    "max-buckets must be between 1 and {MAX_LIST_BUCKETS}, not {n}"
                ));
            }
        };
        let prefix = input.prefix.clone().unwrap_or_default();
        let after = input.continuation_token.clone().unwrap_or_default();
        let mut buckets: Vec<_> = self
            .blocking(|s| s.list_buckets())
            .await?
            .into_iter()
            .filter(|(name, _)| name.starts_with(&prefix) && *name > after)
            .collect();
        // The continuation token is the last name handed out: bucket names are listed in order.
        let next = (buckets.len() > max as usize).then(|| buckets[max as usize - 1].0.clone());
        buckets.truncate(max as usize);
        let buckets = buckets
            .into_iter()
            .map(|(name, created)| Bucket {
                name: Some(name),
                creation_date: Some(timestamp(created)),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            owner: Some(owner()),
            continuation_token: next,
            prefix: input.prefix,
        }))
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let input = req.input;
        if input.object_lock_enabled_for_bucket == Some(true) {
            return Err(fidelity::not_implemented(
                "x-amz-bucket-object-lock-enabled (object lock)",
            ));
        }
        if let Some(acl) = input.acl.as_ref().filter(|a| a.as_str() != "private") {
            return Err(fidelity::not_implemented(&format!(
                "x-amz-acl: {}",
                acl.as_str()
            )));
        }
        if input.grant_full_control.is_some()
            || input.grant_read.is_some()
            || input.grant_read_acp.is_some()
            || input.grant_write.is_some()
            || input.grant_write_acp.is_some()
        {
            return Err(fidelity::not_implemented(
                "x-amz-grant-* (access control lists)",
            ));
        }
        let constraint = input
            .create_bucket_configuration
            .as_ref()
            .and_then(|c| c.location_constraint.as_ref());
        if let Some(region) = constraint.filter(|c| !is_region(c.as_str())) {
            let shown: String = region.as_str().chars().take(64).collect();
            return Err(s3_error!(
                InvalidLocationConstraint,
                "The specified location-constraint is not valid: {shown:?} names no region"
            ));
        }
        let bucket = input.bucket;
        let location = format!("/{bucket}");
        // A bucket made without a location constraint is in us-east-1, where S3 answers 200 to
        // creating a bucket one already owns (elsewhere 409 BucketAlreadyOwnedByYou).
        let us_east_1 = input
            .create_bucket_configuration
            .as_ref()
            .and_then(|c| c.location_constraint.as_ref())
            .is_none_or(|l| l.as_str() == "us-east-1");
        let ownership = input.object_ownership.map(|o| o.as_str().to_owned());
        if let Some(o) = ownership.as_deref()
            && ![
                ObjectOwnership::BUCKET_OWNER_ENFORCED,
                ObjectOwnership::BUCKET_OWNER_PREFERRED,
                ObjectOwnership::OBJECT_WRITER,
            ]
            .contains(&o)
        {
            return Err(s3_error!(
                InvalidArgument,
                "x-amz-object-ownership must be BucketOwnerEnforced, BucketOwnerPreferred or ObjectWriter, not {o:?}"
            ));
        }
        let created = bucket.clone();
        match self.blocking(move |s| s.create_bucket(&bucket)).await {
            Err(e) if us_east_1 && e.code().as_str() == "BucketAlreadyOwnedByYou" => {}
            Err(e) => return Err(e),
            Ok(()) => {
                // The bucket's object ownership, as CreateBucket's x-amz-object-ownership sets it.
                if let Some(ownership) = ownership {
                    self.blocking(move |s| {
                        s.update_bucket_config(&created, |b| b.ownership = Some(ownership))
                    })
                    .await?;
                }
            }
        }
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(location),
        }))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        let bucket = req.input.bucket;
        self.blocking(move |s| s.bucket_dir(&bucket).map(|_| ()))
            .await?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let bucket = req.input.bucket;
        self.blocking(move |s| s.delete_bucket(&bucket)).await?;
        Ok(S3Response::new(DeleteBucketOutput::default()))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = req.input;
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let version = input.version_id.clone();
        let (meta, versioned) = self
            .blocking(move |s| {
                let versioned = s.versioning(&bucket)?.is_versioned();
                let meta = s
                    .head_version(&bucket, &key, version.as_deref())
                    .map_err(|e| s.explain_missing(e, &bucket, &key))?;
                Ok((meta, versioned))
            })
            .await?;
        check_read_conditions(&meta, &read_conditions!(input))?;
        let part = input
            .part_number
            .map(|n| fidelity::part_range(&meta, n))
            .transpose()?;
        let sums = returned_checksum(
            &meta,
            input.checksum_mode.as_ref(),
            input.part_number,
            input.range.is_some(),
        );
        Ok(S3Response::new(put_checksums!(
            HeadObjectOutput {
                accept_ranges: Some("bytes".into()),
                content_length: Some(part.as_ref().map_or(meta.size, |p| p.end - p.start) as i64),
                content_range: part.as_ref().map(|p| content_range(p, meta.size)),
                parts_count: part_count(&meta, input.part_number),
                content_type: content_type(&meta),
                cache_control: stored(&meta, "cache-control"),
                content_disposition: stored(&meta, "content-disposition"),
                content_encoding: stored(&meta, "content-encoding"),
                content_language: stored(&meta, "content-language"),
                expires: stored_expires(&meta),
                e_tag: Some(etag(&meta)),
                last_modified: Some(timestamp(meta.last_modified())),
                metadata: user_metadata(&meta.metadata),
                version_id: answered_version(&meta, versioned),
                ..Default::default()
            },
            sums
        )))
    }

    async fn put_object_tagging(
        &self,
        req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        let input = req.input;
        let tags = tagging::from_set(input.tagging.tag_set, tagging::MAX_OBJECT_TAGS)?;
        let (bucket, key, version) = (input.bucket, input.key, input.version_id);
        let version_id = self
            .blocking(move |s| {
                let meta = s.set_version_tags(&bucket, &key, version.as_deref(), tags)?;
                Ok(answered_version(
                    &meta,
                    s.versioning(&bucket)?.is_versioned(),
                ))
            })
            .await?;
        Ok(S3Response::new(PutObjectTaggingOutput { version_id }))
    }

    async fn get_object_tagging(
        &self,
        req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        let input = req.input;
        let (bucket, key, version) = (input.bucket, input.key, input.version_id);
        let (meta, version_id) = self
            .blocking(move |s| {
                let meta = s.head_version(&bucket, &key, version.as_deref())?;
                let id = answered_version(&meta, s.versioning(&bucket)?.is_versioned());
                Ok((meta, id))
            })
            .await?;
        Ok(S3Response::new(GetObjectTaggingOutput {
            tag_set: tagging::to_set(&meta.tags),
            version_id,
        }))
    }

    async fn delete_object_tagging(
        &self,
        req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        let input = req.input;
        let (bucket, key, version) = (input.bucket, input.key, input.version_id);
        let version_id = self
            .blocking(move |s| {
                let meta =
                    s.set_version_tags(&bucket, &key, version.as_deref(), BTreeMap::new())?;
                Ok(answered_version(
                    &meta,
                    s.versioning(&bucket)?.is_versioned(),
                ))
            })
            .await?;
        Ok(S3Response::new(DeleteObjectTaggingOutput { version_id }))
    }

    async fn put_bucket_tagging(
        &self,
        req: S3Request<PutBucketTaggingInput>,
    ) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        let input = req.input;
        let tags = tagging::from_set(input.tagging.tag_set, tagging::MAX_BUCKET_TAGS)?;
        let bucket = input.bucket;
        self.blocking(move |s| s.set_bucket_tags(&bucket, Some(&tags)))
            .await?;
        Ok(S3Response::new(PutBucketTaggingOutput::default()))
    }

    async fn get_bucket_tagging(
        &self,
        req: S3Request<GetBucketTaggingInput>,
    ) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        let bucket = req.input.bucket;
        let tags = self.blocking(move |s| s.bucket_tags(&bucket)).await?;
        let Some(tags) = tags else {
            return Err(s3_error!(NoSuchTagSet, "The TagSet does not exist"));
        };
        Ok(S3Response::new(GetBucketTaggingOutput {
            tag_set: tagging::to_set(&tags),
        }))
    }

    async fn delete_bucket_tagging(
        &self,
        req: S3Request<DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        let bucket = req.input.bucket;
        self.blocking(move |s| s.set_bucket_tags(&bucket, None))
            .await?;
        Ok(S3Response::new(DeleteBucketTaggingOutput::default()))
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        let bucket = req.input.bucket;
        self.blocking(move |s| s.bucket_dir(&bucket).map(|_| ()))
            .await?;
        Ok(S3Response::new(GetBucketAclOutput {
            grants: Some(owner_grants()),
            owner: Some(owner()),
        }))
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        let input = req.input;
        let grants = input.grant_full_control.is_some()
            || input.grant_read.is_some()
            || input.grant_read_acp.is_some()
            || input.grant_write.is_some()
            || input.grant_write_acp.is_some();
        owner_only_acl(
            input.acl.as_ref().map(BucketCannedACL::as_str),
            input.access_control_policy.as_ref(),
            grants,
        )?;
        let bucket = input.bucket;
        self.blocking(move |s| s.bucket_dir(&bucket).map(|_| ()))
            .await?;
        Ok(S3Response::new(PutBucketAclOutput::default()))
    }

    async fn get_object_acl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        let input = req.input;
        let (bucket, key, version) = (input.bucket, input.key, input.version_id);
        self.blocking(move |s| s.head_version(&bucket, &key, version.as_deref()))
            .await?;
        Ok(S3Response::new(GetObjectAclOutput {
            grants: Some(owner_grants()),
            owner: Some(owner()),
            ..Default::default()
        }))
    }

    async fn put_object_acl(
        &self,
        req: S3Request<PutObjectAclInput>,
    ) -> S3Result<S3Response<PutObjectAclOutput>> {
        let input = req.input;
        let grants = input.grant_full_control.is_some()
            || input.grant_read.is_some()
            || input.grant_read_acp.is_some()
            || input.grant_write.is_some()
            || input.grant_write_acp.is_some();
        owner_only_acl(
            input.acl.as_ref().map(ObjectCannedACL::as_str),
            input.access_control_policy.as_ref(),
            grants,
        )?;
        let (bucket, key, version) = (input.bucket, input.key, input.version_id);
        self.blocking(move |s| s.head_version(&bucket, &key, version.as_deref()))
            .await?;
        Ok(S3Response::new(PutObjectAclOutput::default()))
    }

    async fn get_public_access_block(
        &self,
        req: S3Request<GetPublicAccessBlockInput>,
    ) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
        let bucket = req.input.bucket;
        let config = self.blocking(move |s| s.bucket_config(&bucket)).await?;
        let Some([block_acls, ignore_acls, block_policy, restrict]) = config.public_access_block
        else {
            let mut err = S3Error::with_message(
                S3ErrorCode::Custom("NoSuchPublicAccessBlockConfiguration".into()),
                "The public access block configuration was not found",
            );
            err.set_status_code(http::StatusCode::NOT_FOUND);
            return Err(err);
        };
        Ok(S3Response::new(GetPublicAccessBlockOutput {
            public_access_block_configuration: Some(PublicAccessBlockConfiguration {
                block_public_acls: Some(block_acls),
                ignore_public_acls: Some(ignore_acls),
                block_public_policy: Some(block_policy),
                restrict_public_buckets: Some(restrict),
            }),
        }))
    }

    async fn put_public_access_block(
        &self,
        req: S3Request<PutPublicAccessBlockInput>,
    ) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
        let input = req.input;
        let c = input.public_access_block_configuration;
        let settings = [
            c.block_public_acls.unwrap_or(false),
            c.ignore_public_acls.unwrap_or(false),
            c.block_public_policy.unwrap_or(false),
            c.restrict_public_buckets.unwrap_or(false),
        ];
        let bucket = input.bucket;
        self.blocking(move |s| {
            s.update_bucket_config(&bucket, |b| b.public_access_block = Some(settings))
        })
        .await?;
        Ok(S3Response::new(PutPublicAccessBlockOutput::default()))
    }

    async fn delete_public_access_block(
        &self,
        req: S3Request<DeletePublicAccessBlockInput>,
    ) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
        let bucket = req.input.bucket;
        self.blocking(move |s| s.update_bucket_config(&bucket, |b| b.public_access_block = None))
            .await?;
        Ok(S3Response::new(DeletePublicAccessBlockOutput::default()))
    }

    async fn get_bucket_ownership_controls(
        &self,
        req: S3Request<GetBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
        let bucket = req.input.bucket;
        let config = self.blocking(move |s| s.bucket_config(&bucket)).await?;
        let Some(ownership) = config.ownership else {
            return Err(s3_error!(
                OwnershipControlsNotFoundError,
                "The bucket ownership controls were not found"
            ));
        };
        Ok(S3Response::new(GetBucketOwnershipControlsOutput {
            ownership_controls: Some(OwnershipControls {
                rules: vec![OwnershipControlsRule {
                    object_ownership: ObjectOwnership::from(ownership),
                }],
            }),
        }))
    }

    async fn put_bucket_ownership_controls(
        &self,
        req: S3Request<PutBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
        let input = req.input;
        let rules = input.ownership_controls.rules;
        let [rule] = rules.as_slice() else {
            return Err(s3_error!(
                MalformedXML,
                "OwnershipControls must hold exactly one rule"
            ));
        };
        let ownership = rule.object_ownership.as_str().to_owned();
        if ![
            ObjectOwnership::BUCKET_OWNER_ENFORCED,
            ObjectOwnership::BUCKET_OWNER_PREFERRED,
            ObjectOwnership::OBJECT_WRITER,
        ]
        .contains(&ownership.as_str())
        {
            return Err(s3_error!(
                MalformedXML,
                "unknown ObjectOwnership {ownership:?}"
            ));
        }
        let bucket = input.bucket;
        self.blocking(move |s| s.update_bucket_config(&bucket, |b| b.ownership = Some(ownership)))
            .await?;
        Ok(S3Response::new(PutBucketOwnershipControlsOutput::default()))
    }

    async fn delete_bucket_ownership_controls(
        &self,
        req: S3Request<DeleteBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<DeleteBucketOwnershipControlsOutput>> {
        let bucket = req.input.bucket;
        self.blocking(move |s| s.update_bucket_config(&bucket, |b| b.ownership = None))
            .await?;
        Ok(S3Response::new(
            DeleteBucketOwnershipControlsOutput::default(),
        ))
    }

    async fn get_object_lock_configuration(
        &self,
        req: S3Request<GetObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
        // No bucket here has object lock (CreateBucket refuses it), so S3's answer for a bucket
        // without it.
        self.existing_bucket(req.input.bucket).await?;
        Err(s3_error!(
            ObjectLockConfigurationNotFoundError,
            "Object Lock configuration does not exist for this bucket"
        ))
    }

    async fn get_object_legal_hold(
        &self,
        req: S3Request<GetObjectLegalHoldInput>,
    ) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
        self.existing_bucket(req.input.bucket).await?;
        Err(no_object_lock())
    }

    async fn put_object_legal_hold(
        &self,
        req: S3Request<PutObjectLegalHoldInput>,
    ) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
        self.existing_bucket(req.input.bucket).await?;
        Err(no_object_lock())
    }

    async fn get_object_retention(
        &self,
        req: S3Request<GetObjectRetentionInput>,
    ) -> S3Result<S3Response<GetObjectRetentionOutput>> {
        self.existing_bucket(req.input.bucket).await?;
        Err(no_object_lock())
    }

    async fn put_object_retention(
        &self,
        req: S3Request<PutObjectRetentionInput>,
    ) -> S3Result<S3Response<PutObjectRetentionOutput>> {
        self.existing_bucket(req.input.bucket).await?;
        Err(no_object_lock())
    }

    async fn get_bucket_lifecycle_configuration(
        &self,
        req: S3Request<GetBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
        // PutBucketLifecycleConfiguration is refused (501), so no bucket has one.
        self.existing_bucket(req.input.bucket).await?;
        Err(s3_error!(
            NoSuchLifecycleConfiguration,
            "The lifecycle configuration does not exist"
        ))
    }

    async fn delete_bucket_lifecycle(
        &self,
        req: S3Request<DeleteBucketLifecycleInput>,
    ) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
        self.existing_bucket(req.input.bucket).await?;
        Ok(S3Response::new(DeleteBucketLifecycleOutput::default()))
    }

    async fn get_bucket_cors(
        &self,
        req: S3Request<GetBucketCorsInput>,
    ) -> S3Result<S3Response<GetBucketCorsOutput>> {
        // PutBucketCors is refused (501), so no bucket has one.
        self.existing_bucket(req.input.bucket).await?;
        Err(s3_error!(
            NoSuchCORSConfiguration,
            "The CORS configuration does not exist"
        ))
    }

    async fn delete_bucket_cors(
        &self,
        req: S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        self.existing_bucket(req.input.bucket).await?;
        Ok(S3Response::new(DeleteBucketCorsOutput::default()))
    }

    async fn get_bucket_policy(
        &self,
        req: S3Request<GetBucketPolicyInput>,
    ) -> S3Result<S3Response<GetBucketPolicyOutput>> {
        // PutBucketPolicy is refused (501), so no bucket has one.
        self.existing_bucket(req.input.bucket).await?;
        Err(s3_error!(
            NoSuchBucketPolicy,
            "The bucket policy does not exist"
        ))
    }

    async fn get_bucket_policy_status(
        &self,
        req: S3Request<GetBucketPolicyStatusInput>,
    ) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
        self.existing_bucket(req.input.bucket).await?;
        Err(s3_error!(
            NoSuchBucketPolicy,
            "The bucket policy does not exist"
        ))
    }

    async fn delete_bucket_policy(
        &self,
        req: S3Request<DeleteBucketPolicyInput>,
    ) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
        self.existing_bucket(req.input.bucket).await?;
        Ok(S3Response::new(DeleteBucketPolicyOutput::default()))
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        // S3 answers a bucket that never had versioning with no Status.
        let bucket = req.input.bucket;
        let state = self.blocking(move |s| s.versioning(&bucket)).await?;
        Ok(S3Response::new(GetBucketVersioningOutput {
            status: state.status().map(BucketVersioningStatus::from_static),
            mfa_delete: None,
        }))
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        let input = req.input;
        let config = input.versioning_configuration;
        if input.mfa.is_some()
            || config
                .mfa_delete
                .as_ref()
                .is_some_and(|m| m.as_str() == MFADelete::ENABLED)
        {
            return Err(fidelity::not_implemented("MFA delete (x-amz-mfa)"));
        }
        let state = match config.status.as_ref().map(BucketVersioningStatus::as_str) {
            Some(BucketVersioningStatus::ENABLED) => Versioning::Enabled,
            Some(BucketVersioningStatus::SUSPENDED) => Versioning::Suspended,
            other => {
                return Err(s3_error!(
                    MalformedXML,
                    "the versioning Status must be Enabled or Suspended, not {other:?}"
                ));
            }
        };
        let bucket = input.bucket;
        self.blocking(move |s| s.set_versioning(&bucket, state))
            .await?;
        Ok(S3Response::new(PutBucketVersioningOutput::default()))
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let input = req.input;
        let encode = url_encoding(input.encoding_type.as_ref())?;
        let max_keys = page_size("max-keys", input.max_keys, MAX_LIST_KEYS)?;
        let delimiter = input.delimiter.clone().filter(|d| !d.is_empty());
        let query = VersionQuery {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: delimiter.clone(),
            key_marker: input.key_marker.clone(),
            version_marker: input.version_id_marker.clone().filter(|v| !v.is_empty()),
            max_keys: max_keys as usize,
        };
        let bucket = input.bucket.clone();
        let page = self
            .blocking(move |s| s.list_versions(&bucket, &query))
            .await?;
        let (next_key, next_version) = match page.items.last().filter(|_| page.truncated) {
            Some(VersionItem::Version(key, v, _)) => {
                (Some(key.clone()), Some(v.version_id.clone()))
            }
            Some(VersionItem::CommonPrefix(p)) => (Some(p.clone()), None),
            None => (None, None),
        };
        let (mut versions, mut markers, mut prefixes) = (Vec::new(), Vec::new(), Vec::new());
        for item in page.items {
            match item {
                VersionItem::CommonPrefix(p) => prefixes.push(CommonPrefix {
                    prefix: Some(encode.apply(p)),
                }),
                VersionItem::Version(key, v, latest) if v.delete_marker => {
                    markers.push(DeleteMarkerEntry {
                        is_latest: Some(latest),
                        key: Some(encode.apply(key)),
                        last_modified: Some(timestamp(v.meta.last_modified())),
                        owner: Some(owner()),
                        version_id: Some(v.version_id),
                    })
                }
                VersionItem::Version(key, v, latest) => versions.push(ObjectVersion {
                    e_tag: Some(etag(&v.meta)),
                    is_latest: Some(latest),
                    key: Some(encode.apply(key)),
                    last_modified: Some(timestamp(v.meta.last_modified())),
                    owner: Some(owner()),
                    size: Some(v.meta.size as i64),
                    storage_class: Some(ObjectVersionStorageClass::from_static(
                        ObjectVersionStorageClass::STANDARD,
                    )),
                    version_id: Some(v.version_id),
                    ..Default::default()
                }),
            }
        }
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(input.bucket),
            prefix: Some(encode.apply(input.prefix.unwrap_or_default())),
            delimiter: delimiter.map(|d| encode.apply(d)),
            key_marker: Some(encode.apply(input.key_marker.unwrap_or_default())),
            version_id_marker: Some(input.version_id_marker.unwrap_or_default()),
            max_keys: Some(max_keys),
            is_truncated: Some(page.truncated),
            next_key_marker: next_key.map(|k| encode.apply(k)),
            next_version_id_marker: next_version,
            versions: (!versions.is_empty()).then_some(versions),
            delete_markers: (!markers.is_empty()).then_some(markers),
            common_prefixes: (!prefixes.is_empty()).then_some(prefixes),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        let input = req.input;
        if input.sse_customer_algorithm.is_some() || input.sse_customer_key.is_some() {
            return Err(fidelity::not_implemented(
                "x-amz-server-side-encryption-customer-* (SSE-C)",
            ));
        }
        // `x-amz-object-attributes` is one comma-separated header.
        let names: Vec<String> = input
            .object_attributes
            .iter()
            .flat_map(|a| a.as_str().split(','))
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect();
        let wanted = |name: &str| names.iter().any(|n| n == name);
        if let Some(unknown) = names.iter().find(|n| {
            ![
                ObjectAttributes::CHECKSUM,
                ObjectAttributes::ETAG,
                ObjectAttributes::OBJECT_PARTS,
                ObjectAttributes::OBJECT_SIZE,
                ObjectAttributes::STORAGE_CLASS,
            ]
            .contains(&n.as_str())
        }) {
            return Err(s3_error!(
                InvalidArgument,
                "Invalid attribute name specified: {unknown}"
            ));
        }
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let version = input.version_id.clone();
        let (meta, versioned) = self
            .blocking(move |s| {
                let versioned = s.versioning(&bucket)?.is_versioned();
                let meta = s
                    .head_version(&bucket, &key, version.as_deref())
                    .map_err(|e| s.explain_missing(e, &bucket, &key))?;
                Ok((meta, versioned))
            })
            .await?;
        let checksum = meta
            .checksum
            .as_deref()
            .filter(|_| wanted(ObjectAttributes::CHECKSUM))
            .map(|c| typed(Some(c)));
        let max = page_size("max-parts", input.max_parts, 1000)? as usize;
        let marker = non_negative("part-number-marker", input.part_number_marker)? as usize;
        let object_parts =
            (wanted(ObjectAttributes::OBJECT_PARTS) && !meta.parts.is_empty()).then(|| {
                let stored = meta.checksum.as_deref();
                let mut parts: Vec<ObjectPart> = meta
                    .parts
                    .iter()
                    .enumerate()
                    .skip(marker)
                    .take(max)
                    .map(|(i, size)| {
                        let sums = stored.map(|c| c.part(i + 1)).unwrap_or_default();
                        ObjectPart {
                            part_number: Some(i as i32 + 1),
                            size: Some(*size as i64),
                            checksum_crc32: sums.checksum_crc32,
                            checksum_crc32c: sums.checksum_crc32c,
                            checksum_crc64nvme: sums.checksum_crc64nvme,
                            checksum_sha1: sums.checksum_sha1,
                            checksum_sha256: sums.checksum_sha256,
                        }
                    })
                    .collect();
                let last = parts.last().and_then(|p| p.part_number).unwrap_or(0);
                let truncated = (last as usize) < meta.parts.len() && !parts.is_empty();
                if max == 0 {
                    parts.clear();
                }
                GetObjectAttributesParts {
                    is_truncated: Some(truncated),
                    max_parts: Some(max as i32),
                    next_part_number_marker: Some(last),
                    part_number_marker: Some(marker as i32),
                    parts: Some(parts),
                    total_parts_count: Some(meta.parts.len() as i32),
                }
            });
        Ok(S3Response::new(GetObjectAttributesOutput {
            checksum,
            e_tag: wanted(ObjectAttributes::ETAG).then(|| etag(&meta)),
            last_modified: Some(timestamp(meta.last_modified())),
            object_parts,
            object_size: wanted(ObjectAttributes::OBJECT_SIZE).then_some(meta.size as i64),
            storage_class: wanted(ObjectAttributes::STORAGE_CLASS)
                .then(|| StorageClass::from_static(StorageClass::STANDARD)),
            version_id: answered_version(&meta, versioned),
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        let ranged = input.range.is_some();
        let (bucket, key, mut range) = (input.bucket.clone(), input.key.clone(), input.range);
        // From memory after the bucket's first request.
        let versioned = self.storage.versioning(&bucket)?.is_versioned();
        if input.part_number.is_some() && range.is_some() {
            return Err(s3_error!(
                InvalidRequest,
                "Cannot specify both Range header and partNumber query parameter"
            ));
        }
        let (meta, file) = self
            .open_for_read(bucket, key, input.version_id.clone(), versioned)
            .await?;
        if let Some(number) = input.part_number {
            // The part of the version opened, never of one written since.
            let part = fidelity::part_range(&meta, number)?;
            range = Some(Range::Int {
                first: part.start,
                last: Some(part.end.saturating_sub(1)),
            });
        }
        let (meta, span, body) = self.read_body(meta, file, range).await?;
        check_read_conditions(&meta, &read_conditions!(input))?;
        let content_range = range.map(|_| {
            format!(
                "bytes {}-{}/{}",
                span.start,
                span.end.saturating_sub(1),
                meta.size
            )
        });
        let sums = returned_checksum(
            &meta,
            input.checksum_mode.as_ref(),
            input.part_number,
            ranged,
        );
        Ok(S3Response::new(put_checksums!(
            GetObjectOutput {
                tag_count: (!meta.tags.is_empty()).then_some(meta.tags.len() as i32),
                accept_ranges: Some("bytes".into()),
                body: Some(StreamingBlob::new(body)),
                content_length: Some((span.end - span.start) as i64),
                content_range,
                parts_count: part_count(&meta, input.part_number),
                content_type: content_type(&meta),
                cache_control: stored(&meta, "cache-control"),
                content_disposition: stored(&meta, "content-disposition"),
                content_encoding: stored(&meta, "content-encoding"),
                content_language: stored(&meta, "content-language"),
                expires: stored_expires(&meta),
                e_tag: Some(etag(&meta)),
                last_modified: Some(timestamp(meta.last_modified())),
                metadata: user_metadata(&meta.metadata),
                version_id: answered_version(&meta, versioned),
                ..Default::default()
            },
            sums
        )))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        fidelity::refuse_conditions(&req.headers, &fidelity::TIME_CONDITIONS)?;
        let input = req.input;
        let directory = crate::directory::is_directory_bucket(&input.bucket);
        // Appends exist only in directory buckets; general purpose buckets refuse them as S3
        // would not take them there.
        let append = match input.write_offset_bytes {
            Some(offset) if directory => Some(u64::try_from(offset).map_err(|_| {
                s3_error!(
                    InvalidArgument,
                    "x-amz-write-offset-bytes must be 0 or more"
                )
            })?),
            _ => None,
        };
        WriteFeatures {
            write_offset: input.write_offset_bytes.is_some() && !directory,
            ..write_features!(input)
        }
        .refuse_unsupported()?;
        check_metadata_size(input.metadata.as_ref())?;
        let precondition =
            fidelity::write_precondition(input.if_match.as_ref(), input.if_none_match.as_ref())?;
        let md5 = fidelity::declared_md5(&req.headers)?;
        let tags = tagging::from_header(input.tagging.as_deref())?;
        let (bucket, key) = (input.bucket, input.key);
        let check = (bucket.clone(), key.clone());
        self.blocking(move |s| {
            crate::storage::check_key(&check.1)?;
            s.bucket_dir(&check.0).map(|_| ())
        })
        .await?;
        let declared = checksum::declared([
            input.checksum_crc32,
            input.checksum_crc32c,
            input.checksum_crc64nvme,
            input.checksum_sha1,
            input.checksum_sha256,
        ]);
        let (temp, sums) = self
            .receive(input.body, (declared, None), |s| {
                s.begin_write().map(PartWriter::Own)
            })
            .await?;
        fidelity::verify_md5(md5, &temp.md5())?;
        let temp = temp.into_object()?;
        let mut attrs = attrs(
            input.content_type,
            input.metadata,
            stored_headers(
                input.cache_control,
                input.content_disposition,
                input.content_encoding,
                input.content_language,
                input.expires,
            ),
        );
        attrs.checksum = checksum::Stored::of_body(&sums).map(Box::new);
        attrs.tags = tags;
        let meta = self
            .blocking(move |s| match append {
                Some(offset) => {
                    s.check_precondition(&bucket, &key, &precondition)?;
                    s.append(&bucket, &key, offset, temp, attrs)
                }
                None => {
                    let etag = hex::encode(temp.md5());
                    s.commit_if(&bucket, &key, temp, etag, attrs, &precondition)
                }
            })
            .await?;
        let sums = typed(meta.checksum.as_deref());
        Ok(S3Response::new(put_checksums!(
            PutObjectOutput {
                e_tag: Some(etag(&meta)),
                size: Some(meta.size as i64),
                version_id: written_version(&meta),
                ..Default::default()
            },
            sums
        )))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        fidelity::refuse_conditions(&req.headers, &fidelity::TIME_CONDITIONS)?;
        let precondition = fidelity::header_precondition(&req.headers)?;
        let input = req.input;
        let copy_features = write_features!(input);
        WriteFeatures {
            sse_kms_or_customer: copy_features.sse_kms_or_customer
                || input.copy_source_sse_customer_algorithm.is_some()
                || input.copy_source_sse_customer_key.is_some(),
            ..copy_features
        }
        .refuse_unsupported()?;
        let replace_tags = input
            .tagging_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == TaggingDirective::REPLACE);
        let new_tags = tagging::from_header(input.tagging.as_deref())?;
        let (src_bucket, src_key, src_version) = bucket_and_key(input.copy_source)?;
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        if replace {
            check_metadata_size(input.metadata.as_ref())?;
        }
        // Copying an older version onto its key restores it (S3's way), so only a copy of the
        // current version onto itself must change something.
        if !replace
            && src_version.is_none()
            && (src_bucket.as_str(), src_key.as_str())
                == (input.bucket.as_str(), input.key.as_str())
            && input.storage_class.is_none()
            && input.server_side_encryption.is_none()
        {
            return Err(s3_error!(
                InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes."
            ));
        }
        let source_conditions = fidelity::CopySourceConditions {
            if_match: input.copy_source_if_match,
            if_none_match: input.copy_source_if_none_match,
            if_modified_since: input.copy_source_if_modified_since,
            if_unmodified_since: input.copy_source_if_unmodified_since,
        };
        let new_attrs = attrs(
            input.content_type,
            input.metadata,
            stored_headers(
                input.cache_control,
                input.content_disposition,
                input.content_encoding,
                input.content_language,
                input.expires,
            ),
        );
        let asked = input
            .checksum_algorithm
            .as_ref()
            .map(|a| {
                checksum::Algorithm::from_name(a.as_str()).ok_or_else(|| {
                    s3_error!(InvalidRequest, "unknown checksum algorithm {}", a.as_str())
                })
            })
            .transpose()?;
        let (bucket, key) = (input.bucket, input.key);
        let (meta, source_version) = self
            .blocking(move |s| {
                let check = |source: &ObjectMeta| source_conditions.check(source);
                let src_version = src_version.as_deref();
                let marker = |e: S3Error| match e.code() {
                    S3ErrorCode::MethodNotAllowed => s3_error!(
                        InvalidRequest,
                        "The source of a copy request may not specifically refer to a delete marker by version id."
                    ),
                    _ => e,
                };
                check(
                    &s.head_version(&src_bucket, &src_key, src_version)
                        .map_err(marker)?,
                )?;
                let (source, mut temp) = s
                    .copy_to_temp(&src_bucket, &src_key, src_version)
                    .map_err(marker)?;
                check(&source)?; // the source may have changed while it was checked
                let source_version = (src_version.is_some()
                    || s.versioning(&src_bucket)?.is_versioned())
                .then(|| source.version().to_owned());
                // The copy is one part: it keeps a full-object checksum of the same algorithm,
                // computed afresh from a composite one or for an algorithm the request names.
                let kept = source.checksum.clone().filter(|c| {
                    c.kind == checksum::FULL_OBJECT
                        && asked.is_none_or(|a| c.algorithm() == Some(a))
                });
                let checksum = match (
                    kept,
                    asked.or(source.checksum.as_ref().and_then(|c| c.algorithm())),
                ) {
                    (Some(c), _) => Some(checksum::Stored {
                        parts: Vec::new(),
                        ..*c
                    }),
                    (None, Some(a)) => Some(checksum::Stored {
                        algorithm: a.name().to_owned(),
                        value: temp.checksum(a)?,
                        kind: checksum::FULL_OBJECT.to_owned(),
                        parts: Vec::new(),
                    }),
                    (None, None) => None,
                }
                .map(Box::new);
                let tags = if replace_tags {
                    new_tags
                } else {
                    source.tags.clone()
                };
                let attrs = if replace {
                    ObjectAttrs {
                        checksum,
                        tags,
                        ..new_attrs
                    }
                } else {
                    ObjectAttrs {
                        content_type: source.content_type,
                        metadata: source.metadata,
                        parts: Vec::new(),
                        headers: source.headers,
                        checksum,
                        tags,
                    }
                };
                let meta = s.commit_if(&bucket, &key, temp, source.etag, attrs, &precondition)?;
                Ok((meta, source_version))
            })
            .await?;
        let result = put_checksums!(
            CopyObjectResult {
                e_tag: Some(etag(&meta)),
                last_modified: Some(timestamp(meta.last_modified())),
                ..Default::default()
            },
            typed(meta.checksum.as_deref())
        );
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(result),
            copy_source_version_id: source_version,
            version_id: written_version(&meta),
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        fidelity::refuse_conditions(&req.headers, &["if-none-match"])?;
        fidelity::refuse_conditions(&req.headers, &fidelity::TIME_CONDITIONS)?;
        let input = req.input;
        // S3 takes these two on directory buckets only.
        if input.if_match_last_modified_time.is_some() {
            return Err(fidelity::not_implemented(
                "x-amz-if-match-last-modified-time (directory buckets)",
            ));
        }
        if input.if_match_size.is_some() {
            return Err(fidelity::not_implemented(
                "x-amz-if-match-size (directory buckets)",
            ));
        }
        let precondition = fidelity::write_precondition(input.if_match.as_ref(), None)?;
        let (bucket, key, version) = (input.bucket, input.key, input.version_id);
        let deleted = self
            .blocking(move |s| s.delete_object_if(&bucket, &key, version.as_deref(), &precondition))
            .await?;
        Ok(S3Response::new(DeleteObjectOutput {
            delete_marker: deleted
                .as_ref()
                .and_then(|d| d.delete_marker.then_some(true)),
            version_id: deleted.map(|d| d.version_id),
            ..Default::default()
        }))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let input = req.input;
        let quiet = input.delete.quiet.unwrap_or(false);
        let bucket = input.bucket;
        if input.delete.objects.len() > MAX_DELETE_KEYS {
            return Err(s3_error!(
                MalformedXML,
                "DeleteObjects takes at most {MAX_DELETE_KEYS} keys; this request has {}",
                input.delete.objects.len()
            ));
        }
        let objects = &input.delete.objects;
        if objects.iter().any(|o| o.last_modified_time.is_some()) {
            return Err(fidelity::not_implemented(
                "LastModifiedTime of an object to delete (directory buckets)",
            ));
        }
        if objects.iter().any(|o| o.size.is_some()) {
            return Err(fidelity::not_implemented(
                "Size of an object to delete (directory buckets)",
            ));
        }
        let keys: Vec<(String, Option<String>, Precondition)> = input
            .delete
            .objects
            .into_iter()
            .map(|o| {
                let precondition = match o.e_tag {
                    Some(tag) => Precondition::Matches(tag.value().to_owned()),
                    None => Precondition::None,
                };
                (o.key, o.version_id, precondition)
            })
            .collect();
        let output = self
            .blocking(move |s| {
                s.bucket_dir(&bucket)?;
                let (mut deleted, mut errors) = (Vec::new(), Vec::new());
                for (key, version, precondition) in keys {
                    match s.delete_object_if(&bucket, &key, version.as_deref(), &precondition) {
                        Ok(done) => deleted.push(deleted_entry(key, version, done)),
                        Err(e) => errors.push(Error {
                            code: Some(e.code().as_str().to_owned()),
                            key: Some(key),
                            message: e.message().map(str::to_owned),
                            version_id: version,
                        }),
                    }
                }
                let deleted = (!quiet).then_some(deleted);
                Ok(DeleteObjectsOutput {
                    deleted,
                    errors: Some(errors),
                    ..Default::default()
                })
            })
            .await?;
        Ok(S3Response::new(output))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let input = req.input;
        if crate::directory::is_directory_bucket(&input.bucket) {
            return Err(directory_refuses_list_objects());
        }
        let delimiter = input.delimiter.clone().filter(|d| !d.is_empty());
        let mut query = ListQuery {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: delimiter.clone(),
            after: input.marker.clone().filter(|m| !m.is_empty()),
            skip_prefix: None,
            max_keys: 0,
        };
        // A marker that is a common prefix (the NextMarker of a page ending in one: the first
        // delimiter after the prefix ends it) continues after every key under it; a key that
        // merely ends in the delimiter (the folder marker `a//` under the prefix `a//`) does not.
        if let (Some(marker), Some(d)) = (&query.after, &delimiter)
            && let Some(rest) = marker.strip_prefix(query.prefix.as_str())
            && rest
                .find(d.as_str())
                .is_some_and(|at| at + d.len() == rest.len())
        {
            query.skip_prefix = Some(marker.clone());
        }
        let encode = url_encoding(input.encoding_type.as_ref())?;
        let mut listed = self
            .list_page(input.bucket.clone(), query, input.max_keys, encode)
            .await?;
        // ListObjects (v1) names each object's owner, as S3 does (v2 only with fetch-owner).
        for object in &mut listed.contents {
            object.owner = Some(owner());
        }
        // S3 gives NextMarker only with a delimiter; without one the last key is the marker.
        let next_marker = (listed.truncated && delimiter.is_some())
            .then(|| listed.last.clone())
            .flatten();
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(input.bucket),
            prefix: Some(encode.apply(input.prefix.unwrap_or_default())),
            marker: Some(encode.apply(input.marker.unwrap_or_default())),
            delimiter: input
                .delimiter
                .filter(|d| !d.is_empty())
                .map(|d| encode.apply(d)),
            max_keys: Some(listed.max_keys),
            is_truncated: Some(listed.truncated),
            next_marker: next_marker.map(|m| encode.apply(m)),
            contents: Some(listed.contents),
            common_prefixes: (!listed.prefixes.is_empty()).then_some(listed.prefixes),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        let directory = crate::directory::is_directory_bucket(&input.bucket);
        if directory {
            check_directory_listing(
                input.prefix.as_deref(),
                input.delimiter.as_deref(),
                input.start_after.as_deref(),
            )?;
        }
        let mut query = ListQuery {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: input.delimiter.clone().filter(|d| !d.is_empty()),
            after: input.start_after.clone().filter(|s| !s.is_empty()),
            skip_prefix: None,
            max_keys: 0,
        };
        // An empty token is no token, as S3 takes it.
        if let Some(token) = input.continuation_token.as_ref().filter(|t| !t.is_empty()) {
            decode_token(token, &mut query)?;
        }
        let encode = url_encoding(input.encoding_type.as_ref())?;
        let after = query.after.clone();
        let mut listed = self
            .list_page(input.bucket.clone(), query, input.max_keys, encode)
            .await?;
        if directory && input.delimiter.as_deref() == Some("/") {
            let prefix = input.prefix.clone().unwrap_or_default();
            self.add_upload_prefixes(&input.bucket, &prefix, after, encode, &mut listed)
                .await?;
        }
        if input.fetch_owner == Some(true) {
            for object in &mut listed.contents {
                object.owner = Some(owner());
            }
        }
        let next = listed
            .truncated
            .then(|| listed.last_token.clone())
            .flatten();
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: Some(encode.apply(input.prefix.unwrap_or_default())),
            delimiter: input
                .delimiter
                .filter(|d| !d.is_empty())
                .map(|d| encode.apply(d)),
            max_keys: Some(listed.max_keys),
            key_count: Some(listed.key_count),
            continuation_token: input.continuation_token,
            start_after: input.start_after.map(|a| encode.apply(a)),
            is_truncated: Some(next.is_some()),
            next_continuation_token: next,
            contents: Some(listed.contents),
            common_prefixes: (!listed.prefixes.is_empty()).then_some(listed.prefixes),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let input = req.input;
        write_features!(input).refuse_unsupported()?;
        check_metadata_size(input.metadata.as_ref())?;
        let declared = match input.checksum_algorithm.as_ref() {
            None if input.checksum_type.is_some() => {
                return Err(s3_error!(
                    InvalidRequest,
                    "x-amz-checksum-type needs x-amz-checksum-algorithm"
                ));
            }
            None => None,
            Some(name) => {
                let algorithm = checksum::Algorithm::from_name(name.as_str()).ok_or_else(|| {
                    s3_error!(
                        InvalidRequest,
                        "unknown checksum algorithm {}",
                        name.as_str()
                    )
                })?;
                let kind = checksum::upload_kind(
                    algorithm,
                    input.checksum_type.as_ref().map(ChecksumType::as_str),
                )?;
                Some(checksum::Stored {
                    algorithm: algorithm.name().to_owned(),
                    value: String::new(),
                    kind,
                    parts: Vec::new(),
                })
            }
        };
        let mut attrs = attrs(
            input.content_type,
            input.metadata,
            stored_headers(
                input.cache_control,
                input.content_disposition,
                input.content_encoding,
                input.content_language,
                input.expires,
            ),
        );
        attrs.checksum = declared.clone().map(Box::new);
        attrs.tags = tagging::from_header(input.tagging.as_deref())?;
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let id = self
            .blocking(move |s| s.create_upload(&bucket, &key, attrs))
            .await?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            checksum_algorithm: declared
                .as_ref()
                .map(|c| ChecksumAlgorithm::from(c.algorithm.clone())),
            checksum_type: declared.map(|c| ChecksumType::from(c.kind)),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        fidelity::refuse_conditions(&req.headers, &["if-match", "if-none-match"])?;
        fidelity::refuse_conditions(&req.headers, &fidelity::TIME_CONDITIONS)?;
        let input = req.input;
        let md5 = fidelity::declared_md5(&req.headers)?;
        let (bucket, key, id, part) = (input.bucket, input.key, input.upload_id, input.part_number);
        let ids = (bucket.clone(), key.clone(), id.clone());
        let algorithm = self
            .blocking(move |s| s.check_upload(&ids.0, &ids.1, &ids.2, part))
            .await?;
        let declared = checksum::declared([
            input.checksum_crc32,
            input.checksum_crc32c,
            input.checksum_crc64nvme,
            input.checksum_sha1,
            input.checksum_sha256,
        ]);
        let size = input.content_length.and_then(|n| u64::try_from(n).ok());
        let ids = (bucket.clone(), key.clone(), id.clone());
        let min_part_size = self.min_part_size;
        let (writer, sums) = self
            .receive(input.body, (declared, algorithm), move |s| {
                s.receive_part((&ids.0, &ids.1, &ids.2), part, (size, min_part_size))
            })
            .await?;
        fidelity::verify_md5(md5, &writer.md5())?;
        let part_sum = algorithm.and_then(|a| a.value(&sums).cloned());
        let info = self
            .blocking(move |s| s.commit_part(&bucket, &key, &id, part, writer, part_sum))
            .await?;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(ETag::Strong(info.etag)),
            checksum_crc32: sums.checksum_crc32,
            checksum_crc32c: sums.checksum_crc32c,
            checksum_crc64nvme: sums.checksum_crc64nvme,
            checksum_sha1: sums.checksum_sha1,
            checksum_sha256: sums.checksum_sha256,
            ..Default::default()
        }))
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let input = req.input;
        let (src_bucket, src_key, src_version) = bucket_and_key(input.copy_source)?;
        let range = input
            .copy_source_range
            .as_deref()
            .map(parse_copy_range)
            .transpose()?;
        fidelity::refuse_conditions(&req.headers, &["if-match", "if-none-match"])?;
        fidelity::refuse_conditions(&req.headers, &fidelity::TIME_CONDITIONS)?;
        let conditions = fidelity::CopySourceConditions {
            if_match: input.copy_source_if_match,
            if_none_match: input.copy_source_if_none_match,
            if_modified_since: input.copy_source_if_modified_since,
            if_unmodified_since: input.copy_source_if_unmodified_since,
        };
        let target = (input.bucket, input.key, input.upload_id, input.part_number);
        let copied_version = src_version.clone();
        let (info, _) = self
            .blocking(move |s| {
                let (bucket, key, id, part) = &target;
                s.copy_part(
                    (bucket, key, id, *part),
                    (&src_bucket, &src_key, src_version.as_deref()),
                    range,
                    |source| conditions.check(source),
                )
            })
            .await?;
        let result = CopyPartResult {
            e_tag: Some(ETag::Strong(info.etag)),
            last_modified: Some(timestamp(
                std::time::UNIX_EPOCH + std::time::Duration::from_nanos(info.mtime_ns),
            )),
            ..Default::default()
        };
        Ok(S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(result),
            copy_source_version_id: copied_version,
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        fidelity::refuse_conditions(&req.headers, &fidelity::TIME_CONDITIONS)?;
        let input = req.input;
        let precondition =
            fidelity::write_precondition(input.if_match.as_ref(), input.if_none_match.as_ref())?;
        let parts = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default();
        let parts: Vec<CompletedPart> = parts
            .into_iter()
            .map(|p| CompletedPart {
                number: p.part_number.unwrap_or(0),
                etag: p.e_tag.map(ETag::into_value).unwrap_or_default(),
                checksum: checksum::declared([
                    p.checksum_crc32,
                    p.checksum_crc32c,
                    p.checksum_crc64nvme,
                    p.checksum_sha1,
                    p.checksum_sha256,
                ]),
            })
            .collect();
        let declared = checksum::declared([
            input.checksum_crc32,
            input.checksum_crc32c,
            input.checksum_crc64nvme,
            input.checksum_sha1,
            input.checksum_sha256,
        ]);
        let (bucket, key, id, min) = (
            input.bucket.clone(),
            input.key.clone(),
            input.upload_id,
            self.min_part_size,
        );
        let meta = self
            .blocking(move |s| {
                s.complete_upload(&bucket, &key, &id, (&parts, &declared), min, &precondition)
            })
            .await?;
        Ok(S3Response::new(put_checksums!(
            CompleteMultipartUploadOutput {
                bucket: Some(input.bucket.clone()),
                key: Some(input.key.clone()),
                location: Some(format!("/{}/{}", input.bucket, input.key)),
                e_tag: Some(etag(&meta)),
                version_id: written_version(&meta),
                ..Default::default()
            },
            typed(meta.checksum.as_deref())
        )))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let (bucket, key, id) = (req.input.bucket, req.input.key, req.input.upload_id);
        self.blocking(move |s| s.abort_upload(&bucket, &key, &id))
            .await?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let input = req.input;
        let (bucket, key, id) = (
            input.bucket.clone(),
            input.key.clone(),
            input.upload_id.clone(),
        );
        let (parts, declared) = self
            .blocking(move |s| s.list_parts(&bucket, &key, &id))
            .await?;
        let algorithm = declared.as_ref().and_then(checksum::Stored::algorithm);
        let marker = non_negative("part-number-marker", input.part_number_marker)?;
        let max = page_size("max-parts", input.max_parts, 1000)? as usize;
        let mut selected: Vec<Part> = parts
            .into_iter()
            .filter(|p| p.number > marker)
            .take(max + 1)
            .map(|p| {
                let sums = match (algorithm, p.checksum) {
                    (Some(a), Some(v)) => a.checksum(v),
                    _ => Checksum::default(),
                };
                Part {
                    e_tag: Some(ETag::Strong(p.etag)),
                    part_number: Some(p.number),
                    size: Some(p.size as i64),
                    last_modified: Some(timestamp(
                        std::time::UNIX_EPOCH + std::time::Duration::from_nanos(p.mtime_ns),
                    )),
                    checksum_crc32: sums.checksum_crc32,
                    checksum_crc32c: sums.checksum_crc32c,
                    checksum_crc64nvme: sums.checksum_crc64nvme,
                    checksum_sha1: sums.checksum_sha1,
                    checksum_sha256: sums.checksum_sha256,
                }
            })
            .collect();
        let truncated = selected.len() > max;
        selected.truncate(max);
        let next = selected.last().and_then(|p| p.part_number);
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: next,
            max_parts: Some(max as i32),
            is_truncated: Some(truncated),
            parts: Some(selected),
            checksum_algorithm: declared
                .as_ref()
                .map(|c| ChecksumAlgorithm::from(c.algorithm.clone())),
            checksum_type: declared.map(|c| ChecksumType::from(c.kind)),
            ..Default::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let input = req.input;
        if crate::directory::is_directory_bucket(&input.bucket) {
            check_directory_listing(input.prefix.as_deref(), input.delimiter.as_deref(), None)?;
        }
        let bucket = input.bucket.clone();
        let prefix = input.prefix.clone().unwrap_or_default();
        let uploads = self
            .blocking(move |s| s.list_uploads(&bucket, &prefix))
            .await?;
        let key_marker = input.key_marker.clone().unwrap_or_default();
        let max = page_size("max-uploads", input.max_uploads, 1000)? as usize;
        let mut selected: Vec<MultipartUpload> = uploads
            .into_iter()
            .filter(|u| u.key > key_marker)
            .take(max + 1)
            .map(|u| MultipartUpload {
                key: Some(u.key),
                upload_id: Some(u.id),
                initiated: Some(timestamp(u.initiated)),
                ..Default::default()
            })
            .collect();
        let truncated = selected.len() > max;
        selected.truncate(max);
        let next_key = truncated
            .then(|| selected.last().and_then(|u| u.key.clone()))
            .flatten();
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: input.prefix,
            key_marker: input.key_marker,
            max_uploads: Some(max as i32),
            is_truncated: Some(truncated),
            next_key_marker: next_key,
            uploads: Some(selected),
            ..Default::default()
        }))
    }
}

/// `x-amz-version-id` of a write: the new version's ID while versioning is enabled; none for
/// the `null` version a write makes while it is suspended (as S3 answers).
fn written_version(meta: &ObjectMeta) -> Option<String> {
    meta.version_id
        .clone()
        .filter(|v| v != crate::storage::NULL_VERSION)
}

/// `x-amz-version-id` of a read: the version's ID on a bucket that has (or had) versioning.
fn answered_version(meta: &ObjectMeta, versioned: bool) -> Option<String> {
    versioned.then(|| meta.version().to_owned())
}

/// A DeleteObjects result entry, as S3 words it: deleting a version names it (and says whether
/// it was a delete marker); deleting a key of a versioned bucket names the marker made.
fn deleted_entry(key: String, version: Option<String>, done: Option<Deleted>) -> DeletedObject {
    match (version, done) {
        (version, None) => DeletedObject {
            key: Some(key),
            version_id: version,
            ..Default::default()
        },
        (Some(_), Some(d)) => DeletedObject {
            key: Some(key),
            delete_marker: d.delete_marker.then_some(true),
            delete_marker_version_id: d.delete_marker.then(|| d.version_id.clone()),
            version_id: Some(d.version_id),
        },
        (None, Some(d)) => DeletedObject {
            key: Some(key),
            delete_marker: Some(true),
            delete_marker_version_id: Some(d.version_id),
            version_id: None,
        },
    }
}

/// S3's answer to an object-lock request on a bucket without object lock (every bucket here).
fn no_object_lock() -> S3Error {
    s3_error!(
        InvalidRequest,
        "Bucket is missing Object Lock Configuration"
    )
}

/// The one grant of every bucket and object: the owner's FULL_CONTROL.
fn owner_grants() -> Grants {
    let owner = owner();
    vec![Grant {
        grantee: Some(Grantee {
            display_name: owner.display_name,
            id: owner.id,
            type_: Type::from_static(Type::CANONICAL_USER),
            email_address: None,
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    }]
}

/// Accepts an ACL that grants only the owner FULL_CONTROL (`private`,
/// `bucket-owner-full-control`, or such a policy): it changes nothing. Any other grant would
/// open the bucket or object to someone, which this server cannot do: 501.
fn owner_only_acl(
    canned: Option<&str>,
    policy: Option<&AccessControlPolicy>,
    grant_headers: bool,
) -> S3Result<()> {
    let refuse = |what: &str| {
        Err(fidelity::not_implemented(&format!(
            "{what} (access control lists granting others)"
        )))
    };
    if grant_headers {
        return refuse("x-amz-grant-*");
    }
    if let Some(acl) = canned.filter(|a| !["private", "bucket-owner-full-control"].contains(a)) {
        return refuse(&format!("x-amz-acl: {acl}"));
    }
    if let Some(policy) = policy {
        let owner_id = owner().id;
        let only_owner = policy.grants.iter().flatten().all(|g| {
            g.permission.as_ref().map(Permission::as_str) == Some(Permission::FULL_CONTROL)
                && g.grantee
                    .as_ref()
                    .is_some_and(|e| e.id == owner_id && e.uri.is_none())
        });
        if !only_owner {
            return refuse("an AccessControlPolicy");
        }
    }
    Ok(())
}

/// The bucket, key and version (`?versionId=`) of a copy source; access points are not
/// supported.
fn bucket_and_key(source: CopySource) -> S3Result<(String, String, Option<String>)> {
    match source {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Ok((bucket.into(), key.into(), version_id.map(Into::into))),
        _ => Err(s3_error!(NotImplemented, "copy sources must be bucket/key")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_ranges() {
        assert_eq!(parse_copy_range("bytes=0-8388607").unwrap(), 0..=8_388_607);
        assert_eq!(parse_copy_range("bytes=5-5").unwrap(), 5..=5);
        for bad in ["bytes=5-4", "bytes=-5", "bytes=5-", "0-5", "bytes=a-b"] {
            let err = parse_copy_range(bad).unwrap_err();
            assert_eq!(err.code(), &s3s::S3ErrorCode::InvalidArgument, "{bad}");
        }
    }
}
