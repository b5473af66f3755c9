//! One S3 object by its exact key, for keys object_store's `Path` cannot spell.
//!
//! `Path` drops empty segments and a leading or trailing `/`, so `a//x.pt` would be read and
//! written as `a/x.pt`, and `x/` as `x`: another object than boto3 or the Amazon S3 Connector
//! for PyTorch use. [`Store::exact_key`] gives an [`ObjectStore`] of one key, spelled byte for
//! byte, whose requests are SigV4-signed here like the multipart-upload listing's: HEAD and
//! ranged GET (with `If-Match`), PUT, and the multipart upload (create, parts, complete,
//! abort) and DELETE, with the store's checksums, user metadata, retries, pacing and metrics
//! (the store is wrapped in a [`MeteredStore`]). Every `Path` it is given stands for that one
//! key; listing and copying are not offered. Its requests go through hyper with the path
//! exactly as encoded, so keys with `.` or `..` segments (`a/../b`), which reqwest would
//! resolve, name themselves too.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::stream::{self, BoxStream, StreamExt};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use object_store::client::HttpClient;
use object_store::path::Path;
use object_store::{
    Attribute, AttributeValue, Attributes, CopyOptions, GetOptions, GetRange, GetResult,
    GetResultPayload, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMode,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, UploadPart,
};
use serde::Deserialize;

use crate::bucket::{Answer, Request, bucket_url, execute_answer, signed_request};
use crate::{Error, MeteredStore, Scheme, Store};

const STORE: &str = "S3 (exact key)";
const META_PREFIX: &str = "x-amz-meta-";
const CRC64NVME: &str = "x-amz-checksum-crc64nvme";

impl Store {
    /// An [`ObjectStore`] of the one object `key`, spelled exactly as given (relative to the
    /// bucket, not to the store's prefix): see the module docs. Only for S3 stores. The
    /// requests go out with the key's path exactly as encoded, `.` and `..` segments included
    /// (see [`crate::http::MeteredConnector::connect_exact`]).
    pub fn exact_key(&self, key: &str) -> Result<Arc<dyn ObjectStore>, Error> {
        let uri = format!("s3://{}/{key}", self.uri().bucket());
        let invalid = |reason: &str| Error::InvalidUri {
            uri: uri.clone(),
            reason: reason.to_owned(),
        };
        if self.uri().scheme() != Scheme::S3 {
            return Err(invalid(
                "only S3 keys may hold empty segments or end with `/`; name the object without them",
            ));
        }
        if key.is_empty() {
            return Err(invalid("an object key is not empty"));
        }
        let url = format!(
            "{}/{}",
            bucket_url(self).trim_end_matches('/'),
            encode_key(key)
        );
        let exact = ExactKey {
            store: self.clone(),
            client: self.exact_http_client()?,
            key: key.to_owned(),
            uri,
            url,
        };
        Ok(Arc::new(MeteredStore::new(exact, self.metrics().clone())))
    }
}

/// `key` percent-encoded for a URL path: every byte but the unreserved ones and `/`.
pub(crate) fn encode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The [`ObjectStore`] of one exact key.
#[derive(Debug, Clone)]
struct ExactKey {
    store: Store,
    client: HttpClient,
    key: String,
    /// `s3://bucket/key`, for errors.
    uri: String,
    /// The object's URL.
    url: String,
}

impl fmt::Display for ExactKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{STORE}({})", self.uri)
    }
}

/// A request to the object's URL.
struct Call {
    method: Method,
    query: Vec<(&'static str, String)>,
    headers: HeaderMap,
    body: PutPayload,
}

impl Call {
    fn new(method: Method) -> Call {
        Call {
            method,
            query: Vec::new(),
            headers: HeaderMap::new(),
            body: PutPayload::new(),
        }
    }

    fn query(mut self, key: &'static str, value: impl Into<String>) -> Call {
        self.query.push((key, value.into()));
        self
    }

    fn header(mut self, name: &str, value: &str) -> object_store::Result<Call> {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(generic)?;
        self.headers
            .insert(name, HeaderValue::from_str(value).map_err(generic)?);
        Ok(self)
    }

    fn body(mut self, body: PutPayload) -> Call {
        self.body = body;
        self
    }
}

fn generic(e: impl std::error::Error + Send + Sync + 'static) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: Box::new(e),
    }
}

fn generic_text(text: String) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: text.into(),
    }
}

impl ExactKey {
    /// Sends `call` (retried like the store's own requests); a 2xx answer, or the error its
    /// status means.
    async fn send(&self, call: Call) -> object_store::Result<Answer> {
        // Built as text, never through `Url`, which would resolve `.` and `..` segments.
        let url = if call.query.is_empty() {
            self.url.clone()
        } else {
            let query = url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(&call.query)
                .finish();
            format!("{}?{query}", self.url)
        };
        let mut headers = call.headers;
        if matches!(call.method, Method::PUT | Method::POST | Method::DELETE) {
            // A body sent as several chunks (or none) goes without a length otherwise, and S3
            // refuses such a PUT (411 MissingContentLength), as the embedded server does a
            // DELETE.
            headers.insert(
                http::header::CONTENT_LENGTH,
                call.body.content_length().into(),
            );
        }
        let call = Call { headers, ..call };
        let sha256 = if self.store.config().sign_payload() {
            payload_sha256(&call.body)
        } else {
            "UNSIGNED-PAYLOAD".to_owned()
        };
        let creds = self
            .store
            .signing_credential()
            .await
            .map_err(|e| generic_text(e.to_string()))?;
        let make = || {
            let request = Request {
                method: call.method.clone(),
                url: &url,
                headers: call.headers.clone(),
                body: call.body.clone().into(),
                payload_sha256: &sha256,
            };
            signed_request(&self.store, request, creds.as_deref())
        };
        let answer = execute_answer(&self.store, &self.client, make, &self.uri)
            .await
            .map_err(|e| generic_text(e.to_string()))?;
        if answer.status.is_success() {
            return Ok(answer);
        }
        Err(self.status_error(&answer))
    }

    fn status_error(&self, answer: &Answer) -> object_store::Error {
        let source = format!(
            "{}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        )
        .into();
        let path = self.key.clone();
        match answer.status {
            StatusCode::NOT_FOUND => object_store::Error::NotFound { path, source },
            StatusCode::PRECONDITION_FAILED => object_store::Error::Precondition { path, source },
            StatusCode::NOT_MODIFIED => object_store::Error::NotModified { path, source },
            StatusCode::FORBIDDEN => object_store::Error::PermissionDenied { path, source },
            StatusCode::UNAUTHORIZED => object_store::Error::Unauthenticated { path, source },
            _ => object_store::Error::Generic {
                store: STORE,
                source,
            },
        }
    }

    /// The headers of an upload: user metadata, and the checksum of `body` when the store
    /// sends checksums.
    fn upload_headers(
        &self,
        call: Call,
        attributes: &Attributes,
        body: Option<&PutPayload>,
    ) -> object_store::Result<Call> {
        let mut call = call;
        for (attribute, value) in attributes {
            match attribute {
                Attribute::Metadata(name) => {
                    call = call.header(&format!("{META_PREFIX}{name}"), value.as_ref())?;
                }
                Attribute::ContentType => call = call.header("content-type", value.as_ref())?,
                _ => {}
            }
        }
        if self.store.config().checksums() {
            call = match body {
                Some(body) => call.header(CRC64NVME, &crc64nvme(body))?,
                None => call.header("x-amz-checksum-algorithm", "CRC64NVME")?,
            };
        }
        Ok(call)
    }

    fn meta(&self, location: &Path, headers: &HeaderMap, size: u64) -> ObjectMeta {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let last_modified = text("last-modified")
            .and_then(|t| DateTime::parse_from_rfc2822(t).ok())
            .map_or_else(Utc::now, |t| t.with_timezone(&Utc));
        ObjectMeta {
            location: location.clone(),
            last_modified,
            size,
            e_tag: text("etag").map(str::to_owned),
            version: text("x-amz-version-id").map(str::to_owned),
        }
    }
}

fn payload_sha256(body: &PutPayload) -> String {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    for chunk in body.iter() {
        hash.update(chunk);
    }
    hex::encode(hash.finalize())
}

/// The base64 CRC64-NVME of `body`, the `x-amz-checksum-crc64nvme` value.
fn crc64nvme(body: &PutPayload) -> String {
    let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc64Nvme);
    for chunk in body.iter() {
        digest.update(chunk);
    }
    base64(&digest.finalize().to_be_bytes())
}

/// Standard base64 with padding.
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The user metadata of an answer (`x-amz-meta-*`).
fn metadata(headers: &HeaderMap) -> Attributes {
    headers
        .iter()
        .filter_map(|(name, value)| {
            let key = name.as_str().strip_prefix(META_PREFIX)?;
            let value = value.to_str().ok()?;
            Some((
                Attribute::Metadata(key.to_owned().into()),
                AttributeValue::from(value.to_owned()),
            ))
        })
        .collect()
}

/// The range an answer holds and the object's size: from `Content-Range`, else the whole
/// body.
fn answered_range(headers: &HeaderMap, body_len: u64) -> (std::ops::Range<u64>, u64) {
    let range = headers
        .get("content-range")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes "))
        .and_then(|v| {
            let (span, size) = v.split_once('/')?;
            let (start, end) = span.split_once('-')?;
            Some((start.parse::<u64>().ok()?, end.parse::<u64>().ok()?, size))
        });
    match range {
        Some((start, end, size)) => {
            let size = size.parse().unwrap_or(end + 1);
            (start..end + 1, size)
        }
        None => (0..body_len, body_len),
    }
}

fn range_header(range: &GetRange) -> String {
    match range {
        GetRange::Bounded(r) => format!("bytes={}-{}", r.start, r.end.saturating_sub(1)),
        GetRange::Offset(o) => format!("bytes={o}-"),
        GetRange::Suffix(n) => format!("bytes=-{n}"),
    }
}

#[async_trait]
impl ObjectStore for ExactKey {
    async fn put_opts(
        &self,
        _location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        if !matches!(opts.mode, PutMode::Overwrite) {
            return Err(object_store::Error::NotImplemented {
                operation: "conditional put of an exact key".to_owned(),
                implementer: STORE.to_owned(),
            });
        }
        let call = Call::new(Method::PUT);
        let call = self.upload_headers(call, &opts.attributes, Some(&payload))?;
        let answer = self.send(call.body(payload)).await?;
        let text = |name: &str| {
            let value = answer.headers.get(name)?;
            value.to_str().ok().map(str::to_owned)
        };
        Ok(PutResult {
            e_tag: text("etag"),
            version: text("x-amz-version-id"),
            extensions: Default::default(),
        })
    }

    async fn put_multipart_opts(
        &self,
        _location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let call = Call::new(Method::POST).query("uploads", "");
        let call = self.upload_headers(call, &opts.attributes, None)?;
        let answer = self.send(call).await?;
        let created: Created = quick_xml::de::from_str(&String::from_utf8_lossy(&answer.body))
            .map_err(|e| generic_text(format!("cannot read the created upload: {e}")))?;
        Ok(Box::new(Upload {
            object: self.clone(),
            upload_id: created.upload_id,
            parts: Arc::new(Mutex::new(Vec::new())),
            next: 0,
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let method = if options.head {
            Method::HEAD
        } else {
            Method::GET
        };
        let mut call = Call::new(method);
        if let Some(etag) = &options.if_match {
            call = call.header("if-match", etag)?;
        }
        if let Some(etag) = &options.if_none_match {
            call = call.header("if-none-match", etag)?;
        }
        if let Some(range) = &options.range
            && !options.head
        {
            call = call.header("range", &range_header(range))?;
        }
        let answer = self.send(call).await?;
        let (range, size) = if options.head {
            let size = answer
                .headers
                .get("content-length")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            (0..size, size)
        } else {
            answered_range(&answer.headers, answer.body.len() as u64)
        };
        let meta = self.meta(location, &answer.headers, size);
        let attributes = metadata(&answer.headers);
        let body = if options.head {
            Bytes::new()
        } else {
            answer.body
        };
        Ok(GetResult {
            payload: GetResultPayload::Stream(stream::once(async move { Ok(body) }).boxed()),
            meta,
            range,
            attributes,
            extensions: Default::default(),
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let object = self.clone();
        locations
            .then(move |location| {
                let object = object.clone();
                async move {
                    let location = location?;
                    object.send(Call::new(Method::DELETE)).await?;
                    Ok(location)
                }
            })
            .boxed()
    }

    fn list(&self, _prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        stream::once(async { Err(not_offered("list")) }).boxed()
    }

    async fn list_with_delimiter(
        &self,
        _prefix: Option<&Path>,
    ) -> object_store::Result<ListResult> {
        Err(not_offered("list"))
    }

    async fn copy_opts(
        &self,
        _from: &Path,
        _to: &Path,
        _options: CopyOptions,
    ) -> object_store::Result<()> {
        Err(not_offered("copy"))
    }
}

fn not_offered(operation: &str) -> object_store::Error {
    object_store::Error::NotImplemented {
        operation: format!("{operation} through the store of one exact key"),
        implementer: STORE.to_owned(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Created {
    upload_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Completed {
    #[serde(rename = "ETag")]
    e_tag: Option<String>,
}

/// A part stored: its number, ETag and checksum.
#[derive(Debug, Clone)]
struct Part {
    number: usize,
    e_tag: String,
    checksum: Option<String>,
}

/// A multipart upload of an exact key.
#[derive(Debug)]
struct Upload {
    object: ExactKey,
    upload_id: String,
    parts: Arc<Mutex<Vec<Part>>>,
    /// Parts handed out so far.
    next: usize,
}

#[async_trait]
impl MultipartUpload for Upload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.next += 1;
        let number = self.next;
        let (object, upload_id, parts) = (
            self.object.clone(),
            self.upload_id.clone(),
            Arc::clone(&self.parts),
        );
        Box::pin(async move {
            let call = Call::new(Method::PUT)
                .query("partNumber", number.to_string())
                .query("uploadId", upload_id);
            let call = object.upload_headers(call, &Attributes::new(), Some(&data))?;
            let checksum = call
                .headers
                .get(CRC64NVME)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let answer = object.send(call.body(data)).await?;
            let e_tag = answer
                .headers
                .get("etag")
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| generic_text(format!("part {number} was stored without an ETag")))?
                .to_owned();
            parts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Part {
                    number,
                    e_tag,
                    checksum,
                });
            Ok(())
        })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let mut parts = self
            .parts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        parts.sort_by_key(|p| p.number);
        let mut xml = String::from("<CompleteMultipartUpload>");
        for part in &parts {
            xml.push_str(&format!(
                "<Part><PartNumber>{}</PartNumber><ETag>{}</ETag>",
                part.number,
                escape(&part.e_tag)
            ));
            if let Some(checksum) = &part.checksum {
                xml.push_str(&format!(
                    "<ChecksumCRC64NVME>{checksum}</ChecksumCRC64NVME>"
                ));
            }
            xml.push_str("</Part>");
        }
        xml.push_str("</CompleteMultipartUpload>");
        let call = Call::new(Method::POST)
            .query("uploadId", self.upload_id.clone())
            .body(PutPayload::from(xml));
        let answer = self.object.send(call).await?;
        // S3 may answer 200 and still fail: the error is then in the body.
        if answer.body.windows(7).any(|w| w == b"<Error>") {
            return Err(generic_text(format!(
                "the upload's completion failed: {}",
                String::from_utf8_lossy(&answer.body)
            )));
        }
        let completed: Option<Completed> =
            quick_xml::de::from_str(&String::from_utf8_lossy(&answer.body)).ok();
        Ok(PutResult {
            e_tag: completed.and_then(|c| c.e_tag),
            version: answer
                .headers
                .get("x-amz-version-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            extensions: Default::default(),
        })
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        let call = Call::new(Method::DELETE).query("uploadId", self.upload_id.clone());
        match self.object.send(call).await {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// `text` with XML's special characters escaped.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_encoded_byte_for_byte() {
        assert_eq!(encode_key("a//x.pt"), "a//x.pt");
        assert_eq!(encode_key("x/"), "x/");
        assert_eq!(encode_key("/lead"), "/lead");
        assert_eq!(encode_key("a b+c%é"), "a%20b%2Bc%25%C3%A9");
        assert_eq!(encode_key("a/../b/./c"), "a/../b/./c");
    }

    #[test]
    fn base64_pads() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn content_range_gives_range_and_size() {
        let mut headers = HeaderMap::new();
        headers.insert("content-range", HeaderValue::from_static("bytes 10-19/100"));
        assert_eq!(answered_range(&headers, 10), (10..20, 100));
        assert_eq!(answered_range(&HeaderMap::new(), 7), (0..7, 7));
    }
}
