//! S3 Express One Zone directory buckets (`base--zone-id--x-s3`): their endpoints and the
//! session credentials every request to them is signed with.
//!
//! A directory bucket answers a request only when it is signed (service `s3express`) with
//! the temporary credentials of a session, which CreateSession (`GET /?session` on the
//! bucket, signed with the ordinary credentials) gives for five minutes, the token going in
//! `x-amz-s3session-token`. object_store's own support always sends CreateSession to AWS,
//! whatever the endpoint, so bucketload builds object_store unsigned for these buckets and
//! signs every HTTP attempt in [`crate::http::MeteredService`], below object_store's retry
//! loop and after the attempt's fingerprint is taken (a retry stays a retry):
//!
//! - [`Express`] describes one store's bucket: where CreateSession goes, the region, the base
//!   credentials (the store's provider: environment, profile, STS…) and whether payloads are
//!   signed.
//! - Sessions live in one process-wide cache keyed by (endpoint, bucket, access key id), so
//!   every store and every request of the process, object_store's and bucketload's own signed
//!   requests alike, share one session per bucket. A fetch is single-flight and runs as a
//!   task of its own: tasks that need a session meanwhile wait for its outcome, and none of
//!   them, the one that started it included, has to be polled for it to finish. A session is fetched again when
//!   less than [`REFRESH_BEFORE`] (or a fifth of its life, for short sessions) is left, and at
//!   once when the bucket answers `ExpiredToken` (or `InvalidToken`: a server that forgot it);
//!   the refused request is then sent once more.
//! - CreateBucket is a control-plane request, signed with the ordinary credentials and no
//!   session: its request carries [`ControlPlane`] and is sent as it is. CopyObject and
//!   UploadPartCopy are signed with the ordinary credentials too, as S3 requires of them on
//!   directory buckets ([`is_copy`]).
//!
//! A CreateSession refused for the credentials fails the request with [`SessionError`], which
//! names the bucket and the permission (`s3express:CreateSession`) and maps to
//! [`Error::PermissionDenied`](crate::Error::PermissionDenied). Other answers (no such bucket,
//! a server error) are given back as the request's own answer, so callers see them as they
//! would any answer, and object_store retries a 5xx as usual (fetching the session again).

use crate::config::Credentials;
use crate::sigv4::{self, SignParams, TokenHeader};
use chrono::{DateTime, Utc};
use http::{HeaderMap, Method, StatusCode};
use http_body_util::BodyExt;
use object_store::aws::AwsCredentialProvider;
use object_store::client::{HttpError, HttpErrorKind, HttpRequest, HttpRequestBody, HttpResponse};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// The suffix every directory bucket's name ends in.
const SUFFIX: &str = "--x-s3";

/// A session is fetched again when less than this is left of it: S3 Express sessions last five
/// minutes, and the SDKs refresh them a minute early so that a request signed just before is
/// not refused.
pub(crate) const REFRESH_BEFORE: Duration = Duration::from_secs(60);

/// The S3 error codes of a request signed with a session that has expired, or that the
/// server no longer knows (the embedded server forgets its sessions when it restarts): either
/// way a new session is opened and the request sent once more.
const STALE: [&str; 2] = ["ExpiredToken", "InvalidToken"];

/// S3 error codes (with 400) that refuse the credentials CreateSession was signed with.
const REFUSALS: [&str; 6] = [
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
    "InvalidSecurity",
];

/// The zone ID in a directory bucket's name (`use1-az4` in `train--use1-az4--x-s3`): a base
/// name, `--`, a zone ID of lowercase letters, digits and `-`, then `--x-s3`. The embedded
/// server recognises the same names.
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

/// The zonal endpoint of a directory bucket on AWS, virtual-hosted (S3 Express takes no
/// path-style requests there).
pub(crate) fn zonal_endpoint(bucket: &str, zone: &str, region: &str) -> String {
    format!("https://{bucket}.s3express-{zone}.{region}.amazonaws.com")
}

/// The regional control-plane endpoint of S3 Express on AWS (CreateBucket, DeleteBucket),
/// path-style.
pub(crate) fn control_endpoint(region: &str) -> String {
    format!("https://s3express-control.{region}.amazonaws.com")
}

/// Marks a request to a directory bucket that is signed with the ordinary credentials and no
/// session (CreateBucket): [`crate::http::MeteredService`] sends it as it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ControlPlane;

/// CreateSession failed; the request it was for was not sent.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot open a session on directory bucket `{bucket}` (s3express:CreateSession): {reason}")]
pub(crate) struct SessionError {
    bucket: String,
    reason: String,
    /// The store refused the credentials (rather than failing to answer).
    refused: bool,
}

impl SessionError {
    /// Whether the store refused the credentials or their permission.
    pub(crate) fn is_refusal(&self) -> bool {
        self.refused
    }
}

/// The [`SessionError`] in `err`'s chain, if that is why it failed.
pub(crate) fn session_error<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a SessionError> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if let Some(found) = e.downcast_ref::<SessionError>() {
            return Some(found);
        }
        cause = e.source();
    }
    None
}

/// Why no session is at hand for a request.
#[derive(Debug)]
pub(crate) enum NoSession {
    /// The store's answer to CreateSession, to give back as the request's own (no such bucket,
    /// a server error, throttling).
    Answer(HttpResponse),
    /// CreateSession could not be sent, or was refused.
    Error(HttpError),
}

/// The credentials of one session and how long to use them.
#[derive(Debug)]
pub(crate) struct Session {
    credentials: Credentials,
    expires: Instant,
    /// Fetched again when less than this is left.
    margin: Duration,
}

impl Session {
    /// A session valid for `life` from now: used until [`REFRESH_BEFORE`] or a fifth of its
    /// life, whichever is less, is left (a server with short sessions would otherwise be
    /// asked for a new one at every request).
    fn new(credentials: Credentials, life: Duration) -> Session {
        Session {
            credentials,
            expires: Instant::now() + life,
            margin: REFRESH_BEFORE.min(life / 5),
        }
    }

    fn is_fresh(&self, now: Instant) -> bool {
        self.expires.saturating_duration_since(now) > self.margin
    }
}

/// Why a fetch gave no session, shareable with every task that waited for it.
#[derive(Debug, Clone)]
enum Failed {
    /// CreateSession's own answer (no such bucket, a server error, throttling).
    Answer {
        status: StatusCode,
        headers: Box<HeaderMap>,
        body: bytes::Bytes,
    },
    /// CreateSession could not be sent, or was refused.
    Error(HttpErrorKind, SessionError),
}

impl From<Failed> for NoSession {
    fn from(failed: Failed) -> NoSession {
        match failed {
            Failed::Answer {
                status,
                headers,
                body,
            } => {
                let mut response = http::Response::new(body);
                *response.status_mut() = status;
                *response.headers_mut() = *headers;
                let (parts, body) = response.into_parts();
                NoSession::Answer(HttpResponse::from_parts(parts, body.into()))
            }
            Failed::Error(kind, error) => NoSession::Error(HttpError::new(kind, error)),
        }
    }
}

/// What the tasks waiting for a fetch see: nothing yet, then its outcome.
type Outcome = Option<Result<Arc<Session>, Failed>>;

/// One bucket's session in the process-wide cache, and the fetch of its next one if any.
#[derive(Debug, Default)]
struct SlotState {
    session: Option<Arc<Session>>,
    fetch: Option<tokio::sync::watch::Receiver<Outcome>>,
}

/// One bucket's session in the process-wide cache.
///
/// A fresh session is taken under a plain lock, never awaited. A fetch runs as a task of its
/// own, and the tasks that need the session meanwhile wait on a watch channel for its outcome:
/// no task holds a turn that others queue behind. A task left unpolled (a loader's fetch stage
/// is polled only while its consumer asks for a batch) therefore delays nobody, whether it
/// started the fetch or was waiting for one.
#[derive(Debug, Default)]
struct Slot {
    state: Mutex<SlotState>,
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fresh(state: &SlotState) -> Option<Arc<Session>> {
        state
            .session
            .as_ref()
            .filter(|s| s.is_fresh(Instant::now()))
            .map(Arc::clone)
    }

    /// The cached session if fresh, else the outcome of the fetch under way, else of one
    /// `fetch` starts. Every task that asks while a fetch is under way gets its outcome, a
    /// failure included (the next request after it starts another fetch).
    async fn get<Fut>(self: &Arc<Self>, fetch: impl Fn() -> Fut) -> Result<Arc<Session>, Failed>
    where
        Fut: Future<Output = Result<Session, Failed>> + Send + 'static,
    {
        loop {
            let runtime = tokio::runtime::Handle::try_current();
            let under_way = {
                let mut state = self.lock();
                if let Some(s) = Self::fresh(&state) {
                    return Ok(s);
                }
                match (&state.fetch, &runtime) {
                    (Some(under_way), _) => Some(under_way.clone()),
                    // No runtime to run the fetch on: this task fetches for itself.
                    (None, Err(_)) => None,
                    (None, Ok(runtime)) => {
                        let (tell, outcome) = tokio::sync::watch::channel(None);
                        state.fetch = Some(outcome.clone());
                        let (slot, fetched) = (Arc::clone(self), fetch());
                        runtime.spawn(async move {
                            let outcome = slot.finish(fetched.await);
                            slot.lock().fetch = None;
                            let _ = tell.send(Some(outcome));
                        });
                        Some(outcome)
                    }
                }
            };
            let Some(mut outcome) = under_way else {
                return self.finish(fetch().await);
            };
            let waited = outcome
                .wait_for(Option::is_some)
                .await
                .map(|done| done.clone());
            match waited {
                Ok(Some(done)) => return done,
                Ok(None) | Err(_) => {
                    // The fetch's task ended without an outcome: its runtime shut down (a
                    // runtime of one call, from Python). Forget it and fetch again.
                    let mut state = self.lock();
                    if state
                        .fetch
                        .as_ref()
                        .is_some_and(|f| f.same_channel(&outcome))
                    {
                        state.fetch = None;
                    }
                }
            }
        }
    }

    /// Caches a fetched session.
    fn finish(&self, fetched: Result<Session, Failed>) -> Result<Arc<Session>, Failed> {
        let fresh = Arc::new(fetched?);
        self.lock().session = Some(Arc::clone(&fresh));
        Ok(fresh)
    }

    /// Forgets `stale` (refused as expired), unless another task has replaced it already.
    fn expired(&self, stale: &Arc<Session>) {
        let mut state = self.lock();
        if state
            .session
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, stale))
        {
            state.session = None;
        }
    }
}

/// (URL of CreateSession, bucket, access key id of the base credentials). The key id goes
/// with a digest of its secret, so that credentials with a wrong secret open their own
/// session (and are refused) rather than using one opened with the right secret.
type SlotKey = (String, String, String);

/// The session slot of `key`, shared by the whole process.
fn slot(key: SlotKey) -> Arc<Slot> {
    static SLOTS: OnceLock<Mutex<HashMap<SlotKey, Arc<Slot>>>> = OnceLock::new();
    let mut slots = SLOTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    Arc::clone(slots.entry(key).or_default())
}

/// A session and the cache slot it came from.
#[derive(Debug)]
pub(crate) struct Held {
    slot: Arc<Slot>,
    session: Arc<Session>,
}

/// One store's directory bucket: how to open sessions on it and sign its requests.
#[derive(Debug)]
pub(crate) struct Express {
    bucket: String,
    /// The URL of CreateSession: the bucket's URL with `?session`.
    session_url: http::Uri,
    region: String,
    sign_payload: bool,
    credentials: AwsCredentialProvider,
}

impl Express {
    /// `bucket` reached at `bucket_url` (path-style `http://host/bucket` or virtual-hosted
    /// `https://bucket.host/`), sessions opened with `credentials`.
    pub(crate) fn new(
        bucket: &str,
        bucket_url: &str,
        region: &str,
        sign_payload: bool,
        credentials: AwsCredentialProvider,
    ) -> Result<Express, String> {
        let url = format!("{bucket_url}?session");
        let session_url = url
            .parse()
            .map_err(|e| format!("bad endpoint `{bucket_url}`: {e}"))?;
        Ok(Express {
            bucket: bucket.to_owned(),
            session_url,
            region: region.to_owned(),
            sign_payload,
            credentials,
        })
    }

    /// The directory bucket's name.
    pub(crate) fn bucket(&self) -> &str {
        &self.bucket
    }

    fn failure(&self, reason: String, refused: bool) -> SessionError {
        SessionError {
            bucket: self.bucket.clone(),
            reason,
            refused,
        }
    }

    fn error(&self, kind: HttpErrorKind, reason: String, refused: bool) -> HttpError {
        HttpError::new(kind, self.failure(reason, refused))
    }

    /// The session to sign a request with: the cached one, or one CreateSession (sent with
    /// `send`) opens.
    pub(crate) async fn session<F, Fut>(self: &Arc<Self>, send: F) -> Result<Held, NoSession>
    where
        F: Fn(HttpRequest) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<HttpResponse, HttpError>> + Send,
    {
        let base = self.credentials.get_credential().await.map_err(|e| {
            // Keeps the credential source's own error in the chain (see `crate::error`).
            NoSession::Error(HttpError::new(HttpErrorKind::Unknown, e))
        })?;
        let secret_digest = sigv4::sha256_hex(base.secret_key.as_bytes());
        let key = (
            self.session_url.to_string(),
            self.bucket.clone(),
            format!("{} {secret_digest}", base.key_id),
        );
        let base = Credentials {
            key: base.key_id.clone(),
            secret: base.secret_key.clone(),
            token: base.token.clone(),
        };
        let slot = slot(key);
        let fetch = || {
            let (express, base, send) = (Arc::clone(self), base.clone(), send.clone());
            async move { express.create_session(&base, send).await }
        };
        let session = slot.get(fetch).await?;
        Ok(Held { slot, session })
    }

    /// Forgets `held`'s session, which the bucket refused as expired: the next request opens
    /// another.
    pub(crate) fn expired(&self, held: &Held) {
        held.slot.expired(&held.session);
    }

    /// CreateSession, signed with `base`.
    async fn create_session<F, Fut>(&self, base: &Credentials, send: F) -> Result<Session, Failed>
    where
        F: FnOnce(HttpRequest) -> Fut,
        Fut: Future<Output = Result<HttpResponse, HttpError>>,
    {
        let invalid = |e: String| Failed::Error(HttpErrorKind::Unknown, self.failure(e, false));
        let mut headers = HeaderMap::new();
        let params = SignParams {
            method: &Method::GET,
            url: &self.session_url,
            payload_sha256: &sigv4::sha256_hex(b""),
            region: &self.region,
            service: "s3express",
            now: Utc::now(),
        };
        sigv4::sign(&mut headers, &params, base)
            .map_err(|e| invalid(format!("the credentials contain invalid characters: {e}")))?;
        let mut request = http::Request::builder()
            .method(Method::GET)
            .uri(self.session_url.clone())
            .body(HttpRequestBody::empty())
            .map_err(|e| invalid(e.to_string()))?;
        *request.headers_mut() = headers;
        let sent = Instant::now();
        let failed = |e: HttpError| {
            Failed::Error(e.kind(), self.failure(crate::error::chain_text(&e), false))
        };
        let response = send(request).await.map_err(failed)?;
        let (parts, body) = response.into_parts();
        let body = body.bytes().await.map_err(failed)?;
        let status = parts.status;
        if !status.is_success() {
            let (code, message) = error_code(&body);
            let refused = matches!(status, StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED)
                || (status == StatusCode::BAD_REQUEST
                    && code.as_deref().is_some_and(|c| REFUSALS.contains(&c)));
            if refused {
                let reason = match (code, message) {
                    (Some(code), Some(message)) => format!("{code}: {message}"),
                    (Some(code), None) => code,
                    _ => status.to_string(),
                };
                return Err(Failed::Error(
                    HttpErrorKind::Unknown,
                    self.failure(reason, true),
                ));
            }
            return Err(Failed::Answer {
                status,
                headers: Box::new(parts.headers),
                body,
            });
        }
        let date = parts
            .headers
            .get(http::header::DATE)
            .and_then(|d| d.to_str().ok())
            .and_then(|d| DateTime::parse_from_rfc2822(d).ok())
            .map(|d| d.with_timezone(&Utc));
        let (credentials, expiration) = parse_session(&body).map_err(invalid)?;
        let life = session_life(expiration, date, Utc::now()).saturating_sub(sent.elapsed());
        tracing::debug!(bucket = %self.bucket, ?life, "S3 Express session opened");
        Ok(Session::new(credentials, life))
    }

    /// The `x-amz-content-sha256` of `request`: as given, else its body's SHA-256 when
    /// payloads are signed, else `UNSIGNED-PAYLOAD`.
    pub(crate) async fn payload_sha256(&self, request: &HttpRequest) -> Result<String, HttpError> {
        if let Some(given) = request
            .headers()
            .get("x-amz-content-sha256")
            .and_then(|v| v.to_str().ok())
        {
            return Ok(given.to_owned());
        }
        if !self.sign_payload {
            return Ok("UNSIGNED-PAYLOAD".to_owned());
        }
        if let Some(bytes) = request.body().as_bytes() {
            return Ok(sigv4::sha256_hex(bytes));
        }
        // Chunks of a `PutPayload`, hashed as they are: cloning the body clones handles only.
        let mut hasher = Sha256::new();
        let mut body = request.body().clone();
        while let Some(frame) = body.frame().await {
            if let Some(data) = frame?.data_ref() {
                hasher.update(data);
            }
        }
        Ok(hex::encode(hasher.finalize()))
    }

    /// `request` signed with the ordinary credentials and no session, for the requests S3
    /// authorizes with IAM credentials instead of a session: CopyObject and UploadPartCopy
    /// ([`is_copy`]).
    pub(crate) async fn sign_without_session(
        &self,
        request: HttpRequest,
        payload_sha256: &str,
    ) -> Result<HttpRequest, HttpError> {
        let base = self
            .credentials
            .get_credential()
            .await
            .map_err(|e| HttpError::new(HttpErrorKind::Unknown, e))?;
        let base = Credentials {
            key: base.key_id.clone(),
            secret: base.secret_key.clone(),
            token: base.token.clone(),
        };
        self.signed(request, payload_sha256, &base, TokenHeader::Security)
            .map_err(|e| format!("the credentials contain invalid characters: {e}"))
            .map_err(|reason| self.error(HttpErrorKind::Unknown, reason, false))
    }

    /// `request` signed with `session`: any signature it carried is replaced.
    pub(crate) fn sign(
        &self,
        request: HttpRequest,
        held: &Held,
        payload_sha256: &str,
    ) -> Result<HttpRequest, HttpError> {
        self.signed(
            request,
            payload_sha256,
            &held.session.credentials,
            TokenHeader::S3Session,
        )
        .map_err(|e| format!("the session's credentials contain invalid characters: {e}"))
        .map_err(|reason| self.error(HttpErrorKind::Unknown, reason, false))
    }

    /// `request` with whatever signature it carried replaced by one with `credentials`, for
    /// the service `s3express`, their token (if any) in `token`.
    fn signed(
        &self,
        mut request: HttpRequest,
        payload_sha256: &str,
        credentials: &Credentials,
        token: TokenHeader,
    ) -> Result<HttpRequest, http::header::InvalidHeaderValue> {
        strip_signature(&mut request);
        let (method, url) = (request.method().clone(), request.uri().clone());
        let params = SignParams {
            method: &method,
            url: &url,
            payload_sha256,
            region: &self.region,
            service: "s3express",
            now: Utc::now(),
        };
        sigv4::sign_with(request.headers_mut(), &params, credentials, token)?;
        Ok(request)
    }
}

/// Removes whatever signature `request` carried.
fn strip_signature(request: &mut HttpRequest) {
    for name in [
        "authorization",
        "x-amz-date",
        "x-amz-security-token",
        "x-amz-s3session-token",
        "x-amz-content-sha256",
        "host",
    ] {
        request.headers_mut().remove(name);
    }
}

/// Whether `request` is a CopyObject or UploadPartCopy, which S3 authorizes with the ordinary
/// (IAM) credentials on a directory bucket, not with a session.
pub(crate) fn is_copy(request: &HttpRequest) -> bool {
    request.method() == Method::PUT && request.headers().contains_key("x-amz-copy-source")
}

/// How long a session whose credentials expire at `expiration` is valid from now: measured on
/// the server's clock when its `Date` differs from ours by more than a few seconds (a skewed
/// local clock would otherwise see every session expired, or never).
fn session_life(
    expiration: DateTime<Utc>,
    server_date: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Duration {
    // `Date` has whole seconds; within this the local clock is the better reference.
    const SKEW: chrono::TimeDelta = chrono::TimeDelta::seconds(5);
    let reference = match server_date {
        Some(date) if (date - now).abs() > SKEW => date,
        _ => now,
    };
    (expiration - reference).to_std().unwrap_or_default()
}

/// Whether a 400 answer says the session is stale: S3's `ExpiredToken`, or `InvalidToken`, in
/// the body or the `x-amz-error-code` header. An answer to HEAD has no body to say it: a 400
/// without a code is taken as stale then (a HEAD bucketload sends is rarely a bad request
/// otherwise), which costs one more CreateSession and attempt if it was not.
pub(crate) fn is_stale(method: &Method, headers: &HeaderMap, body: &[u8]) -> bool {
    let code = headers
        .get("x-amz-error-code")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| error_code(body).0);
    match code {
        Some(code) => STALE.contains(&code.as_str()),
        None => *method == Method::HEAD && body.is_empty(),
    }
}

#[cfg(test)]
fn is_expired(body: &[u8]) -> bool {
    is_stale(&Method::GET, &HeaderMap::new(), body)
}

/// `<Code>` and `<Message>` of an S3 XML error body.
fn error_code(body: &[u8]) -> (Option<String>, Option<String>) {
    let text = String::from_utf8_lossy(body);
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let close = format!("</{name}>");
        let start = text.find(&open)? + open.len();
        let end = text[start..].find(&close)? + start;
        Some(text[start..end].trim().trim_end_matches('.').to_owned())
    };
    (tag("Code"), tag("Message"))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CreateSessionResult {
    credentials: SessionCredentials,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SessionCredentials {
    session_token: String,
    secret_access_key: String,
    access_key_id: String,
    expiration: String,
}

/// The credentials and expiry in a CreateSession answer.
fn parse_session(body: &[u8]) -> Result<(Credentials, DateTime<Utc>), String> {
    let text = String::from_utf8_lossy(body);
    let result: CreateSessionResult = quick_xml::de::from_str(&text)
        .map_err(|e| format!("the answer is not a CreateSession result: {e}"))?;
    let c = result.credentials;
    let expiration = DateTime::parse_from_rfc3339(&c.expiration)
        .map_err(|e| {
            format!(
                "the session's expiration `{}` is not a date: {e}",
                c.expiration
            )
        })?
        .with_timezone(&Utc);
    let credentials = Credentials {
        key: c.access_key_id,
        secret: c.secret_access_key,
        token: Some(c.session_token),
    };
    Ok((credentials, expiration))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn directory_bucket_names() {
        assert_eq!(zone_of("train--use1-az4--x-s3"), Some("use1-az4"));
        assert_eq!(zone_of("a--usw2-lax1-az1--x-s3"), Some("usw2-lax1-az1"));
        assert_eq!(zone_of("my--bucket--use1-az4--x-s3"), Some("use1-az4"));
        for name in [
            "train",
            "train--x-s3",
            "--use1-az4--x-s3",
            "t--USE1--x-s3",
            "t--use1-az4",
        ] {
            assert_eq!(zone_of(name), None, "{name}");
        }
        assert_eq!(
            zonal_endpoint("b--use1-az4--x-s3", "use1-az4", "us-east-1"),
            "https://b--use1-az4--x-s3.s3express-use1-az4.us-east-1.amazonaws.com"
        );
    }

    #[test]
    fn create_session_answers_parse() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<CreateSessionResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Credentials>
    <SessionToken>tok/en+=</SessionToken>
    <SecretAccessKey>secret</SecretAccessKey>
    <AccessKeyId>ASIAKEY</AccessKeyId>
    <Expiration>2026-12-07T02:05:00Z</Expiration>
  </Credentials>
</CreateSessionResult>"#;
        let (c, expiration) = parse_session(xml.as_bytes()).unwrap();
        assert_eq!(
            (c.key.as_str(), c.secret.as_str(), c.token.as_deref()),
            ("ASIAKEY", "secret", Some("tok/en+="))
        );
        assert_eq!(
            expiration,
            Utc.with_ymd_and_hms(2026, 12, 7, 2, 5, 0).unwrap()
        );
        assert!(parse_session(b"<Error><Code>AccessDenied</Code></Error>").is_err());
    }

    #[test]
    fn expired_tokens_are_recognised_by_their_code() {
        let body = b"<?xml version=\"1.0\"?><Error><Code>ExpiredToken</Code>\
                     <Message>The provided token has expired.</Message></Error>";
        assert!(is_expired(body));
        assert!(is_expired(b"<Error><Code>InvalidToken</Code></Error>"));
        assert!(!is_expired(b"<Error><Code>AccessDenied</Code></Error>"));
        assert!(!is_expired(
            b"<Error><Code>InvalidArgument</Code><Message>ExpiredToken</Message></Error>"
        ));
        let none = HeaderMap::new();
        assert!(is_stale(&Method::HEAD, &none, b""));
        assert!(!is_stale(&Method::GET, &none, b""));
        let mut coded = HeaderMap::new();
        coded.insert("x-amz-error-code", "ExpiredToken".parse().unwrap());
        assert!(is_stale(&Method::GET, &coded, b""));
        coded.insert("x-amz-error-code", "InvalidArgument".parse().unwrap());
        assert!(!is_stale(&Method::HEAD, &coded, b""));
        let (code, message) = error_code(body);
        assert_eq!(code.as_deref(), Some("ExpiredToken"));
        assert_eq!(message.as_deref(), Some("The provided token has expired"));
    }

    #[test]
    fn session_life_follows_the_server_clock_only_when_skewed() {
        let now = Utc.with_ymd_and_hms(2026, 12, 7, 2, 0, 0).unwrap();
        let expiration = now + chrono::TimeDelta::minutes(5);
        let five = Duration::from_secs(300);
        assert_eq!(session_life(expiration, None, now), five);
        // Within the Date header's whole seconds: our clock.
        let close = now - chrono::TimeDelta::seconds(1);
        assert_eq!(session_life(expiration, Some(close), now), five);
        // Ten minutes ahead of the server: its clock, or every session would look expired.
        let behind = now - chrono::TimeDelta::minutes(10);
        assert_eq!(
            session_life(
                expiration - chrono::TimeDelta::minutes(10),
                Some(behind),
                now
            ),
            five
        );
        assert_eq!(session_life(now, None, expiration), Duration::ZERO);
    }

    #[test]
    fn short_sessions_are_not_refreshed_at_every_request() {
        let creds = || Credentials {
            key: "k".into(),
            secret: "s".into(),
            token: Some("t".into()),
        };
        let five_minutes = Session::new(creds(), Duration::from_secs(300));
        assert_eq!(five_minutes.margin, REFRESH_BEFORE);
        assert!(five_minutes.is_fresh(Instant::now()));
        assert!(!five_minutes.is_fresh(Instant::now() + Duration::from_secs(241)));
        let two_seconds = Session::new(creds(), Duration::from_secs(2));
        assert_eq!(two_seconds.margin, Duration::from_millis(400));
        assert!(two_seconds.is_fresh(Instant::now()));
        assert!(!two_seconds.is_fresh(Instant::now() + Duration::from_millis(1700)));
        assert!(!Session::new(creds(), Duration::ZERO).is_fresh(Instant::now()));
    }

    /// CopyObject and UploadPartCopy go with the ordinary credentials and no session token, as
    /// the AWS SDKs send them to a directory bucket; anything else is not a copy.
    #[tokio::test]
    async fn copies_are_signed_with_the_ordinary_credentials() {
        let provider: AwsCredentialProvider = Arc::new(
            object_store::StaticCredentialProvider::new(object_store::aws::AwsCredential {
                key_id: "AKIDBASE".into(),
                secret_key: "base-secret".into(),
                token: None,
            }),
        );
        let express = Express::new(
            "b--use1-az4--x-s3",
            "http://127.0.0.1:9/b--use1-az4--x-s3",
            "us-east-1",
            false,
            provider,
        )
        .unwrap();
        let request = |copy: bool| {
            let mut r = http::Request::builder()
                .method(Method::PUT)
                .uri("http://127.0.0.1:9/b--use1-az4--x-s3/dst")
                .header("x-amz-s3session-token", "stale")
                .body(HttpRequestBody::empty())
                .unwrap();
            if copy {
                r.headers_mut().insert(
                    "x-amz-copy-source",
                    "/b--use1-az4--x-s3/src".parse().unwrap(),
                );
            }
            r
        };
        assert!(is_copy(&request(true)) && !is_copy(&request(false)));
        let signed = express
            .sign_without_session(request(true), "UNSIGNED-PAYLOAD")
            .await
            .unwrap();
        let auth = signed.headers()["authorization"].to_str().unwrap();
        assert!(
            auth.contains("Credential=AKIDBASE/") && auth.contains("/s3express/aws4_request"),
            "{auth}"
        );
        assert!(!signed.headers().contains_key("x-amz-s3session-token"));
    }

    fn session(life: Duration) -> Session {
        Session::new(
            Credentials {
                key: "k".into(),
                secret: "s".into(),
                token: Some("t".into()),
            },
            life,
        )
    }

    /// A fetch that waits until `gate` opens, counting itself in `fetches`.
    fn gated(
        fetches: &Arc<AtomicU64>,
        gate: &tokio::sync::watch::Receiver<bool>,
    ) -> impl Fn() -> std::pin::Pin<Box<dyn Future<Output = Result<Session, Failed>> + Send>> + use<>
    {
        let (fetches, gate) = (Arc::clone(fetches), gate.clone());
        move || {
            let (fetches, mut gate) = (Arc::clone(&fetches), gate.clone());
            Box::pin(async move {
                fetches.fetch_add(1, Ordering::SeqCst);
                // Held until the test lets go: the tasks asking meanwhile wait for it.
                let _ = gate.wait_for(|open| *open).await;
                Ok(session(Duration::from_secs(300)))
            })
        }
    }

    fn failure() -> Failed {
        let refused = SessionError {
            bucket: "b--use1-az4--x-s3".into(),
            reason: "AccessDenied".into(),
            refused: true,
        };
        Failed::Error(HttpErrorKind::Unknown, refused)
    }

    /// A hang shows as a failure rather than a test that never ends.
    async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(20), f)
            .await
            .unwrap_or_else(|_| panic!("{what}: still waiting after 20 s"))
    }

    /// Many tasks needing a session at once: one fetch, every task gets its session.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_wait_for_one_fetch() {
        let slot = Arc::new(Slot::default());
        let fetches = Arc::new(AtomicU64::new(0));
        let (release, released) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (slot, fetch) = (Arc::clone(&slot), gated(&fetches, &released));
            tasks.push(tokio::spawn(async move { slot.get(fetch).await.unwrap() }));
        }
        while fetches.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        release.send(true).unwrap();
        let mut sessions = Vec::new();
        for task in tasks {
            sessions.push(within("a task", task).await.unwrap());
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        assert!(sessions.iter().all(|s| Arc::ptr_eq(s, &sessions[0])));
    }

    #[tokio::test]
    async fn expired_sessions_are_replaced_once_and_failures_not_cached() {
        let slot = Arc::new(Slot::default());
        let fetches = Arc::new(AtomicU64::new(0));
        let (_open, gate) = tokio::sync::watch::channel(true);
        let fetch = gated(&fetches, &gate);
        let first = slot.get(&fetch).await.unwrap();
        let again = slot.get(&fetch).await.unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        // Two requests meet ExpiredToken with the same session: one new session, not two.
        slot.expired(&first);
        let second = slot.get(&fetch).await.unwrap();
        slot.expired(&first);
        let still = slot.get(&fetch).await.unwrap();
        assert!(Arc::ptr_eq(&second, &still));
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
        // A session about to run out is fetched again before it does.
        let slot = Arc::new(Slot::default());
        let short = slot
            .get(|| async { Ok(session(Duration::ZERO)) })
            .await
            .unwrap();
        let next = slot.get(&fetch).await.unwrap();
        assert!(!Arc::ptr_eq(&short, &next));
        // A failed fetch leaves nothing behind: the next request fetches again.
        let slot = Arc::new(Slot::default());
        assert!(slot.get(|| async { Err(failure()) }).await.is_err());
        assert!(slot.lock().session.is_none() && slot.lock().fetch.is_none());
        assert!(slot.get(&fetch).await.is_ok());
    }

    /// Every task that waited for a failed fetch gets its failure: one CreateSession, not one
    /// per waiting request.
    #[tokio::test]
    async fn a_failed_fetch_fails_every_waiting_task_once() {
        let slot = Arc::new(Slot::default());
        let fetches = Arc::new(AtomicU64::new(0));
        let (release, released) = tokio::sync::watch::channel(false);
        let fetch = {
            let (fetches, released) = (Arc::clone(&fetches), released.clone());
            move || {
                let (fetches, mut released) = (Arc::clone(&fetches), released.clone());
                async move {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    let _ = released.wait_for(|r| *r).await;
                    Err(failure())
                }
            }
        };
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (slot, fetch) = (Arc::clone(&slot), fetch.clone());
            tasks.push(tokio::spawn(async move { slot.get(fetch).await }));
        }
        // One thread: the spawned tasks all run (and wait) before this one goes on.
        while fetches.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        release.send(true).unwrap();
        for task in tasks {
            let failed = within("a task", task).await.unwrap();
            assert!(matches!(failed, Err(Failed::Error(_, ref e)) if e.is_refusal()));
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        assert!(slot.lock().session.is_none());
    }

    /// The task that started a fetch is polled once and then never again (a loader's fetch
    /// stage waits for its consumer, which may be busy with another loader): the fetch still
    /// finishes, and the other tasks of the process get its session.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fetch_finishes_while_the_task_that_started_it_is_never_polled() {
        let slot = Arc::new(Slot::default());
        let fetches = Arc::new(AtomicU64::new(0));
        let (release, released) = tokio::sync::watch::channel(false);
        let fetch = gated(&fetches, &released);
        let mut starter = Box::pin(slot.get(&fetch));
        assert!(futures::poll!(starter.as_mut()).is_pending());
        let other = {
            let (slot, fetch) = (Arc::clone(&slot), gated(&fetches, &released));
            tokio::spawn(async move { slot.get(fetch).await.unwrap() })
        };
        release.send(true).unwrap();
        let got = within("the other task", other).await.unwrap();
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        // The starter, polled at last, has the same session.
        let started = within("the starter", starter).await.unwrap();
        assert!(Arc::ptr_eq(&got, &started));
    }

    /// A task that started waiting for a fetch and is then never polled again holds no turn:
    /// the tasks asking after it get the session as soon as it is fetched.
    #[tokio::test]
    async fn a_waiting_task_never_polled_again_delays_nobody() {
        let slot = Arc::new(Slot::default());
        let fetches = Arc::new(AtomicU64::new(0));
        let (release, released) = tokio::sync::watch::channel(false);
        let starter = {
            let (slot, fetch) = (Arc::clone(&slot), gated(&fetches, &released));
            tokio::spawn(async move { slot.get(fetch).await.unwrap() })
        };
        while fetches.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let fetch = gated(&fetches, &released);
        let mut stalled = Box::pin(slot.get(&fetch));
        assert!(futures::poll!(stalled.as_mut()).is_pending());
        let later = {
            let (slot, fetch) = (Arc::clone(&slot), gated(&fetches, &released));
            tokio::spawn(async move { slot.get(fetch).await.unwrap() })
        };
        // One thread: the later task runs, and starts waiting, before this one goes on.
        tokio::task::yield_now().await;
        release.send(true).unwrap();
        let first = within("the starter", starter).await.unwrap();
        let second = within("the later task", later).await.unwrap();
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        drop(stalled);
    }

    /// A fetch whose runtime shut down before it finished (a runtime of one call, from Python)
    /// is forgotten: the next request, on another runtime, fetches again rather than waiting
    /// for ever.
    #[test]
    fn a_fetch_cut_off_by_its_runtime_is_started_again() {
        let slot = Arc::new(Slot::default());
        let fetches = Arc::new(AtomicU64::new(0));
        let (_never, closed) = tokio::sync::watch::channel(false);
        let first = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        first.block_on(async {
            let fetch = gated(&fetches, &closed);
            let mut get = Box::pin(slot.get(&fetch));
            assert!(futures::poll!(get.as_mut()).is_pending());
            while fetches.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
        });
        drop(first);
        let second = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (_open, open) = tokio::sync::watch::channel(true);
        let got = second.block_on(within("the next request", slot.get(gated(&fetches, &open))));
        assert!(got.is_ok());
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn the_cache_is_shared_by_endpoint_bucket_and_key() {
        let key = |k: &str| {
            (
                "http://h/b?session".to_owned(),
                "b".to_owned(),
                k.to_owned(),
            )
        };
        assert!(Arc::ptr_eq(&slot(key("A")), &slot(key("A"))));
        assert!(!Arc::ptr_eq(&slot(key("A")), &slot(key("B"))));
    }
}
