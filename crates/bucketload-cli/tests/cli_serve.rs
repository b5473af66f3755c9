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

/// `bucketload serve` with `args`, its stdout banner read; returns the process and endpoint.
fn spawn_serve(mut command: Command) -> (std::process::Child, String) {
    let mut child = command
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let endpoint = banner
        .split("AWS_ENDPOINT_URL=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no endpoint in the banner {banner:?}"))
        .to_owned();
    (child, endpoint)
}

/// The binary as a client of `endpoint` with the default credentials.
fn client(endpoint: &str, home: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bucketload"));
    cmd.env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ACCESS_KEY_ID", bucketload_server::DEFAULT_ACCESS_KEY)
        .env(
            "AWS_SECRET_ACCESS_KEY",
            bucketload_server::DEFAULT_SECRET_KEY,
        )
        .env_remove("AWS_PROFILE")
        .env("HOME", home);
    cmd
}

#[test]
fn serve_help_shows_only_what_the_server_uses() {
    let help = Command::new(env!("CARGO_BIN_EXE_bucketload"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success());
    let text = String::from_utf8(help.stdout).unwrap();
    for flag in [
        "--root",
        "--idle-timeout",
        "--header-timeout",
        "--body-timeout",
        "--max-connections",
        "--upload-expiry",
        "--secret-key-file",
        "--verbose",
    ] {
        assert!(text.contains(flag), "{flag} missing from:\n{text}");
    }
    for flag in [
        "--endpoint",
        "--concurrency",
        "--part-size",
        "--retry-timeout",
        "--price-table",
        "Store options",
    ] {
        assert!(!text.contains(flag), "{flag} shown in:\n{text}");
    }
    let ls = Command::new(env!("CARGO_BIN_EXE_bucketload"))
        .args(["ls", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8(ls.stdout).unwrap().contains("--endpoint"));
}

#[test]
fn serve_refuses_client_flags() {
    let root = tempfile::tempdir().unwrap();
    for args in [
        &["serve", "--concurrency", "4", "--root"][..],
        &["--endpoint", "http://x", "serve", "--root"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_bucketload"))
            .args(args)
            .arg(root.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("does not apply to `serve`"), "{err}");
    }
}

/// With the open-file limit at 128 (soft and hard, so the server cannot raise it), 200
/// sockets that never send a request do not make a client's requests fail: the connection
/// cap keeps descriptors for the files requests open, the idle timeout frees the slots.
#[test]
fn idle_sockets_beyond_the_open_file_limit_do_not_fail_requests() {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("serve.log");
    let mut command = Command::new("sh");
    command
        .args(["-c", "ulimit -n 128 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_bucketload"))
        .args([
            "serve",
            "-v",
            "--addr",
            "127.0.0.1:0",
            "--idle-timeout",
            "1s",
        ])
        .args(["--header-timeout", "1s", "--root"])
        .arg(root.path().join("data"))
        .stderr(std::fs::File::create(&log).unwrap());
    let (mut child, endpoint) = spawn_serve(command);
    let addr = endpoint.trim_start_matches("http://").to_owned();
    let idle: Vec<_> = (0..200)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    let generated = client(&endpoint, root.path())
        .args(["gen", "s3://limits/x", "--samples", "20", "--classes", "1"])
        .args(["--size", "2KB", "--retry-timeout", "60s"])
        .output()
        .unwrap();
    let listed = client(&endpoint, root.path())
        .args(["ls", "s3://limits/x/", "--recursive"])
        .output()
        .unwrap();
    drop(idle);
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(generated.status.success(), "{generated:?}\n{log}");
    assert!(listed.status.success(), "{listed:?}\n{log}");
    assert!(!log.contains("Too many open files"), "{log}");
    assert!(
        log.contains("open-file limit 128") && log.contains("at most 21 connections"),
        "{log}"
    );
}
