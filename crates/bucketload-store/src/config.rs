//! Store configuration: the standard AWS environment and shared files, each
//! value overridable by a `with_*` setter.
//!
//! Precedence, highest first (the AWS CLI's order):
//! - credentials: [`StoreConfig::with_credentials`]; the profile named by
//!   [`StoreConfig::with_profile`]; `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/
//!   `AWS_SESSION_TOKEN`; the profile from `AWS_PROFILE` (or `default`): a role, keys,
//!   `credential_process`; web identity; container credentials; instance metadata (see
//!   the `credentials` module);
//! - region: setter; `AWS_REGION`; `AWS_DEFAULT_REGION`; the profile's
//!   `region`; `us-east-1`;
//! - endpoint: setter; `AWS_ENDPOINT_URL_S3`; `AWS_ENDPOINT_URL`; the
//!   profile's `endpoint_url`; none (AWS itself).

use crate::credentials::{ContainerToken, ECS_AGENT, Role, Source};
use crate::ini::{self, Ini};
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Default part size for ranged reads and multipart writes: 8 MiB, the AWS
/// CLI's default and S3's sweet spot between request count and parallelism.
pub const DEFAULT_PART_SIZE: u64 = 8 << 20;
/// Default requests in flight through one store handle (its concurrency limit): enough to hide
/// ~100 ms of first-byte latency at several GB/s without exhausting sockets. The loader asks
/// for more (the engine's `DEFAULT_LOADER_CONCURRENCY`, 256) when it opens the store itself.
pub const DEFAULT_STORE_CONCURRENCY: usize = 64;
/// Default retries per request: no count limit, so the time limit
/// ([`DEFAULT_RETRY_TIMEOUT`]) decides when to stop.
pub const DEFAULT_MAX_RETRIES: usize = usize::MAX;
/// Default total time a request may spend retrying: long enough to ride out a server restart
/// or a burst of throttling, short enough that a dead store is reported within a minute.
pub const DEFAULT_RETRY_TIMEOUT: Duration = Duration::from_secs(60);
/// The first wait before retrying a failed request.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two attempts of a request: short enough that the 60 s budget holds
/// about 17 attempts (a store failing 40% of requests at random then fails one request in
/// ten million, against one in a hundred thousand with 10 s), long enough to spread retries
/// out during a restart or throttling (adaptive mode slows the sender itself).
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Default TCP connect timeout (object_store's default).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Region used when nothing configures one.
pub const DEFAULT_REGION: &str = "us-east-1";

/// How bucket names go into S3 request URLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Addressing {
    /// Path-style for a custom endpoint, virtual-hosted for AWS itself.
    #[default]
    Auto,
    /// `http://endpoint/bucket/key`.
    Path,
    /// `http://bucket.endpoint/key`.
    VirtualHosted,
}

impl std::str::FromStr for Addressing {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Addressing::Auto),
            "path" => Ok(Addressing::Path),
            "virtual" | "virtual-hosted" | "virtual_hosted" => Ok(Addressing::VirtualHosted),
            _ => Err(crate::Error::InvalidInput {
                message: format!("addressing `{s}` is not one of path, virtual, auto"),
            }),
        }
    }
}

/// How failed requests are retried, as the AWS SDKs' `retry_mode` setting names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryMode {
    /// Exponential backoff with jitter, bounded by the retry time limit.
    #[default]
    Standard,
    /// As `Standard`, and when the store throttles (503, 429) the client also limits its own
    /// request rate, growing it back while the store keeps up.
    Adaptive,
}

impl std::str::FromStr for RetryMode {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            // The SDKs' `legacy` mode differs only in which errors count as retryable.
            "standard" | "legacy" => Ok(RetryMode::Standard),
            "adaptive" => Ok(RetryMode::Adaptive),
            _ => Err(crate::Error::InvalidInput {
                message: format!("retry mode `{s}` is not one of standard, adaptive"),
            }),
        }
    }
}

/// Static AWS credentials.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub(crate) key: String,
    pub(crate) secret: String,
    pub(crate) token: Option<String>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("key", &self.key)
            .field("secret", &"******")
            .field("token", &self.token.as_ref().map(|_| "******"))
            .finish()
    }
}

/// What the environment and the shared files said, captured once.
#[derive(Debug, Default)]
struct Env {
    vars: HashMap<String, String>,
    config: Ini,
    credentials: Ini,
    /// Where the shared files were looked for, for messages.
    config_path: String,
    credentials_path: String,
}

impl Env {
    fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// A key of profile `name` from the config file (`[profile x]`, or
    /// `[default]`) or the credentials file (`[x]`), credentials first.
    fn profile_value(&self, name: &str, key: &str) -> Option<&str> {
        let config_section = match name {
            "default" => "default".to_owned(),
            n => format!("profile {n}"),
        };
        let from_creds = self.credentials.get(name).and_then(|s| s.get(key));
        let from_config = || {
            self.config
                .get(&config_section)
                .or_else(|| self.config.get(name))
                .and_then(|s| s.get(key))
        };
        from_creds.or_else(from_config).map(String::as_str)
    }

    /// True if either shared file has a section for profile `name`.
    fn has_profile(&self, name: &str) -> bool {
        let config_section = match name {
            "default" => "default".to_owned(),
            n => format!("profile {n}"),
        };
        self.credentials.contains_key(name)
            || self.config.contains_key(&config_section)
            || self.config.contains_key(name)
    }

    fn profile_credentials(&self, name: &str) -> Option<Credentials> {
        Some(Credentials {
            key: self.profile_value(name, "aws_access_key_id")?.to_owned(),
            secret: self
                .profile_value(name, "aws_secret_access_key")?
                .to_owned(),
            token: self
                .profile_value(name, "aws_session_token")
                .map(str::to_owned),
        })
    }

    fn env_credentials(&self) -> Option<Credentials> {
        Some(Credentials {
            key: self.var("AWS_ACCESS_KEY_ID")?.to_owned(),
            secret: self.var("AWS_SECRET_ACCESS_KEY")?.to_owned(),
            token: self.var("AWS_SESSION_TOKEN").map(str::to_owned),
        })
    }

    /// The credential source profile `name` configures, if any, in the SDKs' order: a role
    /// (with a web identity token file, a `source_profile` or a `credential_source`), static
    /// keys, `credential_process`; an SSO profile is unusable. `chain` holds the profiles
    /// that led here through `source_profile`, to refuse loops.
    fn profile_source(&self, name: &str, chain: &mut Vec<String>) -> Option<Source> {
        if chain.iter().any(|p| p == name) {
            chain.push(name.to_owned());
            return Some(Source::Unusable(format!(
                "the source_profile chain of profile `{}` loops ({}); fix ~/.aws/config",
                chain[0],
                chain.join(" -> ")
            )));
        }
        chain.push(name.to_owned());
        let get = |key: &str| self.profile_value(name, key);
        if let Some(arn) = get("role_arn") {
            return Some(self.profile_role(name, arn, chain));
        }
        if let Some(c) = self.profile_credentials(name) {
            return Some(Source::Static(c));
        }
        if let Some(command) = get("credential_process") {
            return Some(Source::Process {
                profile: name.to_owned(),
                command: command.to_owned(),
            });
        }
        if ["sso_session", "sso_start_url", "sso_account_id"]
            .iter()
            .any(|k| get(k).is_some())
        {
            return Some(Source::Unusable(format!(
                "profile `{name}` uses AWS IAM Identity Center (SSO), which bucketload does not \
                 support: run `aws configure export-credentials --profile {name} --format env` \
                 and export its keys, or set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
            )));
        }
        None
    }

    /// Profile `name` assumes role `arn`: with its web identity token file, or with the
    /// credentials of its `source_profile` or `credential_source`.
    fn profile_role(&self, name: &str, arn: &str, chain: &mut Vec<String>) -> Source {
        let get = |key: &str| self.profile_value(name, key);
        let role = match self.role(arn, get("role_session_name"), get("duration_seconds")) {
            Ok(role) => Role {
                external_id: get("external_id").map(str::to_owned),
                ..role
            },
            Err(why) => return Source::Unusable(format!("profile `{name}`: {why}")),
        };
        if let Some(file) = get("web_identity_token_file") {
            return Source::WebIdentity {
                token_file: file.to_owned(),
                role,
            };
        }
        let base = match (get("source_profile"), get("credential_source")) {
            // A profile that names itself uses its own keys to assume its role.
            (Some(source), _) if source == name => self
                .profile_credentials(name)
                .map(Source::Static)
                .unwrap_or_else(|| {
                    Source::Unusable(format!(
                        "profile `{name}` is its own source_profile but has no \
                         aws_access_key_id/aws_secret_access_key"
                    ))
                }),
            (Some(source), _) => self.profile_source(source, chain).unwrap_or_else(|| {
                Source::Unusable(format!(
                    "profile `{source}`, the source_profile of `{name}`, has no credentials; \
                     add keys, role_arn or credential_process to it"
                ))
            }),
            (None, Some(source)) => self.credential_source(name, source),
            (None, None) => Source::Unusable(format!(
                "profile `{name}` has role_arn but neither source_profile nor credential_source \
                 to assume it with"
            )),
        };
        Source::AssumeRole {
            role,
            base: Box::new(base),
        }
    }

    /// A profile's `credential_source`: the base credentials of its role.
    fn credential_source(&self, name: &str, source: &str) -> Source {
        let missing = |what: &str| {
            Source::Unusable(format!(
                "profile `{name}` has credential_source = {source} but {what}"
            ))
        };
        match source {
            "Environment" => self
                .env_credentials()
                .map(Source::Static)
                .unwrap_or_else(|| missing("AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are not set")),
            "EcsContainer" => self.container_source().unwrap_or_else(|| {
                missing("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI/_FULL_URI are not set")
            }),
            "Ec2InstanceMetadata" => Source::InstanceMetadata,
            _ => Source::Unusable(format!(
                "profile `{name}`: credential_source `{source}` is not one of Environment, \
                 EcsContainer, Ec2InstanceMetadata"
            )),
        }
    }

    /// A role with its session name (default `bucketload-<milliseconds>`, as the SDKs name
    /// sessions after themselves and the time) and duration.
    fn role(
        &self,
        arn: &str,
        session: Option<&str>,
        duration: Option<&str>,
    ) -> Result<Role, String> {
        let duration_seconds = duration
            .map(|d| {
                d.parse::<u32>()
                    .map_err(|_| format!("duration_seconds `{d}` is not a number of seconds"))
            })
            .transpose()?;
        let session_name = session
            .map(str::to_owned)
            .unwrap_or_else(|| format!("bucketload-{}", chrono::Utc::now().timestamp_millis()));
        Ok(Role {
            arn: arn.to_owned(),
            session_name,
            external_id: None,
            duration_seconds,
        })
    }

    /// `AWS_WEB_IDENTITY_TOKEN_FILE` with `AWS_ROLE_ARN` (EKS IRSA).
    fn env_web_identity(&self) -> Option<Source> {
        let token_file = self.var("AWS_WEB_IDENTITY_TOKEN_FILE")?;
        let arn = self.var("AWS_ROLE_ARN")?;
        let session = self.var("AWS_ROLE_SESSION_NAME");
        Some(match self.role(arn, session, None) {
            Ok(role) => Source::WebIdentity {
                token_file: token_file.to_owned(),
                role,
            },
            Err(why) => Source::Unusable(why),
        })
    }

    /// ECS task credentials (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`) or a full URI (EKS Pod
    /// Identity, ECS Anywhere) with its authorization token.
    fn container_source(&self) -> Option<Source> {
        let token = match (
            self.var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"),
            self.var("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
        ) {
            (Some(file), _) => Some(ContainerToken::File(file.to_owned())),
            (None, Some(value)) => Some(ContainerToken::Value(value.to_owned())),
            (None, None) => None,
        };
        if let Some(relative) = self.var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
            return Some(Source::Container {
                url: format!("{ECS_AGENT}{relative}"),
                token,
            });
        }
        let full = self.var("AWS_CONTAINER_CREDENTIALS_FULL_URI")?;
        Some(match container_url_allowed(full) {
            Ok(()) => Source::Container {
                url: full.to_owned(),
                token,
            },
            Err(why) => Source::Unusable(why),
        })
    }
}

/// The SDKs' rule for `AWS_CONTAINER_CREDENTIALS_FULL_URI`: https to any host; plain http only
/// to loopback or the ECS and EKS Pod Identity agents, so credentials never cross a network
/// in the clear.
fn container_url_allowed(full: &str) -> Result<(), String> {
    let refuse = |why: &str| {
        Err(format!(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI `{full}` {why}; use https:// or the \
             loopback, ECS (169.254.170.2) or EKS (169.254.170.23) agent"
        ))
    };
    let Ok(url) = url::Url::parse(full) else {
        return refuse("is not a URL");
    };
    let allowed = match (url.scheme(), url.host()) {
        ("https", Some(_)) => true,
        ("http", Some(url::Host::Ipv4(ip))) => {
            ip.is_loopback()
                || ip.octets() == [169, 254, 170, 2]
                || ip.octets() == [169, 254, 170, 23]
        }
        ("http", Some(url::Host::Ipv6(ip))) => {
            ip.is_loopback() || ip == std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23)
        }
        ("http", Some(url::Host::Domain(d))) => d == "localhost",
        _ => false,
    };
    match allowed {
        true => Ok(()),
        false => refuse("is plain http to a host that is not loopback or a container agent"),
    }
}

/// Settings for opening a [`Store`](crate::Store).
///
/// Start from [`StoreConfig::from_env`] (or `StoreConfig::default()` for no
/// environment at all) and override with the `with_*` setters.
#[derive(Clone)]
pub struct StoreConfig {
    env: Arc<Env>,
    credentials: Option<Credentials>,
    region: Option<String>,
    endpoint: Option<String>,
    profile: Option<String>,
    addressing: Addressing,
    anonymous: bool,
    part_size: u64,
    concurrency: usize,
    max_retries: Option<usize>,
    retry_mode: Option<RetryMode>,
    retry_timeout: Duration,
    connect_timeout: Duration,
    sign_payload: bool,
    checksums: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            env: Arc::new(Env::default()),
            credentials: None,
            region: None,
            endpoint: None,
            profile: None,
            addressing: Addressing::Auto,
            anonymous: false,
            part_size: DEFAULT_PART_SIZE,
            concurrency: DEFAULT_STORE_CONCURRENCY,
            max_retries: None,
            retry_mode: None,
            retry_timeout: DEFAULT_RETRY_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            sign_payload: false,
            checksums: false,
        }
    }
}

impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreConfig")
            .field("credentials", &self.credentials())
            .field("region", &self.region())
            .field("endpoint", &self.endpoint())
            .field("profile", &self.profile_name())
            .field("addressing", &self.addressing)
            .field("anonymous", &self.anonymous)
            .field("part_size", &self.part_size)
            .field("concurrency", &self.concurrency)
            .field("max_retries", &self.max_retries())
            .field("retry_mode", &self.retry_mode())
            .field("retry_timeout", &self.retry_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("sign_payload", &self.sign_payload)
            .field("checksums", &self.checksums)
            .finish()
    }
}

impl StoreConfig {
    /// Reads the standard AWS environment variables and shared files of
    /// this process; see the module docs for precedence.
    pub fn from_env() -> StoreConfig {
        StoreConfig::from_env_map(&std::env::vars().collect())
    }

    /// Like [`StoreConfig::from_env`], with the variables taken from `vars`
    /// (`HOME`, `AWS_*`); the shared files are read from disk.
    pub fn from_env_map(vars: &HashMap<String, String>) -> StoreConfig {
        let vars = vars.clone();
        let file = |var: &str, default: &str| -> Option<PathBuf> {
            match vars.get(var).filter(|v| !v.is_empty()) {
                Some(p) => Some(PathBuf::from(p)),
                None => vars.get("HOME").map(|h| PathBuf::from(h).join(default)),
            }
        };
        let read = |path: Option<PathBuf>| -> Ini {
            path.and_then(|p| std::fs::read_to_string(p).ok())
                .map(|t| ini::parse(&t))
                .unwrap_or_default()
        };
        let config_file = file("AWS_CONFIG_FILE", ".aws/config");
        let credentials_file = file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
        let shown = |p: &Option<PathBuf>| match p {
            Some(p) => p.display().to_string(),
            None => "not found: HOME is not set".to_owned(),
        };
        StoreConfig {
            env: Arc::new(Env {
                config_path: shown(&config_file),
                credentials_path: shown(&credentials_file),
                config: read(config_file),
                credentials: read(credentials_file),
                vars,
            }),
            ..StoreConfig::default()
        }
    }

    /// Sets the S3 endpoint, e.g. `http://127.0.0.1:9000`. Default: from the
    /// environment, else AWS itself. An `http://` endpoint allows plain HTTP.
    pub fn with_endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// Sets the region. Default: from the environment or profile, else
    /// `us-east-1`.
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Selects a profile of the shared config/credentials files; its
    /// credentials win over `AWS_ACCESS_KEY_ID`. Default: `AWS_PROFILE`, else
    /// `default`.
    pub fn with_profile(mut self, name: impl Into<String>) -> Self {
        self.profile = Some(name.into());
        self
    }

    /// Sets static credentials, overriding the environment and profiles.
    pub fn with_credentials(
        mut self,
        key: impl Into<String>,
        secret: impl Into<String>,
        token: Option<String>,
    ) -> Self {
        self.credentials = Some(Credentials {
            key: key.into(),
            secret: secret.into(),
            token,
        });
        self
    }

    /// Sets path-style or virtual-hosted addressing. Default: [`Addressing::Auto`].
    pub fn with_addressing(mut self, a: Addressing) -> Self {
        self.addressing = a;
        self
    }

    /// Sends unsigned requests (public buckets). Default: `false`.
    pub fn with_anonymous(mut self, yes: bool) -> Self {
        self.anonymous = yes;
        self
    }

    /// Sets the part size of ranged reads and multipart writes. Default: 8 MiB.
    pub fn with_part_size(mut self, bytes: u64) -> Self {
        self.part_size = bytes;
        self
    }

    /// Sets the maximum requests in flight per store. Default: 64.
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// Signs request bodies (SigV4 with the body's SHA-256) instead of sending
    /// `UNSIGNED-PAYLOAD`. Default: off, as boto3 does over HTTPS: TLS already protects the
    /// body, and hashing every uploaded byte costs about a tenth of a core per 100 MB/s.
    /// Turn it on for plain-HTTP endpoints reached over an untrusted network.
    pub fn with_sign_payload(mut self, yes: bool) -> Self {
        self.sign_payload = yes;
        self
    }

    /// Sends a CRC64-NVME checksum of every uploaded body (`x-amz-checksum-crc64nvme` on each
    /// PUT and each multipart part, and the parts' checksums in the completion), so the store
    /// rejects a body corrupted on the way (400 BadDigest) and the request is retried. S3 and
    /// `bucketload serve` verify it. CRC64-NVME costs a few percent of a core per GB/s.
    /// Default: off (on for checkpoints).
    pub fn with_checksums(mut self, yes: bool) -> Self {
        self.checksums = yes;
        self
    }

    /// Whether uploads carry a checksum (see [`StoreConfig::with_checksums`]).
    pub fn checksums(&self) -> bool {
        self.checksums
    }

    /// Sets the retries per request after the first attempt. Default: `AWS_MAX_ATTEMPTS` or
    /// the profile's `max_attempts` less one, else no count limit (the time limit decides).
    pub fn with_max_retries(mut self, n: usize) -> Self {
        self.max_retries = Some(n);
        self
    }

    /// Sets the retry mode. Default: `AWS_RETRY_MODE` or the profile's `retry_mode`, else
    /// [`RetryMode::Standard`].
    pub fn with_retry_mode(mut self, mode: RetryMode) -> Self {
        self.retry_mode = Some(mode);
        self
    }

    /// Sets the total time a request may spend retrying. Default: 60 s.
    pub fn with_retry_timeout(mut self, timeout: Duration) -> Self {
        self.retry_timeout = timeout;
        self
    }

    /// Sets the TCP connect timeout. Default: 5 s.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The profile in use: the setter's, else `AWS_PROFILE`, else `default`.
    pub fn profile_name(&self) -> &str {
        self.profile
            .as_deref()
            .or_else(|| self.env.var("AWS_PROFILE"))
            .unwrap_or("default")
    }

    /// The region in use.
    pub fn region(&self) -> &str {
        self.region
            .as_deref()
            .or_else(|| self.env.var("AWS_REGION"))
            .or_else(|| self.env.var("AWS_DEFAULT_REGION"))
            .or_else(|| self.env.profile_value(self.profile_name(), "region"))
            .unwrap_or(DEFAULT_REGION)
    }

    /// The S3 endpoint in use, if not AWS itself.
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint
            .as_deref()
            .or_else(|| self.env.var("AWS_ENDPOINT_URL_S3"))
            .or_else(|| self.env.var("AWS_ENDPOINT_URL"))
            .or_else(|| self.env.profile_value(self.profile_name(), "endpoint_url"))
    }

    /// The addressing style after resolving [`Addressing::Auto`].
    pub fn addressing(&self) -> Addressing {
        match self.addressing {
            Addressing::Auto if self.endpoint().is_some() => Addressing::Path,
            Addressing::Auto => Addressing::VirtualHosted,
            other => other,
        }
    }

    /// True if requests are sent unsigned.
    pub fn anonymous(&self) -> bool {
        self.anonymous
    }

    /// Part size in bytes.
    pub fn part_size(&self) -> u64 {
        self.part_size
    }

    /// Maximum requests in flight.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// Whether request bodies are signed (see [`StoreConfig::with_sign_payload`]).
    pub fn sign_payload(&self) -> bool {
        self.sign_payload
    }

    /// Retries per request.
    pub fn max_retries(&self) -> usize {
        if let Some(n) = self.max_retries {
            return n;
        }
        self.aws_setting("AWS_MAX_ATTEMPTS", "max_attempts")
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map_or(DEFAULT_MAX_RETRIES, |attempts| attempts.saturating_sub(1))
    }

    /// The retry mode. An unknown `AWS_RETRY_MODE` or `retry_mode` counts as standard, with a
    /// warning.
    pub fn retry_mode(&self) -> RetryMode {
        if let Some(mode) = self.retry_mode {
            return mode;
        }
        let Some(text) = self.aws_setting("AWS_RETRY_MODE", "retry_mode") else {
            return RetryMode::default();
        };
        text.parse().unwrap_or_else(|e| {
            tracing::warn!("{e}; using standard");
            RetryMode::default()
        })
    }

    /// An AWS setting from its environment variable, else from the profile.
    fn aws_setting(&self, var: &str, key: &str) -> Option<&str> {
        self.env
            .var(var)
            .or_else(|| self.env.profile_value(self.profile_name(), key))
    }

    /// Total time a request may spend retrying.
    pub fn retry_timeout(&self) -> Duration {
        self.retry_timeout
    }

    /// TCP connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// True if a credential source other than instance metadata is configured: keys (setter,
    /// environment, profile), a role, `credential_process`, web identity or container
    /// credentials.
    pub fn has_credentials(&self) -> bool {
        self.credential_source() != Source::InstanceMetadata
    }

    /// The access key id in use, if any (never the secret).
    pub fn access_key_id(&self) -> Option<String> {
        self.credentials().map(|c| c.key)
    }

    /// Where credentials come from, in the AWS SDKs' order: [`StoreConfig::with_credentials`];
    /// the profile chosen with [`StoreConfig::with_profile`]; `AWS_ACCESS_KEY_ID`; the profile
    /// from `AWS_PROFILE` (or `default`): a role, keys, `credential_process`; web identity
    /// (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`); container credentials; instance
    /// metadata.
    pub(crate) fn credential_source(&self) -> Source {
        if let Some(c) = &self.credentials {
            return Source::Static(c.clone());
        }
        if self.profile.is_none()
            && let Some(c) = self.env.env_credentials()
        {
            return Source::Static(c);
        }
        let name = self.profile_name();
        let named = self.profile.is_some() || self.env.var("AWS_PROFILE").is_some();
        if named && !self.env.has_profile(name) {
            return Source::Unusable(format!(
                "profile `{name}` is in neither the config file ({}) nor the credentials file \
                 ({}); check --profile/AWS_PROFILE",
                self.env.config_path, self.env.credentials_path
            ));
        }
        self.env
            .profile_source(name, &mut Vec::new())
            .or_else(|| self.env.env_web_identity())
            .or_else(|| self.env.container_source())
            .unwrap_or(Source::InstanceMetadata)
    }

    /// The STS endpoint of AssumeRole and AssumeRoleWithWebIdentity: `AWS_ENDPOINT_URL_STS`,
    /// else the regional endpoint.
    pub(crate) fn sts_endpoint(&self) -> String {
        match self.env.var("AWS_ENDPOINT_URL_STS") {
            Some(e) => e.to_owned(),
            None => format!("https://sts.{}.amazonaws.com", self.region()),
        }
    }

    pub(crate) fn credentials(&self) -> Option<Credentials> {
        if let Some(c) = &self.credentials {
            return Some(c.clone());
        }
        if let Some(name) = &self.profile {
            return self.env.profile_credentials(name);
        }
        self.env
            .env_credentials()
            .or_else(|| self.env.profile_credentials(self.profile_name()))
    }

    /// A raw environment variable captured by `from_env`, e.g. for GCS and
    /// Azure settings.
    pub(crate) fn env_vars(&self) -> &HashMap<String, String> {
        &self.env.vars
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Write;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
        let path = dir.join(name);
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
        path.to_string_lossy().into_owned()
    }

    #[test]
    fn defaults_without_environment() {
        let c = StoreConfig::from_env_map(&HashMap::new());
        assert_eq!(c.region(), "us-east-1");
        assert_eq!(c.endpoint(), None);
        assert_eq!(c.addressing(), Addressing::VirtualHosted);
        assert_eq!(c.part_size(), 8 << 20);
        assert_eq!(c.concurrency(), 64);
        assert_eq!(c.max_retries(), usize::MAX, "the time limit decides");
        assert_eq!(c.retry_timeout(), Duration::from_secs(60));
        assert_eq!(c.retry_mode(), RetryMode::Standard);
        assert!(!c.has_credentials());
    }

    #[test]
    fn retry_settings_as_the_aws_sdks_read_them() {
        let c = StoreConfig::from_env_map(&vars(&[
            ("AWS_MAX_ATTEMPTS", "3"),
            ("AWS_RETRY_MODE", "adaptive"),
        ]));
        assert_eq!((c.max_retries(), c.retry_mode()), (2, RetryMode::Adaptive));
        let c = c.with_max_retries(7).with_retry_mode(RetryMode::Standard);
        assert_eq!((c.max_retries(), c.retry_mode()), (7, RetryMode::Standard));
        let dir = tempfile::tempdir().unwrap();
        let config = write(
            dir.path(),
            "config",
            "[profile slow]\nmax_attempts = 5\nretry_mode = adaptive\n",
        );
        let c = StoreConfig::from_env_map(&vars(&[
            ("AWS_CONFIG_FILE", &config),
            ("AWS_PROFILE", "slow"),
        ]));
        assert_eq!((c.max_retries(), c.retry_mode()), (4, RetryMode::Adaptive));
        assert!("sometimes".parse::<RetryMode>().is_err());
    }

    #[test]
    fn environment_variables_and_precedence() {
        let c = StoreConfig::from_env_map(&vars(&[
            ("AWS_ACCESS_KEY_ID", "AK"),
            ("AWS_SECRET_ACCESS_KEY", "SK"),
            ("AWS_SESSION_TOKEN", "TK"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_REGION", "eu-central-1"),
            ("AWS_ENDPOINT_URL", "http://generic:1"),
            ("AWS_ENDPOINT_URL_S3", "http://s3:2"),
        ]));
        let creds = c.credentials().unwrap();
        assert_eq!((creds.key.as_str(), creds.secret.as_str()), ("AK", "SK"));
        assert_eq!(creds.token.as_deref(), Some("TK"));
        assert_eq!(c.region(), "eu-central-1");
        assert_eq!(c.endpoint(), Some("http://s3:2"));
        assert_eq!(c.addressing(), Addressing::Path);
        let c = c
            .with_region("ap-south-1")
            .with_endpoint("http://x:3")
            .with_addressing(Addressing::VirtualHosted)
            .with_credentials("K2", "S2", None);
        assert_eq!(c.region(), "ap-south-1");
        assert_eq!(c.endpoint(), Some("http://x:3"));
        assert_eq!(c.addressing(), Addressing::VirtualHosted);
        assert_eq!(c.credentials().unwrap().key, "K2");
    }

    #[test]
    fn profiles_from_shared_files() {
        let dir = tempfile::tempdir().unwrap();
        let config = write(
            dir.path(),
            "config",
            "[default]\nregion = us-west-1\n[profile dev]\nregion = eu-north-1\nendpoint_url = http://dev:9000\n",
        );
        let creds = write(
            dir.path(),
            "credentials",
            "[default]\naws_access_key_id = DK\naws_secret_access_key = DS\n[dev]\naws_access_key_id = PK\naws_secret_access_key = PS\naws_session_token = PT\n",
        );
        let base = vars(&[
            ("AWS_CONFIG_FILE", &config),
            ("AWS_SHARED_CREDENTIALS_FILE", &creds),
        ]);
        let c = StoreConfig::from_env_map(&base);
        assert_eq!(c.region(), "us-west-1");
        assert_eq!(c.credentials().unwrap().key, "DK");
        let dev = c.clone().with_profile("dev");
        assert_eq!(dev.region(), "eu-north-1");
        assert_eq!(dev.endpoint(), Some("http://dev:9000"));
        assert_eq!(dev.credentials().unwrap().token.as_deref(), Some("PT"));
        let mut with_env = base.clone();
        with_env.insert("AWS_PROFILE".into(), "dev".into());
        with_env.insert("AWS_ACCESS_KEY_ID".into(), "EK".into());
        with_env.insert("AWS_SECRET_ACCESS_KEY".into(), "ES".into());
        let c = StoreConfig::from_env_map(&with_env);
        assert_eq!(c.profile_name(), "dev");
        assert_eq!(c.region(), "eu-north-1");
        assert_eq!(
            c.credentials().unwrap().key,
            "EK",
            "env keys beat AWS_PROFILE"
        );
        assert_eq!(c.with_profile("dev").credentials().unwrap().key, "PK");
    }

    #[test]
    fn home_directory_files_and_debug_hides_secrets() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".aws")).unwrap();
        write(
            &dir.path().join(".aws"),
            "credentials",
            "[default]\naws_access_key_id = HK\naws_secret_access_key = very-secret\n",
        );
        let home = dir.path().to_string_lossy().into_owned();
        let c = StoreConfig::from_env_map(&vars(&[("HOME", &home)]));
        assert_eq!(c.credentials().unwrap().key, "HK");
        let debug = format!("{c:?}");
        assert!(!debug.contains("very-secret"), "{debug}");
    }

    fn source_of(config: &str, credentials: &str, extra: &[(&str, &str)]) -> Source {
        let dir = tempfile::tempdir().unwrap();
        let config = write(dir.path(), "config", config);
        let creds = write(dir.path(), "credentials", credentials);
        let mut env = vars(&[
            ("AWS_CONFIG_FILE", &config),
            ("AWS_SHARED_CREDENTIALS_FILE", &creds),
        ]);
        env.extend(vars(extra));
        StoreConfig::from_env_map(&env).credential_source()
    }

    fn unusable(source: Source) -> String {
        match source {
            Source::Unusable(why) => why,
            other => panic!("expected an unusable source, got {other:?}"),
        }
    }

    #[test]
    fn assume_role_profiles_chain_to_their_source() {
        let config = "[profile base]\ncredential_process = /bin/creds\n\
            [profile mid]\nrole_arn = arn:aws:iam::1:role/mid\nsource_profile = base\n\
            [profile top]\nrole_arn = arn:aws:iam::1:role/top\nsource_profile = mid\n\
            role_session_name = s\nexternal_id = x\nduration_seconds = 900\n";
        let source = source_of(config, "", &[("AWS_PROFILE", "top")]);
        let Source::AssumeRole { role, base } = source else {
            panic!("{source:?}")
        };
        assert_eq!(role.arn, "arn:aws:iam::1:role/top");
        assert_eq!(role.session_name, "s");
        assert_eq!(role.external_id.as_deref(), Some("x"));
        assert_eq!(role.duration_seconds, Some(900));
        let Source::AssumeRole { role, base } = *base else {
            panic!("{base:?}")
        };
        assert_eq!(role.arn, "arn:aws:iam::1:role/mid");
        assert!(role.session_name.starts_with("bucketload-"), "{role:?}");
        assert_eq!(
            *base,
            Source::Process {
                profile: "base".into(),
                command: "/bin/creds".into()
            }
        );
    }

    #[test]
    fn role_sources_and_their_mistakes() {
        let own = source_of(
            "[default]\nrole_arn = arn:r\nsource_profile = default\n",
            "[default]\naws_access_key_id = K\naws_secret_access_key = S\n",
            &[],
        );
        assert!(
            matches!(&own, Source::AssumeRole { base, .. } if matches!(**base, Source::Static(_))),
            "{own:?}"
        );
        let web = source_of(
            "[default]\nrole_arn = arn:r\nweb_identity_token_file = /t\n",
            "",
            &[],
        );
        assert!(matches!(web, Source::WebIdentity { ref token_file, .. } if token_file == "/t"));
        let env = source_of(
            "[default]\nrole_arn = arn:r\ncredential_source = Environment\n",
            "",
            &[],
        );
        let why = match env {
            Source::AssumeRole { base, .. } => unusable(*base),
            other => panic!("{other:?}"),
        };
        assert!(why.contains("AWS_ACCESS_KEY_ID"), "{why}");
        let looped = source_of(
            "[profile a]\nrole_arn = arn:a\nsource_profile = b\n\
             [profile b]\nrole_arn = arn:b\nsource_profile = a\n",
            "",
            &[("AWS_PROFILE", "a")],
        );
        let mut inner = looped;
        while let Source::AssumeRole { base, .. } = inner {
            inner = *base;
        }
        assert!(unusable(inner).contains("loops (a -> b -> a)"));
        let sso = source_of(
            "[profile dev]\nsso_session = corp\nsso_account_id = 1\n",
            "",
            &[("AWS_PROFILE", "dev")],
        );
        let why = unusable(sso);
        assert!(
            why.contains("aws configure export-credentials --profile dev"),
            "{why}"
        );
    }

    #[test]
    fn the_chain_after_profiles() {
        assert_eq!(source_of("", "", &[]), Source::InstanceMetadata);
        let irsa = source_of(
            "",
            "",
            &[
                ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"),
                ("AWS_ROLE_ARN", "arn:aws:iam::1:role/pod"),
                ("AWS_ROLE_SESSION_NAME", "pod-1"),
                ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/creds"),
            ],
        );
        let Source::WebIdentity { token_file, role } = irsa else {
            panic!("{irsa:?}")
        };
        assert_eq!(
            (token_file.as_str(), role.session_name.as_str()),
            ("/var/run/token", "pod-1")
        );
        let ecs = source_of(
            "",
            "",
            &[("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/c")],
        );
        assert_eq!(
            ecs,
            Source::Container {
                url: "http://169.254.170.2/v2/c".into(),
                token: None
            }
        );
        let eks = source_of(
            "",
            "",
            &[
                (
                    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                    "http://169.254.170.23/v1/credentials",
                ),
                ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "/var/run/eks"),
                ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "ignored"),
            ],
        );
        assert!(matches!(
            eks,
            Source::Container { token: Some(ContainerToken::File(ref f)), .. } if f == "/var/run/eks"
        ));
        let keys_first = source_of(
            "",
            "",
            &[
                ("AWS_ACCESS_KEY_ID", "K"),
                ("AWS_SECRET_ACCESS_KEY", "S"),
                ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/c"),
            ],
        );
        assert!(matches!(keys_first, Source::Static(_)));
    }

    #[test]
    fn a_named_profile_that_does_not_exist_is_an_error() {
        let why = unusable(source_of(
            "[profile dev]\nregion = eu-west-1\n",
            "",
            &[("AWS_PROFILE", "prod")],
        ));
        assert!(
            why.starts_with("profile `prod` is in neither the config file ("),
            "{why}"
        );
        // A profile without credentials goes on along the chain; so does an absent default.
        let dev = source_of(
            "[profile dev]\nregion = eu-west-1\n",
            "",
            &[("AWS_PROFILE", "dev")],
        );
        assert_eq!(dev, Source::InstanceMetadata);
        assert_eq!(source_of("", "", &[]), Source::InstanceMetadata);
    }

    #[test]
    fn container_full_uri_must_be_https_or_local() {
        for ok in [
            "https://creds.example.com/x",
            "http://127.0.0.1:8080/creds",
            "http://localhost/creds",
            "http://[::1]:1/c",
            "http://169.254.170.2/v2",
            "http://[fd00:ec2::23]/v1",
        ] {
            assert_eq!(container_url_allowed(ok), Ok(()), "{ok}");
        }
        let why = unusable(source_of(
            "",
            "",
            &[(
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "http://10.0.0.5/creds",
            )],
        ));
        assert!(why.contains("is plain http to a host"), "{why}");
    }

    #[test]
    fn addressing_parses() {
        assert_eq!("path".parse::<Addressing>().unwrap(), Addressing::Path);
        assert_eq!(
            "virtual".parse::<Addressing>().unwrap(),
            Addressing::VirtualHosted
        );
        assert!("sideways".parse::<Addressing>().is_err());
    }
}
