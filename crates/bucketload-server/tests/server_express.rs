//! Directory buckets (named `base--zone--x-s3`) on the embedded server: their own first-byte
//! latency. Their S3 Express semantics (sessions, listings, appends, ETags, multipart) are
//! checked end to end with boto3 in tests/python/test_server_express.py, since every request
//! to a directory bucket needs a CreateSession session, which boto3 opens by itself.

mod common;

use std::time::{Duration, Instant};

use bucketload_server::LatencySpec;
use common::{TestServer, raw_request};

/// A directory bucket answers after its own latency while a general purpose bucket of the
/// same server still waits for the general one (ten minutes here, so it cannot have answered).
#[tokio::test]
async fn a_directory_bucket_answers_with_its_own_latency() {
    let general: LatencySpec = "600s".parse().unwrap();
    let directory: LatencySpec = "50ms".parse().unwrap();
    let t =
        TestServer::start_with(|b| b.with_latency(general).with_directory_latency(directory)).await;
    let server = &t.server;
    let slow = {
        let addr = server.addr();
        tokio::spawn(async move {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let request = format!(
                "GET /bkt/k HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
            );
            tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes())
                .await
                .unwrap();
            let mut response = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut response)
                .await
                .unwrap();
        })
    };
    let started = Instant::now();
    let (status, _) = tokio::time::timeout(
        Duration::from_secs(60),
        raw_request(server, "GET", "/train--use1-az4--x-s3/k"),
    )
    .await
    .expect("the directory bucket answers without the general latency of ten minutes");
    assert_ne!(status, 0);
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert!(
        !slow.is_finished(),
        "the general purpose bucket answered before its ten minutes"
    );
    slow.abort();
}
