//! `stats` and `ls --samples` on tar-shard datasets served by the embedded server: described by
//! their manifest (one GET, nothing listed), by their indexes when there is no manifest, and with
//! a shard whose index is missing; and `stats` of a `files` dataset through its manifest.
#![allow(clippy::unwrap_used)]

mod common;

use bucketload_format::{
    ClassCount, DatasetKind, MANIFEST_BIN_PATH, MANIFEST_PATH, MANIFEST_VERSION, Manifest,
    Parameters, ShardEntry, ShardIndexBuilder, TarWriter,
};
use bucketload_store::Store;
use bucketload_store::object_store::{ObjectStoreExt, path::Path};
use common::{Fixture, Run, json, put};
use serde_json::Value;

/// Samples of each shard: (class folder, sample number). 10 samples: `cat` 6, `dog` 4.
const SHARDS: [&[(&str, u32)]; 3] = [
    &[("cat", 0), ("cat", 1), ("cat", 2), ("cat", 3)],
    &[("cat", 4), ("cat", 5), ("dog", 0), ("dog", 1)],
    &[("dog", 2), ("dog", 3)],
];

/// The start of a baseline JPEG of 64x48 pixels (enough for its frame header), padded to
/// `100 + n` bytes so samples differ in size.
fn jpeg(n: u32) -> Vec<u8> {
    let mut out = vec![
        0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x11, 0x08, 0x00, 48, 0x00, 64, 0x03, 0x01, 0x22, 0x00, 0x02,
        0x11, 0x01, 0x03, 0x11, 0x01, 0xFF, 0xD9,
    ];
    out.resize(100 + n as usize, 0);
    out
}

/// One built shard: its name, bytes, index bytes and manifest entry.
struct Built {
    name: String,
    tar: Vec<u8>,
    idx: Vec<u8>,
    entry: ShardEntry,
}

/// Writes shard `i` with the format crate: `<class>/<nnnnnn>.jpg` then `.cls` per sample.
fn build_shard(i: usize, samples: &[(&str, u32)]) -> Built {
    let name = format!("shard-{i:06}.tar");
    let (mut tar, mut writer, mut index) =
        (Vec::new(), TarWriter::new(&name), ShardIndexBuilder::new());
    for (class, n) in samples {
        let label: &[u8] = if *class == "cat" { b"0" } else { b"1" };
        for (ext, data) in [("jpg", jpeg(*n)), ("cls", label.to_vec())] {
            let member = format!("{class}/{n:06}.{ext}");
            let at = writer.append(&mut tar, &member, &data).unwrap();
            index.add(&member, at, &data);
        }
    }
    let summary = writer.finish(&mut tar).unwrap();
    let idx_name = format!("{name}.idx");
    let idx = index.finish(&summary).to_bytes(&idx_name).unwrap();
    let entry = ShardEntry::from_summary(&name, idx_name, samples.len() as u64, &summary);
    Built {
        name,
        tar,
        idx,
        entry,
    }
}

fn build_all() -> Vec<Built> {
    SHARDS
        .iter()
        .enumerate()
        .map(|(i, s)| build_shard(i, s))
        .collect()
}

fn manifest(shards: &[Built]) -> Manifest {
    let entries: Vec<ShardEntry> = shards.iter().map(|b| b.entry.clone()).collect();
    let class = |name: &str, count| ClassCount {
        name: name.to_owned(),
        count,
    };
    Manifest {
        format_version: MANIFEST_VERSION,
        kind: DatasetKind::Shards,
        parameters: Parameters {
            source: "s3://raw/train".to_owned(),
            shard_size: Some(2048),
            seed: Some(7),
            label_policy: "folder".to_owned(),
            tool_version: "0.1.0".to_owned(),
            created: "2026-11-22T07:00:00Z".to_owned(),
            ..Parameters::default()
        },
        samples: entries.iter().map(|e| e.samples).sum(),
        bytes: entries.iter().map(|e| e.bytes).sum(),
        classes: vec![class("cat", 6), class("dog", 4)],
        shards: entries,
        files: Vec::new(),
    }
}

/// Puts the shards (and their indexes unless `missing_index` names one) below `uri`.
fn upload(fx: &Fixture, uri: &str, shards: &[Built], missing_index: Option<usize>) -> Store {
    let store = fx.store(uri);
    for (i, b) in shards.iter().enumerate() {
        put(fx, &store, &b.name, &b.tar);
        if missing_index != Some(i) {
            put(fx, &store, &format!("{}.idx", b.name), &b.idx);
        }
    }
    store
}

/// Runs the binary and returns the run with the requests the server received, by operation.
fn run_counted(fx: &Fixture, args: &[&str]) -> (Run, Vec<(&'static str, u64)>) {
    let before: Vec<(&'static str, u64)> = fx.server().counters().iter().collect();
    let run = fx.run(args);
    let after = fx.server().counters();
    let mut requests: Vec<(&'static str, u64)> = after
        .iter()
        .map(|(op, n)| {
            let was = before.iter().find(|(o, _)| *o == op).map_or(0, |(_, n)| *n);
            (op, n - was)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    requests.sort();
    (run, requests)
}

fn total_bytes(shards: &[Built]) -> u64 {
    shards.iter().map(|b| b.tar.len() as u64).sum()
}

#[test]
fn stats_of_a_shard_dataset_reads_only_its_manifest_and_first_index() {
    let fx = Fixture::start();
    let uri = "s3://shard-stats/manifest";
    let shards = build_all();
    let store = upload(&fx, uri, &shards, None);
    let m = manifest(&shards);
    put(&fx, &store, MANIFEST_BIN_PATH, &m.to_binary("m").unwrap());

    let (run, requests) = run_counted(&fx, &["stats", uri, "--json"]);
    let v = json(&run.ok());
    // The manifest, the first shard's index, and the headers of its 4 images: nothing listed.
    assert_eq!(requests, [("GetObject", 6)], "{v}");
    assert_eq!(
        (v["kind"].as_str(), v["from"].as_str()),
        (Some("shards"), Some("manifest"))
    );
    assert_eq!(
        (v["objects"].as_u64(), v["samples"].as_u64()),
        (Some(3), Some(10))
    );
    assert_eq!(v["bytes"], total_bytes(&shards));
    assert_eq!(v["classes"], serde_json::json!({"cat": 6, "dog": 4}));
    assert_eq!(v["classes_from"], "manifest");
    let s = &v["shards"];
    assert_eq!(
        (s["count"].as_u64(), s["indexes_read"].as_u64()),
        (Some(3), Some(0))
    );
    let per = &s["samples_per_shard"];
    assert_eq!(
        (per["p0"].as_u64(), per["p50"].as_u64(), per["max"].as_u64()),
        (Some(2), Some(4), Some(4))
    );
    let sizes: Vec<u64> = shards.iter().map(|b| b.tar.len() as u64).collect();
    assert_eq!(s["bytes_per_shard"]["p0"], *sizes.iter().min().unwrap());
    assert_eq!(s["bytes_per_shard"]["max"], *sizes.iter().max().unwrap());
    assert_eq!(v["parameters"]["seed"], 7);
    assert_eq!(v["parameters"]["source"], "s3://raw/train");
    assert_eq!(v["images"]["sampled"], 4);
    assert_eq!(v["images"]["dimensions"], serde_json::json!({"64x48": 4}));
    let c = &v["cost"];
    assert_eq!(
        (c["list_requests"].as_u64(), c["get_requests"].as_u64()),
        (Some(0), Some(4))
    );
    assert_eq!(c["random_access"]["get_requests"], 14);

    let text = fx.run(&["stats", uri]).ok();
    for line in [
        "kind      tar shards (described by _bucketload/manifest.bin)",
        "samples   10",
        "  samples per shard  min 2  p50 4  max 4",
        "classes   2 (samples per class: min 4, max 6; from the manifest)",
        "made by   bucketload 0.1.0 at 2026-11-22T07:00:00Z from s3://raw/train",
        "  labels folder, shard size 2.0 KB, shuffled with seed 7",
        "images    4 sampled: 64x48 (4)",
    ] {
        assert!(
            text.stdout.lines().any(|l| l == line),
            "{line:?} in {}",
            text.stdout
        );
    }
    assert!(text.stdout.contains("shards    3 ("), "{}", text.stdout);
    assert!(
        text.stdout
            .contains("one pass  0 LIST + 4 GET requests (one streaming GET per shard)"),
        "{}",
        text.stdout
    );
}

#[test]
fn stats_without_manifest_reads_every_index_and_names_shards_without_one() {
    let fx = Fixture::start();
    let uri = "s3://shard-stats/indexes";
    let shards = build_all();
    upload(&fx, uri, &shards, None);

    let (run, requests) = run_counted(&fx, &["stats", uri, "--json", "--sample", "3"]);
    let v = json(&run.ok());
    // Both manifests are looked for (format 2, then 1), one listing, 3 indexes, 3 image
    // headers.
    assert_eq!(requests, [("GetObject", 8), ("ListObjectsV2", 1)], "{v}");
    assert_eq!(
        (v["kind"].as_str(), v["from"].as_str()),
        (Some("shards"), Some("indexes"))
    );
    assert_eq!(
        (v["objects"].as_u64(), v["samples"].as_u64()),
        (Some(3), Some(10))
    );
    assert_eq!(v["bytes"], total_bytes(&shards));
    assert_eq!(v["classes"], serde_json::json!({"cat": 6, "dog": 4}));
    assert_eq!(v["classes_from"], "key-folder");
    let s = &v["shards"];
    assert_eq!(s["indexes_read"], 3);
    assert_eq!(s["unindexed"], serde_json::json!([]));
    assert_eq!(s["extensions"], serde_json::json!({"cls": 10, "jpg": 10}));
    let per = &s["samples_per_shard"];
    assert_eq!(
        (per["p0"].as_u64(), per["p50"].as_u64(), per["max"].as_u64()),
        (Some(2), Some(4), Some(4))
    );
    // jpg of 100 + n bytes and a 1-byte cls: n runs 0..=5 for cat, 0..=3 for dog.
    let sb = &s["sample_bytes"];
    assert_eq!(
        (sb["p0"].as_u64(), sb["max"].as_u64()),
        (Some(101), Some(106))
    );
    assert_eq!(v["parameters"], Value::Null);
    assert_eq!(v["images"]["sampled"], 3);
    let c = &v["cost"];
    assert_eq!(
        (c["list_requests"].as_u64(), c["get_requests"].as_u64()),
        (Some(1), Some(3))
    );
    assert_eq!(c["random_access"]["get_requests"], 13);

    // The second shard loses its index: its samples are not counted, and it is named.
    let store = fx.store(uri);
    fx.block_on(
        store
            .object_store()
            .delete(&Path::from("shard-000001.tar.idx")),
    )
    .unwrap();
    let v = json(&fx.run(&["stats", uri, "--json"]).ok());
    assert_eq!(
        (v["objects"].as_u64(), v["samples"].as_u64()),
        (Some(3), Some(6))
    );
    assert_eq!(v["shards"]["indexes_read"], 2);
    let missing = format!("{uri}/shard-000001.tar");
    assert_eq!(v["shards"]["unindexed"], serde_json::json!([missing]));
    assert_eq!(v["classes"], serde_json::json!({"cat": 4, "dog": 2}));
    let text = fx.run(&["stats", uri]).ok();
    let want = format!(
        "unindexed 1 of 3 shards have no index and their samples are not counted; \
         run `bucketload index {uri}`"
    );
    assert!(text.stdout.lines().any(|l| l == want), "{}", text.stdout);
    assert!(
        text.stdout.lines().any(|l| l == format!("  {missing}")),
        "{}",
        text.stdout
    );
}

#[test]
fn ls_lists_objects_by_default_and_samples_on_request() {
    let fx = Fixture::start();
    let uri = "s3://shard-ls/train";
    let shards = build_all();
    upload(&fx, uri, &shards, None);

    let plain = fx.run(&["ls", uri]).ok();
    assert_eq!(plain.stdout.lines().count(), 6, "{}", plain.stdout);
    assert!(
        plain.stdout.contains(" shard-000000.tar.idx\n"),
        "{}",
        plain.stdout
    );

    let listed = fx.run(&["ls", uri, "--samples"]).ok();
    let lines: Vec<&str> = listed.stdout.lines().collect();
    assert_eq!(lines.len(), 10, "{}", listed.stdout);
    assert_eq!(lines[0], "shard-000000.tar  cat/000000  jpg,cls  101");
    assert_eq!(lines[5], "shard-000001.tar  cat/000005  jpg,cls  106");
    assert_eq!(lines[9], "shard-000002.tar  dog/000003  jpg,cls  104");

    let summary = fx.run(&["ls", uri, "--samples", "--summarize"]).ok();
    let tail: Vec<&str> = summary.stdout.lines().skip(10).collect();
    let size = total_bytes(&shards);
    let want = [
        "".to_owned(),
        "shard-000000.tar  4 samples".to_owned(),
        "shard-000001.tar  4 samples".to_owned(),
        "shard-000002.tar  2 samples".to_owned(),
        "".to_owned(),
        "Total Shards: 3".to_owned(),
        "Total Samples: 10 (per shard: min 2, max 4)".to_owned(),
        format!(
            "   Total Size: {:.1} KB ({size} bytes)",
            size as f64 / 1000.0
        ),
    ];
    assert_eq!(tail, want, "{}", summary.stdout);

    let one = fx
        .run(&[
            "ls",
            &format!("{uri}/shard-000002.tar"),
            "--samples",
            "--json",
        ])
        .ok();
    let rows: Vec<Value> = one
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{}", one.stdout);
    let first = &rows[0];
    assert_eq!(first["shard"], "shard-000002.tar");
    assert_eq!(first["key"], "dog/000002");
    assert_eq!(first["extensions"], serde_json::json!(["jpg", "cls"]));
    assert_eq!(first["bytes"], 103);
    // The sample's range: from its first header to the end of its last member's data.
    let (offset, length) = (
        first["offset"].as_u64().unwrap(),
        first["length"].as_u64().unwrap(),
    );
    assert_eq!((offset, length), (0, 512 + 102 + 410 + 512 + 1));
    let tar = &shards[2].tar;
    assert_eq!(&tar[512..515], &jpeg(2)[..3]);
}

#[test]
fn ls_samples_lists_what_it_can_and_fails_on_a_shard_without_index() {
    let fx = Fixture::start();
    let uri = "s3://shard-ls/partial";
    let shards = build_all();
    upload(&fx, uri, &shards, Some(1));

    let run = fx.run(&["ls", uri, "--samples", "--summarize", "--json"]);
    assert_eq!(run.code, 6, "{run:#?}");
    let lines: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 7, "{run:#?}");
    let summary = &lines[6]["summary"];
    assert_eq!(
        (summary["shards"].as_u64(), summary["samples"].as_u64()),
        (Some(3), Some(6))
    );
    let missing = format!("{uri}/shard-000001.tar");
    assert_eq!(summary["unindexed"], serde_json::json!([missing]));
    assert_eq!(
        summary["samples_per_shard"],
        serde_json::json!({"shard-000000.tar": 4, "shard-000002.tar": 2})
    );
    let error = run.error_line();
    assert!(error.contains("1 of 3 shards have no index"), "{error}");
    assert!(error.contains(&missing), "{error}");
    assert!(
        error.contains(&format!("run `bucketload index {uri}`")),
        "{error}"
    );

    let none = fx.run(&["ls", "s3://shard-ls/partial/cat", "--samples"]);
    assert_eq!(none.code, 6, "{none:#?}");
    assert!(
        none.error_line().contains("no *.tar shards below"),
        "{none:#?}"
    );
}

#[test]
fn stats_of_a_files_dataset_with_a_manifest_does_not_list_it() {
    let fx = Fixture::start();
    let uri = "s3://files-stats/train";
    fx.generate(uri, 12, 3, "3KB");
    let listed = json(&fx.run(&["stats", uri, "--json", "--sample", "0"]).ok());
    fx.run(&["manifest", uri]).ok();

    let (run, requests) = run_counted(&fx, &["stats", uri, "--json", "--sample", "2"]);
    let v = json(&run.ok());
    // The manifest and two image headers.
    assert_eq!(requests, [("GetObject", 3)], "{v}");
    assert_eq!(
        (v["kind"].as_str(), v["from"].as_str()),
        (Some("files"), Some("manifest"))
    );
    assert_eq!(listed["from"], "listing");
    for field in ["objects", "samples", "bytes", "classes", "sizes"] {
        assert_eq!(v[field], listed[field], "{field}: {v} vs {listed}");
    }
    assert_eq!(v["samples"], 12);
    assert_eq!(v["classes_from"], "manifest");
    assert_eq!(listed["classes_from"], "first-folder");
    assert_eq!(v["images"]["sampled"], 2);
    assert_eq!(v["cost"]["get_requests"], 13);
    assert_eq!(v["cost"]["list_requests"], 0);
    assert_eq!(v["cost"]["random_access"], Value::Null);
    assert_eq!(v["parameters"]["label_policy"], "folder");
}

/// A dataset with only a format-1 manifest: one more GET (the format-2 manifest, absent), the
/// same numbers.
#[test]
fn stats_read_a_json_manifest_when_there_is_no_binary_one() {
    let fx = Fixture::start();
    let uri = "s3://shard-stats/json-manifest";
    let shards = build_all();
    let store = upload(&fx, uri, &shards, None);
    put(&fx, &store, MANIFEST_PATH, &manifest(&shards).to_json());
    let (run, requests) = run_counted(&fx, &["stats", uri, "--json"]);
    let v = json(&run.ok());
    assert_eq!(requests, [("GetObject", 7)], "{v}");
    assert_eq!(
        (v["from"].as_str(), v["samples"].as_u64()),
        (Some("manifest"), Some(10))
    );
    assert_eq!(v["manifest"], MANIFEST_PATH);
    let text = fx.run(&["stats", uri]).ok();
    let line = "kind      tar shards (described by _bucketload/manifest.json)";
    assert!(text.stdout.lines().any(|l| l == line), "{}", text.stdout);
}

#[test]
fn a_dataset_sharded_by_bucketload_reads_the_same_from_its_manifest_and_its_indexes() {
    let fx = Fixture::start();
    let (src, dst) = ("s3://sharded-src/train", "s3://sharded-dst/train");
    fx.generate(src, 24, 3, "2KB");
    fx.run(&["shard", src, dst, "--samples-per-shard", "10"])
        .ok();

    let from_manifest = json(&fx.run(&["stats", dst, "--json"]).ok());
    assert_eq!(from_manifest["from"], "manifest");
    assert_eq!(from_manifest["parameters"]["samples_per_shard"], 10);
    let store = fx.store(dst);
    fx.block_on(store.object_store().delete(&Path::from(MANIFEST_BIN_PATH)))
        .unwrap();
    let from_indexes = json(&fx.run(&["stats", dst, "--json"]).ok());
    assert_eq!(from_indexes["from"], "indexes");
    for v in [&from_manifest, &from_indexes] {
        assert_eq!(
            (v["objects"].as_u64(), v["samples"].as_u64()),
            (Some(3), Some(24)),
            "{v}"
        );
        let classes = serde_json::json!({"class_000": 8, "class_001": 8, "class_002": 8});
        assert_eq!(v["classes"], classes, "{v}");
        let per = &v["shards"]["samples_per_shard"];
        assert_eq!(
            (per["p0"].as_u64(), per["max"].as_u64()),
            (Some(4), Some(10)),
            "{v}"
        );
        assert!(v["images"]["sampled"].as_u64().unwrap() > 0, "{v}");
        assert_eq!(
            v["images"]["dimensions"].as_object().unwrap().len(),
            1,
            "{v}"
        );
    }
    assert_eq!(from_manifest["bytes"], from_indexes["bytes"]);
    assert_eq!(from_manifest["sizes"], from_indexes["sizes"]);
    assert_eq!(
        from_indexes["shards"]["extensions"],
        serde_json::json!({"cls": 24, "jpg": 24})
    );

    let listed = fx.run(&["ls", dst, "--samples"]).ok();
    assert_eq!(listed.stdout.lines().count(), 24, "{}", listed.stdout);
    assert!(
        listed
            .stdout
            .lines()
            .all(|l| l.contains("  jpg,cls  ") || l.contains("  cls,jpg  ")),
        "{}",
        listed.stdout
    );
}
