//! Incremental (push) tar reader.
//!
//! Feed byte chunks with [`TarReader::push`] as they arrive, call
//! [`TarReader::finish_input`] at the end of the shard, and pull either
//! fine-grained [`Event`]s ([`TarReader::next_event`]: headers, then data
//! slices) or whole [`Member`]s ([`TarReader::next_member`]). Use one of the
//! two per reader. [`read_members`] wraps a [`std::io::Read`].

use std::collections::VecDeque;
use std::io::Read;

use bytes::{Bytes, BytesMut};

use crate::Error;
use crate::header::{self, BLOCK, EntryKind, field};

mod pax;
#[cfg(test)]
mod tests;

/// Default limit on the size of one PAX or GNU long-name header.
pub const DEFAULT_MAX_EXTENDED_HEADER: u64 = 1 << 20;

/// What to do with entries that are not regular files (directories, links,
/// devices, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum EntryPolicy {
    /// Skip them silently (default): `tar -cf x.tar dir/` shards work.
    #[default]
    Skip,
    /// Report them as [`Event::Entry`] / members of their kind with no data.
    Report,
    /// Fail with [`Error::UnsupportedEntry`].
    Error,
}

/// The header of one tar entry, after PAX and GNU extensions are applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryHeader {
    /// Member name, `./` prefix removed; directories end in `/`.
    pub name: String,
    /// Kind of entry.
    pub kind: EntryKind,
    /// Data size in bytes (0 for entries without data).
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Modification time, seconds since the epoch (fractions dropped,
    /// times before the epoch read as 0).
    pub mtime: u64,
    /// Link target for links.
    pub link_name: Option<String>,
    /// Offset of the entry's first header block (its PAX or GNU long-name
    /// header when it has one).
    pub header_offset: u64,
    /// Offset of the entry's first data byte.
    pub data_offset: u64,
}

/// One parsed event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A regular file starts; `Data` events totalling `size` bytes follow.
    Member(EntryHeader),
    /// A slice of the current member's data (zero-copy from a pushed chunk).
    Data(Bytes),
    /// A non-regular entry under [`EntryPolicy::Report`].
    Entry(EntryHeader),
    /// The two end-of-archive zero blocks were read; nothing follows.
    End,
}

/// A whole entry: its header and data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The header (`kind` is [`EntryKind::Regular`] unless entries are
    /// reported).
    pub header: EntryHeader,
    /// The data; zero-copy when a single pushed chunk held all of it.
    pub data: Bytes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExtKind {
    Pax,
    Global,
    LongName,
    LongLink,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Header,
    SecondZero,
    Extended {
        kind: ExtKind,
        size: u64,
    },
    Data {
        remaining: u64,
        pad: u64,
        emit: bool,
    },
    Done,
}

/// Overrides collected from extended headers for the next entry.
#[derive(Debug, Default)]
struct Pending {
    start: Option<u64>,
    pax: pax::PaxOverrides,
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
}

#[derive(Debug)]
struct Partial {
    header: EntryHeader,
    pieces: Vec<Bytes>,
    got: u64,
}

/// The push parser. See the module documentation.
#[derive(Debug)]
pub struct TarReader {
    shard: String,
    policy: EntryPolicy,
    max_extended: u64,
    chunks: VecDeque<Bytes>,
    buffered: usize,
    offset: u64,
    eof: bool,
    state: State,
    pending: Pending,
    partial: Option<Partial>,
}

impl TarReader {
    /// A reader for the shard called `shard` (a name or URI used in errors).
    pub fn new(shard: impl Into<String>) -> TarReader {
        TarReader {
            shard: shard.into(),
            policy: EntryPolicy::default(),
            max_extended: DEFAULT_MAX_EXTENDED_HEADER,
            chunks: VecDeque::new(),
            buffered: 0,
            offset: 0,
            eof: false,
            state: State::Header,
            pending: Pending::default(),
            partial: None,
        }
    }

    /// Sets the policy for non-regular entries.
    pub fn with_entry_policy(mut self, policy: EntryPolicy) -> TarReader {
        self.policy = policy;
        self
    }

    /// Sets the largest PAX / GNU long-name header accepted (default 1 MiB).
    pub fn with_max_extended_header(mut self, bytes: u64) -> TarReader {
        self.max_extended = bytes;
        self
    }

    /// The shard name given to [`TarReader::new`].
    pub fn shard(&self) -> &str {
        &self.shard
    }

    /// Appends the next chunk of the shard.
    pub fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() && !self.eof {
            self.buffered += chunk.len();
            self.chunks.push_back(chunk);
        }
    }

    /// Declares that no more input follows; an incomplete archive then
    /// fails with [`Error::Truncated`].
    pub fn finish_input(&mut self) {
        self.eof = true;
    }

    /// True once the end-of-archive blocks have been read.
    pub fn is_finished(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Offset of the next unread byte in the shard.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes pushed but not yet parsed.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// The next event, or `None` when more input is needed (or the archive
    /// has ended and [`Event::End`] was already returned).
    pub fn next_event(&mut self) -> Result<Option<Event>, Error> {
        loop {
            match self.state {
                State::Done => return Ok(None),
                State::Header => {
                    if !self.have(BLOCK, "a header block or the end-of-archive blocks")? {
                        return Ok(None);
                    }
                    if let Some(event) = self.on_header_block()? {
                        return Ok(Some(event));
                    }
                }
                State::SecondZero => {
                    if !self.have(BLOCK, "the second end-of-archive zero block")? {
                        return Ok(None);
                    }
                    let at = self.offset;
                    if self.take(BLOCK).iter().all(|&b| b == 0) {
                        self.state = State::Done;
                        self.chunks.clear();
                        self.buffered = 0;
                        return Ok(Some(Event::End));
                    }
                    return Err(self.malformed(at, "data follows a lone zero block"));
                }
                State::Extended { kind, size } => {
                    let padded = padded(size);
                    if !self.have(padded as usize, "an extended header")? {
                        return Ok(None);
                    }
                    let at = self.offset;
                    let data = self.take(size as usize);
                    self.skip((padded - size) as usize);
                    self.state = State::Header;
                    self.on_extended(kind, at, data)?;
                }
                State::Data {
                    remaining,
                    pad,
                    emit,
                } => {
                    if let Some(event) = self.on_data(remaining, pad, emit)? {
                        return Ok(Some(event));
                    }
                    if matches!(self.state, State::Data { .. }) && self.buffered == 0 {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// The next whole member, or `None` when more input is needed or the
    /// archive has ended (see [`TarReader::is_finished`]).
    pub fn next_member(&mut self) -> Result<Option<Member>, Error> {
        while let Some(event) = self.next_event()? {
            match event {
                Event::Member(header) if header.size == 0 => {
                    return Ok(Some(Member {
                        header,
                        data: Bytes::new(),
                    }));
                }
                Event::Member(header) => {
                    self.partial = Some(Partial {
                        header,
                        pieces: Vec::new(),
                        got: 0,
                    });
                }
                Event::Data(bytes) => {
                    if let Some(member) = self.add_data(bytes) {
                        return Ok(Some(member));
                    }
                }
                Event::Entry(header) => {
                    return Ok(Some(Member {
                        header,
                        data: Bytes::new(),
                    }));
                }
                Event::End => return Ok(None),
            }
        }
        Ok(None)
    }

    fn add_data(&mut self, bytes: Bytes) -> Option<Member> {
        let partial = self.partial.as_mut()?;
        partial.got += bytes.len() as u64;
        partial.pieces.push(bytes);
        if partial.got < partial.header.size {
            return None;
        }
        let Partial {
            header,
            mut pieces,
            got,
        } = self.partial.take()?;
        let data = if pieces.len() == 1 {
            pieces.pop().unwrap_or_default()
        } else {
            let mut all = BytesMut::with_capacity(got as usize);
            pieces.iter().for_each(|p| all.extend_from_slice(p));
            all.freeze()
        };
        Some(Member { header, data })
    }

    /// True if `n` bytes are buffered; an error if they never will be.
    fn have(&self, n: usize, what: &str) -> Result<bool, Error> {
        if self.buffered >= n {
            return Ok(true);
        }
        if !self.eof {
            return Ok(false);
        }
        let what = if self.buffered == 0 {
            format!("the shard ends where {what} should start")
        } else {
            format!("the shard ends {} bytes into {what}", self.buffered)
        };
        Err(Error::Truncated {
            shard: self.shard.clone(),
            offset: self.offset,
            what,
        })
    }

    fn on_data(&mut self, remaining: u64, pad: u64, emit: bool) -> Result<Option<Event>, Error> {
        if remaining > 0 {
            if self.buffered == 0 {
                return self.data_missing(remaining + pad).map(|()| None);
            }
            let piece = self.take_upto(remaining);
            self.state = State::Data {
                remaining: remaining - piece.len() as u64,
                pad,
                emit,
            };
            return Ok(emit.then_some(Event::Data(piece)));
        }
        let skipped = self.skip(pad as usize) as u64;
        if skipped < pad {
            self.state = State::Data {
                remaining: 0,
                pad: pad - skipped,
                emit,
            };
            return self.data_missing(pad - skipped).map(|()| None);
        }
        self.state = State::Header;
        Ok(None)
    }

    fn data_missing(&self, missing: u64) -> Result<(), Error> {
        if !self.eof {
            return Ok(());
        }
        Err(Error::Truncated {
            shard: self.shard.clone(),
            offset: self.offset,
            what: format!("{missing} more bytes of member data and padding were expected"),
        })
    }

    fn on_header_block(&mut self) -> Result<Option<Event>, Error> {
        let at = self.offset;
        let block = self.take(BLOCK);
        if block.iter().all(|&b| b == 0) {
            self.state = State::SecondZero;
            return Ok(None);
        }
        self.verify_checksum(at, &block)?;
        let size = self.number(&block, at, field::SIZE, "size")?;
        let flag = block[field::TYPEFLAG];
        let ext = match flag {
            b'x' => Some(ExtKind::Pax),
            b'g' => Some(ExtKind::Global),
            b'L' => Some(ExtKind::LongName),
            b'K' => Some(ExtKind::LongLink),
            _ => None,
        };
        if let Some(kind) = ext {
            if size > self.max_extended {
                let (shard, limit) = (self.shard.clone(), self.max_extended);
                return Err(Error::ExtendedHeaderTooLarge {
                    shard,
                    offset: at,
                    size,
                    limit,
                });
            }
            if kind != ExtKind::Global {
                self.pending.start.get_or_insert(at);
            }
            self.state = State::Extended { kind, size };
            return Ok(None);
        }
        let header = self.entry_header(at, &block, size)?;
        self.dispatch(header)
    }

    fn dispatch(&mut self, header: EntryHeader) -> Result<Option<Event>, Error> {
        let has_data = matches!(header.kind, EntryKind::Regular | EntryKind::Other(_));
        let size = if has_data { header.size } else { 0 };
        let pad = padded(size) - size;
        if header.kind == EntryKind::Regular {
            self.state = State::Data {
                remaining: size,
                pad,
                emit: true,
            };
            return Ok(Some(Event::Member(header)));
        }
        self.state = State::Data {
            remaining: size,
            pad,
            emit: false,
        };
        match self.policy {
            EntryPolicy::Skip => Ok(None),
            EntryPolicy::Report => Ok(Some(Event::Entry(EntryHeader { size, ..header }))),
            EntryPolicy::Error => Err(Error::UnsupportedEntry {
                shard: self.shard.clone(),
                offset: header.header_offset,
                name: header.name,
                kind: header.kind.describe(),
            }),
        }
    }

    fn entry_header(&mut self, at: u64, block: &[u8], size: u64) -> Result<EntryHeader, Error> {
        let pending = std::mem::take(&mut self.pending);
        let start = pending.start.unwrap_or(at);
        let mode = self.number(block, at, field::MODE, "mode")?;
        let mtime = self.number(block, at, field::MTIME, "mtime")?;
        self.number(block, at, field::UID, "uid")?;
        self.number(block, at, field::GID, "gid")?;
        let raw_name = match (pending.pax.path, pending.long_name) {
            (Some(path), _) => path.into_bytes(),
            (None, Some(long)) => long,
            (None, None) => ustar_name(block),
        };
        let name = self.checked_name(start, raw_name)?;
        let link = match (pending.pax.linkpath, pending.long_link) {
            (Some(path), _) => path.into_bytes(),
            (None, Some(long)) => long,
            (None, None) => header::cstr(field_of(block, field::LINKNAME)).to_vec(),
        };
        let link_name = (!link.is_empty()).then(|| String::from_utf8_lossy(&link).into_owned());
        Ok(EntryHeader {
            name,
            kind: EntryKind::from_flag(block[field::TYPEFLAG]),
            size: pending.pax.size.unwrap_or(size),
            mode: (mode & 0o7777) as u32,
            mtime: pending.pax.mtime.unwrap_or(mtime),
            link_name,
            header_offset: start,
            data_offset: at + BLOCK as u64,
        })
    }

    fn checked_name(&self, at: u64, raw: Vec<u8>) -> Result<String, Error> {
        let refuse = |name: String, reason| Error::UnsafeName {
            shard: self.shard.clone(),
            offset: at,
            name,
            reason,
        };
        let name = String::from_utf8(raw).map_err(|e| {
            refuse(
                String::from_utf8_lossy(e.as_bytes()).into_owned(),
                "not UTF-8",
            )
        })?;
        let stripped = match header::strip_dot_slash(&name) {
            "" if !name.is_empty() => ".",
            stripped => stripped,
        };
        header::check_name(stripped).map_err(|reason| refuse(name.clone(), reason))?;
        Ok(stripped.to_owned())
    }

    fn on_extended(&mut self, kind: ExtKind, at: u64, data: Bytes) -> Result<(), Error> {
        match kind {
            ExtKind::Global => Ok(()),
            ExtKind::Pax => {
                let parsed =
                    pax::parse(&data, at).map_err(|(offset, reason)| Error::BadExtendedHeader {
                        shard: self.shard.clone(),
                        offset,
                        reason,
                    })?;
                self.pending.pax.merge(parsed);
                Ok(())
            }
            ExtKind::LongName | ExtKind::LongLink => {
                let value = self.gnu_long(at, &data)?;
                if kind == ExtKind::LongName {
                    self.pending.long_name = Some(value);
                } else {
                    self.pending.long_link = Some(value);
                }
                Ok(())
            }
        }
    }

    fn gnu_long(&self, at: u64, data: &[u8]) -> Result<Vec<u8>, Error> {
        let end = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        let value = &data[..end];
        if let Some(nul) = value.iter().position(|&b| b == 0) {
            return Err(Error::UnsafeName {
                shard: self.shard.clone(),
                offset: at + nul as u64,
                name: String::from_utf8_lossy(value).into_owned(),
                reason: "NUL byte in name",
            });
        }
        Ok(value.to_vec())
    }

    fn verify_checksum(&self, at: u64, block: &[u8]) -> Result<(), Error> {
        let stored = self.number(block, at, field::CHKSUM, "chksum")?;
        let (unsigned, signed) = header::checksums(block);
        if stored == unsigned || stored == signed {
            return Ok(());
        }
        Err(Error::HeaderChecksum {
            shard: self.shard.clone(),
            offset: at,
            stored,
            computed: unsigned,
        })
    }

    fn number(
        &self,
        block: &[u8],
        at: u64,
        f: (usize, usize),
        name: &'static str,
    ) -> Result<u64, Error> {
        header::parse_number(field_of(block, f)).map_err(|_| Error::BadNumber {
            shard: self.shard.clone(),
            offset: at + f.0 as u64,
            field: name,
        })
    }

    fn malformed(&self, offset: u64, reason: &str) -> Error {
        Error::Malformed {
            shard: self.shard.clone(),
            offset,
            reason: reason.to_owned(),
        }
    }

    /// Takes exactly `n` buffered bytes (caller checked `buffered >= n`).
    fn take(&mut self, n: usize) -> Bytes {
        if self.chunks.front().is_some_and(|c| c.len() >= n) {
            return self.take_upto(n as u64);
        }
        let mut out = BytesMut::with_capacity(n);
        while out.len() < n {
            let piece = self.take_upto((n - out.len()) as u64);
            if piece.is_empty() {
                break;
            }
            out.extend_from_slice(&piece);
        }
        out.freeze()
    }

    /// Takes up to `n` bytes from the front chunk without copying.
    fn take_upto(&mut self, n: u64) -> Bytes {
        let Some(front) = self.chunks.front_mut() else {
            return Bytes::new();
        };
        let k = n.min(front.len() as u64) as usize;
        let piece = front.split_to(k);
        if front.is_empty() {
            self.chunks.pop_front();
        }
        self.buffered -= k;
        self.offset += k as u64;
        piece
    }

    /// Discards up to `n` bytes; returns how many were discarded.
    fn skip(&mut self, n: usize) -> usize {
        let mut done = 0;
        while done < n {
            let piece = self.take_upto((n - done) as u64);
            if piece.is_empty() {
                break;
            }
            done += piece.len();
        }
        done
    }
}

fn field_of(block: &[u8], (start, len): (usize, usize)) -> &[u8] {
    &block[start..start + len]
}

/// Rounds up to a whole number of blocks.
pub(crate) fn padded(size: u64) -> u64 {
    size.div_ceil(BLOCK as u64).saturating_mul(BLOCK as u64)
}

/// Name from the ustar `prefix` and `name` fields (prefix only for POSIX
/// ustar magic; GNU headers use that space for other fields).
fn ustar_name(block: &[u8]) -> Vec<u8> {
    let name = header::cstr(field_of(block, field::NAME));
    let posix = &block[field::MAGIC.0..field::MAGIC.0 + 6] == b"ustar\0";
    let prefix = header::cstr(field_of(block, field::PREFIX));
    if !posix || prefix.is_empty() {
        return name.to_vec();
    }
    let mut full = Vec::with_capacity(prefix.len() + 1 + name.len());
    full.extend_from_slice(prefix);
    full.push(b'/');
    full.extend_from_slice(name);
    full
}

/// Reads whole members from a [`Read`] source; see [`read_members`].
#[derive(Debug)]
pub struct ReadMembers<R> {
    parser: TarReader,
    source: R,
    chunk_size: usize,
    failed: bool,
}

/// Iterates over the members of a shard read from `source` in 256 KiB
/// chunks, ending after the end-of-archive blocks.
pub fn read_members<R: Read>(parser: TarReader, source: R) -> ReadMembers<R> {
    ReadMembers {
        parser,
        source,
        chunk_size: 256 << 10,
        failed: false,
    }
}

impl<R: Read> ReadMembers<R> {
    fn fill(&mut self) -> Result<(), Error> {
        let mut buf = vec![0u8; self.chunk_size];
        let n = loop {
            match self.source.read(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    let (shard, offset) = (
                        self.parser.shard.clone(),
                        self.parser.offset + self.parser.buffered as u64,
                    );
                    return Err(Error::Io {
                        shard,
                        offset,
                        source,
                    });
                }
            }
        };
        if n == 0 {
            self.parser.finish_input();
        } else {
            buf.truncate(n);
            self.parser.push(Bytes::from(buf));
        }
        Ok(())
    }
}

impl<R: Read> Iterator for ReadMembers<R> {
    type Item = Result<Member, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.failed && !self.parser.is_finished() {
            let step = match self.parser.next_member() {
                Ok(Some(member)) => return Some(Ok(member)),
                Ok(None) if self.parser.is_finished() => return None,
                Ok(None) => self.fill(),
                Err(e) => Err(e),
            };
            if let Err(e) = step {
                self.failed = true;
                return Some(Err(e));
            }
        }
        None
    }
}
