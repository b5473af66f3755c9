//! Writer → reader round trips, chunking independence, index and manifest.

use bucketload_format::{
    ClassCount, DatasetKind, Error, Manifest, Parameters, PartSpec, ShardEntry, ShardIndex,
    ShardIndexBuilder, TarReader, TarWriter, merge_manifests,
};
use bytes::Bytes;
use proptest::prelude::*;

fn write(members: &[(String, Vec<u8>)]) -> (Vec<u8>, ShardIndex) {
    let mut out = Vec::new();
    let mut w = TarWriter::new("t.tar");
    let mut index = ShardIndexBuilder::new();
    for (name, data) in members {
        let loc = w.append(&mut out, name, data).expect("append");
        index.add(name, loc, data);
    }
    let summary = w.finish(&mut out).expect("finish");
    (out, index.finish(&summary))
}

fn read_chunked(bytes: &[u8], cuts: &[usize]) -> Result<Vec<(String, Vec<u8>)>, Error> {
    let mut r = TarReader::new("t.tar");
    let mut out = Vec::new();
    let mut start = 0;
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    points.push(bytes.len());
    for end in points {
        r.push(Bytes::copy_from_slice(&bytes[start..end]));
        start = end;
        while let Some(m) = r.next_member()? {
            out.push((m.header.name, m.data.to_vec()));
        }
    }
    r.finish_input();
    while let Some(m) = r.next_member()? {
        out.push((m.header.name, m.data.to_vec()));
    }
    assert!(r.is_finished());
    Ok(out)
}

fn name_of_len(len: usize) -> String {
    // Directories of 9 chars + '/' so ustar prefix splitting is exercised.
    let mut name = String::new();
    while name.len() + 10 < len {
        name.push_str("dddddddd/");
        name.push('d');
    }
    while name.len() < len {
        name.push('f');
    }
    name
}

#[test]
fn names_of_every_interesting_length_round_trip() {
    let mut members: Vec<(String, Vec<u8>)> = [1, 99, 100, 101, 155, 255, 256, 300]
        .iter()
        .map(|&n| (name_of_len(n), vec![n as u8; n]))
        .collect();
    members.push(("x".repeat(300), b"no slash at all".to_vec()));
    members.push(("ünïcødé/日本語.txt".into(), b"utf8".to_vec()));
    members.push(("with spaces/a b.jpg".into(), b"spaces".to_vec()));
    members.push(("empty.bin".into(), Vec::new()));
    for (name, _) in &members {
        assert!(!name.ends_with('/') && !name.is_empty(), "{name}");
    }
    let (bytes, _) = write(&members);
    assert_eq!(read_chunked(&bytes, &[]).expect("valid"), members);
    assert_eq!(
        read_chunked(&bytes, &[1, 511, 512, 513, 700, 2000]).expect("valid"),
        members
    );
}

#[test]
fn index_round_trips_and_matches_the_shard() {
    let members: Vec<(String, Vec<u8>)> = (0..50)
        .flat_map(|i| {
            [
                (format!("c{}/{i:06}.jpg", i % 3), vec![i as u8; 100 + i]),
                (format!("c{}/{i:06}.cls", i % 3), b"1".to_vec()),
            ]
        })
        .collect();
    let (bytes, index) = write(&members);
    assert_eq!(index.samples.len(), 50);
    assert_eq!(index.shard_size, bytes.len() as u64);
    assert_eq!(index.shard_crc32c, crc32c::crc32c(&bytes));
    let sample = &index.samples[7];
    let jpg = &sample.members[0];
    let data = &bytes[jpg.data_offset as usize..(jpg.data_offset + jpg.size) as usize];
    assert_eq!(data, &members[14].1[..]);
    assert_eq!(crc32c::crc32c(data), jpg.crc32c);
    let (start, end) = sample.byte_range().expect("members");
    let mut r = TarReader::new("range");
    r.push(Bytes::copy_from_slice(&bytes[start as usize..end as usize]));
    assert_eq!(
        r.next_member().expect("ok").expect("member").header.name,
        "c1/000007.jpg"
    );

    let encoded = index.to_bytes("t.tar.idx").expect("encode");
    assert_eq!(
        ShardIndex::parse("t.tar.idx", &encoded).expect("parse"),
        index
    );
}

#[test]
fn every_corrupted_index_byte_is_detected() {
    let members: Vec<(String, Vec<u8>)> =
        (0..5).map(|i| (format!("{i}.jpg"), vec![1; 10])).collect();
    let encoded = write(&members).1.to_bytes("i.idx").expect("encode");
    for i in 0..encoded.len() {
        let mut bad = encoded.clone();
        bad[i] ^= 0x10;
        let err = ShardIndex::parse("i.idx", &bad).expect_err("corrupt byte detected");
        assert!(matches!(err, Error::CorruptIndex { .. }), "byte {i}: {err}");
    }
    for len in 0..encoded.len() {
        assert!(
            ShardIndex::parse("i.idx", &encoded[..len]).is_err(),
            "truncated to {len}"
        );
    }
    let err = ShardIndex::parse("s3://b/i.idx", &encoded[..encoded.len() - 1]).expect_err("short");
    assert!(
        err.to_string().starts_with("s3://b/i.idx at byte "),
        "{err}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_members_round_trip_under_any_chunking(
        members in prop::collection::vec(("[a-zA-Z0-9_ é日/]{1,200}", prop::collection::vec(any::<u8>(), 0..2000)), 0..12),
        cuts in prop::collection::vec(any::<usize>(), 0..20),
    ) {
        let members: Vec<(String, Vec<u8>)> = members
            .into_iter()
            .map(|(n, d)| (n.split('/').filter(|c| !c.is_empty() && *c != "..").collect::<Vec<_>>().join("/"), d))
            .filter(|(n, _)| !n.is_empty())
            .collect();
        let (bytes, index) = write(&members);
        prop_assert_eq!(read_chunked(&bytes, &cuts).expect("valid"), members.clone());
        let encoded = index.to_bytes("p.idx").expect("encode");
        prop_assert_eq!(ShardIndex::parse("p.idx", &encoded).expect("parse"), index);
    }
}

fn part(index: u32, shards: &[(&str, u64)], classes: &[(&str, u64)]) -> Manifest {
    let shards: Vec<ShardEntry> = shards
        .iter()
        .map(|(name, samples)| ShardEntry {
            name: (*name).into(),
            index: format!("{name}.idx"),
            samples: *samples,
            bytes: samples * 1000,
            crc32c: "0011aabb".into(),
            md5: "0".repeat(32),
        })
        .collect();
    Manifest {
        format_version: 1,
        kind: DatasetKind::Shards,
        parameters: Parameters {
            source: "s3://src/train".into(),
            shard_size: Some(256 << 20),
            samples_per_shard: None,
            seed: Some(7),
            plan: None,
            label_policy: "folder".into(),
            tool_version: "0.1.0".into(),
            created: format!("2026-11-22T05:0{index}:00Z"),
            part: Some(PartSpec { index, count: 2 }),
        },
        samples: shards.iter().map(|s| s.samples).sum(),
        bytes: shards.iter().map(|s| s.bytes).sum(),
        classes: classes
            .iter()
            .map(|(n, c)| ClassCount {
                name: (*n).into(),
                count: *c,
            })
            .collect(),
        shards,
        files: Vec::new(),
    }
}

#[test]
fn manifests_of_parts_merge_deterministically() {
    let a = part(
        0,
        &[("shard-000000.tar", 10), ("shard-000002.tar", 5)],
        &[("cat", 8), ("dog", 7)],
    );
    let b = part(1, &[("shard-000001.tar", 4)], &[("dog", 4)]);
    let merged = merge_manifests(&[b.clone(), a.clone()]).expect("merge");
    assert_eq!(
        merged,
        merge_manifests(&[a.clone(), b.clone()]).expect("merge")
    );
    let names: Vec<&str> = merged.shards.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    );
    assert_eq!((merged.samples, merged.bytes), (19, 19_000));
    assert_eq!(
        merged.classes[1],
        ClassCount {
            name: "dog".into(),
            count: 11
        }
    );
    assert_eq!(merged.parameters.part, None);
    assert_eq!(merged.parameters.created, "2026-11-22T05:01:00Z");
    let json = merged.to_json();
    assert_eq!(Manifest::from_json("m.json", &json).expect("parse"), merged);
}

#[test]
fn bad_merges_are_refused() {
    let a = part(0, &[("shard-000000.tar", 10)], &[]);
    let overlap = part(1, &[("shard-000000.tar", 3)], &[]);
    assert!(
        merge_manifests(&[a.clone(), overlap])
            .expect_err("overlap")
            .to_string()
            .contains("more than one part")
    );
    let mut newer = part(1, &[("shard-000001.tar", 3)], &[]);
    newer.format_version = 2;
    assert!(merge_manifests(&[a.clone(), newer]).is_err());
    let mut other_seed = part(1, &[("shard-000001.tar", 3)], &[]);
    other_seed.parameters.seed = Some(8);
    assert!(
        merge_manifests(&[a.clone(), other_seed])
            .expect_err("params")
            .to_string()
            .contains("parameters")
    );
    assert!(
        merge_manifests(std::slice::from_ref(&a))
            .expect_err("missing")
            .to_string()
            .contains("[1]")
    );
    assert!(merge_manifests(&[a.clone(), a]).is_err());
    let err = Manifest::from_json(
        "s3://d/_bucketload/manifest.json",
        b"{\"format_version\": 1",
    )
    .expect_err("json");
    assert!(
        err.to_string()
            .starts_with("s3://d/_bucketload/manifest.json: invalid manifest"),
        "{err}"
    );
}

/// The example in docs/FORMATS.md, byte for byte.
#[test]
fn documented_index_example_is_exact() {
    let members = vec![
        ("n01/000001.jpg".to_owned(), b"abc".to_vec()),
        ("n01/000001.cls".to_owned(), b"0".to_vec()),
    ];
    let (shard, index) = write(&members);
    assert_eq!(shard.len(), 3072);
    let encoded = index.to_bytes("example.idx").expect("encode");
    let hex: Vec<String> = encoded.chunks(16).map(hex::encode).collect();
    assert_eq!(hex, DOCUMENTED_INDEX);
}

const DOCUMENTED_INDEX: [&str; 10] = [
    "424c494e444558000100000000000000",
    "000c000000000000bd449c2b00000000",
    "5e66bf69cec6fc43b9f0eb9c7ec13d8d",
    "01000000000000000200000000000000",
    "0a006e30312f3030303030310200036a",
    "70670000000000000000000200000000",
    "00000300000000000000b73f4b360363",
    "6c730004000000000000000600000000",
    "00000100000000000000e01a9e62152c",
    "0373",
];

/// The manifest example in docs/FORMATS.md parses and validates.
#[test]
fn documented_manifest_example_is_valid() {
    let doc = include_str!("../../../docs/FORMATS.md");
    let start = doc.find("```json\n").expect("json example") + "```json\n".len();
    let end = start + doc[start..].find("```").expect("end of example");
    let manifest =
        Manifest::from_json("FORMATS.md", &doc.as_bytes()[start..end]).expect("valid example");
    assert_eq!(
        (manifest.kind, manifest.samples, manifest.shards.len()),
        (DatasetKind::Shards, 10, 1)
    );
}
