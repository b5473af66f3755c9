//! The source's objects in a few bytes each, sorted into plan order.
//!
//! A sharding plan needs every object's key, size and version (ETag, CRC32C) at once: held as
//! [`SourceObject`]s that is ~150 bytes an object, ~300 MB at 2×10⁶. [`ObjectTable`] keeps them
//! front-coded instead: each record stores the bytes its key does not share with the previous
//! key, the size as a varint, an MD5-style ETag as its 16 raw bytes, and the CRC32C when there is
//! one; every [`BLOCK`]th record restarts the front coding, so record `i` is decoded from the
//! start of its block. A class-per-folder dataset (`class_0042/sample_00001234.jpg`) costs about
//! 30 bytes an object.
//!
//! Listings do not arrive sorted (folders are listed in parallel, local folders in directory
//! order), so [`TableBuilder`] sorts them on the way in without holding them whole: objects are
//! gathered [`RUN_LEN`] at a time, each run sorted and front-coded, and [`TableBuilder::finish`]
//! merges the runs into the table, freeing each run's pages as the merge leaves them. Memory
//! peaks at about one table plus one run of [`SourceObject`]s.
//!
//! Records are in plan order: by WebDataset sample key, then by object key (the order the
//! plan's samples and their members take).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use bucketload_format::split_key;
use bucketload_store::ETag;

use super::SourceObject;

/// Records per block: record `i` is found by decoding at most this many.
const BLOCK: usize = 16;
/// Bytes a page is filled to before the next block starts a new one: pages are never grown
/// much past this, so the table never holds a reallocation's two copies of itself.
const PAGE_BYTES: usize = 64 << 10;
/// Objects gathered before they are sorted into a run: 2¹⁶ × ~150 bytes ≈ 10 MB.
const RUN_LEN: usize = 1 << 16;

/// The order of the table: sample key, then object key.
pub(super) fn plan_order(a: &str, b: &str) -> Ordering {
    split_key(a).0.cmp(split_key(b).0).then_with(|| a.cmp(b))
}

/// Front-coded records in pages of whole blocks.
#[derive(Debug, Default)]
struct Pages {
    pages: Vec<Vec<u8>>,
    /// Page and offset of the first record of every block.
    blocks: Vec<(u32, u32)>,
    len: usize,
    previous: String,
}

impl Pages {
    fn push(&mut self, object: &SourceObject) {
        if self.len.is_multiple_of(BLOCK) {
            if self.pages.last().is_none_or(|p| p.len() >= PAGE_BYTES) {
                self.pages.push(Vec::with_capacity(PAGE_BYTES + (4 << 10)));
            }
            let page = self.pages.len() - 1;
            // A page holds at most PAGE_BYTES plus one block: far below u32::MAX.
            let offset = self.pages[page].len() as u32;
            self.blocks.push((page as u32, offset));
            self.previous.clear();
        }
        let page = self.pages.last_mut().expect("a page was pushed above");
        encode(page, &self.previous, object);
        self.previous.clear();
        self.previous.push_str(&object.key);
        self.len += 1;
    }
}

/// The source's objects, front-coded, in [`plan_order`] (or by key: [`TableBuilder::by_key`]).
#[derive(Debug, Default)]
pub(crate) struct ObjectTable {
    pages: Pages,
}

impl ObjectTable {
    /// Objects in the table.
    pub(crate) fn len(&self) -> usize {
        self.pages.len
    }

    /// The position of the object `key` in a table sorted by key.
    pub(crate) fn find(&self, key: &str) -> Option<usize> {
        let first_key = |block: usize| {
            let (page, offset) = self.pages.blocks[block];
            Reader::new(&self.pages.pages[page as usize][offset as usize..])
                .next()
                .key
        };
        let blocks = self.pages.blocks.len();
        let after = partition(blocks, |b| first_key(b).as_str() <= key);
        let block = after.checked_sub(1)?;
        let start = block * BLOCK;
        let end = (start + BLOCK).min(self.len());
        let found = self.get(start..end).iter().position(|o| o.key == key)?;
        Some(start + found)
    }

    /// Objects `range`, decoded.
    pub(crate) fn get(&self, range: std::ops::Range<usize>) -> Vec<SourceObject> {
        let mut out = Vec::with_capacity(range.len());
        let mut reader = Reader::new(&[]);
        for i in range.start / BLOCK * BLOCK..range.end {
            if i.is_multiple_of(BLOCK) {
                let (page, offset) = self.pages.blocks[i / BLOCK];
                reader.jump(&self.pages.pages[page as usize][offset as usize..]);
            }
            let object = reader.next();
            if i >= range.start {
                out.push(object);
            }
        }
        out
    }

    /// Every object in order, decoded one at a time.
    pub(crate) fn iter(&self) -> impl Iterator<Item = SourceObject> + '_ {
        let mut pages = self.pages.pages.iter();
        let mut reader = Reader::new(&[]);
        (0..self.len()).map(move |_| {
            while reader.is_empty() {
                reader.jump(pages.next().map_or(&[][..], Vec::as_slice));
            }
            reader.next()
        })
    }

    /// Bytes held (the pages' capacity and the block table).
    pub(super) fn heap_bytes(&self) -> usize {
        let pages: usize = self.pages.pages.iter().map(Vec::capacity).sum();
        pages + self.pages.blocks.capacity() * std::mem::size_of::<(u32, u32)>()
    }
}

/// How a table's records are ordered.
type Order = fn(&str, &str) -> Ordering;

/// Sorts objects into an [`ObjectTable`] as they arrive, in any order.
#[derive(Debug)]
pub(crate) struct TableBuilder {
    pending: Vec<SourceObject>,
    runs: Vec<Pages>,
    order: Order,
}

impl Default for TableBuilder {
    /// A builder of a table in [`plan_order`].
    fn default() -> TableBuilder {
        TableBuilder {
            pending: Vec::new(),
            runs: Vec::new(),
            order: plan_order,
        }
    }
}

impl TableBuilder {
    /// A builder of a table sorted by key, in which [`ObjectTable::find`] finds keys.
    pub(crate) fn by_key() -> TableBuilder {
        TableBuilder {
            order: str::cmp,
            ..TableBuilder::default()
        }
    }

    /// Adds one object.
    pub(crate) fn push(&mut self, object: SourceObject) {
        self.pending.push(object);
        if self.pending.len() >= RUN_LEN {
            self.spill();
        }
    }

    /// Sorts the pending objects into a run.
    fn spill(&mut self) {
        let order = self.order;
        self.pending.sort_by(|a, b| order(&a.key, &b.key));
        let mut run = Pages::default();
        for object in self.pending.drain(..) {
            run.push(&object);
        }
        run.previous = String::new();
        self.runs.push(run);
    }

    /// Merges the runs into the table.
    pub(crate) fn finish(mut self) -> ObjectTable {
        if !self.pending.is_empty() {
            self.spill();
        }
        self.pending = Vec::new();
        let mut table = Pages::default();
        let mut heap = BinaryHeap::with_capacity(self.runs.len());
        for (i, run) in self.runs.into_iter().enumerate() {
            let mut cursor = RunCursor {
                pages: run.pages.into(),
                offset: 0,
                key: String::new(),
                run: i,
            };
            if let Some(head) = cursor.next() {
                heap.push(Head {
                    object: head,
                    cursor,
                    order: self.order,
                });
            }
        }
        while let Some(Head {
            object,
            mut cursor,
            order,
        }) = heap.pop()
        {
            table.push(&object);
            if let Some(next) = cursor.next() {
                heap.push(Head {
                    object: next,
                    cursor,
                    order,
                });
            }
        }
        table.previous = String::new();
        ObjectTable { pages: table }
    }
}

/// Reads a run in order, freeing each page once read.
#[derive(Debug)]
struct RunCursor {
    pages: VecDeque<Vec<u8>>,
    offset: usize,
    key: String,
    run: usize,
}

impl RunCursor {
    fn next(&mut self) -> Option<SourceObject> {
        loop {
            let page = self.pages.front()?;
            if self.offset < page.len() {
                let mut reader = Reader {
                    bytes: &page[self.offset..],
                    key: std::mem::take(&mut self.key),
                };
                let object = reader.next();
                self.offset = page.len() - reader.bytes.len();
                self.key = reader.key;
                return Some(object);
            }
            self.pages.pop_front();
            self.offset = 0;
        }
    }
}

/// The next object of one run, ordered for a min-heap (earlier run first among equals, so the
/// merge is stable).
#[derive(Debug)]
struct Head {
    object: SourceObject,
    cursor: RunCursor,
    order: Order,
}

impl Ord for Head {
    fn cmp(&self, other: &Head) -> Ordering {
        (self.order)(&other.object.key, &self.object.key)
            .then_with(|| other.cursor.run.cmp(&self.cursor.run))
    }
}

impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Head) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Head {
    fn eq(&self, other: &Head) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Head {}

/// The first of `0..n` for which `is_before` is false (it is true, then false).
fn partition(n: usize, is_before: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if is_before(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// How a record's ETag is stored.
const ETAG_NONE: u8 = 0;
/// 32 lowercase hex digits (an MD5, S3's single-part ETag), stored as 16 bytes.
const ETAG_HEX: u8 = 1;
/// Anything else, stored as its bytes.
const ETAG_TEXT: u8 = 2;
/// Flag: a CRC32C follows.
const HAS_CRC: u8 = 4;

fn encode(out: &mut Vec<u8>, previous: &str, object: &SourceObject) {
    let key = object.key.as_str();
    let mut shared = previous
        .bytes()
        .zip(key.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    while !key.is_char_boundary(shared) {
        shared -= 1;
    }
    let suffix = &key.as_bytes()[shared..];
    put_varint(out, shared as u64);
    put_varint(out, suffix.len() as u64);
    out.extend_from_slice(suffix);
    put_varint(out, object.size);
    let etag = object.etag.as_ref().map(ETag::as_str);
    let hex = etag.and_then(hex16);
    let mut flags = match (etag, hex) {
        (None, _) => ETAG_NONE,
        (Some(_), Some(_)) => ETAG_HEX,
        (Some(_), None) => ETAG_TEXT,
    };
    if object.crc32c.is_some() {
        flags |= HAS_CRC;
    }
    out.push(flags);
    match (etag, hex) {
        (_, Some(raw)) => out.extend_from_slice(&raw),
        (Some(text), None) => {
            put_varint(out, text.len() as u64);
            out.extend_from_slice(text.as_bytes());
        }
        (None, None) => {}
    }
    if let Some(crc) = object.crc32c {
        out.extend_from_slice(&crc.to_le_bytes());
    }
}

/// The 16 bytes of 32 lowercase hex digits (spelled back exactly by [`hex::encode`]).
fn hex16(text: &str) -> Option<[u8; 16]> {
    let lower = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if text.len() != 32 || !text.bytes().all(lower) {
        return None;
    }
    let mut raw = [0u8; 16];
    hex::decode_to_slice(text, &mut raw).ok()?;
    Some(raw)
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Decodes records this module encoded; its input is never anything else, so a short read is a
/// bug, not bad input.
#[derive(Debug)]
struct Reader<'a> {
    bytes: &'a [u8],
    key: String,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader {
            bytes,
            key: String::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Continues at the start of a block.
    fn jump(&mut self, bytes: &'a [u8]) {
        self.bytes = bytes;
        self.key.clear();
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        head
    }

    fn varint(&mut self) -> u64 {
        let (mut n, mut shift) = (0u64, 0);
        loop {
            let b = self.take(1)[0];
            n |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return n;
            }
            shift += 7;
        }
    }

    fn next(&mut self) -> SourceObject {
        let shared = self.varint() as usize;
        let len = self.varint() as usize;
        let suffix = self.take(len);
        self.key.truncate(shared);
        // Encoded from a `str`, cut at a char boundary.
        self.key
            .push_str(std::str::from_utf8(suffix).expect("suffixes are cut at char boundaries"));
        let size = self.varint();
        let flags = self.take(1)[0];
        let etag = match flags & 3 {
            ETAG_HEX => Some(ETag::parse(&hex::encode(self.take(16)))),
            ETAG_TEXT => {
                let n = self.varint() as usize;
                let text = std::str::from_utf8(self.take(n)).expect("ETags are encoded from str");
                Some(ETag::parse(text))
            }
            _ => None,
        };
        let crc32c = (flags & HAS_CRC != 0).then(|| {
            let raw: [u8; 4] = self.take(4).try_into().expect("took 4 bytes");
            u32::from_le_bytes(raw)
        });
        SourceObject {
            key: self.key.clone(),
            size,
            etag,
            crc32c,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn object(i: usize) -> SourceObject {
        let etag = match i % 4 {
            0 => None,
            1 => Some(format!("{:032x}", i * 7919)),
            2 => Some(format!("{:032x}-3", i)),
            _ => Some(format!("{:032X}", i + 1)),
        };
        SourceObject {
            key: format!(
                "class_{:03}/sample_{:06}.{}",
                i % 37,
                i,
                ["jpg", "cls", "é"][i % 3]
            ),
            size: (i as u64) << (i % 40),
            etag: etag.as_deref().map(ETag::parse),
            crc32c: i.is_multiple_of(5).then_some(i as u32 ^ 0xdead_beef),
        }
    }

    #[test]
    fn a_table_holds_every_object_in_plan_order_whatever_the_order_they_came_in() {
        // Three runs and a part of one, arriving in a scrambled order.
        let n = RUN_LEN * 3 + 1234;
        let mut expected: Vec<SourceObject> = (0..n).map(object).collect();
        let mut builder = TableBuilder::default();
        for i in 0..n {
            builder.push(object((i * 48_271) % n));
        }
        let table = builder.finish();
        expected.sort_by(|a, b| plan_order(&a.key, &b.key));
        assert_eq!(table.len(), n);
        let all: Vec<SourceObject> = table.iter().collect();
        assert!(all == expected, "the table's order differs");
        for range in [0..1, 5..40, 15..17, 16..32, n - 3..n, 1000..1000] {
            assert_eq!(table.get(range.clone()), expected[range]);
        }
        let per_object = table.heap_bytes() / n;
        assert!(per_object < 48, "{per_object} bytes an object");
    }

    #[test]
    fn a_table_by_key_finds_every_key_and_nothing_else() {
        let n = RUN_LEN + 100;
        let mut builder = TableBuilder::by_key();
        for i in 0..n {
            builder.push(object((i * 7_919) % n));
        }
        let table = builder.finish();
        let all: Vec<SourceObject> = table.iter().collect();
        assert!(all.windows(2).all(|w| w[0].key < w[1].key));
        for i in (0..n).step_by(97).chain([0, n - 1]) {
            assert_eq!(table.find(&all[i].key), Some(i));
        }
        for absent in [
            "",
            "a",
            "class_000/sample_",
            "zzz",
            "class_036/sample_999999.jpg~",
        ] {
            assert_eq!(table.find(absent), None, "{absent}");
        }
    }

    #[test]
    fn samples_come_before_keys_that_sort_between_their_members() {
        let mut keys = vec!["a/1.txt", "a/1.x/y.jpg", "a/1-b.jpg", "a/1.jpg"];
        keys.sort_by(|a, b| plan_order(a, b));
        assert_eq!(keys, ["a/1.jpg", "a/1.txt", "a/1-b.jpg", "a/1.x/y.jpg"]);
    }
}
