//! The files catalog one node shares: written once beside the disk cache, mapped by every
//! loader of the same dataset version, rebuilt when damaged.
#![allow(clippy::unwrap_used)]

mod loader_support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bucketload::loader::{Format, Loader, ManifestUse};
use bucketload_cache::CacheBuilder;
use loader_support::{TestData, drain, keys};

/// The shared catalog files in `cache_dir`.
fn catalog_files(cache_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(cache_dir.join("catalogs")) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "files"))
        .collect();
    files.sort();
    files
}

async fn open(data: &TestData, cache_dir: &Path, manifest: ManifestUse) -> Loader {
    let cache = Arc::new(CacheBuilder::new(cache_dir, 64 << 20).build().unwrap());
    let config = data
        .loader("src")
        .with_format(Format::Files)
        .with_manifest(manifest)
        .with_cache(cache)
        .build()
        .unwrap();
    Loader::open(config).await.unwrap()
}

async fn read_all(data: &TestData, loader: &Loader) -> Vec<String> {
    let samples = drain(loader, 0).await;
    samples.iter().for_each(|s| data.check(s));
    keys(&samples)
}

#[tokio::test]
async fn loaders_of_one_manifest_share_one_catalog_file() {
    let data = TestData::files(40, true).await;
    let dir = tempfile::tempdir().unwrap();
    let first = open(&data, dir.path(), ManifestUse::Trust).await;
    let files = catalog_files(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let inode = std::fs::metadata(&files[0]).unwrap().ino();
    let second = open(&data, dir.path(), ManifestUse::Trust).await;
    assert_eq!(catalog_files(dir.path()), files);
    assert_eq!(
        std::fs::metadata(&files[0]).unwrap().ino(),
        inode,
        "not rewritten"
    );
    let expected: Vec<String> = {
        let mut k: Vec<String> = data.objects.keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(read_all(&data, &first).await, expected);
    assert_eq!(read_all(&data, &second).await, expected);
    // A check against a listing reads the manifest and still uses the same file.
    let checked = open(&data, dir.path(), ManifestUse::Check).await;
    assert_eq!(std::fs::metadata(&files[0]).unwrap().ino(), inode);
    assert_eq!(read_all(&data, &checked).await, expected);
}

#[tokio::test]
async fn a_damaged_catalog_file_is_rebuilt_not_trusted() {
    let data = TestData::files(40, true).await;
    let dir = tempfile::tempdir().unwrap();
    let good = {
        let loader = open(&data, dir.path(), ManifestUse::Trust).await;
        drop(loader);
        std::fs::read(&catalog_files(dir.path())[0]).unwrap()
    };
    let path = catalog_files(dir.path())[0].clone();
    // A flipped byte in the keys, then a truncated file: each is rebuilt and the dataset reads
    // as it is.
    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x20;
    for damaged in [flipped, good[..good.len() - 5].to_vec()] {
        std::fs::write(&path, &damaged).unwrap();
        let loader = open(&data, dir.path(), ManifestUse::Trust).await;
        assert_eq!(std::fs::read(&path).unwrap(), good, "rebuilt");
        assert_eq!(read_all(&data, &loader).await.len(), data.objects.len());
    }
}

#[tokio::test]
async fn a_catalog_from_a_listing_is_not_shared() {
    let data = TestData::files(12, false).await;
    let dir = tempfile::tempdir().unwrap();
    let loader = open(&data, dir.path(), ManifestUse::Trust).await;
    assert!(catalog_files(dir.path()).is_empty());
    assert_eq!(read_all(&data, &loader).await.len(), 12);
}
