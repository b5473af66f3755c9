//! Object storage for bucketload: URIs to metered `ObjectStore`s, parallel
//! ranged reads and concurrent multipart writes.
//!
//! Reach for [`Store`]: open a URI (`s3://bucket/prefix`, `gs://`, `az://`,
//! `file:///path`, a local path or `mem://name`) with a [`StoreConfig`]
//! (from the AWS environment and profile files, overridable by `with_*`
//! setters), then use [`Store::object_store`] — an
//! [`ObjectStore`](object_store::ObjectStore) whose paths are relative to the
//! URI's prefix and whose every request is counted in [`Store::metrics`].
//! [`get_parallel`] reads one large object as ranged GETs in parallel;
//! [`MultipartWriter`] writes one as concurrent part uploads.
//!
//! ```
//! use bucketload_store::object_store::{ObjectStoreExt, path::Path};
//! use bucketload_store::{Store, StoreConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Store::open("mem://doc-example/train", &StoreConfig::from_env())?;
//! let key = Path::from("000001.jpg");
//! store.object_store().put(&key, "jpeg bytes".into()).await?;
//! let bytes = store.object_store().get(&key).await?.bytes().await?;
//! assert_eq!(bytes, "jpeg bytes");
//! assert_eq!(store.metrics().snapshot().requests.get, 1);
//! # Ok(())
//! # }
//! ```
//!
//! Metrics are described in `docs/METRICS.md` and settings in
//! `docs/CONFIGURATION.md`.

pub use object_store;

mod bucket;
mod cloud_env;
mod config;
mod credentials;
mod delete;
mod error;
mod etag;
mod exact;
mod express;
mod http;
mod ini;
mod keys;
mod kind;
mod listing;
mod metered;
mod metrics;
mod multipart;
mod pacing;
mod parallel;
mod resume;
mod sigv4;
mod size;
mod store;
mod uploads;
mod uri;

pub use config::{
    Addressing, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_RETRIES, DEFAULT_PART_SIZE, DEFAULT_REGION,
    DEFAULT_RETRY_TIMEOUT, DEFAULT_STORE_CONCURRENCY, FIRST_BACKOFF, MAX_BACKOFF, RetryMode,
    StoreConfig,
};
pub use delete::delete_retried;
pub use error::{BoxError, Error, Hint, Tries};
pub use etag::ETag;
pub use keys::{Object, unaddressable, unspellable};
pub use kind::ErrorKind;
pub use listing::{ListPage, Listed, ListedKind, list_object_store};
pub use metered::MeteredStore;
pub use metrics::{
    Cost, ErrorCounts, Latency, LatencyPercentiles, METRICS, MetricDef, Metrics, MetricsSnapshot,
    PriceTable, RequestCounts, RequestKind,
};
pub use multipart::{DEFAULT_PARALLEL_PARTS, MultipartOptions, MultipartWriter, settle_aborts};
pub use pacing::CONNECT_GRACE;
pub use parallel::{DEFAULT_PARALLEL_GETS, ParallelGet, get_parallel};
pub use size::parse_size;
pub use store::Store;
pub use uploads::Upload;
pub use uri::key_path;
pub use uri::{ACCEPTED_SCHEMES, Scheme, StoreUri};
