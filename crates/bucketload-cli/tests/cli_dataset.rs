//! gen → ls → stats against the embedded server, and determinism of `gen`.
#![allow(clippy::unwrap_used)]

mod common;

use bucketload_store::object_store::ObjectStore;
use bucketload_store::{Store, StoreConfig};
use common::Fixture;
use futures::TryStreamExt;

const TARGET: u64 = 20_000;

#[test]
fn gen_then_ls_then_stats() {
    let fx = Fixture::start();
    let run = fx
        .run(&[
            "gen",
            "s3://demo/train",
            "--samples",
            "60",
            "--classes",
            "3",
            "--size",
            "20KB",
        ])
        .ok();
    assert!(run.stdout.contains("wrote 60 objects"), "{run:#?}");

    let ls = fx.run(&["ls", "s3://demo/train"]).ok();
    let dirs: Vec<&str> = ls
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("PRE"))
        .collect();
    assert_eq!(dirs.len(), 3, "{}", ls.stdout);
    assert!(ls.stdout.contains("PRE class_000/"), "{}", ls.stdout);

    let ls = fx
        .run(&["ls", "s3://demo/train", "--recursive", "--summarize"])
        .ok();
    assert!(ls.stdout.contains("class_001/000001.jpg"), "{}", ls.stdout);
    assert!(ls.stdout.contains("Total Objects: 60"), "{}", ls.stdout);

    let stats = fx
        .run(&["stats", "s3://demo/train", "--json", "--sample", "8"])
        .ok();
    let v: serde_json::Value = serde_json::from_str(&stats.stdout).unwrap();
    assert_eq!(v["objects"], 60);
    for class in ["class_000", "class_001", "class_002"] {
        assert_eq!(v["classes"][class], 20, "{v}");
    }
    for p in ["p0", "p50", "max"] {
        let size = v["sizes"][p].as_u64().unwrap() as f64;
        assert!(
            (size - TARGET as f64).abs() <= 0.1 * TARGET as f64,
            "{p} = {size}"
        );
    }
    assert_eq!(v["images"]["sampled"], 8);
    let dims = v["images"]["dimensions"].as_object().unwrap();
    assert_eq!(dims.len(), 1, "every image has the same shape: {v}");
    assert_eq!(v["cost"]["get_requests"], 60);
    assert_eq!(v["cost"]["list_requests"], 1);

    let text = fx.run(&["stats", "s3://demo/train"]).ok();
    assert!(text.stdout.contains("objects   60"), "{}", text.stdout);
}

#[test]
fn same_seed_gives_same_etags() {
    let fx = Fixture::start();
    for prefix in ["a", "b", "c"] {
        let seed = if prefix == "c" { "8" } else { "7" };
        let uri = format!("s3://det/{prefix}");
        fx.run(&[
            "gen",
            &uri,
            "--samples",
            "12",
            "--classes",
            "2",
            "--size",
            "5KB",
            "--seed",
            seed,
        ])
        .ok();
    }
    let etags = |prefix: &str| {
        let config = StoreConfig::from_env()
            .with_endpoint(fx.endpoint())
            .with_region("us-east-1")
            .with_credentials(
                bucketload_server::DEFAULT_ACCESS_KEY,
                bucketload_server::DEFAULT_SECRET_KEY,
                None,
            );
        let store = Store::open(&format!("s3://det/{prefix}"), &config).unwrap();
        let mut tags: Vec<(String, String)> = fx.block_on(async {
            let list: Vec<_> = store.object_store().list(None).try_collect().await.unwrap();
            list.into_iter()
                .map(|m| (m.location.to_string(), m.e_tag.unwrap_or_default()))
                .collect()
        });
        tags.sort();
        tags
    };
    let (a, b, c) = (etags("a"), etags("b"), etags("c"));
    assert_eq!(a.len(), 12);
    assert!(a.iter().all(|(_, tag)| !tag.is_empty()), "{a:?}");
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn ls_json_lines_match_the_objects() {
    let fx = Fixture::start();
    fx.generate("s3://jsonls/d", 4, 2, "5KB");

    let top = fx.run(&["ls", "s3://jsonls/d", "--json"]).ok();
    let prefixes: Vec<serde_json::Value> = top
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(prefixes.len(), 2, "{}", top.stdout);
    assert_eq!(prefixes[0]["prefix"], "class_000/");

    let all = fx
        .run(&[
            "ls",
            "s3://jsonls/d",
            "--json",
            "--recursive",
            "--summarize",
        ])
        .ok();
    let lines: Vec<serde_json::Value> = all
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (summary, objects) = lines.split_last().unwrap();
    assert_eq!(objects.len(), 4);
    let total: u64 = objects.iter().map(|o| o["size"].as_u64().unwrap()).sum();
    assert_eq!(summary["summary"]["objects"], 4);
    assert_eq!(summary["summary"]["bytes"], total);
    for o in objects {
        assert!(o["key"].as_str().unwrap().ends_with(".jpg"), "{o}");
        assert!(o["etag"].as_str().unwrap().len() >= 32, "{o}");
    }
}

/// What several servers (SeaweedFS for a bucket another identity created, MinIO and Ceph in
/// some set-ups) answer CreateBucket on a bucket that exists and that the caller may write to.
const TAKEN: bucketload_server::FaultKind = bucketload_server::FaultKind::Error {
    status: 409,
    code: "BucketAlreadyExists",
};

/// Every command that writes into a bucket uses one that exists as it is: none depends on
/// CreateBucket's answer, with or without `--create-bucket`.
#[test]
fn writes_into_an_existing_bucket_whatever_create_bucket_answers() {
    let fx = Fixture::start();
    fx.store("s3://have");
    let faults = fx.server().faults();
    faults.fail_next("CreateBucket", 100, TAKEN);
    fx.generate("s3://have/train", 20, 2, "2KB");
    let again = [
        "gen",
        "s3://have/again",
        "--samples",
        "4",
        "--classes",
        "2",
        "--size",
        "2KB",
        "--create-bucket",
    ];
    fx.run(&again).ok();
    let local = fx.work_path("blob.bin");
    std::fs::write(&local, vec![7u8; 10_000]).unwrap();
    let local = local.to_str().unwrap();
    fx.run(&["cp", local, "s3://have/up/blob.bin"]).ok();
    fx.run(&["cp", local, "s3://have/up/b2.bin", "--create-bucket"])
        .ok();
    let shard = [
        "shard",
        "s3://have/train",
        "s3://have/shards",
        "--samples-per-shard",
        "10",
    ];
    fx.run(&shard).ok();
    fx.run(&["ckpt", "save", local, "s3://have/ckpt/step-1.pt"])
        .ok();
    assert_eq!(faults.pending("CreateBucket"), 100);
    assert_eq!(fx.server().counters().get("CreateBucket"), 1);
}

/// A bucket of another account (HeadBucket refused, CreateBucket: the name is taken) is a
/// permission error that names the bucket and says what to do.
#[test]
fn a_bucket_of_another_account_is_a_permission_error() {
    let fx = Fixture::start();
    let faults = fx.server().faults();
    faults.fail_next("HeadBucket", 2, bucketload_server::FaultKind::Status(403));
    faults.fail_next("CreateBucket", 1, TAKEN);
    let run = fx.run(&[
        "gen",
        "s3://theirs/train",
        "--samples",
        "4",
        "--classes",
        "2",
    ]);
    assert_eq!(run.code, 4, "{run:#?}");
    run.error_line();
    let text = &run.stderr;
    assert!(text.contains("s3://theirs: permission denied"), "{text}");
    assert!(text.contains("choose another bucket name"), "{text}");
}
