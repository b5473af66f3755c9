//! Reads the `.idx` of tar shards: what `ls --samples` lists and `stats` counts without reading
//! the shards themselves.
//!
//! Each index is one GET; [`read_indexes`] keeps `concurrency` of them in flight and yields the
//! shards in the order given, so a listing streams in key order while the next indexes arrive.
//! A shard without an index is yielded with `index: None`; a corrupt index is an error naming it.

use std::collections::HashSet;

use bucketload_format::{IndexSample, ShardIndex};
use bucketload_store::object_store::{self, ObjectStoreExt, path::Path};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use super::{SHARD_EXT, ShardObject, index_key};
use crate::base::Location;
use crate::error::Result;

/// A tar shard and its index.
#[derive(Debug, Clone)]
pub struct ShardSamples {
    /// Key of the shard relative to the location.
    pub key: Path,
    /// Size of the shard in bytes.
    pub size: u64,
    /// Its index, `None` when the shard has none (`bucketload index` writes it).
    pub index: Option<ShardIndex>,
}

/// The tar shards among `objects` (keys and sizes of a recursive listing), sorted by key, each
/// noting whether its `.idx` is among `objects` too.
pub fn shards_in(objects: &[(Path, u64)]) -> Vec<ShardObject> {
    let keys: HashSet<&str> = objects.iter().map(|(k, _)| k.as_ref()).collect();
    let mut shards: Vec<ShardObject> = objects
        .iter()
        .filter(|(k, _)| k.as_ref().ends_with(SHARD_EXT))
        .map(|(key, size)| ShardObject {
            key: key.clone(),
            size: *size,
            has_index: keys.contains(index_key(key).as_ref()),
        })
        .collect();
    shards.sort_by(|a, b| a.key.cmp(&b.key));
    shards
}

/// Reads the index of each of `shards` (those with one), `concurrency` GETs in flight, and
/// yields them in the order given.
pub fn read_indexes(
    location: &Location,
    shards: Vec<ShardObject>,
    concurrency: usize,
) -> BoxStream<'static, Result<ShardSamples>> {
    let location = location.clone();
    futures::stream::iter(shards)
        .map(move |shard| {
            let location = location.clone();
            async move {
                let index = if shard.has_index {
                    read_index(&location, &shard.key).await?
                } else {
                    None
                };
                Ok(ShardSamples {
                    key: shard.key,
                    size: shard.size,
                    index,
                })
            }
        })
        .buffered(concurrency.max(1))
        .boxed()
}

/// The index of the shard `shard`, `None` if it has none.
pub async fn read_index(location: &Location, shard: &Path) -> Result<Option<ShardIndex>> {
    let key = index_key(shard);
    let got = async { location.store().get(&key).await?.bytes().await }.await;
    match got {
        Ok(bytes) => Ok(Some(ShardIndex::parse(&location.uri_of(&key), &bytes)?)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(location.error(&key, e)),
    }
}

/// Bytes of a sample's member data (tar headers and padding not counted).
pub fn sample_bytes(sample: &IndexSample) -> u64 {
    sample.members.iter().map(|m| m.size).sum()
}

/// The extensions of a sample's members in shard order (`["jpg", "cls"]`).
pub fn extensions(sample: &IndexSample) -> Vec<&str> {
    sample.members.iter().map(|m| m.ext.as_str()).collect()
}

/// Every shard of a listing with its index; shards come sorted by key.
pub async fn read_all_indexes(
    location: &Location,
    shards: Vec<ShardObject>,
    concurrency: usize,
) -> Result<Vec<ShardSamples>> {
    read_indexes(location, shards, concurrency)
        .try_collect()
        .await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bucketload_format::{MemberLocation, ShardIndexBuilder, ShardSummary};
    use bucketload_store::object_store::{ObjectStore, memory::InMemory};

    use super::*;

    fn index_bytes(keys: &[&str]) -> Vec<u8> {
        let mut builder = ShardIndexBuilder::new();
        for (i, key) in keys.iter().enumerate() {
            let at = i as u64 * 1024;
            let location = MemberLocation {
                header_offset: at,
                data_offset: at + 512,
                size: 3,
            };
            builder.add(key, location, b"abc");
        }
        let summary = ShardSummary {
            size: keys.len() as u64 * 1024 + 1024,
            crc32c: 0,
            md5: [0; 16],
            members: keys.len() as u64,
        };
        builder.finish(&summary).to_bytes("x.idx").unwrap()
    }

    #[tokio::test]
    async fn indexes_are_read_in_order_and_a_missing_one_is_none() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let put = |key: &str, data: Vec<u8>| {
            let store = store.clone();
            let key = Path::from(key);
            async move { store.put(&key, data.into()).await.unwrap() }
        };
        put("b.tar", vec![0; 10]).await;
        put("b.tar.idx", index_bytes(&["1.jpg", "1.cls", "2.jpg"])).await;
        put("a.tar", vec![0; 20]).await;
        put("notes.txt", vec![0; 5]).await;
        let objects = vec![
            (Path::from("b.tar"), 10),
            (Path::from("b.tar.idx"), 100),
            (Path::from("a.tar"), 20),
            (Path::from("notes.txt"), 5),
        ];
        let shards = shards_in(&objects);
        let names: Vec<(&str, bool)> = shards
            .iter()
            .map(|s| (s.key.as_ref(), s.has_index))
            .collect();
        assert_eq!(names, [("a.tar", false), ("b.tar", true)]);
        let loc = Location::new(store, "mem://d", "memory");
        let read = read_all_indexes(&loc, shards, 4).await.unwrap();
        assert!(read[0].index.is_none());
        let index = read[1].index.as_ref().unwrap();
        assert_eq!(index.samples.len(), 2);
        assert_eq!(extensions(&index.samples[0]), ["jpg", "cls"]);
        assert_eq!(sample_bytes(&index.samples[0]), 6);
    }

    #[tokio::test]
    async fn a_corrupt_index_is_an_error_naming_it() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        store
            .put(&Path::from("s.tar.idx"), vec![1u8; 80].into())
            .await
            .unwrap();
        let loc = Location::new(store, "mem://d", "memory");
        let err = read_index(&loc, &Path::from("s.tar")).await.unwrap_err();
        assert!(err.to_string().contains("mem://d/s.tar.idx"), "{err}");
        let none = read_index(&loc, &Path::from("t.tar")).await.unwrap();
        assert!(none.is_none());
    }
}
