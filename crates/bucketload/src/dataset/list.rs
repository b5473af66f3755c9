//! Lists a store: one level (directories and objects, like `aws s3 ls`) or everything below.

use bucketload_store::object_store::{ObjectMeta, path::Path};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use super::Location;
use crate::error::{Error, Result};

/// One line of a listing.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Entry {
    /// A common prefix (a "directory"), only in non-recursive listings.
    Dir(Path),
    /// An object.
    Object(ObjectMeta),
}

/// Totals of a listing (`--summarize`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ListReport {
    /// Objects listed.
    pub objects: u64,
    /// Their total size in bytes.
    pub bytes: u64,
    /// Directories listed.
    pub dirs: u64,
}

impl ListReport {
    /// Adds one entry to the totals.
    pub fn add(&mut self, entry: &Entry) {
        match entry {
            Entry::Dir(_) => self.dirs += 1,
            Entry::Object(meta) => {
                self.objects += 1;
                self.bytes += meta.size;
            }
        }
    }
}

/// Lists `prefix` (the root when `None`) in `location`, one level or recursively.
///
/// A recursive listing streams page by page; a one-level listing arrives whole (directories
/// first), as the store's delimiter listing does.
pub fn list(
    location: &Location,
    prefix: Option<Path>,
    recursive: bool,
) -> BoxStream<'static, Result<Entry>> {
    let location = location.clone();
    let key = prefix.clone().unwrap_or_default();
    if recursive {
        let store = location.store().clone();
        return store
            .list(prefix.as_ref())
            .map_ok(Entry::Object)
            .map_err(move |e| location.error(&key, e))
            .boxed();
    }
    futures::stream::once(async move {
        let result = location
            .store()
            .list_with_delimiter(prefix.as_ref())
            .await
            .map_err(|e| location.error(&key, e))?;
        // Local folders list in directory order; sort so every store prints alike.
        let (mut dirs, mut objects) = (result.common_prefixes, result.objects);
        dirs.sort();
        objects.sort_by(|a, b| a.location.cmp(&b.location));
        let dirs = dirs.into_iter().map(Entry::Dir);
        let objects = objects.into_iter().map(Entry::Object);
        Ok::<_, Error>(futures::stream::iter(dirs.chain(objects).map(Ok)))
    })
    .try_flatten()
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketload_store::object_store::{ObjectStore, ObjectStoreExt, memory::InMemory};
    use std::sync::Arc;

    #[tokio::test]
    async fn lists_one_level_or_everything() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        for key in ["a/1.jpg", "a/2.jpg", "b/3.jpg", "top.txt"] {
            store
                .put(&Path::from(key), vec![0u8; 10].into())
                .await
                .unwrap();
        }
        let loc = Location::new(store, "mem://", "memory");
        let mut flat = ListReport::default();
        for e in list(&loc, None, false)
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
        {
            flat.add(&e);
        }
        assert_eq!(
            flat,
            ListReport {
                objects: 1,
                bytes: 10,
                dirs: 2
            }
        );
        let mut deep = ListReport::default();
        for e in list(&loc, Some(Path::from("a")), true)
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
        {
            deep.add(&e);
        }
        assert_eq!(
            deep,
            ListReport {
                objects: 2,
                bytes: 20,
                dirs: 0
            }
        );
    }
}
