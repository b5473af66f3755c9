//! Counting HTTP attempts below object_store's retry loop.
//!
//! object_store retries failed requests inside its own futures, invisible to
//! an `ObjectStore` wrapper. [`MeteredConnector`] wraps the default reqwest
//! connector so every HTTP attempt passes through [`MeteredService`], which
//! counts it globally and in the [`Attempts`] of the logical request being
//! polled (a Tokio task-local set by [`crate::metered::MeteredStore`]).
//!
//! object_store sends a retry as an exact clone of the failed request (same
//! URI, Range and signature), so within one logical request an attempt whose
//! fingerprint was already seen is a retry; distinct fingerprints are the
//! pages of a LIST or the batches of a bulk DELETE.
//!
//! For an S3 Express directory bucket the service also signs each attempt with the bucket's
//! session (see [`crate::express`]), after its fingerprint is taken: object_store sends these
//! requests unsigned, so its retries stay identical.

use crate::StoreConfig;
use crate::express::{ControlPlane, Express, NoSession};
use crate::metrics::Metrics;
use crate::pacing::{CONNECT_GRACE, Link};
use async_trait::async_trait;
use http_body_util::BodyExt;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector as HyperHttpConnector;
use hyper_util::rt::TokioExecutor;
use object_store::ClientOptions;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpRequestBody,
    HttpResponse, HttpResponseBody, HttpService, ReqwestConnector,
};
use std::collections::HashSet;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

tokio::task_local! {
    /// The attempts of the logical request currently being polled.
    pub(crate) static ATTEMPTS: Arc<Attempts>;
}

tokio::task_local! {
    /// HTTP attempts made while creating one multipart upload: more than one means the store
    /// may have made an upload whose answer was lost (see [`crate::MultipartWriter`]).
    pub(crate) static CREATE_ATTEMPTS: Arc<AtomicU64>;
}

/// HTTP attempts seen while polling one logical request.
#[derive(Debug, Default)]
pub(crate) struct Attempts {
    total: AtomicU64,
    distinct: Mutex<HashSet<u64>>,
}

impl Attempts {
    fn record(&self, fingerprint: u64) {
        self.total.fetch_add(1, Ordering::Relaxed);
        self.distinct
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(fingerprint);
    }

    /// All attempts.
    pub(crate) fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Attempts that repeated an earlier request of the same logical request.
    pub(crate) fn repeats(&self) -> u64 {
        let distinct = self
            .distinct
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len() as u64;
        self.total().saturating_sub(distinct)
    }
}

/// Identifies a request: method, URI and the headers that differ between
/// distinct requests to the same URI (range, signature, body digest).
fn fingerprint(req: &HttpRequest) -> u64 {
    let mut h = DefaultHasher::new();
    req.method().hash(&mut h);
    req.uri().hash(&mut h);
    for name in ["range", "authorization", "content-length", "content-md5"] {
        req.headers().get(name).map(|v| v.as_bytes()).hash(&mut h);
    }
    h.finish()
}

/// An [`HttpConnector`] that counts every attempt into [`Metrics`] and paces it by the
/// store's [`Link`].
#[derive(Debug)]
pub(crate) struct MeteredConnector {
    metrics: Metrics,
    link: Arc<Link>,
    express: Option<Arc<Express>>,
}

impl MeteredConnector {
    pub(crate) fn new(metrics: Metrics, link: Arc<Link>) -> Self {
        MeteredConnector {
            metrics,
            link,
            express: None,
        }
    }

    /// Signs every request (but [`ControlPlane`] ones) with the sessions of `express`'s
    /// directory bucket.
    pub(crate) fn with_express(mut self, express: Option<Arc<Express>>) -> Self {
        self.express = express;
        self
    }
}

impl MeteredConnector {
    /// A client that sends every request's URI exactly as given, for the objects of one exact
    /// key ([`crate::Store::exact_key`]): reqwest parses URIs with `url`, which resolves `.`
    /// and `..` segments and their `%2E` escapes, so it sends `a/../b` as `b`. hyper sends
    /// the path as it is. Counted and paced like the store's other requests; the connect
    /// timeout, idle connections kept and the 30 s request timeout are the store's, and
    /// certificates are checked against the platform's roots as reqwest checks them.
    /// Proxies (`HTTPS_PROXY`, …) are not used on this path.
    pub(crate) fn connect_exact(&self, config: &StoreConfig) -> Result<HttpClient, String> {
        Ok(HttpClient::new(MeteredService {
            client: HttpClient::new(ExactUriService::new(config)?),
            metrics: self.metrics.clone(),
            link: Arc::clone(&self.link),
            express: self.express.clone(),
        }))
    }
}

impl HttpConnector for MeteredConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let client = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(MeteredService {
            client,
            metrics: self.metrics.clone(),
            link: Arc::clone(&self.link),
            express: self.express.clone(),
        }))
    }
}

/// The counting [`HttpService`].
#[derive(Debug, Clone)]
struct MeteredService {
    client: HttpClient,
    metrics: Metrics,
    link: Arc<Link>,
    /// The directory bucket whose sessions sign every request, if any.
    express: Option<Arc<Express>>,
}

/// A refused connection to an endpoint that has never answered, past [`CONNECT_GRACE`]: not
/// worth retrying (see [`crate::pacing`]).
#[derive(Debug, thiserror::Error)]
#[error("no answer since the first attempt {}s ago", CONNECT_GRACE.as_secs())]
pub(crate) struct NeverAnswered(#[source] pub(crate) HttpError);

#[async_trait]
impl HttpService for MeteredService {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        self.metrics.http_attempt();
        let fp = fingerprint(&req);
        // Outside any logical request (e.g. a credential refresh) there is
        // nothing to attribute the attempt to; it still counts globally.
        let _ = ATTEMPTS.try_with(|a| a.record(fp));
        let _ = CREATE_ATTEMPTS.try_with(|c| c.fetch_add(1, Ordering::Relaxed));
        tracing::trace!(method = %req.method(), uri = %req.uri(), "http attempt");
        match &self.express {
            Some(express) if req.extensions().get::<ControlPlane>().is_none() => {
                self.call_in_session(express, req, fp).await
            }
            _ => self.send(req).await,
        }
    }
}

impl MeteredService {
    /// Sends `req` signed with the directory bucket's session; once more with a new session
    /// if the bucket answers that the session expired.
    async fn call_in_session(
        &self,
        express: &Arc<Express>,
        req: HttpRequest,
        fp: u64,
    ) -> Result<HttpResponse, HttpError> {
        let payload = express.payload_sha256(&req).await?;
        if crate::express::is_copy(&req) {
            return self
                .send(express.sign_without_session(req, &payload).await?)
                .await;
        }
        let held = match self.session(express).await? {
            Ok(held) => held,
            Err(answer) => return Ok(answer),
        };
        let response = self
            .send(express.sign(req.clone(), &held, &payload)?)
            .await?;
        if response.status() != http::StatusCode::BAD_REQUEST {
            return Ok(response);
        }
        let (parts, body) = response.into_parts();
        let body = body.bytes().await?;
        if !crate::express::is_stale(req.method(), &parts.headers, &body) {
            return Ok(HttpResponse::from_parts(parts, body.into()));
        }
        tracing::debug!(
            bucket = express.bucket(),
            "session expired; opening another"
        );
        express.expired(&held);
        let held = match self.session(express).await? {
            Ok(held) => held,
            Err(answer) => return Ok(answer),
        };
        // The same request again: a retry of this logical request.
        self.metrics.http_attempt();
        let _ = ATTEMPTS.try_with(|a| a.record(fp));
        self.send(express.sign(req, &held, &payload)?).await
    }

    /// The session to sign with, or the answer to give back instead (CreateSession's own,
    /// e.g. no such bucket).
    async fn session(
        &self,
        express: &Arc<Express>,
    ) -> Result<Result<crate::express::Held, HttpResponse>, HttpError> {
        // Owned: the fetch runs as a task of its own (see `crate::express`).
        let service = self.clone();
        let send = move |request: HttpRequest| {
            let service = service.clone();
            async move {
                service.metrics.http_attempt();
                tracing::trace!(uri = %request.uri(), "create session");
                service.send(request).await
            }
        };
        match express.session(send).await {
            Ok(held) => Ok(Ok(held)),
            Err(NoSession::Answer(answer)) => Ok(Err(answer)),
            Err(NoSession::Error(e)) => Err(e),
        }
    }

    /// Sends one attempt, paced by the link.
    async fn send(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        self.link.pace().await;
        match self.client.execute(req).await {
            Ok(response) => {
                let status = response.status().as_u16();
                self.link.answered(status == 503 || status == 429);
                Ok(response)
            }
            // object_store retries connection errors; `Unknown` it does not.
            Err(e) if e.kind() == HttpErrorKind::Connect && self.link.give_up_connecting() => {
                Err(HttpError::new(HttpErrorKind::Unknown, NeverAnswered(e)))
            }
            Err(e) => Err(e),
        }
    }
}

/// The whole of one request, answer included, as object_store's default `timeout`.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

type HyperClient = Client<HttpsConnector<HyperHttpConnector>, HttpRequestBody>;

/// An [`HttpService`] on hyper that sends the request's URI as it is (see
/// [`MeteredConnector::connect_exact`]).
#[derive(Debug)]
struct ExactUriService {
    client: HyperClient,
}

impl ExactUriService {
    fn new(config: &StoreConfig) -> Result<ExactUriService, String> {
        use rustls_platform_verifier::ConfigVerifierExt;
        let tls = rustls::ClientConfig::with_platform_verifier()
            .map_err(|e| format!("cannot load the platform's certificates: {e}"))?;
        let mut http = HyperHttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.connect_timeout()));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(config.concurrency().max(1))
            .build(https);
        Ok(ExactUriService { client })
    }
}

#[async_trait]
impl HttpService for ExactUriService {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let exchange = async {
            let response = self.client.request(req).await.map_err(|e| {
                let kind = if e.is_connect() {
                    HttpErrorKind::Connect
                } else {
                    HttpErrorKind::Request
                };
                HttpError::new(kind, e)
            })?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| HttpError::new(HttpErrorKind::Interrupted, e))?
                .to_bytes();
            Ok(HttpResponse::from_parts(
                parts,
                HttpResponseBody::from(body),
            ))
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
            Ok(answer) => answer,
            Err(elapsed) => Err(HttpError::new(HttpErrorKind::Timeout, elapsed)),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn identical_requests_are_repeats() {
        let req = |uri: &str| {
            http::Request::builder()
                .uri(uri)
                .body(object_store::client::HttpRequestBody::empty())
                .unwrap()
        };
        let a = Attempts::default();
        a.record(fingerprint(&req("http://h/b/k")));
        a.record(fingerprint(&req("http://h/b/k")));
        a.record(fingerprint(&req("http://h/b/k?continuation-token=x")));
        assert_eq!((a.total(), a.repeats()), (3, 1));
    }
}
