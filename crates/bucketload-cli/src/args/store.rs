//! Global store flags, shared by every data command, named like the store crate's settings.
//!
//! Anything not given on the command line comes from the environment as
//! [`StoreConfig::from_env`] reads it (AWS_* variables, profiles).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bucketload::base::Location;
use bucketload_store::object_store::path::Path;
use bucketload_store::{Addressing, RetryMode, Scheme, Store, StoreConfig, key_path};
use clap::Args;

/// Flags that configure how stores are reached.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Store options (every command)")]
pub struct StoreArgs {
    /// S3 endpoint URL, e.g. http://127.0.0.1:9000 [env: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL]
    #[arg(long, global = true, value_name = "URL")]
    pub endpoint: Option<String>,
    /// Region [env: AWS_REGION, AWS_DEFAULT_REGION; default us-east-1]
    #[arg(long, global = true)]
    pub region: Option<String>,
    /// Named profile of ~/.aws/credentials and ~/.aws/config [env: AWS_PROFILE]
    #[arg(long, global = true)]
    pub profile: Option<String>,
    /// Bucket addressing: path, virtual or auto (path-style for custom endpoints)
    #[arg(long, global = true, value_parser = parse_addressing)]
    pub addressing: Option<Addressing>,
    /// Send unsigned requests (public buckets)
    #[arg(long, global = true)]
    pub no_sign_request: bool,
    /// Part size of ranged GETs and multipart uploads, e.g. 8MiB [default: 8MiB]
    #[arg(long, global = true, value_parser = parse_part_size, value_name = "SIZE")]
    pub part_size: Option<u64>,
    /// Requests in flight [default: 64]
    #[arg(long, global = true, value_name = "N")]
    pub concurrency: Option<usize>,
    /// Retries of a failed request [default: AWS_MAX_ATTEMPTS less one, else as many as
    /// --retry-timeout allows]
    #[arg(long, global = true, value_name = "N")]
    pub max_retries: Option<usize>,
    /// Give up retrying a request after this long, e.g. 30s [default: 60s]
    #[arg(long, global = true, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub retry_timeout: Option<Duration>,
    /// How failed requests are retried: standard (backoff with jitter) or adaptive (also slow
    /// down while the store throttles) [default: AWS_RETRY_MODE, else standard]
    #[arg(long, global = true, value_parser = parse_retry_mode, value_name = "MODE")]
    pub retry_mode: Option<RetryMode>,
    /// TCP connect timeout, e.g. 5s [default: 5s]
    #[arg(long, global = true, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub connect_timeout: Option<Duration>,
    /// Sign request bodies with SigV4 (their SHA-256) instead of sending UNSIGNED-PAYLOAD;
    /// for plain-HTTP endpoints on untrusted networks
    #[arg(long, global = true)]
    pub sign_payload: bool,
    /// Print each store's request metrics (counts, bytes, retries, latency, cost) on stderr at the end
    #[arg(long, global = true)]
    pub metrics: bool,
    /// Price requests with this JSON price table instead of S3 Standard's (see docs/METRICS.md)
    #[arg(long, global = true, value_name = "FILE")]
    pub price_table: Option<std::path::PathBuf>,
}

/// The store flags, as clap arguments.
pub fn args() -> Vec<clap::Arg> {
    use clap::Args as _;
    StoreArgs::augment_args(clap::Command::new("store"))
        .get_arguments()
        .cloned()
        .collect()
}

/// Parses `standard` or `adaptive`.
fn parse_retry_mode(s: &str) -> Result<RetryMode, String> {
    s.parse()
        .map_err(|e: bucketload_store::Error| e.to_string())
}

/// Parses a size with the store crate's rules ("100KB", "256MiB", "4096").
pub fn parse_size(s: &str) -> Result<u64, String> {
    bucketload_store::parse_size(s).map_err(|e| e.to_string())
}

/// A part size: at least one byte (S3 wants 5 MiB for multipart parts but other servers less).
fn parse_part_size(s: &str) -> Result<u64, String> {
    match parse_size(s)? {
        0 => Err("a part holds at least one byte, e.g. 8MiB".to_owned()),
        n => Ok(n),
    }
}

fn parse_addressing(s: &str) -> Result<Addressing, String> {
    s.parse::<Addressing>().map_err(|e| e.to_string())
}

impl StoreArgs {
    /// The store configuration: environment first, flags on top.
    pub fn config(&self) -> StoreConfig {
        let mut c = StoreConfig::from_env();
        if let Some(v) = &self.endpoint {
            c = c.with_endpoint(v.clone());
        }
        if let Some(v) = &self.region {
            c = c.with_region(v.clone());
        }
        if let Some(v) = &self.profile {
            c = c.with_profile(v.clone());
        }
        if let Some(v) = self.addressing {
            c = c.with_addressing(v);
        }
        if self.no_sign_request {
            c = c.with_anonymous(true);
        }
        if self.sign_payload {
            c = c.with_sign_payload(true);
        }
        self.apply_limits(c)
    }

    fn apply_limits(&self, mut c: StoreConfig) -> StoreConfig {
        if let Some(v) = self.part_size {
            c = c.with_part_size(v);
        }
        if let Some(v) = self.concurrency {
            c = c.with_concurrency(v);
        }
        if let Some(v) = self.max_retries {
            c = c.with_max_retries(v);
        }
        if let Some(v) = self.retry_timeout {
            c = c.with_retry_timeout(v);
        }
        if let Some(v) = self.retry_mode {
            c = c.with_retry_mode(v);
        }
        if let Some(v) = self.connect_timeout {
            c = c.with_connect_timeout(v);
        }
        c
    }
}

/// Opens `uri` as a directory-like location (keys below it).
pub fn open_dir(uri: &str, config: &StoreConfig) -> anyhow::Result<(Store, Location)> {
    // The store's error already names the URI and lists the accepted forms.
    let store = Store::open(uri, config)?;
    crate::metrics::register(&store);
    let location = Location::from_store(&store);
    Ok((store, location))
}

/// Opens the parent of `uri` and returns the key of the last path component, for single objects.
pub fn open_object(uri: &str, config: &StoreConfig) -> anyhow::Result<(Store, Location, Path)> {
    let (parent, name) = split_last(uri);
    if name.is_empty() {
        let message = format!("{uri} names a directory, not an object; add --recursive");
        return Err(bucketload::Error::invalid_input(message).into());
    }
    let (store, location) = open_dir(parent, config)?;
    if store.uri().scheme() == Scheme::S3 {
        // The key as written: `s3://b/a//x.pt` is `a//x.pt`, not the `x.pt` of folder `a/`.
        let rest = uri.split_once("://").map_or(uri, |(_, rest)| rest);
        let key = rest.split_once('/').map_or("", |(_, key)| key);
        if bucketload_store::unspellable(key).is_some() {
            let root = Store::open(&store.uri().root(), config)?;
            let object = root.object(key)?;
            let endpoint = config.endpoint().unwrap_or("the AWS S3 endpoint");
            let location = Location::new(Arc::clone(object.store()), object.uri(), endpoint);
            // The store of one exact key takes any path for it; the empty one names it whole.
            return Ok((root, location, Path::default()));
        }
    }
    Ok((store, location, key_path(name)))
}

/// Splits `s3://b/a/b.jpg` into (`s3://b/a`, `b.jpg`) and `./x.jpg` into (`.`, `x.jpg`).
pub fn split_last(uri: &str) -> (&str, &str) {
    match uri.rfind('/') {
        // Keep `scheme://` and a leading `/` whole.
        Some(i) if uri[..i].ends_with(':') || uri[..i].ends_with(":/") => (uri, ""),
        Some(0) => ("/", &uri[1..]),
        Some(i) => (&uri[..i], &uri[i + 1..]),
        None => (".", uri),
    }
}

/// Whether `gen` and `cp` create a missing bucket: always with `--create-bucket`, and by
/// default when the endpoint is on this machine (the embedded server, or any local dev server),
/// where creating a bucket is harmless. Never for AWS itself without the flag.
pub fn should_create_bucket(flag: bool, config: &StoreConfig) -> bool {
    flag || config.endpoint().is_some_and(is_loopback_url)
}

/// Creates the bucket (or local folder) when allowed, see [`should_create_bucket`].
pub async fn prepare_destination(
    store: &Store,
    config: &StoreConfig,
    flag: bool,
) -> anyhow::Result<()> {
    let scheme = store.uri().scheme();
    if scheme == Scheme::File || (scheme == Scheme::S3 && should_create_bucket(flag, config)) {
        store
            .create_bucket()
            .await
            .with_context(|| format!("cannot create the bucket of {store}"))?;
    }
    Ok(())
}

fn is_loopback_url(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host_port = rest.split('/').next().unwrap_or("");
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `--manifest-format`: `1` (JSON) or `2` (binary).
pub fn parse_manifest_format(
    s: &str,
) -> Result<bucketload::shards::format::ManifestFormat, String> {
    s.parse::<u32>()
        .ok()
        .and_then(bucketload::shards::format::ManifestFormat::from_version)
        .ok_or_else(|| format!("{s:?} is not a manifest format; use 1 (JSON) or 2 (binary)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_last_keeps_scheme_and_root() {
        assert_eq!(split_last("s3://b/a/x.jpg"), ("s3://b/a", "x.jpg"));
        assert_eq!(split_last("s3://b/x.jpg"), ("s3://b", "x.jpg"));
        assert_eq!(split_last("s3://b"), ("s3://b", ""));
        assert_eq!(split_last("/x.jpg"), ("/", "x.jpg"));
        assert_eq!(split_last("x.jpg"), (".", "x.jpg"));
        assert_eq!(split_last("file:///tmp/x"), ("file:///tmp", "x"));
        assert_eq!(split_last("s3://b/dir/"), ("s3://b/dir", ""));
    }

    #[test]
    fn loopback_endpoints_are_recognised() {
        assert!(is_loopback_url("http://127.0.0.1:9000"));
        assert!(is_loopback_url("http://localhost:9000/"));
        assert!(is_loopback_url("http://[::1]:9000"));
        assert!(!is_loopback_url("https://s3.us-east-1.amazonaws.com"));
        assert!(!is_loopback_url("http://10.0.0.1:9000"));
    }
}
