//! Manifest format 2 (binary) round trips, format 1 (JSON) read through the same streaming
//! reader, and truncated or damaged manifests refused whole.

#![allow(clippy::unwrap_used)]

use bucketload_format::{
    ClassCount, DatasetKind, Entry, Error, FileEntry, MANIFEST_VERSION, MANIFEST2_VERSION,
    Manifest, ManifestFormat, ManifestWriter, Parameters, PartSpec, ShardEntry, read_manifest,
};
use proptest::prelude::*;

const NAME: &str = "s3://d/_bucketload/manifest.bin";

fn parameters() -> Parameters {
    Parameters {
        source: "s3://raw/imagenet/train".into(),
        shard_size: Some(256 << 20),
        samples_per_shard: Some(1000),
        seed: Some(7),
        plan: Some("6f0c3f2a9d1e44b7".into()),
        label_policy: "folder".into(),
        tool_version: "0.1.0".into(),
        created: "2026-11-22T05:15:00Z".into(),
        part: Some(PartSpec { index: 1, count: 3 }),
    }
}

fn classes() -> Vec<ClassCount> {
    vec![
        ClassCount {
            name: "cat".into(),
            count: 4,
        },
        ClassCount {
            name: "dög".into(),
            count: 0,
        },
    ]
}

fn manifest(kind: DatasetKind, shards: Vec<ShardEntry>, files: Vec<FileEntry>) -> Manifest {
    let (samples, bytes) = match kind {
        DatasetKind::Shards => (
            shards.iter().map(|s| s.samples).sum(),
            shards.iter().map(|s| s.bytes).sum(),
        ),
        DatasetKind::Files => (files.len() as u64, files.iter().map(|f| f.size).sum()),
    };
    Manifest {
        format_version: MANIFEST2_VERSION,
        kind,
        parameters: parameters(),
        samples,
        bytes,
        classes: classes(),
        shards,
        files,
    }
}

fn file(key: &str, size: u64, etag: Option<&str>, crc32c: Option<&str>) -> FileEntry {
    FileEntry {
        key: key.into(),
        size,
        etag: etag.map(Into::into),
        crc32c: crc32c.map(Into::into),
    }
}

/// Every way a file entry's fields are stored: MD5 ETags, multipart ETags, odd ETags, none.
fn files_manifest() -> Manifest {
    let files = vec![
        file("a/1.jpg", 0, None, None),
        file(
            "a/2.jpg",
            1,
            Some("0123456789abcdef0123456789abcdef"),
            Some("0000000c"),
        ),
        file(
            "a/3.jpg",
            u64::MAX / 4,
            Some("0123456789abcdef0123456789abcdef-17"),
            None,
        ),
        file(
            "a/4.jpg",
            5,
            Some("0123456789ABCDEF0123456789ABCDEF"),
            Some("DEADBEEF"),
        ),
        file("a/5.jpg", 6, Some(""), Some("")),
        file("a/6.jpg", 7, Some("W/\"weak\""), Some("not hex")),
        file(
            "a/7.jpg",
            8,
            Some("0123456789abcdef0123456789abcdef-007"),
            Some("1"),
        ),
        file(
            "b/é/ü.jpg",
            9,
            Some("0123456789abcdef0123456789abcdef-0"),
            Some("ffffffff"),
        ),
    ];
    manifest(DatasetKind::Files, Vec::new(), files)
}

fn shard(name: &str, index: &str, crc32c: &str, md5: &str) -> ShardEntry {
    ShardEntry {
        name: name.into(),
        index: index.into(),
        samples: 10,
        bytes: 10_000,
        crc32c: crc32c.into(),
        md5: md5.into(),
    }
}

fn shards_manifest() -> Manifest {
    let md5 = "0f343b0931126a20f133d67c2b018a3b";
    let shards = vec![
        shard("shard-000000.tar", "shard-000000.tar.idx", "8a9136aa", md5),
        shard("shard-000001.tar", "idx/shard-000001.idx", "8a9136aa", ""),
        shard("shard-000002.tar", "shard-000002.tar.idx", "", "not an md5"),
        shard("shard-000003.tar", "", "8A9136AA", md5),
    ];
    manifest(DatasetKind::Shards, shards, Vec::new())
}

/// Entries read by the streaming reader, owned.
fn streamed(bytes: &[u8]) -> Result<(Vec<ShardEntry>, Vec<FileEntry>), Error> {
    let (mut shards, mut files) = (Vec::new(), Vec::new());
    read_manifest(NAME, bytes, &mut |entry| {
        match entry {
            Entry::Shard(s) => shards.push(s.clone()),
            Entry::File(f) => files.push(f.clone()),
        }
        Ok(())
    })?;
    Ok((shards, files))
}

#[test]
fn binary_manifests_round_trip_every_field() {
    for m in [files_manifest(), shards_manifest()] {
        let bytes = m.to_binary(NAME).expect("encode");
        assert_eq!(&bytes[..8], b"\x89BLMF\r\n\x1a");
        assert_eq!(Manifest::read(NAME, &bytes[..]).expect("read"), m);
        assert_eq!(Manifest::from_json(NAME, &bytes).expect("read"), m);
        assert_eq!(
            streamed(&bytes).expect("stream"),
            (m.shards.clone(), m.files.clone())
        );
    }
}

#[test]
fn json_manifests_stream_the_same_entries() {
    for m in [files_manifest(), shards_manifest()] {
        let json = m.to_json();
        let back = Manifest::read("m.json", &json[..]).expect("json");
        assert_eq!(back.format_version, MANIFEST_VERSION);
        assert_eq!(
            Manifest {
                format_version: MANIFEST2_VERSION,
                ..back
            },
            m
        );
        let binary = m.encode(NAME, ManifestFormat::Binary).expect("encode");
        assert_eq!(
            streamed(&json).expect("json"),
            streamed(&binary).expect("bin")
        );
    }
}

#[test]
fn json_manifests_stream_with_unknown_fields_and_any_field_order() {
    let json = br#"{"files": [{"key": "a", "size": 2, "future": [1, {"x": null}]},
        {"key": "b", "size": 3}], "samples": 2, "bytes": 5, "future": {"a": [1]},
        "kind": "files", "parameters": {"source": "s", "label_policy": "none",
        "tool_version": "0", "created": "c"}, "format_version": 1}"#;
    let m = Manifest::read("m.json", &json[..]).expect("valid");
    assert_eq!((m.files.len(), m.samples, m.bytes), (2, 2, 5));
}

#[test]
fn a_sink_error_stops_the_read_and_comes_back_as_is() {
    for bytes in [
        files_manifest().to_binary(NAME).unwrap(),
        files_manifest().to_json(),
    ] {
        let mut seen = 0;
        let err = read_manifest(NAME, &bytes[..], &mut |_| {
            seen += 1;
            match seen {
                3 => Err(Error::Manifest {
                    manifest: "sink".into(),
                    reason: "full".into(),
                }),
                _ => Ok(()),
            }
        })
        .unwrap_err();
        assert_eq!((err.to_string().as_str(), seen), ("sink: full", 3));
    }
}

#[test]
fn many_entries_span_many_blocks() {
    let files: Vec<FileEntry> = (0..200_000)
        .map(|i| {
            let key = format!("train/class_{:03}/sample_{i:07}.jpg", i % 1000);
            let entry = file(
                &key,
                100_000 + i,
                Some(&format!("{:032x}", i * 7919)),
                Some("0badf00d"),
            );
            (key, entry)
        })
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_values()
        .collect();
    let m = manifest(DatasetKind::Files, Vec::new(), files);
    let bytes = m.to_binary(NAME).expect("encode");
    assert_eq!(Manifest::read(NAME, &bytes[..]).expect("read"), m);
    let json = m.to_json();
    assert!(
        bytes.len() * 4 < json.len(),
        "{} vs {}",
        bytes.len(),
        json.len()
    );
}

#[test]
fn every_truncation_is_an_error_naming_the_manifest() {
    for m in [files_manifest(), shards_manifest()] {
        let json = m.to_json();
        let json = json.trim_ascii_end().to_vec();
        for bytes in [m.to_binary(NAME).unwrap(), json] {
            for len in 0..bytes.len() {
                let err = Manifest::read(NAME, &bytes[..len]).unwrap_err();
                let text = err.to_string();
                assert!(text.starts_with(NAME), "{len}: {text}");
                assert!(
                    text.contains("write it again") || text.contains("re-create"),
                    "{text}"
                );
            }
        }
    }
}

#[test]
fn every_flipped_byte_is_an_error_naming_the_manifest() {
    for m in [files_manifest(), shards_manifest()] {
        let bytes = m.to_binary(NAME).unwrap();
        for at in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut bad = bytes.clone();
                bad[at] ^= flip;
                let err = Manifest::read(NAME, &bad[..]).unwrap_err();
                assert!(err.to_string().starts_with(NAME), "{at}: {err}");
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(
            Manifest::read(NAME, &longer[..])
                .unwrap_err()
                .to_string()
                .contains("follow")
        );
    }
}

#[test]
fn corrupt_blocks_say_which_part_failed() {
    let bytes = files_manifest().to_binary(NAME).unwrap();
    let header_len = 24 + serde_json_len(&bytes);
    let mut bad = bytes.clone();
    bad[10] ^= 1;
    assert!(
        Manifest::read(NAME, &bad[..])
            .unwrap_err()
            .to_string()
            .contains("version")
    );
    let mut bad = bytes.clone();
    bad[header_len + 20] ^= 1;
    let err = Manifest::read(NAME, &bad[..]).unwrap_err().to_string();
    assert!(err.contains("block 0 fails its checksum"), "{err}");
    let mut bad = bytes.clone();
    let at = bad.len() - 10;
    bad[at] ^= 1;
    let err = Manifest::read(NAME, &bad[..]).unwrap_err().to_string();
    assert!(err.contains("trailer fails its checksum"), "{err}");
}

/// The header's JSON length (bytes 16..20).
fn serde_json_len(bytes: &[u8]) -> usize {
    u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize
}

#[test]
fn writers_refuse_entries_out_of_order_or_of_the_other_kind() {
    let mut w = ManifestWriter::new(NAME, Vec::new(), DatasetKind::Files).unwrap();
    w.push_file(&file("b", 1, None, None)).unwrap();
    let err = w
        .push_file(&file("a", 1, None, None))
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"a\" is duplicated or out of order"), "{err}");
    let err = w
        .push_file(&file("b", 1, None, None))
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"b\" is duplicated"), "{err}");
    let s = shard("s.tar", "s.tar.idx", "", "");
    assert!(w.push_shard(&s).is_err());
}

#[test]
fn an_empty_object_or_a_foreign_one_is_an_error() {
    for bytes in [&b""[..], b"\x89PNG\r\n\x1a\n....", b"garbage", b"[]"] {
        let err = Manifest::read(NAME, bytes).unwrap_err().to_string();
        assert!(err.starts_with(NAME), "{err}");
    }
}

/// Keys with what object stores allow and tools trip on: unicode, `//`, control characters,
/// spaces, a lone character, very long names.
fn awkward_key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,3}(/[a-z0-9._-]{0,8}){0,4}",
        "\\PC{1,12}",
        "[a-c]{0,2}//[\\x00-\\x1f]{0,3}x",
        "[ -~]{1,40}",
        "[a-b]{1,2}[é€😀]{0,3}",
        "z{200,1100}",
    ]
}

fn any_etag() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        "[0-9a-f]{32}".prop_map(Some),
        "[0-9a-f]{32}-[0-9]{1,4}".prop_map(Some),
        "\\PC{0,40}".prop_map(Some),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn awkward_file_manifests_round_trip(
        entries in prop::collection::btree_map(
            awkward_key(),
            (any::<u64>(), any_etag(), prop::option::of("[0-9a-f]{8}|\\PC{0,9}")),
            0..300,
        )
    ) {
        let files: Vec<FileEntry> = entries
            .into_iter()
            .map(|(key, (size, etag, crc32c))| FileEntry { key, size: size >> 8, etag, crc32c })
            .collect();
        let m = manifest(DatasetKind::Files, Vec::new(), files);
        let bytes = m.to_binary(NAME).expect("encode");
        prop_assert_eq!(&Manifest::read(NAME, &bytes[..]).expect("read"), &m);
        let json = m.to_json();
        prop_assert_eq!(streamed(&json).expect("json"), (Vec::new(), m.files.clone()));
    }

    #[test]
    fn awkward_shard_manifests_round_trip(
        names in prop::collection::btree_set(awkward_key(), 0..100),
        odd_index in any::<bool>(),
    ) {
        let shards: Vec<ShardEntry> = names
            .into_iter()
            .enumerate()
            .map(|(i, name)| ShardEntry {
                index: if odd_index && i % 2 == 1 { format!("idx/{i}") } else { format!("{name}.idx") },
                name,
                samples: i as u64,
                bytes: (i as u64) << 40,
                crc32c: format!("{:08x}", i * 31),
                md5: if i % 3 == 0 { String::new() } else { format!("{:032x}", i) },
            })
            .collect();
        let m = manifest(DatasetKind::Shards, shards, Vec::new());
        let bytes = m.to_binary(NAME).expect("encode");
        prop_assert_eq!(Manifest::read(NAME, &bytes[..]).expect("read"), m);
    }
}

/// Random damage to valid manifests of both formats never panics the reader (the stable
/// counterpart of `fuzz/fuzz_targets/manifest_reader.rs`).
#[test]
fn mutated_manifests_never_panic() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
    let seeds = [
        files_manifest().to_binary(NAME).unwrap(),
        shards_manifest().to_binary(NAME).unwrap(),
        files_manifest().to_json(),
    ];
    for seed in &seeds {
        assert!(bucketload_format::fuzzing::manifest_reader(seed));
    }
    for _ in 0..3000 {
        let mut input = seeds[rng.random_range(0..seeds.len())].clone();
        for _ in 0..rng.random_range(1..4) {
            let at = rng.random_range(0..input.len());
            match rng.random_range(0..3) {
                0 => input[at] = rng.random(),
                1 => input.truncate(at),
                _ => input.insert(at, rng.random()),
            }
            if input.is_empty() {
                break;
            }
        }
        bucketload_format::fuzzing::manifest_reader(&input);
    }
}

/// Loading speed into a sink that does nothing, printed (a benchmark, not a timed test):
/// `cargo test -p bucketload-format --release --test format_manifest2 -- --ignored --nocapture`.
#[test]
#[ignore = "a benchmark: run in release and read the printed rate"]
fn load_speed() {
    const N: u64 = 4_000_000;
    let params = parameters();
    let mut w = ManifestWriter::new(NAME, Vec::new(), DatasetKind::Files).unwrap();
    let started = std::time::Instant::now();
    let mut entry = file("", 0, None, Some("0badf00d"));
    for i in 0..N {
        entry.key = format!("train/class_{:03}/sample_{i:07}.jpg", i / (N / 1000));
        entry.size = 100_000 + i % 50_000;
        entry.etag = Some(format!(
            "{:032x}",
            (i as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c)
        ));
        w.push_file(&entry).unwrap();
    }
    let (bytes, _) = w.finish(params, Vec::new()).unwrap();
    let wrote = started.elapsed().as_secs_f64();
    let json = Manifest::read(NAME, &bytes[..]).unwrap().to_json();
    for (format, bytes) in [("format 2", bytes), ("format 1", json)] {
        let started = std::time::Instant::now();
        let header = read_manifest(NAME, &bytes[..], &mut |_| Ok(())).unwrap();
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{format}: {} entries, {:.1} bytes/entry, read {:.2} M entries/s",
            header.entries,
            bytes.len() as f64 / N as f64,
            N as f64 / secs / 1e6
        );
    }
    println!(
        "format 2 written at {:.2} M entries/s",
        N as f64 / wrote / 1e6
    );
}
