//! Shared helpers for the server's integration tests: an in-process server on a temporary
//! directory, an `object_store` S3 client for it, and a raw HTTP/1.1 exchange for requests
//! no S3 client would send.
#![allow(clippy::unwrap_used)]
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use bucketload_server::{
    DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY, RunningServer, ServerBuilder, ServerConfig,
};
use object_store::aws::AmazonS3Builder;
use object_store::{BackoffConfig, ObjectStore, RetryConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub struct TestServer {
    pub server: RunningServer,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    /// A server on a fresh directory with bucket `bkt` already present.
    pub async fn start() -> Self {
        Self::start_with(|b| b).await
    }

    pub async fn start_with(configure: impl FnOnce(ServerBuilder) -> ServerBuilder) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bkt")).unwrap();
        let config = configure(ServerConfig::builder(dir.path()))
            .build()
            .unwrap();
        let server = bucketload_server::start(config).await.unwrap();
        Self { server, dir }
    }

    /// A client for bucket `bkt` with the given number of retries and tiny backoff.
    pub fn store_with_retries(&self, retries: usize) -> Arc<dyn ObjectStore> {
        self.store_for("bkt", DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY, retries)
    }

    /// A client for bucket `bkt` that never retries.
    pub fn store(&self) -> Arc<dyn ObjectStore> {
        self.store_with_retries(0)
    }

    pub fn store_for(
        &self,
        bucket: &str,
        key: &str,
        secret: &str,
        retries: usize,
    ) -> Arc<dyn ObjectStore> {
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(1),
                max_backoff: Duration::from_millis(5),
                base: 2.0,
            },
            max_retries: retries,
            retry_timeout: Duration::from_secs(30),
        };
        let store = s3_builder(&self.server, bucket, key, secret)
            .with_retry(retry)
            .build()
            .unwrap();
        Arc::new(store)
    }

    /// An S3 client of bucket `bkt` without retries, as its concrete type (multipart calls,
    /// presigning).
    pub fn s3(&self) -> object_store::aws::AmazonS3 {
        s3_builder(&self.server, "bkt", DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY)
            .with_retry(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            })
            .build()
            .unwrap()
    }

    /// The path and query of a presigned URL (valid 10 minutes) for `key` in bucket `bkt`.
    pub async fn presigned(&self, method: http::Method, key: &str) -> String {
        use object_store::signer::Signer;
        let s3 = s3_builder(&self.server, "bkt", DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY)
            .build()
            .unwrap();
        let url = s3
            .signed_url(method, &key.into(), Duration::from_secs(600))
            .await
            .unwrap();
        format!("{}?{}", url.path(), url.query().unwrap_or(""))
    }
}

fn s3_builder(server: &RunningServer, bucket: &str, key: &str, secret: &str) -> AmazonS3Builder {
    AmazonS3Builder::new()
        .with_endpoint(server.endpoint())
        .with_allow_http(true)
        .with_bucket_name(bucket)
        .with_region("us-east-1")
        .with_access_key_id(key)
        .with_secret_access_key(secret)
        .with_virtual_hosted_style_request(false)
}

/// Sends one raw HTTP/1.1 request (with `Connection: close`) and returns status and body.
pub async fn raw_request(server: &RunningServer, method: &str, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        server.addr()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

pub fn md5_hex(bytes: &[u8]) -> String {
    use md5::{Digest, Md5};
    hex::encode(Md5::digest(bytes))
}
