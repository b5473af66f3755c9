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

/// Listing requests in flight in [`list_all`].
const LIST_FAN_OUT: usize = 32;

/// Every object below the location's root, sorted by key, listed in parallel.
///
/// A flat listing is one page of 1,000 keys after another, one round trip each: 100 pages for
/// 100,000 objects. This lists the root with a delimiter (descending through levels that hold
/// a single folder and nothing else), then lists every folder found there in parallel, so a
/// class-per-folder dataset costs about two round trips plus the pages of its largest class.
/// It sends at most one request per folder more than a flat listing.
pub async fn list_all(location: &Location) -> Result<Vec<ObjectMeta>> {
    let store = location.store();
    let mut objects = Vec::new();
    let mut prefix: Option<Path> = None;
    let folders = loop {
        let key = prefix.clone().unwrap_or_default();
        let level = store
            .list_with_delimiter(prefix.as_ref())
            .await
            .map_err(|e| location.error(&key, e))?;
        let only_one_folder = level.objects.is_empty() && level.common_prefixes.len() == 1;
        objects.extend(level.objects);
        if only_one_folder {
            prefix = level.common_prefixes.into_iter().next();
            continue;
        }
        break level.common_prefixes;
    };
    let mut lists = futures::stream::iter(folders)
        .map(|folder| {
            let store = store.clone();
            let location = location.clone();
            async move {
                store
                    .list(Some(&folder))
                    .map_err(|e| location.error(&folder, e))
                    .try_collect::<Vec<ObjectMeta>>()
                    .await
            }
        })
        .buffer_unordered(LIST_FAN_OUT);
    while let Some(listed) = lists.next().await {
        objects.extend(listed?);
    }
    objects.sort_by(|a, b| a.location.cmp(&b.location));
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketload_store::object_store::{ObjectStore, ObjectStoreExt, memory::InMemory};
    use std::sync::Arc;

    async fn flat(store: &Arc<dyn ObjectStore>) -> Vec<(String, u64)> {
        let mut all: Vec<(String, u64)> = store
            .list(None)
            .map_ok(|m| (m.location.to_string(), m.size))
            .try_collect()
            .await
            .unwrap();
        all.sort();
        all
    }

    #[tokio::test]
    async fn the_parallel_listing_finds_what_a_flat_one_finds() {
        let layouts: [&[&str]; 5] = [
            &[],
            &["only.txt"],
            &[
                "a/1.jpg",
                "a/2.jpg",
                "b/3.jpg",
                "top.txt",
                "b/deep/er/4.jpg",
                "c/5",
            ],
            &[
                "one/two/three/x.jpg",
                "one/two/three/y.jpg",
                "one/two/z.jpg",
            ],
            &["one/two/x.jpg", "one/y.jpg"],
        ];
        for keys in layouts {
            let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
            for (i, key) in keys.iter().enumerate() {
                store
                    .put(&Path::from(*key), vec![0u8; i + 1].into())
                    .await
                    .unwrap();
            }
            let loc = Location::new(store.clone(), "mem://", "memory");
            let got: Vec<(String, u64)> = list_all(&loc)
                .await
                .unwrap()
                .into_iter()
                .map(|m| (m.location.to_string(), m.size))
                .collect();
            assert_eq!(got, flat(&store).await, "{keys:?}");
        }
    }

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
