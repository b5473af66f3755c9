//! One body per store behaviour, run on every backend: `mem://`, `file://`,
//! the embedded S3 server, moto's S3 server and SeaweedFS's S3 gateway.

#![allow(clippy::unwrap_used)] // tests fail loudly on any error

use bucketload_store::object_store::path::Path;
use bucketload_store::object_store::{ObjectStore, ObjectStoreExt};
use bucketload_store::{Error, MultipartOptions, MultipartWriter, ParallelGet};
use bucketload_test_support::Fixture;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// S3's minimum part size (all parts but the last).
const MIB5: u64 = 5 << 20;

fn data(len: usize, seed: u8) -> Bytes {
    bucketload_test_support::pattern(len, seed).into()
}

async fn read(store: &Arc<dyn ObjectStore>, key: &str) -> Bytes {
    store
        .get(&Path::from(key))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
}

async fn put_get_head(f: Fixture) {
    let os = f.store.object_store();
    let body = data(10_000, 1);
    os.put(&Path::from("dir/obj.bin"), body.clone().into())
        .await
        .unwrap();
    assert_eq!(read(&os, "dir/obj.bin").await, body);
    let meta = os.head(&Path::from("dir/obj.bin")).await.unwrap();
    assert_eq!(meta.size, 10_000);
    assert_eq!(meta.location, Path::from("dir/obj.bin"));
    let part = os
        .get_range(&Path::from("dir/obj.bin"), 100..200)
        .await
        .unwrap();
    assert_eq!(part, body.slice(100..200));
}

async fn prefix_is_relative(f: Fixture) {
    let scoped = f.open("nested/prefix");
    scoped
        .object_store()
        .put(&Path::from("k"), "v".into())
        .await
        .unwrap();
    let whole = f.store.object_store();
    assert_eq!(read(&whole, "nested/prefix/k").await, "v");
    assert_eq!(
        scoped.object_uri(&Path::from("k")),
        format!("{}/nested/prefix/k", f.uri)
    );
}

async fn list_with_delimiter(f: Fixture) {
    let os = f.store.object_store();
    for k in ["a/1", "a/2", "b/x/3", "top"] {
        os.put(&Path::from(k), "x".into()).await.unwrap();
    }
    let listed = os.list_with_delimiter(None).await.unwrap();
    let prefixes: Vec<_> = listed
        .common_prefixes
        .iter()
        .map(|p| p.to_string())
        .collect();
    let objects: Vec<_> = listed
        .objects
        .iter()
        .map(|o| o.location.to_string())
        .collect();
    assert_eq!(prefixes, ["a", "b"]);
    assert_eq!(objects, ["top"]);
    let inner = os
        .list_with_delimiter(Some(&Path::from("a")))
        .await
        .unwrap();
    assert_eq!(inner.objects.len(), 2);
}

async fn list_pagination(f: Fixture) {
    // S3 pages LIST at 1000 keys; 1001 forces a second page.
    const KEYS: usize = 1001;
    let os = f.store.object_store();
    futures::stream::iter(0..KEYS)
        .map(|i| {
            let os = Arc::clone(&os);
            async move {
                os.put(&Path::from(format!("many/{i:05}")), "x".into())
                    .await
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let before = f.store.metrics().snapshot();
    let mut keys: Vec<String> = os
        .list(Some(&Path::from("many")))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    keys.sort();
    assert_eq!(keys.len(), KEYS);
    assert_eq!(keys[1000], "many/01000");
    let after = f.store.metrics().snapshot();
    assert_eq!(after.requests.list - before.requests.list, 1);
    assert_eq!(after.retries, 0, "pages are not retries");
    if let Some(server) = f.embedded() {
        assert_eq!(server.counters().get("ListObjectsV2"), 2);
    }

    // The same keys as stored, page by page: one LIST per page on S3.
    let before = f.store.metrics().snapshot();
    let pages: Vec<_> = f
        .store
        .list_pages("many/", false)
        .try_collect()
        .await
        .unwrap();
    let mut listed: Vec<&str> = pages
        .iter()
        .flat_map(|p| p.objects.iter().map(|o| o.key.as_str()))
        .collect();
    listed.sort();
    assert_eq!(listed.len(), KEYS);
    assert_eq!(listed[1000], "many/01000");
    assert!(pages.iter().all(|p| p.prefixes.is_empty()));
    let after = f.store.metrics().snapshot();
    let lists = after.requests.list - before.requests.list;
    assert_eq!(lists, if f.is_s3() { 2 } else { 1 });
    let top: Vec<_> = f.store.list_pages("", true).try_collect().await.unwrap();
    assert!(
        top.iter().any(|p| p.prefixes.iter().any(|d| d == "many/")),
        "{top:?}"
    );
}

async fn copy_and_delete(f: Fixture) {
    let os = f.store.object_store();
    os.put(&Path::from("src"), "payload".into()).await.unwrap();
    os.copy(&Path::from("src"), &Path::from("dst"))
        .await
        .unwrap();
    assert_eq!(read(&os, "dst").await, "payload");
    os.delete(&Path::from("src")).await.unwrap();
    let err = os.head(&Path::from("src")).await.unwrap_err();
    assert!(
        matches!(err, bucketload_store::object_store::Error::NotFound { .. }),
        "{err}"
    );
    let s = f.store.metrics().snapshot();
    assert_eq!((s.requests.copy, s.requests.delete), (1, 1));
}

async fn multipart_writer(f: Fixture) {
    let opts = MultipartOptions {
        part_size: MIB5,
        concurrency: 2,
    };
    let key = Path::from("ckpt/model.pt");
    let mut w = MultipartWriter::new(f.store.object_store(), key.clone(), opts);
    let body = data(12 << 20, 7);
    for chunk in body.chunks(1 << 20) {
        w.write(Bytes::copy_from_slice(chunk)).await.unwrap();
    }
    w.finish().await.unwrap();
    assert_eq!(read(&f.store.object_store(), "ckpt/model.pt").await, body);
    let s = f.store.metrics().snapshot();
    assert_eq!(s.requests.multipart_create, 1);
    assert_eq!(s.requests.multipart_part, 3);
    assert_eq!(s.requests.multipart_complete, 1);
    assert_eq!(s.bytes_out, 12 << 20);
    if let Some(server) = f.embedded() {
        assert_eq!(server.counters().get("UploadPart"), 3);
        assert_eq!(server.counters().get("CompleteMultipartUpload"), 1);
    }
}

async fn abort_on_drop_leaves_no_object(f: Fixture) {
    let opts = MultipartOptions {
        part_size: MIB5,
        concurrency: 2,
    };
    let mut w = MultipartWriter::new(f.store.object_store(), Path::from("partial"), opts);
    w.write(data(6 << 20, 3)).await.unwrap();
    drop(w);
    let deadline = Instant::now() + Duration::from_secs(10);
    while f.store.metrics().snapshot().requests.multipart_abort == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(f.store.metrics().snapshot().requests.multipart_abort, 1);
    let os = f.store.object_store();
    assert!(os.head(&Path::from("partial")).await.is_err());
    let listed: Vec<_> = os.list(None).try_collect().await.unwrap();
    assert!(listed.is_empty(), "{listed:?}");
    if let Some(dir) = f.dir() {
        let left = std::fs::read_dir(dir).unwrap().count();
        assert_eq!(left, 0, "no staging file stays behind");
    }
    if let Some(server) = f.embedded() {
        assert_eq!(server.counters().get("AbortMultipartUpload"), 1);
    }
}

async fn get_parallel_equals_the_bytes(f: Fixture) {
    let body = data(3_000_001, 9);
    let key = Path::from("big.bin");
    f.store
        .object_store()
        .put(&key, body.clone().into())
        .await
        .unwrap();
    let opts = ParallelGet {
        part_size: 256 << 10,
        concurrency: 4,
        size: None,
    };
    let parts: Vec<Bytes> = f
        .store
        .get_parallel(&key, opts)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(parts.len(), 12);
    assert_eq!(parts.concat(), body);
    let s = f.store.metrics().snapshot();
    assert_eq!((s.requests.head, s.requests.ranged_get), (1, 12));
    assert_eq!(s.bytes_in, 3_000_001);
}

async fn not_found_names_the_uri(f: Fixture) {
    let key = Path::from("missing/key");
    let err = f.store.object_store().get(&key).await.unwrap_err();
    let err = f.store.map_error(err, &key);
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("{}/missing/key: object not found", f.uri)),
        "{text}"
    );
    let parallel: Vec<_> = f
        .store
        .get_parallel(&key, ParallelGet::default())
        .collect()
        .await;
    let err = parallel[0].as_ref().unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert_eq!(f.store.metrics().snapshot().errors.not_found, 2);
}

async fn invalid_range_names_the_object(f: Fixture) {
    let key = Path::from("short");
    let os = f.store.object_store();
    os.put(&key, data(10, 0).into()).await.unwrap();
    let err = os.get_range(&key, 100..200).await.unwrap_err();
    let err = f.store.map_error(err, &key);
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&format!("{}/short", f.uri)), "{text}");
    assert!(text.contains("range"), "{text}");
}

async fn metering_counts(f: Fixture) {
    let os = f.store.object_store();
    os.put(&Path::from("m"), data(1000, 0).into())
        .await
        .unwrap();
    read(&os, "m").await;
    os.get_range(&Path::from("m"), 0..10).await.unwrap();
    os.head(&Path::from("m")).await.unwrap();
    let _: Vec<_> = os.list(None).collect().await;
    let s = f.store.metrics().snapshot();
    assert_eq!(s.requests.put, 1);
    assert_eq!(s.requests.get, 1);
    assert_eq!(s.requests.ranged_get, 1);
    assert_eq!(s.requests.head, 1);
    assert_eq!(s.requests.list, 1);
    assert_eq!((s.bytes_out, s.bytes_in), (1000, 1010));
    assert_eq!(s.latency.first_byte_ms.count, 2);
    assert_eq!(s.latency.total_ms.count, 5);
    assert_eq!(s.retries, 0);
    let http = if f.is_s3() { 5 } else { 0 };
    assert_eq!(s.http_attempts, http);
    assert!(s.cost.requests_usd > 0.0);
}

async fn create_bucket_is_idempotent(f: Fixture) {
    f.store.create_bucket().await.unwrap();
    f.store.create_bucket().await.unwrap();
    f.store
        .object_store()
        .put(&Path::from("after"), "x".into())
        .await
        .unwrap();
}

bucketload_test_support::on_every_backend!(
    put_get_head,
    prefix_is_relative,
    list_with_delimiter,
    list_pagination,
    copy_and_delete,
    multipart_writer,
    abort_on_drop_leaves_no_object,
    get_parallel_equals_the_bytes,
    not_found_names_the_uri,
    invalid_range_names_the_object,
    metering_counts,
    create_bucket_is_idempotent,
);
