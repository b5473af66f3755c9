//! Indexed shards through the disk cache in blocks, against the embedded S3 server: a warm epoch
//! is served from a few cached blocks (no GET), a shard rewritten in place is read anew, a
//! truncated block is read again from the store, and the cache's bound holds.
#![allow(clippy::unwrap_used)]

mod loader_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bucketload::loader::{Format, Loader};
use bucketload_cache::{Cache, CacheBuilder};
use bucketload_store::object_store::ObjectStoreExt as _;
use bucketload_store::object_store::path::Path as Key;
use futures::TryStreamExt;
use loader_support::{TestData, drain, keys, object_bytes};

/// Shards of this many samples: each shard is one block (the test images are a few KB).
const PER_SHARD: u64 = 5;

fn open_cache(dir: &Path, capacity: u64) -> Arc<Cache> {
    Arc::new(CacheBuilder::new(dir, capacity).build().unwrap())
}

async fn indexed(data: &TestData, cache: Arc<Cache>) -> Loader {
    let config = data
        .loader("shards")
        .with_format(Format::Indexed)
        .with_cache(cache);
    Loader::open(config.build().unwrap()).await.unwrap()
}

/// The cache's entry files, largest first.
fn entry_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.join("entries")];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => todo.push(path),
                false => files.push(path),
            }
        }
    }
    files.sort_by_key(|p| std::cmp::Reverse(std::fs::metadata(p).unwrap().len()));
    files
}

async fn listed(data: &TestData, ext: &str) -> Vec<Key> {
    let all: Vec<_> = data
        .store("shards")
        .object_store()
        .list(None)
        .try_collect()
        .await
        .unwrap();
    let mut keys: Vec<Key> = all
        .into_iter()
        .map(|m| m.location)
        .filter(|k| k.as_ref().ends_with(ext))
        .collect();
    keys.sort();
    keys
}

/// A new process (its own cache handle and loader) reads a whole warm epoch from the cached
/// blocks: no GET, the same bytes, and one cache entry per shard's block (and index), not one
/// per sample.
#[tokio::test]
async fn a_warm_indexed_epoch_is_served_from_cached_blocks() {
    let data = TestData::shards(60, PER_SHARD).await;
    let shards = listed(&data, ".tar").await.len() as u64;
    let dir = tempfile::tempdir().unwrap();
    let first = drain(&indexed(&data, open_cache(dir.path(), 64 << 20)).await, 0).await;
    assert_eq!(first.len(), 60);
    let stats = open_cache(dir.path(), 64 << 20).stats().unwrap();
    assert_eq!(
        stats.entries,
        2 * shards,
        "a block and an index per shard: {stats:?}"
    );

    let again = indexed(&data, open_cache(dir.path(), 64 << 20)).await;
    let gets = data.gets();
    let second = drain(&again, 0).await;
    second.iter().for_each(|s| data.check(s));
    assert_eq!(keys(&first), keys(&second));
    assert_eq!(data.gets(), gets, "the warm epoch sent no GET");
    let counts = again.stats().cache;
    assert_eq!(
        counts.hits,
        2 * shards,
        "one lookup per block and index: {counts:?}"
    );

    // A third epoch of the same loader serves the blocks it holds, still without a GET.
    let third = drain(&again, 1).await;
    third.iter().for_each(|s| data.check(s));
    assert_eq!(data.gets(), gets);
}

/// Rewrites shard `shard` in place to the same size with one member's bytes changed, and its
/// index to match; returns the sample's key and the member's new bytes.
async fn rewrite_first_sample(data: &TestData, shard: &Key) -> (String, bytes::Bytes) {
    let store = data.store("shards");
    let index = Key::from(format!("{shard}.idx"));
    let raw = object_bytes(&store, &index).await;
    let mut idx = bucketload_format::ShardIndex::parse(index.as_ref(), &raw).unwrap();
    let mut body = object_bytes(&store, shard).await;
    let member = &mut idx.samples[0].members[0];
    let at = usize::try_from(member.data_offset).unwrap();
    let len = usize::try_from(member.size).unwrap();
    body[at..at + len].iter_mut().for_each(|b| *b ^= 0x5a);
    let changed = bytes::Bytes::copy_from_slice(&body[at..at + len]);
    member.crc32c = crc32c::crc32c(&changed);
    idx.shard_crc32c = crc32c::crc32c(&body);
    let key = idx.samples[0].key.clone();
    let put = |k: &Key, b: Vec<u8>| {
        let os = store.object_store();
        let k = k.clone();
        async move { os.put(&k, b.into()).await.unwrap() }
    };
    put(shard, body).await;
    put(&index, idx.to_bytes(index.as_ref()).unwrap()).await;
    (key, changed)
}

/// A shard rewritten in place to the same size (only its ETag tells) is never served from its
/// old blocks: the loader open when it changed never hands out the old bytes, and a new one
/// reads the new bytes.
#[tokio::test]
async fn an_indexed_shard_rewritten_to_the_same_size_is_read_anew() {
    let data = TestData::shards(20, PER_SHARD).await;
    let shard = listed(&data, ".tar").await.remove(0);
    let dir = tempfile::tempdir().unwrap();
    let loader = indexed(&data, open_cache(dir.path(), 64 << 20)).await;
    let before = drain(&loader, 0).await;
    let (key, changed) = rewrite_first_sample(&data, &shard).await;
    let old = before.iter().find(|s| s.key == key).unwrap().members[0]
        .1
        .clone();
    assert_ne!(old, changed);

    // The open loader holds the old index: an error naming the shard, or the new bytes.
    match loader.epoch(1).unwrap().try_collect::<Vec<_>>().await {
        Ok(samples) => {
            let sample = samples.iter().find(|s| s.key == key).unwrap();
            assert_eq!(sample.members[0].1, changed, "old bytes served");
        }
        Err(e) => assert!(e.to_string().contains(shard.as_ref()), "{e}"),
    }

    let fresh = indexed(&data, open_cache(dir.path(), 64 << 20)).await;
    let samples = drain(&fresh, 0).await;
    let sample = samples.iter().find(|s| s.key == key).unwrap();
    assert_eq!(sample.members[0].1, changed, "old cached block served");
    let others = samples.iter().filter(|s| s.key != key);
    others.for_each(|s| data.check(s));
}

/// A block entry truncated on disk is detected and read again from the store (one GET), never
/// served; every other block still is.
#[tokio::test]
async fn a_truncated_block_is_read_again() {
    let data = TestData::shards(30, PER_SHARD).await;
    let shards = listed(&data, ".tar").await.len() as u64;
    let dir = tempfile::tempdir().unwrap();
    drain(&indexed(&data, open_cache(dir.path(), 64 << 20)).await, 0).await;
    let largest = entry_files(dir.path()).remove(0);
    let len = std::fs::metadata(&largest).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&largest)
        .unwrap();
    file.set_len(len - 100).unwrap();

    let again = indexed(&data, open_cache(dir.path(), 64 << 20)).await;
    let gets = data.gets();
    let samples = drain(&again, 0).await;
    assert_eq!(samples.len(), 30);
    samples.iter().for_each(|s| data.check(s));
    assert_eq!(
        data.gets() - gets,
        1,
        "only the truncated block was read again"
    );
    let counts = again.stats().cache;
    assert_eq!(counts.hits, 2 * shards - 1, "{counts:?}");
}

/// Processes sharing one cache directory read at once, each through its own handle: every
/// sample is right in both, and a later one reads everything from the cache.
#[tokio::test]
async fn loaders_sharing_a_cache_directory_at_once_stay_correct() {
    let data = TestData::shards(40, PER_SHARD).await;
    let dir = tempfile::tempdir().unwrap();
    let a = indexed(&data, open_cache(dir.path(), 64 << 20)).await;
    let b = indexed(&data, open_cache(dir.path(), 64 << 20)).await;
    let (x, y) = tokio::join!(drain(&a, 0), drain(&b, 0));
    x.iter().chain(&y).for_each(|s| data.check(s));
    assert_eq!(keys(&x), keys(&y));
    let c = indexed(&data, open_cache(dir.path(), 64 << 20)).await;
    let gets = data.gets();
    drain(&c, 0).await.iter().for_each(|s| data.check(s));
    assert_eq!(data.gets(), gets);
}

/// A cache smaller than the dataset stays within its bound (each sample is then its own entry:
/// blocks of a dataset the cache cannot hold would be read again for each of their samples).
#[tokio::test]
async fn a_cache_smaller_than_the_dataset_keeps_its_bound() {
    let data = TestData::shards(800, 50).await;
    let tars = listed(&data, ".tar").await;
    let mut total = 0;
    for t in &tars {
        total += data
            .store("shards")
            .object_store()
            .head(t)
            .await
            .unwrap()
            .size;
    }
    // The cache's smallest size.
    let capacity = 1 << 20;
    assert!(total > 2 * capacity, "{total} bytes of shards");
    let dir = tempfile::tempdir().unwrap();
    let loader = indexed(&data, open_cache(dir.path(), capacity)).await;
    for epoch in 0..2 {
        drain(&loader, epoch)
            .await
            .iter()
            .for_each(|s| data.check(s));
        let stats = open_cache(dir.path(), capacity).stats().unwrap();
        assert!(stats.size_bytes <= capacity, "{stats:?}");
    }
}
