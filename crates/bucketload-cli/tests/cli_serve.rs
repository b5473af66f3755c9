//! `bucketload serve`: banner, requests through it, clean stop on SIGTERM.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn serve_prints_one_banner_and_stops_on_sigterm() {
    let root = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bucketload"))
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--latency",
            "1ms..3ms",
            "--root",
        ])
        .arg(root.path().join("data"))
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    assert!(
        banner.starts_with("bucketload serve: S3 endpoint http://127.0.0.1:"),
        "{banner}"
    );
    assert!(
        banner.contains("AWS_ENDPOINT_URL=http://127.0.0.1:"),
        "{banner}"
    );
    let endpoint = banner
        .split("AWS_ENDPOINT_URL=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();

    let generated = Command::new(env!("CARGO_BIN_EXE_bucketload"))
        .args([
            "gen",
            "s3://served/x",
            "--samples",
            "3",
            "--classes",
            "1",
            "--size",
            "2KB",
        ])
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ACCESS_KEY_ID", bucketload_server::DEFAULT_ACCESS_KEY)
        .env(
            "AWS_SECRET_ACCESS_KEY",
            bucketload_server::DEFAULT_SECRET_KEY,
        )
        .env("HOME", root.path())
        .output()
        .unwrap();
    assert!(generated.status.success(), "{generated:?}");

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "serve did not stop cleanly");
}
