//! `bucketload read` against the embedded server: every sample of each epoch counted, requests
//! by kind, epoch 2 served from the cache, shards streamed and indexed, ranks equal.
#![allow(clippy::unwrap_used)]

mod common;

use common::Fixture;
use serde_json::Value;

fn read_json(fx: &Fixture, args: &[&str]) -> Value {
    let mut all = vec!["read"];
    all.extend_from_slice(args);
    all.push("--json");
    let run = fx.run(&all).ok();
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

fn epoch(report: &Value, i: usize) -> &Value {
    &report["epochs"][i]
}

#[test]
fn files_are_read_every_epoch_and_the_second_from_the_cache() {
    let fx = Fixture::start();
    fx.generate("s3://read-files/train", 48, 4, "2KB");
    let cache = fx.work_path("cache");
    let cache = cache.to_str().unwrap();
    let args = [
        "s3://read-files/train",
        "--epochs",
        "2",
        "--cache",
        cache,
        "--cache-size",
        "64MiB",
    ];
    let gets = fx.server().counters().get("GetObject");
    let report = read_json(&fx, &args);
    assert_eq!(report["format"], "files");
    assert_eq!(report["samples_per_epoch"], 48);
    let (first, second) = (epoch(&report, 0), epoch(&report, 1));
    assert_eq!(first["samples"], 48);
    assert_eq!(first["get"], 48);
    assert_eq!(first["cache_misses"], 48);
    assert_eq!(second["samples"], 48);
    assert_eq!(second["get"], 0, "{report:#}");
    assert_eq!(second["cache_hits"], 48);
    assert_eq!(first["bytes"], second["bytes"]);
    // The listing plus one GET per object (and the missing manifests, format 2 then 1), once.
    let served = fx.server().counters().get("GetObject") - gets;
    assert_eq!(served, 48 + 2, "the server saw epoch 1's GETs only");
}

#[test]
fn streamed_shards_come_from_the_cache_in_epoch_two() {
    let fx = Fixture::start();
    fx.generate("s3://read-shard-cache/src", 40, 4, "20KB");
    let shard = [
        "shard",
        "s3://read-shard-cache/src",
        "s3://read-shard-cache/wds",
        "--samples-per-shard",
        "10",
    ];
    fx.run(&shard).ok();
    let cache = fx.work_path("cache");
    let args = [
        "s3://read-shard-cache/wds",
        "--format",
        "shards",
        "--epochs",
        "2",
        "--cache",
        cache.to_str().unwrap(),
    ];
    let gets = fx.server().counters().get("GetObject");
    let report = read_json(&fx, &args);
    let (first, second) = (epoch(&report, 0), epoch(&report, 1));
    assert_eq!(first["samples"], 40);
    assert_eq!(second["samples"], 40);
    assert_eq!(first["bytes"], second["bytes"]);
    let first_gets = first["shard_ranged_get"].as_u64().unwrap();
    assert!(first_gets >= 4, "{report:#}");
    assert_eq!(
        first["cache_misses"], first_gets,
        "one entry per ranged GET"
    );
    assert_eq!(second["cache_hits"], first_gets, "{report:#}");
    assert_eq!(second["cache_misses"], 0);
    // The server saw the first epoch's GETs only (and the catalog's reads).
    let served = fx.server().counters().get("GetObject") - gets;
    assert!(
        served <= first_gets + 2,
        "epoch 2 went to the store: {served} GETs"
    );

    // Each epoch asks for every shard's version (a HEAD each), unless --metadata-ttl trusts
    // the first answer: then the second epoch sends no request at all.
    for (ttl, heads) in [(None, 8), (Some("indefinite"), 4), (Some("10m"), 4)] {
        let cache = fx.work_path(&format!("cache-{ttl:?}"));
        let mut args = args.to_vec();
        args[6] = cache.to_str().unwrap();
        args.extend(ttl.map(|t| ["--metadata-ttl", t]).into_iter().flatten());
        let before = fx.server().counters().get("HeadObject");
        let report = read_json(&fx, &args);
        assert_eq!(epoch(&report, 1)["cache_hits"], first_gets, "{report:#}");
        let asked = fx.server().counters().get("HeadObject") - before;
        assert_eq!(
            asked, heads,
            "HEADs over two epochs with --metadata-ttl {ttl:?}"
        );
    }
    let refused = fx.run(&["read", "s3://read-shard-cache/wds", "--metadata-ttl", "1s"]);
    assert_eq!(
        refused.code, 2,
        "--metadata-ttl without --cache: {refused:?}"
    );
    let refused = fx.run(&[
        "read",
        "s3://read-shard-cache/wds",
        "--cache",
        cache.to_str().unwrap(),
        "--metadata-ttl",
        "soon",
    ]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(refused.stderr.contains("indefinite"), "{}", refused.stderr);
}

#[test]
fn shards_are_streamed_or_indexed() {
    let fx = Fixture::start();
    fx.generate("s3://read-shards/src", 40, 4, "2KB");
    let shard = [
        "shard",
        "s3://read-shards/src",
        "s3://read-shards/wds",
        "--samples-per-shard",
        "6",
    ];
    fx.run(&shard).ok();
    let streamed = read_json(&fx, &["s3://read-shards/wds"]);
    assert_eq!(streamed["format"], "shards");
    assert_eq!(epoch(&streamed, 0)["samples"], 40);
    assert!(epoch(&streamed, 0)["shard_ranged_get"].as_u64().unwrap() >= 7);
    // The time to a first batch (--batch-size samples) is part of the epoch.
    let sized = read_json(&fx, &["s3://read-shards/wds", "--batch-size", "8"]);
    let (first_batch, seconds) = (
        epoch(&sized, 0)["first_batch_s"].as_f64().unwrap(),
        epoch(&sized, 0)["seconds"].as_f64().unwrap(),
    );
    assert!(0.0 < first_batch && first_batch <= seconds, "{sized:#}");
    let indexed = read_json(
        &fx,
        &[
            "s3://read-shards/wds",
            "--format",
            "indexed",
            "--no-shuffle",
        ],
    );
    assert_eq!(indexed["format"], "indexed");
    assert_eq!(epoch(&indexed, 0)["samples"], 40);
    assert_eq!(epoch(&indexed, 0)["ranged_get"], 7, "{indexed:#}");
    assert_eq!(epoch(&indexed, 0)["bytes"], epoch(&streamed, 0)["bytes"]);
}

#[test]
fn ranks_read_equal_shares_and_the_text_report_names_the_stages() {
    let fx = Fixture::start();
    fx.generate("s3://read-ranks/train", 25, 2, "2KB");
    // Drop: 8 each; exact: every sample once, 9, 8 and 8.
    let shares = [("drop", [8, 8, 8]), ("exact", [9, 8, 8])];
    for (remainder, samples) in shares {
        for (rank, samples) in ["0", "1", "2"].into_iter().zip(samples) {
            let args = [
                "s3://read-ranks/train",
                "--rank",
                rank,
                "--world-size",
                "3",
                "--remainder",
                remainder,
            ];
            let report = read_json(&fx, &args);
            assert_eq!(
                epoch(&report, 0)["samples"],
                samples,
                "{remainder} rank {rank}"
            );
        }
    }
    let run = fx.run(&["read", "s3://read-ranks/train"]).ok();
    assert!(run.stdout.contains("epoch 0  25 samples"), "{}", run.stdout);
    assert!(run.stdout.contains("consumer waiting"), "{}", run.stdout);
    let bad = fx.run(&[
        "read",
        "s3://read-ranks/train",
        "--rank",
        "3",
        "--world-size",
        "3",
    ]);
    assert!(
        bad.error_line().contains("rank 3 is out of range"),
        "{bad:#?}"
    );
}

#[test]
fn decode_turns_every_sample_into_batches_and_names_a_corrupt_image() {
    use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path};

    let fx = Fixture::start();
    fx.generate("s3://read-decode/train", 40, 4, "4KB");
    let decode = [
        "--decode",
        "--image-size",
        "32",
        "--batch-size",
        "16",
        "--decode-threads",
        "2",
    ];
    let mut args = vec!["s3://read-decode/train", "--epochs", "2"];
    args.extend_from_slice(&decode);
    let report = read_json(&fx, &args);
    for i in 0..2 {
        let d = &epoch(&report, i)["decode"];
        assert_eq!(d["images"], 40, "{report:#}");
        assert_eq!(d["batches"], 3, "16 + 16 + a short batch of 8: {report:#}");
        assert_eq!(d["skipped"], 0);
        assert!(d["decode_s"].as_f64().unwrap() > 0.0);
    }
    let mut dropped = args.clone();
    dropped.extend_from_slice(&["--drop-last", "--dtype", "u8"]);
    let report = read_json(&fx, &dropped);
    assert_eq!(epoch(&report, 0)["decode"]["images"], 32);
    assert_eq!(epoch(&report, 0)["decode"]["batches"], 2);
    for mode in ["whole", "region-scaled"] {
        let mut other = args.clone();
        other.extend_from_slice(&["--jpeg-decode", mode]);
        let report = read_json(&fx, &other);
        assert_eq!(
            epoch(&report, 0)["decode"]["images"],
            40,
            "{mode}: {report:#}"
        );
    }

    // Shards: the .jpg member is decoded, the .cls member is the label.
    fx.run(&[
        "shard",
        "s3://read-decode/train",
        "s3://read-decode/wds",
        "--samples-per-shard",
        "12",
    ])
    .ok();
    let mut shards = vec!["s3://read-decode/wds"];
    shards.extend_from_slice(&decode);
    let report = read_json(&fx, &shards);
    assert_eq!(report["format"], "shards");
    assert_eq!(epoch(&report, 0)["decode"]["images"], 40, "{report:#}");

    // A corrupt image stops the run naming it, unless skipping was asked for.
    let store = fx.store("s3://read-decode");
    let key = Path::from("train/zz_broken/0.jpg");
    fx.block_on(
        store
            .object_store()
            .put(&key, PutPayload::from_static(b"not a jpeg at all")),
    )
    .unwrap();
    let mut all = vec!["read"];
    all.extend_from_slice(&args);
    let failed = fx.run(&all);
    assert_ne!(failed.code, 0);
    assert!(
        failed.error_line().contains("zz_broken/0.jpg"),
        "{failed:#?}"
    );
    let mut skipping = args.clone();
    skipping.push("--skip-corrupt");
    let report = read_json(&fx, &skipping);
    assert_eq!(epoch(&report, 0)["decode"]["images"], 40);
    assert_eq!(epoch(&report, 0)["decode"]["skipped"], 1);
}

#[test]
fn eval_transform_is_accepted_and_misused_transform_flags_are_named() {
    let fx = Fixture::start();
    fx.generate("s3://read-eval/train", 20, 2, "4KB");
    let decode = ["s3://read-eval/train", "--decode", "--image-size", "32"];
    let with = |extra: &[&'static str]| {
        let mut args = decode.to_vec();
        args.extend_from_slice(extra);
        args
    };
    let report = read_json(&fx, &with(&["--augment", "eval", "--no-shuffle"]));
    assert_eq!(epoch(&report, 0)["decode"]["images"], 20, "{report:#}");
    let args = with(&[
        "--augment",
        "eval",
        "--resize",
        "40",
        "--mean",
        "0.5,0.5,0.5",
    ]);
    let report = read_json(&fx, &args);
    assert_eq!(epoch(&report, 0)["decode"]["images"], 20, "{report:#}");
    let args = with(&["--crop-scale", "0.5,1", "--crop-ratio", "1,1"]);
    let report = read_json(&fx, &args);
    assert_eq!(epoch(&report, 0)["decode"]["images"], 20, "{report:#}");

    let failure = |extra: &[&'static str]| {
        let mut all = vec!["read"];
        all.extend(with(extra));
        let run = fx.run(&all);
        assert_ne!(run.code, 0, "{run:#?}");
        run.stderr
    };
    let cases: [(&[&str], &[&str]); 7] = [
        (&["--augment", "test"], &["--augment", "train", "eval"]),
        (
            &["--augment", "eval", "--resize", "16"],
            &["--resize 16", "--image-size 32"],
        ),
        (&["--resize", "64"], &["--resize applies to --augment eval"]),
        (
            &["--augment", "eval", "--crop-scale", "0.5,1"],
            &["--crop-scale and --crop-ratio apply to --augment train"],
        ),
        (&["--crop-scale", "0.5,0.1"], &["--crop-scale (0.5, 0.1"]),
        (&["--mean", "0.5,0.5"], &["--mean", "give three"]),
        (
            &["--dtype", "u8", "--std", "1,1,1"],
            &["--mean and --std apply to float32 batches"],
        ),
    ];
    for (extra, said) in cases {
        let stderr = failure(extra);
        for words in said {
            assert!(
                stderr.contains(words),
                "{extra:?}: {words:?} not in {stderr}"
            );
        }
    }
}

const CRAFTED_INDEX: &str = "shard-000000.tar.idx";

/// The first shard's index below `uri`.
fn first_index(fx: &Fixture, uri: &str) -> bucketload_format::ShardIndex {
    use bucketload_store::object_store::{ObjectStoreExt, path::Path};
    let store = fx.store(uri);
    let key = Path::from(CRAFTED_INDEX);
    let bytes = fx.block_on(async { store.object_store().get(&key).await?.bytes().await });
    bucketload_format::ShardIndex::parse("x.idx", &bytes.unwrap()).unwrap()
}

/// Writes `index` as the first shard's index below `uri`, with a valid checksum.
fn put_index(fx: &Fixture, uri: &str, index: &bucketload_format::ShardIndex) {
    use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path};
    let store = fx.store(uri);
    let put = PutPayload::from(index.to_bytes("x.idx").unwrap());
    let key = Path::from(CRAFTED_INDEX);
    fx.block_on(store.object_store().put(&key, put)).unwrap();
}

#[test]
fn a_crafted_index_is_an_error_naming_it_never_a_panic() {
    type Craft = Box<dyn Fn(&mut bucketload_format::ShardIndex)>;
    let crafts: Vec<(&str, Craft)> = vec![
        (
            "members out of order",
            Box::new(|i| i.samples[0].members.reverse()),
        ),
        ("samples out of order", Box::new(|i| i.samples.swap(1, 2))),
        (
            "samples overlapping",
            Box::new(|i| i.samples[1] = i.samples[0].clone()),
        ),
        (
            "size past the end",
            Box::new(|i| i.samples[0].members[0].size = i.shard_size),
        ),
        (
            "unaligned data",
            Box::new(|i| i.samples[1].members[0].data_offset += 1),
        ),
        ("larger shard", Box::new(|i| i.shard_size += 512)),
    ];
    let fx = Fixture::start();
    fx.generate("s3://read-crafted/src", 24, 4, "2KB");
    let shard = [
        "shard",
        "s3://read-crafted/src",
        "s3://read-crafted/wds",
        "--samples-per-shard",
        "6",
    ];
    fx.run(&shard).ok();
    let uri = "s3://read-crafted/wds";
    let good = first_index(&fx, uri);
    for (name, craft) in crafts {
        let mut index = good.clone();
        craft(&mut index);
        put_index(&fx, uri, &index);
        let run = fx.run(&["read", uri, "--format", "indexed"]);
        assert_eq!(run.code, 6, "{name}: {run:#?}");
        let line = run.error_line();
        assert!(
            line.contains(&format!("{uri}/{CRAFTED_INDEX}")),
            "{name}: {line}"
        );
        assert!(line.contains("bucketload index"), "{name}: {line}");
    }
    put_index(&fx, uri, &good);
    fx.run(&["read", uri, "--format", "indexed"]).ok();
}

#[test]
fn two_datasets_are_mixed_by_their_weights() {
    let fx = Fixture::start();
    fx.generate("s3://read-mix/large", 60, 2, "2KB");
    fx.generate("s3://read-mix/small", 20, 2, "2KB");
    let datasets = ["s3://read-mix/large", "s3://read-mix/small"];
    let mut args = datasets.to_vec();
    args.extend_from_slice(&["--weights", "0.75,0.25", "--samples-per-epoch", "1000"]);
    let report = read_json(&fx, &args);
    assert_eq!(report["samples_per_epoch"], 1000);
    assert_eq!(report["weights"], serde_json::json!([0.75, 0.25]));
    let first = epoch(&report, 0);
    assert_eq!(first["samples"], 1000, "{report:#}");
    let mixed = first["mixed"].as_array().unwrap();
    let large = mixed[0].as_u64().unwrap();
    assert_eq!(large + mixed[1].as_u64().unwrap(), 1000);
    assert!(
        large.abs_diff(750) <= 10,
        "within 1% of the weights: {report:#}"
    );

    // Without --weights, equal weights over the datasets' sizes added (80 samples: part of a
    // block of 128 draws, 64 of each).
    let report = read_json(&fx, &datasets);
    assert_eq!(report["samples_per_epoch"], 80);
    let mixed = epoch(&report, 0)["mixed"].as_array().unwrap().clone();
    let small = mixed[1].as_u64().unwrap();
    assert_eq!(mixed[0].as_u64().unwrap() + small, 80);
    assert!((16..=64).contains(&small), "{report:#}");
}

#[test]
fn bad_weights_are_refused_with_a_clear_error() {
    let fx = Fixture::start();
    fx.generate("s3://read-mix-bad/a", 4, 1, "1KB");
    fx.generate("s3://read-mix-bad/b", 4, 1, "1KB");
    for (weights, says) in [
        ("-0.5,1", "weights[0] is -0.5"),
        ("0,0", "the weights add up to 0"),
        ("1", "2 datasets but 1 weights"),
        ("1,2,3", "2 datasets but 3 weights"),
    ] {
        let args = [
            "read",
            "s3://read-mix-bad/a",
            "s3://read-mix-bad/b",
            "--weights",
            weights,
        ];
        let run = fx.run(&args);
        assert_eq!(run.code, 6, "invalid input: {run:#?}");
        assert!(
            run.error_line().contains(says),
            "--weights {weights}: {run:#?}"
        );
    }
}
