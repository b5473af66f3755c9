//! What a server does to its root before it serves: it refuses a root another server uses,
//! and removes what earlier runs left behind — temporary files of writes that never finished
//! and expired multipart uploads — without touching objects or recent uploads.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path as FsPath;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bucketload_server::{Error, ServerConfig};
use bucketload_test_support::pattern;
use common::TestServer;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};

const DAY: Duration = Duration::from_secs(24 * 3600);

/// Starts a multipart upload of `key` with one 1000-byte part; its id and part.
async fn unfinished_upload(t: &TestServer, key: &str) -> (String, PartId) {
    let s3 = t.s3();
    let path = Path::from(key);
    let id = s3.create_multipart(&path).await.unwrap();
    let part = s3
        .put_part(&path, &id, 0, PutPayload::from(pattern(1000, 3)))
        .await
        .unwrap();
    (id, part)
}

/// Moves the start of upload `id` `age` into the past, as if it had begun then.
fn backdate(root: &FsPath, id: &str, age: Duration) {
    let record = root
        .join(".bucketload/uploads/bkt")
        .join(id)
        .join("upload.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let then = SystemTime::now() - age;
    json["initiated_ns"] = (then.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64).into();
    std::fs::write(&record, serde_json::to_vec(&json).unwrap()).unwrap();
}

#[tokio::test]
async fn start_removes_orphan_temp_files_and_expired_uploads_only() {
    let t = TestServer::start().await;
    t.store()
        .put(
            &Path::from("kept/object"),
            PutPayload::from(pattern(5000, 1)),
        )
        .await
        .unwrap();
    let (old, _) = unfinished_upload(&t, "old").await;
    let (recent, part) = unfinished_upload(&t, "recent").await;
    backdate(t.dir.path(), &old, 8 * DAY);
    backdate(t.dir.path(), &recent, 6 * DAY);
    let tmp = t.dir.path().join(".bucketload/tmp");
    std::fs::write(tmp.join("orphan-1"), vec![0u8; 3000]).unwrap();
    std::fs::write(tmp.join("orphan-2"), vec![0u8; 1500]).unwrap();
    let TestServer { server, dir } = t;
    server.shutdown().await;

    let config = ServerConfig::builder(dir.path()).build().unwrap();
    let server = bucketload_server::start(config).await.unwrap();
    let t = TestServer { server, dir };
    let reclaimed = *t.server.reclaimed();
    assert_eq!(reclaimed.temp_files, 2, "{reclaimed:?}");
    assert_eq!(reclaimed.uploads, 1, "{reclaimed:?}");
    // Two temporary files; the old upload's record, its part and the part's record.
    assert_eq!(reclaimed.files, 5, "{reclaimed:?}");
    assert!(reclaimed.bytes >= 3000 + 1500 + 1000, "{reclaimed:?}");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
    assert!(
        !t.dir
            .path()
            .join(".bucketload/uploads/bkt")
            .join(&old)
            .exists()
    );
    let got = t.store().get(&Path::from("kept/object")).await.unwrap();
    assert_eq!(
        got.bytes().await.unwrap().as_ref(),
        pattern(5000, 1).as_slice()
    );
    t.s3()
        .complete_multipart(&Path::from("recent"), &recent, vec![part])
        .await
        .unwrap();
    let done = t.store().get(&Path::from("recent")).await.unwrap();
    assert_eq!(
        done.bytes().await.unwrap().as_ref(),
        pattern(1000, 3).as_slice()
    );
}

#[tokio::test]
async fn a_second_server_on_the_same_root_is_refused() {
    let t = TestServer::start().await;
    let config = ServerConfig::builder(t.dir.path()).build().unwrap();
    let err = bucketload_server::start(config.clone()).await.unwrap_err();
    assert!(matches!(err, Error::RootInUse { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("in use by another bucketload server"),
        "{err}"
    );
    let TestServer { server, dir: _dir } = t;
    server.shutdown().await;
    let again = bucketload_server::start(config).await.unwrap();
    assert!(again.reclaimed().is_empty());
}

#[tokio::test]
async fn servers_sharing_a_root_serve_it_side_by_side_and_clean_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let shared = ServerConfig::builder(dir.path())
        .with_shared_root(true)
        .build()
        .unwrap();
    let first = bucketload_server::start(shared.clone()).await.unwrap();
    // A write in flight of the first server: the second must not clean it away.
    let temp = dir.path().join(".bucketload/tmp/in-flight");
    std::fs::write(&temp, b"being written").unwrap();
    let second = bucketload_server::start(shared.clone()).await.unwrap();
    assert!(second.reclaimed().is_empty());
    assert!(temp.exists(), "a sharing server cleaned the root at start");
    // A server that would clean the root is refused while they share it.
    let exclusive = ServerConfig::builder(dir.path()).build().unwrap();
    let err = bucketload_server::start(exclusive).await.unwrap_err();
    assert!(matches!(err, Error::RootInUse { .. }), "{err:?}");
    first.shutdown().await;
    second.shutdown().await;
}
