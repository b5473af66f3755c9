//! The catalog of a files dataset in a few bytes per sample: one contiguous buffer that a
//! process builds once and other processes of the node map read-only (`shared_catalog.rs`).
//!
//! # Layout (version [`LAYOUT_VERSION`]; integers little-endian)
//!
//! ```text
//! header   HEADER_LEN bytes: magic, layout version, flags, entries, blocks, data bytes, label
//!          runs, identity (32 bytes), CRC32C of the body, CRC32C of the header before it
//! data     blocks of BLOCK entries, each entry:
//!            key   first of its block: varint length, bytes; else front- and rear-coded
//!                  against the previous key: varint shared prefix, varint (shared tail << 4 |
//!                  min(middle, 15)), varint middle when ≥ 15, the middle bytes
//!            meta  varint (size << 2 | has ETag fingerprint << 1 | has CRC32C)
//!            etag  8 bytes: the ETag's fingerprint ([`ETag::fingerprint`]), when it has one
//!            crc   4 bytes: the CRC32C the manifest records, when it records one and
//!                  the entry has no ETag
//! offsets  u64 per block: where it starts in data
//! labels   per run of consecutive keys of one folder: u64 first entry, u32 label
//! ```
//!
//! Keys `train/class_042/sample_0001234.jpg` cost about four bytes each (the changing digits and
//! three lengths), a size three, an ETag eight: about 15 bytes per sample in all. Entry `i` is
//! decoded from the start of its block (at most `BLOCK - 1` entries before it). Labels are the
//! folder's index among the sorted folder names, as [`super::catalog::folder_labels`] gives
//! them, kept per run of keys of one folder (a sorted dataset has one run per class).
//!
//! Of each ETag only a 64-bit fingerprint is kept: a changed object is noticed unless its new
//! ETag has the old one's fingerprint (about 2^-64), and the disk cache is asked for the entry
//! whose ETag has that fingerprint (docs/LOADER.md). A manifest's CRC32C is kept only for an
//! entry without an ETag: with one, the ETag already names the version (a GET's bytes are hashed
//! only when there is no pair of ETags to compare), and 4 more bytes would take a
//! `bucketload manifest` entry (ETag and CRC32C) from about 15 to 19 bytes. The consequence: a
//! cache entry is matched by ETag fingerprint and size (and checked against its own body
//! checksum), no longer also against the manifest's CRC32C.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use bucketload_format::class_of_key;
use bucketload_store::ETag;

/// Version of the layout, part of a shared file's name and header: bump it on any change.
pub(crate) const LAYOUT_VERSION: u32 = 1;

/// Entries per block: random access decodes at most this many entries; a block's first key is
/// whole, so larger blocks compress better (the first key costs ~35 bytes, ½ byte per entry).
const BLOCK: u64 = 64;

const MAGIC: [u8; 8] = *b"BLFILES\0";

/// Bytes of the header.
pub(crate) const HEADER_LEN: usize = 96;

/// Flag: labels are recorded (every key has a folder).
const FLAG_LABELS: u32 = 1;

/// Bytes of one label run: first entry (u64), label (u32).
const RUN_LEN: usize = 12;

/// What identifies a table's contents (a digest; zeros for a table of one process).
pub(crate) type Identity = [u8; 32];

/// One entry, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileEntry {
    pub(crate) key: String,
    pub(crate) size: u64,
    /// [`ETag::fingerprint`] of the object's ETag, when known.
    pub(crate) etag_fingerprint: Option<u64>,
    pub(crate) crc32c: Option<u32>,
    pub(crate) label: Option<u32>,
}

/// The bytes of a table: built here, or a shared file's map.
#[derive(Debug)]
pub(crate) enum TableBytes {
    Owned(Vec<u8>),
    Mapped(memmap2::Mmap),
}

impl TableBytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            TableBytes::Owned(v) => v,
            TableBytes::Mapped(m) => m,
        }
    }
}

/// A files catalog: entries by index, decoded on demand.
#[derive(Debug)]
pub(crate) struct FilesTable {
    bytes: TableBytes,
    count: u64,
    blocks: u64,
    data_len: usize,
    runs: u64,
    labels: bool,
}

/// A file the table is written to as it is built, removed when dropped unless
/// [`kept`](TempFile::keep) (a build cut short leaves nothing; a killed one leaves a temporary
/// file that is never read and ages out, `shared_catalog.rs`).
#[derive(Debug)]
pub(crate) struct TempFile {
    pub(crate) file: File,
    pub(crate) path: PathBuf,
    keep: bool,
}

impl TempFile {
    pub(crate) fn new(file: File, path: PathBuf) -> TempFile {
        TempFile {
            file,
            path,
            keep: false,
        }
    }

    /// Leaves the file in place when dropped (it was renamed to its final name).
    pub(crate) fn keep(mut self) {
        self.keep = true;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Bytes a builder writing to a file holds before it writes them: the process that builds a
/// catalog holds the table once (as the file's pages), not also in a growing buffer.
const SPILL_AT: usize = 1 << 20;

/// Where a builder's bytes go when they are not all held in memory.
#[derive(Debug)]
struct Spill {
    temp: TempFile,
    /// Bytes written to the file so far (the header's placeholder included).
    written: u64,
    /// CRC32C of the written bytes after the header.
    body_crc: u32,
}

/// What [`FilesTableBuilder::finish`] made.
#[derive(Debug)]
pub(crate) enum Finished {
    /// The table, held by this process.
    Memory(FilesTable),
    /// The table written whole to the builder's file, to be checked and mapped.
    Written(TempFile),
}

/// Builds a [`FilesTable`] one entry at a time (from a manifest's entries or a listing's pages),
/// in memory or ([`to_file`](FilesTableBuilder::to_file)) into a file.
#[derive(Debug)]
pub(crate) struct FilesTableBuilder {
    /// The table so far; with a spill file, what is not yet written to it.
    buf: Vec<u8>,
    spill: Option<Spill>,
    /// The spill file failed and what it held could not be read back: the table is lost.
    lost: Option<io::Error>,
    offsets: Vec<u64>,
    count: u64,
    previous: String,
    /// Folder of the current run and the runs so far, labels by first appearance.
    runs: Vec<(u64, u32)>,
    folders: HashMap<String, u32>,
    /// Some key has no folder: no labels.
    unlabelled: bool,
}

impl Default for FilesTableBuilder {
    fn default() -> Self {
        FilesTableBuilder {
            buf: vec![0; HEADER_LEN],
            spill: None,
            lost: None,
            offsets: Vec::new(),
            count: 0,
            previous: String::new(),
            runs: Vec::new(),
            folders: HashMap::new(),
            unlabelled: false,
        }
    }
}

impl FilesTableBuilder {
    /// A builder that writes the table into `temp` (an empty file) as it goes, holding at most
    /// about [`SPILL_AT`] bytes of it: [`finish`](Self::finish) gives the file back whole.
    /// Should a write fail (a full disk), the builder reads back what it wrote and goes on in
    /// memory, with a warning.
    pub(crate) fn to_file(temp: TempFile) -> FilesTableBuilder {
        let mut buf = Vec::with_capacity(SPILL_AT + 4096);
        buf.resize(HEADER_LEN, 0); // the header's place, written last
        FilesTableBuilder {
            buf,
            spill: Some(Spill {
                temp,
                written: 0,
                body_crc: 0,
            }),
            ..FilesTableBuilder::default()
        }
    }

    /// Bytes of the table so far, header included.
    fn position(&self) -> u64 {
        self.spill.as_ref().map_or(0, |s| s.written) + self.buf.len() as u64
    }

    /// Writes the buffer to the spill file (when there is one and it holds `at_least` bytes).
    fn spill(&mut self, at_least: usize) {
        let Some(spill) = &mut self.spill else {
            return;
        };
        if self.buf.len() < at_least || self.buf.is_empty() {
            return;
        }
        match spill.temp.file.write_all(&self.buf) {
            Ok(()) => {
                let header = HEADER_LEN.saturating_sub(spill.written as usize);
                spill.body_crc =
                    crc32c::crc32c_append(spill.body_crc, &self.buf[header.min(self.buf.len())..]);
                spill.written += self.buf.len() as u64;
                self.buf.clear();
            }
            Err(e) => self.unspill(&e),
        }
    }

    /// Goes on in memory after the spill file failed: reads back what was written to it.
    fn unspill(&mut self, error: &io::Error) {
        let Some(spill) = self.spill.take() else {
            return;
        };
        tracing::warn!(path = %spill.temp.path.display(), %error, "loader: cannot write the shared catalog; this process builds its own in memory");
        let mut file = &spill.temp.file;
        let mut written = Vec::new();
        let read = file.seek(SeekFrom::Start(0)).and_then(|_| {
            file.take(spill.written)
                .read_to_end(&mut written)
                .map(|_| ())
        });
        match read {
            Ok(()) if written.len() as u64 == spill.written => {
                written.append(&mut self.buf);
                self.buf = written;
            }
            Ok(()) => self.lose(io::Error::other(format!(
                "{} holds {} bytes, not the {} written",
                spill.temp.path.display(),
                written.len(),
                spill.written
            ))),
            Err(e) => self.lose(e),
        }
    }

    fn lose(&mut self, error: io::Error) {
        self.buf = Vec::new();
        self.lost.get_or_insert(error);
    }

    /// Adds the next entry: its key, size, ETag as the store or manifest spells it, and CRC32C.
    pub(crate) fn push(&mut self, key: &str, size: u64, etag: Option<&str>, crc32c: Option<u32>) {
        let first = self.count.is_multiple_of(BLOCK);
        if first {
            self.offsets.push(self.position() - HEADER_LEN as u64);
            put_varint(&mut self.buf, key.len() as u128);
            self.buf.extend_from_slice(key.as_bytes());
        } else {
            self.push_coded_key(key);
        }
        let fingerprint = ETag::from_store(etag).map(|e| e.fingerprint());
        // With an ETag the CRC32C is not kept: the ETag names the version (module docs).
        let crc32c = crc32c.filter(|_| fingerprint.is_none());
        let flags = u128::from(fingerprint.is_some()) << 1 | u128::from(crc32c.is_some());
        put_varint(&mut self.buf, u128::from(size) << 2 | flags);
        if let Some(f) = fingerprint {
            self.buf.extend_from_slice(&f.to_le_bytes());
        }
        if let Some(c) = crc32c {
            self.buf.extend_from_slice(&c.to_le_bytes());
        }
        self.note_label(key);
        self.previous.clear();
        self.previous.push_str(key);
        self.count += 1;
        self.spill(SPILL_AT);
    }

    fn push_coded_key(&mut self, key: &str) {
        let (prev, key) = (self.previous.as_bytes(), key.as_bytes());
        let prefix = common_prefix(prev, key);
        let tail = common_suffix(&prev[prefix..], &key[prefix..]);
        let middle = &key[prefix..key.len() - tail];
        put_varint(&mut self.buf, prefix as u128);
        put_varint(
            &mut self.buf,
            (tail as u128) << 4 | middle.len().min(15) as u128,
        );
        if middle.len() >= 15 {
            put_varint(&mut self.buf, middle.len() as u128);
        }
        self.buf.extend_from_slice(middle);
    }

    fn note_label(&mut self, key: &str) {
        if self.unlabelled {
            return;
        }
        let Some(folder) = class_of_key(key) else {
            self.unlabelled = true;
            self.runs = Vec::new();
            self.folders = HashMap::new();
            return;
        };
        if self.count > 0 && class_of_key(&self.previous) == Some(folder) {
            return;
        }
        let next = u32::try_from(self.folders.len()).unwrap_or(u32::MAX);
        let id = *self.folders.entry(folder.to_owned()).or_insert(next);
        self.runs.push((self.count, id));
    }

    /// The table in memory, with `identity` in its header (a builder with a spill file reads
    /// it back first: use [`finish`](Self::finish) for those).
    pub(crate) fn finish_in_memory(mut self, identity: &Identity) -> FilesTable {
        debug_assert!(
            self.spill.is_none(),
            "only a builder in memory finishes in memory"
        );
        let header = self.append_tables(identity);
        self.seal_in_memory(header)
    }

    /// The table held in the builder's buffer (its tables already appended), with `header`
    /// checksummed and written at its start.
    fn seal_in_memory(&mut self, mut header: Header) -> FilesTable {
        header.body_crc = crc32c::crc32c(&self.buf[HEADER_LEN..]);
        header.write(&mut self.buf[..HEADER_LEN]);
        FilesTable {
            bytes: TableBytes::Owned(std::mem::take(&mut self.buf)),
            count: header.count,
            blocks: header.blocks,
            data_len: header.data_len as usize,
            runs: header.runs,
            labels: header.flags & FLAG_LABELS != 0,
        }
    }

    /// The table, with `identity` in its header: written whole to the builder's file, or in
    /// memory when it has none (or the file failed; warned). `Err` only when the file failed
    /// and what it held could not be read back.
    pub(crate) fn finish(mut self, identity: &Identity) -> io::Result<Finished> {
        if self.spill.is_some() {
            let mut header = self.append_tables(identity);
            self.spill(1);
            if let Some(e) = self.lost.take() {
                return Err(e);
            }
            if let Some(spill) = self.spill.take() {
                header.body_crc = spill.body_crc;
                match write_header(&spill.temp.file, &header) {
                    Ok(()) => return Ok(Finished::Written(spill.temp)),
                    Err(e) => {
                        self.spill = Some(spill);
                        self.unspill(&e);
                    }
                }
            }
            if let Some(e) = self.lost.take() {
                return Err(e);
            }
            // Back in memory, the tables appended: finish as a table of this process.
            return Ok(Finished::Memory(self.seal_in_memory(header)));
        }
        if let Some(e) = self.lost.take() {
            return Err(e);
        }
        Ok(Finished::Memory(self.finish_in_memory(identity)))
    }

    /// Appends the block offsets and label runs after the data; the header to write (its body
    /// checksum still to fill in).
    fn append_tables(&mut self, identity: &Identity) -> Header {
        let data_len = self.position() - HEADER_LEN as u64;
        let labels = !self.unlabelled && self.count > 0;
        let offsets = std::mem::take(&mut self.offsets);
        let runs = match labels {
            true => std::mem::take(&mut self.runs),
            false => Vec::new(),
        };
        self.buf
            .reserve_exact(offsets.len() * 8 + runs.len() * RUN_LEN);
        for o in &offsets {
            self.buf.extend_from_slice(&o.to_le_bytes());
        }
        let sorted = sorted_labels(std::mem::take(&mut self.folders));
        for (start, id) in &runs {
            self.buf.extend_from_slice(&start.to_le_bytes());
            self.buf
                .extend_from_slice(&sorted[*id as usize].to_le_bytes());
        }
        Header {
            flags: if labels { FLAG_LABELS } else { 0 },
            count: self.count,
            blocks: offsets.len() as u64,
            data_len,
            runs: runs.len() as u64,
            identity: *identity,
            body_crc: 0,
        }
    }
}

/// Writes `header` over the placeholder at the start of `file`.
fn write_header(mut file: &File, header: &Header) -> io::Result<()> {
    let mut bytes = [0u8; HEADER_LEN];
    header.write(&mut bytes);
    file.seek(SeekFrom::Start(0))?;
    file.write_all(&bytes)?;
    file.flush()
}

/// For each folder's label by first appearance, its index among the sorted folder names.
fn sorted_labels(folders: HashMap<String, u32>) -> Vec<u32> {
    let mut named: Vec<(String, u32)> = folders.into_iter().collect();
    named.sort_unstable();
    let mut sorted = vec![0u32; named.len()];
    for (index, (_, id)) in named.into_iter().enumerate() {
        sorted[id as usize] = u32::try_from(index).unwrap_or(u32::MAX);
    }
    sorted
}

/// The parsed header.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Header {
    flags: u32,
    count: u64,
    blocks: u64,
    data_len: u64,
    runs: u64,
    identity: Identity,
    body_crc: u32,
}

impl Header {
    fn write(&self, out: &mut [u8]) {
        out.fill(0);
        out[0..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&LAYOUT_VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&self.flags.to_le_bytes());
        out[16..24].copy_from_slice(&self.count.to_le_bytes());
        out[24..32].copy_from_slice(&self.blocks.to_le_bytes());
        out[32..40].copy_from_slice(&self.data_len.to_le_bytes());
        out[40..48].copy_from_slice(&self.runs.to_le_bytes());
        out[48..80].copy_from_slice(&self.identity);
        out[80..84].copy_from_slice(&self.body_crc.to_le_bytes());
        let header_crc = crc32c::crc32c(&out[..84]);
        out[84..88].copy_from_slice(&header_crc.to_le_bytes());
    }

    /// The header of `bytes`, or what is wrong with it.
    fn read(bytes: &[u8]) -> Result<Header, String> {
        let Some(h) = bytes.get(..HEADER_LEN) else {
            return Err(format!("{} bytes, shorter than a header", bytes.len()));
        };
        if h[0..8] != MAGIC {
            return Err("not a files catalog (bad magic)".to_owned());
        }
        if crc32c::crc32c(&h[..84]) != le_u32(&h[84..88]) {
            return Err("its header's checksum does not match".to_owned());
        }
        let version = le_u32(&h[8..12]);
        if version != LAYOUT_VERSION {
            return Err(format!("layout {version}, not {LAYOUT_VERSION}"));
        }
        let mut identity = [0u8; 32];
        identity.copy_from_slice(&h[48..80]);
        Ok(Header {
            flags: le_u32(&h[12..16]),
            count: le_u64(&h[16..24]),
            blocks: le_u64(&h[24..32]),
            data_len: le_u64(&h[32..40]),
            runs: le_u64(&h[40..48]),
            identity,
            body_crc: le_u32(&h[80..84]),
        })
    }
}

impl FilesTable {
    /// The table in `bytes` (a shared file), checked whole: header, lengths, the checksum of
    /// every byte after the header, the block offsets and label runs, and that it is the table
    /// of `identity`. `Err` says what is wrong; such a table is rebuilt, never used.
    pub(crate) fn from_bytes(bytes: TableBytes, identity: &Identity) -> Result<FilesTable, String> {
        let slice = bytes.as_slice();
        let header = Header::read(slice)?;
        if &header.identity != identity {
            return Err("it is the catalog of another dataset or version".to_owned());
        }
        let expected_blocks = header.count.div_ceil(BLOCK);
        let len = (|| {
            let tables = header
                .blocks
                .checked_mul(8)?
                .checked_add(header.runs.checked_mul(RUN_LEN as u64)?)?;
            (HEADER_LEN as u64)
                .checked_add(header.data_len)?
                .checked_add(tables)
        })();
        if header.blocks != expected_blocks || len != Some(slice.len() as u64) {
            return Err(format!(
                "{} bytes, not the length its header gives (truncated or overwritten)",
                slice.len()
            ));
        }
        if crc32c::crc32c(&slice[HEADER_LEN..]) != header.body_crc {
            return Err("its checksum does not match (damaged)".to_owned());
        }
        let table = FilesTable {
            count: header.count,
            blocks: header.blocks,
            data_len: header.data_len as usize,
            runs: header.runs,
            labels: header.flags & FLAG_LABELS != 0,
            bytes,
        };
        table.check_tables()?;
        Ok(table)
    }

    /// Block offsets ascend within the data; label runs ascend from entry 0.
    fn check_tables(&self) -> Result<(), String> {
        let mut last = 0;
        for b in 0..self.blocks {
            let o = self.offset(b).unwrap_or(u64::MAX);
            if o < last || o >= self.data_len as u64 || (b == 0 && o != 0) {
                return Err(format!("block {b} starts out of place"));
            }
            last = o;
        }
        let mut last = None;
        for r in 0..self.runs {
            let (start, _) = self.run(r).unwrap_or((u64::MAX, 0));
            let ok = match last {
                None => start == 0,
                Some(l) => start > l && start < self.count,
            };
            if !ok {
                return Err(format!("label run {r} starts out of place"));
            }
            last = Some(start);
        }
        if self.labels && self.runs == 0 && self.count > 0 {
            return Err("labels without label runs".to_owned());
        }
        Ok(())
    }

    /// Entries.
    pub(crate) fn len(&self) -> u64 {
        self.count
    }

    /// The whole buffer, header included (what a shared file holds).
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.bytes.as_slice()
    }

    /// Whether this table is a map of a shared file.
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self.bytes, TableBytes::Mapped(_))
    }

    fn data(&self) -> &[u8] {
        &self.as_bytes()[HEADER_LEN..HEADER_LEN + self.data_len]
    }

    fn offset(&self, block: u64) -> Option<u64> {
        let at = HEADER_LEN + self.data_len + usize::try_from(block).ok()? * 8;
        Some(le_u64(self.as_bytes().get(at..at + 8)?))
    }

    fn run(&self, run: u64) -> Option<(u64, u32)> {
        let base = HEADER_LEN + self.data_len + usize::try_from(self.blocks).ok()? * 8;
        let at = base + usize::try_from(run).ok()? * RUN_LEN;
        let bytes = self.as_bytes().get(at..at + RUN_LEN)?;
        Some((le_u64(&bytes[..8]), le_u32(&bytes[8..])))
    }

    /// The label of entry `index`: that of the last run starting at or before it.
    fn label(&self, index: u64) -> Option<u32> {
        if !self.labels {
            return None;
        }
        let (mut lo, mut hi) = (0, self.runs);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match self.run(mid)?.0 <= index {
                true => lo = mid,
                false => hi = mid,
            }
        }
        self.run(lo).map(|(_, label)| label)
    }

    /// Entry `index`; `None` past the end (or in a table damaged in memory, which the checks
    /// when it was opened rule out).
    pub(crate) fn get(&self, index: u64) -> Option<FileEntry> {
        if index >= self.count {
            return None;
        }
        let block = index / BLOCK;
        let mut cursor = Cursor::new(self.data(), usize::try_from(self.offset(block)?).ok()?);
        let mut entry = cursor.entry(None)?;
        for _ in 0..index % BLOCK {
            entry = cursor.entry(Some(&entry))?;
        }
        Some(FileEntry {
            key: String::from_utf8(entry.key).ok()?,
            size: entry.size,
            etag_fingerprint: entry.etag,
            crc32c: entry.crc32c,
            label: self.label(index),
        })
    }

    /// Every entry in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = FileEntry> + '_ {
        (0..self.count).map_while(|i| self.get(i))
    }
}

/// An entry being decoded: the key as bytes.
struct Raw {
    key: Vec<u8>,
    size: u64,
    etag: Option<u64>,
    crc32c: Option<u32>,
}

/// Reads entries of the data from a block's start.
struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn new(data: &'a [u8], at: usize) -> Self {
        Cursor { data, at }
    }

    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let got = self.data.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(got)
    }

    fn varint(&mut self) -> Option<u128> {
        let (value, used) = get_varint(self.data.get(self.at..)?)?;
        self.at += used;
        Some(value)
    }

    fn len(&mut self) -> Option<usize> {
        usize::try_from(self.varint()?).ok()
    }

    /// The next entry; `previous` is `None` at a block's start.
    fn entry(&mut self, previous: Option<&Raw>) -> Option<Raw> {
        let key = match previous {
            None => {
                let n = self.len()?;
                self.bytes(n)?.to_vec()
            }
            Some(prev) => self.coded_key(&prev.key)?,
        };
        let meta = self.varint()?;
        let size = u64::try_from(meta >> 2).ok()?;
        let etag = match meta & 2 != 0 {
            true => Some(le_u64(self.bytes(8)?)),
            false => None,
        };
        let crc32c = match meta & 1 != 0 {
            true => Some(le_u32(self.bytes(4)?)),
            false => None,
        };
        Some(Raw {
            key,
            size,
            etag,
            crc32c,
        })
    }

    fn coded_key(&mut self, prev: &[u8]) -> Option<Vec<u8>> {
        let prefix = self.len()?;
        let packed = self.varint()?;
        let tail = usize::try_from(packed >> 4).ok()?;
        let middle = match (packed & 15) as usize {
            15 => self.len()?,
            n => n,
        };
        let middle = self.bytes(middle)?;
        let tail_from = prev.len().checked_sub(tail)?;
        if prefix > tail_from {
            return None;
        }
        let mut key = Vec::with_capacity(prefix + middle.len() + tail);
        key.extend_from_slice(&prev[..prefix]);
        key.extend_from_slice(middle);
        key.extend_from_slice(&prev[tail_from..]);
        Some(key)
    }
}

/// Bytes `a` and `b` share at their start.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Bytes `a` and `b` share at their end.
fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

fn put_varint(out: &mut Vec<u8>, mut value: u128) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A varint and the bytes it took; `None` when cut short or longer than a u128.
fn get_varint(bytes: &[u8]) -> Option<(u128, usize)> {
    let mut value = 0u128;
    for (i, b) in bytes.iter().enumerate().take(19) {
        value |= u128::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::catalog::folder_labels;
    use proptest::prelude::*;

    /// What a files table must give back: the plain representation.
    #[derive(Debug, Clone)]
    struct Plain {
        key: String,
        size: u64,
        etag: Option<String>,
        crc32c: Option<u32>,
    }

    fn build(entries: &[Plain]) -> FilesTable {
        let mut b = FilesTableBuilder::default();
        for e in entries {
            b.push(&e.key, e.size, e.etag.as_deref(), e.crc32c);
        }
        b.finish_in_memory(&[7; 32])
    }

    fn check(entries: &[Plain]) {
        let table = build(entries);
        let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
        let labels = folder_labels(&keys);
        assert_eq!(table.len(), entries.len() as u64);
        let expected: Vec<FileEntry> = entries
            .iter()
            .zip(labels)
            .map(|(e, label)| FileEntry {
                key: e.key.clone(),
                size: e.size,
                etag_fingerprint: ETag::from_store(e.etag.as_deref()).map(|t| t.fingerprint()),
                crc32c: e
                    .crc32c
                    .filter(|_| ETag::from_store(e.etag.as_deref()).is_none()),
                label,
            })
            .collect();
        assert_eq!(table.iter().collect::<Vec<_>>(), expected);
        // Random access, and through the checked form a shared file is read in.
        let reread =
            FilesTable::from_bytes(TableBytes::Owned(table.as_bytes().to_vec()), &[7; 32]).unwrap();
        for i in (0..entries.len()).rev().step_by(7) {
            assert_eq!(reread.get(i as u64).as_ref(), Some(&expected[i]));
        }
        assert_eq!(reread.get(entries.len() as u64), None);
    }

    /// The awkward keys of the key tests: object_store cannot spell some of them.
    const AWKWARD: [&str; 12] = [
        "a//b.jpg",
        "x/",
        "x//y",
        "tab\there/1.jpg",
        "dot/./1.jpg",
        "up/../1.jpg",
        "ünï/cödé/日本.jpg",
        "ctl/\u{1}\u{7f}.jpg",
        "/lead.jpg",
        "",
        "trail/.",
        "sp ace/%41.jpg",
    ];

    fn plain(key: &str, i: u64) -> Plain {
        Plain {
            key: key.to_owned(),
            size: i * 1_000_003 % 300_000,
            etag: (!i.is_multiple_of(3)).then(|| format!("\"{i:032x}\"")),
            crc32c: i.is_multiple_of(2).then_some(i as u32 ^ 0xdead_beef),
        }
    }

    #[test]
    fn awkward_keys_round_trip() {
        let entries: Vec<Plain> = (0..200)
            .map(|i| plain(AWKWARD[i % AWKWARD.len()], i as u64))
            .collect();
        check(&entries);
        let mut sorted = entries.clone();
        sorted.sort_by(|a, b| a.key.cmp(&b.key));
        check(&sorted);
    }

    #[test]
    fn keys_of_a_thousand_classes_cost_under_sixteen_bytes() {
        let entries: Vec<Plain> = (0..100_000u64)
            .map(|i| Plain {
                key: format!("train/class_{:03}/sample_{i:07}.jpg", i / 100),
                size: 100_000 + i * 7919 % 50_000,
                etag: Some(format!("{:032x}", u128::from(i) * 0x9e37_79b9_7f4a_7c15)),
                crc32c: Some(i as u32), // as `bucketload manifest` writes
            })
            .collect();
        let table = build(&entries);
        let per_entry = table.as_bytes().len() as f64 / entries.len() as f64;
        assert!(per_entry < 16.0, "{per_entry} bytes per entry");
        check(&entries[..5_000]);
    }

    #[test]
    fn empty_and_huge_sizes() {
        check(&[]);
        check(&[Plain {
            key: "a/b".to_owned(),
            size: u64::MAX,
            etag: Some(String::new()),
            crc32c: Some(0),
        }]);
    }

    #[test]
    fn a_damaged_table_is_refused() {
        let entries: Vec<Plain> = (0..100).map(|i| plain(&format!("d/{i}"), i)).collect();
        let bytes = build(&entries).as_bytes().to_vec();
        for at in [0, 9, 20, 50, HEADER_LEN, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(
                FilesTable::from_bytes(TableBytes::Owned(bad), &[7; 32]).is_err(),
                "{at}"
            );
        }
        let cut = bytes[..bytes.len() - 1].to_vec();
        assert!(FilesTable::from_bytes(TableBytes::Owned(cut), &[7; 32]).is_err());
        assert!(FilesTable::from_bytes(TableBytes::Owned(bytes.clone()), &[8; 32]).is_err());
        assert!(FilesTable::from_bytes(TableBytes::Owned(bytes), &[7; 32]).is_ok());
    }

    fn key_strategy() -> impl Strategy<Value = String> {
        let awkward = proptest::sample::select(AWKWARD.to_vec()).prop_map(str::to_owned);
        let folder = "(cls_[0-9]{1,2}/){0,2}[a-z_]{0,6}[0-9]{0,5}(\\.jpg)?";
        prop_oneof![3 => folder, 1 => awkward, 1 => any::<String>()]
    }

    proptest! {
        #[test]
        fn random_key_sets_round_trip(
            keys in proptest::collection::vec(key_strategy(), 0..300),
            sizes in proptest::collection::vec(any::<u64>(), 300),
            sort in any::<bool>(),
        ) {
            let mut keys = keys;
            if sort {
                keys.sort();
            }
            let entries: Vec<Plain> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| Plain { size: sizes[i], ..plain(k, i as u64) })
                .collect();
            check(&entries);
        }
    }
}
