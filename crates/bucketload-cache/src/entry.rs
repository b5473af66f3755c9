//! The on-disk layout of one entry: a self-describing header followed by
//! the body. Pure: bytes in, typed values out.
//!
//! ```text
//! offset size  field
//!      0    8  magic "BLCACHE\0"
//!      8    4  version (1)
//!     12    4  header length H (fixed part + names)
//!     16    8  body length
//!     24    8  object size (whole object, also for range entries)
//!     32    8  range start   (0 when the entry is a whole object)
//!     40    8  range end     (0 when the entry is a whole object)
//!     48    4  flags: bit 0 range present, bit 1 ETag present
//!     52    4  CRC32C of the body
//!     56    4  store length S
//!     60    4  key length K
//!     64    4  ETag length E
//!     68    4  CRC32C of the header, bytes 0..68 and 72..H
//!     72    S  store, then K key, then E ETag (UTF-8)
//!      H       body
//! ```
//!
//! All integers are little-endian.

use std::ops::Range;

use crate::key::{CacheKey, ObjectVersion};

/// First eight bytes of every entry file.
pub const ENTRY_MAGIC: [u8; 8] = *b"BLCACHE\0";
/// Version of the entry layout written by this crate.
pub const ENTRY_VERSION: u32 = 1;
/// Size of the fixed part of the header.
const FIXED: usize = 72;
const FLAG_RANGE: u32 = 1;
const FLAG_ETAG: u32 = 2;

/// What a decoded header says about its entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub store: String,
    pub key: String,
    pub range: Option<Range<u64>>,
    pub version: ObjectVersion,
    pub header_len: usize,
    pub body_len: u64,
    pub body_crc: u32,
}

impl Header {
    /// Whether this header files the bytes of `key`.
    pub fn is_for(&self, key: &CacheKey) -> bool {
        self.store == key.store() && self.key == key.key() && self.range == key.range()
    }
}

/// The header for a body of `body_len` bytes with CRC32C `body_crc`, filed under `key` and
/// `version`.
pub(crate) fn encode_header(
    key: &CacheKey,
    version: &ObjectVersion,
    body_len: u64,
    body_crc: u32,
) -> Vec<u8> {
    let etag = version.etag.as_ref().map_or("", |e| e.as_str());
    let names = [
        key.store().as_bytes(),
        key.key().as_bytes(),
        etag.as_bytes(),
    ];
    let header_len = FIXED + names.iter().map(|n| n.len()).sum::<usize>();
    let range = key.range();
    let mut flags = 0;
    if range.is_some() {
        flags |= FLAG_RANGE;
    }
    if version.etag.is_some() {
        flags |= FLAG_ETAG;
    }
    let range = range.unwrap_or(0..0);
    let mut h = Vec::with_capacity(header_len);
    h.extend_from_slice(&ENTRY_MAGIC);
    h.extend_from_slice(&ENTRY_VERSION.to_le_bytes());
    h.extend_from_slice(&(header_len as u32).to_le_bytes());
    for v in [body_len, version.size, range.start, range.end] {
        h.extend_from_slice(&v.to_le_bytes());
    }
    h.extend_from_slice(&flags.to_le_bytes());
    h.extend_from_slice(&body_crc.to_le_bytes());
    for n in names {
        h.extend_from_slice(&(n.len() as u32).to_le_bytes());
    }
    h.extend_from_slice(&[0; 4]);
    for n in names {
        h.extend_from_slice(n);
    }
    let crc = header_crc(&h);
    h[68..72].copy_from_slice(&crc.to_le_bytes());
    h
}

/// CRC32C of a header, its own CRC field excluded.
fn header_crc(h: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&h[..68]), &h[72..])
}

/// Why an entry file cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damage(pub &'static str);

/// Decodes and checks the header at the start of `file`, and checks that
/// the rest of `file` is exactly the body it describes, with the right CRC.
pub(crate) fn decode(file: &[u8]) -> Result<Header, Damage> {
    let header = decode_known(file)?;
    if crc32c::crc32c(&file[header.header_len..]) != header.body_crc {
        return Err(Damage("body checksum mismatch"));
    }
    Ok(header)
}

/// [`decode`] of a file whose body was checked before, unchanged since: everything but the
/// body's CRC.
pub(crate) fn decode_known(file: &[u8]) -> Result<Header, Damage> {
    let header = decode_header(file)?;
    if (file.len() - header.header_len) as u64 != header.body_len {
        return Err(Damage(
            "body length differs from the header (truncated entry)",
        ));
    }
    Ok(header)
}

fn decode_header(file: &[u8]) -> Result<Header, Damage> {
    if file.len() < FIXED || file[..8] != ENTRY_MAGIC {
        return Err(Damage("not an entry (bad magic or too short)"));
    }
    if u32_at(file, 8) != ENTRY_VERSION {
        return Err(Damage("unknown entry version"));
    }
    let header_len = u32_at(file, 12) as usize;
    let lens = [56, 60, 64].map(|at| u32_at(file, at) as usize);
    if header_len > file.len() || header_len != FIXED + lens.iter().sum::<usize>() {
        return Err(Damage("header length inconsistent"));
    }
    if header_crc(&file[..header_len]) != u32_at(file, 68) {
        return Err(Damage("header checksum mismatch"));
    }
    let mut at = FIXED;
    let mut next = |len: usize| {
        let name = std::str::from_utf8(&file[at..at + len]).map(str::to_owned);
        at += len;
        name
    };
    let (Ok(store), Ok(key), Ok(etag)) = (next(lens[0]), next(lens[1]), next(lens[2])) else {
        return Err(Damage("names are not UTF-8"));
    };
    let flags = u32_at(file, 48);
    let range = (flags & FLAG_RANGE != 0).then(|| u64_at(file, 32)..u64_at(file, 40));
    // Parsed, so an entry written with a quoted ETag serves a lookup with a bare one.
    let etag = (flags & FLAG_ETAG != 0).then(|| bucketload_store::ETag::parse(&etag));
    Ok(Header {
        store,
        key,
        range,
        version: ObjectVersion::with_etag(etag, u64_at(file, 24)),
        header_len,
        body_len: u64_at(file, 16),
        body_crc: u32_at(file, 52),
    })
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (CacheKey, ObjectVersion, Vec<u8>) {
        let key = CacheKey::new("s3://bucket/data", "train/0001.jpg").with_range(100..110);
        (
            key,
            ObjectVersion::new("\"e1\"", 1000),
            b"0123456789".to_vec(),
        )
    }

    fn file() -> Vec<u8> {
        let (key, version, body) = sample();
        let mut f = encode_header(&key, &version, body.len() as u64, crc32c::crc32c(&body));
        f.extend_from_slice(&body);
        f
    }

    #[test]
    fn round_trip() {
        let (key, version, body) = sample();
        let f = file();
        let h = decode(&f).expect("valid entry");
        assert!(h.is_for(&key));
        assert_eq!(h.version, version);
        assert_eq!(&f[h.header_len..], &body[..]);
        let whole = CacheKey::new("s", "k");
        let mut f = encode_header(&whole, &ObjectVersion::size_only(0), 0, crc32c::crc32c(b""));
        let h = decode(&f).expect("empty body");
        assert!(h.is_for(&whole) && h.version.etag.is_none() && h.range.is_none());
        f.push(0);
        assert!(decode(&f).is_err());
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let f = file();
        for i in 0..f.len() {
            let mut g = f.clone();
            g[i] ^= 0x40;
            assert!(decode(&g).is_err(), "flip at byte {i} went unnoticed");
        }
    }

    #[test]
    fn every_truncation_is_detected() {
        let f = file();
        for len in 0..f.len() {
            assert!(
                decode(&f[..len]).is_err(),
                "truncation to {len} went unnoticed"
            );
        }
    }
}
