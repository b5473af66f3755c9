//! `NativeStore`: listing and reading objects, for the connector-style datasets.

use std::sync::Arc;

use bucketload::ErrorKind;
use bucketload::base::{Location, list_all_keys};
use bucketload_store::object_store::{ObjectStoreExt, path::Path};
use bucketload_store::{Addressing, ListedKind, Store, StoreConfig, key_path};
use futures::TryStreamExt;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::runtime::Runtime;

use crate::errors;
use crate::runtime::{ForkSafe, runtime};

/// The store settings shared by every native object: the AWS environment and profile, with
/// an endpoint and region when given.
pub(crate) fn store_config(endpoint: Option<String>, region: Option<String>) -> StoreConfig {
    let mut config = StoreConfig::from_env();
    if let Some(endpoint) = endpoint {
        config = config.with_endpoint(endpoint);
    }
    if let Some(region) = region {
        config = config.with_region(region);
    }
    config
}

/// Client settings read from any object with these attributes (the connector's
/// `S3ClientConfig` dataclass); each one maps onto the [`StoreConfig`] setting of the same
/// meaning.
#[derive(FromPyObject)]
pub(crate) struct ClientOptions {
    #[pyo3(attribute)]
    profile: Option<String>,
    #[pyo3(attribute)]
    max_attempts: Option<usize>,
    #[pyo3(attribute)]
    unsigned: bool,
    #[pyo3(attribute)]
    force_path_style: bool,
    #[pyo3(attribute)]
    part_size: Option<u64>,
}

impl ClientOptions {
    /// `config` with these settings applied: `max_attempts` counts the first try, so the
    /// retries are one fewer.
    pub(crate) fn apply(&self, mut config: StoreConfig) -> StoreConfig {
        if let Some(profile) = &self.profile {
            config = config.with_profile(profile.clone());
        }
        if let Some(attempts) = self.max_attempts {
            config = config.with_max_retries(attempts.saturating_sub(1));
        }
        if self.unsigned {
            config = config.with_anonymous(true);
        }
        if self.force_path_style {
            config = config.with_addressing(Addressing::Path);
        }
        if let Some(bytes) = self.part_size {
            config = config.with_part_size(bytes);
        }
        config
    }
}

/// Object `key` of `store`, byte for byte ([`Store::object`]).
fn object(store: &Store, key: &str) -> PyResult<bucketload_store::Object> {
    store.object(key).map_err(errors::store)
}

/// `key` as a path of `store`'s own object store, for a server-side copy, which only that
/// store offers; else an error saying why it cannot address the key.
fn copyable(store: &Store, key: &str) -> PyResult<Path> {
    match bucketload_store::unspellable(key) {
        None => Ok(key_path(key)),
        Some(why) => Err(errors::raise(
            ErrorKind::InvalidInput,
            format!(
                "{}: the key {why}, which a server-side copy cannot address; copy it with \
                 get and put",
                store.uri().join(key)
            ),
        )),
    }
}

/// An object of a listing: its key and size in bytes.
type Object = (String, u64);

/// A store opened at a URI prefix (`s3://bucket/prefix`, `file://`, a path).
#[pyclass(module = "bucketload._native")]
pub struct NativeStore {
    store: ForkSafe<Store>,
    uri: String,
    rt: Arc<Runtime>,
}

#[pymethods]
impl NativeStore {
    #[new]
    #[pyo3(signature = (uri, endpoint=None, region=None, concurrency=None, *, client=None))]
    fn new(
        uri: &str,
        endpoint: Option<String>,
        region: Option<String>,
        concurrency: Option<usize>,
        client: Option<ClientOptions>,
    ) -> PyResult<NativeStore> {
        let mut config = store_config(endpoint, region);
        if let Some(client) = client {
            config = client.apply(config);
        }
        if let Some(n) = concurrency {
            config = config.with_concurrency(n);
        }
        let rt = runtime()?;
        let store = {
            let _guard = rt.enter();
            Store::open(uri, &config).map_err(errors::store)?
        };
        Ok(NativeStore {
            uri: store.uri().to_string(),
            store: ForkSafe::new(store),
            rt,
        })
    }

    /// The store's URI.
    #[getter]
    fn uri(&self) -> String {
        self.uri.clone()
    }

    /// The full URI of `key`.
    fn object_uri(&self, key: &str) -> PyResult<String> {
        Ok(self.store.get("store")?.object_uri(&key_path(key)))
    }

    /// Every object below the prefix (keys relative to it) with its size, sorted by key;
    /// folders are listed in parallel.
    fn list(&self, py: Python<'_>) -> PyResult<Vec<(String, u64)>> {
        let this = self.store.get("store")?;
        let location = Location::from_store(this);
        // Keys as the store holds them, `a//b` and a tab included.
        let listed = py.detach(|| self.rt.block_on(list_all_keys(&location)));
        let objects = listed.map_err(errors::engine)?;
        Ok(objects
            .into_iter()
            .map(|o| (o.key.as_str().to_owned(), o.size))
            .collect())
    }

    /// The objects whose keys start with `prefix` (relative to the store's prefix, any string:
    /// `train/class_0` matches `train/class_0/a.jpg` and `train/class_001.jpg`) as
    /// `(key, size)`, in key order, page by page. Keys are as the store holds them; folder
    /// markers (keys ending in `/`) are left out. A directory bucket lists only prefixes
    /// ending in `/`: there the folder the prefix is in is listed, and its keys filtered.
    fn list_prefix(&self, py: Python<'_>, prefix: &str) -> PyResult<Vec<Object>> {
        let this = self.store.get("store")?;
        let listed_prefix = match this.is_directory_bucket() {
            true => &prefix[..prefix.rfind('/').map_or(0, |i| i + 1)],
            false => prefix,
        };
        let pages = this.list_pages(listed_prefix, false);
        let listed = py.detach(|| self.rt.block_on(pages.try_collect::<Vec<_>>()));
        let pages = listed.map_err(errors::store)?;
        let mut objects: Vec<Object> = pages
            .into_iter()
            .flat_map(|page| page.objects)
            .filter(|l| l.kind() != ListedKind::Folder && l.key.starts_with(prefix))
            .map(|l| (l.key, l.size))
            .collect();
        // S3 lists in key order; local folders list in directory order.
        objects.sort();
        Ok(objects)
    }

    /// The bytes of `key`, whole.
    fn get<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyBytes>> {
        let this = self.store.get("store")?;
        let object = object(this, key)?;
        let (store, path) = (object.store(), object.path());
        let got = py.detach(|| {
            self.rt
                .block_on(async { store.get(path).await?.bytes().await })
        });
        let bytes = got.map_err(|e| errors::store(object.map_error(e)))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Bytes `start..end` of `key`.
    fn get_range<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        start: u64,
        end: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let this = self.store.get("store")?;
        let object = object(this, key)?;
        let (store, path) = (object.store(), object.path());
        if end <= start {
            return Ok(PyBytes::new(py, b""));
        }
        let got = py.detach(|| self.rt.block_on(store.get_range(path, start..end)));
        let bytes = got.map_err(|e| errors::store(object.map_error(e)))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Size in bytes of `key`.
    fn size(&self, py: Python<'_>, key: &str) -> PyResult<u64> {
        let this = self.store.get("store")?;
        let object = object(this, key)?;
        let (store, path) = (object.store(), object.path());
        let head = py.detach(|| self.rt.block_on(store.head(path)));
        let meta = head.map_err(|e| errors::store(object.map_error(e)))?;
        Ok(meta.size)
    }

    /// Deletes `key`; deleting a key that has no object succeeds, as in S3, and a bucket that
    /// does not exist raises `NotFoundError` naming it, as S3 answers.
    fn delete(&self, py: Python<'_>, key: &str) -> PyResult<()> {
        let this = self.store.get("store")?;
        let object = object(this, key)?;
        let (store, path) = (object.store(), object.path());
        let config = this.config();
        let done = py.detach(|| {
            self.rt.block_on(bucketload_store::delete_retried(
                store.as_ref(),
                path,
                config,
            ))
        });
        match done.map_err(|e| object.map_error(e)) {
            Ok(()) | Err(bucketload_store::Error::NotFound { what: "object", .. }) => Ok(()),
            Err(e) => Err(errors::store(e)),
        }
    }

    /// Copies `source` to `destination` in the store (a server-side copy).
    fn copy(&self, py: Python<'_>, source: &str, destination: &str) -> PyResult<()> {
        let this = self.store.get("store")?;
        let from = copyable(this, source)?;
        let to = copyable(this, destination)?;
        let store = this.object_store();
        let done = py.detach(|| self.rt.block_on(store.copy(&from, &to)));
        done.map_err(|e| errors::store(this.map_error(e, &from)))
    }

    /// Writes `data` at `key` (one PUT).
    fn put(&self, py: Python<'_>, key: &str, data: Vec<u8>) -> PyResult<()> {
        let this = self.store.get("store")?;
        let object = object(this, key)?;
        let (store, path) = (object.store(), object.path());
        let put = py.detach(|| self.rt.block_on(store.put(path, data.into())));
        put.map_err(|e| errors::store(object.map_error(e)))?;
        Ok(())
    }
}
