//! Credentials the way the AWS SDKs find them, as one provider per store.
//!
//! [`StoreConfig::credential_source`](crate::StoreConfig) reads the configuration (variables
//! and shared files, no network) into a [`Source`]; [`provider`] turns it into the one
//! `AwsCredentialProvider` that object_store's requests and the store's own signed requests
//! (CreateBucket, ListMultipartUploads, AbortMultipartUpload) both use, so both sign with the
//! same temporary credentials.
//!
//! Temporary credentials (credential_process, AssumeRole, AssumeRoleWithWebIdentity, container
//! credentials) are cached and fetched again once less than [`REFRESH_BEFORE`] of their life is
//! left, as the SDKs do; tasks waiting while another refreshes take its result. Instance
//! metadata is object_store's own provider. A source that cannot work (an SSO profile, a
//! broken `source_profile` chain) fails every request with a [`CredentialError`] saying what
//! to do, rather than falling through to instance metadata.

use crate::config::Credentials;
use crate::sigv4::{self, SignParams};
use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use object_store::aws::{AwsCredential, AwsCredentialProvider};
use object_store::client::{HttpClient, HttpConnector, HttpRequest, ReqwestConnector};
use object_store::{ClientOptions, CredentialProvider, StaticCredentialProvider};
use serde::Deserialize;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Temporary credentials are fetched again when they expire within this: the AWS SDKs' and
/// object_store's margin, long enough that a request signed just before is not refused.
pub(crate) const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);
/// Attempts of one credential fetch over HTTP (the SDKs retry container and STS calls too).
const HTTP_ATTEMPTS: u32 = 3;
/// The wait before the second attempt; it doubles.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Time limit of one credential request: the container agent answers in milliseconds, STS in
/// well under a second; the SDKs use a few seconds too.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// The ECS agent's address for `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`.
pub(crate) const ECS_AGENT: &str = "http://169.254.170.2";

/// A credential source that failed, in one line naming the source and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct CredentialError(pub(crate) String);

/// A role to assume and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Role {
    pub(crate) arn: String,
    pub(crate) session_name: String,
    pub(crate) external_id: Option<String>,
    pub(crate) duration_seconds: Option<u32>,
}

/// The authorization token of a container credentials endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ContainerToken {
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`, read at every fetch (EKS rotates it).
    File(String),
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN`.
    Value(String),
}

/// Where credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// Keys given directly: setter, `AWS_ACCESS_KEY_ID`, a profile's keys.
    Static(Credentials),
    /// A profile's `credential_process`.
    Process { profile: String, command: String },
    /// STS AssumeRole signed with the credentials of `base`.
    AssumeRole { role: Role, base: Box<Source> },
    /// STS AssumeRoleWithWebIdentity with the token in `token_file`.
    WebIdentity { token_file: String, role: Role },
    /// An ECS task or EKS Pod Identity credentials endpoint.
    Container {
        url: String,
        token: Option<ContainerToken>,
    },
    /// EC2 instance metadata (object_store's provider).
    InstanceMetadata,
    /// A configuration that cannot give credentials; the text says why and what to do.
    Unusable(String),
}

impl Source {
    /// One line naming the source, for logs.
    pub(crate) fn describe(&self) -> String {
        match self {
            Source::Static(_) => "static keys".to_owned(),
            Source::Process { profile, .. } => format!("credential_process of profile `{profile}`"),
            Source::AssumeRole { role, base } => {
                format!("AssumeRole {} with {}", role.arn, base.describe())
            }
            Source::WebIdentity { role, .. } => format!("web identity for {}", role.arn),
            Source::Container { url, .. } => format!("container credentials from {url}"),
            Source::InstanceMetadata => "instance metadata".to_owned(),
            Source::Unusable(why) => format!("none usable: {why}"),
        }
    }
}

/// What building providers needs besides the source.
pub(crate) struct Context<'a> {
    /// Region of STS requests.
    pub(crate) region: &'a str,
    /// `AWS_ENDPOINT_URL_STS`, else `https://sts.{region}.amazonaws.com`.
    pub(crate) sts_endpoint: String,
    /// object_store's instance metadata provider, built on demand.
    pub(crate) instance_metadata: &'a dyn Fn() -> object_store::Result<AwsCredentialProvider>,
}

/// The provider of `source`.
pub(crate) fn provider(
    source: &Source,
    ctx: &Context<'_>,
) -> object_store::Result<AwsCredentialProvider> {
    let cached = |fetch: Fetch| -> AwsCredentialProvider { Arc::new(Cached::new(fetch)) };
    Ok(match source {
        Source::Static(c) => Arc::new(StaticCredentialProvider::new(AwsCredential {
            key_id: c.key.clone(),
            secret_key: c.secret.clone(),
            token: c.token.clone(),
        })),
        Source::Process { profile, command } => cached(Fetch::Process {
            profile: profile.clone(),
            command: command.clone(),
        }),
        Source::AssumeRole { role, base } => cached(Fetch::AssumeRole {
            role: role.clone(),
            base: provider(base, ctx)?,
            sts: Sts::new(ctx)?,
        }),
        Source::WebIdentity { token_file, role } => cached(Fetch::WebIdentity {
            token_file: token_file.clone(),
            role: role.clone(),
            sts: Sts::new(ctx)?,
        }),
        Source::Container { url, token } => cached(Fetch::Container {
            url: url.clone(),
            token: token.clone(),
            client: http_client()?,
        }),
        Source::InstanceMetadata => (ctx.instance_metadata)()?,
        Source::Unusable(why) => Arc::new(Failing(CredentialError(why.clone()))),
    })
}

fn http_client() -> object_store::Result<HttpClient> {
    let options = ClientOptions::new()
        // Container endpoints are plain HTTP by design; STS is https unless the user
        // points AWS_ENDPOINT_URL_STS at an http:// endpoint.
        .with_allow_http(true)
        .with_timeout(HTTP_TIMEOUT);
    ReqwestConnector::default().connect(&options)
}

fn to_object_store(e: CredentialError) -> object_store::Error {
    object_store::Error::Generic {
        store: "S3",
        source: Box::new(e),
    }
}

/// A source that always fails with its reason.
#[derive(Debug)]
struct Failing(CredentialError);

#[async_trait]
impl CredentialProvider for Failing {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        Err(to_object_store(self.0.clone()))
    }
}

/// Credentials and when they expire (`None`: never).
#[derive(Debug, Clone)]
struct Temporary {
    credential: Arc<AwsCredential>,
    expires: Option<DateTime<Utc>>,
}

impl Temporary {
    fn valid_for(&self, now: DateTime<Utc>) -> Option<chrono::TimeDelta> {
        self.expires.map(|e| e - now)
    }

    fn is_fresh(&self, now: DateTime<Utc>) -> bool {
        self.valid_for(now)
            .is_none_or(|left| left.to_std().is_ok_and(|left| left > REFRESH_BEFORE))
    }

    fn is_unexpired(&self, now: DateTime<Utc>) -> bool {
        self.valid_for(now)
            .is_none_or(|left| left > chrono::TimeDelta::zero())
    }
}

/// A fetcher with its cache.
#[derive(Debug)]
struct Cached {
    fetch: Fetch,
    state: tokio::sync::Mutex<Option<Temporary>>,
    /// Fetches completed, so a task that waited for the lock knows another just refreshed.
    generation: AtomicU64,
}

impl Cached {
    fn new(fetch: Fetch) -> Cached {
        Cached {
            fetch,
            state: tokio::sync::Mutex::new(None),
            generation: AtomicU64::new(0),
        }
    }

    async fn get(&self) -> Result<Arc<AwsCredential>, CredentialError> {
        let seen = self.generation.load(Ordering::Acquire);
        let mut state = self.state.lock().await;
        let now = Utc::now();
        if let Some(t) = state.as_ref() {
            let refreshed_meanwhile = self.generation.load(Ordering::Acquire) != seen;
            if t.is_fresh(now) || (refreshed_meanwhile && t.is_unexpired(now)) {
                return Ok(Arc::clone(&t.credential));
            }
        }
        match self.fetch.fetch().await {
            Ok(t) => {
                tracing::debug!(source = %self.fetch, expires = ?t.expires, "credentials fetched");
                let credential = Arc::clone(&t.credential);
                *state = Some(t);
                self.generation.fetch_add(1, Ordering::Release);
                Ok(credential)
            }
            // The SDKs keep using credentials that have not expired yet when a refresh fails.
            Err(e) => match state.as_ref().filter(|t| t.is_unexpired(now)) {
                Some(t) => {
                    tracing::warn!(error = %e, "refreshing credentials failed; using the current ones until they expire");
                    Ok(Arc::clone(&t.credential))
                }
                None => Err(e),
            },
        }
    }
}

#[async_trait]
impl CredentialProvider for Cached {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        self.get().await.map_err(to_object_store)
    }
}

/// How one temporary source fetches.
enum Fetch {
    Process {
        profile: String,
        command: String,
    },
    AssumeRole {
        role: Role,
        base: AwsCredentialProvider,
        sts: Sts,
    },
    WebIdentity {
        token_file: String,
        role: Role,
        sts: Sts,
    },
    Container {
        url: String,
        token: Option<ContainerToken>,
        client: HttpClient,
    },
}

impl fmt::Debug for Fetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Fetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fetch::Process { profile, .. } => {
                write!(f, "credential_process of profile `{profile}`")
            }
            Fetch::AssumeRole { role, .. } => write!(f, "AssumeRole {}", role.arn),
            Fetch::WebIdentity { role, .. } => write!(f, "AssumeRoleWithWebIdentity {}", role.arn),
            Fetch::Container { url, .. } => write!(f, "container credentials from {url}"),
        }
    }
}

impl Fetch {
    async fn fetch(&self) -> Result<Temporary, CredentialError> {
        match self {
            Fetch::Process { command, .. } => process(command).await,
            Fetch::AssumeRole { role, base, sts } => {
                let signer = base.get_credential().await.map_err(|e| {
                    CredentialError(format!(
                        "AssumeRole for {} failed: no source credentials: {}",
                        role.arn,
                        source_text(&e)
                    ))
                })?;
                sts.assume_role(role, &signer).await
            }
            Fetch::WebIdentity {
                token_file,
                role,
                sts,
            } => {
                let token = read_token(token_file, "web identity token file").await?;
                sts.assume_role_with_web_identity(role, &token).await
            }
            Fetch::Container { url, token, client } => container(client, url, token.as_ref()).await,
        }
    }
}

/// The innermost message of an object_store error (ours, when a chained source failed).
fn source_text(e: &object_store::Error) -> String {
    let mut last: &(dyn std::error::Error + 'static) = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

async fn read_token(path: &str, what: &str) -> Result<String, CredentialError> {
    match tokio::fs::read_to_string(path).await {
        Ok(t) => Ok(t.trim().to_owned()),
        Err(e) => Err(CredentialError(format!(
            "cannot read the {what} {path}: {e}"
        ))),
    }
}

// ---- credential_process ----

/// What a `credential_process` prints.
/// <https://docs.aws.amazon.com/sdkref/latest/guide/feature-process-credentials.html>
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ProcessOutput {
    version: u32,
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
    expiration: Option<String>,
}

/// Runs `command` through `sh -c` (as the SDKs do on Unix) and parses what it prints.
async fn process(command: &str) -> Result<Temporary, CredentialError> {
    let output = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| {
            CredentialError(format!(
                "credential_process `{command}` could not be started: {e}"
            ))
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("(nothing on stderr)");
        let status = match output.status.code() {
            Some(code) => format!("exited {code}"),
            None => "was killed by a signal".to_owned(),
        };
        return Err(CredentialError(format!(
            "credential_process `{command}` {status}: {first}"
        )));
    }
    parse_process_output(&output.stdout).map_err(|why| {
        CredentialError(format!(
            "credential_process `{command}` printed no usable credentials: {why}"
        ))
    })
}

fn parse_process_output(stdout: &[u8]) -> Result<Temporary, String> {
    let out: ProcessOutput = serde_json::from_slice(stdout).map_err(|e| {
        format!(
            "{e}; expected JSON with Version 1, AccessKeyId, SecretAccessKey, \
             SessionToken and Expiration"
        )
    })?;
    if out.version != 1 {
        return Err(format!("Version {} is not 1", out.version));
    }
    let expires = out.expiration.as_deref().map(parse_time).transpose()?;
    Ok(Temporary {
        credential: Arc::new(AwsCredential {
            key_id: out.access_key_id,
            secret_key: out.secret_access_key,
            token: out.session_token,
        }),
        expires,
    })
}

fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text.trim())
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("Expiration `{text}` is not an RFC 3339 time: {e}"))
}

// ---- container credentials ----

/// What an ECS or EKS Pod Identity credentials endpoint answers.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ContainerOutput {
    access_key_id: String,
    secret_access_key: String,
    token: Option<String>,
    expiration: Option<String>,
}

async fn container(
    client: &HttpClient,
    url: &str,
    token: Option<&ContainerToken>,
) -> Result<Temporary, CredentialError> {
    let fail = |why: String| CredentialError(format!("container credentials from {url}: {why}"));
    let token = match token {
        Some(ContainerToken::File(path)) => Some(
            read_token(path, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
                .await
                .map_err(|e| fail(e.0))?,
        ),
        Some(ContainerToken::Value(v)) => Some(v.clone()),
        None => None,
    };
    let make = || -> Result<HttpRequest, String> {
        let mut req = http::Request::builder().method(Method::GET).uri(url);
        if let Some(t) = &token {
            req = req.header(http::header::AUTHORIZATION, t.as_str());
        }
        req.body(Bytes::new().into()).map_err(|e| e.to_string())
    };
    let (status, body) = send(client, make).await.map_err(fail)?;
    if !status.is_success() {
        return Err(fail(format!("HTTP {status}: {}", first_line(&body))));
    }
    let out: ContainerOutput = serde_json::from_str(&body)
        .map_err(|e| fail(format!("the answer is not credentials JSON: {e}")))?;
    let expires = out.expiration.as_deref().map(parse_time).transpose();
    Ok(Temporary {
        credential: Arc::new(AwsCredential {
            key_id: out.access_key_id,
            secret_key: out.secret_access_key,
            token: out.token,
        }),
        expires: expires.map_err(fail)?,
    })
}

fn first_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("(empty answer)")
}

/// Sends the request `make` builds, again after transport errors, 5xx and 429 answers; the
/// last answer's status and body.
async fn send(
    client: &HttpClient,
    make: impl Fn() -> Result<HttpRequest, String>,
) -> Result<(StatusCode, String), String> {
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 1;
    loop {
        let outcome = match client.execute(make()?).await {
            Ok(response) => {
                let status = response.status();
                match response.into_body().bytes().await {
                    Ok(body) => Ok((status, String::from_utf8_lossy(&body).into_owned())),
                    Err(e) => Err(e.to_string()),
                }
            }
            Err(e) => Err(crate::error::chain_text(&e)),
        };
        let transient = match &outcome {
            Ok((status, _)) => status.is_server_error() || *status == StatusCode::TOO_MANY_REQUESTS,
            Err(_) => true,
        };
        if !transient || attempt >= HTTP_ATTEMPTS {
            return outcome;
        }
        tokio::time::sleep(backoff).await;
        backoff *= 2;
        attempt += 1;
    }
}

// ---- STS ----

/// The STS query API at one endpoint.
struct Sts {
    endpoint: String,
    region: String,
    client: HttpClient,
}

impl Sts {
    fn new(ctx: &Context<'_>) -> object_store::Result<Sts> {
        Ok(Sts {
            endpoint: ctx.sts_endpoint.clone(),
            region: ctx.region.to_owned(),
            client: http_client()?,
        })
    }

    async fn assume_role(
        &self,
        role: &Role,
        signer: &AwsCredential,
    ) -> Result<Temporary, CredentialError> {
        let mut form = vec![
            ("Action", "AssumeRole".to_owned()),
            ("Version", "2011-06-15".to_owned()),
            ("RoleArn", role.arn.clone()),
            ("RoleSessionName", role.session_name.clone()),
        ];
        if let Some(id) = &role.external_id {
            form.push(("ExternalId", id.clone()));
        }
        if let Some(d) = role.duration_seconds {
            form.push(("DurationSeconds", d.to_string()));
        }
        let signer = Credentials {
            key: signer.key_id.clone(),
            secret: signer.secret_key.clone(),
            token: signer.token.clone(),
        };
        self.call("AssumeRole", role, &form, Some(&signer)).await
    }

    async fn assume_role_with_web_identity(
        &self,
        role: &Role,
        token: &str,
    ) -> Result<Temporary, CredentialError> {
        let mut form = vec![
            ("Action", "AssumeRoleWithWebIdentity".to_owned()),
            ("Version", "2011-06-15".to_owned()),
            ("RoleArn", role.arn.clone()),
            ("RoleSessionName", role.session_name.clone()),
            ("WebIdentityToken", token.to_owned()),
        ];
        if let Some(d) = role.duration_seconds {
            form.push(("DurationSeconds", d.to_string()));
        }
        self.call("AssumeRoleWithWebIdentity", role, &form, None)
            .await
    }

    async fn call(
        &self,
        action: &str,
        role: &Role,
        form: &[(&str, String)],
        signer: Option<&Credentials>,
    ) -> Result<Temporary, CredentialError> {
        let fail = |why: String| {
            CredentialError(format!(
                "{action} for {} at {} failed: {why}",
                role.arn, self.endpoint
            ))
        };
        let body: String = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
            .finish();
        let url: http::Uri = url::Url::parse(&self.endpoint)
            .map_err(|e| e.to_string())
            .and_then(|u| {
                u.as_str()
                    .parse()
                    .map_err(|e: http::uri::InvalidUri| e.to_string())
            })
            .map_err(|e| fail(format!("the STS endpoint is not a URL: {e}")))?;
        let make = || -> Result<HttpRequest, String> {
            let mut headers = HeaderMap::new();
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-www-form-urlencoded; charset=utf-8"),
            );
            if let Some(creds) = signer {
                let params = SignParams {
                    method: &Method::POST,
                    url: &url,
                    payload_sha256: &sigv4::sha256_hex(body.as_bytes()),
                    region: &self.region,
                    service: "sts",
                    now: Utc::now(),
                };
                sigv4::sign(&mut headers, &params, creds).map_err(|e| {
                    format!("the source credentials contain invalid characters: {e}")
                })?;
            }
            let mut req = http::Request::builder()
                .method(Method::POST)
                .uri(url.clone())
                .body(Bytes::from(body.clone()).into())
                .map_err(|e| e.to_string())?;
            *req.headers_mut() = headers;
            Ok(req)
        };
        let (status, text) = send(&self.client, make).await.map_err(fail)?;
        if !status.is_success() {
            return Err(fail(sts_error(status, &text)));
        }
        parse_sts_credentials(&text).map_err(fail)
    }
}

/// `Code: Message (HTTP status)` of an STS error answer.
fn sts_error(status: StatusCode, text: &str) -> String {
    match (xml_tag(text, "Code"), xml_tag(text, "Message")) {
        (Some(code), Some(message)) => format!("{code}: {message} (HTTP {status})"),
        (Some(code), None) => format!("{code} (HTTP {status})"),
        _ => format!("HTTP {status}: {}", first_line(text)),
    }
}

/// The `<Credentials>` of an AssumeRole or AssumeRoleWithWebIdentity answer.
fn parse_sts_credentials(text: &str) -> Result<Temporary, String> {
    let creds = xml_tag(text, "Credentials").ok_or("the answer has no Credentials")?;
    let field = |name: &str| {
        xml_tag(&creds, name).ok_or_else(|| format!("the answer's Credentials lack {name}"))
    };
    Ok(Temporary {
        credential: Arc::new(AwsCredential {
            key_id: field("AccessKeyId")?,
            secret_key: field("SecretAccessKey")?,
            token: Some(field("SessionToken")?),
        }),
        expires: Some(parse_time(&field("Expiration")?)?),
    })
}

/// The unescaped text of the first `<name>…</name>` in `xml`. STS answers are flat and fixed,
/// so this is all the XML they need.
fn xml_tag(xml: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&close)?;
    let raw = xml[start..end].trim();
    Some(
        quick_xml::escape::unescape(raw)
            .map(|s| s.into_owned())
            .unwrap_or_else(|_| raw.to_owned()),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn process_output_parses() {
        let t = parse_process_output(
            br#"{"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "SK",
                 "SessionToken": "TK", "Expiration": "2030-01-02T03:04:05Z"}"#,
        )
        .unwrap();
        assert_eq!(t.credential.key_id, "AK");
        assert_eq!(t.credential.secret_key, "SK");
        assert_eq!(t.credential.token.as_deref(), Some("TK"));
        assert_eq!(t.expires.unwrap().to_rfc3339(), "2030-01-02T03:04:05+00:00");
        let forever =
            parse_process_output(br#"{"Version":1,"AccessKeyId":"A","SecretAccessKey":"S"}"#)
                .unwrap();
        assert!(forever.expires.is_none() && forever.credential.token.is_none());
        assert!(forever.is_fresh(Utc::now()));
    }

    #[test]
    fn bad_process_output_says_what_is_wrong() {
        let v2 = parse_process_output(br#"{"Version":2,"AccessKeyId":"A","SecretAccessKey":"S"}"#);
        assert_eq!(v2.unwrap_err(), "Version 2 is not 1");
        let missing = parse_process_output(br#"{"Version":1,"AccessKeyId":"A"}"#).unwrap_err();
        assert!(missing.contains("SecretAccessKey"), "{missing}");
        let time = parse_process_output(
            br#"{"Version":1,"AccessKeyId":"A","SecretAccessKey":"S","Expiration":"soon"}"#,
        )
        .unwrap_err();
        assert!(time.contains("Expiration `soon`"), "{time}");
    }

    #[test]
    fn freshness_keeps_a_margin_before_expiry() {
        let now = Utc::now();
        let at = |secs: i64| Temporary {
            credential: Arc::new(AwsCredential {
                key_id: "A".into(),
                secret_key: "S".into(),
                token: None,
            }),
            expires: Some(now + chrono::TimeDelta::seconds(secs)),
        };
        assert!(at(3600).is_fresh(now));
        assert!(!at(60).is_fresh(now) && at(60).is_unexpired(now));
        assert!(!at(-1).is_unexpired(now));
    }

    /// A credential_process whose runs are counted in `dir/calls`; it prints keys expiring in
    /// `ttl_secs`, and fails from its run number `fail_from` on.
    fn counting_process(dir: &std::path::Path, ttl_secs: i64, fail_from: usize) -> Cached {
        let calls = dir.join("calls");
        let expiration = (Utc::now() + chrono::TimeDelta::seconds(ttl_secs)).to_rfc3339();
        let script = dir.join("creds.sh");
        std::fs::write(
            &script,
            format!(
                "echo run >> '{calls}'\n\
                 [ $(wc -l < '{calls}') -ge {fail_from} ] && {{ echo down >&2; exit 1; }}\n\
                 echo '{{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\
                 \"Expiration\":\"{expiration}\"}}'\n",
                calls = calls.display()
            ),
        )
        .unwrap();
        Cached::new(Fetch::Process {
            profile: "p".into(),
            command: format!("sh {}", script.display()),
        })
    }

    fn runs(dir: &std::path::Path) -> usize {
        std::fs::read_to_string(dir.join("calls"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    #[tokio::test]
    async fn tasks_waiting_on_a_refresh_share_its_result() {
        let dir = tempfile::tempdir().unwrap();
        // Inside the refresh margin: every lone use refetches.
        let cached = counting_process(dir.path(), 60, usize::MAX);
        cached.get().await.unwrap();
        assert_eq!(runs(dir.path()), 1);
        let all = futures::future::join_all((0..8).map(|_| cached.get())).await;
        assert!(all.iter().all(Result::is_ok));
        assert_eq!(runs(dir.path()), 2, "one refresh for eight waiting tasks");
        cached.get().await.unwrap();
        assert_eq!(runs(dir.path()), 3);
    }

    #[tokio::test]
    async fn a_failed_refresh_keeps_unexpired_credentials_and_then_fails() {
        let dir = tempfile::tempdir().unwrap();
        let cached = counting_process(dir.path(), 60, 2);
        assert_eq!(cached.get().await.unwrap().key_id, "A");
        assert_eq!(cached.get().await.unwrap().key_id, "A", "still valid");
        assert_eq!(runs(dir.path()), 2);
        let expired = counting_process(dir.path(), -1, 0);
        let err = expired.get().await.unwrap_err();
        assert!(err.0.ends_with("exited 1: down"), "{err}");
    }

    #[test]
    fn sts_answers_parse() {
        let ok = "<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\
            <AssumeRoleResult><AssumedRoleUser><Arn>arn:aws:sts::1:assumed-role/r/s</Arn>\
            </AssumedRoleUser><Credentials><AccessKeyId>ASIA1</AccessKeyId>\
            <SecretAccessKey>sec/ret+</SecretAccessKey><SessionToken>to&amp;ken</SessionToken>\
            <Expiration>2030-01-01T00:00:00Z</Expiration></Credentials></AssumeRoleResult>\
            </AssumeRoleResponse>";
        let t = parse_sts_credentials(ok).unwrap();
        assert_eq!(t.credential.key_id, "ASIA1");
        assert_eq!(t.credential.secret_key, "sec/ret+");
        assert_eq!(t.credential.token.as_deref(), Some("to&ken"));
        let err = "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>\
            <Message>not allowed</Message></Error></ErrorResponse>";
        assert_eq!(
            sts_error(StatusCode::FORBIDDEN, err),
            "AccessDenied: not allowed (HTTP 403 Forbidden)"
        );
        assert!(parse_sts_credentials("<x/>").is_err());
    }
}
