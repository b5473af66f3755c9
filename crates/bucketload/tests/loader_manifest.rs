//! Both manifest formats on the embedded S3 server: format 2 written by default and streamed
//! into a sink from the GET; format 1 (JSON) still read, through the same reader, with the same
//! entries; writing one format deletes the other; a truncated or damaged manifest is an error
//! naming it and nothing is loaded.
#![allow(clippy::unwrap_used)]

mod loader_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bucketload::ErrorKind;
use bucketload::base::{Location, NoProgress};
use bucketload::loader::Loader;
use bucketload::shards::format::{
    Entry, MANIFEST_BIN_PATH, MANIFEST_PATH, Manifest, ManifestFormat,
};
use bucketload::shards::write_files_manifest;
use bucketload_store::Store;
use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path};
use loader_support::{TestData, drain, keys};

async fn exists(store: &Store, key: &str) -> bool {
    store.object_store().head(&Path::from(key)).await.is_ok()
}

/// Every key the loader reads, sorted.
async fn loaded(data: &TestData) -> Vec<String> {
    let loader = Loader::open(data.loader("src").build().unwrap())
        .await
        .unwrap();
    keys(&drain(&loader, 0).await)
}

#[tokio::test]
async fn format_2_is_written_streamed_and_loaded_and_format_1_still_is() {
    let data = TestData::files(57, true).await;
    let src = data.store("src");
    assert!(exists(&src, MANIFEST_BIN_PATH).await);
    assert!(!exists(&src, MANIFEST_PATH).await);
    let mut expected: Vec<String> = data.objects.keys().cloned().collect();
    expected.sort();

    // Streamed into a sink: one entry at a time, in key order, then the header.
    let location = Location::from_store(&src);
    let seen = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&seen);
    let read = location
        .read_manifest(move |entry| {
            assert!(matches!(entry, Entry::File(_)));
            counter.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .await
        .unwrap()
        .expect("a manifest");
    assert_eq!(read.key.as_ref(), MANIFEST_BIN_PATH);
    assert_eq!((read.header.format_version, read.header.entries), (2, 57));
    assert_eq!(seen.load(Ordering::Relaxed), 57);
    let binary = location.manifest().await.unwrap().unwrap();
    assert_eq!(loaded(&data).await, expected);

    // Format 1 replaces it (the binary one is deleted) and gives the same entries.
    write_files_manifest(&src, 8, ManifestFormat::Json, &NoProgress)
        .await
        .unwrap();
    assert!(!exists(&src, MANIFEST_BIN_PATH).await);
    let (key, json) = location.manifest_found().await.unwrap().unwrap();
    assert_eq!(key.as_ref(), MANIFEST_PATH);
    assert_eq!(json.format_version, 1);
    assert_eq!(json.files, binary.files);
    assert_eq!(json.classes, binary.classes);
    assert_eq!(loaded(&data).await, expected);

    // And back: format 2 deletes the JSON one.
    write_files_manifest(&src, 8, ManifestFormat::Binary, &NoProgress)
        .await
        .unwrap();
    assert!(!exists(&src, MANIFEST_PATH).await);
    assert_eq!(
        location.manifest().await.unwrap().unwrap().files,
        binary.files
    );
}

#[tokio::test]
async fn a_truncated_or_damaged_manifest_loads_nothing_and_is_named() {
    let data = TestData::files(20, true).await;
    let src = data.store("src");
    let key = Path::from(MANIFEST_BIN_PATH);
    let whole = bucketload_test_support::get_whole(&src, &key).await;
    let uri = format!("s3://{}/src/{MANIFEST_BIN_PATH}", data.bucket);
    let mut damaged = whole.to_vec();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x20;
    for bad in [
        whole[..whole.len() - 1].to_vec(),
        whole[..40].to_vec(),
        damaged,
    ] {
        src.object_store()
            .put(&key, PutPayload::from(bad))
            .await
            .unwrap();
        let err = Loader::open(data.loader("src").build().unwrap())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        assert!(err.to_string().starts_with(&uri), "{err}");
        assert!(err.to_string().contains("write it again"), "{err}");
        let got = Location::from_store(&src).manifest().await;
        assert!(got.is_err(), "never a partial manifest");
    }
}

#[tokio::test]
async fn a_sink_error_stops_the_stream_and_comes_back() {
    let data = TestData::files(30, true).await;
    let location = Location::from_store(&data.store("src"));
    let mut n = 0;
    let err = location
        .read_manifest(move |_| {
            n += 1;
            match n {
                10 => Err(bucketload::shards::format::Error::Manifest {
                    manifest: "catalog".into(),
                    reason: "full".into(),
                }),
                _ => Ok(()),
            }
        })
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "catalog: full");
}

#[tokio::test]
async fn a_shard_dataset_gets_a_format_2_manifest_its_loader_reads() {
    let data = TestData::shards(40, 10).await;
    let shards = data.store("shards");
    assert!(exists(&shards, MANIFEST_BIN_PATH).await);
    assert!(!exists(&shards, MANIFEST_PATH).await);
    let manifest = Location::from_store(&shards)
        .manifest()
        .await
        .unwrap()
        .unwrap();
    assert_eq!((manifest.shards.len(), manifest.samples), (4, 40));
    let bytes = shards
        .object_store()
        .get(&Path::from(MANIFEST_BIN_PATH))
        .await
        .unwrap();
    let bytes = bytes.bytes().await.unwrap();
    assert_eq!(Manifest::read("m", &bytes[..]).unwrap(), manifest);
    let loader = Loader::open(data.loader("shards").build().unwrap())
        .await
        .unwrap();
    let samples = drain(&loader, 0).await;
    assert_eq!(samples.len(), 40);
    for sample in &samples {
        data.check(sample);
    }
}
