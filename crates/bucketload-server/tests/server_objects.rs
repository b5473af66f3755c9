//! Object operations through a real S3 client (object_store's AmazonS3).
#![allow(clippy::unwrap_used)]

mod common;

use bucketload_test_support::pattern;
use bytes::Bytes;
use common::{TestServer, md5_hex};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};

#[tokio::test]
async fn put_get_head_delete_with_etags() {
    let t = TestServer::start().await;
    let store = t.store();
    let data = pattern(100_000, 1);
    let key = Path::from("dir/sub/object.bin");
    let put = store
        .put(&key, PutPayload::from(data.clone()))
        .await
        .unwrap();
    assert_eq!(
        put.e_tag.as_deref(),
        Some(format!("\"{}\"", md5_hex(&data)).as_str())
    );

    let got = store.get(&key).await.unwrap();
    assert_eq!(got.meta.size, data.len() as u64);
    assert_eq!(got.meta.e_tag.as_deref(), put.e_tag.as_deref());
    assert_eq!(got.bytes().await.unwrap(), Bytes::from(data.clone()));

    let head = store.head(&key).await.unwrap();
    assert_eq!(head.size, data.len() as u64);
    assert_eq!(head.e_tag, put.e_tag);

    store.delete(&key).await.unwrap();
    assert!(matches!(
        store.head(&key).await,
        Err(object_store::Error::NotFound { .. })
    ));
    assert!(
        !t.dir.path().join("bkt/dir").exists(),
        "empty directories are removed"
    );
    store.delete(&key).await.unwrap(); // deleting a missing key succeeds, as in S3
}

#[tokio::test]
async fn a_key_naming_a_directory_is_not_found() {
    let t = TestServer::start().await;
    let store = t.store();
    store
        .put(&Path::from("a/b/c"), PutPayload::from_static(b"x"))
        .await
        .unwrap();
    for key in ["a", "a/b"] {
        let err = store.get(&Path::from(key)).await.unwrap_err();
        assert!(
            matches!(err, object_store::Error::NotFound { .. }),
            "{key}: {err}"
        );
        let err = store.head(&Path::from(key)).await.unwrap_err();
        assert!(
            matches!(err, object_store::Error::NotFound { .. }),
            "{key}: {err}"
        );
    }
    let err = store.get(&Path::from("a/b/c/d")).await.unwrap_err();
    assert!(matches!(err, object_store::Error::NotFound { .. }), "{err}");
}

#[tokio::test]
async fn ranges_including_invalid() {
    let t = TestServer::start().await;
    let store = t.store();
    let data = pattern(3 * 1024 * 1024 + 17, 2); // more than one 1 MiB read chunk
    let key = Path::from("ranged");
    store
        .put(&key, PutPayload::from(data.clone()))
        .await
        .unwrap();

    // Read into a buffer (<= 16 KiB), sent with sendfile (<= 1 MiB), written from a map.
    let cases = [
        (0, 1),
        (5, 1000),
        (4097, 4097 + 200_000),
        (1_000_001, 1_000_001 + 1_048_576),
        (1_048_570, 2_097_160),
        (data.len() as u64 - 10, data.len() as u64),
    ];
    for (start, end) in cases {
        let bytes = store.get_range(&key, start..end).await.unwrap();
        assert_eq!(
            &bytes[..],
            &data[start as usize..end as usize],
            "{start}..{end}"
        );
    }
    let opts = GetOptions {
        range: Some(GetRange::Suffix(100)),
        ..Default::default()
    };
    let tail = store
        .get_opts(&key, opts)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&tail[..], &data[data.len() - 100..]);
    let opts = GetOptions {
        range: Some(GetRange::Offset(data.len() as u64 - 5)),
        ..Default::default()
    };
    let tail = store
        .get_opts(&key, opts)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&tail[..], &data[data.len() - 5..]);

    let len = data.len() as u64;
    let err = store
        .get_range(&key, len + 10..len + 20)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("416") || err.contains("InvalidRange"), "{err}");
}

#[tokio::test]
async fn whole_large_object_streams_intact() {
    let t = TestServer::start().await;
    let store = t.store();
    let data = pattern(5 * 1024 * 1024 + 3, 3);
    store
        .put(&Path::from("big"), PutPayload::from(data.clone()))
        .await
        .unwrap();
    let got = store
        .get(&Path::from("big"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got[..] == data[..]);
}

#[tokio::test]
async fn multipart_upload_etag_is_md5_of_md5s() {
    let t = TestServer::start_with(|b| b.with_min_part_size(1024)).await;
    let store = t.store();
    let key = Path::from("mp/object");
    let upload = store.put_multipart(&key).await.unwrap();
    let mut writer = WriteMultipart::new_with_chunk_size(upload, 64 * 1024);
    let data = pattern(64 * 1024 * 2 + 1000, 4);
    writer.write(&data);
    let result = writer.finish().await.unwrap();

    let mut md5s = Vec::new();
    for part in data.chunks(64 * 1024) {
        md5s.extend(hex::decode(md5_hex(part)).unwrap());
    }
    let expected = format!("\"{}-3\"", md5_hex(&md5s));
    assert_eq!(result.e_tag.as_deref(), Some(expected.as_str()));
    let got = store.get(&key).await.unwrap();
    assert_eq!(got.meta.e_tag.as_deref(), Some(expected.as_str()));
    assert_eq!(got.bytes().await.unwrap(), Bytes::from(data));
    assert_eq!(t.server.counters().get("UploadPart"), 3);
    assert_eq!(t.server.counters().get("CompleteMultipartUpload"), 1);
    // The parts are gone; what stays is the record that answers a repeated completion.
    let uploads = t.dir.path().join(".bucketload/uploads/bkt");
    for upload in std::fs::read_dir(uploads).unwrap() {
        let files: Vec<_> = std::fs::read_dir(upload.unwrap().path())
            .unwrap()
            .map(|f| f.unwrap().file_name())
            .collect();
        assert_eq!(
            files,
            ["completed.json"],
            "completed uploads are cleaned up"
        );
    }
}

#[tokio::test]
async fn small_parts_are_refused_as_s3_does() {
    let t = TestServer::start().await; // default minimum part size: 5 MiB
    let store = t.store();
    let upload = store
        .put_multipart(&Path::from("small-parts"))
        .await
        .unwrap();
    let mut writer = WriteMultipart::new_with_chunk_size(upload, 1024);
    writer.write(&pattern(3000, 5));
    let err = writer.finish().await.unwrap_err().to_string();
    assert!(err.contains("EntityTooSmall"), "{err}");
}

#[tokio::test]
async fn aborted_upload_leaves_nothing() {
    let t = TestServer::start().await;
    let store = t.store();
    let mut upload = store.put_multipart(&Path::from("aborted")).await.unwrap();
    upload
        .put_part(PutPayload::from(pattern(1000, 6)))
        .await
        .unwrap();
    upload.abort().await.unwrap();
    assert_eq!(t.server.counters().get("AbortMultipartUpload"), 1);
    assert!(matches!(
        store.head(&Path::from("aborted")).await,
        Err(object_store::Error::NotFound { .. })
    ));
    assert_eq!(
        std::fs::read_dir(t.dir.path().join(".bucketload/uploads/bkt"))
            .unwrap()
            .count(),
        0
    );
}

#[tokio::test]
async fn copy_and_bulk_delete() {
    let t = TestServer::start().await;
    let store = t.store();
    let data = pattern(5000, 7);
    store
        .put(&Path::from("src"), PutPayload::from(data.clone()))
        .await
        .unwrap();
    store
        .copy(&Path::from("src"), &Path::from("copies/dst"))
        .await
        .unwrap();
    let copy = store.get(&Path::from("copies/dst")).await.unwrap();
    assert_eq!(
        copy.meta.e_tag.as_deref(),
        Some(format!("\"{}\"", md5_hex(&data)).as_str())
    );
    assert_eq!(copy.bytes().await.unwrap(), Bytes::from(data));
    assert_eq!(t.server.counters().get("CopyObject"), 1);

    for i in 0..5 {
        store
            .put(
                &Path::from(format!("del/{i}")),
                PutPayload::from_static(b"x"),
            )
            .await
            .unwrap();
    }
    let paths = futures::stream::iter((0..5).map(|i| Ok(Path::from(format!("del/{i}")))));
    let deleted: Vec<Path> = store
        .delete_stream(Box::pin(paths))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(deleted.len(), 5);
    assert!(t.server.counters().get("DeleteObjects") >= 1);
    let left: Vec<_> = store
        .list(Some(&Path::from("del")))
        .try_collect()
        .await
        .unwrap();
    assert!(left.is_empty());
}

#[tokio::test]
async fn files_dropped_into_the_directory_are_served() {
    let t = TestServer::start().await;
    std::fs::create_dir_all(t.dir.path().join("bkt/raw")).unwrap();
    std::fs::write(t.dir.path().join("bkt/raw/file"), b"placed by hand").unwrap();
    let got = t.store().get(&Path::from("raw/file")).await.unwrap();
    assert_eq!(
        got.meta.e_tag.as_deref(),
        Some(format!("\"{}\"", md5_hex(b"placed by hand")).as_str())
    );
}
