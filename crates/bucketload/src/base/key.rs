//! A key of a dataset exactly as the store holds it, and its one way to be read.
//!
//! object_store's [`Path`] spells most keys; for them a [`DataKey`] is that path and a read is
//! the store's own GET, as fast as before. The others (`a//b.jpg`, a folder marker's `x/`
//! neighbour `x//y`, a tab in a name, a `.` segment) are kept as the raw key and read through
//! [`bucketload_store::Store::object`], the path every single object takes: a dataset reads
//! them as boto3 and the Amazon S3 Connector for PyTorch do.

use std::fmt;
use std::sync::Arc;

use bucketload_store::object_store::path::Path;
use bucketload_store::object_store::{GetResult, ObjectStore, ObjectStoreExt};

use super::Location;
use crate::error::{Error, Result};

/// A key relative to a dataset's root, exactly as the store holds it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum DataKey {
    /// A key object_store's paths spell byte for byte.
    Path(Path),
    /// One they cannot spell (see [`bucketload_store::unspellable`]).
    Raw(Arc<str>),
}

impl DataKey {
    /// The key `key`, as a [`Path`] when that spells it exactly.
    pub fn new(key: &str) -> DataKey {
        match bucketload_store::unspellable(key) {
            None => match Path::parse(key) {
                Ok(path) if path.as_ref() == key => DataKey::Path(path),
                _ => DataKey::Raw(key.into()),
            },
            Some(_) => DataKey::Raw(key.into()),
        }
    }

    /// The key as the store holds it.
    pub fn as_str(&self) -> &str {
        match self {
            DataKey::Path(path) => path.as_ref(),
            DataKey::Raw(key) => key,
        }
    }
}

impl From<Path> for DataKey {
    fn from(path: Path) -> DataKey {
        DataKey::Path(path)
    }
}

impl AsRef<str> for DataKey {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for DataKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for DataKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialOrd for DataKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for DataKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Location {
    /// GETs the object `key`, relative to the root (see the module docs); errors name it.
    pub async fn get_key(&self, key: &DataKey) -> Result<GetResult> {
        match (key, self.handle()) {
            (DataKey::Path(path), _) => self
                .store()
                .get(path)
                .await
                .map_err(|e| self.error(path, e)),
            (DataKey::Raw(raw), Some(store)) => {
                let object = store.object(raw)?;
                object
                    .store()
                    .get(object.path())
                    .await
                    .map_err(|e| Error::Store(object.map_error(e)))
            }
            // A location without a store holds no such key but from a manifest: its path.
            (DataKey::Raw(raw), None) => {
                let path = bucketload_store::key_path(raw);
                self.store()
                    .get(&path)
                    .await
                    .map_err(|e| self.error(&path, e))
            }
        }
    }

    /// The object store to send requests about `key` to, and its path there: this location's
    /// own for a [`DataKey::Path`], the store of that one key for a [`DataKey::Raw`].
    pub fn address(&self, key: &DataKey) -> Result<(Arc<dyn ObjectStore>, Path)> {
        Ok(match (key, self.handle()) {
            (DataKey::Path(path), _) => (Arc::clone(self.store()), path.clone()),
            (DataKey::Raw(raw), Some(store)) => {
                let object = store.object(raw)?;
                (Arc::clone(object.store()), object.path().clone())
            }
            (DataKey::Raw(raw), None) => {
                (Arc::clone(self.store()), bucketload_store::key_path(raw))
            }
        })
    }

    /// Maps a failure of a request about `key` to an error naming it.
    pub fn error_of_key(&self, key: &DataKey, err: bucketload_store::object_store::Error) -> Error {
        match (key, self.handle()) {
            (DataKey::Path(path), _) => self.error(path, err),
            (DataKey::Raw(_), Some(store)) => {
                Error::Store(store.map_error_at(err, &self.uri_of_data_key(key)))
            }
            (DataKey::Raw(raw), None) => self.error(&bucketload_store::key_path(raw), err),
        }
    }

    /// The full URI of `key`, as the store holds it.
    pub fn uri_of_data_key(&self, key: &DataKey) -> String {
        match key {
            DataKey::Path(path) => self.uri_of(path),
            DataKey::Raw(raw) => match self.handle() {
                Some(store) => store
                    .object(raw)
                    .map_or_else(|_| self.uri_of_key(raw), |object| object.uri().to_owned()),
                None => self.uri_of_key(raw),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_paths_spell_are_paths_the_others_raw() {
        for key in ["a/b.jpg", "ü/x y%41.jpg"] {
            assert!(matches!(DataKey::new(key), DataKey::Path(_)), "{key}");
            assert_eq!(DataKey::new(key).as_str(), key);
        }
        for key in ["a//b.jpg", "t\tb.jpg", "x/./y", "/lead", "x/"] {
            assert!(matches!(DataKey::new(key), DataKey::Raw(_)), "{key:?}");
            assert_eq!(DataKey::new(key).as_str(), key);
        }
        let mut keys = [DataKey::new("b"), DataKey::new("a//b"), DataKey::new("a/c")];
        keys.sort();
        let sorted: Vec<&str> = keys.iter().map(DataKey::as_str).collect();
        assert_eq!(sorted, ["a//b", "a/c", "b"]);
    }
}
