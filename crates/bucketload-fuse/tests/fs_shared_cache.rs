//! One disk cache shared by the loader and the mount (docs/SEMANTICS.md): what one reads, the
//! other serves without a GET, whichever reads first and whatever quotes the store puts around
//! its ETags; and a manifest mount whose object changed fails the read (EIO, naming the object)
//! without ever caching the changed bytes as the manifest's version.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bucketload::base::NoProgress;
use bucketload::loader::{Cache, CacheBuilder, Loader, LoaderConfig};
use bucketload::shards::write_files_manifest;
use bucketload_fuse::{Fs, MountConfig, OpenMode, ROOT, errno};
use bucketload_store::Store;
use bucketload_store::object_store::ObjectStoreExt;
use bucketload_store::object_store::path::Path;
use bucketload_test_support::{EmbeddedServer, MotoServer};
use futures::TryStreamExt;

const KEYS: [&str; 6] = [
    "a/0.jpg", "a/1.jpg", "a/2.jpg", "b/3.jpg", "b/4.jpg", "b/5.jpg",
];

fn body(i: usize) -> Vec<u8> {
    (0..3000 + i * 17).map(|j| (j * 7 + i) as u8).collect()
}

/// The server a test runs against, kept alive (and stopped on drop) by the test.
type Server = Box<dyn std::any::Any + Send>;

/// A server (moto's when `moto`, else the embedded one), a prefix holding [`KEYS`] and, when
/// `manifest`, its files manifest.
async fn dataset_on(manifest: bool, moto: bool) -> (Server, Store) {
    let (server, config, bucket) = match moto {
        true => {
            let moto = MotoServer::start();
            let bucket = moto.bucket().await;
            let config = moto.store_config();
            (Box::new(moto) as Server, config, bucket)
        }
        false => {
            let server = EmbeddedServer::start().await;
            let bucket = server.bucket().await;
            let config = server.store_config();
            (Box::new(server) as Server, config, bucket)
        }
    };
    let store = Store::open(&format!("s3://{bucket}/data"), &config).unwrap();
    for (i, key) in KEYS.iter().enumerate() {
        let os = store.object_store();
        os.put(&Path::from(*key), body(i).into()).await.unwrap();
    }
    if manifest {
        write_files_manifest(
            &store,
            8,
            bucketload_format::ManifestFormat::Binary,
            &NoProgress,
        )
        .await
        .unwrap();
    }
    (server, store)
}

async fn dataset(manifest: bool) -> (Server, Store) {
    dataset_on(manifest, false).await
}

fn cache(dir: &tempfile::TempDir) -> Arc<Cache> {
    Arc::new(CacheBuilder::new(dir.path(), 64 << 20).build().unwrap())
}

/// Reads every sample with the loader; returns (key, bytes) sorted and the GETs it made.
async fn load(store: &Store, cache: Arc<Cache>) -> (Vec<(String, Vec<u8>)>, u64) {
    let config = LoaderConfig::for_store(store.clone())
        .with_concurrency(8)
        .with_cache(cache)
        .build()
        .unwrap();
    let loader = Loader::open(config).await.unwrap();
    let mut samples: Vec<(String, Vec<u8>)> = loader
        .epoch(0)
        .unwrap()
        .map_ok(|s| (s.key.clone(), s.members[0].1.to_vec()))
        .try_collect()
        .await
        .unwrap();
    samples.sort();
    (samples, loader.stats().requests.get)
}

async fn mount(store: &Store, cache: Arc<Cache>) -> Fs {
    Fs::new(store.clone(), MountConfig::default().with_cache(cache))
        .await
        .unwrap()
}

async fn read_file(fs: &Fs, path: &str) -> Result<Vec<u8>, bucketload_fuse::Error> {
    let mut ino = ROOT;
    for name in path.split('/') {
        ino = fs.lookup(ino, name).await?.ino;
    }
    let fh = fs.open(ino, OpenMode::default(), 1).await?;
    let mut out = Vec::new();
    let result = loop {
        match fs.read(fh, out.len() as u64, 65536).await {
            Ok(bytes) if bytes.is_empty() => break Ok(out),
            Ok(bytes) => out.extend_from_slice(&bytes),
            Err(e) => break Err(e),
        }
    };
    fs.release(fh).await.unwrap();
    result
}

fn expected() -> Vec<(String, Vec<u8>)> {
    let mut all: Vec<_> = KEYS
        .iter()
        .enumerate()
        .map(|(i, k)| (k.to_string(), body(i)))
        .collect();
    all.sort();
    all
}

async fn loader_then_mount(manifest: bool, moto: bool) {
    let (_server, store) = dataset_on(manifest, moto).await;
    let dir = tempfile::tempdir().unwrap();
    let (samples, gets) = load(&store, cache(&dir)).await;
    assert_eq!((samples, gets), (expected(), KEYS.len() as u64));

    let fs = mount(&store, cache(&dir)).await;
    let base = fs.store().metrics().snapshot().requests;
    for (i, key) in KEYS.iter().enumerate() {
        assert_eq!(read_file(&fs, key).await.unwrap(), body(i), "{key}");
    }
    let after = fs.store().metrics().snapshot().requests;
    assert_eq!(
        (after.get - base.get, after.ranged_get - base.ranged_get),
        (0, 0),
        "the mount read every file from the loader's cache entries (manifest: {manifest})"
    );
}

async fn mount_then_loader(manifest: bool, moto: bool) {
    let (_server, store) = dataset_on(manifest, moto).await;
    let dir = tempfile::tempdir().unwrap();
    let fs = mount(&store, cache(&dir)).await;
    for (i, key) in KEYS.iter().enumerate() {
        assert_eq!(read_file(&fs, key).await.unwrap(), body(i), "{key}");
    }
    let (samples, gets) = load(&store, cache(&dir)).await;
    assert_eq!(samples, expected());
    assert_eq!(
        gets, 0,
        "the loader read every sample from the mount's cache entries (manifest: {manifest})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mount_reads_what_the_loader_cached_without_a_get() {
    loader_then_mount(true, false).await;
    loader_then_mount(false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loader_reads_what_the_mount_cached_without_a_get() {
    mount_then_loader(true, false).await;
    mount_then_loader(false, false).await;
}

/// moto quotes its ETags as S3 does, and the manifest records them bare: one cache all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loader_and_the_mount_share_entries_on_moto() {
    for manifest in [true, false] {
        loader_then_mount(manifest, true).await;
        mount_then_loader(manifest, true).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_mount_refuses_a_changed_object_and_never_caches_it() {
    let (_server, store) = dataset(true).await;
    let dir = tempfile::tempdir().unwrap();
    let fs = mount(&store, cache(&dir)).await;
    let (key, original) = (KEYS[1], body(1));
    let mut changed = original.clone();
    changed[10] ^= 0xff;
    let os = store.object_store();
    os.put(&Path::from(key), changed.into()).await.unwrap();

    let err = read_file(&fs, key).await.unwrap_err();
    assert_eq!(err.errno(), errno::EIO, "{err}");
    assert!(err.to_string().contains(key), "{err}");

    os.put(&Path::from(key), original.clone().into())
        .await
        .unwrap();
    assert_eq!(read_file(&fs, key).await.unwrap(), original);
    // And the loader, sharing the cache, gets the restored bytes too.
    let (samples, _) = load(&store, cache(&dir)).await;
    assert_eq!(samples, expected());
}
