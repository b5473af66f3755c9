//! Dataset tools: generate, list, describe and copy datasets in any object store.
//!
//! Every tool works on an `Arc<dyn ObjectStore>` taken from
//! [`bucketload_store::Store::object_store`], with keys relative to the store's prefix, and
//! reports the full URI of an object in its errors through a [`Location`].
//!
//! - [`generate`] uploads a synthetic image-classification dataset (`class_000/000000.jpg`, ...):
//!   JPEG encoding on blocking threads (at most one per core), PUTs with many requests in flight.
//! - [`list`] lists one level (directories and objects) or everything below a prefix.
//! - [`stats`] describes a dataset of files or of tar shards: from its manifest when it has one
//!   (one GET), else from a listing and the shards' indexes; samples per class and per shard, size
//!   percentiles, image dimensions of a sample and the request cost of one pass.
//! - [`read_indexes`] reads the `.idx` of tar shards (one GET each, many in flight) to list the
//!   samples inside them without reading the shards.
//! - [`copy_object`] / [`copy_tree`] copy between any two stores (local folder, S3, memory); large
//!   objects stream through ranged GETs and a multipart upload, so memory stays bounded and a failed
//!   copy never leaves a partial object.
//!
//! Long operations report to a [`Progress`]; the CLI draws bars from it.

mod copy;
mod generate;
mod indexes;
pub mod jpeg;
mod list;
mod shard_stats;
mod stats;
pub mod synth;

use futures::StreamExt;
use std::sync::Arc;

use bucketload_store::object_store::{ObjectStore, ObjectStoreExt, path::Path};

use crate::error::Error;

pub use copy::{CopyOptions, CopyReport, copy_object, copy_tree};
pub use generate::{GenReport, GenSpec, class_name, generate, sample_key};
pub use indexes::{
    ShardSamples, extensions, read_all_indexes, read_index, read_indexes, sample_bytes, shards_in,
};
pub(crate) use list::warn_unaddressable;
pub use list::{Entry, ListReport, list, list_all};
pub use stats::{
    ClassesFrom, CostEstimate, DatasetStats, Percentiles, RandomAccessCost, SampledImages,
    ShardStats, StatsFrom, StatsOptions, stats,
};

/// Receives progress of a long operation. Implementations must be cheap: `advance` is called once
/// per object from many tasks.
pub trait Progress: Send + Sync {
    /// The expected totals, when known.
    fn set_total(&self, objects: u64, bytes: Option<u64>) {
        let _ = (objects, bytes);
    }
    /// `objects` more objects of `bytes` bytes in total are done.
    fn advance(&self, objects: u64, bytes: u64);
    /// The operation is over (successfully or not).
    fn finish(&self) {}
}

/// A [`Progress`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn advance(&self, _objects: u64, _bytes: u64) {}
}

/// A store together with the URI of its root and its endpoint, so errors name objects fully.
#[derive(Clone)]
pub struct Location {
    store: Arc<dyn ObjectStore>,
    base: String,
    endpoint: String,
    root: String,
    handle: Option<bucketload_store::Store>,
}

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Location")
            .field("base", &self.base)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.base)
    }
}

impl Location {
    /// A store whose keys are relative to `base_uri` (e.g. `s3://bucket/prefix`); `endpoint`
    /// names the server in "cannot reach" messages.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        base_uri: impl Into<String>,
        endpoint: impl Into<String>,
    ) -> Location {
        let base = base_uri.into().trim_end_matches('/').to_string();
        Location {
            root: format!("{base}/"),
            store,
            base,
            endpoint: endpoint.into(),
            handle: None,
        }
    }

    /// Wraps a [`bucketload_store::Store`].
    pub fn from_store(store: &bucketload_store::Store) -> Location {
        let endpoint = store
            .config()
            .endpoint()
            .unwrap_or("the AWS S3 endpoint")
            .to_string();
        let mut location = Location::new(store.object_store(), store.uri().to_string(), endpoint);
        location.root = store.uri().root();
        location.handle = Some(store.clone());
        location
    }

    /// The dataset manifest at the root (`_bucketload/manifest.json`), `None` if there is
    /// none; a manifest that does not parse is an error naming it.
    pub async fn manifest(&self) -> crate::Result<Option<bucketload_format::Manifest>> {
        let key = Path::from(bucketload_format::MANIFEST_PATH);
        let got = async { self.store.get(&key).await?.bytes().await }.await;
        match got {
            Ok(bytes) => Ok(Some(bucketload_format::Manifest::from_json(
                &self.uri_of(&key),
                &bytes,
            )?)),
            Err(bucketload_store::object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(&key, e)),
        }
    }

    /// The object store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The opened store, when this location wraps one ([`Location::from_store`]).
    pub fn handle(&self) -> Option<&bucketload_store::Store> {
        self.handle.as_ref()
    }

    /// The full URI of `key` as the store holds it (it may end in `/` or hold `//`).
    pub fn uri_of_key(&self, key: &str) -> String {
        match key {
            "" => format!("{}/", self.base),
            key => format!("{}/{key}", self.base),
        }
    }

    /// The full URI of `key`.
    pub fn uri_of(&self, key: &Path) -> String {
        match &self.handle {
            Some(store) => store.object_uri(key),
            None if key.as_ref().is_empty() => self.base.clone(),
            None => format!("{}/{}", self.base, key),
        }
    }

    /// `err`, an object not found, said as "bucket not found" when the bucket itself is
    /// missing: a HEAD or GET of a key cannot tell the two apart (S3 answers a bare 404), a
    /// LIST can. Costs one LIST, on the error path only.
    pub async fn explain_not_found(&self, err: Error) -> Error {
        if err.kind() != crate::ErrorKind::NotFound {
            return err;
        }
        let listed = self.store.list(None).next().await;
        match listed.map(|r| r.map_err(|e| self.error(&Path::default(), e))) {
            Some(Err(
                missing @ Error::Store(bucketload_store::Error::NotFound { what: "bucket", .. }),
            )) => missing,
            _ => err,
        }
    }

    /// Maps a failure of an operation on `key` to an error naming the object.
    pub fn error(&self, key: &Path, err: bucketload_store::object_store::Error) -> Error {
        match &self.handle {
            Some(store) => Error::Store(store.map_error(err, key)),
            None => {
                let uri = self.uri_of(key);
                Error::Store(bucketload_store::Error::from_object_store(
                    err,
                    &uri,
                    &self.endpoint,
                    &self.root,
                ))
            }
        }
    }
}

/// Number of decimal digits needed to write `n - 1` (at least `min`), for zero-padded names.
pub(crate) fn pad_width(n: u64, min: usize) -> usize {
    n.saturating_sub(1).to_string().len().max(min)
}
