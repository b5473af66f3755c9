//! Retries and failure mapping against the embedded server's injected
//! faults: the server counts every attempt, the store's metrics must count
//! one logical request and the retries.

#![allow(clippy::unwrap_used)] // tests fail loudly on any error

use bucketload_server::FaultKind;
use bucketload_store::object_store::ObjectStoreExt;
use bucketload_store::object_store::path::Path;
use bucketload_store::{Error, MultipartOptions, MultipartWriter, ParallelGet, Store};
use bucketload_test_support::{EmbeddedServer, s3_config};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use std::time::Duration;

async fn setup() -> (EmbeddedServer, Store) {
    let server = EmbeddedServer::start().await;
    let bucket = server.bucket().await;
    let store = Store::open(&format!("s3://{bucket}"), &server.store_config()).unwrap();
    (server, store)
}

fn body(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i % 253) as u8)
        .collect::<Vec<u8>>()
        .into()
}

#[tokio::test]
async fn two_503s_on_get_are_two_retries() {
    let (server, store) = setup().await;
    let key = Path::from("obj");
    store
        .object_store()
        .put(&key, body(4096).into())
        .await
        .unwrap();
    server
        .faults()
        .fail_next("GetObject", 2, FaultKind::Status(503));
    let got = bucketload_test_support::get_whole(&store, &key).await;
    assert_eq!(got, body(4096));
    assert_eq!(server.counters().get("GetObject"), 3);
    let s = store.metrics().snapshot();
    assert_eq!(s.requests.get, 1);
    assert_eq!(s.retries, 2);
    assert_eq!(s.http_attempts, 4, "one PUT and three GET attempts");
    assert_eq!(
        s.errors.server + s.errors.throttled,
        0,
        "retried errors are not failures"
    );
}

#[tokio::test]
async fn two_503s_on_upload_part_are_two_retries() {
    let (server, store) = setup().await;
    server
        .faults()
        .fail_next("UploadPart", 2, FaultKind::Status(503));
    let opts = MultipartOptions {
        part_size: 5 << 20,
        concurrency: 1,
    };
    let data = body(12 << 20);
    let mut w = MultipartWriter::new(store.object_store(), Path::from("ckpt"), opts);
    w.write(data.clone()).await.unwrap();
    w.finish().await.unwrap();
    assert_eq!(server.counters().get("UploadPart"), 5);
    let s = store.metrics().snapshot();
    assert_eq!(s.requests.multipart_part, 3);
    assert_eq!(s.retries, 2);
    let got = store.object_store().get(&Path::from("ckpt")).await.unwrap();
    assert_eq!(got.bytes().await.unwrap(), data);
}

#[tokio::test]
async fn reset_mid_body_is_resumed_and_counted() {
    let (server, store) = setup().await;
    let key = Path::from("reset");
    let data = body(1 << 20);
    store
        .object_store()
        .put(&key, data.clone().into())
        .await
        .unwrap();
    server
        .faults()
        .fail_next("GetObject", 1, FaultKind::ResetMidBody);
    let got = bucketload_test_support::get_whole(&store, &key).await;
    assert_eq!(got, data);
    assert_eq!(server.counters().get("GetObject"), 2);
    let s = store.metrics().snapshot();
    assert_eq!((s.requests.get, s.retries), (1, 1));
    assert_eq!(s.bytes_in, 1 << 20);
}

/// Retrying is bounded by time, not by a count: twelve 503s in a row (more than the ten
/// retries that used to be the limit) are ridden out within the time limit.
#[tokio::test]
async fn a_long_run_of_503s_is_ridden_out_within_the_time_limit() {
    let (server, store) = setup().await;
    let key = Path::from("busy");
    store
        .object_store()
        .put(&key, body(64).into())
        .await
        .unwrap();
    server
        .faults()
        .fail_next("GetObject", 12, FaultKind::Status(503));
    let got = store.object_store().get(&key).await.unwrap();
    assert_eq!(got.bytes().await.unwrap(), body(64));
    assert_eq!(server.counters().get("GetObject"), 13);
}

#[tokio::test]
async fn exhausted_slowdowns_are_throttled() {
    let server = EmbeddedServer::start().await;
    let bucket = server.bucket().await;
    let config = server.store_config().with_max_retries(2);
    let store = Store::open(&format!("s3://{bucket}"), &config).unwrap();
    let key = Path::from("hot");
    store.object_store().put(&key, "x".into()).await.unwrap();
    server
        .faults()
        .fail_next("GetObject", 3, FaultKind::Status(503));
    let err = store.object_store().get(&key).await.unwrap_err();
    let err = store.map_error(err, &key);
    assert!(matches!(err, Error::Throttled { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with(&format!("s3://{bucket}/hot: throttled")),
        "{err}"
    );
    assert_eq!(server.counters().get("GetObject"), 3);
    let s = store.metrics().snapshot();
    assert_eq!((s.retries, s.errors.throttled), (2, 1));
}

#[tokio::test]
async fn wrong_credentials_are_permission_denied() {
    let server = EmbeddedServer::start().await;
    let bucket = server.bucket().await;
    let config = s3_config(server.endpoint(), "bucketload", "not-the-secret");
    let store = Store::open(&format!("s3://{bucket}"), &config).unwrap();
    let key = Path::from("k");
    let err = store.object_store().get(&key).await.unwrap_err();
    let err = store.map_error(err, &key);
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
    assert!(err.to_string().contains("check AWS_ACCESS_KEY_ID"), "{err}");
    assert_eq!(store.metrics().snapshot().errors.permission, 1);
    let err = store.create_bucket().await.unwrap_err();
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
}

#[tokio::test]
async fn closed_port_is_unreachable_after_counted_retries() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let config = s3_config(&endpoint, "k", "s")
        .with_max_retries(2)
        .with_retry_timeout(Duration::from_secs(5))
        .with_connect_timeout(Duration::from_secs(1));
    let store = Store::open("s3://nowhere", &config).unwrap();
    let key = Path::from("k");
    let err = store.object_store().get(&key).await.unwrap_err();
    let err = store.map_error(err, &key);
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&endpoint) && text.contains("is the endpoint right"),
        "{text}"
    );
    let s = store.metrics().snapshot();
    assert_eq!((s.http_attempts, s.retries, s.errors.network), (3, 2, 1));
}

#[tokio::test]
async fn missing_bucket_is_named() {
    let server = EmbeddedServer::start().await;
    let store = Store::open("s3://no-such-bucket/p", &server.store_config()).unwrap();
    let key = Path::from("k");
    let err = store.object_store().get(&key).await.unwrap_err();
    let err = store.map_error(err, &key);
    assert!(
        err.to_string()
            .starts_with("s3://no-such-bucket: bucket not found"),
        "{err}"
    );
}

#[tokio::test]
async fn failed_part_names_object_and_range() {
    let server = EmbeddedServer::start().await;
    let bucket = server.bucket().await;
    let config = server.store_config().with_max_retries(1);
    let store = Store::open(&format!("s3://{bucket}/d"), &config).unwrap();
    let key = Path::from("shard.tar");
    store
        .object_store()
        .put(&key, body(3000).into())
        .await
        .unwrap();
    server
        .faults()
        .fail_next("GetObject", 2, FaultKind::Status(500));
    let opts = ParallelGet {
        part_size: 1000,
        concurrency: 1,
        size: Some(3000),
    };
    let items: Vec<_> = store.get_parallel(&key, opts).collect().await;
    assert_eq!(items.len(), 1, "the stream ends at the first error");
    let err = items[0].as_ref().unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("s3://{bucket}/d/shard.tar (bytes 0-999)")),
        "{text}"
    );
    assert_eq!(
        server.counters().get("GetObject"),
        2,
        "one attempt and one retry"
    );
    assert_eq!(store.metrics().snapshot().errors.server, 1);
}

#[tokio::test]
async fn truncated_part_is_resumed() {
    let (server, store) = setup().await;
    let key = Path::from("t");
    let data = body(64 << 10);
    store
        .object_store()
        .put(&key, data.clone().into())
        .await
        .unwrap();
    server
        .faults()
        .fail_next("GetObject", 1, FaultKind::Truncate);
    let opts = ParallelGet {
        part_size: 16 << 10,
        concurrency: 2,
        size: Some(64 << 10),
    };
    let parts: Vec<Bytes> = store.get_parallel(&key, opts).try_collect().await.unwrap();
    assert_eq!(parts.concat(), data);
    assert_eq!(server.counters().get("GetObject"), 5);
    assert_eq!(store.metrics().snapshot().retries, 1);
}

/// A CompleteMultipartUpload that took effect but whose answer was lost: the retry gets 404
/// NoSuchUpload. The writer must find the object it completed and report success.
#[tokio::test]
async fn lost_complete_answer_is_a_success_when_the_object_is_ours() {
    let (server, store) = setup().await;
    let opts = MultipartOptions {
        part_size: 5 << 20,
        concurrency: 2,
    };
    let data = body(11 << 20);
    server
        .faults()
        .fail_next("CompleteMultipartUpload", 1, FaultKind::ResetMidBody);
    let mut w = MultipartWriter::new(store.object_store(), Path::from("ckpt"), opts);
    w.write(data.clone()).await.unwrap();
    let put = w.finish().await.unwrap();
    assert!(server.counters().get("CompleteMultipartUpload") >= 2);
    let got = store.object_store().get(&Path::from("ckpt")).await.unwrap();
    assert_eq!(put.e_tag, got.meta.e_tag);
    assert_eq!(got.bytes().await.unwrap(), data);
}

/// A completion that fails for good leaves the previous object, and the writer says it failed:
/// an object under the key that is not this upload's is never taken for it.
#[tokio::test]
async fn failed_complete_is_a_failure_and_keeps_the_old_object() {
    let server = EmbeddedServer::start().await;
    let bucket = server.bucket().await;
    let config = server.store_config().with_max_retries(3);
    let store = Store::open(&format!("s3://{bucket}"), &config).unwrap();
    let key = Path::from("ckpt");
    let old = body(6 << 20);
    store
        .object_store()
        .put(&key, old.clone().into())
        .await
        .unwrap();
    let opts = MultipartOptions {
        part_size: 5 << 20,
        concurrency: 2,
    };
    server
        .faults()
        .fail_next("CompleteMultipartUpload", 100, FaultKind::Status(500));
    let mut w = MultipartWriter::new(store.object_store(), key.clone(), opts);
    w.write(body(6 << 20).slice(1..)).await.unwrap();
    let err = w.finish().await.unwrap_err();
    assert!(
        !matches!(err, Error::Unconfirmed { .. }),
        "the check found the old object, not ours: {err}"
    );
    server.faults().clear();
    let got = store.object_store().get(&key).await.unwrap();
    assert_eq!(got.bytes().await.unwrap(), old);
}

/// The answer to CreateMultipartUpload is lost (the store made the upload, the connection
/// broke before the answer arrived) and the creation is retried: the writer completes its own
/// upload and aborts the one the lost answer left, so no parts stay stored and billed.
#[tokio::test]
async fn an_upload_left_by_a_lost_create_answer_is_aborted() {
    let (server, store) = setup().await;
    server
        .faults()
        .fail_next("CreateMultipartUpload", 1, FaultKind::ResetMidBody);
    let data = body(12 << 20);
    let mut w = store.writer(&Path::from("ckpt"), 2);
    w.write(data.clone()).await.unwrap();
    w.finish().await.unwrap();
    assert_eq!(server.counters().get("CreateMultipartUpload"), 2);
    let left = store.list_uploads("").await.unwrap();
    assert!(left.is_empty(), "uploads left: {left:?}");
    let got = store.object_store().get(&Path::from("ckpt")).await.unwrap();
    assert_eq!(got.bytes().await.unwrap(), data);
}

/// An object replaced between a body cut off mid-stream and its resume: the resume's answer
/// has another ETag, so the read fails naming the object as changed (never a splice of two
/// versions, never a network error that a retry of the whole command would "fix" silently).
#[tokio::test]
async fn an_object_replaced_before_the_resume_fails_naming_it() {
    let (server, store) = setup().await;
    let key = Path::from("v");
    let old = body(4 << 20);
    let os = store.object_store();
    os.put(&key, old.clone().into()).await.unwrap();
    server
        .faults()
        .fail_next("GetObject", 1, FaultKind::ResetMidBody);
    let mut stream = os.get(&key).await.unwrap().into_stream();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first, old.slice(..first.len()), "the first bytes arrive");
    let new = Bytes::from(vec![255u8; 4 << 20]);
    os.put(&key, new.into()).await.unwrap();
    let mut rest = Vec::new();
    let err = loop {
        match stream.next().await {
            Some(Ok(chunk)) => rest.extend_from_slice(&chunk),
            Some(Err(e)) => break e,
            None => panic!("the read ended without an error after the object was replaced"),
        }
    };
    let spliced = rest.iter().position(|b| *b == 255);
    assert!(
        spliced.is_none(),
        "no byte of the new version: first {} bytes, then {} more, a 7 at {spliced:?}, {} GETs: {err}",
        first.len(),
        rest.len(),
        server.counters().get("GetObject")
    );
    let err = store.map_error(err, &key);
    let text = err.to_string();
    assert!(text.contains("changed while it was read"), "{text}");
    assert!(text.contains(&store.object_uri(&key)), "{text}");
    assert_eq!(server.counters().get("GetObject"), 2, "one resume");
    assert_eq!(
        server.counters().get("HeadObject"),
        1,
        "one check with If-Match"
    );
    assert_eq!(err.kind(), bucketload_store::ErrorKind::Corrupt);
}

/// A delete whose answer is lost (the server deleted, then reset the connection) is sent once
/// more, and its second answer (the key is gone) is success; a key that never existed is
/// deleted too, and a bucket that does not exist is an error.
#[tokio::test]
async fn a_delete_whose_answer_is_lost_is_sent_once_more() {
    let (server, store) = setup().await;
    let key = Path::from("gone");
    store
        .object_store()
        .put(&key, body(10).into())
        .await
        .unwrap();
    server
        .faults()
        .fail_next("DeleteObjects", 1, FaultKind::ResetMidBody);
    store.delete_key(&key).await.unwrap();
    assert_eq!(server.faults().pending("DeleteObjects"), 0);
    assert_eq!(server.counters().get("DeleteObjects"), 2);
    let head = store.object_store().head(&key).await;
    assert!(
        matches!(
            head,
            Err(bucketload_store::object_store::Error::NotFound { .. })
        ),
        "{head:?}"
    );
    store.delete_key(&Path::from("never")).await.unwrap();
    assert_eq!(server.counters().get("DeleteObjects"), 3);

    let missing = Store::open("s3://no-such-bucket-del", &server.store_config()).unwrap();
    let err = missing.delete_key(&key).await.unwrap_err();
    assert!(err.to_string().contains("NoSuchBucket"), "{err}");
}
