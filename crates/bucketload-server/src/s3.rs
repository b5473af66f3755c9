//! The S3 operations, on top of [`Storage`]. File-system work runs on Tokio's blocking pool;
//! request bodies stream to a blocking writer through a small bounded channel; object bodies
//! come from [`crate::body`] (small objects read at once, large ones memory-mapped).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use s3s::dto::*;
use s3s::{S3, S3Error, S3Request, S3Response, S3Result, s3_error};

use crate::body::prepare_body;
use crate::bufpool::BufferPool;
use crate::checksum;
use crate::fidelity::{self, WriteFeatures};
use crate::storage::{ListItem, ListQuery, ObjectAttrs, ObjectMeta, Storage, TempObject};

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
        declared: Checksum,
    ) -> S3Result<(TempObject, Checksum)> {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        let writer = self.blocking(move |storage| {
            let mut temp = storage.begin_write()?;
            while let Some(chunk) = rx.blocking_recv() {
                temp.write(&chunk)?;
            }
            Ok(temp)
        });
        let mut hasher = checksum::hasher_for(&declared);
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

    /// One page of a listing (ListObjects and ListObjectsV2), keys encoded as asked.
    async fn list_page(
        &self,
        bucket: String,
        mut query: ListQuery,
        max_keys: Option<i32>,
        encode: UrlEncoding,
    ) -> S3Result<Listed> {
        let max_keys = max_keys.unwrap_or(MAX_LIST_KEYS).clamp(0, MAX_LIST_KEYS);
        query.max_keys = max_keys as usize;
        let page = self.blocking(move |s| s.list(&bucket, &query)).await?;
        let last_token = page.items.last().map(encode_token);
        let last = page.items.last().map(|item| match item {
            ListItem::Object(key, _) => key.clone(),
            ListItem::CommonPrefix(p) => p.clone(),
        });
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
    }
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
            tagging: $input.tagging.is_some(),
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
fn check_conditions(
    meta: &ObjectMeta,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
) -> S3Result<()> {
    check_read_conditions(
        meta,
        &ReadConditions {
            if_match: if_match.cloned(),
            if_none_match: if_none_match.cloned(),
            ..Default::default()
        },
    )
}

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
        let bucket = input.bucket;
        let location = format!("/{bucket}");
        self.blocking(move |s| s.create_bucket(&bucket)).await?;
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
        let meta = self.blocking(move |s| s.head(&bucket, &key)).await?;
        check_read_conditions(&meta, &read_conditions!(input))?;
        let part = input
            .part_number
            .map(|n| fidelity::part_range(&meta, n))
            .transpose()?;
        Ok(S3Response::new(HeadObjectOutput {
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
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        let (bucket, key, mut range) = (input.bucket.clone(), input.key.clone(), input.range);
        if let Some(number) = input.part_number {
            if range.is_some() {
                return Err(s3_error!(
                    InvalidRequest,
                    "Cannot specify both Range header and partNumber query parameter"
                ));
            }
            let (b, k) = (bucket.clone(), key.clone());
            let meta = self.blocking(move |s| s.head(&b, &k)).await?;
            let part = fidelity::part_range(&meta, number)?;
            range = Some(Range::Int {
                first: part.start,
                last: Some(part.end.saturating_sub(1)),
            });
        }
        let (file, stat) = self.storage.open_file(&bucket, &key)?;
        let (meta, span, body) = if stat.len() <= INLINE_READ_MAX {
            prepare_body(
                &self.storage,
                &self.buffers,
                (&bucket, &key),
                file,
                &stat,
                range,
            )?
        } else {
            let buffers = Arc::clone(&self.buffers);
            self.blocking(move |s| prepare_body(s, &buffers, (&bucket, &key), file, &stat, range))
                .await?
        };
        check_read_conditions(&meta, &read_conditions!(input))?;
        let content_range = range.map(|_| {
            format!(
                "bytes {}-{}/{}",
                span.start,
                span.end.saturating_sub(1),
                meta.size
            )
        });
        Ok(S3Response::new(GetObjectOutput {
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
            ..Default::default()
        }))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let input = req.input;
        WriteFeatures {
            write_offset: input.write_offset_bytes.is_some(),
            ..write_features!(input)
        }
        .refuse_unsupported()?;
        let precondition =
            fidelity::write_precondition(input.if_match.as_ref(), input.if_none_match.as_ref())?;
        let md5 = fidelity::declared_md5(&req.headers)?;
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
        let (temp, sums) = self.receive(input.body, declared).await?;
        fidelity::verify_md5(md5, &temp.md5())?;
        let attrs = attrs(
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
        let meta = self
            .blocking(move |s| {
                let etag = hex::encode(temp.md5());
                s.commit_if(&bucket, &key, temp, etag, attrs, &precondition)
            })
            .await?;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(etag(&meta)),
            size: Some(meta.size as i64),
            checksum_crc32: sums.checksum_crc32,
            checksum_crc32c: sums.checksum_crc32c,
            checksum_crc64nvme: sums.checksum_crc64nvme,
            checksum_sha1: sums.checksum_sha1,
            checksum_sha256: sums.checksum_sha256,
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let precondition = fidelity::header_precondition(&req.headers)?;
        let input = req.input;
        let copy_features = write_features!(input);
        WriteFeatures {
            sse_kms_or_customer: copy_features.sse_kms_or_customer
                || input.copy_source_sse_customer_algorithm.is_some()
                || input.copy_source_sse_customer_key.is_some(),
            tagging: copy_features.tagging
                || input
                    .tagging_directive
                    .as_ref()
                    .is_some_and(|d| d.as_str() == TaggingDirective::REPLACE),
            ..copy_features
        }
        .refuse_unsupported()?;
        let (src_bucket, src_key) = bucket_and_key(input.copy_source)?;
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        if !replace
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
        let source_conditions = (
            input.copy_source_if_match,
            input.copy_source_if_none_match,
            input.copy_source_if_modified_since,
            input.copy_source_if_unmodified_since,
        );
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
        let (bucket, key) = (input.bucket, input.key);
        let meta = self
            .blocking(move |s| {
                let (if_match, if_none_match, modified_since, unmodified_since) = source_conditions;
                let check = |source: &ObjectMeta| {
                    fidelity::check_copy_source(
                        source,
                        if_match.as_ref(),
                        if_none_match.as_ref(),
                        modified_since.as_ref(),
                        unmodified_since.as_ref(),
                    )
                };
                check(&s.head(&src_bucket, &src_key)?)?;
                let (source, temp) = s.copy_to_temp(&src_bucket, &src_key)?;
                check(&source)?; // the source may have changed while it was checked
                let attrs = if replace {
                    new_attrs
                } else {
                    ObjectAttrs {
                        content_type: source.content_type,
                        metadata: source.metadata,
                        parts: Vec::new(),
                        headers: source.headers,
                    }
                };
                s.commit_if(&bucket, &key, temp, source.etag, attrs, &precondition)
            })
            .await?;
        let result = CopyObjectResult {
            e_tag: Some(etag(&meta)),
            last_modified: Some(timestamp(meta.last_modified())),
            ..Default::default()
        };
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(result),
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let (bucket, key) = (req.input.bucket, req.input.key);
        self.blocking(move |s| s.delete(&bucket, &key)).await?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
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
        let keys: Vec<String> = input.delete.objects.into_iter().map(|o| o.key).collect();
        let output = self
            .blocking(move |s| {
                s.bucket_dir(&bucket)?;
                let (mut deleted, mut errors) = (Vec::new(), Vec::new());
                for key in keys {
                    match s.delete(&bucket, &key) {
                        Ok(()) => deleted.push(DeletedObject {
                            key: Some(key),
                            ..Default::default()
                        }),
                        Err(e) => errors.push(Error {
                            code: Some(e.code().as_str().to_owned()),
                            key: Some(key),
                            message: e.message().map(str::to_owned),
                            version_id: None,
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
        let listed = self
            .list_page(input.bucket.clone(), query, input.max_keys, encode)
            .await?;
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
        let mut listed = self
            .list_page(input.bucket.clone(), query, input.max_keys, encode)
            .await?;
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
        let attrs = attrs(
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
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let id = self
            .blocking(move |s| s.create_upload(&bucket, &key, attrs))
            .await?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let input = req.input;
        let md5 = fidelity::declared_md5(&req.headers)?;
        let (bucket, key, id, part) = (input.bucket, input.key, input.upload_id, input.part_number);
        let ids = (bucket.clone(), key.clone(), id.clone());
        self.blocking(move |s| s.check_upload(&ids.0, &ids.1, &ids.2, part))
            .await?;
        let declared = checksum::declared([
            input.checksum_crc32,
            input.checksum_crc32c,
            input.checksum_crc64nvme,
            input.checksum_sha1,
            input.checksum_sha256,
        ]);
        let (temp, sums) = self.receive(input.body, declared).await?;
        fidelity::verify_md5(md5, &temp.md5())?;
        let info = self
            .blocking(move |s| s.commit_part(&bucket, &key, &id, part, temp))
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
        let (src_bucket, src_key) = bucket_and_key(input.copy_source)?;
        let range = input
            .copy_source_range
            .as_deref()
            .map(parse_copy_range)
            .transpose()?;
        let (if_match, if_none_match) =
            (input.copy_source_if_match, input.copy_source_if_none_match);
        let target = (input.bucket, input.key, input.upload_id, input.part_number);
        let (info, _) = self
            .blocking(move |s| {
                let (bucket, key, id, part) = &target;
                s.copy_part(
                    (bucket, key, id, *part),
                    (&src_bucket, &src_key),
                    range,
                    |source| check_conditions(source, if_match.as_ref(), if_none_match.as_ref()),
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
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let input = req.input;
        let precondition =
            fidelity::write_precondition(input.if_match.as_ref(), input.if_none_match.as_ref())?;
        let parts = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default();
        let parts: Vec<(i32, String)> = parts
            .into_iter()
            .map(|p| {
                (
                    p.part_number.unwrap_or(0),
                    p.e_tag.map(ETag::into_value).unwrap_or_default(),
                )
            })
            .collect();
        let (bucket, key, id, min) = (
            input.bucket.clone(),
            input.key.clone(),
            input.upload_id,
            self.min_part_size,
        );
        let meta = self
            .blocking(move |s| s.complete_upload(&bucket, &key, &id, &parts, min, &precondition))
            .await?;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(input.bucket.clone()),
            key: Some(input.key.clone()),
            location: Some(format!("/{}/{}", input.bucket, input.key)),
            e_tag: Some(etag(&meta)),
            ..Default::default()
        }))
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
        let parts = self
            .blocking(move |s| s.list_parts(&bucket, &key, &id))
            .await?;
        let marker = input.part_number_marker.unwrap_or(0);
        let max = input.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
        let mut selected: Vec<Part> = parts
            .into_iter()
            .filter(|p| p.number > marker)
            .take(max + 1)
            .map(|p| Part {
                e_tag: Some(ETag::Strong(p.etag)),
                part_number: Some(p.number),
                size: Some(p.size as i64),
                last_modified: Some(timestamp(
                    std::time::UNIX_EPOCH + std::time::Duration::from_nanos(p.mtime_ns),
                )),
                ..Default::default()
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
            ..Default::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let input = req.input;
        let bucket = input.bucket.clone();
        let prefix = input.prefix.clone().unwrap_or_default();
        let uploads = self
            .blocking(move |s| s.list_uploads(&bucket, &prefix))
            .await?;
        let key_marker = input.key_marker.clone().unwrap_or_default();
        let max = input.max_uploads.unwrap_or(1000).clamp(0, 1000) as usize;
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

/// The bucket and key of a copy source; access points and versions are not supported.
fn bucket_and_key(source: CopySource) -> S3Result<(String, String)> {
    match source {
        CopySource::Bucket { bucket, key, .. } => Ok((bucket.into(), key.into())),
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
