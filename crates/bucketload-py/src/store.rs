//! `NativeStore`: listing and reading objects, for the connector-style datasets.

use std::sync::Arc;

use bucketload::dataset::{Location, list_all};
use bucketload_store::object_store::{ObjectStoreExt, path::Path};
use bucketload_store::{Store, StoreConfig, key_path};
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
    #[pyo3(signature = (uri, endpoint=None, region=None, concurrency=None))]
    fn new(
        uri: &str,
        endpoint: Option<String>,
        region: Option<String>,
        concurrency: Option<usize>,
    ) -> PyResult<NativeStore> {
        let mut config = store_config(endpoint, region);
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
        let listed = py.detach(|| self.rt.block_on(list_all(&location)));
        let metas = listed.map_err(errors::engine)?;
        Ok(metas
            .into_iter()
            .map(|m| (m.location.to_string(), m.size))
            .collect())
    }

    /// The bytes of `key`, whole.
    fn get<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyBytes>> {
        let this = self.store.get("store")?;
        let path = key_path(key);
        let store = this.object_store();
        let got = py.detach(|| {
            self.rt
                .block_on(async { store.get(&path).await?.bytes().await })
        });
        let bytes = got.map_err(|e| errors::store(this.map_error(e, &path)))?;
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
        let path = key_path(key);
        let store = this.object_store();
        if end <= start {
            return Ok(PyBytes::new(py, b""));
        }
        let got = py.detach(|| self.rt.block_on(store.get_range(&path, start..end)));
        let bytes = got.map_err(|e| errors::store(this.map_error(e, &path)))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Size in bytes of `key`.
    fn size(&self, py: Python<'_>, key: &str) -> PyResult<u64> {
        let this = self.store.get("store")?;
        let path: Path = key_path(key);
        let store = this.object_store();
        let head = py.detach(|| self.rt.block_on(store.head(&path)));
        let meta = head.map_err(|e| errors::store(this.map_error(e, &path)))?;
        Ok(meta.size)
    }

    /// Writes `data` at `key` (one PUT).
    fn put(&self, py: Python<'_>, key: &str, data: Vec<u8>) -> PyResult<()> {
        let this = self.store.get("store")?;
        let path = key_path(key);
        let store = this.object_store();
        let put = py.detach(|| self.rt.block_on(store.put(&path, data.into())));
        put.map_err(|e| errors::store(this.map_error(e, &path)))?;
        Ok(())
    }
}
