//! Soak: for a while, connections are opened and abandoned in every state a client can leave
//! one in, while a normal client's every request succeeds; afterwards the process holds no
//! more open files than before, but for the test's own sockets. A minute by default
//! (`BUCKETLOAD_SOAK_SECS` sets another time). Alone in its test binary, so that no other
//! test opens files in the process meanwhile.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::VecDeque;
use std::time::Duration;

use bucketload_test_support::pattern;
use common::TestServer;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Timeouts of the soaked server.
const TIMEOUT: Duration = Duration::from_secs(1);
/// How long the end waits for the server to close what was abandoned.
const BOUND: Duration = Duration::from_secs(120);
/// Most abandoned sockets the test holds open at once; older ones it closes itself.
const HELD: usize = 200;
/// Larger than the socket buffers of both ends, so a GET nobody reads blocks the server.
const BIG: usize = 16 * 1024 * 1024;

fn open_files() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn soak_time() -> Duration {
    let secs = std::env::var("BUCKETLOAD_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    Duration::from_secs(secs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_connections_leak_nothing_and_fail_no_request() {
    let t = TestServer::start_with(|b| {
        b.with_header_timeout(TIMEOUT)
            .with_idle_timeout(TIMEOUT)
            .with_body_timeout(TIMEOUT)
    })
    .await;
    let addr = t.server.addr();
    let baseline = open_files();
    t.store()
        .put(&Path::from("big"), PutPayload::from(vec![3u8; BIG]))
        .await
        .unwrap();
    let get_big = t.presigned(http::Method::GET, "big").await;
    let end = Instant::now() + soak_time();
    let mut held: VecDeque<TcpStream> = VecDeque::new();
    let mut rounds = 0u64;
    while Instant::now() < end {
        rounds += 1;
        let put = t
            .presigned(http::Method::PUT, &format!("up/{rounds}"))
            .await;
        let abandoned = [
            // Nothing sent.
            Vec::new(),
            // Half a request head.
            b"GET /bkt/x HTTP/1.1\r\nHost: h\r\nx-amz-con".to_vec(),
            // Whole head, part of the body.
            [
                format!("PUT {put} HTTP/1.1\r\nHost: h\r\nContent-Length: 50000\r\n\r\n")
                    .into_bytes(),
                pattern(1000, 9),
            ]
            .concat(),
            // A response nobody reads.
            format!("GET {get_big} HTTP/1.1\r\nHost: h\r\n\r\n").into_bytes(),
            // One request answered, then idle.
            b"GET /_bucketload/counters HTTP/1.1\r\nHost: h\r\n\r\n".to_vec(),
        ];
        for bytes in abandoned {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(&bytes).await.unwrap();
            held.push_back(stream);
        }
        // Half a head, then the client goes away.
        let mut gone = TcpStream::connect(addr).await.unwrap();
        gone.write_all(b"PUT /bkt/y HTTP/1.1\r\nContent-Le")
            .await
            .unwrap();
        drop(gone);
        while held.len() > HELD {
            held.pop_front();
        }
        normal_round(&t, rounds).await;
    }
    assert!(rounds > 0);
    let expected = baseline + held.len();
    let settled = Instant::now();
    while open_files() != expected && settled.elapsed() < BOUND {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        open_files(),
        expected,
        "after {rounds} rounds the process holds more files than before (+{} sockets of the test); {} server connections open",
        held.len(),
        t.server.open_connections()
    );
    assert_eq!(t.server.open_connections(), 0);
    let tmp = t.dir.path().join(".bucketload/tmp");
    assert_eq!(
        std::fs::read_dir(tmp).unwrap().count(),
        0,
        "no temporary file left"
    );
}

/// PUT, GET and LIST through a real S3 client (a fresh one, so no pooled connection the
/// server timed out is reused); each must succeed.
async fn normal_round(t: &TestServer, round: u64) {
    let store = t.store();
    let key = Path::from(format!("normal/{}", round % 8));
    let data = pattern(20_000, round as u8);
    store
        .put(&key, PutPayload::from(data.clone()))
        .await
        .unwrap_or_else(|e| panic!("round {round}: PUT failed: {e}"));
    let got = store
        .get(&key)
        .await
        .unwrap_or_else(|e| panic!("round {round}: GET failed: {e}"))
        .bytes()
        .await
        .unwrap();
    assert_eq!(got.as_ref(), data.as_slice(), "round {round}");
    store
        .list_with_delimiter(Some(&Path::from("normal")))
        .await
        .unwrap_or_else(|e| panic!("round {round}: LIST failed: {e}"));
}
