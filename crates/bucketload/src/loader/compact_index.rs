//! A shard index as the loader's index cache holds it: flat arrays instead of a string and a
//! vector per sample — some 70 bytes for a two-member sample with a 16-byte key, where the
//! parsed [`ShardIndex`] takes about 250.
//!
//! The keys are one string, each sample's key ending at its entry of `key_ends`; the members
//! are one vector of 24-byte rows in shard order, each sample's ending at its entry of
//! `member_ends`. A row holds the member's header offset, data size and CRC32C, the distance
//! from its header to its data in 512-byte tar blocks, and its extension as an id into the
//! index's table of distinct extensions. What a row cannot hold — data not a whole number of
//! blocks after its header or 65,535 blocks (32 MiB) or more after it, an extension past the
//! 65,535th distinct one — is kept by member number in a side table, so every index is held
//! exactly; a valid index of a shard written by bucketload needs neither.

use std::collections::HashMap;
use std::ops::Range;

use bucketload_format::{BLOCK, IndexMember, IndexSample, ShardIndex};

use crate::{Error, Result};

/// A row field's value saying "in the side table".
const WIDE: u16 = u16::MAX;

/// Extensions looked up by a scan of the table, before a hash map: an index has two or three
/// (`jpg`, `cls`, `json`), and comparing a few short strings costs less than hashing one.
const FEW_EXTS: usize = 8;

/// One member: 24 bytes.
#[derive(Debug, Clone, Copy)]
struct Row {
    header_offset: u64,
    size: u64,
    crc32c: u32,
    /// Blocks from the header to the data, or [`WIDE`]: the data offset is in `wide_data`.
    header_blocks: u16,
    /// The extension's id in `exts`, or [`WIDE`]: its id is in `wide_exts`.
    ext: u16,
}

/// A checked shard index in flat arrays (see the module's docs).
#[derive(Debug)]
pub(crate) struct CompactIndex {
    keys: String,
    key_ends: Vec<u32>,
    member_ends: Vec<u32>,
    rows: Vec<Row>,
    /// Distinct extensions, in order of first appearance.
    exts: Vec<Box<str>>,
    /// Data offsets of the members whose row says [`WIDE`], by member number (ascending).
    wide_data: Vec<(u32, u64)>,
    /// Extension ids of the members whose row says [`WIDE`], by member number (ascending).
    wide_exts: Vec<(u32, u32)>,
}

impl CompactIndex {
    /// `index` (the index at `uri`, for errors) in flat arrays. Fails only for an index with
    /// 4 GiB of keys or 2³² members, more than one shard's index can be held as.
    pub(crate) fn new(index: &ShardIndex, uri: &str) -> Result<CompactIndex> {
        let key_bytes: usize = index.samples.iter().map(|s| s.key.len()).sum();
        let members: usize = index.samples.iter().map(|s| s.members.len()).sum();
        if u32::try_from(key_bytes).is_err() || u32::try_from(members).is_err() {
            return Err(Error::invalid_input(format!(
                "{uri} holds {key_bytes} bytes of keys and {members} members, more than the \
                 loader holds for one shard (4 GiB of keys, 2^32 - 1 members); reshard the \
                 dataset into smaller shards with `bucketload shard`"
            )));
        }
        let mut built = CompactIndex {
            keys: String::with_capacity(key_bytes),
            key_ends: Vec::with_capacity(index.samples.len()),
            member_ends: Vec::with_capacity(index.samples.len()),
            rows: Vec::with_capacity(members),
            exts: Vec::new(),
            wide_data: Vec::new(),
            wide_exts: Vec::new(),
        };
        let mut ids: HashMap<&str, u32> = HashMap::new();
        for sample in &index.samples {
            built.keys.push_str(&sample.key);
            built.key_ends.push(built.keys.len() as u32);
            for m in &sample.members {
                let id = built.ext_id(&m.ext, &mut ids);
                built.push(m, id);
            }
            built.member_ends.push(built.rows.len() as u32);
        }
        built.exts.shrink_to_fit();
        built.wide_data.shrink_to_fit();
        built.wide_exts.shrink_to_fit();
        Ok(built)
    }

    /// The id of extension `ext`, added to the table if new; `ids` maps every extension in the
    /// table to its id.
    fn ext_id<'a>(&mut self, ext: &'a str, ids: &mut HashMap<&'a str, u32>) -> u32 {
        let known = match self.exts.len() <= FEW_EXTS {
            true => self.exts.iter().position(|e| **e == *ext).map(|i| i as u32),
            false => ids.get(ext).copied(),
        };
        known.unwrap_or_else(|| {
            let id = self.exts.len() as u32;
            self.exts.push(ext.into());
            ids.insert(ext, id);
            id
        })
    }

    /// Appends member `m` with extension id `ext` (the caller has checked the member count
    /// fits a u32).
    fn push(&mut self, m: &IndexMember, ext: u32) {
        let number = self.rows.len() as u32;
        let block = BLOCK as u64;
        let blocks = m
            .data_offset
            .checked_sub(m.header_offset)
            .filter(|gap| gap.is_multiple_of(block))
            .and_then(|gap| u16::try_from(gap / block).ok())
            .filter(|&b| b != WIDE);
        let header_blocks = blocks.unwrap_or_else(|| {
            self.wide_data.push((number, m.data_offset));
            WIDE
        });
        let ext = u16::try_from(ext)
            .ok()
            .filter(|&e| e != WIDE)
            .unwrap_or_else(|| {
                self.wide_exts.push((number, ext));
                WIDE
            });
        self.rows.push(Row {
            header_offset: m.header_offset,
            size: m.size,
            crc32c: m.crc32c,
            header_blocks,
            ext,
        });
    }

    /// Number of samples.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.key_ends.len()
    }

    /// Sample `i`, as the parsed index has it.
    pub(crate) fn sample(&self, i: usize) -> Option<IndexSample> {
        let key = self.keys.get(span(&self.key_ends, i)?)?.to_owned();
        let members = span(&self.member_ends, i)?
            .map(|j| self.member(j))
            .collect::<Option<Vec<IndexMember>>>()?;
        Some(IndexSample { key, members })
    }

    /// Byte offset of sample `i`'s first header.
    pub(crate) fn first_header_offset(&self, i: usize) -> Option<u64> {
        let first = span(&self.member_ends, i)?.next()?;
        Some(self.rows.get(first)?.header_offset)
    }

    /// Member number `j`.
    fn member(&self, j: usize) -> Option<IndexMember> {
        let row = self.rows.get(j)?;
        let data_offset = match row.header_blocks {
            WIDE => wide(&self.wide_data, j)?,
            blocks => row.header_offset + u64::from(blocks) * BLOCK as u64,
        };
        let ext = match row.ext {
            WIDE => wide(&self.wide_exts, j)?,
            id => u32::from(id),
        };
        Some(IndexMember {
            ext: self.exts.get(ext as usize)?.to_string(),
            header_offset: row.header_offset,
            data_offset,
            size: row.size,
            crc32c: row.crc32c,
        })
    }

    /// Bytes the index takes in memory: the struct and the capacity of each of its arrays and
    /// strings (a few allocations per index, so the allocator's own bytes are left out).
    pub(crate) fn resident_bytes(&self) -> u64 {
        let exts: usize = self.exts.iter().map(|e| e.len()).sum();
        let total = size_of::<CompactIndex>()
            + self.keys.capacity()
            + self.key_ends.capacity() * size_of::<u32>()
            + self.member_ends.capacity() * size_of::<u32>()
            + self.rows.capacity() * size_of::<Row>()
            + self.exts.capacity() * size_of::<Box<str>>()
            + exts
            + self.wide_data.capacity() * size_of::<(u32, u64)>()
            + self.wide_exts.capacity() * size_of::<(u32, u32)>();
        total as u64
    }
}

/// The range of entry `i` of `ends`, each entry ending where the next begins.
fn span(ends: &[u32], i: usize) -> Option<Range<usize>> {
    let end = *ends.get(i)? as usize;
    let start = match i {
        0 => 0,
        _ => ends[i - 1] as usize,
    };
    Some(start..end)
}

/// Member `j`'s value in a side table.
fn wide<T: Copy>(table: &[(u32, T)], j: usize) -> Option<T> {
    let j = u32::try_from(j).ok()?;
    let at = table.binary_search_by_key(&j, |&(number, _)| number).ok()?;
    Some(table[at].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(ext: &str, header_offset: u64, size: u64) -> IndexMember {
        IndexMember {
            ext: ext.to_owned(),
            header_offset,
            data_offset: header_offset + 512,
            size,
            crc32c: (header_offset as u32).wrapping_mul(2_654_435_761),
        }
    }

    /// An index of `samples`, its members laid out one after another as a tar writer would.
    fn index(samples: Vec<(String, Vec<(&str, u64)>)>) -> ShardIndex {
        let mut at = 0u64;
        let samples = samples
            .into_iter()
            .map(|(key, members)| {
                let members = members
                    .into_iter()
                    .map(|(ext, size)| {
                        let m = member(ext, at, size);
                        at = (m.data_offset + size).next_multiple_of(512);
                        m
                    })
                    .collect();
                IndexSample { key, members }
            })
            .collect();
        ShardIndex {
            shard_size: at,
            shard_crc32c: 7,
            shard_md5: [0; 16],
            samples,
        }
    }

    fn round_trip(index: &ShardIndex) -> CompactIndex {
        let compact = CompactIndex::new(index, "s3://b/shard.tar.idx").unwrap();
        assert_eq!(compact.len(), index.samples.len());
        for (i, sample) in index.samples.iter().enumerate() {
            assert_eq!(compact.sample(i).as_ref(), Some(sample), "sample {i}");
            let first = sample.members.first().map(|m| m.header_offset);
            assert_eq!(compact.first_header_offset(i), first, "sample {i}");
        }
        let past = index.samples.len();
        assert_eq!(compact.sample(past), None);
        assert_eq!(compact.first_header_offset(past), None);
        compact
    }

    #[test]
    fn samples_of_one_two_and_many_members_come_back_as_they_were() {
        let many: Vec<(&str, u64)> = (0..40).map(|_| ("seg.png", 3)).collect();
        let index = index(vec![
            ("a/000000".into(), vec![("jpg", 4000)]),
            ("a/000001".into(), vec![("jpg", 4001), ("cls", 1)]),
            ("a/000002".into(), many),
            (
                "a/000003".into(),
                vec![("cls", 0), ("json", 512), ("jpg", 1)],
            ),
        ]);
        let compact = round_trip(&index);
        assert_eq!(
            compact.exts.len(),
            4,
            "jpg, cls, seg.png and json, each once"
        );
    }

    #[test]
    fn empty_extensions_long_and_non_ascii_keys_come_back_as_they_were() {
        let index = index(vec![
            ("".into(), vec![("", 1)]),
            ("k".repeat(65_535), vec![("", 2), ("jpg", 3)]),
            ("données/échantillon-日本語-🦀".into(), vec![("jpg", 5)]),
            ("x".into(), vec![("tar.gz", 6)]),
        ]);
        round_trip(&index);
    }

    #[test]
    fn offsets_and_sizes_past_four_gib_come_back_as_they_were() {
        let mut index = index(vec![("a".into(), vec![("jpg", 1)])]);
        let far = 5u64 << 32;
        index.samples.push(IndexSample {
            key: "b".into(),
            members: vec![
                member("jpg", far, (1 << 33) + 17),
                member("cls", far + (2 << 33), u64::MAX - far - (4 << 33)),
            ],
        });
        let compact = round_trip(&index);
        assert!(compact.wide_data.is_empty() && compact.wide_exts.is_empty());
    }

    #[test]
    fn headers_of_any_length_are_kept_by_member_number() {
        let mut index = index(vec![("a".into(), vec![("jpg", 1), ("cls", 1)])]);
        let members = &mut index.samples[0].members;
        members.push(member("pax", 1 << 20, 9));
        members[2].data_offset = members[2].header_offset + 65_535 * 512; // the first too far
        members.push(member("gnu", 1 << 40, 9));
        members[3].data_offset = members[3].header_offset + 3 * 512 + 100; // not a block
        members.push(member("long", 1 << 41, 9));
        members[4].data_offset = members[4].header_offset + 65_534 * 512; // the last in a row
        let compact = round_trip(&index);
        assert_eq!(compact.wide_data.len(), 2);
        assert_eq!(compact.wide_data[0].0, 2);
    }

    #[test]
    fn extensions_past_the_rows_ids_are_kept_by_member_number() {
        let exts: Vec<String> = (0..70_000).map(|i| format!("{i}.jpg")).collect();
        let index = index(vec![
            ("a".into(), exts.iter().map(|e| (e.as_str(), 1)).collect()),
            ("b".into(), vec![("0.jpg", 1), ("69999.jpg", 2), ("cls", 3)]),
        ]);
        let compact = round_trip(&index);
        assert_eq!(compact.exts.len(), 70_001);
        assert_eq!(compact.wide_exts.len(), 70_000 - 65_535 + 2);
    }

    #[test]
    fn resident_bytes_are_the_arrays_it_holds() {
        let samples = (0..1000)
            .map(|i| (format!("class_000/{i:06}"), vec![("jpg", 4000), ("cls", 1)]))
            .collect();
        let index = index(samples);
        let compact = round_trip(&index);
        let expected = size_of::<CompactIndex>()
            + 1000 * 16 // keys
            + 1000 * 4 // key ends
            + 1000 * 4 // member ends
            + 2000 * 24 // rows
            + 2 * size_of::<Box<str>>() + 3 + 3; // "jpg" and "cls"
        assert_eq!(compact.resident_bytes(), expected as u64);
        assert_eq!(size_of::<Row>(), 24);
        let per_sample = compact.resident_bytes() / 1000;
        assert!(per_sample <= 80, "{per_sample} bytes per sample");
    }

    #[test]
    fn resident_bytes_count_the_side_tables_and_every_extension() {
        let mut index = index(vec![("a".into(), vec![("jpg", 1), ("seg.png", 1)])]);
        index.samples[0].members[1].data_offset += 100 * 512 * 1024;
        let compact = round_trip(&index);
        let expected = size_of::<CompactIndex>()
            + 1
            + 4
            + 4
            + 2 * 24
            + 2 * size_of::<Box<str>>()
            + 3
            + 7
            + size_of::<(u32, u64)>();
        assert_eq!(compact.resident_bytes(), expected as u64);
    }
}
