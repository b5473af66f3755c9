//! Where a tool works: a store, the URI of its root and its endpoint, so every error names the
//! object it is about.

use std::sync::Arc;

use bucketload_store::object_store::{ObjectStore, ObjectStoreExt, path::Path};
use futures::StreamExt;

use crate::error::Error;

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
        match self.manifest_get().await? {
            Some(got) => Ok(Some(self.manifest_of(got).await?)),
            None => Ok(None),
        }
    }

    /// The response of a GET of the dataset manifest, `None` if there is none: its metadata
    /// (ETag, size) names the manifest's version before its body is read.
    pub async fn manifest_get(
        &self,
    ) -> crate::Result<Option<bucketload_store::object_store::GetResult>> {
        let key = Path::from(bucketload_format::MANIFEST_PATH);
        match self.store.get(&key).await {
            Ok(got) => Ok(Some(got)),
            Err(bucketload_store::object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(&key, e)),
        }
    }

    /// The manifest of a [`Location::manifest_get`] response, read and parsed.
    pub async fn manifest_of(
        &self,
        got: bucketload_store::object_store::GetResult,
    ) -> crate::Result<bucketload_format::Manifest> {
        let key = Path::from(bucketload_format::MANIFEST_PATH);
        let bytes = got.bytes().await.map_err(|e| self.error(&key, e))?;
        Ok(bucketload_format::Manifest::from_json(
            &self.uri_of(&key),
            &bytes,
        )?)
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
