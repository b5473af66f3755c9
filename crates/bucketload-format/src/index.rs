//! The binary shard index (`<shard>.idx`), specified in `docs/FORMATS.md`.

use crate::Error;
use crate::header::BLOCK;
use crate::wds::split_key;
use crate::writer::{MemberLocation, ShardSummary};

/// First eight bytes of every index.
pub const INDEX_MAGIC: [u8; 8] = *b"BLINDEX\0";

/// The index format version this crate writes and reads.
pub const INDEX_VERSION: u32 = 1;

const HEADER_LEN: usize = 64;
const TRAILER_LEN: usize = 4;
const MEMBER_FIXED: usize = 1 + 8 + 8 + 8 + 4;

/// One member of an indexed sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexMember {
    /// Extension (`jpg`, `cls`, `seg.png`).
    pub ext: String,
    /// Offset of the member's first header block.
    pub header_offset: u64,
    /// Offset of its data.
    pub data_offset: u64,
    /// Data size.
    pub size: u64,
    /// CRC32C of the data.
    pub crc32c: u32,
}

/// One indexed sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSample {
    /// WebDataset key.
    pub key: String,
    /// Members in shard order.
    pub members: Vec<IndexMember>,
}

impl IndexSample {
    /// Byte range `[start, end)` covering the sample's headers and data, for
    /// one ranged GET (`end` excludes the last member's padding).
    pub fn byte_range(&self) -> Option<(u64, u64)> {
        let first = self.members.first()?;
        let last = self.members.last()?;
        Some((first.header_offset, last.data_offset + last.size))
    }
}

/// The index of one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardIndex {
    /// Size of the shard in bytes.
    pub shard_size: u64,
    /// CRC32C of the whole shard.
    pub shard_crc32c: u32,
    /// MD5 of the whole shard; all zeros when it was not computed (`shard --md5` computes
    /// it).
    pub shard_md5: [u8; 16],
    /// Samples in shard order.
    pub samples: Vec<IndexSample>,
}

impl ShardIndex {
    /// The shard's MD5, if it was computed.
    pub fn md5(&self) -> Option<[u8; 16]> {
        (self.shard_md5 != [0; 16]).then_some(self.shard_md5)
    }

    /// Number of members over all samples.
    pub fn member_count(&self) -> u64 {
        self.samples.iter().map(|s| s.members.len() as u64).sum()
    }

    /// Encodes the index. Fails if a key exceeds 65535 bytes, an extension
    /// 255 bytes, or a sample has more than 65535 members.
    pub fn to_bytes(&self, index_name: &str) -> Result<Vec<u8>, Error> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.samples.len() * 64);
        out.extend_from_slice(&INDEX_MAGIC);
        out.extend_from_slice(&INDEX_VERSION.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.shard_size.to_le_bytes());
        out.extend_from_slice(&self.shard_crc32c.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.shard_md5);
        out.extend_from_slice(&(self.samples.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.member_count().to_le_bytes());
        for sample in &self.samples {
            encode_sample(&mut out, sample).map_err(|reason| Error::InvalidMember {
                shard: index_name.to_owned(),
                name: sample.key.clone(),
                reason,
            })?;
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Checks that the index describes the shard `shard` (name or URI, for errors) of
    /// `shard_size` bytes, before any of its offsets is used to read it: the sizes agree, every
    /// sample has members, every member's header and data start on a tar block, its data
    /// follows its header and ends inside the shard, and members follow one another in shard
    /// order without overlapping. [`ShardIndex::parse`] checks only what the index says of
    /// itself; a loader calls this too.
    pub fn validate(&self, index_name: &str, shard: &str, shard_size: u64) -> Result<(), Error> {
        let fail = |reason: String| Error::IndexLayout {
            index: index_name.to_owned(),
            shard: shard.to_owned(),
            reason,
        };
        if self.shard_size != shard_size {
            return Err(fail(format!(
                "it describes a {}-byte shard, the shard is {shard_size} bytes",
                self.shard_size
            )));
        }
        let mut end = 0;
        for sample in &self.samples {
            if sample.members.is_empty() {
                return Err(fail(format!("sample {:?} has no members", sample.key)));
            }
            for m in &sample.members {
                end = check_member(&sample.key, m, end, shard_size).map_err(fail)?;
            }
        }
        Ok(())
    }

    /// Parses and validates an index named `index_name` (used in errors).
    pub fn parse(index_name: &str, bytes: &[u8]) -> Result<ShardIndex, Error> {
        Parser {
            name: index_name,
            bytes,
            pos: 0,
        }
        .index()
    }
}

/// Checks one member against the end of the member before it; returns the end of its data.
fn check_member(key: &str, m: &IndexMember, prev_end: u64, shard_size: u64) -> Result<u64, String> {
    let name = format!("member {key}.{}", m.ext);
    let block = BLOCK as u64;
    if !m.header_offset.is_multiple_of(block) || !m.data_offset.is_multiple_of(block) {
        return Err(format!(
            "{name} (header at byte {}, data at byte {}) does not start on a {block}-byte tar block",
            m.header_offset, m.data_offset
        ));
    }
    if m.header_offset < prev_end {
        return Err(format!(
            "{name} starts at byte {} but the member before it in the index ends at byte \
             {prev_end}: members are out of order or overlap",
            m.header_offset
        ));
    }
    if m.header_offset
        .checked_add(block)
        .is_none_or(|h| h > m.data_offset)
    {
        return Err(format!(
            "{name} has its data at byte {}, inside its header at byte {}",
            m.data_offset, m.header_offset
        ));
    }
    match m.data_offset.checked_add(m.size) {
        Some(end) if end <= shard_size => Ok(end),
        _ => Err(format!(
            "{name} ({} bytes at byte {}) ends past the shard's {shard_size} bytes",
            m.size, m.data_offset
        )),
    }
}

fn encode_sample(out: &mut Vec<u8>, sample: &IndexSample) -> Result<(), String> {
    let key_len = u16::try_from(sample.key.len()).map_err(|_| "key longer than 65535 bytes")?;
    let count = u16::try_from(sample.members.len()).map_err(|_| "more than 65535 members")?;
    out.extend_from_slice(&key_len.to_le_bytes());
    out.extend_from_slice(sample.key.as_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    for m in &sample.members {
        let ext_len = u8::try_from(m.ext.len()).map_err(|_| "extension longer than 255 bytes")?;
        out.push(ext_len);
        out.extend_from_slice(m.ext.as_bytes());
        out.extend_from_slice(&m.header_offset.to_le_bytes());
        out.extend_from_slice(&m.data_offset.to_le_bytes());
        out.extend_from_slice(&m.size.to_le_bytes());
        out.extend_from_slice(&m.crc32c.to_le_bytes());
    }
    Ok(())
}

struct Parser<'a> {
    name: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn fail(&self, offset: usize, reason: impl Into<String>) -> Error {
        Error::CorruptIndex {
            index: self.name.to_owned(),
            offset: offset as u64,
            reason: reason.into(),
        }
    }

    fn index(mut self) -> Result<ShardIndex, Error> {
        if self.bytes.len() < HEADER_LEN + TRAILER_LEN {
            return Err(self.fail(
                self.bytes.len(),
                format!(
                    "{} bytes is shorter than the smallest index",
                    self.bytes.len()
                ),
            ));
        }
        if self.bytes[..8] != INDEX_MAGIC {
            return Err(self.fail(0, "bad magic; this is not a bucketload shard index"));
        }
        let body_len = self.bytes.len() - TRAILER_LEN;
        let stored = u32::from_le_bytes(self.fixed::<4>(body_len));
        let computed = crc32c::crc32c(&self.bytes[..body_len]);
        if stored != computed {
            return Err(self.fail(
                body_len,
                format!("checksum mismatch (stored {stored:08x}, computed {computed:08x})"),
            ));
        }
        self.bytes = &self.bytes[..body_len];
        self.pos = 8;
        let version = self.u32()?;
        if version != INDEX_VERSION {
            return Err(self.fail(
                8,
                format!("unsupported version {version}; upgrade bucketload"),
            ));
        }
        if self.u32()? != 0 {
            return Err(self.fail(12, "unknown flags"));
        }
        let shard_size = self.u64()?;
        let shard_crc32c = self.u32()?;
        if self.u32()? != 0 {
            return Err(self.fail(28, "reserved field is not zero"));
        }
        let shard_md5 = self.fixed::<16>(self.pos);
        self.pos += 16;
        let sample_count = self.u64()?;
        let member_count = self.u64()?;
        let samples = self.samples(sample_count, member_count, shard_size)?;
        Ok(ShardIndex {
            shard_size,
            shard_crc32c,
            shard_md5,
            samples,
        })
    }

    fn samples(
        &mut self,
        sample_count: u64,
        member_count: u64,
        shard_size: u64,
    ) -> Result<Vec<IndexSample>, Error> {
        let mut samples = Vec::with_capacity((sample_count as usize).min(self.bytes.len() / 4));
        let mut members_seen = 0u64;
        for _ in 0..sample_count {
            let sample = self.sample(shard_size)?;
            members_seen += sample.members.len() as u64;
            samples.push(sample);
        }
        if self.pos != self.bytes.len() {
            return Err(self.fail(self.pos, "bytes follow the last sample"));
        }
        if members_seen != member_count {
            return Err(self.fail(
                56,
                format!("header counts {member_count} members but samples hold {members_seen}"),
            ));
        }
        Ok(samples)
    }

    fn sample(&mut self, shard_size: u64) -> Result<IndexSample, Error> {
        let key_len = self.u16()? as usize;
        let key = self.text(key_len)?;
        let count = self.u16()? as usize;
        let mut members = Vec::with_capacity(count.min(self.remaining() / MEMBER_FIXED));
        for _ in 0..count {
            let at = self.pos;
            let ext_len = self.u8()? as usize;
            let ext = self.text(ext_len)?;
            let m = IndexMember {
                ext,
                header_offset: self.u64()?,
                data_offset: self.u64()?,
                size: self.u64()?,
                crc32c: self.u32()?,
            };
            let end = m.data_offset.checked_add(m.size);
            if m.header_offset >= m.data_offset || end.is_none_or(|e| e > shard_size) {
                return Err(self.fail(
                    at,
                    format!(
                        "member {key}.{} lies outside the {shard_size}-byte shard",
                        m.ext
                    ),
                ));
            }
            members.push(m);
        }
        Ok(IndexSample { key, members })
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&[u8], Error> {
        if self.remaining() < n {
            return Err(self.fail(
                self.pos,
                format!("needs {n} bytes but {} remain", self.remaining()),
            ));
        }
        let slice = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(slice)
    }

    fn fixed<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&self.bytes[at..at + N]);
        out
    }

    fn text(&mut self, n: usize) -> Result<String, Error> {
        let at = self.pos;
        let raw = self.take(n)?;
        std::str::from_utf8(raw)
            .map(str::to_owned)
            .map_err(|_| self.fail(at, "string is not UTF-8"))
    }

    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, Error> {
        let raw = self.take(2)?;
        Ok(u16::from_le_bytes([raw[0], raw[1]]))
    }

    fn u32(&mut self) -> Result<u32, Error> {
        let raw = self.take(4)?;
        Ok(u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]))
    }

    fn u64(&mut self) -> Result<u64, Error> {
        let raw = self.take(8)?;
        let mut out = [0u8; 8];
        out.copy_from_slice(raw);
        Ok(u64::from_le_bytes(out))
    }
}

/// Builds a [`ShardIndex`] while a [`TarWriter`](crate::TarWriter) writes
/// the shard: feed it each member's name and location, then the summary.
#[derive(Debug, Default)]
pub struct ShardIndexBuilder {
    samples: Vec<IndexSample>,
}

impl ShardIndexBuilder {
    /// An empty builder.
    pub fn new() -> ShardIndexBuilder {
        ShardIndexBuilder::default()
    }

    /// Records a member whose whole data is at hand (its CRC32C is computed
    /// here).
    pub fn add(&mut self, name: &str, location: MemberLocation, data: &[u8]) {
        self.add_with_crc(name, location, crc32c::crc32c(data));
    }

    /// Records a member whose data CRC32C the caller computed.
    pub fn add_with_crc(&mut self, name: &str, location: MemberLocation, crc: u32) {
        let (key, ext) = split_key(name);
        let member = IndexMember {
            ext: ext.to_owned(),
            header_offset: location.header_offset,
            data_offset: location.data_offset,
            size: location.size,
            crc32c: crc,
        };
        match self.samples.last_mut().filter(|s| s.key == key) {
            Some(sample) => sample.members.push(member),
            None => self.samples.push(IndexSample {
                key: key.to_owned(),
                members: vec![member],
            }),
        }
    }

    /// The finished index.
    pub fn finish(self, summary: &ShardSummary) -> ShardIndex {
        ShardIndex {
            shard_size: summary.size,
            shard_crc32c: summary.crc32c,
            shard_md5: summary.md5,
            samples: self.samples,
        }
    }
}
