//! The HTTP layer in front of s3s: counts each request by S3 operation, then applies the WAN
//! emulation in order — first-byte latency, per-prefix rate limit, injected faults — before
//! (or instead of) handing the request to the S3 service. `GET /_bucketload/counters`
//! answers the counters as JSON; bucket names cannot start with '_', so it never clashes.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use s3s::service::S3Service;

use crate::config::{FaultConfig, LatencySpec, Timeouts};
use crate::faults::{CounterSet, FaultControl, FaultKind, RateLimiter, Rng, partition_of};
use crate::timeouts::{Activity, GuardedBody, ProgressBody, REQUEST_TIMEOUT_MESSAGE};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub(crate) type RespBody = UnsyncBoxBody<Bytes, BoxError>;
/// A request body that fails after the body timeout without bytes.
type ReqBody = ProgressBody<Incoming>;

/// Path of the counters endpoint.
pub const COUNTERS_PATH: &str = "/_bucketload/counters";

/// State shared by every connection of one server.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) s3: S3Service,
    pub(crate) counters: CounterSet,
    pub(crate) faults: FaultControl,
    pub(crate) rng: Rng,
    pub(crate) fault_rates: FaultConfig,
    pub(crate) latency: Option<LatencySpec>,
    /// First-byte latency of requests to directory buckets, in place of `latency`.
    pub(crate) directory_latency: Option<LatencySpec>,
    pub(crate) limiter: Option<RateLimiter>,
    /// Whether Signature Version 2 requests are accepted (S3 refuses them for new buckets).
    pub(crate) allow_sigv2: bool,
    pub(crate) timeouts: Timeouts,
    /// Connections open now (kept by the accept loop).
    pub(crate) open_connections: std::sync::atomic::AtomicUsize,
    /// Names each request, as S3's `x-amz-request-id` does.
    pub(crate) request_ids: RequestIds,
    /// S3 Express sessions for directory buckets.
    pub(crate) sessions: crate::express::Sessions,
}

impl Shared {
    /// The first-byte latency of a request to `path`: the directory buckets' own, when set,
    /// for a request to one (the bucket is the first segment: the server is path-style only).
    fn latency_of(&self, path: &str) -> Option<&LatencySpec> {
        let directory = crate::directory::bucket_of_path(path)
            .is_some_and(crate::directory::is_directory_bucket);
        match directory {
            true => self.directory_latency.as_ref().or(self.latency.as_ref()),
            false => self.latency.as_ref(),
        }
    }
}

/// Request IDs: 16 upper-case hex digits like S3's, distinct for every request of one server
/// (a counter through a bijective mix, started at a point drawn from the clock).
#[derive(Debug)]
pub(crate) struct RequestIds {
    next: std::sync::atomic::AtomicU64,
}

impl RequestIds {
    pub(crate) fn new() -> Self {
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Self {
            next: std::sync::atomic::AtomicU64::new(start),
        }
    }

    /// The next request's ID and the `x-amz-id-2` that goes with it.
    fn next(&self) -> (String, String) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = mix(n);
        let host = [mix(id), mix(id ^ 0x5bd1_e995), mix(id.rotate_left(17))];
        let host: String = host.iter().map(|h| format!("{h:016x}")).collect();
        (format!("{id:016X}"), host)
    }
}

/// splitmix64's finaliser: a bijection of u64 that scatters consecutive inputs.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The most of an error body [`with_request_id`] reads to name the request in it.
const MAX_ERROR_BODY: u64 = 64 * 1024;

/// Names the request in the response, as S3 does: `x-amz-request-id` and `x-amz-id-2` headers
/// on every answer, and the same ID in the `<RequestId>` of an XML error body.
async fn with_request_id(
    response: Response<RespBody>,
    (id, host): (String, String),
) -> Result<Response<RespBody>, BoxError> {
    let (mut parts, body) = response.into_parts();
    if let (Ok(id), Ok(host)) = (
        header::HeaderValue::from_str(&id),
        header::HeaderValue::from_str(&host),
    ) {
        parts.headers.insert("x-amz-request-id", id);
        parts.headers.insert("x-amz-id-2", host);
    }
    let xml = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.contains("xml"));
    let small = body
        .size_hint()
        .upper()
        .is_some_and(|n| n > 0 && n <= MAX_ERROR_BODY);
    if !(parts.status.is_client_error() || parts.status.is_server_error()) || !xml || !small {
        return Ok(Response::from_parts(parts, body));
    }
    let bytes = body.collect().await?.to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    let tagged = if let Some(start) = text.find("<RequestId>") {
        let end = text[start..]
            .find("</RequestId>")
            .map_or(text.len(), |e| start + e + "</RequestId>".len());
        format!(
            "{}<RequestId>{id}</RequestId>{}",
            &text[..start],
            &text[end..]
        )
    } else if let Some(at) = text.rfind("</Error>") {
        format!(
            "{}<RequestId>{id}</RequestId><HostId>{host}</HostId>{}",
            &text[..at],
            &text[at..]
        )
    } else {
        text.into_owned()
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = http_body_util::Full::new(Bytes::from(tagged))
        .map_err(|never| match never {})
        .boxed_unsync();
    Ok(Response::from_parts(parts, body))
}

impl Shared {
    /// A fault drawn from the configured random rates.
    fn random_fault(&self) -> Option<FaultKind> {
        let rates = &self.fault_rates;
        if !rates.is_active() {
            return None;
        }
        let r = self.rng.next_f64();
        if r < rates.error_rate() {
            let status = if self.rng.next_u64() & 1 == 0 {
                503
            } else {
                500
            };
            Some(FaultKind::Status(status))
        } else if r < rates.error_rate() + rates.reset_rate() {
            Some(FaultKind::ResetMidBody)
        } else if r < rates.error_rate() + rates.reset_rate() + rates.truncate_rate() {
            Some(FaultKind::Truncate)
        } else {
            None
        }
    }
}

/// Per-connection state: whether an injected reset must abort the connection with a RST, and
/// what the connection is doing (for its timeouts).
#[derive(Debug, Default)]
pub(crate) struct ConnState {
    pub(crate) reset: AtomicBool,
    pub(crate) activity: Arc<Activity>,
}

/// The hyper service of one connection.
#[derive(Debug, Clone)]
pub(crate) struct ConnService {
    pub(crate) shared: Arc<Shared>,
    pub(crate) conn: Arc<ConnState>,
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<RespBody>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let id = this.shared.request_ids.next();
            let response = this.handle(req).await?;
            with_request_id(response, id).await
        })
    }
}

impl ConnService {
    /// Answers one request; the request counts as in progress (no connection timeout runs)
    /// until its response body ends, except that its body must keep bringing bytes.
    async fn handle(self, req: Request<Incoming>) -> Result<Response<RespBody>, BoxError> {
        let activity = Arc::clone(&self.conn.activity);
        let guard = activity.begin_request();
        let resource = req.uri().path().to_owned();
        let method = req.method().clone();
        let head = method == Method::HEAD;
        let timeout = self.shared.timeouts.body;
        let req = req.map(|body| ProgressBody::new(body, timeout, Arc::clone(&activity)));
        let result = self.respond(req).await;
        let response = if activity.body_timed_out.load(Ordering::Acquire) {
            tracing::debug!(path = %resource, "request body timed out");
            let mut response = error_xml(
                400,
                "RequestTimeout",
                REQUEST_TIMEOUT_MESSAGE,
                &resource,
                head,
            );
            response.headers_mut().insert(
                header::CONNECTION,
                header::HeaderValue::from_static("close"),
            );
            response
        } else {
            result?
        };
        // The query is left out: it can hold a presigned URL's signature.
        tracing::debug!(%method, path = %resource, status = response.status().as_u16(), "request");
        Ok(response.map(|body| GuardedBody::new(body, guard).boxed_unsync()))
    }

    async fn respond(&self, req: Request<ReqBody>) -> Result<Response<RespBody>, BoxError> {
        let shared = &self.shared;
        if req.uri().path() == COUNTERS_PATH && req.method() == Method::GET {
            let json = serde_json::to_vec(&shared.counters.snapshot())?;
            return Ok(plain_response(StatusCode::OK, "application/json", json));
        }
        let op = classify(
            req.method(),
            req.uri().path(),
            req.uri().query().unwrap_or(""),
            req.headers(),
        );
        shared.counters.increment(op);
        let delay = shared
            .latency_of(req.uri().path())
            .map(|latency| latency.sample(shared.rng.next_u64()));
        if let Some(delay) = delay {
            // A read is answered at its latency: its lookups run during the delay, as the
            // store's own work is part of the first-byte latency S3 shows (after the delay
            // they added up to a millisecond). Other requests wait first, so nothing they
            // change is visible before their delay is over.
            if req.method() == Method::GET || req.method() == Method::HEAD {
                let deadline = Instant::now() + delay;
                let response = self.answer(req, op).await;
                crate::latency::sleep(deadline.saturating_duration_since(Instant::now())).await;
                return response;
            }
            crate::latency::sleep(delay).await;
        }
        self.answer(req, op).await
    }

    /// `respond` after the counters and the latency.
    async fn answer(
        &self,
        req: Request<ReqBody>,
        op: &'static str,
    ) -> Result<Response<RespBody>, BoxError> {
        let shared = &self.shared;
        let head = req.method() == Method::HEAD;
        if let Some(limiter) = &shared.limiter
            && !limiter.admit(partition_of(req.uri().path()))
        {
            tracing::debug!(op, path = req.uri().path(), "rate limit exceeded");
            return Ok(drain_then_error(req, 503, None, head).await);
        }
        let fault = shared.faults.take(op).or_else(|| shared.random_fault());
        if let Some(kind) = fault {
            tracing::debug!(op, path = req.uri().path(), ?kind, "injecting fault");
        }
        match fault {
            Some(FaultKind::Status(status)) => {
                return Ok(drain_then_error(req, status, None, head).await);
            }
            Some(FaultKind::Error { status, code }) => {
                return Ok(drain_then_error(req, status, Some(code), head).await);
            }
            _ => {}
        }
        if let Some((status, code, message)) = crate::auth::refuse(
            req.uri().query().unwrap_or(""),
            req.headers(),
            shared.allow_sigv2,
            std::time::SystemTime::now(),
        ) {
            return Ok(drain_then_explain(req, status, Some(code), &message, head).await);
        }
        let verdict = shared.sessions.verdict(
            req.method(),
            req.uri(),
            req.headers(),
            std::time::SystemTime::now(),
            &mut || shared.rng.next_u64(),
        );
        let mut req = req;
        match verdict {
            crate::express::Verdict::Pass => {}
            crate::express::Verdict::Resign(authorization) => {
                req.headers_mut()
                    .insert(header::AUTHORIZATION, authorization);
            }
            crate::express::Verdict::Session(xml) => {
                return Ok(plain_response(
                    StatusCode::OK,
                    "application/xml",
                    xml.into_bytes(),
                ));
            }
            crate::express::Verdict::Refuse(status, code, message) => {
                return Ok(drain_then_explain(req, status, Some(code), &message, head).await);
            }
        }
        if let Some(what) =
            crate::fidelity::unrouted(req.uri().query().unwrap_or(""), req.headers())
        {
            let message = format!(
                "{what} is not implemented by bucketload serve; the request changed nothing"
            );
            return Ok(drain_then_explain(req, 501, Some("NotImplemented"), &message, head).await);
        }
        if let Some(name) = crate::fidelity::ignored_condition(op, req.method(), req.headers()) {
            let message = format!(
                "the condition {name} on {op} is not implemented by bucketload serve (S3 takes none there); the request changed nothing"
            );
            return Ok(drain_then_explain(req, 501, Some("NotImplemented"), &message, head).await);
        }
        let mut req = match check_post_form(req, shared.allow_sigv2).await {
            Ok(req) => req,
            Err(refused) => return Ok(refused),
        };
        crate::auth::date_as_amz_date(req.headers_mut());
        let attributes = req.method() == Method::GET
            && req
                .uri()
                .query()
                .unwrap_or("")
                .split('&')
                .any(|p| p.split('=').next() == Some("attributes"));
        let response = shared.s3.call(req).await.map_err(BoxError::from)?;
        match fault {
            Some(kind) => self.cut(response, kind, head),
            None if attributes && response.status().is_success() => {
                Ok(unquote_etag(response).await?)
            }
            None if op != "GetObject" || !response.status().is_success() => {
                Ok(escape_carriage_returns(response).await?)
            }
            None => Ok(response.map(|b| b.map_err(BoxError::from).boxed_unsync())),
        }
    }

    /// Applies a reset or a truncation to a response: half its body is sent, then the
    /// connection is reset or closed. Without a body, the connection ends before the response.
    fn cut(
        &self,
        response: Response<s3s::Body>,
        kind: FaultKind,
        head: bool,
    ) -> Result<Response<RespBody>, BoxError> {
        let length = response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .or_else(|| response.body().size_hint().exact());
        let reset = kind == FaultKind::ResetMidBody;
        match length {
            Some(length) if length >= 2 && !head => {
                let conn = Arc::clone(&self.conn);
                Ok(response.map(|inner| {
                    CutBody {
                        inner,
                        left: length / 2,
                        length,
                        reset,
                        conn,
                    }
                    .boxed_unsync()
                }))
            }
            _ => {
                if reset {
                    self.conn.reset.store(true, Ordering::Release);
                }
                Err("injected fault: connection closed before the response".into())
            }
        }
    }
}

/// The most of a browser-form POST upload read to find its fields (they precede the file).
const MAX_FORM_FIELDS: usize = 1 << 20;

/// A browser-form POST upload (`multipart/form-data` to a bucket) is checked as S3 checks it
/// before the request layer sees it: the policy's `expiration` must be an ISO 8601 UTC time
/// (`2026-12-01T12:00:00.000Z`; else 400 `InvalidPolicyDocument`), and a form signed with
/// Signature Version 2 (`AWSAccessKeyId` and `signature`) is refused unless the server allows
/// SigV2. The fields come before the file, so only they are read; the body is handed on whole.
async fn check_post_form(
    req: Request<ReqBody>,
    allow_sigv2: bool,
) -> Result<Request<s3s::Body>, Response<RespBody>> {
    let boundary = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .filter(|t| t.to_ascii_lowercase().starts_with("multipart/form-data"))
        .and_then(|t| {
            t.split(';')
                .find_map(|p| p.trim().strip_prefix("boundary="))
        })
        .map(|b| b.trim_matches('"').to_owned());
    let bucket_path = !req.uri().path().trim_matches('/').contains('/');
    let Some(boundary) = boundary.filter(|_| req.method() == Method::POST && bucket_path) else {
        return Ok(req.map(s3s::Body::http_body));
    };
    let (parts, mut body) = req.into_parts();
    let mut prefix = Vec::new();
    let mut ended = false;
    while prefix.len() < MAX_FORM_FIELDS
        && !contains(&prefix, b"name=\"file\"")
        && !contains(&prefix, b"name=file")
    {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    prefix.extend_from_slice(&data);
                }
            }
            Some(Err(_)) | None => {
                ended = true;
                break;
            }
        }
    }
    let fields = form_fields(&prefix, &boundary);
    let field = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let refusal = if field("AWSAccessKeyId").is_some()
        && field("x-amz-algorithm").is_none()
        && !allow_sigv2
    {
        Some((
            "InvalidRequest",
            "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256. (bucketload serve --allow-sigv2 accepts Signature Version 2.)".to_owned(),
        ))
    } else {
        field("policy")
            .and_then(policy_expiration)
            .filter(|e| !iso8601_utc(e))
            .map(|e| {
                (
                    "InvalidPolicyDocument",
                    format!("Invalid Policy: Invalid 'expiration' value: '{e}'"),
                )
            })
    };
    if let Some((code, message)) = refusal {
        let resource = parts.uri.path().to_owned();
        if !ended {
            while let Some(Ok(_)) = body.frame().await {}
        }
        return Err(error_xml(
            400,
            code,
            &xml_escape(&message),
            &resource,
            false,
        ));
    }
    let head = futures::stream::once(async move {
        Ok::<_, BoxError>(http_body::Frame::data(Bytes::from(prefix)))
    });
    let rest = http_body_util::BodyStream::new(body);
    let whole = http_body_util::StreamBody::new(futures::StreamExt::chain(head, rest));
    Ok(Request::from_parts(
        parts,
        s3s::Body::http_body_unsync(whole),
    ))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The `(name, value)` of each complete field of a `multipart/form-data` body's start.
fn form_fields(body: &[u8], boundary: &str) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(body);
    let delimiter = format!("--{boundary}");
    let mut fields = Vec::new();
    let sections: Vec<&str> = text.split(delimiter.as_str()).collect();
    // The last section may be cut short: only sections followed by another delimiter count.
    for section in sections
        .iter()
        .take(sections.len().saturating_sub(1))
        .skip(1)
    {
        let Some((head, value)) = section.split_once("\r\n\r\n") else {
            continue;
        };
        let Some(name) = head.split(';').find_map(|p| {
            let p = p.trim();
            p.strip_prefix("name=")
                .map(|n| n.trim_matches('"').to_owned())
        }) else {
            continue;
        };
        fields.push((name, value.strip_suffix("\r\n").unwrap_or(value).to_owned()));
    }
    fields
}

/// The `expiration` of a base64 POST policy; `None` when it cannot be read (the request
/// layer reports that).
fn policy_expiration(policy: &str) -> Option<String> {
    let json = crate::checksum::base64_decode(policy.trim())?;
    let value: serde_json::Value = serde_json::from_slice(&json).ok()?;
    value.get("expiration")?.as_str().map(str::to_owned)
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, as S3 wants a POST policy's expiration.
fn iso8601_utc(text: &str) -> bool {
    let b = text.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let fixed = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    let rest = text.get(19..).unwrap_or("");
    let rest = rest.strip_suffix('Z');
    fixed
        && rest.is_some_and(|r| {
            r.is_empty()
                || r.strip_prefix('.')
                    .is_some_and(|f| !f.is_empty() && f.bytes().all(|d| d.is_ascii_digit()))
        })
}

/// GetObjectAttributes answers the ETag without quotes (unlike every other S3 answer); the
/// request layer always quotes it.
/// The largest XML answer [`escape_carriage_returns`] reads (a page of 1000 keys of 1024 bytes,
/// each percent-encoded to three bytes a byte, is about 3 MiB).
const MAX_XML_BODY: u64 = 16 << 20;

/// Writes each carriage return in an XML answer as `&#13;`, as S3 does: an XML parser reads a
/// raw one as a line feed (line-end normalisation), so a key holding one would come back
/// changed. The XML writer escapes only `&`, `<`, `>`, `'` and `"`, and writes no line breaks
/// of its own, so every carriage return in its output is in a key, prefix or value.
async fn escape_carriage_returns(
    response: Response<s3s::Body>,
) -> Result<Response<RespBody>, BoxError> {
    let xml = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.contains("xml"));
    let small = response
        .body()
        .size_hint()
        .exact()
        .is_some_and(|n| n > 0 && n <= MAX_XML_BODY);
    if !xml || !small {
        return Ok(response.map(|b| b.map_err(BoxError::from).boxed_unsync()));
    }
    let (mut parts, body) = response.into_parts();
    let bytes = body.collect().await?.to_bytes();
    let bytes = match bytes.contains(&b'\r') {
        false => bytes,
        true => {
            parts.headers.remove(header::CONTENT_LENGTH);
            let mut escaped = Vec::with_capacity(bytes.len() + 16);
            for &b in bytes.iter() {
                match b {
                    b'\r' => escaped.extend_from_slice(b"&#13;"),
                    b => escaped.push(b),
                }
            }
            Bytes::from(escaped)
        }
    };
    let body = http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync();
    Ok(Response::from_parts(parts, body))
}

async fn unquote_etag(response: Response<s3s::Body>) -> Result<Response<RespBody>, BoxError> {
    let (mut parts, body) = response.into_parts();
    let bytes = body.collect().await?.to_bytes();
    let text = String::from_utf8_lossy(&bytes)
        .replace("<ETag>\"", "<ETag>")
        .replace("\"</ETag>", "</ETag>");
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = http_body_util::Full::new(Bytes::from(text))
        .map_err(|never| match never {})
        .boxed_unsync();
    Ok(Response::from_parts(parts, body))
}

/// Reads and discards the request body (so the client sees the answer rather than a broken
/// pipe), then answers an S3 XML error (with `code`, else the one [`error_response`] picks).
async fn drain_then_error(
    req: Request<ReqBody>,
    status: u16,
    code: Option<&str>,
    head: bool,
) -> Response<RespBody> {
    drain_then_explain(req, status, code, "Injected failure.", head).await
}

/// [`drain_then_error`] with a message of its own.
async fn drain_then_explain(
    req: Request<ReqBody>,
    status: u16,
    code: Option<&str>,
    message: &str,
    head: bool,
) -> Response<RespBody> {
    let resource = req.uri().path().to_owned();
    let mut body = req.into_body();
    while let Some(frame) = body.frame().await {
        if frame.is_err() {
            break;
        }
    }
    match code {
        Some(code) => error_xml(status, code, &xml_escape(message), &resource, head),
        None => error_response(status, &resource, head),
    }
}

/// An error in S3's XML format; 503 answers SlowDown, 500 InternalError.
pub(crate) fn error_response(status: u16, resource: &str, head: bool) -> Response<RespBody> {
    let (code, message) = match status {
        503 => ("SlowDown", "Please reduce your request rate."),
        500 => (
            "InternalError",
            "We encountered an internal error. Please try again.",
        ),
        _ => ("ServiceUnavailable", "Injected failure."),
    };
    error_xml(status, code, message, resource, head)
}

fn error_xml(
    status: u16,
    code: &str,
    message: &str,
    resource: &str,
    head: bool,
) -> Response<RespBody> {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let resource = xml_escape(resource);
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message><Resource>{resource}</Resource><RequestId>bucketload</RequestId></Error>"
    );
    let body = if head { Vec::new() } else { body.into_bytes() };
    plain_response(status, "application/xml", body)
}

fn plain_response(
    status: StatusCode,
    content_type: &'static str,
    body: Vec<u8>,
) -> Response<RespBody> {
    let mut response = Response::new(
        http_body_util::Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Names the S3 operation of a path-style request.
pub(crate) fn classify(
    method: &Method,
    path: &str,
    query: &str,
    headers: &HeaderMap,
) -> &'static str {
    let has = |name: &str| query.split('&').any(|p| p.split('=').next() == Some(name));
    let path = path.trim_start_matches('/');
    let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
    let copy = headers.contains_key("x-amz-copy-source");
    if bucket.is_empty() {
        return if method == Method::GET {
            "ListBuckets"
        } else {
            "Other"
        };
    }
    if key.is_empty() {
        return match *method {
            Method::PUT if query.is_empty() => "CreateBucket",
            Method::HEAD => "HeadBucket",
            Method::DELETE if query.is_empty() => "DeleteBucket",
            Method::GET if has("session") => "CreateSession",
            Method::GET if has("uploads") => "ListMultipartUploads",
            Method::GET if has("list-type") => "ListObjectsV2",
            Method::GET
                if query.is_empty() || has("prefix") || has("marker") || has("delimiter") =>
            {
                "ListObjects"
            }
            Method::POST if has("delete") => "DeleteObjects",
            _ => "Other",
        };
    }
    match *method {
        Method::GET if has("uploadId") => "ListParts",
        Method::GET if query.is_empty() || !(has("acl") || has("tagging") || has("attributes")) => {
            "GetObject"
        }
        Method::HEAD => "HeadObject",
        Method::PUT if has("uploadId") => {
            if copy {
                "UploadPartCopy"
            } else {
                "UploadPart"
            }
        }
        Method::PUT if copy => "CopyObject",
        Method::PUT if !(has("acl") || has("tagging")) => "PutObject",
        Method::POST if has("uploads") => "CreateMultipartUpload",
        Method::POST if has("uploadId") => "CompleteMultipartUpload",
        Method::DELETE if has("uploadId") => "AbortMultipartUpload",
        Method::DELETE if !has("tagging") => "DeleteObject",
        _ => "Other",
    }
}

pin_project_lite::pin_project! {
    /// A response body cut after `left` bytes while still promising `length`.
    struct CutBody {
        #[pin]
        inner: s3s::Body,
        left: u64,
        length: u64,
        reset: bool,
        conn: Arc<ConnState>,
    }
}

impl Body for CutBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        if *this.left == 0 {
            if *this.reset {
                this.conn.reset.store(true, Ordering::Release);
                return Poll::Ready(Some(
                    Err("injected fault: connection reset mid-body".into()),
                ));
            }
            return Poll::Ready(None);
        }
        match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(mut data) => {
                    if data.len() as u64 > *this.left {
                        data.truncate(*this.left as usize);
                    }
                    *this.left -= data.len() as u64;
                    Poll::Ready(Some(Ok(Frame::data(data))))
                }
                Err(frame) => Poll::Ready(Some(Ok(frame))),
            },
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        false
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn post_policy_expirations_and_form_fields() {
        assert!(iso8601_utc("2026-12-01T12:00:00.000Z"));
        assert!(iso8601_utc("2026-12-01T12:00:00Z"));
        assert!(!iso8601_utc("2026-12-01 12:00:00.123456+00:00"));
        assert!(!iso8601_utc("2026-12-01T12:00:00"));
        assert!(!iso8601_utc("2026-12-01T12:00:00.Z"));
        let body = "--XX\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\na/b\r\n--XX\r\nContent-Disposition: form-data; name=\"policy\"\r\n\r\neyJ9\r\n--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\nbyt";
        let fields = form_fields(body.as_bytes(), "XX");
        assert_eq!(
            fields,
            vec![
                ("key".to_owned(), "a/b".to_owned()),
                ("policy".to_owned(), "eyJ9".to_owned())
            ]
        );
        let policy = crate::checksum::base64_decode("eyJleHBpcmF0aW9uIjoieCJ9").unwrap();
        assert_eq!(policy, br#"{"expiration":"x"}"#);
        assert_eq!(
            policy_expiration("eyJleHBpcmF0aW9uIjoieCJ9").as_deref(),
            Some("x")
        );
    }

    fn op(method: Method, path: &str, query: &str) -> &'static str {
        classify(&method, path, query, &HeaderMap::new())
    }

    #[test]
    fn classifies_operations() {
        assert_eq!(op(Method::GET, "/", ""), "ListBuckets");
        assert_eq!(op(Method::PUT, "/b", ""), "CreateBucket");
        assert_eq!(op(Method::HEAD, "/b", ""), "HeadBucket");
        assert_eq!(op(Method::DELETE, "/b/", ""), "DeleteBucket");
        assert_eq!(
            op(Method::GET, "/b", "list-type=2&prefix=a"),
            "ListObjectsV2"
        );
        assert_eq!(
            op(Method::GET, "/b", "uploads&prefix=x"),
            "ListMultipartUploads"
        );
        assert_eq!(op(Method::POST, "/b", "delete"), "DeleteObjects");
        assert_eq!(op(Method::GET, "/b/k/x", ""), "GetObject");
        assert_eq!(op(Method::HEAD, "/b/k", ""), "HeadObject");
        assert_eq!(op(Method::PUT, "/b/k", ""), "PutObject");
        assert_eq!(op(Method::POST, "/b/k", "uploads"), "CreateMultipartUpload");
        assert_eq!(
            op(Method::PUT, "/b/k", "partNumber=1&uploadId=ab"),
            "UploadPart"
        );
        assert_eq!(
            op(Method::POST, "/b/k", "uploadId=ab"),
            "CompleteMultipartUpload"
        );
        assert_eq!(
            op(Method::DELETE, "/b/k", "uploadId=ab"),
            "AbortMultipartUpload"
        );
        assert_eq!(op(Method::GET, "/b/k", "uploadId=ab"), "ListParts");
        assert_eq!(op(Method::DELETE, "/b/k", ""), "DeleteObject");
        let mut headers = HeaderMap::new();
        headers.insert("x-amz-copy-source", "src/k".parse().unwrap());
        assert_eq!(classify(&Method::PUT, "/b/k", "", &headers), "CopyObject");
    }

    #[test]
    fn error_xml_is_s3_shaped() {
        let response = error_response(503, "/b/k<", false);
        assert_eq!(response.status(), 503);
        let body = futures::executor::block_on(response.into_body().collect())
            .unwrap()
            .to_bytes();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(
            text.contains("<Code>SlowDown</Code>") && text.contains("/b/k&lt;"),
            "{text}"
        );
    }
}
