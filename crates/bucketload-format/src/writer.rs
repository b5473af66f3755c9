//! Streaming tar writer producing reproducible ustar/PAX shards.

use bytes::BufMut;
use md5::{Digest, Md5};

use crate::Error;
use crate::header::{self, BLOCK, MAX_OCTAL_SIZE, field};
use crate::reader::padded;

/// Modification time written for every member unless overridden: the epoch,
/// so that the same inputs always give byte-identical shards.
pub const DEFAULT_MTIME: u64 = 0;

/// Permission bits written for every member unless overridden.
pub const DEFAULT_MODE: u32 = 0o644;

/// Name of the PAX extended header entries we write.
const PAX_NAME: &str = "././@PaxHeader";

static ZEROS: [u8; 2 * BLOCK] = [0; 2 * BLOCK];

/// Where a member landed in the shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberLocation {
    /// Offset of the member's first header block (PAX header if any).
    pub header_offset: u64,
    /// Offset of its first data byte.
    pub data_offset: u64,
    /// Data size.
    pub size: u64,
}

/// The whole shard, reported by [`TarWriter::finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardSummary {
    /// Total size in bytes.
    pub size: u64,
    /// CRC32C (Castagnoli) of the whole shard.
    pub crc32c: u32,
    /// MD5 of the whole shard (the ETag of a single-part upload); all zeros when not computed.
    pub md5: [u8; 16],
    /// Number of members written.
    pub members: u64,
}

#[derive(Debug, Clone, Copy)]
struct Open {
    remaining: u64,
    pad: u64,
}

/// Appends members to caller-owned buffers (`Vec<u8>`, `BytesMut`, any
/// [`BufMut`]); the caller drains them into multipart parts between calls.
/// Checksums of everything written are computed on the way.
#[derive(Debug)]
pub struct TarWriter {
    shard: String,
    mtime: u64,
    mode: u32,
    offset: u64,
    crc: u32,
    md5: Option<Md5>,
    open: Option<Open>,
    members: u64,
}

impl TarWriter {
    /// A writer for the shard called `shard` (used in errors).
    pub fn new(shard: impl Into<String>) -> TarWriter {
        TarWriter {
            shard: shard.into(),
            mtime: DEFAULT_MTIME,
            mode: DEFAULT_MODE,
            offset: 0,
            crc: 0,
            md5: Some(Md5::new()),
            open: None,
            members: 0,
        }
    }

    /// Sets the modification time written for members (default 0).
    pub fn with_mtime(mut self, mtime: u64) -> TarWriter {
        self.mtime = mtime;
        self
    }

    /// Sets the permission bits written for members (default `0o644`).
    pub fn with_mode(mut self, mode: u32) -> TarWriter {
        self.mode = mode & 0o7777;
        self
    }

    /// Whether the writer computes the shard's MD5 (default: yes). A caller that hashes the
    /// bytes elsewhere (e.g. on another thread, as they are uploaded) turns it off; the
    /// summary's `md5` is then all zeros for the caller to fill in.
    pub fn with_md5(mut self, yes: bool) -> TarWriter {
        self.md5 = yes.then(Md5::new);
        self
    }

    /// Bytes written so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Writes a whole member.
    pub fn append<B: BufMut>(
        &mut self,
        sink: &mut B,
        name: &str,
        data: &[u8],
    ) -> Result<MemberLocation, Error> {
        let location = self.start_member(sink, name, data.len() as u64)?;
        self.write_data(sink, data)?;
        Ok(location)
    }

    /// Writes the header(s) of a member of `size` bytes whose data follows
    /// through [`TarWriter::write_data`] calls.
    pub fn start_member<B: BufMut>(
        &mut self,
        sink: &mut B,
        name: &str,
        size: u64,
    ) -> Result<MemberLocation, Error> {
        if self.open.is_some() {
            return Err(
                self.misuse("a member was started before the previous one's data was complete")
            );
        }
        let headers = encode_header(name, size, self.mode, self.mtime).map_err(|reason| {
            Error::InvalidMember {
                shard: self.shard.clone(),
                name: name.to_owned(),
                reason,
            }
        })?;
        let header_offset = self.offset;
        self.emit(sink, &headers);
        self.members += 1;
        self.open = Some(Open {
            remaining: size,
            pad: padded(size) - size,
        });
        self.close_if_complete(sink);
        Ok(MemberLocation {
            header_offset,
            data_offset: self.offset_of_data(header_offset, headers.len()),
            size,
        })
    }

    fn offset_of_data(&self, header_offset: u64, header_len: usize) -> u64 {
        header_offset + header_len as u64
    }

    /// Writes the next bytes of the open member's data.
    pub fn write_data<B: BufMut>(&mut self, sink: &mut B, data: &[u8]) -> Result<(), Error> {
        let Some(open) = self.open.as_mut() else {
            if data.is_empty() {
                return Ok(());
            }
            return Err(self.misuse("data written with no member open"));
        };
        if data.len() as u64 > open.remaining {
            let reason = format!(
                "{} bytes written but only {} remain in the member",
                data.len(),
                open.remaining
            );
            return Err(self.misuse(&reason));
        }
        open.remaining -= data.len() as u64;
        self.emit(sink, data);
        self.close_if_complete(sink);
        Ok(())
    }

    /// Writes the two end-of-archive zero blocks and reports the shard's
    /// size and checksums.
    pub fn finish<B: BufMut>(mut self, sink: &mut B) -> Result<ShardSummary, Error> {
        if let Some(open) = self.open {
            let reason = format!(
                "finished with {} bytes of the last member unwritten",
                open.remaining
            );
            return Err(self.misuse(&reason));
        }
        self.emit(sink, &ZEROS);
        Ok(ShardSummary {
            size: self.offset,
            crc32c: self.crc,
            md5: self.md5.map_or([0; 16], |m| m.finalize().into()),
            members: self.members,
        })
    }

    fn close_if_complete<B: BufMut>(&mut self, sink: &mut B) {
        if let Some(open) = self.open.filter(|o| o.remaining == 0) {
            self.emit(sink, &ZEROS[..open.pad as usize]);
            self.open = None;
        }
    }

    fn emit<B: BufMut>(&mut self, sink: &mut B, bytes: &[u8]) {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        if let Some(md5) = self.md5.as_mut() {
            md5.update(bytes);
        }
        self.offset += bytes.len() as u64;
        sink.put_slice(bytes);
    }

    fn misuse(&self, reason: &str) -> Error {
        Error::WriterState {
            shard: self.shard.clone(),
            offset: self.offset,
            reason: reason.to_owned(),
        }
    }
}

/// Encodes the header block(s) of a regular-file member: a PAX header when
/// the name is not ASCII or does not fit ustar's prefix/name split, or the
/// size is 8 GiB or more, followed by the ustar header.
pub fn encode_header(name: &str, size: u64, mode: u32, mtime: u64) -> Result<Vec<u8>, String> {
    header::check_name(name).map_err(str::to_owned)?;
    if name.ends_with('/') {
        return Err("names ending in `/` denote directories".into());
    }
    let split = if name.is_ascii() {
        split_ustar(name)
    } else {
        None
    };
    let mut records = Vec::new();
    if split.is_none() {
        records.extend(pax_record("path", name));
    }
    if size > MAX_OCTAL_SIZE {
        records.extend(pax_record("size", &size.to_string()));
    }
    let mut out = Vec::with_capacity(3 * BLOCK + records.len());
    if !records.is_empty() {
        let pax = ustar_block(
            PAX_NAME.as_bytes(),
            b"",
            records.len() as u64,
            0o644,
            mtime,
            b'x',
        );
        out.extend_from_slice(&pax);
        out.extend_from_slice(&records);
        out.resize(padded(out.len() as u64) as usize, 0);
    }
    let (prefix, short) = match split {
        Some((prefix, short)) => (prefix.as_bytes(), short.as_bytes()),
        None => (&b""[..], truncate_at_char(name, 100).as_bytes()),
    };
    out.extend_from_slice(&ustar_block(short, prefix, size, mode, mtime, b'0'));
    Ok(out)
}

/// Splits `name` into ustar `(prefix, name)` fields if it fits.
fn split_ustar(name: &str) -> Option<(&str, &str)> {
    if name.len() <= 100 {
        return Some(("", name));
    }
    name.rmatch_indices('/')
        .map(|(i, _)| (&name[..i], &name[i + 1..]))
        .find(|(prefix, rest)| prefix.len() <= 155 && !rest.is_empty() && rest.len() <= 100)
}

fn truncate_at_char(name: &str, max: usize) -> &str {
    let mut end = name.len().min(max);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// One `"<len> key=value\n"` record; `len` counts its own digits.
fn pax_record(key: &str, value: &str) -> Vec<u8> {
    let body = key.len() + value.len() + 3;
    let mut len = body + 1;
    while len != body + len.to_string().len() {
        len = body + len.to_string().len();
    }
    format!("{len} {key}={value}\n").into_bytes()
}

pub(crate) fn ustar_block(
    name: &[u8],
    prefix: &[u8],
    size: u64,
    mode: u32,
    mtime: u64,
    flag: u8,
) -> [u8; BLOCK] {
    let mut block = [0u8; BLOCK];
    block[..name.len()].copy_from_slice(name);
    put(&mut block, field::MODE, u64::from(mode));
    put(&mut block, field::UID, 0);
    put(&mut block, field::GID, 0);
    put(&mut block, field::SIZE, size);
    put(&mut block, field::MTIME, mtime);
    block[field::TYPEFLAG] = flag;
    block[field::MAGIC.0..field::MAGIC.0 + 8].copy_from_slice(b"ustar\x0000");
    block[field::PREFIX.0..field::PREFIX.0 + prefix.len()].copy_from_slice(prefix);
    header::seal(&mut block);
    block
}

fn put(block: &mut [u8; BLOCK], (start, len): (usize, usize), value: u64) {
    // Every value passed here fits octal or base-256 in its field.
    let fits = header::put_number(&mut block[start..start + len], value);
    debug_assert!(fits);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pax_record_lengths_count_themselves() {
        assert_eq!(pax_record("path", "a"), b"9 path=a\n");
        for n in [1, 90, 91, 92, 992, 993, 994, 995, 9990] {
            let value = "x".repeat(n);
            let record = pax_record("path", &value);
            let text = String::from_utf8(record.clone()).expect("ascii");
            let (len, _) = text.split_once(' ').expect("space");
            assert_eq!(len.parse::<usize>().expect("digits"), record.len(), "n={n}");
        }
    }

    #[test]
    fn ustar_split_prefers_the_longest_prefix() {
        let name = format!("{}/{}/{}", "a".repeat(60), "b".repeat(60), "c".repeat(60));
        let (prefix, short) = split_ustar(&name).expect("splits");
        assert_eq!(prefix.len(), 121);
        assert_eq!(short, "c".repeat(60));
        assert!(split_ustar(&"x".repeat(101)).is_none());
        assert!(split_ustar(&format!("{}/{}", "p".repeat(156), "n")).is_none());
    }

    #[test]
    fn invalid_names_are_refused() {
        for bad in ["", "/abs", "a/../b", "dir/", "a\0b"] {
            assert!(encode_header(bad, 0, 0o644, 0).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn writer_refuses_misuse() {
        let mut sink = Vec::new();
        let mut w = TarWriter::new("s.tar");
        w.start_member(&mut sink, "a.bin", 4).expect("header");
        let err = w.write_data(&mut sink, b"12345").expect_err("too much");
        assert!(
            matches!(err, Error::WriterState { offset: 512, .. }),
            "{err}"
        );
        assert!(w.start_member(&mut sink, "b.bin", 1).is_err());
        w.write_data(&mut sink, b"1234").expect("fits");
        let summary = w.finish(&mut sink).expect("finish");
        assert_eq!(summary.size, 4 * 512);
        assert_eq!(summary.crc32c, crc32c::crc32c(&sink));
    }
}
