//! [`Store`]: a URI opened into a metered, concurrency-limited `ObjectStore`.
//!
//! Layers, outermost first: `PrefixStore` (keys relative to the URI's
//! prefix) → `LimitStore` (requests in flight) → [`MeteredStore`] → the
//! backend (S3/GCS/Azure with the counting HTTP connector, local files, or a
//! named in-process memory store).

use crate::config::{Addressing, FIRST_BACKOFF, MAX_BACKOFF, RetryMode, StoreConfig};
use crate::error::ErrorContext;
use crate::express::Express;
use crate::http::MeteredConnector;
use crate::metered::MeteredStore;
use crate::metrics::Metrics;
use crate::pacing::Link;
use crate::uri::{Scheme, StoreUri};
use crate::{ETag, Error};
use object_store::StaticCredentialProvider;
use object_store::aws::{AmazonS3Builder, AwsCredential, AwsCredentialProvider};
use object_store::azure::MicrosoftAzureBuilder;
use object_store::client::{HttpClient, HttpConnector};
use object_store::gcp::{GcpCredential, GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::limit::LimitStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// An opened store URI: the `ObjectStore` to use, its metrics and config.
///
/// Cheap to clone; clones share the connection pool and the metrics.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    uri: StoreUri,
    config: StoreConfig,
    store: Arc<dyn ObjectStore>,
    metrics: Metrics,
    link: Arc<Link>,
    endpoint: Option<String>,
    /// The URI's key prefix as written, as a folder (empty or ending in `/`): see
    /// [`Store::object`].
    key_folder: String,
    /// Whether `store`'s paths are relative to `key_folder` itself (else it is
    /// [`Refused`](crate::keys::Refused)).
    prefix_spelled: bool,
    /// The credentials of an S3 store's requests, object_store's and ours alike; `None` for
    /// anonymous and non-S3 stores.
    credentials: Option<AwsCredentialProvider>,
    /// The client of the exact-key requests ([`Store::exact_key`]), made at the first.
    exact_client: OnceLock<HttpClient>,
    /// For a directory bucket (S3 Express One Zone), the sessions every request is signed
    /// with; `None` for other buckets and for unsigned requests.
    express: Option<Arc<Express>>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("uri", &self.inner.uri.to_string())
            .field("endpoint", &self.inner.endpoint)
            .field("config", &self.inner.config)
            .finish()
    }
}

impl fmt::Display for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner.endpoint {
            Some(e) => write!(f, "{} ({e})", self.inner.uri),
            None => write!(f, "{}", self.inner.uri),
        }
    }
}

/// Named memory stores of this process, so `mem://name` is shared.
fn memory_store(name: &str) -> Arc<InMemory> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<InMemory>>>> = OnceLock::new();
    let mut stores = STORES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    Arc::clone(stores.entry(name.to_owned()).or_default())
}

impl Store {
    /// Opens `uri`: `s3://bucket[/prefix]`, `gs://`, `az://`, `file:///abs`,
    /// a local path, or `mem://[name]`. No request is sent.
    pub fn open(uri: &str, config: &StoreConfig) -> Result<Store, Error> {
        let parsed = StoreUri::parse(uri)?;
        let metrics = Metrics::new();
        let link = Arc::new(Link::new(config.retry_mode() == RetryMode::Adaptive));
        let connector = || MeteredConnector::new(metrics.clone(), Arc::clone(&link));
        let invalid = |e: object_store::Error| Error::InvalidUri {
            uri: uri.to_owned(),
            reason: format!("cannot configure the store: {e}"),
        };
        if parsed.scheme() == Scheme::S3 {
            check_endpoint(config)?;
        }
        let credentials = match parsed.scheme() {
            Scheme::S3 if !config.anonymous() => Some(s3_credentials(config).map_err(invalid)?),
            _ => None,
        };
        let express = match (parsed.scheme(), &credentials) {
            (Scheme::S3, Some(provider)) if directory_zone(&parsed).is_some() => {
                let url = crate::bucket::bucket_url_of(config, parsed.bucket());
                let express = Express::new(
                    parsed.bucket(),
                    &url,
                    config.region(),
                    config.sign_payload(),
                    Arc::clone(provider),
                )
                .map_err(|reason| Error::InvalidUri {
                    uri: uri.to_owned(),
                    reason,
                })?;
                Some(Arc::new(express))
            }
            _ => None,
        };
        let (backend, prefix): (Arc<dyn ObjectStore>, &str) = match parsed.scheme() {
            Scheme::S3 => {
                let connector = connector().with_express(express.clone());
                let s3 = s3(&parsed, config, connector, credentials.clone()).map_err(invalid)?;
                (Arc::new(s3), parsed.prefix())
            }
            Scheme::Gcs => {
                let vars = config.env_vars();
                let settings = crate::cloud_env::gcs(vars);
                // Without any credential source object_store would wait on the metadata
                // server; off Google Cloud, say at once what to set.
                if !settings.unsigned
                    && !config.anonymous()
                    && !crate::cloud_env::gcs_has_credentials(vars)
                    && !crate::cloud_env::gce_metadata_reachable(vars)
                {
                    return Err(Error::PermissionDenied {
                        uri: uri.to_owned(),
                        hint: crate::cloud_env::GCS_NO_CREDENTIALS.into(),
                        source: "no credential source".into(),
                    });
                }
                (
                    Arc::new(gcs(&parsed, config, connector()).map_err(invalid)?),
                    parsed.prefix(),
                )
            }
            Scheme::Azure => (
                Arc::new(azure(&parsed, config, connector()).map_err(invalid)?),
                parsed.prefix(),
            ),
            Scheme::File => (Arc::new(LocalFileSystem::new()), parsed.prefix()),
            Scheme::Memory => (memory_store(parsed.bucket()), parsed.prefix()),
        };
        let limited = LimitStore::new(
            MeteredStore::new(backend, metrics.clone()),
            config.concurrency().max(1),
        );
        let key_folder = match parsed.scheme() {
            Scheme::S3 => crate::keys::written_folder(uri),
            _ if prefix.is_empty() => String::new(),
            _ => format!("{prefix}/"),
        };
        // The folder's paths: `Path::from` would percent-encode `ü` or `#` and drop an empty
        // segment, addressing other keys than the ones the user wrote.
        let folder = key_folder.strip_suffix('/').unwrap_or_default();
        let spelled = crate::keys::spelled(folder);
        let store: Arc<dyn ObjectStore> = match (&spelled, parsed.scheme()) {
            _ if folder.is_empty() => Arc::new(limited),
            (Some(path), _) => Arc::new(PrefixStore::new(limited, path.clone())),
            (None, Scheme::File | Scheme::Memory) => {
                Arc::new(PrefixStore::new(limited, crate::key_path(folder)))
            }
            (None, _) => Arc::new(crate::keys::Refused {
                reason: format!(
                    "the prefix `{folder}` {}, so bucketload can address objects below it \
                     only one by one (checkpoints, `cp` of one object), not list, generate or \
                     load a dataset there; use a prefix without it",
                    crate::keys::unspellable(folder).unwrap_or("cannot be spelled")
                ),
            }),
        };
        let prefix_spelled = folder.is_empty() || spelled.is_some();
        let endpoint = (parsed.scheme() == Scheme::S3)
            .then(|| config.endpoint().map(str::to_owned))
            .flatten();
        tracing::debug!(uri = %parsed, ?endpoint, "store opened");
        Ok(Store {
            inner: Arc::new(Inner {
                uri: parsed,
                config: config.clone(),
                store,
                metrics,
                link,
                endpoint,
                key_folder,
                prefix_spelled,
                credentials,
                exact_client: OnceLock::new(),
                express,
            }),
        })
    }

    /// The credentials to sign this store's own requests with (CreateBucket and the
    /// multipart-upload listing and abort): the same provider object_store signs with, so
    /// temporary credentials are shared and refreshed once. `None` when requests go unsigned.
    pub(crate) async fn signing_credential(&self) -> Result<Option<Arc<AwsCredential>>, Error> {
        let Some(provider) = &self.inner.credentials else {
            return Ok(None);
        };
        match provider.get_credential().await {
            Ok(c) => Ok(Some(c)),
            Err(e) => Err(self.error_context(&Path::default()).map(e)),
        }
    }

    /// The parsed URI.
    pub fn uri(&self) -> &StoreUri {
        &self.inner.uri
    }

    /// The metered store; paths are relative to the URI's prefix.
    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        Arc::clone(&self.inner.store)
    }

    /// The counters of every request made through this store.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// `etag` spelled as this store's `If-Match` expects it: in double quotes, as every
    /// backend (S3, GCS, Azure, and object_store's local and memory stores, which compare the
    /// condition with their own quoted spelling as a string) sends and expects it.
    pub fn if_match(&self, etag: &ETag) -> String {
        etag.quoted()
    }

    /// The full URI of `key`, for messages.
    pub fn object_uri(&self, key: &Path) -> String {
        match (key.as_ref(), self.inner.uri.scheme()) {
            ("", _) => self.inner.uri.join(""),
            // The prefix as written: below `s3://b/a//` the object `x` is `s3://b/a//x`.
            (key, Scheme::S3) => format!("{}{}{key}", self.inner.uri.root(), self.key_folder()),
            (key, _) => self.inner.uri.join(key),
        }
    }

    /// The URI's key prefix as written, as a folder: empty or ending in `/`.
    pub fn key_folder(&self) -> &str {
        &self.inner.key_folder
    }

    /// Whether [`Store::object_store`]'s paths are relative to [`Store::key_folder`]: false
    /// for an S3 prefix object_store cannot spell (`a//c`), whose store refuses every
    /// request.
    pub(crate) fn prefix_spelled(&self) -> bool {
        self.inner.prefix_spelled
    }

    /// Maps an error about the object at `uri` (its full URI) into an [`Error`] naming it.
    pub fn map_error_at(&self, err: object_store::Error, uri: &str) -> Error {
        let mut context = self.error_context(&Path::default());
        context.uri = uri.to_owned();
        context.map(err)
    }

    /// Maps an error from [`Store::object_store`] about `key` into an
    /// [`Error`] naming the object and what to do.
    pub fn map_error(&self, err: object_store::Error, key: &Path) -> Error {
        self.error_context(key).map(err)
    }

    fn error_context(&self, key: &Path) -> ErrorContext {
        ErrorContext {
            uri: self.object_uri(key),
            endpoint: self.endpoint_display(),
            root: self.inner.uri.root(),
            has_credentials: self.inner.config.anonymous()
                || self.inner.config.has_credentials()
                || self.inner.uri.scheme() != Scheme::S3,
        }
    }

    fn endpoint_display(&self) -> String {
        let region = self.inner.config.region();
        match (&self.inner.endpoint, self.inner.uri.scheme()) {
            (Some(e), _) => e.clone(),
            (None, Scheme::S3) if let Some(zone) = self.directory_zone() => {
                let url = crate::express::zonal_endpoint(self.inner.uri.bucket(), zone, region);
                url.trim_start_matches("https://").to_owned()
            }
            (None, Scheme::S3) => format!("s3.{}.amazonaws.com", self.inner.config.region()),
            (None, s) => s.as_str().to_owned(),
        }
    }

    /// Creates the bucket unless it exists. For `s3` this sends a signed
    /// HeadBucket and, only when that finds no usable bucket, CreateBucket: an
    /// existing bucket the credentials may use is never an error, whoever
    /// created it. A name taken by another account is
    /// [`Error::PermissionDenied`]. `file` creates the directory; other
    /// schemes have nothing to create.
    pub async fn create_bucket(&self) -> Result<(), Error> {
        match self.inner.uri.scheme() {
            Scheme::S3 => crate::bucket::create(self, &self.http_client()?).await,
            Scheme::File => {
                let dir = self.inner.uri.local_dir().unwrap_or_default();
                tokio::fs::create_dir_all(&dir)
                    .await
                    .map_err(|e| Error::Other {
                        uri: self.inner.uri.to_string(),
                        message: "cannot create the directory".to_owned(),
                        source: Box::new(e),
                    })
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn http_client(&self) -> Result<HttpClient, Error> {
        let options = client_options(&self.inner.config);
        MeteredConnector::new(self.inner.metrics.clone(), Arc::clone(&self.inner.link))
            .with_express(self.inner.express.clone())
            .connect(&options)
            .map_err(|e| Error::Other {
                uri: self.inner.uri.to_string(),
                message: "cannot build an HTTP client".to_owned(),
                source: Box::new(e),
            })
    }

    /// The HTTP client of [`Store::exact_key`]'s requests, which sends paths exactly as
    /// encoded; shared by every exact key of the store, so its connections are reused.
    pub(crate) fn exact_http_client(&self) -> Result<HttpClient, Error> {
        if let Some(client) = self.inner.exact_client.get() {
            return Ok(client.clone());
        }
        let client =
            MeteredConnector::new(self.inner.metrics.clone(), Arc::clone(&self.inner.link))
                .with_express(self.inner.express.clone())
                .connect_exact(&self.inner.config)
                .map_err(|message| Error::InvalidInput {
                    message: format!("{}: cannot build an HTTP client: {message}", self.inner.uri),
                })?;
        Ok(self.inner.exact_client.get_or_init(|| client).clone())
    }

    /// Reads `key` as parallel ranged GETs (see [`get_parallel`](crate::get_parallel));
    /// errors carry the object's full URI.
    pub fn get_parallel(
        &self,
        key: &Path,
        opts: crate::ParallelGet,
    ) -> futures::stream::BoxStream<'static, Result<bytes::Bytes, Error>> {
        crate::parallel::parallel(
            self.object_store(),
            key.clone(),
            opts,
            Arc::new(self.error_context(key)),
        )
    }

    /// A [`MultipartWriter`](crate::MultipartWriter) for `key` with the
    /// configured part size; errors carry the object's full URI.
    pub fn writer(&self, key: &Path, concurrency: usize) -> crate::MultipartWriter {
        let opts = crate::MultipartOptions {
            part_size: self.inner.config.part_size(),
            concurrency,
        };
        crate::MultipartWriter::new(self.object_store(), key.clone(), opts)
            .with_context(self.error_context(key))
            .with_store(self)
    }

    pub(crate) fn endpoint(&self) -> Option<&str> {
        self.inner.endpoint.as_deref()
    }

    /// The zone ID of an S3 directory bucket (S3 Express One Zone, `base--zone-id--x-s3`);
    /// `None` for other buckets and schemes.
    pub(crate) fn directory_zone(&self) -> Option<&str> {
        directory_zone(&self.inner.uri)
    }
}

/// The zone ID of the directory bucket `uri` names, if it is one.
fn directory_zone(uri: &StoreUri) -> Option<&str> {
    match uri.scheme() {
        Scheme::S3 => crate::express::zone_of(uri.bucket()),
        _ => None,
    }
}

fn client_options(config: &StoreConfig) -> ClientOptions {
    let http = config.endpoint().is_some_and(|e| e.starts_with("http://"));
    ClientOptions::new()
        .with_allow_http(http)
        // Keep an idle connection per request in flight so bursts reuse them.
        .with_pool_max_idle_per_host(config.concurrency().max(1))
        .with_connect_timeout(config.connect_timeout())
}

/// Exponential backoff with "decorrelated jitter" (each wait drawn between the first wait and
/// three times the previous one, capped), as the AWS SDKs back off.
pub(crate) fn backoff_config() -> BackoffConfig {
    BackoffConfig {
        init_backoff: FIRST_BACKOFF,
        max_backoff: MAX_BACKOFF,
        base: 3.0,
    }
}

/// The wait after one of `last`: decorrelated jitter, between the first wait and three times
/// the last one, capped.
pub(crate) fn next_backoff(last: Duration) -> Duration {
    let config = backoff_config();
    let first = config.init_backoff.as_secs_f64();
    let next = rand::random_range(first..=(last.as_secs_f64() * config.base).max(first));
    Duration::from_secs_f64(next).min(config.max_backoff)
}

fn retry_config(config: &StoreConfig) -> RetryConfig {
    RetryConfig {
        backoff: backoff_config(),
        max_retries: config.max_retries(),
        retry_timeout: config.retry_timeout(),
    }
}

/// Refuses an endpoint the S3 client cannot use, with what to write instead (object_store
/// would panic on it at the first request): one without `http://` or `https://`, and an IP
/// address or `localhost` with virtual-hosted addressing (the bucket would become part of it).
fn check_endpoint(config: &StoreConfig) -> Result<(), Error> {
    let Some(endpoint) = config.endpoint() else {
        return Ok(());
    };
    let invalid = |message: String| Err(Error::InvalidInput { message });
    let parsed = url::Url::parse(endpoint);
    let has_scheme = ["http://", "https://"].iter().any(|p| {
        endpoint
            .get(..p.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(p))
    });
    let host = parsed
        .as_ref()
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .and_then(|u| u.host());
    let Some(host) = host else {
        if has_scheme {
            let why = parsed.err().map_or("no host".to_owned(), |e| e.to_string());
            return invalid(format!(
                "endpoint `{endpoint}` is not a valid URL ({why}): write it as \
                 http://host:port, e.g. --endpoint http://127.0.0.1:9000"
            ));
        }
        let bare = endpoint
            .split_once("://")
            .map_or(endpoint, |(_, rest)| rest);
        let bare = bracket_ipv6(bare);
        return invalid(format!(
            "endpoint `{endpoint}` is not an http:// or https:// URL: write \
             --endpoint http://{bare} (or https://{bare})"
        ));
    };
    if !endpoint.starts_with("http://") && !endpoint.starts_with("https://") {
        // The HTTP client refuses `HTTP://`.
        let (scheme, rest) = endpoint.split_once("://").unwrap_or(("http", endpoint));
        return invalid(format!(
            "endpoint `{endpoint}`: write the scheme in lower case: {}://{rest}",
            scheme.to_ascii_lowercase()
        ));
    }
    if !endpoint.is_ascii() {
        // The HTTP client takes the host as written: an international name must be punycode.
        let ascii = parsed
            .as_ref()
            .map_or("", |u| u.as_str().trim_end_matches('/'));
        return invalid(format!(
            "endpoint `{endpoint}` is not ASCII: write the host name in punycode, \
             --endpoint {ascii}"
        ));
    }
    let ip_or_local = match host {
        url::Host::Domain(name) => name == "localhost",
        url::Host::Ipv4(_) | url::Host::Ipv6(_) => true,
    };
    if ip_or_local && config.addressing() == Addressing::VirtualHosted {
        return invalid(format!(
            "endpoint `{endpoint}` is an IP address or localhost, which cannot take the bucket \
             in its host name as virtual-hosted addressing needs: use --addressing path"
        ));
    }
    Ok(())
}

/// `::1:9000` as a URL wants it, `[::1]:9000`: an IPv6 address with a port needs brackets.
fn bracket_ipv6(host_port: &str) -> String {
    match host_port.rsplit_once(':') {
        Some((host, port)) if host.contains(':') && !host.starts_with('[') => {
            format!("[{host}]:{port}")
        }
        _ => host_port.to_owned(),
    }
}

/// `http://host:port` with the bucket as the first host label.
pub(crate) fn virtual_hosted(endpoint: &str, bucket: &str) -> String {
    match endpoint.split_once("://") {
        Some((scheme, rest)) => format!("{scheme}://{bucket}.{rest}"),
        None => format!("https://{bucket}.{endpoint}"),
    }
}

/// The credential provider of an S3 store: the source the configuration names (see
/// [`StoreConfig::credential_source`]); nothing is fetched yet.
fn s3_credentials(config: &StoreConfig) -> object_store::Result<AwsCredentialProvider> {
    let source = config.credential_source();
    tracing::debug!(source = %source.describe(), "credential source");
    // object_store's instance metadata provider, taken from a client that is never used.
    let instance_metadata = || -> object_store::Result<AwsCredentialProvider> {
        let s3 = AmazonS3Builder::new()
            .with_bucket_name("instance-metadata")
            .with_region(config.region())
            .with_client_options(client_options(config))
            .with_retry(retry_config(config))
            .build()?;
        Ok(Arc::clone(s3.credentials()))
    };
    let context = crate::credentials::Context {
        region: config.region(),
        sts_endpoint: config.sts_endpoint(),
        instance_metadata: &instance_metadata,
    };
    crate::credentials::provider(&source, &context)
}

fn s3(
    uri: &StoreUri,
    config: &StoreConfig,
    connector: MeteredConnector,
    credentials: Option<AwsCredentialProvider>,
) -> object_store::Result<impl ObjectStore> {
    let mut b = AmazonS3Builder::new()
        .with_bucket_name(uri.bucket())
        .with_region(config.region())
        .with_client_options(client_options(config))
        .with_retry(retry_config(config))
        .with_unsigned_payload(!config.sign_payload())
        .with_http_connector(connector);
    if config.checksums() {
        b = b.with_checksum_algorithm(object_store::aws::Checksum::CRC64NVME);
    }
    let virtual_hosted_style = config.addressing() == Addressing::VirtualHosted;
    b = b.with_virtual_hosted_style_request(virtual_hosted_style);
    let zone = directory_zone(uri);
    if let (Some(zone), None) = (zone, config.endpoint()) {
        // AWS's zonal endpoint, which takes virtual-hosted requests only.
        let zonal = crate::express::zonal_endpoint(uri.bucket(), zone, config.region());
        b = b
            .with_virtual_hosted_style_request(true)
            .with_endpoint(zonal);
    } else if let Some(endpoint) = config.endpoint() {
        let endpoint = endpoint.trim_end_matches('/');
        b = match virtual_hosted_style {
            true => b.with_endpoint(virtual_hosted(endpoint, uri.bucket())),
            false => b.with_endpoint(endpoint),
        };
        b = b.with_allow_http(endpoint.starts_with("http://"));
    }
    match credentials {
        // A directory bucket's requests are signed with its sessions by the connector
        // (`crate::express`): object_store's own S3 Express support would send CreateSession
        // to AWS whatever the endpoint.
        Some(provider) if zone.is_none() => b = b.with_credentials(provider),
        _ => b = b.with_skip_signature(true),
    }
    b.build()
}

fn gcs(
    uri: &StoreUri,
    config: &StoreConfig,
    connector: MeteredConnector,
) -> object_store::Result<impl ObjectStore> {
    let vars = config.env_vars();
    let settings = crate::cloud_env::gcs(vars);
    let mut b = GoogleCloudStorageBuilder::new();
    let mut env: Vec<(&String, &String)> = vars.iter().collect();
    env.sort();
    for (k, v) in env {
        if k.starts_with("GOOGLE_")
            && let Ok(key) = k.to_ascii_lowercase().parse()
        {
            b = b.with_config(key, v);
        }
    }
    if let Some(url) = &settings.base_url {
        b = b.with_base_url(url);
    }
    if settings.unsigned || config.anonymous() {
        // No token is fetched (object_store would ask the metadata server for one even
        // when told to skip signing).
        b = b
            .with_config(GoogleConfigKey::SkipSignature, "true")
            .with_credentials(Arc::new(StaticCredentialProvider::new(GcpCredential {
                bearer: String::new(),
            })));
    }
    b.with_bucket_name(uri.bucket())
        .with_client_options(client_options(config).with_allow_http(settings.allow_http))
        .with_retry(retry_config(config))
        .with_http_connector(connector)
        .build()
}

fn azure(
    uri: &StoreUri,
    config: &StoreConfig,
    connector: MeteredConnector,
) -> object_store::Result<impl ObjectStore> {
    let vars = config.env_vars();
    // The connection string first, the explicit variables over it, the URI's account last.
    let mut pairs = crate::cloud_env::azure_connection_string(vars);
    let mut env: Vec<(String, String)> = vars
        .iter()
        .filter(|(k, _)| k.starts_with("AZURE_") && *k != "AZURE_STORAGE_CONNECTION_STRING")
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect();
    env.sort();
    pairs.extend(env);
    if let Some(account) = uri.account() {
        pairs.push(("azure_storage_account_name".to_owned(), account.to_owned()));
    }
    let allow_http = crate::cloud_env::azure_allow_http(&pairs);
    let mut b = MicrosoftAzureBuilder::new();
    for (k, v) in &pairs {
        if let Ok(key) = k.parse() {
            b = b.with_config(key, v);
        }
    }
    b.with_container_name(uri.bucket())
        .with_client_options(client_options(config).with_allow_http(allow_http))
        .with_retry(retry_config(config))
        .with_http_connector(connector)
        .build()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;

    /// Endpoints the S3 client would panic on or refuse are refused here, saying what to write.
    #[test]
    fn unusable_endpoints_say_what_to_write() {
        let refused = |endpoint: &str| {
            let config = StoreConfig::default().with_endpoint(endpoint);
            match check_endpoint(&config) {
                Err(Error::InvalidInput { message }) => message,
                other => panic!("{endpoint}: {other:?}"),
            }
        };
        assert!(refused("http://\u{fc}n\u{ef}.example:9000").contains("http://xn--"));
        assert!(refused("HTTP://127.0.0.1:9000").contains("lower case: http://127.0.0.1:9000"));
        assert!(refused("::1:9000").contains("http://[::1]:9000"));
        assert!(refused("http://[::1]:port").contains("not a valid URL"));
        assert!(refused("http://").contains("not a valid URL"));
        let fine = StoreConfig::default().with_endpoint("http://[::1]:9000");
        assert!(check_endpoint(&fine).is_ok());
    }

    #[tokio::test]
    async fn if_match_is_spelled_as_local_and_memory_stores_expect() {
        let dir = tempfile::tempdir().unwrap();
        let local = format!("file://{}", dir.path().display());
        for uri in ["mem://if-match-test/p", local.as_str()] {
            let store = Store::open(uri, &StoreConfig::default()).unwrap();
            let (os, key) = (store.object_store(), Path::from("k"));
            os.put(&key, "v".into()).await.unwrap();
            let meta = os.head(&key).await.unwrap();
            let etag = ETag::from_store(meta.e_tag.as_deref()).unwrap();
            let options = object_store::GetOptions {
                if_match: Some(store.if_match(&etag)),
                ..Default::default()
            };
            os.get_opts(&key, options).await.unwrap();
        }
    }

    #[test]
    fn display_names_endpoint() {
        let c = StoreConfig::default().with_endpoint("http://127.0.0.1:9000");
        let s = Store::open("s3://bkt/pre", &c).unwrap();
        assert_eq!(s.to_string(), "s3://bkt/pre (http://127.0.0.1:9000)");
        assert_eq!(s.object_uri(&Path::from("a/b")), "s3://bkt/pre/a/b");
        assert_eq!(virtual_hosted("http://h:1", "b"), "http://b.h:1");
    }

    #[test]
    fn cloud_schemes_open_without_network() {
        let c = StoreConfig::default();
        let gs = Store::open("gs://bkt/p", &c).unwrap();
        assert_eq!(gs.to_string(), "gs://bkt/p");
        let err = Store::open("az://container", &c).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("invalid store uri `az://container`: cannot configure"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn named_memory_stores_are_shared() {
        let a = Store::open("mem://shared-test/p", &StoreConfig::default()).unwrap();
        let b = Store::open("mem://shared-test", &StoreConfig::default()).unwrap();
        a.object_store()
            .put(&Path::from("k"), "v".into())
            .await
            .unwrap();
        let got = b.object_store().get(&Path::from("p/k")).await.unwrap();
        assert_eq!(got.bytes().await.unwrap(), "v");
        assert_eq!(a.metrics().snapshot().requests.put, 1);
        assert_eq!(b.metrics().snapshot().requests.get, 1);
    }
}
