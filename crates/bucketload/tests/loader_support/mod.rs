//! Datasets on the embedded S3 server for the loader's tests: small objects in class folders,
//! with a files manifest, or packed into indexed tar shards with a manifest.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::HashMap;

use bucketload::base::NoProgress;
use bucketload::loader::{Loader, LoaderBuilder, LoaderConfig, Sample};
use bucketload::shards::{Cut, ShardOptions, shard_dataset, write_files_manifest};
use bucketload_store::object_store::{ObjectStoreExt, PutPayload};
use bucketload_store::{Store, key_path};
use bucketload_test_support::EmbeddedServer;
use bytes::Bytes;
use futures::TryStreamExt;

/// Classes of the test datasets (folders `class_0` … `class_3`).
pub const CLASSES: u64 = 4;

/// What a sample must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub bytes: Bytes,
    pub label: u32,
}

/// A dataset on a running embedded server.
#[derive(Debug)]
pub struct TestData {
    pub server: EmbeddedServer,
    pub bucket: String,
    /// Object key (`class_1/0005.jpg`) → contents and label.
    pub objects: HashMap<String, Expected>,
}

/// Deterministic contents of an object: sizes from 100 bytes to about 3 KB.
fn body(key: &str, n: u64) -> Bytes {
    let size = 100 + (n * 7919) % 2900;
    let pattern = format!("{key}|");
    Bytes::from(
        pattern
            .bytes()
            .cycle()
            .take(size as usize)
            .collect::<Vec<u8>>(),
    )
}

impl TestData {
    /// `n` objects below `s3://bucket/src`, in `CLASSES` folders; the files manifest is written
    /// when `manifest` is set.
    pub async fn files(n: u64, manifest: bool) -> TestData {
        let server = EmbeddedServer::start().await;
        let bucket = server.bucket().await;
        let data = TestData {
            server,
            bucket,
            objects: HashMap::new(),
        };
        data.upload(n, manifest).await
    }

    async fn upload(mut self, n: u64, manifest: bool) -> TestData {
        let src = self.store("src");
        for i in 0..n {
            let class = i % CLASSES;
            let key = format!("class_{class}/{i:04}.jpg");
            let bytes = body(&key, i);
            src.object_store()
                .put(&key_path(&key), PutPayload::from(bytes.clone()))
                .await
                .unwrap();
            let label = class as u32;
            self.objects.insert(key, Expected { bytes, label });
        }
        if manifest {
            write_files_manifest(
                &src,
                16,
                bucketload::shards::format::ManifestFormat::Binary,
                &NoProgress,
            )
            .await
            .unwrap();
        }
        self
    }

    /// `n` objects packed into indexed shards of `per_shard` samples below `s3://bucket/shards`.
    pub async fn shards(n: u64, per_shard: u64) -> TestData {
        let data = TestData::files(n, false).await;
        let options = ShardOptions::builder()
            .with_cut(Cut::Samples(per_shard))
            .with_seed(Some(7))
            .build()
            .unwrap();
        shard_dataset(
            &data.store("src"),
            &data.store("shards"),
            &options,
            &NoProgress,
        )
        .await
        .unwrap();
        data
    }

    /// The store of `s3://bucket/prefix`.
    pub fn store(&self, prefix: &str) -> Store {
        let uri = format!("s3://{}/{prefix}", self.bucket);
        Store::open(&uri, &self.server.store_config().with_concurrency(256)).unwrap()
    }

    /// A loader builder of the dataset below `prefix`.
    pub fn loader(&self, prefix: &str) -> LoaderBuilder {
        LoaderConfig::for_store(self.store(prefix))
    }

    /// GETs the server answered so far.
    pub fn gets(&self) -> u64 {
        self.server.counters().get("GetObject")
    }

    /// Checks a sample against its object: bytes of its data member and label. Shard samples
    /// are keyed without extension and carry a `.cls` member.
    pub fn check(&self, sample: &Sample) {
        let (key, data) = match sample.get("jpg") {
            Some(data) if !sample.key.ends_with(".jpg") => (format!("{}.jpg", sample.key), data),
            Some(data) => (sample.key.clone(), data),
            None => panic!(
                "sample {} has no jpg member: {:?}",
                sample.key, sample.members
            ),
        };
        let expected = self
            .objects
            .get(&key)
            .unwrap_or_else(|| panic!("sample {key} is not in the dataset"));
        assert_eq!(data, &expected.bytes, "bytes of {key}");
        assert_eq!(sample.label, Some(expected.label), "label of {key}");
    }
}

/// Every sample of `loader`'s epoch `epoch`.
pub async fn drain(loader: &Loader, epoch: u64) -> Vec<Sample> {
    loader.epoch(epoch).unwrap().try_collect().await.unwrap()
}

/// Object keys of `samples` (shard keys get their `.jpg` back), sorted.
pub fn keys(samples: &[Sample]) -> Vec<String> {
    let mut keys: Vec<String> = samples
        .iter()
        .map(|s| match s.key.ends_with(".jpg") {
            true => s.key.clone(),
            false => format!("{}.jpg", s.key),
        })
        .collect();
    keys.sort();
    keys
}

/// The bytes of the object at `key` of `store`, read with the object store directly.
pub async fn object_bytes(
    store: &Store,
    key: &bucketload_store::object_store::path::Path,
) -> Vec<u8> {
    let got = store.object_store().get(key).await.unwrap();
    got.bytes().await.unwrap().to_vec()
}
