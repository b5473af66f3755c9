//! `shard` and `merge` against the embedded server: shards hold every sample once with its
//! label, verify clean, resume after a failure without refetching finished shards, never show a
//! partial shard, split into slices that merge into the same dataset, and refuse bad input by
//! name.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use bucketload_format::{MANIFEST_BIN_PATH, MANIFEST_PATH, Manifest, ShardIndex, TarReader};
use bucketload_store::Store;
use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path};
use bytes::Bytes;
use common::Fixture;

/// The key as is (`Path::from` would percent-encode non-ASCII characters).
fn path(key: &str) -> Path {
    Path::parse(key).unwrap()
}

fn get(fx: &Fixture, store: &Store, key: &str) -> Option<Bytes> {
    let os = store.object_store();
    let got = fx.block_on(async { os.get(&path(key)).await?.bytes().await });
    match got {
        Ok(b) => Some(b),
        Err(bucketload_store::object_store::Error::NotFound { .. }) => None,
        Err(e) => panic!("{e}"),
    }
}

fn put(fx: &Fixture, store: &Store, key: &str, data: Bytes) {
    let os = store.object_store();
    fx.block_on(os.put(&path(key), PutPayload::from(data)))
        .unwrap();
}

fn keys(fx: &Fixture, store: &Store) -> Vec<String> {
    let os = store.object_store();
    let mut keys: Vec<String> = fx
        .block_on(async {
            use futures::TryStreamExt;
            os.list(None)
                .map_ok(|m| m.location.to_string())
                .try_collect()
                .await
        })
        .unwrap();
    keys.sort();
    keys
}

/// The dataset's manifest, of either format (never both).
fn manifest(fx: &Fixture, store: &Store) -> Manifest {
    let (bin, json) = (
        get(fx, store, MANIFEST_BIN_PATH),
        get(fx, store, MANIFEST_PATH),
    );
    assert!(bin.is_none() || json.is_none(), "two manifests");
    let bytes = bin.or(json).expect("manifest");
    Manifest::from_json("manifest", &bytes).unwrap()
}

/// Every member of every shard of the manifest: sample key → (extension → bytes), checking
/// each shard against its index and manifest entry on the way.
fn read_dataset(fx: &Fixture, store: &Store) -> BTreeMap<String, BTreeMap<String, Bytes>> {
    let m = manifest(fx, store);
    let mut out: BTreeMap<String, BTreeMap<String, Bytes>> = BTreeMap::new();
    for entry in &m.shards {
        let shard = get(fx, store, &entry.name).unwrap();
        assert_eq!(shard.len() as u64, entry.bytes);
        assert_eq!(format!("{:08x}", crc32c::crc32c(&shard)), entry.crc32c);
        let index = ShardIndex::parse("idx", &get(fx, store, &entry.index).unwrap()).unwrap();
        assert_eq!(index.samples.len() as u64, entry.samples);
        let mut reader = TarReader::new(entry.name.clone());
        reader.push(shard.clone());
        reader.finish_input();
        while let Some(member) = reader.next_member().unwrap() {
            let (key, ext) = bucketload_format::split_key(&member.header.name);
            let previous = out
                .entry(key.to_owned())
                .or_default()
                .insert(ext.to_owned(), member.data.clone());
            assert!(previous.is_none(), "{} twice", member.header.name);
        }
        for sample in &index.samples {
            for m in &sample.members {
                let data = &shard[m.data_offset as usize..(m.data_offset + m.size) as usize];
                assert_eq!(crc32c::crc32c(data), m.crc32c);
            }
        }
    }
    out
}

#[test]
fn shards_hold_every_sample_once_with_its_label_and_verify_clean() {
    let fx = Fixture::start();
    fx.generate("s3://shard-src/train", 60, 3, "3KB");
    let run = fx
        .run(&[
            "shard",
            "s3://shard-src/train",
            "s3://shard-dst/train",
            "--samples-per-shard",
            "16",
        ])
        .ok();
    assert!(run.stdout.contains("wrote 4 of 4 shards"), "{run:#?}");
    let src = fx.store("s3://shard-src/train");
    let dst = fx.store("s3://shard-dst/train");
    let m = manifest(&fx, &dst);
    assert_eq!(m.samples, 60);
    let counts: Vec<(String, u64)> = m
        .classes
        .iter()
        .map(|c| (c.name.clone(), c.count))
        .collect();
    assert_eq!(counts.len(), 3);
    assert!(counts.iter().all(|(_, n)| *n == 20), "{counts:?}");
    assert_eq!(m.parameters.samples_per_shard, Some(16));
    let samples = read_dataset(&fx, &dst);
    assert_eq!(samples.len(), 60);
    let class_names: Vec<&str> = m.classes.iter().map(|c| c.name.as_str()).collect();
    for key in keys(&fx, &src) {
        let (sample, ext) = bucketload_format::split_key(&key);
        let members = &samples[sample];
        assert_eq!(members[ext], get(&fx, &src, &key).unwrap(), "{key}");
        let class = bucketload_format::class_of_key(sample).unwrap();
        let label = class_names.iter().position(|c| *c == class).unwrap();
        assert_eq!(members["cls"], Bytes::from(label.to_string()), "{key}");
    }
    fx.run(&["verify", "s3://shard-dst/train"]).ok();
}

#[test]
fn md5_is_recorded_on_request_and_verified_where_recorded() {
    let fx = Fixture::start();
    let src_uri = "s3://md5-src/train";
    let dst_uri = "s3://md5-dst/train";
    fx.generate(src_uri, 30, 2, "2KB");
    // Format 1 on request: JSON, for older readers.
    let args = ["shard", src_uri, dst_uri, "--samples-per-shard", "10"];
    let json_args = [&args[..], &["--manifest-format", "1"]].concat();
    fx.run(&json_args).ok();
    let dst = fx.store(dst_uri);
    let m = manifest(&fx, &dst);
    assert_eq!(m.format_version, 1);
    assert!(m.shards.iter().all(|s| s.md5.is_empty()), "{m:?}");
    let json = String::from_utf8(get(&fx, &dst, MANIFEST_PATH).unwrap().to_vec()).unwrap();
    assert!(!json.contains("\"md5\""), "{json}");
    let idx = |name: &str| ShardIndex::parse(name, &get(&fx, &dst, name).unwrap()).unwrap();
    assert_eq!(idx("shard-000000.tar.idx").md5(), None);
    fx.run(&["verify", dst_uri]).ok();

    // Asking for MD5 later redoes the shards that lack it, and records the MD5 of their bytes.
    let mut with_md5 = args.to_vec();
    with_md5.push("--md5");
    let run = fx.run(&with_md5).ok();
    assert!(run.stdout.contains("wrote 3 of 3 shards"), "{run:#?}");
    let m = manifest(&fx, &dst);
    assert_eq!(
        m.format_version, 2,
        "format 2 by default, the JSON one deleted"
    );
    for shard in &m.shards {
        use md5::{Digest, Md5};
        let bytes = get(&fx, &dst, &shard.name).unwrap();
        assert_eq!(
            shard.md5,
            hex::encode(Md5::digest(&bytes)),
            "{}",
            shard.name
        );
        let index = idx(&shard.index);
        assert_eq!(index.md5().map(hex::encode), Some(shard.md5.clone()));
    }
    fx.run(&["verify", dst_uri]).ok();

    // An index whose MD5 no longer matches the shard is reported, by shard and by checksum.
    let mut index = idx("shard-000001.tar.idx");
    index.shard_md5[0] ^= 0xff;
    let bytes = index.to_bytes("shard-000001.tar.idx").unwrap();
    put(&fx, &dst, "shard-000001.tar.idx", Bytes::from(bytes));
    let run = fx.run(&["verify", dst_uri]);
    assert_eq!(run.code, 6, "{run:#?}");
    let line = format!("{dst_uri}/shard-000001.tar: checksum mismatch: MD5 ");
    assert!(run.stdout.contains(&line), "{run:#?}");
}

#[test]
fn a_failed_run_leaves_no_partial_shard_and_a_rerun_resumes() {
    let fx = Fixture::start();
    let src_uri = "s3://resume-src/train";
    fx.generate(src_uri, 40, 2, "2KB");
    fx.run(&["manifest", src_uri]).ok();
    let src = fx.store(src_uri);
    // The manifest still names the object: the run fails when it reaches it.
    let victim = keys(&fx, &src)
        .into_iter()
        .filter(|k| !k.starts_with("_bucketload/"))
        .nth(25)
        .unwrap();
    let saved = get(&fx, &src, &victim).unwrap();
    fx.block_on(src.object_store().delete(&Path::from(victim.as_str())))
        .unwrap();
    let dst_uri = "s3://resume-dst/train";
    let args = ["shard", src_uri, dst_uri, "--samples-per-shard", "10"];
    let failed = fx.run(&args);
    assert_eq!(failed.code, 3, "{failed:#?}");
    let line = failed.error_line();
    assert!(
        line.contains(&victim) && line.contains("--skip-missing"),
        "{line}"
    );
    let dst = fx.store(dst_uri);
    let left = keys(&fx, &dst);
    assert!(left.contains(&"shard-000001.tar".to_owned()), "{left:?}");
    assert!(!left.contains(&"shard-000002.tar".to_owned()), "{left:?}");
    assert!(!left.contains(&MANIFEST_PATH.to_owned()), "{left:?}");
    assert!(!left.contains(&MANIFEST_BIN_PATH.to_owned()), "{left:?}");

    put(&fx, &src, &victim, saved);
    let gets = fx.server().counters().get("GetObject");
    let run = fx.run(&args).ok();
    assert!(
        run.stdout.contains("wrote 2 of 4 shards (2 kept"),
        "{run:#?}"
    );
    // 20 objects of shards 2 and 3; the source manifest, run file and the two kept indexes.
    assert_eq!(fx.server().counters().get("GetObject") - gets, 20 + 4);
    assert_eq!(read_dataset(&fx, &dst).len(), 40);
    fx.run(&["verify", dst_uri]).ok();
}

#[test]
fn skip_missing_counts_and_names_what_it_left_out() {
    let fx = Fixture::start();
    let src_uri = "s3://skip-src/train";
    fx.generate(src_uri, 12, 2, "2KB");
    fx.run(&["manifest", src_uri]).ok();
    let src = fx.store(src_uri);
    let victim = keys(&fx, &src)[3].clone();
    fx.block_on(src.object_store().delete(&Path::from(victim.as_str())))
        .unwrap();
    let dst_uri = "s3://skip-dst/train";
    let run = fx
        .run(&["shard", src_uri, dst_uri, "--skip-missing", "--json"])
        .ok();
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["missing"].as_array().unwrap().len(), 1);
    assert!(report["missing"][0].as_str().unwrap().ends_with(&victim));
    let dst = fx.store(dst_uri);
    let first = manifest(&fx, &dst);
    assert_eq!(first.samples, 11);
    assert_eq!(first.classes.iter().map(|c| c.count).sum::<u64>(), 11);
    assert_eq!(read_dataset(&fx, &dst).len(), 11);
    // A rerun keeps every shard; the classes still count only the samples they hold.
    let run = fx
        .run(&["shard", src_uri, dst_uri, "--skip-missing", "--json"])
        .ok();
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["written"], 0, "{report}");
    let again = manifest(&fx, &dst);
    assert_eq!((again.classes, again.shards), (first.classes, first.shards));
}

#[test]
fn a_folder_listed_in_directory_order_gives_the_shards_a_bucket_gives() {
    let fx = Fixture::start();
    let src_uri = "s3://order-src/train";
    fx.generate(src_uri, 90, 4, "1KB");
    let src = fx.store(src_uri);
    // Sidecars make samples of two members.
    for key in keys(&fx, &src).into_iter().step_by(3) {
        let (sample, _) = bucketload_format::split_key(&key);
        put(
            &fx,
            &src,
            &format!("{sample}.json"),
            Bytes::from(key.clone()),
        );
    }
    let local = fx.work_path("order-local");
    let local = local.to_str().unwrap();
    fx.run(&["cp", "-r", src_uri, local]).ok();
    let common = ["--samples-per-shard", "16", "--shuffle", "--seed", "3"];
    let mut manifests = Vec::new();
    for (from, to) in [
        (src_uri, "s3://order-dst/bucket"),
        (local, "s3://order-dst/folder"),
    ] {
        let mut args = vec!["shard", from, to];
        args.extend(common);
        fx.run(&args).ok();
        manifests.push(manifest(&fx, &fx.store(to)));
    }
    let (a, b) = (&manifests[0], &manifests[1]);
    assert_eq!(a.samples, 90);
    assert_eq!(a.shards, b.shards);
    assert_eq!(a.classes, b.classes);
    assert_eq!(a.parameters.plan, b.parameters.plan);
}

#[test]
fn slices_merge_into_the_same_dataset_as_one_run() {
    let fx = Fixture::start();
    let src_uri = "s3://parts-src/train";
    fx.generate(src_uri, 50, 5, "2KB");
    let common = ["--samples-per-shard", "7", "--shuffle", "--seed", "9"];
    let whole_uri = "s3://parts-dst/whole";
    let mut args = vec!["shard", src_uri, whole_uri];
    args.extend(common);
    fx.run(&args).ok();
    let sliced_uri = "s3://parts-dst/sliced";
    let refused = fx.run(&["merge", sliced_uri]);
    assert_ne!(refused.code, 0);
    for part in ["2/3", "0/3"] {
        let mut args = vec!["shard", src_uri, sliced_uri, "--part", part];
        args.extend(common);
        fx.run(&args).ok();
    }
    let early = fx.run(&["merge", sliced_uri]);
    assert!(early.error_line().contains("[1]"), "{early:#?}");
    let mut args = vec!["shard", src_uri, sliced_uri, "--part", "1/3"];
    args.extend(common);
    fx.run(&args).ok();
    fx.run(&["merge", sliced_uri]).ok();
    let whole = fx.store(whole_uri);
    let sliced = fx.store(sliced_uri);
    let (a, b) = (manifest(&fx, &whole), manifest(&fx, &sliced));
    assert_eq!(a.shards, b.shards);
    assert_eq!(a.classes, b.classes);
    assert_eq!(a.parameters.plan, b.parameters.plan);
    assert_eq!(read_dataset(&fx, &whole), read_dataset(&fx, &sliced));
}

#[test]
fn bad_input_is_refused_by_name_before_anything_is_written() {
    let fx = Fixture::start();
    let src_uri = "s3://bad-src/train";
    fx.generate(src_uri, 6, 2, "20KB");
    let dst_uri = "s3://bad-dst/train";
    let small = fx.run(&["shard", src_uri, dst_uri, "--shard-size", "8KB"]);
    assert_eq!(small.code, 6, "{small:#?}");
    assert!(small.error_line().contains("--shard-size"), "{small:#?}");
    let inside = fx.run(&["shard", src_uri, "s3://bad-src/train/shards"]);
    assert!(inside.error_line().contains("overlap"), "{inside:#?}");
    let dst = fx.store(dst_uri);
    put(&fx, &dst, "notes.txt", Bytes::from_static(b"mine"));
    let occupied = fx.run(&["shard", src_uri, dst_uri]);
    assert!(occupied.error_line().contains("notes.txt"), "{occupied:#?}");
    assert_eq!(keys(&fx, &dst), ["notes.txt"]);
}

#[test]
fn another_plan_at_the_destination_needs_overwrite() {
    let fx = Fixture::start();
    let src_uri = "s3://plan-src/train";
    fx.generate(src_uri, 20, 2, "2KB");
    let dst_uri = "s3://plan-dst/train";
    fx.run(&["shard", src_uri, dst_uri, "--samples-per-shard", "5"])
        .ok();
    let other = ["shard", src_uri, dst_uri, "--samples-per-shard", "8"];
    let refused = fx.run(&other);
    assert!(refused.error_line().contains("--overwrite"), "{refused:#?}");
    let mut args = other.to_vec();
    args.push("--overwrite");
    fx.run(&args).ok();
    let dst = fx.store(dst_uri);
    let names: Vec<String> = keys(&fx, &dst)
        .into_iter()
        .filter(|k| k.ends_with(".tar"))
        .collect();
    assert_eq!(
        names,
        ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    );
    assert_eq!(read_dataset(&fx, &dst).len(), 20);
}

#[test]
fn awkward_keys_and_empty_objects_survive_sharding() {
    let fx = Fixture::start();
    let src_uri = "s3://odd-src/data";
    let src = fx.store(src_uri);
    // 300 characters: more than ustar's prefix and name fields hold, so a PAX header.
    let long = format!("c/{}/{}.bin", "d".repeat(200), "x".repeat(93));
    assert_eq!(long.len(), 300);
    let odd = [
        "a/with space.txt",
        "a/ünïcødé.txt",
        "b/empty.bin",
        long.as_str(),
    ];
    for (i, key) in odd.iter().enumerate() {
        let data = if key.contains("empty") {
            Bytes::new()
        } else {
            Bytes::from(format!("object {i}"))
        };
        put(&fx, &src, key, data);
    }
    let dst_uri = "s3://odd-dst/data";
    fx.run(&["shard", src_uri, dst_uri]).ok();
    let dst = fx.store(dst_uri);
    let samples = read_dataset(&fx, &dst);
    for key in odd {
        let (sample, ext) = bucketload_format::split_key(key);
        let found = samples.get(sample).and_then(|s| s.get(ext));
        assert_eq!(found, get(&fx, &src, key).as_ref(), "{key}");
    }
    fx.run(&["verify", dst_uri]).ok();
}

/// A run killed mid-upload leaves multipart uploads of its shards stored (and billed). The next
/// run over the same destination aborts those of its own shards and leaves any other upload
/// under the prefix alone.
#[test]
fn a_rerun_aborts_the_uploads_a_killed_run_left() {
    let fx = Fixture::start();
    let src_uri = "s3://orphans-src/train";
    fx.generate(src_uri, 20, 2, "2KB");
    let dst_uri = "s3://orphans-dst/train";
    let dst = fx.store(dst_uri);
    // What a killed run leaves: started uploads, a part stored, never completed nor aborted.
    for key in ["shard-000000.tar", "shard-000001.tar", "notes.txt"] {
        fx.block_on(async {
            let mut upload = dst.object_store().put_multipart(&path(key)).await.unwrap();
            upload
                .put_part(PutPayload::from(vec![7u8; 1024]))
                .await
                .unwrap();
        });
    }
    assert_eq!(fx.block_on(dst.list_uploads("")).unwrap().len(), 3);
    let args = ["shard", src_uri, dst_uri, "--samples-per-shard", "10"];
    fx.run(&args).ok();
    let left: Vec<String> = fx
        .block_on(dst.list_uploads(""))
        .unwrap()
        .into_iter()
        .map(|u| u.key)
        .collect();
    assert_eq!(left, ["notes.txt"], "only the shards' uploads are aborted");
    assert_eq!(read_dataset(&fx, &dst).len(), 20);
}

#[test]
fn a_run_file_whose_answer_was_lost_is_claimed_by_sending_it_again() {
    use bucketload_server::FaultKind;
    let fx = Fixture::start();
    fx.generate("s3://shard-src/lost", 20, 2, "2KB");
    // The first PutObject of a run is its run file; the server writes it, then resets the
    // connection before answering.
    fx.server()
        .faults()
        .fail_next("PutObject", 1, FaultKind::ResetMidBody);
    let puts = fx.server().counters().get("PutObject");
    let run = fx
        .run(&[
            "shard",
            "s3://shard-src/lost",
            "s3://shard-dst/lost",
            "--samples-per-shard",
            "10",
        ])
        .ok();
    assert!(run.stdout.contains("wrote 2 of 2 shards"), "{run:#?}");
    assert_eq!(fx.server().faults().pending("PutObject"), 0);
    // The run file twice (the second answered "already exists"), two small shards, their
    // indexes, the manifest.
    assert_eq!(fx.server().counters().get("PutObject") - puts, 7);
    fx.run(&["verify", "s3://shard-dst/lost"]).ok();
}

/// `shard --part 0/5` leaves what a killed run leaves: its run record, 4 of 20 shards and no
/// manifest. Reading it fails naming the record and how much is missing, unless
/// `--allow-incomplete` says to read what is there (with a warning); once every part is written
/// and merged, it reads whole.
#[test]
fn an_unfinished_run_is_refused_until_finished() {
    let fx = Fixture::start();
    fx.generate("s3://shard-src/part", 100, 4, "1KB");
    let shard = |part: &str| {
        fx.run(&[
            "shard",
            "s3://shard-src/part",
            "s3://shard-dst/part",
            "--samples-per-shard",
            "5",
            "--part",
            part,
        ])
        .ok();
    };
    shard("0/5");
    let read = |extra: &[&str]| {
        let mut args = vec!["read", "s3://shard-dst/part", "--json"];
        args.extend_from_slice(extra);
        fx.run(&args)
    };
    let refused = read(&[]);
    assert_eq!(refused.code, 6, "{refused:#?}");
    let line = refused.error_line();
    assert!(
        line.contains("s3://shard-dst/part/_bucketload/run.json"),
        "{refused:#?}"
    );
    assert!(
        line.contains("4 shards of 20 samples are here")
            && line.contains("16 shards, 80 samples missing")
            && line.contains("--allow-incomplete"),
        "{refused:#?}"
    );
    let verify = fx.run(&["verify", "s3://shard-dst/part"]);
    assert_ne!(verify.code, 0, "{verify:#?}");
    assert!(
        verify
            .stdout
            .contains("s3://shard-dst/part/_bucketload/run.json")
            || verify
                .stderr
                .contains("s3://shard-dst/part/_bucketload/run.json"),
        "{verify:#?}"
    );
    let stats = fx.run(&["stats", "s3://shard-dst/part"]).ok();
    assert!(
        stats.stderr.contains("16 shards, 80 samples missing"),
        "stats describes what is there and warns: {stats:#?}"
    );
    let allowed = read(&["--allow-incomplete"]).ok();
    assert!(allowed.stdout.contains("\"samples\": 20"), "{allowed:#?}");
    assert!(
        allowed.stderr.contains("16 shards, 80 samples missing"),
        "the warning names what is missing: {allowed:#?}"
    );
    for part in ["1/5", "2/5", "3/5", "4/5"] {
        shard(part);
    }
    assert_eq!(
        read(&[]).code,
        6,
        "finished parts without merge are unfinished"
    );
    fx.run(&["merge", "s3://shard-dst/part"]).ok();
    let whole = read(&[]).ok();
    assert!(whole.stdout.contains("\"samples\": 100"), "{whole:#?}");
    fx.run(&["verify", "s3://shard-dst/part"]).ok();
}
