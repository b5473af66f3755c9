//! `bucketload bench` against the embedded server: the log's keys and counts, the cache's
//! second epoch, shards and indexed shards, live Prometheus metrics during a run, `--find-max`,
//! and `report` drawing the logs.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;

use common::Fixture;
use serde_json::Value;

fn bench(fx: &Fixture, args: &[&str]) -> Value {
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    all.push("--json");
    let run = fx.run(&all).ok();
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn the_log_has_the_training_keys_and_the_cache_serves_epoch_two() {
    let fx = Fixture::start();
    fx.generate("s3://bench-files/train", 40, 4, "4KB");
    let cache = fx.work_path("cache");
    let logs = fx.work_path("logs");
    let args = [
        "--dataset",
        "s3://bench-files/train",
        "--format",
        "files",
        "--epochs",
        "2",
        "--batch-size",
        "8",
        "--image-size",
        "32",
        "--compute-ms",
        "5",
        "--cache",
        cache.to_str().unwrap(),
        "--log-dir",
        logs.to_str().unwrap(),
        "--name",
        "files-cached",
    ];
    let log = bench(&fx, &args);
    let written: Value =
        serde_json::from_slice(&std::fs::read(logs.join("files-cached.json")).unwrap()).unwrap();
    assert_eq!(written, log, "the file holds what --json printed");
    assert_eq!(log["schema_version"], 1);
    assert_eq!(log["name"], "files-cached");
    assert_eq!(log["tool"], "bucketload");
    assert_eq!(log["samples_processed_total"], 80);
    let (t1, t2) = (f(&log["t_epoch_1"]), f(&log["t_epoch_2"]));
    assert!(
        (f(&log["training_time"]) - (t1 + t2)).abs() < 1e-6,
        "{log:#}"
    );
    let rate = 80.0 / f(&log["training_time"]);
    assert!((f(&log["samples_per_second"]) - rate).abs() < 1e-6 * rate);
    let util = f(&log["accelerator_utilization"]);
    assert!(util > 0.0 && util <= 1.0, "{util}");
    assert!(f(&log["data_wait_ms"]["p99"]) >= f(&log["data_wait_ms"]["p50"]));
    // Epoch 1 fetched every object once; epoch 2 came from the cache.
    assert_eq!(log["requests"]["get"], 40, "{:#}", log["requests"]);
    assert_eq!(log["cache_hit_rate"], 0.5);
    assert_eq!(log["epochs"][1]["cache_hits"], 40);
    assert!(log["bytes_read"].as_u64().unwrap() > 40 * 3000);
    assert!(f(&log["cost_usd"]) > 0.0);
    for stage in ["fetch", "decode", "compute"] {
        assert!(f(&log["stages"][stage]["busy_s"]) > 0.0, "{stage}: {log:#}");
    }
    let epoch = &log["epochs"][0];
    assert_eq!(
        (epoch["samples"].as_u64(), epoch["batches"].as_u64()),
        (Some(40), Some(5))
    );
    let config = &log["config"];
    assert_eq!(config["format"], "files");
    assert_eq!(config["cache"], true);
    assert_eq!(config["decode"], true);
    assert_eq!(config["compute_ms"], 5.0);
    assert_eq!(config["batch_size"], 8);
    assert!(config["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(log["ckpt"].is_null());

    // `report` draws the log.
    let out = fx.work_path("report");
    fx.run(&[
        "report",
        logs.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
    .ok();
    assert!(out.join("epochs.png").is_file());
}

#[test]
fn validation_runs_bench_the_eval_transform_without_the_manifest() {
    let fx = Fixture::start();
    fx.generate("s3://bench-eval/val", 20, 2, "4KB");
    fx.run(&["manifest", "s3://bench-eval/val"]).ok();
    let args = [
        "--dataset",
        "s3://bench-eval/val",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--image-size",
        "32",
        "--augment",
        "eval",
        "--resize",
        "40",
        "--no-shuffle",
        "--check-manifest",
    ];
    let log = bench(&fx, &args);
    assert_eq!(log["config"]["augment"], "eval", "{log:#}");
    assert_eq!(log["samples_processed_total"], 20, "{log:#}");
    let mut ignoring = args.to_vec();
    ignoring.pop();
    ignoring.push("--no-manifest");
    assert_eq!(bench(&fx, &ignoring)["samples_processed_total"], 20);
}

#[test]
fn shards_streamed_and_indexed_count_every_sample() {
    let fx = Fixture::start();
    fx.generate("s3://bench-shards/src", 30, 3, "2KB");
    let shard = [
        "shard",
        "s3://bench-shards/src",
        "s3://bench-shards/wds",
        "--samples-per-shard",
        "7",
    ];
    fx.run(&shard).ok();
    for format in ["shards", "indexed"] {
        let log = bench(
            &fx,
            &[
                "--dataset",
                "s3://bench-shards/wds",
                "--format",
                format,
                "--epochs",
                "2",
                "--batch-size",
                "4",
                "--no-decode",
                "--drop-last",
            ],
        );
        assert_eq!(log["config"]["format"], format);
        assert_eq!(log["config"]["decode"], false);
        assert!(log["stages"].get("decode").is_none());
        // 30 samples in batches of 4, the short last one dropped: 28 per epoch.
        assert_eq!(log["samples_processed_total"], 56, "{format}: {log:#}");
        assert_eq!(log["epochs"][0]["batches"], 7);
        // No compute emulated: the accelerator never worked.
        assert_eq!(log["accelerator_utilization"], 0.0);
    }
}

/// The next epoch's stream opens while the current epoch's last batches train (here after the
/// first batch: the loader may hold the whole epoch ahead), every sample is still fetched once
/// per epoch, and `--no-epoch-overlap` opens each epoch after the last batch of the one before.
#[test]
fn the_next_epoch_opens_while_the_last_batches_train() {
    let fx = Fixture::start();
    fx.generate("s3://bench-overlap/train", 40, 4, "2KB");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--dataset",
            "s3://bench-overlap/train",
            "--format",
            "files",
            "--epochs",
            "3",
            "--batch-size",
            "8",
            "--no-decode",
            "--compute-ms",
            "2",
        ];
        args.extend_from_slice(extra);
        bench(&fx, &args)
    };
    let ahead = |log: &Value| -> Vec<u64> {
        let epochs = log["epochs"].as_array().unwrap();
        epochs
            .iter()
            .map(|e| e["opened_ahead_samples"].as_u64().unwrap())
            .collect()
    };
    let overlapped = run(&[]);
    assert_eq!(ahead(&overlapped), [0, 32, 32], "{overlapped:#}");
    assert_eq!(overlapped["samples_processed_total"], 120);
    assert_eq!(overlapped["requests"]["get"], 120, "{overlapped:#}");
    let util = overlapped["accelerator_utilization"].as_f64().unwrap();
    assert!(util > 0.0 && util <= 1.0, "{util}");
    let apart = run(&["--no-epoch-overlap"]);
    assert_eq!(ahead(&apart), [0, 0, 0], "{apart:#}");
    assert_eq!(apart["samples_processed_total"], 120);
    assert_eq!(apart["requests"]["get"], 120, "{apart:#}");
}

#[test]
fn metrics_are_served_while_the_run_goes_on() {
    let fx = Fixture::start();
    fx.generate("s3://bench-metrics/train", 24, 2, "2KB");
    let mut child = fx
        .command()
        .args([
            "bench",
            "--dataset",
            "s3://bench-metrics/train",
            "--epochs",
            "2",
            "--batch-size",
            "4",
            "--no-decode",
            "--compute-ms",
            "150",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("bucketload bench: metrics at http://")
        .unwrap_or_else(|| panic!("no metrics address: {line}"));
    let addr = url.strip_suffix("/metrics").unwrap();
    // 12 batches of 150 ms: the run lasts about 1.8 s after the address is printed.
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    for name in [
        "# TYPE bucketload_samples_total counter",
        "bucketload_accelerator_utilization ",
        "bucketload_requests_total{kind=\"get\"} ",
        "bucketload_data_wait_seconds_bucket{le=\"+Inf\"} ",
    ] {
        assert!(text.contains(name), "{name} missing from\n{text}");
    }
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{rest}");
}

#[test]
fn find_max_reports_a_probe_that_keeps_the_accelerator_busy() {
    let fx = Fixture::start();
    fx.generate("s3://bench-max/train", 32, 2, "2KB");
    let log = bench(
        &fx,
        &[
            "--dataset",
            "s3://bench-max/train",
            "--epochs",
            "1",
            "--batch-size",
            "4",
            "--no-decode",
            "--find-max",
        ],
    );
    let search = &log["find_max"];
    let probes = search["probes"].as_array().unwrap();
    assert!(probes.len() >= 2 && probes.len() <= 10, "{search:#}");
    assert_eq!(probes[0]["compute_ms"], 0.0);
    let best = &search["best"];
    assert!(f(&best["accelerator_utilization"]) >= 0.9, "{search:#}");
    // No probe that reached 90% used less compute than the best.
    for p in probes {
        if f(&p["accelerator_utilization"]) >= 0.9 && f(&p["compute_ms"]) > 0.0 {
            assert!(f(&p["compute_ms"]) >= f(&best["compute_ms"]));
        }
    }
    // The log stands for the best probe.
    assert_eq!(log["config"]["compute_ms"], best["compute_ms"]);
}

#[test]
fn checkpoints_every_n_steps_are_timed_and_cleaned_up() {
    let fx = Fixture::start();
    fx.generate("s3://bench-ckpt/train", 24, 2, "2KB");
    for (mode, extra) in [("sync", None), ("async", Some("--async-ckpt"))] {
        let mut args = vec![
            "--dataset",
            "s3://bench-ckpt/train",
            "--epochs",
            "1",
            "--batch-size",
            "4",
            "--no-decode",
            "--ckpt-steps",
            "2",
            "--ckpt-size",
            "6MiB",
            "--ckpt-to",
            "s3://bench-ckpt/ckpt",
            "--part-size",
            "5MiB",
        ];
        args.extend(extra);
        let log = bench(&fx, &args);
        let ckpt = &log["ckpt"];
        assert_eq!(ckpt["target"], "s3");
        assert_eq!(ckpt["mode"], mode);
        assert_eq!(ckpt["size_bytes"], 6 << 20);
        // 6 steps, a checkpoint after steps 2, 4 and 6.
        assert_eq!(ckpt["times"].as_array().unwrap().len(), 3, "{log:#}");
        assert_eq!(ckpt["durable_times"].as_array().unwrap().len(), 3);
        assert!(f(&log["t_ckpt_3"]) > 0.0 && f(&log["t_ckpt_ave"]) > 0.0);
        assert!(f(&log["epochs"][0]["ckpt_s"]) > 0.0);
    }
    // The run's checkpoints are deleted when it ends.
    let ls = fx.run(&["ckpt", "ls", "s3://bench-ckpt/ckpt"]).ok();
    assert!(ls.stdout.contains("0 checkpoints"), "{}", ls.stdout);
}

#[test]
fn bad_input_names_what_to_fix() {
    let fx = Fixture::start();
    fx.generate("s3://bench-bad/train", 4, 1, "2KB");
    let run = fx.run(&[
        "bench",
        "--dataset",
        "s3://bench-bad/train",
        "--name",
        "a/b",
    ]);
    assert_ne!(run.code, 0);
    assert!(run.error_line().contains("--name"), "{run:#?}");
    let run = fx.run(&["bench", "--dataset", "s3://bench-bad/nothing-here"]);
    assert_ne!(run.code, 0);
    assert!(run.error_line().contains("nothing-here"), "{run:#?}");
}

#[test]
fn a_mixture_of_datasets_in_two_buckets_counts_both_stores() {
    let fx = Fixture::start();
    fx.generate("s3://bench-mix-a/train", 24, 2, "2KB");
    fx.generate("s3://bench-mix-b/train", 8, 2, "2KB");
    let logs = fx.work_path("logs");
    let flags = "--dataset s3://bench-mix-a/train --dataset s3://bench-mix-b/train --weights 3,1 \
                 --samples-per-epoch 64 --format files --epochs 1 --batch-size 8 --image-size 32";
    let mut args: Vec<&str> = flags.split_whitespace().collect();
    args.extend(["--log-dir", logs.to_str().unwrap()]);
    let log = bench(&fx, &args);
    assert_eq!(log["samples_processed_total"], 64, "{log:#}");
    assert_eq!(log["config"]["format"], "files+files");
    // A GET per sample from whichever bucket its dataset is in, and what each dataset read
    // ahead past the mixture's end: more than either bucket holds for two epochs alone.
    let gets = log["requests"]["get"].as_u64().unwrap();
    assert!((64..=64 + 24 + 8).contains(&gets), "{:#}", log["requests"]);
}
