//! Entry points shared by the cargo-fuzz targets in `fuzz/` and the stable
//! fuzz test; they must never panic on any input.

use bytes::Bytes;

use crate::{ShardIndex, TarReader};

/// Runs `data` through [`TarReader`]: the first byte picks a chunk size, the
/// rest is the shard. Returns the number of members read before the end or
/// an error.
pub fn tar_reader(data: &[u8]) -> usize {
    let Some((&first, shard)) = data.split_first() else {
        return 0;
    };
    let chunk = usize::from(first).max(1) * 7;
    let mut reader = TarReader::new("fuzz.tar").with_max_extended_header(64 << 10);
    let mut members = 0;
    for piece in shard.chunks(chunk) {
        reader.push(Bytes::copy_from_slice(piece));
        loop {
            match reader.next_member() {
                Ok(Some(_)) => members += 1,
                Ok(None) => break,
                Err(_) => return members,
            }
        }
    }
    reader.finish_input();
    while let Ok(Some(_)) = reader.next_member() {
        members += 1;
    }
    members
}

/// Runs `data` through [`ShardIndex::parse`]; an index that parses must
/// encode back to the same bytes. Returns whether it parsed.
///
/// If the first byte is odd, the rest gets a correct trailer CRC first so
/// that mutations reach the structure behind the checksum.
pub fn index_parser(data: &[u8]) -> bool {
    let Some((&first, rest)) = data.split_first() else {
        return false;
    };
    let mut input = rest.to_vec();
    if first & 1 == 1 && input.len() >= 4 {
        let body = input.len() - 4;
        let crc = crc32c::crc32c(&input[..body]);
        input[body..].copy_from_slice(&crc.to_le_bytes());
    }
    let data = &input[..];
    let Ok(index) = ShardIndex::parse("fuzz.idx", data) else {
        return false;
    };
    let again = index.to_bytes("fuzz.idx");
    assert!(
        again.as_deref().ok() == Some(data),
        "a parsed index must re-encode to its input"
    );
    true
}

/// Runs `data` through [`read_manifest`](crate::read_manifest) (either format); a manifest
/// that reads must encode to format 2 and read back the same. Returns whether it read.
pub fn manifest_reader(data: &[u8]) -> bool {
    let Ok(manifest) = crate::Manifest::read("fuzz", data) else {
        return false;
    };
    let again = manifest
        .to_binary("fuzz")
        .and_then(|bytes| crate::Manifest::read("fuzz", &bytes[..]));
    // A JSON manifest may hold what format 2 refuses (entries of the other kind listed before
    // `kind`): an error, not a crash. What encodes must read back the same.
    if let Ok(again) = again {
        assert_eq!(
            crate::Manifest {
                format_version: manifest.format_version,
                ..again
            },
            manifest,
            "a manifest that reads encodes and reads back the same"
        );
    }
    true
}
