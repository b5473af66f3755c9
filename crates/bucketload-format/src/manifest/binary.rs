//! Format 2 of the manifest (`_bucketload/manifest.bin`): a header, blocks of front-coded
//! entries each compressed with zstd and checksummed, and a trailer with the counts, the class
//! counts and a checksum of the whole object. Written and read as a stream: the writer holds
//! one block, the reader one block and the previous name. The layout is in docs/FORMATS.md.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use super::stream::{Entry, EntryCheck, EntrySink, ManifestHeader, of_kind};
use super::{ClassCount, DatasetKind, FileEntry, Parameters, ShardEntry};
use crate::Error;

/// First bytes of a format-2 manifest (a non-ASCII byte, then text that line-ending and 7-bit
/// conversions would damage, as PNG's signature does).
pub const MANIFEST2_MAGIC: [u8; 8] = *b"\x89BLMF\r\n\x1a";
pub(crate) const MAGIC: [u8; 8] = MANIFEST2_MAGIC;
/// Last bytes of a format-2 manifest.
const END_MAGIC: [u8; 8] = *b"BLMF-END";
/// The version this module writes.
pub(crate) const VERSION: u32 = 2;
/// Uncompressed bytes at which the writer closes a block: large enough to compress keys well,
/// small enough that a block decodes inside the L2 cache.
const BLOCK_TARGET: usize = 256 << 10;
/// Largest block (either size) or metadata section a reader accepts; writers stay far below,
/// so a damaged length cannot make the reader allocate gigabytes.
const MAX_SECTION: u32 = 64 << 20;
/// zstd's default level: ~300 MB/s to compress, a ratio close to level 9 on sorted keys.
const LEVEL: i32 = 3;

const KIND_FILES: u8 = 0;
const KIND_SHARDS: u8 = 1;

/// How a checksum-like text field is stored.
const TEXT_NONE: u8 = 0;
const TEXT_BINARY: u8 = 1;
const TEXT_RAW: u8 = 2;
/// An ETag `<32 hex>-<parts>` (a multipart upload's).
const ETAG_MULTIPART: u8 = 3;

/// The trailer's JSON section: what a writer streaming entries knows only at the end (the
/// label policy, for one, depends on every key).
#[derive(Serialize, Deserialize)]
struct TrailerMeta {
    parameters: Parameters,
    #[serde(default)]
    classes: Vec<ClassCount>,
}

/// Writes a format-2 manifest to any [`Write`], one entry at a time, in strictly increasing
/// name order (an entry out of order is an error naming it). Nothing is complete until
/// [`finish`](ManifestWriter::finish) wrote the trailer: a reader refuses a manifest without
/// it.
#[derive(Debug)]
pub struct ManifestWriter<W: Write> {
    name: String,
    out: W,
    kind: DatasetKind,
    written: u64,
    crc: u32,
    raw: Vec<u8>,
    stored: Vec<u8>,
    block_entries: u32,
    previous: String,
    check: EntryCheck,
    blocks: u64,
}

impl<W: Write> ManifestWriter<W> {
    /// Starts the manifest named `name` (used in errors) of a `kind` dataset, writing its
    /// header to `out`.
    pub fn new(name: &str, out: W, kind: DatasetKind) -> Result<ManifestWriter<W>, Error> {
        // Reserved for metadata known up front; readers ignore what they do not know.
        let meta = b"{}";
        let mut writer = ManifestWriter {
            name: name.to_owned(),
            out,
            kind,
            written: 0,
            crc: 0,
            raw: Vec::with_capacity(BLOCK_TARGET + 4096),
            stored: Vec::new(),
            block_entries: 0,
            previous: String::new(),
            check: EntryCheck::new(),
            blocks: 0,
        };
        let mut header = Vec::with_capacity(24 + meta.len());
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&VERSION.to_le_bytes());
        header.push(match kind {
            DatasetKind::Files => KIND_FILES,
            DatasetKind::Shards => KIND_SHARDS,
        });
        header.extend_from_slice(&[0; 3]);
        header.extend_from_slice(&len32(meta.len()).to_le_bytes());
        header.extend_from_slice(meta);
        let crc = crc32c::crc32c(&header);
        header.extend_from_slice(&crc.to_le_bytes());
        writer.emit(&header)?;
        Ok(writer)
    }

    /// Appends a shard (a `shards` manifest only).
    pub fn push_shard(&mut self, shard: &ShardEntry) -> Result<(), Error> {
        self.admit(Entry::Shard(shard))?;
        self.front_code(&shard.name);
        let flags_at = self.raw.len();
        self.raw.push(0);
        let mut flags = 0u8;
        if shard.index != format!("{}.idx", shard.name) {
            flags |= 1;
            put_text(&mut self.raw, &shard.index);
        }
        put_varint(&mut self.raw, shard.samples);
        put_varint(&mut self.raw, shard.bytes);
        flags |= put_hex(&mut self.raw, &shard.crc32c, 4) << 1;
        flags |= put_hex(&mut self.raw, &shard.md5, 16) << 3;
        self.raw[flags_at] = flags;
        self.entry_done()
    }

    /// Appends a file (a `files` manifest only).
    pub fn push_file(&mut self, file: &FileEntry) -> Result<(), Error> {
        self.admit(Entry::File(file))?;
        self.front_code(&file.key);
        put_varint(&mut self.raw, file.size);
        let flags_at = self.raw.len();
        self.raw.push(0);
        let etag = match file.etag.as_deref() {
            None => TEXT_NONE,
            Some(etag) => put_etag(&mut self.raw, etag),
        };
        let crc = match file.crc32c.as_deref() {
            None => TEXT_NONE,
            // An empty CRC32C is not "no CRC32C": keep it as text.
            Some("") => {
                put_text(&mut self.raw, "");
                TEXT_RAW
            }
            Some(crc) => put_hex(&mut self.raw, crc, 4),
        };
        self.raw[flags_at] = etag | crc << 2;
        self.entry_done()
    }

    /// Appends either kind of entry.
    pub fn push(&mut self, entry: Entry<'_>) -> Result<(), Error> {
        match entry {
            Entry::Shard(s) => self.push_shard(s),
            Entry::File(f) => self.push_file(f),
        }
    }

    /// The output, e.g. to drain what was written so far.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Entries appended so far.
    pub fn entries(&self) -> u64 {
        self.check.entries
    }

    /// Writes the last block and the trailer with `parameters` and `classes` (sorted by name;
    /// empty without labels) and returns the output and the manifest's header (totals summed over the
    /// entries).
    pub fn finish(
        mut self,
        parameters: Parameters,
        classes: Vec<ClassCount>,
    ) -> Result<(W, ManifestHeader), Error> {
        self.flush_block()?;
        let header = ManifestHeader {
            format_version: VERSION,
            kind: self.kind,
            parameters,
            samples: self.check.samples,
            bytes: self.check.bytes,
            classes,
            entries: self.check.entries,
        };
        self.check
            .finish(&header)
            .map_err(|reason| self.fail(reason))?;
        let meta = serde_json::to_vec(&TrailerMeta {
            parameters: header.parameters.clone(),
            classes: header.classes.clone(),
        })
        .map_err(|source| Error::ManifestJson {
            manifest: self.name.clone(),
            source,
        })?;
        let mut trailer = Vec::with_capacity(48 + meta.len());
        trailer.extend_from_slice(&0u32.to_le_bytes());
        for n in [header.entries, self.blocks, header.samples, header.bytes] {
            trailer.extend_from_slice(&n.to_le_bytes());
        }
        trailer.extend_from_slice(&len32(meta.len()).to_le_bytes());
        trailer.extend_from_slice(&meta);
        self.emit(&trailer)?;
        let mut end = self.crc.to_le_bytes().to_vec();
        end.extend_from_slice(&END_MAGIC);
        self.emit(&end)?;
        self.out.flush().map_err(|e| self.io(e))?;
        Ok((self.out, header))
    }

    fn admit(&mut self, entry: Entry<'_>) -> Result<(), Error> {
        if !of_kind(entry, self.kind) {
            return Err(self.fail(format!("a {:?} manifest cannot hold {entry:?}", self.kind)));
        }
        self.check.add(entry).map_err(|reason| self.fail(reason))
    }

    /// Writes `name` front-coded against the previous name of the block.
    fn front_code(&mut self, name: &str) {
        let shared = match self.block_entries {
            0 => 0,
            _ => common_prefix(&self.previous, name),
        };
        put_varint(&mut self.raw, shared as u64);
        put_text(&mut self.raw, &name[shared..]);
        self.previous.clear();
        self.previous.push_str(name);
    }

    fn entry_done(&mut self) -> Result<(), Error> {
        self.block_entries += 1;
        if self.raw.len() >= BLOCK_TARGET {
            self.flush_block()?;
        }
        Ok(())
    }

    fn flush_block(&mut self) -> Result<(), Error> {
        if self.block_entries == 0 {
            return Ok(());
        }
        self.stored.clear();
        self.stored
            .reserve(zstd::zstd_safe::compress_bound(self.raw.len()) + 16);
        self.stored.extend_from_slice(&[0; 16]);
        let frame = zstd::bulk::compress(&self.raw, LEVEL).map_err(|e| self.io(e))?;
        self.stored.extend_from_slice(&frame);
        self.stored[0..4].copy_from_slice(&self.block_entries.to_le_bytes());
        self.stored[4..8].copy_from_slice(&len32(self.raw.len()).to_le_bytes());
        self.stored[8..12].copy_from_slice(&len32(frame.len()).to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&self.stored[0..12]), &frame);
        self.stored[12..16].copy_from_slice(&crc.to_le_bytes());
        let block = std::mem::take(&mut self.stored);
        let emitted = self.emit(&block);
        self.stored = block;
        emitted?;
        self.raw.clear();
        self.block_entries = 0;
        self.blocks += 1;
        Ok(())
    }

    fn emit(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.out.write_all(bytes).map_err(|e| self.io(e))?;
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn io(&self, source: std::io::Error) -> Error {
        Error::ManifestIo {
            manifest: self.name.clone(),
            offset: self.written,
            action: "write",
            source,
        }
    }

    fn fail(&self, reason: String) -> Error {
        Error::Manifest {
            manifest: self.name.clone(),
            reason,
        }
    }
}

/// A length that fits the format's `u32` fields: blocks close at [`BLOCK_TARGET`] and names are
/// object keys (at most a few KiB), so only a pathological parameter set could exceed it.
fn len32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn common_prefix(a: &str, b: &str) -> usize {
    let n = a
        .as_bytes()
        .iter()
        .zip(b.as_bytes())
        .take_while(|(x, y)| x == y)
        .count();
    // Never split a UTF-8 sequence: the suffix must be valid UTF-8 on its own.
    (0..=n).rev().find(|&i| b.is_char_boundary(i)).unwrap_or(0)
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    put_varint(out, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

/// Stores `text` as `bytes` raw bytes when it is exactly their lowercase hex, as text
/// otherwise; returns how ([`TEXT_NONE`] for the empty string).
fn put_hex(out: &mut Vec<u8>, text: &str, bytes: usize) -> u8 {
    if text.is_empty() {
        return TEXT_NONE;
    }
    match lower_hex(text, bytes) {
        Some(raw) => {
            out.extend_from_slice(&raw);
            TEXT_BINARY
        }
        None => {
            put_text(out, text);
            TEXT_RAW
        }
    }
}

fn put_etag(out: &mut Vec<u8>, etag: &str) -> u8 {
    if let Some((md5, parts)) = etag.split_once('-')
        && let (Some(raw), Ok(n)) = (lower_hex(md5, 16), parts.parse::<u64>())
        && n.to_string() == parts
    {
        out.extend_from_slice(&raw);
        put_varint(out, n);
        return ETAG_MULTIPART;
    }
    match put_hex(out, etag, 16) {
        // An empty ETag is not "no ETag": keep it as text.
        TEXT_NONE => {
            put_text(out, "");
            TEXT_RAW
        }
        how => how,
    }
}

/// The bytes whose lowercase hex is exactly `text`.
fn lower_hex(text: &str, bytes: usize) -> Option<Vec<u8>> {
    let lower = text.len() == bytes * 2
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    lower.then(|| hex::decode(text).ok()).flatten()
}

/// Reads a format-2 manifest whose first byte the caller has seen (not consumed).
pub(crate) fn read(
    name: &str,
    reader: impl Read,
    sink: &mut EntrySink<'_>,
) -> Result<ManifestHeader, Error> {
    let mut r = Reader {
        name,
        inner: reader,
        offset: 0,
        crc: 0,
    };
    let kind = r.header()?;
    let mut decoder = BlockDecoder::new(name, kind);
    let mut check = EntryCheck::new();
    let mut blocks = 0u64;
    loop {
        let at = r.offset;
        let fields = r.array::<12>("a block or the trailer")?;
        let entries = u32_at(&fields, 0);
        if entries == 0 {
            return r.trailer(fields, kind, blocks, &check);
        }
        let raw_len = u32_at(&fields, 4);
        let stored_len = u32_at(&fields, 8);
        if raw_len > MAX_SECTION || stored_len > MAX_SECTION {
            return Err(r.corrupt(at, format!("a block claims {stored_len} bytes stored and {raw_len} uncompressed, over the {MAX_SECTION}-byte limit")));
        }
        let crc = u32::from_le_bytes(r.array::<4>("a block checksum")?);
        let stored = r.bytes(stored_len as usize, "a block")?;
        let computed = crc32c::crc32c_append(crc32c::crc32c(&fields), &stored);
        if computed != crc {
            return Err(r.corrupt(
                at,
                format!(
                    "block {blocks} fails its checksum (stored {crc:08x}, computed {computed:08x})"
                ),
            ));
        }
        decoder
            .block(&stored, raw_len as usize, entries, &mut |entry| {
                check
                    .add(entry)
                    .map_err(|reason| decoder_error(name, at, reason))?;
                sink(entry)
            })
            .map_err(|e| match e {
                DecodeError::Sink(e) => e,
                DecodeError::Bad(reason) => r.corrupt(at, format!("block {blocks}: {reason}")),
            })?;
        blocks += 1;
    }
}

fn decoder_error(name: &str, offset: u64, reason: String) -> Error {
    Error::CorruptManifest {
        manifest: name.to_owned(),
        offset,
        reason,
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The input, counting offsets and the running checksum of the whole object.
struct Reader<'n, R> {
    name: &'n str,
    inner: R,
    offset: u64,
    crc: u32,
}

impl<R: Read> Reader<'_, R> {
    fn header(&mut self) -> Result<DatasetKind, Error> {
        let fixed = self.array::<20>("the header")?;
        if fixed[0..8] != MAGIC {
            return Err(self.corrupt(0, "not a bucketload manifest (bad magic)".to_owned()));
        }
        let version = u32_at(&fixed, 8);
        if version != VERSION {
            return Err(self.corrupt(8, format!("format version {version} is not supported (expected {VERSION}); upgrade bucketload")));
        }
        let meta_len = u32_at(&fixed, 16);
        if meta_len > MAX_SECTION {
            return Err(self.corrupt(16, format!("header of {meta_len} bytes is over the limit")));
        }
        let meta = self.bytes(meta_len as usize, "the header")?;
        let computed = crc32c::crc32c_append(crc32c::crc32c(&fixed), &meta);
        let stored = u32::from_le_bytes(self.array::<4>("the header checksum")?);
        if stored != computed {
            return Err(self.corrupt(
                0,
                format!(
                    "the header fails its checksum (stored {stored:08x}, computed {computed:08x})"
                ),
            ));
        }
        let kind = match fixed[12] {
            KIND_FILES => DatasetKind::Files,
            KIND_SHARDS => DatasetKind::Shards,
            other => return Err(self.corrupt(12, format!("unknown dataset kind {other}"))),
        };
        serde_json::from_slice::<serde::de::IgnoredAny>(&meta)
            .map_err(|e| self.corrupt(20, format!("header metadata: {e}")))?;
        Ok(kind)
    }

    fn trailer(
        &mut self,
        fields: [u8; 12],
        kind: DatasetKind,
        blocks: u64,
        check: &EntryCheck,
    ) -> Result<ManifestHeader, Error> {
        let at = self.offset - 12;
        let rest = self.array::<24>("the trailer")?;
        let u64_at = |b: &[u8], i: usize| {
            let mut le = [0u8; 8];
            le.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(le)
        };
        let entries = u64_at(&fields, 4);
        let [stated_blocks, samples, bytes] = [0, 8, 16].map(|i| u64_at(&rest, i));
        let meta_len = u32::from_le_bytes(self.array::<4>("the trailer")?);
        if meta_len > MAX_SECTION {
            return Err(self.corrupt(at, format!("trailer of {meta_len} bytes is over the limit")));
        }
        let meta = self.bytes(meta_len as usize, "the trailer")?;
        let computed = self.crc;
        let stored = u32::from_le_bytes(self.array::<4>("the checksum of the whole manifest")?);
        let end = self.array::<8>("the end marker")?;
        if stored != computed || end != END_MAGIC {
            return Err(self.corrupt(
                at,
                format!(
                    "the trailer fails its checksum (stored {stored:08x}, computed {computed:08x})"
                ),
            ));
        }
        let mut extra = [0u8; 1];
        match self.inner.read(&mut extra) {
            Ok(0) => {}
            Ok(_) => {
                return Err(self.corrupt(self.offset, "bytes follow the end marker".to_owned()));
            }
            Err(e) => return Err(self.io(e)),
        }
        if (entries, stated_blocks) != (check.entries, blocks) {
            return Err(self.corrupt(at, format!("the trailer counts {entries} entries in {stated_blocks} blocks but the manifest holds {} in {blocks}", check.entries)));
        }
        let meta: TrailerMeta = serde_json::from_slice(&meta)
            .map_err(|e| self.corrupt(at, format!("trailer metadata: {e}")))?;
        let header = ManifestHeader {
            format_version: VERSION,
            kind,
            parameters: meta.parameters,
            samples,
            bytes,
            classes: meta.classes,
            entries,
        };
        check
            .finish(&header)
            .map_err(|reason| self.corrupt(at, reason))?;
        Ok(header)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], Error> {
        let mut buf = [0u8; N];
        self.fill(&mut buf, what)?;
        Ok(buf)
    }

    fn bytes(&mut self, len: usize, what: &str) -> Result<Vec<u8>, Error> {
        let mut buf = vec![0u8; len];
        self.fill(&mut buf, what)?;
        Ok(buf)
    }

    fn fill(&mut self, buf: &mut [u8], what: &str) -> Result<(), Error> {
        match self.inner.read_exact(buf) {
            Ok(()) => {
                self.crc = crc32c::crc32c_append(self.crc, buf);
                self.offset += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(self.corrupt(
                self.offset,
                format!("truncated: the object ends inside {what}"),
            )),
            Err(e) => Err(self.io(e)),
        }
    }

    fn corrupt(&self, offset: u64, reason: String) -> Error {
        decoder_error(self.name, offset, reason)
    }

    fn io(&self, source: std::io::Error) -> Error {
        Error::ManifestIo {
            manifest: self.name.to_owned(),
            offset: self.offset,
            action: "read",
            source,
        }
    }
}

enum DecodeError {
    Sink(Error),
    Bad(String),
}

impl From<Error> for DecodeError {
    fn from(e: Error) -> DecodeError {
        DecodeError::Sink(e)
    }
}

/// Decodes blocks into reused entries.
struct BlockDecoder {
    kind: DatasetKind,
    raw: Vec<u8>,
    decompressor: Option<zstd::bulk::Decompressor<'static>>,
    file: FileEntry,
    shard: ShardEntry,
}

impl BlockDecoder {
    fn new(_name: &str, kind: DatasetKind) -> BlockDecoder {
        BlockDecoder {
            kind,
            raw: Vec::new(),
            decompressor: None,
            file: FileEntry {
                key: String::new(),
                size: 0,
                etag: None,
                crc32c: None,
            },
            shard: ShardEntry {
                name: String::new(),
                index: String::new(),
                samples: 0,
                bytes: 0,
                crc32c: String::new(),
                md5: String::new(),
            },
        }
    }

    fn block(
        &mut self,
        stored: &[u8],
        raw_len: usize,
        entries: u32,
        sink: &mut EntrySink<'_>,
    ) -> Result<(), DecodeError> {
        let bad = |e: std::io::Error| DecodeError::Bad(format!("does not decompress: {e}"));
        let decompressor = match &mut self.decompressor {
            Some(d) => d,
            None => self
                .decompressor
                .insert(zstd::bulk::Decompressor::new().map_err(bad)?),
        };
        self.raw.clear();
        self.raw.reserve(raw_len);
        let got = decompressor
            .decompress_to_buffer(stored, &mut self.raw)
            .map_err(bad)?;
        if got != raw_len {
            return Err(DecodeError::Bad(format!(
                "decompresses to {got} bytes, not {raw_len}"
            )));
        }
        let raw = std::mem::take(&mut self.raw);
        let result = self.entries(&raw, entries, sink);
        self.raw = raw;
        result
    }

    fn entries(
        &mut self,
        raw: &[u8],
        entries: u32,
        sink: &mut EntrySink<'_>,
    ) -> Result<(), DecodeError> {
        let mut cur = Cursor { raw, at: 0 };
        for i in 0..entries {
            match self.kind {
                DatasetKind::Files => {
                    self.file_entry(&mut cur, i)?;
                    sink(Entry::File(&self.file))?;
                }
                DatasetKind::Shards => {
                    self.shard_entry(&mut cur, i)?;
                    sink(Entry::Shard(&self.shard))?;
                }
            }
        }
        if cur.at != raw.len() {
            return Err(DecodeError::Bad(format!(
                "{} bytes follow its last entry",
                raw.len() - cur.at
            )));
        }
        Ok(())
    }

    fn file_entry(&mut self, cur: &mut Cursor<'_>, i: u32) -> Result<(), DecodeError> {
        front_decode(cur, &mut self.file.key, i)?;
        self.file.size = cur.varint()?;
        let flags = cur.byte()?;
        get_etag(cur, flags & 3, &mut self.file.etag)?;
        get_hex(cur, (flags >> 2) & 3, 4, &mut self.file.crc32c)?;
        if flags >> 4 != 0 {
            return Err(DecodeError::Bad(format!("unknown flags {flags:#04x}")));
        }
        Ok(())
    }

    fn shard_entry(&mut self, cur: &mut Cursor<'_>, i: u32) -> Result<(), DecodeError> {
        front_decode(cur, &mut self.shard.name, i)?;
        let flags = cur.byte()?;
        self.shard.index.clear();
        match flags & 1 {
            0 => {
                self.shard.index.push_str(&self.shard.name);
                self.shard.index.push_str(".idx");
            }
            _ => self.shard.index.push_str(cur.text()?),
        }
        self.shard.samples = cur.varint()?;
        self.shard.bytes = cur.varint()?;
        let mut crc = Some(std::mem::take(&mut self.shard.crc32c));
        get_hex(cur, (flags >> 1) & 3, 4, &mut crc)?;
        self.shard.crc32c = crc.unwrap_or_default();
        let mut md5 = Some(std::mem::take(&mut self.shard.md5));
        get_hex(cur, (flags >> 3) & 3, 16, &mut md5)?;
        self.shard.md5 = md5.unwrap_or_default();
        if flags >> 5 != 0 {
            return Err(DecodeError::Bad(format!("unknown flags {flags:#04x}")));
        }
        Ok(())
    }
}

fn front_decode(cur: &mut Cursor<'_>, name: &mut String, i: u32) -> Result<(), DecodeError> {
    let shared = cur.varint()?;
    let fits = shared <= name.len() as u64 && name.is_char_boundary(shared as usize);
    if (i == 0 && shared != 0) || !fits {
        return Err(DecodeError::Bad(format!(
            "entry {i} shares {shared} bytes with the previous name"
        )));
    }
    name.truncate(shared as usize);
    name.push_str(cur.text()?);
    Ok(())
}

/// Decodes a field stored by [`put_hex`] into `slot`, reusing its buffer.
fn get_hex(
    cur: &mut Cursor<'_>,
    how: u8,
    bytes: usize,
    slot: &mut Option<String>,
) -> Result<(), DecodeError> {
    match how {
        TEXT_NONE => *slot = None,
        TEXT_BINARY => hex_into(slot.get_or_insert_default(), cur.take(bytes)?),
        TEXT_RAW => {
            let text = cur.text()?;
            let out = slot.get_or_insert_default();
            out.clear();
            out.push_str(text);
        }
        other => return Err(DecodeError::Bad(format!("unknown field encoding {other}"))),
    }
    Ok(())
}

fn get_etag(cur: &mut Cursor<'_>, how: u8, slot: &mut Option<String>) -> Result<(), DecodeError> {
    match how {
        ETAG_MULTIPART => {
            let out = slot.get_or_insert_default();
            hex_into(out, cur.take(16)?);
            out.push('-');
            out.push_str(&cur.varint()?.to_string());
            Ok(())
        }
        how => get_hex(cur, how, 16, slot),
    }
}

/// `out` becomes the lowercase hex of `bytes` (at most 16).
fn hex_into(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 32];
    for (pair, b) in buf.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 15)];
    }
    out.clear();
    let digits = &buf[..bytes.len() * 2];
    out.push_str(std::str::from_utf8(digits).unwrap_or_default());
}

struct Cursor<'a> {
    raw: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.raw.len());
        let end = end.ok_or_else(|| DecodeError::Bad("an entry runs past the block".to_owned()))?;
        let out = &self.raw[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            n |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(DecodeError::Bad("a number runs over 64 bits".to_owned()))
    }

    fn text(&mut self) -> Result<&'a str, DecodeError> {
        let len = usize::try_from(self.varint()?).unwrap_or(usize::MAX);
        std::str::from_utf8(self.take(len)?)
            .map_err(|_| DecodeError::Bad("a name is not UTF-8".to_owned()))
    }
}
