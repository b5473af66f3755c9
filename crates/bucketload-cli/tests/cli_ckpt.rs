//! `bucketload ckpt` and `ckpt-bench` against the embedded server: save and load round trips,
//! retention, a writer killed with SIGKILL mid-upload (nothing visible, the previous checkpoint
//! intact, `ckpt gc` removes the orphaned upload), and the benchmark's logs drawn by `report`.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use bucketload_server::LatencySpec;
use bucketload_store::object_store::ObjectStoreExt;
use bucketload_test_support::pattern as bytes;
use common::Fixture;

fn get(fx: &Fixture, bucket_uri: &str, key: &str) -> Option<Vec<u8>> {
    let store = fx.store(bucket_uri);
    let path = bucketload_store::key_path(key);
    fx.block_on(async {
        let got = store.object_store().get(&path).await.ok()?;
        Some(got.bytes().await.ok()?.to_vec())
    })
}

#[test]
fn save_load_list_and_prune() {
    let fx = Fixture::start();
    let data = bytes(7 << 20, 1);
    let src = fx.work_path("model.pt");
    std::fs::write(&src, &data).unwrap();
    let src = src.to_str().unwrap();
    for step in ["step-1.pt", "step-2.pt", "step-3.pt"] {
        let uri = format!("s3://ckpt-cli/run/{step}");
        let run = fx
            .run(&["ckpt", "save", src, &uri, "--part-size", "5MiB"])
            .ok();
        assert!(run.stdout.contains(&format!("saved {uri}")), "{run:?}");
    }
    let dst = fx.work_path("back.pt");
    fx.run(&[
        "ckpt",
        "load",
        "s3://ckpt-cli/run/step-2.pt",
        dst.to_str().unwrap(),
    ])
    .ok();
    assert_eq!(std::fs::read(&dst).unwrap(), data);
    assert_eq!(get(&fx, "s3://ckpt-cli", "run/step-3.pt").unwrap(), data);

    let ls = fx.run(&["ckpt", "ls", "s3://ckpt-cli/run"]).ok();
    assert!(ls.stdout.contains("step-1.pt") && ls.stdout.contains("step-3.pt"));
    assert!(ls.stdout.contains("3 checkpoints"), "{}", ls.stdout);
    let dry = fx
        .run(&[
            "ckpt",
            "prune",
            "s3://ckpt-cli/run",
            "--keep-last",
            "1",
            "--dry-run",
        ])
        .ok();
    assert_eq!(
        dry.stdout.matches("would delete").count(),
        2,
        "{}",
        dry.stdout
    );
    assert!(get(&fx, "s3://ckpt-cli", "run/step-1.pt").is_some());
    let prune = fx
        .run(&["ckpt", "prune", "s3://ckpt-cli/run", "--keep-last", "1"])
        .ok();
    assert!(prune.stdout.contains("deleted 2"), "{}", prune.stdout);
    assert!(get(&fx, "s3://ckpt-cli", "run/step-1.pt").is_none());
    assert!(get(&fx, "s3://ckpt-cli", "run/step-3.pt").is_some());

    let missing = fx.run(&["ckpt", "load", "s3://ckpt-cli/run/nope.pt", "-"]);
    assert_ne!(missing.code, 0);
    assert!(missing.error_line().contains("nope.pt"), "{missing:?}");
}

#[test]
fn a_writer_killed_mid_upload_leaves_nothing_and_gc_cleans_up() {
    // Each request waits 100 ms: a 60 MiB save in 5 MiB parts, one at a time, takes > 1 s.
    let latency: LatencySpec = "100ms".parse().unwrap();
    let fx = Fixture::start_with(|b| b.with_latency(latency));
    let old = bytes(6 << 20, 2);
    let big = bytes(60 << 20, 3);
    let (old_path, big_path) = (fx.work_path("old.pt"), fx.work_path("big.pt"));
    std::fs::write(&old_path, &old).unwrap();
    std::fs::write(&big_path, &big).unwrap();
    let uri = "s3://ckpt-kill/run/c.pt";
    fx.run(&["ckpt", "save", old_path.to_str().unwrap(), uri])
        .ok();

    let mut child = fx
        .command()
        .args(["ckpt", "save", big_path.to_str().unwrap(), uri])
        .args(["--part-size", "5MiB", "--parts-in-flight", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let store = fx.store("s3://ckpt-kill");
    let mut started = false;
    for _ in 0..300 {
        if !fx.block_on(store.list_uploads("run/")).unwrap().is_empty() {
            started = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(started, "the upload never started");
    // Let a part or two land, then kill the writer where it stands.
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the save finished before it was killed");

    assert_eq!(get(&fx, "s3://ckpt-kill", "run/c.pt").unwrap(), old);
    let left = fx.block_on(store.list_uploads("run/")).unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    let ls = fx.run(&["ckpt", "ls", "s3://ckpt-kill/run"]).ok();
    assert!(ls.stdout.contains("1 unfinished saves"), "{}", ls.stdout);
    // The save just killed is recent: `ckpt ls` says how to remove it, not only the default gc
    // that would leave it.
    assert!(
        ls.stdout
            .contains("`bucketload ckpt gc s3://ckpt-kill/run --older-than 0s` aborts them"),
        "{}",
        ls.stdout
    );
    // A recent upload may still be running: the default age spares it.
    let spared = fx.run(&["ckpt", "gc", "s3://ckpt-kill/run"]).ok();
    assert!(spared.stdout.contains("aborted 0"), "{}", spared.stdout);
    let gc = fx
        .run(&["ckpt", "gc", "s3://ckpt-kill/run", "--older-than", "0s"])
        .ok();
    assert!(gc.stdout.contains("aborted 1"), "{}", gc.stdout);
    assert!(fx.block_on(store.list_uploads("run/")).unwrap().is_empty());
    assert_eq!(get(&fx, "s3://ckpt-kill", "run/c.pt").unwrap(), old);
}

#[test]
fn ckpt_bench_logs_are_drawn_by_report() {
    let fx = Fixture::start();
    let logs = fx.work_path("logs");
    let disk = fx.work_path("disk");
    let run = fx
        .run(&[
            "ckpt-bench",
            "--size",
            "6MiB",
            "--to",
            "s3://ckpt-bench/run",
            "--vs",
            disk.to_str().unwrap(),
            "--runs",
            "2",
            "--part-size",
            "5MiB",
            "--log-dir",
            logs.to_str().unwrap(),
        ])
        .ok();
    assert!(run.stdout.contains("target"), "{}", run.stdout);
    for (target, mode) in [
        ("s3", "sync"),
        ("s3", "async"),
        ("disk", "sync"),
        ("disk", "async"),
    ] {
        let path = logs.join(format!("ckpt-{target}-{mode}.json"));
        let log: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(log["ckpt"]["target"], target);
        assert_eq!(log["ckpt"]["mode"], mode);
        assert_eq!(log["ckpt"]["size_bytes"], 6 << 20);
        assert_eq!(log["ckpt"]["times"].as_array().unwrap().len(), 2);
        assert!(log["t_ckpt_ave"].as_f64().unwrap() > 0.0);
        if mode == "sync" {
            assert_eq!(log["ckpt"]["load_times"].as_array().unwrap().len(), 2);
        } else {
            assert_eq!(log["ckpt"]["durable_times"].as_array().unwrap().len(), 2);
        }
    }
    // The benchmark's checkpoints are deleted afterwards.
    assert!(get(&fx, "s3://ckpt-bench", "run/ckpt-bench-sync.bin").is_none());
    assert_eq!(std::fs::read_dir(&disk).unwrap().count(), 0);
    let out = fx.work_path("report");
    let report = fx
        .run(&[
            "report",
            logs.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .ok();
    assert!(out.join("checkpoints.png").is_file(), "{}", report.stdout);
}

/// A save whose completion took effect but whose answer was lost (the connection reset after
/// the server completed it) is a success, for `ckpt save` and for `cp` alike: exit 0 exactly
/// when the new object is there and whole.
#[test]
fn a_lost_completion_answer_is_still_a_successful_save() {
    let fx = Fixture::start();
    let (old, new) = (bytes(6 << 20, 4), bytes(11 << 20, 5));
    let (old_path, new_path) = (fx.work_path("old.pt"), fx.work_path("new.pt"));
    std::fs::write(&old_path, &old).unwrap();
    std::fs::write(&new_path, &new).unwrap();
    let uri = "s3://ckpt-lost/run/c.pt";
    fx.run(&["ckpt", "save", old_path.to_str().unwrap(), uri])
        .ok();
    for args in [
        vec!["ckpt", "save", new_path.to_str().unwrap(), uri],
        vec![
            "cp",
            new_path.to_str().unwrap(),
            "s3://ckpt-lost/run/copied.pt",
        ],
    ] {
        fx.server().faults().fail_next(
            "CompleteMultipartUpload",
            1,
            bucketload_server::FaultKind::ResetMidBody,
        );
        let mut args = args.clone();
        args.extend(["--part-size", "5MiB"]);
        let run = fx.run(&args);
        assert_eq!(run.code, 0, "{args:?} claimed failure: {run:?}");
        assert_eq!(fx.server().faults().pending("CompleteMultipartUpload"), 0);
    }
    assert_eq!(get(&fx, "s3://ckpt-lost", "run/c.pt").unwrap(), new);
    assert_eq!(get(&fx, "s3://ckpt-lost", "run/copied.pt").unwrap(), new);
}

/// `ckpt load` onto an existing local file whose write fails (a full file system) leaves the old
/// file whole: the checkpoint is written beside it and renamed over it only when complete.
#[test]
fn a_failed_load_leaves_the_old_local_file_whole() {
    let fx = Fixture::start();
    let dir = fx.work_path("small");
    std::fs::create_dir_all(&dir).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(
        mounted.success(),
        "mount -t tmpfs failed: this test needs root, as the mount tests do"
    );
    let unmount = Unmount(dir.clone());
    // 1 MiB: the old file and a neighbour leave too little room for the new one, even once the
    // old one's room is freed.
    let (old, new) = (bytes(300 << 10, 6), bytes(900 << 10, 7));
    let dst = dir.join("model.pt");
    std::fs::write(&dst, &old).unwrap();
    std::fs::write(dir.join("neighbour"), bytes(500 << 10, 8)).unwrap();
    let src = fx.work_path("new.pt");
    std::fs::write(&src, &new).unwrap();
    let uri = "s3://ckpt-full/run/model.pt";
    fx.run(&["ckpt", "save", src.to_str().unwrap(), uri]).ok();
    let run = fx.run(&["ckpt", "load", uri, dst.to_str().unwrap()]);
    assert_ne!(run.code, 0, "the load cannot fit: {run:?}");
    assert_eq!(
        std::fs::read(&dst).unwrap(),
        old,
        "the old file was damaged"
    );
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 2, "a temporary file was left: {left:?}");
    drop(unmount);
}

/// Unmounts a test's tmpfs, even when the test fails.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A store that answers 501 NotImplemented to ListMultipartUploads (some S3-compatible servers
/// do): `ckpt ls` lists the checkpoints, warns in one line that unfinished saves cannot be
/// counted, and succeeds.
#[test]
fn ls_without_list_multipart_uploads_warns_and_succeeds() {
    let fx = Fixture::start();
    let src = fx.work_path("model.pt");
    std::fs::write(&src, bytes(64 << 10, 3)).unwrap();
    fx.run(&[
        "ckpt",
        "save",
        src.to_str().unwrap(),
        "s3://ckpt-501/run/step-1.pt",
    ])
    .ok();
    fx.server().faults().fail_next(
        "ListMultipartUploads",
        100,
        bucketload_server::FaultKind::Status(501),
    );
    let run = fx.run(&["ckpt", "ls", "s3://ckpt-501/run", "--max-retries", "0"]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(run.stdout.contains("step-1.pt"), "{run:#?}");
    assert!(run.stdout.contains("1 checkpoints"), "{run:#?}");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{run:#?}");
    assert!(lines[0].starts_with("warning: "), "{run:#?}");
    assert!(lines[0].contains("s3://ckpt-501/run"), "{run:#?}");
    assert!(lines[0].contains("unfinished saves"), "{run:#?}");
    assert!(!lines[0].contains("<?xml"), "{run:#?}");
}
