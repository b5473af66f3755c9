//! The CLI against moto's independent S3 implementation, checked with the AWS CLI.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use bucketload_test_support::{MotoServer, unique_bucket, venv_bin};
use common::Run;

fn bucketload(moto: &MotoServer, work: &std::path::Path, args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bucketload"));
    for (key, _) in std::env::vars() {
        if key.starts_with("AWS_") {
            cmd.env_remove(key);
        }
    }
    let out = cmd
        .args(args)
        .env("HOME", work)
        .env("AWS_ENDPOINT_URL", moto.endpoint())
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .current_dir(work)
        .output()
        .unwrap();
    Run::from(out)
}

/// `aws s3api list-objects-v2` through the workspace virtualenv: (key, size) pairs.
fn aws_list(
    moto: &MotoServer,
    work: &std::path::Path,
    bucket: &str,
    prefix: &str,
) -> Vec<(String, u64)> {
    let aws = venv_bin("aws");
    let out = Command::new(aws)
        .args([
            "--endpoint-url",
            moto.endpoint(),
            "s3api",
            "list-objects-v2",
            "--bucket",
            bucket,
        ])
        .args(["--prefix", prefix, "--output", "json"])
        .env("HOME", work)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "aws failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["Contents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["Key"].as_str().unwrap().to_string(),
                o["Size"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn gen_stats_and_cp_on_moto() {
    let moto = MotoServer::start();
    let work = tempfile::tempdir().unwrap();
    let bucket = unique_bucket();
    let uri = format!("s3://{bucket}/train");
    bucketload(
        &moto,
        work.path(),
        &[
            "gen",
            &uri,
            "--samples",
            "20",
            "--classes",
            "2",
            "--size",
            "10KB",
        ],
    )
    .ok();

    let listed = aws_list(&moto, work.path(), &bucket, "train/");
    assert_eq!(listed.len(), 20, "{listed:?}");
    assert!(
        listed
            .iter()
            .any(|(k, _)| k == "train/class_001/000019.jpg"),
        "{listed:?}"
    );
    for (key, size) in &listed {
        assert!((9_000..=11_000).contains(size), "{key}: {size} bytes");
    }

    let stats = bucketload(&moto, work.path(), &["stats", &uri, "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&stats.stdout).unwrap();
    assert_eq!(v["objects"], 20);
    assert_eq!(v["classes"]["class_000"], 10);

    bucketload(&moto, work.path(), &["cp", "-r", &uri, "local"]).ok();
    let back = format!("s3://{bucket}/back");
    bucketload(&moto, work.path(), &["cp", "-r", "local", &back]).ok();
    let mut original: Vec<(String, u64)> = listed
        .into_iter()
        .map(|(k, s)| (k.trim_start_matches("train/").to_string(), s))
        .collect();
    let mut copied: Vec<(String, u64)> = aws_list(&moto, work.path(), &bucket, "back/")
        .into_iter()
        .map(|(k, s)| (k.trim_start_matches("back/").to_string(), s))
        .collect();
    original.sort();
    copied.sort();
    assert_eq!(original, copied);
}
