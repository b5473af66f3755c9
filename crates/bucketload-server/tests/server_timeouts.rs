//! Connection timeouts and the connection cap: raw sockets left in every state a client can
//! abandon a connection in are closed by the server, while a normal client keeps working.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use bucketload_server::ServerBuilder;
use bucketload_test_support::pattern;
use common::TestServer;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Long enough never to fire during a test.
const NEVER: Duration = Duration::from_secs(3600);
/// Short enough to wait for.
const SHORT: Duration = Duration::from_secs(1);
/// How long a test waits for the server to act before it fails.
const BOUND: Duration = Duration::from_secs(60);

/// What a socket read until the server closed it (`None`: still open after [`BOUND`]).
async fn until_closed(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let read_all = async {
        let mut buf = [0u8; 64 * 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(BOUND, read_all).await.ok()?;
    Some(received)
}

/// A PUT and a GET through a real S3 client succeed.
async fn normal_client_works(t: &TestServer, key: &str) {
    let store = t.store();
    let data = pattern(10_000, 7);
    store
        .put(&Path::from(key), PutPayload::from(data.clone()))
        .await
        .unwrap();
    let got = store
        .get(&Path::from(key))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(got.as_ref(), data.as_slice());
}

fn timeouts(
    header: Duration,
    idle: Duration,
    body: Duration,
) -> impl FnOnce(ServerBuilder) -> ServerBuilder {
    move |b| {
        b.with_header_timeout(header)
            .with_idle_timeout(idle)
            .with_body_timeout(body)
    }
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_idle_timeout() {
    let t = TestServer::start_with(timeouts(NEVER, SHORT, NEVER)).await;
    let mut silent = TcpStream::connect(t.server.addr()).await.unwrap();
    normal_client_works(&t, "a").await;
    let got = until_closed(&mut silent)
        .await
        .expect("the server closes it");
    assert!(got.is_empty());
    normal_client_works(&t, "b").await;
}

#[tokio::test]
async fn half_a_request_head_is_closed_after_the_header_timeout() {
    let t = TestServer::start_with(timeouts(SHORT, NEVER, NEVER)).await;
    let mut half = TcpStream::connect(t.server.addr()).await.unwrap();
    half.write_all(b"GET /bkt/a HTTP/1.1\r\nHost: 127.0.0.1\r\nx-amz-da")
        .await
        .unwrap();
    normal_client_works(&t, "a").await;
    assert!(
        until_closed(&mut half).await.is_some(),
        "the server closes it"
    );
    normal_client_works(&t, "b").await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let t = TestServer::start_with(timeouts(NEVER, SHORT, NEVER)).await;
    let mut idle = TcpStream::connect(t.server.addr()).await.unwrap();
    idle.write_all(b"GET /_bucketload/counters HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let got = until_closed(&mut idle).await.expect("the server closes it");
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        !text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    normal_client_works(&t, "a").await;
}

#[tokio::test]
async fn a_stalled_upload_answers_request_timeout_and_stores_nothing() {
    let t = TestServer::start_with(timeouts(NEVER, NEVER, SHORT)).await;
    let url = t.presigned(http::Method::PUT, "stalled").await;
    let mut upload = TcpStream::connect(t.server.addr()).await.unwrap();
    let head = format!(
        "PUT {url} HTTP/1.1\r\nHost: {}\r\nContent-Length: 100000\r\n\r\n",
        t.server.addr()
    );
    upload.write_all(head.as_bytes()).await.unwrap();
    upload.write_all(&pattern(5000, 1)).await.unwrap();
    normal_client_works(&t, "a").await;
    let got = until_closed(&mut upload)
        .await
        .expect("the server closes it");
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("<Code>RequestTimeout</Code>"), "{text}");
    let head = t.store().head(&Path::from("stalled")).await;
    assert!(
        matches!(head, Err(object_store::Error::NotFound { .. })),
        "{head:?}"
    );
    let tmp = t.dir.path().join(".bucketload/tmp");
    assert_eq!(
        std::fs::read_dir(tmp).unwrap().count(),
        0,
        "no temporary file left"
    );
    normal_client_works(&t, "b").await;
}

#[tokio::test]
async fn a_client_that_does_not_read_its_response_is_dropped() {
    let t = TestServer::start_with(timeouts(NEVER, NEVER, SHORT)).await;
    // Far more than the socket buffers of both ends hold.
    let size = 64 * 1024 * 1024;
    t.store()
        .put(&Path::from("big"), PutPayload::from(vec![7u8; size]))
        .await
        .unwrap();
    let url = t.presigned(http::Method::GET, "big").await;
    // The client above dropped its connection with itself.
    assert!(wait_until(|| t.server.open_connections() == 0).await);
    let mut reader = TcpStream::connect(t.server.addr()).await.unwrap();
    let request = format!("GET {url} HTTP/1.1\r\nHost: {}\r\n\r\n", t.server.addr());
    reader.write_all(request.as_bytes()).await.unwrap();
    assert!(wait_until(|| t.server.open_connections() == 1).await);
    let closed = wait_until(|| t.server.open_connections() == 0).await;
    assert!(closed, "the stalled connection is closed");
    let got = until_closed(&mut reader)
        .await
        .expect("the server closed it");
    assert!(got.len() < size, "the body was cut short");
    normal_client_works(&t, "a").await;
}

#[tokio::test]
async fn at_the_connection_cap_new_connections_wait_for_a_free_slot() {
    let t =
        TestServer::start_with(|b| timeouts(NEVER, NEVER, NEVER)(b).with_max_connections(2)).await;
    assert_eq!(t.server.max_connections(), 2);
    let first = TcpStream::connect(t.server.addr()).await.unwrap();
    let mut second = TcpStream::connect(t.server.addr()).await.unwrap();
    assert!(wait_until(|| t.server.open_connections() == 2).await);
    let mut third = TcpStream::connect(t.server.addr()).await.unwrap();
    // Half a request: a server that accepted the connection would hold it open.
    third
        .write_all(b"GET /_bucketload/counters HTTP/1.1\r\n")
        .await
        .unwrap();
    // A request answered on another connection gives the accept loop its turn: an uncapped
    // server would have taken the third connection by then.
    counters_round_trip(&mut second).await;
    counters_round_trip(&mut second).await;
    assert_eq!(t.server.open_connections(), 2);
    drop(first);
    third
        .write_all(b"Host: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let got = until_closed(&mut third)
        .await
        .expect("answered once a slot is free");
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn more_idle_sockets_than_the_cap_do_not_fail_a_normal_client() {
    let t =
        TestServer::start_with(|b| timeouts(SHORT, SHORT, SHORT)(b).with_max_connections(4)).await;
    let mut idle = Vec::new();
    for _ in 0..5 {
        idle.push(TcpStream::connect(t.server.addr()).await.unwrap());
    }
    normal_client_works(&t, "a").await;
    normal_client_works(&t, "b").await;
}

#[tokio::test]
async fn the_connection_cap_defaults_to_a_share_of_the_open_file_limit() {
    let t = TestServer::start().await;
    assert!(t.server.max_connections() >= 1);
    assert_eq!(t.server.config().max_connections(), None);
}

/// Asks for the counters on a keep-alive connection and reads the whole answer.
async fn counters_round_trip(stream: &mut TcpStream) {
    stream
        .write_all(b"GET /_bucketload/counters HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "connection closed before the answer");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap();
            if body.len() >= length {
                return;
            }
        }
    }
}

/// Polls `condition` (every 20 ms, at most [`BOUND`]); whether it became true.
async fn wait_until(condition: impl Fn() -> bool) -> bool {
    let start = tokio::time::Instant::now();
    while start.elapsed() < BOUND {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}
