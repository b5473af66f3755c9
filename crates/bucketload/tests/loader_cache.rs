//! The loader with a disk cache, against the embedded S3 server: epoch 2 is served from disk
//! (the server sees no new GET), and a damaged cache entry is never served.
#![allow(clippy::unwrap_used)]

mod loader_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bucketload::loader::{Format, Loader};
use bucketload::source::Order;
use bucketload_cache::{Cache, CacheBuilder};
use bucketload_store::object_store::ObjectStoreExt as _;
use futures::TryStreamExt;
use loader_support::{TestData, drain, keys, object_bytes};

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
    if format == Format::Indexed {
        // Indexed shards are cached in blocks, and the loader holds the blocks it read.
        assert!(stats.cache.misses < samples as u64, "{stats:?}");
        return;
    }
    assert_eq!(stats.cache.hits, samples as u64, "{stats:?}");
    assert_eq!(stats.cache.misses, samples as u64, "{stats:?}");
}

#[tokio::test]
async fn files_epoch_two_is_served_from_the_cache() {
    let data = TestData::files(33, true).await;
    second_epoch_from_disk(&data, "src", Format::Files, 33).await;
}

/// Cache writes run in the background, off the reader's path, but an epoch ends only once they
/// are done: a process that stops after its last epoch leaves every sample cached, and another
/// process (its own cache handle and loader) then reads the whole epoch from disk.
async fn a_finished_epoch_is_all_in_the_cache(data: &TestData, prefix: &str, format: Format) {
    let dir = tempfile::tempdir().unwrap();
    let open = || Arc::new(CacheBuilder::new(dir.path(), 64 << 20).build().unwrap());
    let config = data.loader(prefix).with_format(format).with_cache(open());
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    let first = drain(&loader, 0).await;
    let stats = open().stats().unwrap();
    // Indexed shards also file each shard's index.
    let shards: std::collections::BTreeSet<u64> = first
        .iter()
        .filter_map(|s| match s.source {
            bucketload::source::SampleRef::Shard { shard, .. } => Some(shard),
            bucketload::source::SampleRef::File { .. } => None,
        })
        .collect();
    match format {
        Format::Shards => assert!(stats.entries > 0, "{format:?}: {stats:?}"),
        Format::Indexed => {
            // A block and an index per shard: the shards are small, one block each.
            let entries = 2 * shards.len() as u64;
            assert_eq!(stats.entries, entries, "{format:?}: {stats:?}");
        }
        _ => assert_eq!(stats.entries, first.len() as u64, "{format:?}: {stats:?}"),
    }
    drop(loader);
    let config = data.loader(prefix).with_format(format).with_cache(open());
    let again = Loader::open(config.build().unwrap()).await.unwrap();
    let gets = data.gets();
    let second = drain(&again, 0).await;
    second.iter().for_each(|s| data.check(s));
    assert_eq!(keys(&first), keys(&second));
    assert_eq!(
        data.gets(),
        gets,
        "{format:?}: the second process sent no GET"
    );
}

#[tokio::test]
async fn a_finished_epoch_of_files_is_all_in_the_cache() {
    let data = TestData::files(60, true).await;
    a_finished_epoch_is_all_in_the_cache(&data, "src", Format::Files).await;
}

#[tokio::test]
async fn a_finished_epoch_of_indexed_shards_is_all_in_the_cache() {
    let data = TestData::shards(60, 5).await;
    a_finished_epoch_is_all_in_the_cache(&data, "shards", Format::Indexed).await;
}

#[tokio::test]
async fn a_finished_streamed_epoch_is_all_in_the_cache() {
    let data = TestData::shards(60, 5).await;
    a_finished_epoch_is_all_in_the_cache(&data, "shards", Format::Shards).await;
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

/// Replaces `key`'s bytes in `store` (same size, so only the ETag and CRC32C tell).
async fn overwrite(store: &bucketload_store::Store, key: &str, bytes: bytes::Bytes) {
    use bucketload_store::object_store::PutPayload;
    let path = bucketload_store::key_path(key);
    let os = store.object_store();
    os.put(&path, PutPayload::from(bytes)).await.unwrap();
}

fn flipped(bytes: &bytes::Bytes) -> bytes::Bytes {
    bytes.iter().map(|b| b ^ 0x20).collect::<Vec<u8>>().into()
}

#[tokio::test]
async fn bytes_read_while_an_object_was_changed_are_never_served_after_it_is_restored() {
    let data = TestData::files(20, true).await;
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(CacheBuilder::new(dir.path(), 64 << 20).build().unwrap());
    let (key, original) = {
        let (k, e) = data.objects.iter().min_by_key(|(k, _)| *k).unwrap();
        (k.clone(), e.bytes.clone())
    };
    let src = data.store("src");
    overwrite(&src, &key, flipped(&original)).await;

    let skipping = data
        .loader("src")
        .with_cache(cache.clone())
        .with_skip_changed(true);
    let loader = Loader::open(skipping.build().unwrap()).await.unwrap();
    let samples = drain(&loader, 0).await;
    assert_eq!(samples.len(), 19, "the changed sample is left out");
    assert!(samples.iter().all(|s| s.key != key));
    samples.iter().for_each(|s| data.check(s));
    assert_eq!(loader.stats().skipped_changed, 1);

    let failing = data.loader("src").with_cache(cache.clone());
    let loader = Loader::open(failing.build().unwrap()).await.unwrap();
    let err = loader.epoch(0).unwrap().try_collect::<Vec<_>>().await;
    let err = err.unwrap_err().to_string();
    assert!(err.contains(&key) && err.contains("has ETag"), "{err}");

    overwrite(&src, &key, original).await;
    let gets = data.gets();
    let loader = Loader::open(data.loader("src").with_cache(cache).build().unwrap())
        .await
        .unwrap();
    let samples = drain(&loader, 0).await;
    assert_eq!(samples.len(), 20);
    samples.iter().for_each(|s| data.check(s));
    let stats = loader.stats();
    assert_eq!((stats.cache.hits, stats.cache.misses), (19, 1), "{stats:?}");
    // The manifest and the restored object.
    assert_eq!(data.gets() - gets, 2);
}

#[tokio::test]
async fn an_indexed_shards_changed_bytes_are_never_cached() {
    let data = TestData::shards(12, 4).await;
    let shards = data.store("shards");
    let os = shards.object_store();
    let listed: Vec<_> = os.list(None).try_collect().await.unwrap();
    let shard = listed
        .iter()
        .find(|m| m.location.as_ref().ends_with(".tar"))
        .unwrap()
        .location
        .clone();
    let original = os.get(&shard).await.unwrap().bytes().await.unwrap();
    overwrite(&shards, shard.as_ref(), flipped(&original)).await;

    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(CacheBuilder::new(dir.path(), 64 << 20).build().unwrap());
    let config = data
        .loader("shards")
        .with_format(Format::Indexed)
        .with_cache(cache.clone());
    let loader = Loader::open(config.clone().build().unwrap()).await.unwrap();
    let read = loader.epoch(0).unwrap().try_collect::<Vec<_>>().await;
    assert!(read.is_err(), "a changed shard fails its index check");

    overwrite(&shards, shard.as_ref(), original).await;
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    let samples = drain(&loader, 0).await;
    assert_eq!(samples.len(), 12);
    samples.iter().for_each(|s| data.check(s));
}

/// A shard rewritten in place to the same size behind a warm cache: the streamed reader's blocks
/// are filed under the shard's ETag, so the next epoch reads the new bytes from the store rather
/// than serving the old ones.
#[tokio::test]
async fn a_streamed_shard_rewritten_to_the_same_size_is_read_anew() {
    let data = TestData::shards(12, 4).await;
    let shards = data.store("shards");
    let os = shards.object_store();
    let listed: Vec<_> = os.list(None).try_collect().await.unwrap();
    let find = |ext: &str| {
        listed
            .iter()
            .find(|m| m.location.as_ref().ends_with(ext))
            .unwrap()
            .location
            .clone()
    };
    let (shard, index) = (find(".tar"), find(".tar.idx"));
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(CacheBuilder::new(dir.path(), 64 << 20).build().unwrap());
    let config = data
        .loader("shards")
        .with_format(Format::Shards)
        .with_cache(cache);
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    assert_eq!(drain(&loader, 0).await.len(), 12);

    // Change the data of the shard's first image member, keeping every header and the size.
    let idx = os.get(&index).await.unwrap().bytes().await.unwrap();
    let idx = bucketload_format::ShardIndex::parse(index.as_ref(), &idx).unwrap();
    let (key, member) = (&idx.samples[0].key, &idx.samples[0].members[0]);
    let mut body = object_bytes(&shards, &shard).await;
    let at = usize::try_from(member.data_offset).unwrap();
    let len = usize::try_from(member.size).unwrap();
    body[at..at + len].iter_mut().for_each(|b| *b ^= 0x5a);
    let changed = bytes::Bytes::copy_from_slice(&body[at..at + len]);
    overwrite(&shards, shard.as_ref(), body.into()).await;

    let samples = drain(&loader, 1).await;
    let sample = samples.iter().find(|s| &s.key == key).unwrap();
    assert_eq!(
        sample.members[0].1, changed,
        "the old cached block was served for a shard the store no longer has"
    );
}

/// Bytes of the dataset's shards (`.tar` objects) below `prefix`, and their number.
async fn shard_bytes(data: &TestData, prefix: &str) -> (u64, u64) {
    let listed: Vec<_> = data
        .store(prefix)
        .object_store()
        .list(None)
        .try_collect()
        .await
        .unwrap();
    let tars = listed
        .iter()
        .filter(|m| m.location.as_ref().ends_with(".tar"));
    tars.fold((0, 0), |(bytes, n), m| (bytes + m.size, n + 1))
}

/// `samples` samples in shards of 4 below `shards`, the shards' bytes and number, and an empty
/// cache in a temporary directory.
async fn cached_shards(samples: u64) -> (TestData, (u64, u64), tempfile::TempDir, Arc<Cache>) {
    let data = TestData::shards(samples, 4).await;
    let sizes = shard_bytes(&data, "shards").await;
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(CacheBuilder::new(dir.path(), 64 << 20).build().unwrap());
    (data, sizes, dir, cache)
}

/// Worker `worker` of `workers` streaming the shards of `data`, shuffled, with `cache`.
async fn streamed(data: &TestData, cache: &Arc<Cache>, worker: u32, workers: u32) -> Loader {
    let config = data
        .loader("shards")
        .with_format(Format::Shards)
        .with_order(Order::shuffled(5).with_shuffle_buffer(8))
        .with_worker(worker, workers)
        .with_cache(cache.clone());
    Loader::open(config.build().unwrap()).await.unwrap()
}

/// Shard streams are cached: a streamed epoch files each shard's bytes once (a shard smaller
/// than the first request is one block), and the next epoch, in another shard order, reads
/// every block from disk and sends no GET.
#[tokio::test]
async fn a_streamed_epoch_two_is_served_from_the_cache() {
    let (data, (bytes, shards), _dir, cache) = cached_shards(40).await;
    let loader = streamed(&data, &cache, 0, 1).await;
    let first = drain(&loader, 0).await;
    // The last blocks may still be filling the cache when the epoch's last sample is out (the
    // next epoch waits for them): the cache is checked after epoch 2.
    let gets = data.gets();
    let second = drain(&loader, 1).await;
    second.iter().for_each(|s| data.check(s));
    let order = |samples: &[bucketload::loader::Sample]| -> Vec<String> {
        samples.iter().map(|s| s.key.clone()).collect()
    };
    assert_ne!(
        order(&first),
        order(&second),
        "epochs are shuffled differently"
    );
    assert_eq!(keys(&first), keys(&second));
    assert_eq!(data.gets(), gets, "epoch 2 sent no GET");
    let after = cache.stats().unwrap();
    assert_eq!(
        (after.entries, after.bytes_written, after.bytes_read),
        (shards, bytes, bytes),
        "each shard filed once, in epoch 1, and read back once, in epoch 2"
    );
}

/// Workers cut a rank's run of samples at sample counts, so the shard cut between two workers
/// moves with each epoch's shard order: the worker that starts mid-shard reads from there on
/// anew (its blocks start at another offset, found in the shard's index). With two workers,
/// epoch 2 sends at most that one shard's GETs (two here: its index, and one block, shards
/// being smaller than the first request) and caches that much more.
#[tokio::test]
async fn a_streamed_epoch_two_of_two_workers_rereads_at_most_the_cut_shard() {
    let (data, (bytes, shards), _dir, cache) = cached_shards(42).await;
    let mut loaders = Vec::new();
    for worker in 0..2 {
        loaders.push(streamed(&data, &cache, worker, 2).await);
    }
    let mut samples = 0;
    for loader in &loaders {
        samples += drain(loader, 0).await.len();
    }
    assert_eq!(samples, 42);
    let gets = data.gets();
    for loader in &loaders {
        drain(loader, 1).await.iter().for_each(|s| data.check(s));
    }
    assert!(
        data.gets() - gets <= 2,
        "epoch 2 sent {} GETs",
        data.gets() - gets
    );
    // Every shard whole, plus the tail from each epoch's cut and the index of its shard
    // (checked after epoch 2: the last blocks of an epoch may still be filling the cache when
    // its last sample is out). A tail is less than a shard of 4 samples, about 1.05 times the
    // mean shard here (one shard holds 2); an index of 4 samples is smaller than that.
    let after = cache.stats().unwrap();
    assert!(after.entries <= shards + 4, "{after:?}");
    assert!(
        after.bytes_written <= bytes + bytes.div_ceil(shards) * 5,
        "{after:?}"
    );
}

/// A streamed loader of `data`'s shards with a cache in a new directory (kept while the loader
/// is used) and metadata TTL `ttl`.
async fn streamed_with_cache(
    data: &TestData,
    ttl: std::time::Duration,
) -> (Loader, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(CacheBuilder::new(dir.path(), 64 << 20).build().unwrap());
    let config = data
        .loader("shards")
        .with_format(Format::Shards)
        .with_cache(cache)
        .with_metadata_ttl(ttl);
    (Loader::open(config.build().unwrap()).await.unwrap(), dir)
}

/// With a metadata TTL, a streamed shard's version is asked of the store once per loader: the
/// warm epoch sends no request at all (no `HEAD`, no `GET`), and within the TTL a shard
/// rewritten in place is still served whole as the version first read. Without one (the
/// default), every epoch asks again, one `HEAD` per shard.
#[tokio::test]
async fn a_metadata_ttl_spares_a_warm_streamed_epoch_every_request() {
    let data = TestData::shards(12, 4).await;
    let shards = data.store("shards");
    let listed: Vec<_> = shards
        .object_store()
        .list(None)
        .try_collect()
        .await
        .unwrap();
    let tars: Vec<_> = listed
        .iter()
        .filter(|m| m.location.as_ref().ends_with(".tar"))
        .collect();
    let heads = || data.server.counters().get("HeadObject");
    for ttl in [std::time::Duration::ZERO, std::time::Duration::MAX] {
        let (loader, _dir) = streamed_with_cache(&data, ttl).await;
        let first = drain(&loader, 0).await;
        assert_eq!(first.len(), 12);
        let (gets, asked) = (data.gets(), heads());
        let second = drain(&loader, 1).await;
        second.iter().for_each(|s| data.check(s));
        assert_eq!(keys(&first), keys(&second));
        assert_eq!(data.gets(), gets, "{ttl:?}: the warm epoch sent a GET");
        let expected = if ttl.is_zero() { tars.len() as u64 } else { 0 };
        assert_eq!(
            heads() - asked,
            expected,
            "{ttl:?}: HEADs of the warm epoch"
        );
    }

    // Within the TTL, a shard rewritten in place (same size) is the version first read.
    let (loader, dir) = streamed_with_cache(&data, std::time::Duration::MAX).await;
    let before = drain(&loader, 0).await;
    let shard = &tars[0].location;
    let mut body = object_bytes(&shards, shard).await;
    let middle = body.len() / 2;
    body[middle] ^= 0x5a;
    overwrite(&shards, shard.as_ref(), body.into()).await;
    let after = drain(&loader, 1).await;
    let members = |samples: &[bucketload::loader::Sample]| {
        let mut all: Vec<_> = samples
            .iter()
            .map(|s| (s.key.clone(), s.members.clone()))
            .collect();
        all.sort();
        all
    };
    assert_eq!(members(&before), members(&after));

    // A block of it no longer cached is fetched, but the store's other ETag fails the epoch
    // with an error naming the shard: never bytes of two versions in one sample stream.
    entry_files(dir.path())
        .iter()
        .for_each(|f| std::fs::remove_file(f).unwrap());
    let failed: Result<Vec<_>, _> = loader.epoch(2).unwrap().try_collect().await;
    let error = failed
        .expect_err("a block of the replaced shard was served")
        .to_string();
    assert!(
        error.contains(shard.as_ref()) && error.contains("opened again"),
        "{error}"
    );
}
