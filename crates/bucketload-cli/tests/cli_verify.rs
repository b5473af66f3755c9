//! `verify` against a `files` manifest (written by `manifest` on a `gen` dataset) and against the
//! indexes of tar shards written by GNU tar and Python's `tarfile`: clean datasets pass reading
//! every object once; changed, deleted, corrupt and unindexed objects are each named, and only
//! they.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use bucketload_format::{
    DatasetKind, MANIFEST_BIN_PATH, MANIFEST_PATH, MANIFEST_VERSION, Manifest, Parameters,
    ShardEntry, ShardIndex,
};
use bucketload_store::object_store::{ObjectStoreExt, path::Path};
use common::{Fixture, Run, get, put};

/// Runs `verify` and returns the run with the number of GETs the server received.
fn verify(fx: &Fixture, uri: &str) -> (Run, u64) {
    let gets = fx.server().counters().get("GetObject");
    let run = fx.run(&["verify", uri]);
    (run, fx.server().counters().get("GetObject") - gets)
}

/// Lines of stdout naming `uri` exactly (followed by `:`).
fn lines_naming<'a>(run: &'a Run, uri: &str) -> Vec<&'a str> {
    let prefix = format!("{uri}: ");
    run.stdout
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .collect()
}

#[test]
fn a_files_dataset_verifies_clean_and_changed_or_deleted_objects_are_named() {
    let fx = Fixture::start();
    let uri = "s3://verify-tests/train";
    fx.generate(uri, 24, 3, "3KB");
    fx.run(&["manifest", uri]).ok();
    let store = fx.store(uri);
    let manifest =
        Manifest::from_json(MANIFEST_BIN_PATH, &get(&fx, &store, MANIFEST_BIN_PATH)).unwrap();
    let bytes: u64 = manifest.files.iter().map(|f| f.size).sum();

    let (run, gets) = verify(&fx, uri);
    let run = run.ok();
    let want = format!("verified 24 objects ({bytes} bytes) in ");
    assert!(run.stdout.contains(&want), "{run:#?}");
    assert!(run.stdout.trim_end().ends_with(": 0 problems"), "{run:#?}");
    // The manifest, then every object once.
    assert_eq!(gets, 25, "{run:#?}");

    let (changed, deleted) = (&manifest.files[0], &manifest.files[5]);
    let mut other = get(&fx, &store, &changed.key);
    other.iter_mut().for_each(|b| *b = b.wrapping_add(1));
    put(&fx, &store, &changed.key, &other);
    fx.block_on(
        store
            .object_store()
            .delete(&Path::from(deleted.key.as_str())),
    )
    .unwrap();
    put(&fx, &store, "extra.txt", b"not described");

    let (run, _) = verify(&fx, uri);
    assert_eq!(run.code, 6, "{run:#?}");
    let changed_lines = lines_naming(&run, &format!("{uri}/{}", changed.key));
    assert_eq!(changed_lines.len(), 2, "{run:#?}");
    assert!(changed_lines[0].contains(": wrong ETag: "), "{run:#?}");
    assert!(
        changed_lines[1].contains(": checksum mismatch: "),
        "{run:#?}"
    );
    let deleted_lines = lines_naming(&run, &format!("{uri}/{}", deleted.key));
    assert!(
        deleted_lines == [format!("{uri}/{}: missing", deleted.key)],
        "{run:#?}"
    );
    let warning = format!("warning: {uri}/extra.txt: not in the manifest");
    assert!(run.stdout.lines().any(|l| l == warning), "{run:#?}");
    for file in manifest
        .files
        .iter()
        .filter(|f| f.key != changed.key && f.key != deleted.key)
    {
        assert!(!run.stdout.contains(&file.key), "{}: {run:#?}", file.key);
    }
    assert!(run.stdout.contains("verified 23 objects ("), "{run:#?}");
    assert!(run.stdout.trim_end().ends_with(": 3 problems"), "{run:#?}");
    assert!(run.error_line().contains("3 problems"), "{run:#?}");
}

/// Two shards of the same WebDataset members: one by GNU tar, one by Python's `tarfile`.
fn make_shards(fx: &Fixture) -> Vec<(&'static str, Vec<u8>)> {
    let dir = fx.work_path("members");
    std::fs::create_dir_all(&dir).unwrap();
    let mut names = Vec::new();
    for i in 1..=4u32 {
        let jpg: Vec<u8> = (0..(i as usize * 1777))
            .map(|b| (b as u32 * 7 + i) as u8)
            .collect();
        for (ext, data) in [("jpg", jpg), ("cls", format!("{}", i % 3).into_bytes())] {
            let name = format!("{i:06}.{ext}");
            std::fs::write(dir.join(&name), data).unwrap();
            names.push(name);
        }
    }
    let (gnu, py) = (fx.work_path("gnu.tar"), fx.work_path("py.tar"));
    let status = Command::new("tar")
        .args(["--format=gnu", "-cf"])
        .arg(&gnu)
        .arg("-C")
        .arg(&dir)
        .args(&names)
        .status()
        .unwrap();
    assert!(status.success());
    common::python_tar(&dir, &py, &names);
    vec![
        ("gnu.tar", std::fs::read(gnu).unwrap()),
        ("py.tar", std::fs::read(py).unwrap()),
    ]
}

#[test]
fn indexed_shards_verify_clean_and_a_flipped_byte_names_the_shard_and_member() {
    let fx = Fixture::start();
    let uri = "s3://verify-tests/shards";
    let store = fx.store(uri);
    let shards = make_shards(&fx);
    for (name, data) in &shards {
        put(&fx, &store, name, data);
    }
    fx.run(&["index", uri]).ok();

    let (run, gets) = verify(&fx, uri);
    let run = run.ok();
    let bytes: usize = shards.iter().map(|(_, d)| d.len()).sum();
    let want = format!("verified 2 objects ({bytes} bytes) in ");
    assert!(run.stdout.contains(&want), "{run:#?}");
    assert!(run.stdout.trim_end().ends_with(": 0 problems"), "{run:#?}");
    // The (absent) manifests of both formats and run record, then each index and each shard
    // once.
    assert_eq!(gets, 7, "{run:#?}");

    // Flip one byte inside the data of 000002.jpg in the GNU shard.
    let (name, data) = &shards[0];
    let index = ShardIndex::parse("gnu.tar.idx", &get(&fx, &store, "gnu.tar.idx")).unwrap();
    let member = index.samples[1]
        .members
        .iter()
        .find(|m| m.ext == "jpg")
        .unwrap();
    assert_eq!(index.samples[1].key, "000002");
    let mut flipped = data.clone();
    flipped[member.data_offset as usize + 100] ^= 0x40;
    put(&fx, &store, name, &flipped);
    // A shard without an index, and a truncated one under a valid index.
    put(&fx, &store, "orphan.tar", data);
    put(&fx, &store, "short.tar", &data[..5000]);
    put(
        &fx,
        &store,
        "short.tar.idx",
        &get(&fx, &store, "gnu.tar.idx"),
    );

    let (run, _) = verify(&fx, uri);
    assert_eq!(run.code, 6, "{run:#?}");
    let gnu = lines_naming(&run, &format!("{uri}/gnu.tar"));
    assert_eq!(gnu.len(), 2, "{run:#?}");
    assert!(gnu[0].contains(": checksum mismatch: "), "{run:#?}");
    let member_line = format!(
        ": index mismatch: member 000002.jpg at byte {} ",
        member.data_offset
    );
    assert!(gnu[1].contains(&member_line), "{run:#?}");
    let orphan = lines_naming(&run, &format!("{uri}/orphan.tar"));
    assert!(
        orphan
            == [format!(
                "{uri}/orphan.tar: no index; run `bucketload index`"
            )],
        "{run:#?}"
    );
    let short = lines_naming(&run, &format!("{uri}/short.tar"));
    assert_eq!(short.len(), 1, "{run:#?}");
    assert!(short[0].contains(": corrupt tar: "), "{run:#?}");
    assert!(short[0].contains(" at byte "), "{run:#?}");
    assert!(!run.stdout.contains("py.tar"), "{run:#?}");
    assert!(run.stdout.contains("verified 3 objects ("), "{run:#?}");
    assert!(run.stdout.trim_end().ends_with(": 4 problems"), "{run:#?}");
}

#[test]
fn a_prefix_with_neither_manifest_nor_shards_is_an_error() {
    let fx = Fixture::start();
    let store = fx.store("s3://verify-tests/empty");
    put(&fx, &store, "readme.txt", b"nothing to verify");
    let run = fx.run(&["verify", "s3://verify-tests/empty"]);
    assert_eq!(run.code, 6, "{run:#?}");
    assert!(run.error_line().contains("nothing to verify"), "{run:#?}");
    assert!(!run.stdout.contains("verified"), "{run:#?}");
}

#[test]
fn a_shards_manifest_names_missing_shards_and_shards_that_differ_from_it() {
    let fx = Fixture::start();
    let uri = "s3://verify-tests/listed";
    let store = fx.store(uri);
    let shards = make_shards(&fx);
    for (name, data) in &shards {
        put(&fx, &store, name, data);
    }
    fx.run(&["index", uri, "--md5"]).ok();
    let md5_of = |name: &str| {
        let index = ShardIndex::parse(name, &get(&fx, &store, &format!("{name}.idx"))).unwrap();
        index.shard_md5.iter().map(|b| format!("{b:02x}")).collect()
    };
    let entry = |name: &str, bytes: u64, crc32c: String, md5: String| ShardEntry {
        name: name.to_owned(),
        index: format!("{name}.idx"),
        samples: 4,
        bytes,
        crc32c,
        md5,
    };
    let (gnu, py) = (&shards[0].1, &shards[1].1);
    let entries = vec![
        entry(
            "gnu.tar",
            gnu.len() as u64,
            format!("{:08x}", crc32c::crc32c(gnu)),
            md5_of("gnu.tar"),
        ),
        entry("gone.tar", 10_240, "0badc0de".to_owned(), "0".repeat(32)),
        entry(
            "py.tar",
            py.len() as u64,
            "0badc0de".to_owned(),
            md5_of("py.tar"),
        ),
    ];
    let manifest = Manifest {
        format_version: MANIFEST_VERSION,
        kind: DatasetKind::Shards,
        parameters: Parameters {
            source: uri.to_owned(),
            shard_size: None,
            samples_per_shard: None,
            seed: None,
            plan: None,
            label_policy: "none".to_owned(),
            tool_version: "test".to_owned(),
            created: "2026-11-22T06:30:00Z".to_owned(),
            part: None,
        },
        samples: 12,
        bytes: entries.iter().map(|e| e.bytes).sum(),
        classes: Vec::new(),
        shards: entries,
        files: Vec::new(),
    };
    put(&fx, &store, MANIFEST_PATH, &manifest.to_json());

    let (run, _) = verify(&fx, uri);
    assert_eq!(run.code, 6, "{run:#?}");
    let gone = lines_naming(&run, &format!("{uri}/gone.tar"));
    assert!(gone == [format!("{uri}/gone.tar: missing")], "{run:#?}");
    let py = lines_naming(&run, &format!("{uri}/py.tar"));
    assert_eq!(py.len(), 1, "{run:#?}");
    assert!(py[0].contains(": manifest mismatch: "), "{run:#?}");
    assert!(py[0].contains("CRC32C 0badc0de"), "{run:#?}");
    assert!(!run.stdout.contains("gnu.tar"), "{run:#?}");
    assert!(run.stdout.contains("verified 2 objects ("), "{run:#?}");
    assert!(run.stdout.trim_end().ends_with(": 2 problems"), "{run:#?}");
}

/// The same bytes uploaded again with another part size get another multipart ETag: `verify`
/// warns, and does not call the object corrupt, when the size and the CRC32C still match. Other
/// bytes under the same name are still a problem.
#[test]
fn a_multipart_etag_that_differs_over_the_same_bytes_is_a_warning() {
    let fx = Fixture::start();
    let uri = "s3://verify-etag/d";
    let data: Vec<u8> = (0..11u32 << 20).map(|i| (i % 251) as u8).collect();
    let local = fx.work_path("big.bin");
    std::fs::write(&local, &data).unwrap();
    let local = local.to_str().unwrap();
    let object = format!("{uri}/big.bin");
    fx.run(&["cp", local, &object, "--part-size", "5MiB"]).ok();
    fx.run(&["manifest", uri]).ok();
    fx.run(&["cp", local, &object, "--part-size", "6MiB"]).ok();
    let (run, _) = verify(&fx, uri);
    assert_eq!(run.code, 0, "{run:#?}");
    let lines = lines_naming(&run, &format!("warning: {object}"));
    assert_eq!(lines.len(), 1, "{run:#?}");
    assert!(lines[0].contains("CRC32C match"), "{run:#?}");
    assert!(run.stdout.trim_end().ends_with(": 0 problems"), "{run:#?}");

    let mut other = data.clone();
    other[7 << 20] ^= 1;
    std::fs::write(fx.work_path("big.bin"), &other).unwrap();
    fx.run(&["cp", local, &object, "--part-size", "5MiB"]).ok();
    let (run, _) = verify(&fx, uri);
    assert_eq!(run.code, 6, "{run:#?}");
    let problems = lines_naming(&run, &object);
    assert_eq!(problems.len(), 2, "{run:#?}");
    assert!(problems[0].contains("wrong ETag"), "{run:#?}");
    assert!(problems[1].contains("checksum mismatch"), "{run:#?}");
}

/// Runs `script` in the workspace's Python with boto3 client `s3` for the fixture's server.
fn boto3(fx: &Fixture, script: &str) -> String {
    let prelude = "import boto3, sys\n\
                   s3 = boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1', \
                   aws_access_key_id=sys.argv[2], aws_secret_access_key=sys.argv[3])\n";
    bucketload_test_support::run_python(
        &format!("{prelude}{script}"),
        [
            fx.endpoint().as_str(),
            bucketload_server::DEFAULT_ACCESS_KEY,
            bucketload_server::DEFAULT_SECRET_KEY,
        ],
    )
}

/// The lines of a `verify` report that name an object (warnings, then problems), in order.
fn findings(run: &Run) -> Vec<&str> {
    run.stdout
        .lines()
        .filter(|l| l.starts_with("s3://") || l.starts_with("warning: s3://"))
        .collect()
}

/// The manifest and the listing interleave in every way (keys missing first, last and in the
/// middle, extra keys before, between and after, a wrong size; keys with `//`, non-ASCII keys,
/// and `.` < `/` < `0` in byte order): the report names each, and only them, as the table of
/// the whole manifest did. Objects written and changed by boto3.
#[test]
fn a_files_dataset_whose_listing_and_manifest_interleave_in_every_way() {
    let fx = Fixture::start();
    let bucket = bucketload_test_support::unique_bucket();
    // Byte order: `.` < `/` < `0`; ASCII < `ü` < U+FFFD < U+10000 (UTF-16 order would put
    // U+10000 before U+FFFD).
    let keys = [
        "a.b",
        "a/b",
        "a0",
        "b//c",
        "mid/x",
        "u.txt",
        "\u{fc}.txt",
        "z/\u{fffd}",
        "z/\u{10000}",
    ];
    boto3(
        &fx,
        &format!(
            "s3.create_bucket(Bucket={bucket:?})\n\
             for i, k in enumerate({keys:?}): \
             s3.put_object(Bucket={bucket:?}, Key='ds/' + k, Body=b'x' * (100 + i))\n"
        ),
    );
    let uri = format!("s3://{bucket}/ds");
    let made = fx.run(&["manifest", &uri]).ok();
    assert!(made.stdout.contains("(9 files"), "{made:#?}");
    let (run, _) = verify(&fx, &uri);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(run.stdout.contains("verified 9 objects ("), "{run:#?}");
    assert!(findings(&run).is_empty(), "{run:#?}");

    boto3(
        &fx,
        &format!(
            "for k in ['a.b', 'mid/x', 'z/\\U00010000']: \
             s3.delete_object(Bucket={bucket:?}, Key='ds/' + k)\n\
             for k in ['0first', 'a/c', 'zz', '\\u00fc.txt.2']: \
             s3.put_object(Bucket={bucket:?}, Key='ds/' + k, Body=b'extra')\n\
             s3.put_object(Bucket={bucket:?}, Key='ds/u.txt', Body=b'shorter')\n"
        ),
    );
    let lists = fx.server().counters().get("ListObjectsV2");
    let (run, gets) = verify(&fx, &uri);
    assert_eq!(run.code, 6, "{run:#?}");
    let want = [
        format!("warning: {uri}/0first: not in the manifest"),
        format!("warning: {uri}/a/c: not in the manifest"),
        format!("warning: {uri}/zz: not in the manifest"),
        format!("warning: {uri}/\u{fc}.txt.2: not in the manifest"),
        format!("{uri}/a.b: missing"),
        format!("{uri}/mid/x: missing"),
        format!("{uri}/u.txt: wrong size: 7 bytes, the manifest says 105"),
        format!("{uri}/z/\u{10000}: missing"),
    ];
    assert_eq!(findings(&run), want, "{run:#?}");
    // a/b, a0, b//c, ü.txt and z/U+FFFD: 101 + 102 + 103 + 106 + 107 bytes.
    assert!(
        run.stdout.contains("verified 5 objects (519 bytes) in "),
        "{run:#?}"
    );
    assert!(run.stdout.trim_end().ends_with(": 4 problems"), "{run:#?}");
    // The manifest, then each object found with its size once; one flat listing.
    assert_eq!(gets, 6, "{run:#?}");
    let lists = fx.server().counters().get("ListObjectsV2") - lists;
    assert_eq!(lists, 1, "{run:#?}");
}

/// A format-2 manifest is merged with one flat listing, never held whole: a dataset of three
/// class folders costs one LIST (the table path lists the root, then each folder), and the
/// debug log says which path was taken.
#[test]
fn a_format_2_manifest_is_merged_with_one_flat_listing() {
    let fx = Fixture::start();
    let uri = "s3://verify-merge/train";
    fx.generate(uri, 12, 3, "1KB");
    fx.run(&["manifest", uri]).ok();
    let lists = fx.server().counters().get("ListObjectsV2");
    let run = fx.run(&["verify", "-vv", uri]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(run.stdout.contains("verified 12 objects ("), "{run:#?}");
    assert!(
        run.stderr
            .contains("verifying by merging the manifest with the listing"),
        "{run:#?}"
    );
    let lists = fx.server().counters().get("ListObjectsV2") - lists;
    assert_eq!(lists, 1, "{run:#?}");
}

/// Both manifest formats must list their files sorted and once: a format-1 manifest whose files
/// are out of order, or name one twice, is refused by its reader, naming the manifest and the
/// key, before or during the merge alike; nothing is reported verified.
#[test]
fn a_format_1_manifest_out_of_order_or_with_a_duplicate_is_refused_naming_the_key() {
    let fx = Fixture::start();
    let uri = "s3://verify-json/ds";
    let store = fx.store(uri);
    for (key, data) in [
        ("a.jpg", b"aa".as_slice()),
        ("b.jpg", b"bbb"),
        ("c.jpg", b"c"),
    ] {
        put(&fx, &store, key, data);
    }
    let file = |key: &str, size: u64| bucketload_format::FileEntry {
        key: key.to_owned(),
        size,
        etag: None,
        crc32c: None,
    };
    let cases = [
        (
            vec![file("a.jpg", 2), file("c.jpg", 1), file("b.jpg", 3)],
            "\"b.jpg\" is duplicated or out of order",
        ),
        (
            vec![file("a.jpg", 2), file("b.jpg", 3), file("b.jpg", 3)],
            "\"b.jpg\" is duplicated or out of order",
        ),
    ];
    for (files, error) in cases {
        let manifest = Manifest {
            format_version: MANIFEST_VERSION,
            kind: DatasetKind::Files,
            parameters: Parameters {
                source: uri.to_owned(),
                shard_size: None,
                samples_per_shard: None,
                seed: None,
                plan: None,
                label_policy: "none".to_owned(),
                tool_version: "test".to_owned(),
                created: "2026-11-29T05:00:00Z".to_owned(),
                part: None,
            },
            samples: files.len() as u64,
            bytes: files.iter().map(|f| f.size).sum(),
            classes: Vec::new(),
            shards: Vec::new(),
            files,
        };
        put(&fx, &store, MANIFEST_PATH, &manifest.to_json());
        let run = fx.run(&["verify", uri]);
        assert_ne!(run.code, 0, "{run:#?}");
        assert!(run.error_line().contains(error), "{run:#?}");
        assert!(
            run.error_line()
                .contains(&format!("{uri}/_bucketload/manifest.json")),
            "{run:#?}"
        );
        assert!(!run.stdout.contains("verified"), "{run:#?}");
    }
}
