//! Retrying and stopping as users meet them: a store that restarts in the middle of an upload,
//! a store that throttles, an endpoint that was never there, and an upload interrupted by
//! Ctrl-C or SIGTERM.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use bucketload_test_support::pattern;
use common::{Fixture, ServeProcess, free_port, wait_until};

/// Files below `dir`, at any depth.
fn file_count(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type().unwrap().is_dir() {
            true => file_count(&e.path()),
            false => 1,
        })
        .sum()
}

/// The server is killed while a multipart upload is in flight and comes back six seconds later
/// (a restart of a real store takes seconds): the upload carries on and completes, and the
/// object is whole. The retries used to give up after about 2–5 s.
#[test]
fn an_upload_rides_out_a_server_restart() {
    let fx = Fixture::start();
    let root = fx.work_path("serve-root");
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let slow = ["--bandwidth", "1MB"];
    let mut server = ServeProcess::start(&root, port, &slow);
    let data = pattern(12 << 20, 0);
    let (src, back) = (fx.work_path("big.bin"), fx.work_path("back.bin"));
    std::fs::write(&src, &data).unwrap();
    let args = |cmd: &mut Command| {
        cmd.args(["--endpoint", &endpoint, "--part-size", "5MiB"]);
    };
    let mut cp = fx.command();
    cp.args(["cp", src.to_str().unwrap(), "s3://restart/big.bin"])
        .arg("--create-bucket");
    args(&mut cp);
    let cp = cp.stderr(Stdio::piped()).spawn().unwrap();
    // Parts are on their way once the server holds some of their bytes.
    wait_until("the server receives parts", || file_count(&root) > 1);
    server.kill();
    // The outage itself: the store is down for six seconds.
    std::thread::sleep(Duration::from_secs(6));
    let _server = ServeProcess::start(&root, port, &[]);
    let out = cp.wait_with_output().unwrap();
    assert!(out.status.success(), "cp failed across a restart: {out:#?}");
    let mut get = fx.command();
    get.args(["cp", "s3://restart/big.bin", back.to_str().unwrap()]);
    args(&mut get);
    let out = get.output().unwrap();
    assert!(out.status.success(), "{out:#?}");
    assert!(std::fs::read(&back).unwrap() == data, "the object is whole");
}

/// A store that allows 50 requests a second and answers `503 SlowDown` beyond: `gen` and
/// `read` at the default 64 requests in flight get through, in both retry modes.
#[test]
fn a_store_throttling_at_50_requests_a_second_is_ridden_out() {
    let fx = Fixture::start_with(|b| b.with_rate_limit(50));
    for mode in ["standard", "adaptive"] {
        let uri = format!("s3://throttled/{mode}");
        let gen_args = [
            "gen",
            &uri,
            "--samples",
            "250",
            "--classes",
            "1",
            "--size",
            "2KB",
            "--create-bucket",
            "--retry-mode",
            mode,
        ];
        fx.run(&gen_args).ok();
        let read = fx.run(&["read", &uri, "--json", "--retry-mode", mode]).ok();
        let report: serde_json::Value = serde_json::from_str(&read.stdout).unwrap();
        assert_eq!(report["samples_per_epoch"], 250, "{mode}: {read:#?}");
    }
}

/// An endpoint that has never answered is reported within seconds, saying how long it was
/// tried, not after the whole retry time limit.
#[test]
fn an_endpoint_that_never_answered_is_reported_quickly() {
    let fx = Fixture::start();
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let run = fx.run(&["ls", "s3://nowhere/", "--endpoint", &endpoint]);
    assert_eq!(run.code, 5, "{run:#?}");
    let line = run.error_line();
    assert!(
        line.contains(&format!("cannot reach {endpoint} after")) && line.contains(" s;"),
        "{line}"
    );
    let seconds: f64 = line
        .split(" over ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(
        seconds < 15.0,
        "tried {seconds} s instead of giving up after the first-contact grace: {line}"
    );
}

/// Ctrl-C or SIGTERM during a multipart upload: the command exits 130 and the upload it started
/// is aborted before the process ends, so no parts stay stored (and billed) on the store. The
/// file is read at once, so the signal comes while `finish` waits for the parts in flight.
#[test]
fn an_interrupted_upload_is_aborted_before_the_process_ends() {
    let latency = bucketload_server::LatencySpec::fixed(Duration::from_millis(400));
    let fx = Fixture::start_with(|b| b.with_latency(latency));
    let store = fx.store("s3://interrupted");
    let src = fx.work_path("big.bin");
    std::fs::write(&src, pattern(24 << 20, 0)).unwrap();
    for signal in ["INT", "TERM"] {
        let dst = format!("s3://interrupted/{signal}.bin");
        let mut cp = fx.command();
        cp.args(["cp", src.to_str().unwrap(), &dst, "--part-size", "5MiB"]);
        let cp = cp.stderr(Stdio::piped()).spawn().unwrap();
        wait_until("the upload has started", || {
            !fx.block_on(store.list_uploads("")).unwrap().is_empty()
        });
        let kill = Command::new("kill")
            .args([&format!("-{signal}"), &cp.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let out = cp.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(130), "{signal}: {out:#?}");
        let left = fx.block_on(store.list_uploads("")).unwrap();
        assert!(left.is_empty(), "{signal}: uploads left behind: {left:?}");
    }
}

/// A delete whose answer is lost (the server deleted, then reset the connection) is sent again:
/// `manifest --manifest-format 2` over a dataset with a format-1 manifest removes the JSON and
/// writes the `.bin`, and says so with exit 0. (object_store deletes one S3 key with a
/// DeleteObjects request.)
#[test]
fn a_delete_whose_answer_is_lost_is_sent_again() {
    let fx = Fixture::start();
    fx.generate("s3://del-lost/img", 6, 2, "2KB");
    fx.run(&["manifest", "s3://del-lost/img", "--manifest-format", "1"])
        .ok();
    let store = fx.store("s3://del-lost/img");
    assert!(common::try_get(&fx, &store, "_bucketload/manifest.json").is_some());
    let deletes = fx.server().counters().get("DeleteObjects");
    fx.server().faults().fail_next(
        "DeleteObjects",
        1,
        bucketload_server::FaultKind::ResetMidBody,
    );
    let run = fx.run(&["manifest", "s3://del-lost/img", "--manifest-format", "2"]);
    assert_eq!(run.code, 0, "a lost DELETE answer failed the run: {run:#?}");
    assert_eq!(fx.server().faults().pending("DeleteObjects"), 0);
    assert_eq!(fx.server().counters().get("DeleteObjects") - deletes, 2);
    assert!(common::try_get(&fx, &store, "_bucketload/manifest.json").is_none());
    assert!(common::try_get(&fx, &store, "_bucketload/manifest.bin").is_some());
}
