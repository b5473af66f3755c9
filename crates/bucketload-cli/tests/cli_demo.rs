//! `bucketload demo` at a tiny scale: every step runs against its own embedded server and the
//! report is drawn from the steps' logs.
#![allow(clippy::unwrap_used)]

use std::process::Command;

#[test]
fn the_demo_runs_every_step_and_draws_the_report() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("demo");
    let run = Command::new(env!("CARGO_BIN_EXE_bucketload"))
        .args(["demo", "--samples", "48", "--size", "4KB", "--classes", "3"])
        .args([
            "--epochs",
            "2",
            "--latency",
            "1ms",
            "--ckpt-size",
            "6MiB",
            "--out",
        ])
        .arg(&out)
        .env_remove("AWS_ENDPOINT_URL")
        .env("HOME", work.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    for name in [
        "files",
        "files-cached",
        "shards",
        "indexed",
        "shards-decoded",
    ] {
        let log: serde_json::Value = serde_json::from_slice(
            &std::fs::read(out.join("logs").join(format!("{name}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(log["samples_processed_total"], 96, "{name}");
    }
    for name in [
        "ckpt-s3-sync",
        "ckpt-s3-async",
        "ckpt-disk-sync",
        "ckpt-disk-async",
    ] {
        assert!(
            out.join("logs").join(format!("{name}.json")).is_file(),
            "{name}"
        );
    }
    assert!(out.join("report").join("index.html").is_file());
    assert!(out.join("report").join("checkpoints.png").is_file());
    assert!(out.join("report").join("epochs.png").is_file());
    assert!(stdout.contains("step 1/"), "{stdout}");
    assert!(stdout.contains("The report: "), "{stdout}");
    // The server's objects are removed unless --keep-data.
    assert!(!out.join("s3").exists());

    // A directory holding someone else's files is refused before anything runs.
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let again = Command::new(env!("CARGO_BIN_EXE_bucketload"))
        .args(["demo", "--samples", "8", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("notes.txt"));
}

mod common;

#[test]
fn the_demo_runs_against_an_existing_store_with_bucket() {
    let fx = common::Fixture::start();
    let out = fx.work_path("demo-real");
    let endpoint = fx.endpoint();
    let run = fx.run(&[
        "demo",
        "--bucket",
        "demo-real",
        "--endpoint",
        &endpoint,
        "--samples",
        "24",
        "--size",
        "4KB",
        "--classes",
        "2",
        "--epochs",
        "1",
        "--ckpt-size",
        "6MiB",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(!run.stdout.contains("embedded S3 server"), "{}", run.stdout);
    // The dataset and its shards are in the bucket, under bucketload-demo/.
    let ls = fx
        .run(&["ls", "s3://demo-real/bucketload-demo/", "--summarize"])
        .ok();
    assert!(ls.stdout.contains("train"), "{}", ls.stdout);
    let log: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("logs").join("shards.json")).unwrap())
            .unwrap();
    assert_eq!(log["samples_processed_total"], 24);
    assert_eq!(
        log["config"]["dataset"],
        "s3://demo-real/bucketload-demo/train-shards"
    );
    assert!(out.join("report").join("index.html").is_file());
}
