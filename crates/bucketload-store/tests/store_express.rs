//! S3 Express One Zone directory buckets (`base--zone-id--x-s3`) through [`Store`], against the
//! embedded server, which makes every bucket so named a directory bucket: each request must be
//! signed with a session from CreateSession. The server counts CreateSession, so the tests see
//! how many sessions the process opened.

#![allow(clippy::unwrap_used)] // tests fail loudly on any error

use bucketload_server::FaultKind;
use bucketload_store::object_store::path::Path;
use bucketload_store::object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use bucketload_store::{Error, ErrorKind, MultipartOptions, Store};
use bucketload_test_support::{EmbeddedServer, create_bucket, s3_config};
use bytes::Bytes;
use futures::TryStreamExt;
use std::time::Duration;

/// A directory bucket name not used by any other test of this process (sessions are cached
/// per bucket for the whole process).
fn directory_bucket() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("x{}n{n}--use1-az4--x-s3", std::process::id())
}

fn body(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

async fn keys(store: &Store, prefix: &str) -> Vec<String> {
    let mut keys: Vec<String> = store
        .object_store()
        .list(Some(&Path::from(prefix)))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    // Directory buckets list in no particular order.
    keys.sort();
    keys
}

/// Every kind of request through two stores of one process, object_store's and bucketload's
/// own signed ones (CreateBucket, the multipart-upload listing and abort): one CreateSession
/// for them all. A general purpose bucket on the same server never opens a session.
#[tokio::test]
async fn one_session_serves_every_request_of_two_stores() {
    let server = EmbeddedServer::start_with(|b| b.with_min_part_size(1 << 20)).await;
    let bucket = directory_bucket();
    let config = server.store_config();
    let store = Store::open(&format!("s3://{bucket}/data"), &config).unwrap();
    store.create_bucket().await.unwrap();
    let os = store.object_store();

    let small = Path::from("a/one ü+.bin");
    os.put(&small, body(1000).into()).await.unwrap();
    let got = os.get(&small).await.unwrap().bytes().await.unwrap();
    assert_eq!(got, body(1000));
    let range = os.get_range(&small, 10..20).await.unwrap();
    assert_eq!(range, body(1000).slice(10..20));
    assert_eq!(os.head(&small).await.unwrap().size, 1000);

    // Parts of 1 MiB, two in flight.
    let opts = MultipartOptions {
        part_size: 1 << 20,
        concurrency: 2,
    };
    let big = Path::from("a/big.bin");
    let mut w = bucketload_store::MultipartWriter::new(os.clone(), big.clone(), opts);
    w.write(body(3 << 20)).await.unwrap();
    w.finish().await.unwrap();
    let got = os.get(&big).await.unwrap().bytes().await.unwrap();
    assert_eq!(got, body(3 << 20));

    let copy = Path::from("b/copy.bin");
    os.copy(&small, &copy).await.unwrap();
    let mut expected = [big.to_string(), small.to_string()];
    expected.sort();
    assert_eq!(keys(&store, "a").await, expected);
    os.delete(&small).await.unwrap();
    assert!(matches!(
        os.head(&small).await,
        Err(bucketload_store::object_store::Error::NotFound { .. })
    ));

    // An upload left unfinished: listed and aborted by bucketload's own signed requests.
    let mut upload = os.put_multipart(&Path::from("up/ckpt.pt")).await.unwrap();
    upload
        .put_part(PutPayload::from(body(1 << 20)))
        .await
        .unwrap();
    let uploads = store.list_uploads("up/").await.unwrap();
    assert_eq!(uploads.len(), 1, "{uploads:?}");
    assert_eq!(uploads[0].key, "up/ckpt.pt");
    store
        .abort_upload(&uploads[0].key, &uploads[0].upload_id)
        .await
        .unwrap();
    assert!(store.list_uploads("up/").await.unwrap().is_empty());
    drop(upload);

    // A second store of the process, on the bucket's root.
    let other = Store::open(&format!("s3://{bucket}"), &config).unwrap();
    let got = other
        .object_store()
        .get(&Path::from("data/b/copy.bin"))
        .await
        .unwrap();
    assert_eq!(got.bytes().await.unwrap(), body(1000));
    assert_eq!(
        keys(&other, "data").await,
        ["data/a/big.bin", "data/b/copy.bin"]
    );

    // A general purpose bucket beside it: unchanged, no session.
    let general = server.bucket().await;
    let plain = Store::open(&format!("s3://{general}"), &config).unwrap();
    plain
        .object_store()
        .put(&Path::from("k"), "v".into())
        .await
        .unwrap();
    assert_eq!(
        plain
            .object_store()
            .get(&Path::from("k"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
        "v"
    );
    plain.list_uploads("").await.unwrap();

    let counters = server.counters();
    assert_eq!(counters.get("CreateSession"), 1, "{counters:?}");
    assert!(counters.get("UploadPart") >= 4, "{counters:?}");
    // Sessions are fetched outside any logical request: not counted as retries.
    assert_eq!(store.metrics().snapshot().retries, 0);
}

/// A request the bucket refuses as signed with an expired session opens one new session and
/// is sent once more; the caller sees only its answer.
#[tokio::test]
async fn an_expired_session_is_replaced_and_the_request_sent_again() {
    let server = EmbeddedServer::start().await;
    let bucket = directory_bucket();
    let config = server.store_config();
    create_bucket(&config, &bucket).await;
    let store = Store::open(&format!("s3://{bucket}"), &config).unwrap();
    let os = store.object_store();
    let key = Path::from("k");
    os.put(&key, body(100).into()).await.unwrap();
    assert_eq!(server.counters().get("CreateSession"), 1);
    server.faults().fail_next(
        "GetObject",
        1,
        FaultKind::Error {
            status: 400,
            code: "ExpiredToken",
        },
    );
    let got = os.get(&key).await.unwrap().bytes().await.unwrap();
    assert_eq!(got, body(100));
    let counters = server.counters();
    assert_eq!(counters.get("CreateSession"), 2, "{counters:?}");
    assert_eq!(counters.get("GetObject"), 2, "{counters:?}");
    assert_eq!(store.metrics().snapshot().retries, 1);
    // The new session serves what follows.
    os.head(&key).await.unwrap();
    assert_eq!(server.counters().get("CreateSession"), 2);
    // HEAD's answer has no body to name the error: a 400 to it is taken as a stale session.
    server.faults().fail_next(
        "HeadObject",
        1,
        FaultKind::Error {
            status: 400,
            code: "ExpiredToken",
        },
    );
    assert_eq!(os.head(&key).await.unwrap().size, 100);
    assert_eq!(server.counters().get("CreateSession"), 3);
    // A session the server no longer knows (it restarted) is replaced the same way, for
    // bucketload's own signed requests too.
    server.faults().fail_next(
        "ListMultipartUploads",
        1,
        FaultKind::Error {
            status: 400,
            code: "InvalidToken",
        },
    );
    assert!(store.list_uploads("").await.unwrap().is_empty());
    assert_eq!(server.counters().get("CreateSession"), 4);
    assert_eq!(server.counters().get("ListMultipartUploads"), 2);
}

/// Sessions of one second: requests go on past their end, each succeeding, and new sessions
/// are opened as they run out (bounded by a count of requests, not by time).
#[tokio::test]
async fn sessions_that_run_out_mid_run_are_renewed() {
    let server = EmbeddedServer::start_with(|b| b.with_session_ttl(Duration::from_secs(1))).await;
    let bucket = directory_bucket();
    let config = server.store_config();
    create_bucket(&config, &bucket).await;
    let store = Store::open(&format!("s3://{bucket}"), &config).unwrap();
    let os = store.object_store();
    let key = Path::from("k");
    os.put(&key, body(10).into()).await.unwrap();
    let mut requests = 0;
    // Each request takes well under a millisecond to a few; a second of them is far below.
    while server.counters().get("CreateSession") < 3 {
        assert!(
            requests < 1_000_000,
            "no new session after {requests} requests"
        );
        let got = os.get(&key).await.unwrap().bytes().await.unwrap();
        assert_eq!(got, body(10));
        requests += 1;
    }
    assert!(requests > 1);
}

/// CreateSession refused for a wrong secret: the error names the bucket and the permission,
/// and is a permission error.
#[tokio::test]
async fn a_refused_session_names_the_bucket_and_the_permission() {
    let server = EmbeddedServer::start().await;
    let bucket = directory_bucket();
    create_bucket(&server.store_config(), &bucket).await;
    let wrong = s3_config(
        server.endpoint(),
        bucketload_server::DEFAULT_ACCESS_KEY,
        "not-the-secret",
    );
    let store = Store::open(&format!("s3://{bucket}"), &wrong).unwrap();
    let key = Path::from("k");
    let err = store.object_store().get(&key).await.unwrap_err();
    let err: Error = store.map_error(err, &key);
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err:?}");
    let text = err.to_string();
    let expected = format!(
        "cannot open a session on directory bucket `{bucket}` (s3express:CreateSession): \
         SignatureDoesNotMatch"
    );
    assert!(text.contains(&expected), "{text}");
    // bucketload's own signed requests say the same.
    let err = store.list_uploads("").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err:?}");
    assert!(err.to_string().contains(&expected), "{err}");
    assert_eq!(server.counters().get("GetObject"), 0);
}

/// Many requests at once on a bucket no session was opened for yet: they wait for one
/// CreateSession rather than each sending its own.
#[tokio::test]
async fn concurrent_first_requests_share_one_create_session() {
    let server = EmbeddedServer::start().await;
    let bucket = directory_bucket();
    // Created through `localhost`: another endpoint, so its session is not the one below.
    let other_name = server.endpoint().replace("127.0.0.1", "localhost");
    let creator = s3_config(
        &other_name,
        bucketload_server::DEFAULT_ACCESS_KEY,
        bucketload_server::DEFAULT_SECRET_KEY,
    );
    create_bucket(&creator, &bucket).await;
    let before = server.counters().get("CreateSession");
    let store = Store::open(&format!("s3://{bucket}"), &server.store_config()).unwrap();
    let os = store.object_store();
    let puts = (0..32).map(|i| {
        let os = os.clone();
        async move {
            os.put(&Path::from(format!("p/{i}")), body(i + 1).into())
                .await
                .unwrap();
        }
    });
    futures::future::join_all(puts).await;
    assert_eq!(server.counters().get("CreateSession") - before, 1);
    assert_eq!(server.counters().get("PutObject"), 32);
    assert_eq!(keys(&store, "p").await.len(), 32);
}
