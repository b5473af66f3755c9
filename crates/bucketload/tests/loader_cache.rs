//! The loader with a disk cache, against the embedded S3 server: epoch 2 is served from disk
//! (the server sees no new GET), and a damaged cache entry is never served.
#![allow(clippy::unwrap_used)]

mod loader_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bucketload::loader::{Format, Loader};
use bucketload_cache::CacheBuilder;
use loader_support::{TestData, drain, keys};

fn entry_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.join("entries")];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

async fn second_epoch_from_disk(data: &TestData, prefix: &str, format: Format, samples: usize) {
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(CacheBuilder::new(dir.path(), 64 << 20).build().unwrap());
    let config = data.loader(prefix).with_format(format).with_cache(cache);
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    let first = drain(&loader, 0).await;
    assert_eq!(first.len(), samples);
    let gets = data.gets();
    let second = drain(&loader, 1).await;
    second.iter().for_each(|s| data.check(s));
    assert_eq!(keys(&first), keys(&second));
    assert_eq!(data.gets(), gets, "{format:?}: epoch 2 sent no GET");
    let stats = loader.stats();
    assert_eq!(stats.cache.hits, samples as u64, "{stats:?}");
    assert_eq!(stats.cache.misses, samples as u64, "{stats:?}");
}

#[tokio::test]
async fn files_epoch_two_is_served_from_the_cache() {
    let data = TestData::files(33, true).await;
    second_epoch_from_disk(&data, "src", Format::Files, 33).await;
}

#[tokio::test]
async fn indexed_epoch_two_is_served_from_the_cache() {
    let data = TestData::shards(33, 5).await;
    second_epoch_from_disk(&data, "shards", Format::Indexed, 33).await;
}

#[tokio::test]
async fn a_damaged_entry_is_not_served() {
    let data = TestData::files(20, true).await;
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(CacheBuilder::new(dir.path(), 64 << 20).build().unwrap());
    let config = data.loader("src").with_cache(cache);
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    drain(&loader, 0).await;
    let entries = entry_files(dir.path());
    assert_eq!(entries.len(), 20);
    for path in entries.iter().take(3) {
        let mut bytes = std::fs::read(path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(path, bytes).unwrap();
    }
    let gets = data.gets();
    let second = drain(&loader, 1).await;
    assert_eq!(second.len(), 20);
    second.iter().for_each(|s| data.check(s));
    assert_eq!(
        data.gets() - gets,
        3,
        "the damaged entries were read from the store"
    );
    assert_eq!(loader.stats().cache.hits, 17);
}
