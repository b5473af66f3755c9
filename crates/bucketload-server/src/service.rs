//! The HTTP layer in front of s3s: counts each request by S3 operation, then applies the WAN
//! emulation in order — first-byte latency, per-prefix rate limit, injected faults — before
//! (or instead of) handing the request to the S3 service. `GET /_bucketload/counters`
//! answers the counters as JSON; bucket names cannot start with '_', so it never clashes.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

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
    pub(crate) limiter: Option<RateLimiter>,
    /// Whether Signature Version 2 requests are accepted (S3 refuses them for new buckets).
    pub(crate) allow_sigv2: bool,
    pub(crate) timeouts: Timeouts,
    /// Connections open now (kept by the accept loop).
    pub(crate) open_connections: std::sync::atomic::AtomicUsize,
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
        Box::pin(self.clone().handle(req))
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
        if let Some(latency) = &shared.latency {
            tokio::time::sleep(latency.sample(shared.rng.next_u64())).await;
        }
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
        if let Some(what) =
            crate::fidelity::unrouted(req.uri().query().unwrap_or(""), req.headers())
        {
            let message = format!(
                "{what} is not implemented by bucketload serve; the request changed nothing"
            );
            return Ok(drain_then_explain(req, 501, Some("NotImplemented"), &message, head).await);
        }
        let response = shared
            .s3
            .call(req.map(s3s::Body::http_body))
            .await
            .map_err(BoxError::from)?;
        match fault {
            Some(kind) => self.cut(response, kind, head),
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
