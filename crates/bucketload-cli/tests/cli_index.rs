//! `index` on shards written by GNU tar and Python's `tarfile`: every indexed member is checked
//! by a ranged GET; existing indexes are skipped unless `--force`; corrupt shards fail alone.
//! `manifest` on a generated one-object-per-sample dataset.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path as FsPath;
use std::process::Command;

use bucketload_format::{DatasetKind, MANIFEST_BIN_PATH, MANIFEST_PATH, Manifest, ShardIndex};
use bucketload_server::{DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY, FaultKind};
use bucketload_store::object_store::{ObjectStoreExt, path::Path};
use bucketload_store::{Store, StoreConfig};
use common::{Fixture, put, try_get};

/// A directory name that makes member names longer than the 100 bytes of a ustar name field.
const LONG_DIR: &str = "a-folder-name-long-enough-that-the-member-path-exceeds-the-hundred-bytes-of-a-ustar-name-field";

fn config(fx: &Fixture) -> StoreConfig {
    bucketload_test_support::s3_config(&fx.endpoint(), DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY)
}

fn open(fx: &Fixture, uri: &str) -> Store {
    let store = Store::open(uri, &config(fx)).unwrap();
    fx.block_on(store.create_bucket()).unwrap();
    store
}

/// Member bytes by member name.
type Members = BTreeMap<String, Vec<u8>>;

/// WebDataset members (`000001.jpg` + `000001.cls`, ...) under `dir`, by member name.
fn write_members(dir: &FsPath, long_names: bool) -> Members {
    let mut members = BTreeMap::new();
    for i in 1..=4u32 {
        let prefix = if long_names && i == 3 {
            format!("{LONG_DIR}/")
        } else {
            String::new()
        };
        let jpg: Vec<u8> = (0..(i as usize * 1777))
            .map(|b| (b as u32 * 7 + i) as u8)
            .collect();
        members.insert(format!("{prefix}{i:06}.jpg"), jpg);
        members.insert(
            format!("{prefix}{i:06}.cls"),
            format!("{}", i % 3).into_bytes(),
        );
    }
    for (name, data) in &members {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, data).unwrap();
    }
    members
}

fn gnu_tar(dir: &FsPath, out: &FsPath, format: &str, names: &[&String]) {
    let status = Command::new("tar")
        .arg(format!("--format={format}"))
        .arg("-cf")
        .arg(out)
        .arg("-C")
        .arg(dir)
        .args(names)
        .status()
        .unwrap();
    assert!(status.success(), "tar --format={format} failed");
}

/// Writes three shards (GNU, PAX, Python) of the same members; returns them by shard name.
fn make_shards(fx: &Fixture) -> (Members, Vec<(String, Vec<u8>)>) {
    let dir = fx.work_path("members");
    let members = write_members(&dir, true);
    assert!(members.keys().any(|name| name.len() > 100));
    let names: Vec<&String> = members.keys().collect();
    let (gnu, pax, py) = (
        fx.work_path("gnu.tar"),
        fx.work_path("pax.tar"),
        fx.work_path("py.tar"),
    );
    gnu_tar(&dir, &gnu, "gnu", &names);
    gnu_tar(&dir, &pax, "pax", &names);
    common::python_tar(&dir, &py, &names);
    let shards = [("gnu.tar", gnu), ("pax.tar", pax), ("py.tar", py)]
        .into_iter()
        .map(|(name, path)| (name.to_string(), std::fs::read(path).unwrap()))
        .collect::<Vec<_>>();
    // GNU format stores the long name in a `././@LongLink` entry, PAX in a `path` record.
    let has = |data: &[u8], needle: &[u8]| data.windows(needle.len()).any(|w| w == needle);
    assert!(has(&shards[0].1, b"././@LongLink"), "no GNU long name");
    assert!(has(&shards[1].1, b" path="), "no PAX path record");
    (members, shards)
}

/// Parses `<shard>.idx` and checks every member by a ranged GET of its (offset, size).
fn check_index(fx: &Fixture, store: &Store, shard: &str, data: &[u8], want: &Members) {
    let bytes = try_get(fx, store, &format!("{shard}.idx")).expect("the index exists");
    let index = ShardIndex::parse(shard, &bytes).unwrap();
    assert_eq!(index.shard_size, data.len() as u64, "{shard}");
    assert_eq!(index.shard_crc32c, crc32c::crc32c(data), "{shard}");
    let os = store.object_store();
    let mut seen = BTreeMap::new();
    for sample in &index.samples {
        assert_eq!(sample.members.len(), 2, "{shard}: {sample:?}");
        for m in &sample.members {
            let range = m.data_offset..m.data_offset + m.size;
            let got = fx
                .block_on(os.get_range(&Path::from(shard), range))
                .unwrap();
            assert_eq!(got.len() as u64, m.size, "{shard} {}.{}", sample.key, m.ext);
            assert_eq!(
                crc32c::crc32c(&got),
                m.crc32c,
                "{shard} {}.{}",
                sample.key,
                m.ext
            );
            seen.insert(format!("{}.{}", sample.key, m.ext), got.to_vec());
        }
    }
    assert!(
        seen == *want,
        "{shard}: indexed members differ from the tar's"
    );
}

#[test]
fn foreign_shards_are_indexed_and_every_member_is_where_the_index_says() {
    let fx = Fixture::start();
    let store = open(&fx, "s3://index-tests/ok");
    let (members, shards) = make_shards(&fx);
    for (name, data) in &shards {
        put(&fx, &store, name, data);
    }
    let run = fx.run(&["index", "s3://index-tests/ok"]).ok();
    assert!(
        run.stdout.contains("indexed 3 shards, 12 samples, "),
        "{run:#?}"
    );
    for (name, data) in &shards {
        check_index(&fx, &store, name, data, &members);
    }

    // Indexed shards are skipped: not one GET.
    let gets = fx.server().counters().get("GetObject");
    let run = fx.run(&["index", "s3://index-tests/ok"]).ok();
    assert!(run.stdout.contains("indexed 0 shards"), "{run:#?}");
    assert!(run.stdout.contains("3 already indexed"), "{run:#?}");
    assert_eq!(fx.server().counters().get("GetObject"), gets);

    // --force reads them again and rewrites the indexes.
    put(&fx, &store, "py.tar.idx", b"stale");
    let puts = fx.server().counters().get("PutObject");
    let run = fx.run(&["index", "--force", "s3://index-tests/ok"]).ok();
    assert!(run.stdout.contains("indexed 3 shards"), "{run:#?}");
    assert!(fx.server().counters().get("GetObject") > gets);
    assert_eq!(fx.server().counters().get("PutObject"), puts + 3);
    for (name, data) in &shards {
        check_index(&fx, &store, name, data, &members);
    }

    // One shard by its URI.
    let run = fx
        .run(&["index", "--force", "s3://index-tests/ok/gnu.tar"])
        .ok();
    assert!(
        run.stdout.contains("indexed 1 shards, 4 samples"),
        "{run:#?}"
    );
}

#[test]
fn corrupt_shards_get_no_index_and_the_good_one_still_does() {
    let fx = Fixture::start();
    let store = open(&fx, "s3://index-tests/mixed");
    let (members, shards) = make_shards(&fx);
    let good = &shards[0].1;
    put(&fx, &store, "a-good.tar", good);
    put(&fx, &store, "b-truncated.tar", &good[..5000]);
    let garbage: Vec<u8> = (0..9000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    put(&fx, &store, "c-garbage.tar", &garbage);

    let run = fx.run(&["index", "s3://index-tests/mixed"]);
    assert_eq!(run.code, 6, "{run:#?}");
    assert!(
        run.stderr
            .contains("s3://index-tests/mixed/b-truncated.tar at byte "),
        "{run:#?}"
    );
    assert!(
        run.stderr
            .contains("s3://index-tests/mixed/c-garbage.tar at byte "),
        "{run:#?}"
    );
    assert!(run.stderr.contains("2 of 3 shards failed"), "{run:#?}");
    assert!(!run.stderr.contains("panicked"), "{run:#?}");
    assert!(run.stdout.contains("indexed 1 shards"), "{run:#?}");
    assert!(try_get(&fx, &store, "b-truncated.tar.idx").is_none());
    assert!(try_get(&fx, &store, "c-garbage.tar.idx").is_none());
    check_index(&fx, &store, "a-good.tar", good, &members);
}

#[test]
fn a_prefix_without_shards_is_an_error() {
    let fx = Fixture::start();
    let store = open(&fx, "s3://index-tests/empty");
    put(&fx, &store, "readme.txt", b"no shards here");
    let run = fx.run(&["index", "s3://index-tests/empty"]);
    assert_eq!(run.code, 6, "{run:#?}");
    assert!(run.error_line().contains("no *.tar objects"), "{run:#?}");
}

#[test]
fn manifest_lists_every_file_with_its_checksum_and_is_written_last() {
    let fx = Fixture::start();
    let uri = "s3://manifest-tests/train";
    fx.generate(uri, 24, 3, "3KB");
    let store = open(&fx, uri);

    // A failed read leaves no manifest behind.
    fx.server()
        .faults()
        .fail_next("GetObject", 1000, FaultKind::Status(500));
    let run = fx.run(&["--max-retries", "0", "manifest", uri]);
    assert_ne!(run.code, 0, "{run:#?}");
    fx.server().faults().clear();
    assert!(
        try_get(&fx, &store, MANIFEST_BIN_PATH).is_none(),
        "{run:#?}"
    );
    assert!(try_get(&fx, &store, MANIFEST_PATH).is_none(), "{run:#?}");

    // Format 1 on request, then format 2 (the default) in its place.
    fx.run(&["manifest", uri, "--manifest-format", "1"]).ok();
    let json = try_get(&fx, &store, MANIFEST_PATH).expect("a JSON manifest");
    assert_eq!(
        Manifest::from_json(MANIFEST_PATH, &json)
            .unwrap()
            .files
            .len(),
        24
    );
    assert!(try_get(&fx, &store, MANIFEST_BIN_PATH).is_none());
    let run = fx.run(&["manifest", uri]).ok();
    assert!(
        try_get(&fx, &store, MANIFEST_PATH).is_none(),
        "the JSON one is deleted"
    );
    assert!(run.stdout.contains("(24 files, "), "{run:#?}");
    assert!(run.stdout.contains(", 3 classes)"), "{run:#?}");
    // Run twice: the manifest itself is never part of the dataset.
    fx.run(&["manifest", uri]).ok();
    let bin = try_get(&fx, &store, MANIFEST_BIN_PATH).expect("the manifest exists");
    let manifest = Manifest::from_json(MANIFEST_BIN_PATH, &bin).unwrap();
    assert_eq!(manifest.format_version, 2);
    assert_eq!(manifest.kind, DatasetKind::Files);
    assert_eq!(manifest.files.len(), 24);
    assert_eq!(manifest.parameters.label_policy, "folder");
    let classes: Vec<_> = manifest.classes.iter().map(|c| c.count).collect();
    assert_eq!(classes.iter().sum::<u64>(), 24, "{classes:?}");
    assert_eq!(classes.len(), 3);
    let os = store.object_store();
    for file in &manifest.files {
        let key = Path::from(file.key.as_str());
        let head = fx.block_on(os.head(&key)).unwrap();
        let data = try_get(&fx, &store, &file.key).unwrap();
        assert_eq!(file.size, data.len() as u64, "{}", file.key);
        let crc = format!("{:08x}", crc32c::crc32c(&data));
        assert_eq!(file.crc32c.as_deref(), Some(crc.as_str()), "{}", file.key);
        let etag = head.e_tag.map(|e| e.trim_matches('"').to_owned());
        assert_eq!(file.etag, etag, "{}", file.key);
    }
}
