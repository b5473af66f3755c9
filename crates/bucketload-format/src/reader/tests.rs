use super::*;
use crate::header::seal;
use crate::writer::{encode_header, ustar_block};
use crate::{Hint, TarWriter};

fn parse(bytes: &[u8]) -> Result<Vec<Member>, Error> {
    parse_with(TarReader::new("s3://b/shard-000007.tar"), bytes)
}

fn parse_with(mut reader: TarReader, bytes: &[u8]) -> Result<Vec<Member>, Error> {
    reader.push(Bytes::copy_from_slice(bytes));
    reader.finish_input();
    let mut out = Vec::new();
    while let Some(m) = reader.next_member()? {
        out.push(m);
    }
    assert!(reader.is_finished());
    Ok(out)
}

fn shard(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = TarWriter::new("t.tar");
    for (name, data) in members {
        w.append(&mut out, name, data).expect("append");
    }
    w.finish(&mut out).expect("finish");
    out
}

fn block(name: &str, size: u64, flag: u8) -> [u8; BLOCK] {
    ustar_block(name.as_bytes(), b"", size, 0o644, 0, flag)
}

fn with_end(mut blocks: Vec<u8>) -> Vec<u8> {
    blocks.extend_from_slice(&[0u8; 1024]);
    blocks
}

#[test]
fn reads_members_with_offsets() {
    let bytes = shard(&[
        ("a/1.jpg", b"hello"),
        ("a/1.cls", b""),
        ("b.txt", &[7u8; 513]),
    ]);
    let members = parse(&bytes).expect("valid");
    let names: Vec<_> = members
        .iter()
        .map(|m| (m.header.name.as_str(), m.header.data_offset, m.data.len()))
        .collect();
    assert_eq!(
        names,
        vec![
            ("a/1.jpg", 512, 5),
            ("a/1.cls", 1536, 0),
            ("b.txt", 2048, 513)
        ]
    );
    assert_eq!(members[0].header.mode, 0o644);
    assert_eq!(members[2].header.header_offset, 1536);
}

#[test]
fn bad_checksum_names_the_header_offset() {
    let mut bytes = shard(&[("a.bin", b"x"), ("b.bin", b"y")]);
    bytes[1024 + 3] ^= 1;
    let err = parse(&bytes).expect_err("corrupt");
    assert!(
        matches!(err, Error::HeaderChecksum { offset: 1024, .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.starts_with("s3://b/shard-000007.tar at byte 1024: bad header checksum"),
        "{text}"
    );
    assert!(text.ends_with(&Hint::VerifyShards.to_string()), "{text}");
    assert_eq!(err.hint(), Some(Hint::VerifyShards));
}

#[test]
fn truncated_member_data_is_reported_where_input_ends() {
    let bytes = shard(&[("a.bin", &[1u8; 1000])]);
    let err = parse(&bytes[..812]).expect_err("truncated");
    assert!(matches!(err, Error::Truncated { offset: 812, .. }), "{err}");
    assert!(err.to_string().contains("724 more bytes"), "{err}");
}

#[test]
fn missing_end_blocks_are_truncation_and_clean_end_is_not() {
    let bytes = shard(&[("a.bin", b"x")]);
    let err = parse(&bytes[..1024]).expect_err("no end blocks");
    assert!(
        matches!(err, Error::Truncated { offset: 1024, .. }),
        "{err}"
    );
    let err = parse(&bytes[..1536]).expect_err("one end block");
    assert!(
        matches!(err, Error::Truncated { offset: 1536, .. }),
        "{err}"
    );
    let err = parse(&bytes[..1700]).expect_err("partial end block");
    assert!(
        matches!(err, Error::Truncated { offset: 1536, .. }),
        "{err}"
    );
    let mut padded_record = bytes.clone();
    padded_record.resize(10240, 0);
    assert_eq!(parse(&padded_record).expect("record padding").len(), 1);
    let mut lone = bytes[..1536].to_vec();
    lone.extend_from_slice(&block("b.bin", 0, b'0'));
    let err = parse(&with_end(lone)).expect_err("lone zero block");
    assert!(
        matches!(err, Error::Malformed { offset: 1536, .. }),
        "{err}"
    );
}

#[test]
fn garbage_and_overflowing_numbers_name_the_field_offset() {
    let mut b = block("a.bin", 0, b'0');
    b[124..136].copy_from_slice(b"0000000009x\0");
    seal(&mut b);
    let mut bytes = block("first", 0, b'0').to_vec();
    bytes.extend_from_slice(&b);
    let err = parse(&with_end(bytes)).expect_err("garbage");
    assert!(
        matches!(
            err,
            Error::BadNumber {
                offset: 636,
                field: "size",
                ..
            }
        ),
        "{err}"
    );

    let mut b = block("a.bin", 0, b'0');
    b[124] = 0x80;
    b[125..136].fill(0xff);
    seal(&mut b);
    let err = parse(&with_end(b.to_vec())).expect_err("overflow");
    assert!(
        matches!(
            err,
            Error::BadNumber {
                offset: 124,
                field: "size",
                ..
            }
        ),
        "{err}"
    );

    let mut b = block("a.bin", 0, b'0');
    b[136..148].copy_from_slice(b"777777777777");
    b[136] = b'8';
    seal(&mut b);
    let err = parse(&with_end(b.to_vec())).expect_err("mtime");
    assert!(
        matches!(
            err,
            Error::BadNumber {
                offset: 136,
                field: "mtime",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn unsafe_names_are_refused_with_the_header_offset() {
    for (name, reason) in [
        ("/etc/passwd", "absolute path"),
        ("a/../../x", "`..` component"),
    ] {
        let mut bytes = shard(&[("ok.bin", b"1")]);
        bytes.truncate(1024);
        bytes.extend_from_slice(&block(name, 0, b'0'));
        let err = parse(&with_end(bytes)).expect_err("unsafe");
        match err {
            Error::UnsafeName {
                offset: 1024,
                reason: r,
                ..
            } => assert_eq!(r, reason),
            other => panic!("{other}"),
        }
    }
}

#[test]
fn nul_in_long_names_is_refused() {
    let long = b"abc\0def\0\0";
    let mut bytes = block("././@LongLink", long.len() as u64, b'L').to_vec();
    bytes.extend_from_slice(long);
    bytes.resize(1024, 0);
    bytes.extend_from_slice(&block("short", 0, b'0'));
    let err = parse(&with_end(bytes)).expect_err("nul");
    assert!(
        matches!(err, Error::UnsafeName { offset: 515, .. }),
        "{err}"
    );

    let pax = b"13 path=a\0b\n";
    let mut bytes = block("pax", pax.len() as u64, b'x').to_vec();
    bytes.extend_from_slice(pax);
    bytes.resize(1024, 0);
    bytes.extend_from_slice(&block("short", 0, b'0'));
    let err = parse(&with_end(bytes)).expect_err("nul");
    assert!(
        matches!(err, Error::BadExtendedHeader { offset: 512, .. }),
        "{err}"
    );
}

#[test]
fn lying_pax_record_is_refused_with_its_offset() {
    let pax = b"12 path=a/b\n40 size=1\n";
    let mut bytes = shard(&[("ok.bin", b"1")]);
    bytes.truncate(1024);
    bytes.extend_from_slice(&block("pax", pax.len() as u64, b'x'));
    bytes.extend_from_slice(pax);
    bytes.resize(2048, 0);
    bytes.extend_from_slice(&block("short", 0, b'0'));
    let err = parse(&with_end(bytes)).expect_err("lies");
    assert!(
        matches!(err, Error::BadExtendedHeader { offset: 1548, .. }),
        "{err}"
    );
}

#[test]
fn pax_and_gnu_extensions_apply_to_the_next_entry() {
    let long = "d/".repeat(80) + "x.jpg";
    let mut bytes = block("././@LongLink", long.len() as u64 + 1, b'L').to_vec();
    bytes.extend_from_slice(long.as_bytes());
    bytes.resize(1024, 0);
    let mut gnu = block("truncated", 0, b'0');
    gnu[257..265].copy_from_slice(b"ustar  \0");
    gnu[124] = 0x80;
    gnu[125..136].fill(0);
    gnu[135] = 3;
    seal(&mut gnu);
    bytes.extend_from_slice(&gnu);
    bytes.extend_from_slice(b"abc");
    bytes.resize(2048, 0);
    let global = b"16 comment=hi!\n\0";
    bytes.extend_from_slice(&block("g", global.len() as u64, b'g'));
    bytes.extend_from_slice(global);
    bytes.resize(3072, 0);
    let pax = b"20 mtime=1234.56789\n";
    bytes.extend_from_slice(&block("pax", pax.len() as u64, b'x'));
    bytes.extend_from_slice(pax);
    bytes.resize(4096, 0);
    bytes.extend_from_slice(&block("m.txt", 0, b'0'));
    let members = parse(&with_end(bytes)).expect("valid");
    assert_eq!(members[0].header.name, long);
    assert_eq!(&members[0].data[..], b"abc");
    assert_eq!(
        (
            members[0].header.header_offset,
            members[0].header.data_offset
        ),
        (0, 1536)
    );
    assert_eq!(
        (members[1].header.name.as_str(), members[1].header.mtime),
        ("m.txt", 1234)
    );
    assert_eq!(members[1].header.header_offset, 3072);
}

#[test]
fn entry_policy_controls_non_regular_entries() {
    let mut bytes = block("./dir/", 0, b'5').to_vec();
    bytes.extend_from_slice(&block("./dir/a.txt", 0, b'0'));
    let mut link = block("dir/l", 0, b'2');
    link[157..162].copy_from_slice(b"a.txt");
    seal(&mut link);
    bytes.extend_from_slice(&link);
    let bytes = with_end(bytes);
    let names = |ms: Vec<Member>| {
        ms.into_iter()
            .map(|m| (m.header.name, m.header.kind))
            .collect::<Vec<_>>()
    };
    let skipped = parse(&bytes).expect("skip");
    assert_eq!(
        names(skipped),
        vec![("dir/a.txt".to_owned(), EntryKind::Regular)]
    );
    let reported = parse_with(
        TarReader::new("t").with_entry_policy(EntryPolicy::Report),
        &bytes,
    )
    .expect("report");
    assert_eq!(reported[2].header.link_name.as_deref(), Some("a.txt"));
    assert_eq!(
        names(reported).iter().map(|(_, k)| *k).collect::<Vec<_>>(),
        vec![EntryKind::Directory, EntryKind::Regular, EntryKind::Symlink]
    );
    let err = parse_with(
        TarReader::new("t").with_entry_policy(EntryPolicy::Error),
        &bytes,
    )
    .expect_err("error");
    assert!(
        matches!(
            err,
            Error::UnsupportedEntry {
                offset: 0,
                kind: "directory",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn oversized_extended_headers_are_refused() {
    let bytes = with_end(block("pax", 2 << 20, b'x').to_vec());
    let err = parse(&bytes).expect_err("too big");
    assert!(
        matches!(err, Error::ExtendedHeaderTooLarge { offset: 0, .. }),
        "{err}"
    );
}

#[test]
fn huge_member_header_round_trips_without_its_data() {
    let size = 9u64 << 30;
    let headers = encode_header("big/sample.bin", size, 0o644, 0).expect("encode");
    assert_eq!(
        headers.len(),
        3 * BLOCK,
        "pax header, its records, ustar header"
    );
    let mut r = TarReader::new("big.tar");
    r.push(Bytes::from(headers));
    let Some(Event::Member(h)) = r.next_event().expect("header") else {
        panic!("no member")
    };
    assert_eq!(
        (h.name.as_str(), h.size, h.header_offset, h.data_offset),
        ("big/sample.bin", size, 0, 1536)
    );
    r.push(Bytes::from_static(&[5u8; 100]));
    assert_eq!(
        r.next_event().expect("data"),
        Some(Event::Data(Bytes::from_static(&[5u8; 100])))
    );
    assert_eq!(r.next_event().expect("needs more"), None);
    r.finish_input();
    assert!(matches!(
        r.next_event(),
        Err(Error::Truncated { offset: 1636, .. })
    ));
}

#[test]
fn data_slices_are_zero_copy_from_the_pushed_chunk() {
    let bytes = Bytes::from(shard(&[("a.bin", &[9u8; 2000])]));
    let mut r = TarReader::new("t");
    r.push(bytes.clone());
    let m = r.next_member().expect("ok").expect("member");
    assert_eq!(m.data.as_ptr(), bytes[512..].as_ptr());
}

#[test]
fn read_members_wraps_std_read() {
    let bytes = shard(&[("a.bin", &[1u8; 300_000]), ("b.bin", b"b")]);
    let members: Vec<_> = read_members(TarReader::new("t"), &bytes[..])
        .collect::<Result<_, _>>()
        .expect("ok");
    assert_eq!(members.len(), 2);
    assert_eq!(members[0].data.len(), 300_000);
    let mut errs = read_members(TarReader::new("t"), &bytes[..1000]);
    assert!(matches!(errs.next(), Some(Err(Error::Truncated { .. }))));
    assert!(errs.next().is_none());
}
