//! Server configuration: the builder, the latency spec and the random fault rates.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::Error;

/// Access key accepted when no credentials are configured.
pub const DEFAULT_ACCESS_KEY: &str = "bucketload";
/// Secret key accepted when no credentials are configured.
pub const DEFAULT_SECRET_KEY: &str = "bucketload-dev-secret";

/// S3 rejects parts smaller than 5 MiB except the last one; the server does the same by default.
pub const DEFAULT_MIN_PART_SIZE: u64 = 5 * 1024 * 1024;

/// How long a connection may wait for the head of a request, once its first byte arrived.
/// S3 closes a connection that does not send a request within about 20 s.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an idle keep-alive connection stays open (S3 closes idle ones after about 20 s).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a request or response body may make no progress before the connection is
/// dropped; S3 answers 400 `RequestTimeout` to an upload whose socket stays silent for 20 s.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(20);
/// Unfinished multipart uploads older than this are removed at start, as an S3 lifecycle
/// rule `AbortIncompleteMultipartUpload` of 7 days would.
pub const DEFAULT_UPLOAD_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);

/// Validated server settings; build one with [`ServerConfig::builder`].
#[derive(Clone)]
pub struct ServerConfig {
    pub(crate) root: PathBuf,
    pub(crate) addr: SocketAddr,
    pub(crate) access_key: String,
    pub(crate) secret_key: String,
    pub(crate) latency: Option<LatencySpec>,
    pub(crate) directory_latency: Option<LatencySpec>,
    pub(crate) bandwidth: Option<u64>,
    pub(crate) rate_limit: Option<u32>,
    pub(crate) faults: FaultConfig,
    pub(crate) min_part_size: u64,
    pub(crate) fsync: bool,
    pub(crate) allow_sigv2: bool,
    pub(crate) timeouts: Timeouts,
    /// `None`: derived from the open-file limit at start.
    pub(crate) max_connections: Option<usize>,
    pub(crate) upload_expiry: Duration,
    pub(crate) shared_root: bool,
    pub(crate) session_ttl: Duration,
}

/// Per-connection timeouts; `None` turns one off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timeouts {
    pub(crate) header: Option<Duration>,
    pub(crate) idle: Option<Duration>,
    pub(crate) body: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            header: Some(DEFAULT_HEADER_TIMEOUT),
            idle: Some(DEFAULT_IDLE_TIMEOUT),
            body: Some(DEFAULT_BODY_TIMEOUT),
        }
    }
}

/// A zero duration turns a timeout off.
fn nonzero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("root", &self.root)
            .field("addr", &self.addr)
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .field("latency", &self.latency)
            .field("directory_latency", &self.directory_latency)
            .field("bandwidth", &self.bandwidth)
            .field("rate_limit", &self.rate_limit)
            .field("faults", &self.faults)
            .field("min_part_size", &self.min_part_size)
            .field("fsync", &self.fsync)
            .field("allow_sigv2", &self.allow_sigv2)
            .field("timeouts", &self.timeouts)
            .field("max_connections", &self.max_connections)
            .field("upload_expiry", &self.upload_expiry)
            .field("shared_root", &self.shared_root)
            .finish()
    }
}

impl ServerConfig {
    /// Starts a builder serving the buckets stored under `root` (one directory per bucket).
    pub fn builder(root: impl Into<PathBuf>) -> ServerBuilder {
        ServerBuilder {
            root: root.into(),
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            allow_non_loopback: false,
            credentials: None,
            latency: None,
            directory_latency: None,
            bandwidth: None,
            rate_limit: None,
            faults: FaultConfig::default(),
            min_part_size: DEFAULT_MIN_PART_SIZE,
            fsync: false,
            allow_sigv2: false,
            timeouts: Timeouts::default(),
            max_connections: None,
            upload_expiry: DEFAULT_UPLOAD_EXPIRY,
            shared_root: false,
            session_ttl: crate::express::DEFAULT_SESSION_TTL,
        }
    }

    /// Directory holding the buckets.
    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// Address the server binds (port 0 picks a free port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Access key clients must sign with.
    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    /// Secret key clients must sign with.
    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// Connection cap asked for; `None` when it is derived from the open-file limit at start
    /// ([`crate::RunningServer::max_connections`] tells the value in force).
    pub fn max_connections(&self) -> Option<usize> {
        self.max_connections
    }
}

impl fmt::Display for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "s3 server on {} serving {}",
            self.addr,
            self.root.display()
        )?;
        write!(f, ", access key {:?}", self.access_key)?;
        if let Some(latency) = &self.latency {
            write!(f, ", first-byte latency {latency}")?;
        }
        if let Some(latency) = &self.directory_latency {
            write!(f, ", directory-bucket first-byte latency {latency}")?;
        }
        if let Some(bandwidth) = self.bandwidth {
            write!(f, ", bandwidth {bandwidth} B/s per connection")?;
        }
        if let Some(rate) = self.rate_limit {
            write!(f, ", rate limit {rate} req/s per prefix")?;
        }
        if self.faults.is_active() {
            write!(f, ", faults {}", self.faults)?;
        }
        if self.fsync {
            write!(f, ", fsync on")?;
        }
        let show = |t: Option<Duration>| t.map_or_else(|| "off".to_owned(), |d| format!("{d:?}"));
        write!(
            f,
            ", timeouts: header {}, idle {}, body {}",
            show(self.timeouts.header),
            show(self.timeouts.idle),
            show(self.timeouts.body)
        )?;
        Ok(())
    }
}

/// Builder for [`ServerConfig`]; setters never fail, [`ServerBuilder::build`] validates.
#[derive(Clone)]
pub struct ServerBuilder {
    root: PathBuf,
    addr: SocketAddr,
    allow_non_loopback: bool,
    credentials: Option<(String, String)>,
    latency: Option<LatencySpec>,
    directory_latency: Option<LatencySpec>,
    bandwidth: Option<u64>,
    rate_limit: Option<u32>,
    faults: FaultConfig,
    min_part_size: u64,
    fsync: bool,
    allow_sigv2: bool,
    timeouts: Timeouts,
    max_connections: Option<usize>,
    upload_expiry: Duration,
    shared_root: bool,
    session_ttl: Duration,
}

impl fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("root", &self.root)
            .field("addr", &self.addr)
            .field("access_key", &self.credentials.as_ref().map(|(key, _)| key))
            .finish_non_exhaustive()
    }
}

impl ServerBuilder {
    /// Address to bind. Default `127.0.0.1:0` (a free port on loopback).
    pub fn with_addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Accepts requests signed with Signature Version 2. Default `false`: S3 refuses them for
    /// buckets made since 2020 (400 `InvalidRequest`), so tests against the server catch them.
    pub fn with_allow_sigv2(mut self, yes: bool) -> Self {
        self.allow_sigv2 = yes;
        self
    }

    /// Allows binding an address other than loopback. Default `false`: the server is for
    /// development and tests, with well-known default credentials.
    pub fn with_allow_non_loopback(mut self, yes: bool) -> Self {
        self.allow_non_loopback = yes;
        self
    }

    /// Access key and secret that requests must be signed with (SigV4).
    /// Default [`DEFAULT_ACCESS_KEY`] / [`DEFAULT_SECRET_KEY`].
    pub fn with_credentials(mut self, key: impl Into<String>, secret: impl Into<String>) -> Self {
        self.credentials = Some((key.into(), secret.into()));
        self
    }

    /// Delay before the response headers of every request. Default none.
    pub fn with_latency(mut self, latency: LatencySpec) -> Self {
        self.latency = Some(latency);
        self
    }

    /// Delay before the response headers of every request to a directory bucket (a bucket
    /// named `base--zone--x-s3`), in place of [`ServerBuilder::with_latency`]'s: S3 Express
    /// answers in a few milliseconds where a general purpose bucket takes tens. Default: the
    /// same as every other bucket's.
    pub fn with_directory_latency(mut self, latency: LatencySpec) -> Self {
        self.directory_latency = Some(latency);
        self
    }

    /// Caps what each connection sends, in bytes per second. Default unlimited.
    pub fn with_bandwidth(mut self, bytes_per_sec: u64) -> Self {
        self.bandwidth = Some(bytes_per_sec);
        self
    }

    /// Requests per second allowed per prefix (bucket + first key segment, as S3 partitions);
    /// requests above it get 503 SlowDown. Default unlimited.
    pub fn with_rate_limit(mut self, requests_per_sec: u32) -> Self {
        self.rate_limit = Some(requests_per_sec);
        self
    }

    /// Random fault injection. Default: no faults.
    pub fn with_faults(mut self, faults: FaultConfig) -> Self {
        self.faults = faults;
        self
    }

    /// Smallest size accepted for a multipart part other than the last.
    /// Default [`DEFAULT_MIN_PART_SIZE`] (5 MiB, as S3).
    pub fn with_min_part_size(mut self, bytes: u64) -> Self {
        self.min_part_size = bytes;
        self
    }

    /// Calls fsync on every object before it becomes visible. Default `false`: writes are
    /// atomic (temporary file + rename) but may be lost on power failure.
    pub fn with_fsync(mut self, yes: bool) -> Self {
        self.fsync = yes;
        self
    }

    /// How long a connection may take to send the head of a request (request line and
    /// headers) once its first byte arrived; then it is closed. Default
    /// [`DEFAULT_HEADER_TIMEOUT`] (20 s); `Duration::ZERO` turns it off.
    pub fn with_header_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.header = nonzero(timeout);
        self
    }

    /// How long a connection may stay open without a request: after it is accepted, and
    /// between a response and the next request (keep-alive). Default
    /// [`DEFAULT_IDLE_TIMEOUT`] (20 s, as S3); `Duration::ZERO` turns it off.
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.idle = nonzero(timeout);
        self
    }

    /// How long a request body may bring no new bytes (the request fails with 400
    /// `RequestTimeout`, the connection is closed and an upload leaves nothing behind), and
    /// how long a response may wait for a client that does not read it (the connection is
    /// closed). Default [`DEFAULT_BODY_TIMEOUT`] (20 s); `Duration::ZERO` turns it off.
    pub fn with_body_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.body = nonzero(timeout);
        self
    }

    /// Most connections open at once; when reached, the server stops accepting until one
    /// closes (new clients wait in the listen queue, requests in flight are unaffected).
    /// Default: derived from the open-file limit at start, so that connections cannot take
    /// the descriptors that requests need to open files.
    pub fn with_max_connections(mut self, connections: usize) -> Self {
        self.max_connections = Some(connections);
        self
    }

    /// Age past which an unfinished multipart upload is removed when the server starts, as
    /// an S3 lifecycle rule `AbortIncompleteMultipartUpload` would. Default
    /// [`DEFAULT_UPLOAD_EXPIRY`] (7 days); `Duration::ZERO` keeps every upload.
    pub fn with_upload_expiry(mut self, age: Duration) -> Self {
        self.upload_expiry = age;
        self
    }

    /// How long the sessions CreateSession hands out for directory buckets last. Default
    /// [`DEFAULT_SESSION_TTL`] (5 minutes, as S3 Express One Zone's).
    pub fn with_session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = ttl;
        self
    }

    /// Lets other servers with this setting serve the same root at the same time (e.g. one
    /// injecting faults beside a clean one over the same objects): the root is locked shared
    /// rather than exclusively, and nothing is cleaned at start, since another server may be
    /// writing. A server without it still refuses a root shared servers use, and they refuse
    /// its. Default off.
    pub fn with_shared_root(mut self, yes: bool) -> Self {
        self.shared_root = yes;
        self
    }

    /// Validates the settings, reporting every problem at once.
    pub fn build(self) -> Result<ServerConfig, Error> {
        let mut problems = Vec::new();
        if !self.allow_non_loopback && !self.addr.ip().is_loopback() {
            problems.push(format!(
                "address {} is not loopback; bind 127.0.0.1 or allow non-loopback addresses explicitly",
                self.addr
            ));
        }
        let (access_key, secret_key) = self
            .credentials
            .unwrap_or_else(|| (DEFAULT_ACCESS_KEY.to_owned(), DEFAULT_SECRET_KEY.to_owned()));
        if access_key.is_empty() || secret_key.is_empty() {
            problems.push("access key and secret key must not be empty".to_owned());
        }
        if self.bandwidth == Some(0) {
            problems.push("bandwidth must be at least 1 byte per second".to_owned());
        }
        if self.rate_limit == Some(0) {
            problems.push("rate limit must be at least 1 request per second".to_owned());
        }
        if let Err(e) = self.faults.validate() {
            problems.push(e);
        }
        if self.root.as_os_str().is_empty() {
            problems.push("data directory must not be empty".to_owned());
        }
        if self.max_connections == Some(0) {
            problems.push("the connection limit must be at least 1".to_owned());
        }
        if !problems.is_empty() {
            return Err(Error::InvalidConfig {
                problems: problems.join("; "),
            });
        }
        Ok(ServerConfig {
            root: self.root,
            addr: self.addr,
            access_key,
            secret_key,
            latency: self.latency,
            directory_latency: self.directory_latency,
            bandwidth: self.bandwidth,
            rate_limit: self.rate_limit,
            faults: self.faults,
            min_part_size: self.min_part_size,
            fsync: self.fsync,
            allow_sigv2: self.allow_sigv2,
            timeouts: self.timeouts,
            max_connections: self.max_connections,
            upload_expiry: self.upload_expiry,
            shared_root: self.shared_root,
            session_ttl: self.session_ttl,
        })
    }
}

/// First-byte latency: a fixed delay (`"50ms"`) or one drawn uniformly from a range
/// (`"30ms..120ms"`). Units: `us`, `ms`, `s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencySpec {
    min: Duration,
    max: Duration,
}

impl LatencySpec {
    /// A fixed delay.
    pub fn fixed(delay: Duration) -> Self {
        Self {
            min: delay,
            max: delay,
        }
    }

    /// A delay drawn uniformly from `min..=max`; the bounds are swapped if reversed.
    pub fn uniform(min: Duration, max: Duration) -> Self {
        Self {
            min: min.min(max),
            max: min.max(max),
        }
    }

    /// Shortest delay.
    pub fn min(&self) -> Duration {
        self.min
    }

    /// Longest delay.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// Picks a delay from a uniform random number in `0..=u64::MAX`.
    pub(crate) fn sample(&self, random: u64) -> Duration {
        let span = (self.max - self.min).as_nanos() as u64;
        if span == 0 {
            return self.min;
        }
        let offset = (u128::from(random) * u128::from(span + 1)) >> 64;
        self.min + Duration::from_nanos(offset as u64)
    }
}

impl FromStr for LatencySpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let invalid = || Error::InvalidLatency {
            input: s.to_owned(),
        };
        match s.split_once("..") {
            Some((lo, hi)) => {
                let lo = parse_duration(lo).ok_or_else(invalid)?;
                let hi = parse_duration(hi).ok_or_else(invalid)?;
                if lo > hi {
                    return Err(invalid());
                }
                Ok(Self::uniform(lo, hi))
            }
            None => parse_duration(s).map(Self::fixed).ok_or_else(invalid),
        }
    }
}

impl fmt::Display for LatencySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{:?}", self.min)
        } else {
            write!(f, "{:?}..{:?}", self.min, self.max)
        }
    }
}

/// Parses `"50ms"`, `"1.5s"`, `"200us"`, `"0"`.
fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = s.split_at(split);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit.trim() {
        "us" | "µs" => number / 1e6,
        "ms" => number / 1e3,
        "s" => number,
        _ => return None,
    };
    Duration::try_from_secs_f64(seconds).ok()
}

/// Random fault injection: the fraction of requests answered 500/503, of responses whose
/// connection is reset mid-body, and of responses truncated (Content-Length promised,
/// connection closed early). Parses from `"error=0.01,reset=0.001,truncate=0.001,seed=42"`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultConfig {
    error_rate: f64,
    reset_rate: f64,
    truncate_rate: f64,
    seed: u64,
}

impl FaultConfig {
    /// Fraction of requests failing with 500 InternalError or 503 SlowDown (half each). Default 0.
    pub fn with_error_rate(mut self, rate: f64) -> Self {
        self.error_rate = rate;
        self
    }

    /// Fraction of requests whose connection is reset mid-body. Default 0.
    pub fn with_reset_rate(mut self, rate: f64) -> Self {
        self.reset_rate = rate;
        self
    }

    /// Fraction of responses cut short of their Content-Length. Default 0.
    pub fn with_truncate_rate(mut self, rate: f64) -> Self {
        self.truncate_rate = rate;
        self
    }

    /// Seed of the fault and latency random numbers, for reproducible runs. Default 0.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Fraction of requests answered 500 or 503.
    pub fn error_rate(&self) -> f64 {
        self.error_rate
    }

    /// Fraction of connections reset mid-body.
    pub fn reset_rate(&self) -> f64 {
        self.reset_rate
    }

    /// Fraction of responses truncated.
    pub fn truncate_rate(&self) -> f64 {
        self.truncate_rate
    }

    /// Seed of the random numbers.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub(crate) fn is_active(&self) -> bool {
        self.error_rate > 0.0 || self.reset_rate > 0.0 || self.truncate_rate > 0.0
    }

    fn validate(&self) -> Result<(), String> {
        let rates = [self.error_rate, self.reset_rate, self.truncate_rate];
        if rates.iter().any(|r| !(0.0..=1.0).contains(r)) {
            return Err("fault rates must lie between 0 and 1".to_owned());
        }
        if rates.iter().sum::<f64>() > 1.0 {
            return Err("fault rates must add up to at most 1".to_owned());
        }
        Ok(())
    }
}

impl FromStr for FaultConfig {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let invalid = |reason: &str| Error::InvalidFaults {
            input: s.to_owned(),
            reason: reason.to_owned(),
        };
        let mut config = FaultConfig::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| invalid("expected name=value"))?;
            let rate = || {
                value
                    .trim()
                    .parse::<f64>()
                    .map_err(|_| invalid("rates are numbers between 0 and 1"))
            };
            match name.trim() {
                "error" | "error_rate" => config.error_rate = rate()?,
                "reset" | "reset_rate" => config.reset_rate = rate()?,
                "truncate" | "truncate_rate" => config.truncate_rate = rate()?,
                "seed" => {
                    config.seed = value
                        .trim()
                        .parse()
                        .map_err(|_| invalid("seed is an integer"))?
                }
                _ => return Err(invalid("names are error, reset, truncate and seed")),
            }
        }
        config.validate().map_err(|e| invalid(&e))?;
        Ok(config)
    }
}

impl fmt::Display for FaultConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "error={},reset={},truncate={},seed={}",
            self.error_rate, self.reset_rate, self.truncate_rate, self.seed
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_fixed_and_range() {
        let fixed: LatencySpec = "50ms".parse().unwrap();
        assert_eq!(fixed, LatencySpec::fixed(Duration::from_millis(50)));
        let range: LatencySpec = "30ms..120ms".parse().unwrap();
        assert_eq!(range.min(), Duration::from_millis(30));
        assert_eq!(range.max(), Duration::from_millis(120));
        assert_eq!(
            "1.5s".parse::<LatencySpec>().unwrap().min(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            "250us".parse::<LatencySpec>().unwrap().min(),
            Duration::from_micros(250)
        );
    }

    #[test]
    fn latency_rejects_garbage() {
        for bad in [
            "",
            "ms",
            "50",
            "50 parsecs",
            "120ms..30ms",
            "-5ms",
            "1ms..",
            "..2ms",
        ] {
            assert!(
                bad.parse::<LatencySpec>().is_err(),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn latency_sample_stays_in_range() {
        let spec = LatencySpec::uniform(Duration::from_millis(30), Duration::from_millis(120));
        assert_eq!(spec.sample(0), Duration::from_millis(30));
        assert_eq!(spec.sample(u64::MAX), Duration::from_millis(120));
        let mid = spec.sample(u64::MAX / 2);
        assert!(mid > Duration::from_millis(70) && mid < Duration::from_millis(80));
    }

    #[test]
    fn latency_display_round_trips() {
        for s in ["50ms", "30ms..120ms"] {
            let spec: LatencySpec = s.parse().unwrap();
            assert_eq!(spec.to_string().parse::<LatencySpec>().unwrap(), spec);
        }
    }

    #[test]
    fn faults_parse() {
        let f: FaultConfig = "error=0.1, reset=0.05,truncate=0.01,seed=7"
            .parse()
            .unwrap();
        assert_eq!(f.error_rate(), 0.1);
        assert_eq!(f.reset_rate(), 0.05);
        assert_eq!(f.truncate_rate(), 0.01);
        assert_eq!(f.seed(), 7);
        assert_eq!(f.to_string().parse::<FaultConfig>().unwrap(), f);
        assert!("error=2".parse::<FaultConfig>().is_err());
        assert!("error=0.6,reset=0.6".parse::<FaultConfig>().is_err());
        assert!("boom=0.1".parse::<FaultConfig>().is_err());
    }

    #[test]
    fn build_refuses_non_loopback_and_reports_all_problems() {
        let addr: SocketAddr = "0.0.0.0:9000".parse().unwrap();
        let err = ServerConfig::builder("/tmp/x")
            .with_addr(addr)
            .with_bandwidth(0)
            .build()
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("not loopback"), "{msg}");
        assert!(msg.contains("bandwidth"), "{msg}");
        let ok = ServerConfig::builder("/tmp/x")
            .with_addr(addr)
            .with_allow_non_loopback(true)
            .build();
        assert!(ok.is_ok());
    }

    #[test]
    fn default_credentials_and_display() {
        let config = ServerConfig::builder("/data")
            .with_latency("50ms".parse().unwrap())
            .build()
            .unwrap();
        assert_eq!(config.access_key(), DEFAULT_ACCESS_KEY);
        assert_eq!(config.secret_key(), DEFAULT_SECRET_KEY);
        let banner = config.to_string();
        assert!(
            banner.contains("127.0.0.1:0") && banner.contains("/data") && banner.contains("50ms"),
            "{banner}"
        );
        assert!(!banner.contains(DEFAULT_SECRET_KEY));
        assert!(
            banner.contains("timeouts: header 20s, idle 20s, body 20s"),
            "{banner}"
        );
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let builder = ServerConfig::builder("/data").with_credentials("key", "very-secret-value");
        assert!(!format!("{builder:?}").contains("very-secret-value"));
        let config = builder
            .with_idle_timeout(Duration::ZERO)
            .with_max_connections(0)
            .build();
        assert!(config.unwrap_err().to_string().contains("connection limit"));
        let config = ServerConfig::builder("/data")
            .with_credentials("key", "very-secret-value")
            .with_idle_timeout(Duration::ZERO)
            .build()
            .unwrap();
        assert!(!format!("{config:?}").contains("very-secret-value"));
        assert!(config.to_string().contains("idle off"), "{config}");
    }
}
