//! The shards of a shards dataset, packed so that a million of them fit in tens of megabytes.
//!
//! Each shard costs its name's bytes in one arena `String`, its name's end (`u32`, from the start
//! of its block of [`BLOCK`] shards), its size (`u64`), its sample count (`u64`, shared with the
//! source's [`Plan`](crate::source::Plan)) and one bit saying whether it has an index: with
//! names like `train/shard-0000123.tar`, 43 bytes per shard (51 with the plan's first sample of
//! each shard, for indexed reads), and no allocation per shard. Indexes are not held here: an indexed loader
//! fetches them when their shard comes up (`indexes.rs`).
//!
//! A table is built from rows (name, bytes, samples, has index) in the dataset's order, from a
//! manifest's entries or a listing: [`ShardTable::from_rows`].

use std::sync::Arc;

use bucketload_store::key_path;
use bucketload_store::object_store::path::Path;

/// Shards per block of names: a block's names (keys of at most 1,024 bytes in S3, 65,535 in
/// any index) then span less than 4 GiB, so `u32` offsets from the block's base suffice.
const BLOCK: usize = 1 << 16;

/// One shard as a manifest or a listing describes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShardRow<'a> {
    /// Key relative to the dataset's root.
    pub(crate) name: &'a str,
    /// Size in bytes.
    pub(crate) bytes: u64,
    /// Samples it holds.
    pub(crate) samples: u64,
    /// Whether its `.idx` exists.
    pub(crate) has_index: bool,
}

/// The shards of a dataset, in its order (see the module docs).
#[derive(Debug)]
pub(crate) struct ShardTable {
    /// Every shard's key (as [`Path`] spells it), one after the other.
    names: String,
    /// `bases[b]` is where block `b`'s keys start in `names`.
    bases: Vec<u64>,
    /// `ends[i]` is the end of shard `i`'s key in `names`, from its block's base.
    ends: Vec<u32>,
    sizes: Vec<u64>,
    counts: Arc<[u64]>,
    /// Bit `i` is set when shard `i` has an index.
    indexed: Vec<u64>,
}

impl Default for ShardTable {
    fn default() -> ShardTable {
        ShardTable {
            names: String::new(),
            bases: Vec::new(),
            ends: Vec::new(),
            sizes: Vec::new(),
            counts: Arc::new([]),
            indexed: Vec::new(),
        }
    }
}

impl ShardTable {
    /// The table of `rows`, in their order.
    pub(crate) fn from_rows<'a>(rows: impl IntoIterator<Item = ShardRow<'a>>) -> ShardTable {
        let rows = rows.into_iter();
        let n = rows.size_hint().0;
        let mut table = ShardTable {
            ends: Vec::with_capacity(n),
            sizes: Vec::with_capacity(n),
            ..ShardTable::default()
        };
        let mut counts = Vec::with_capacity(n);
        for row in rows {
            table.push_name(row.name);
            table.sizes.push(row.bytes);
            counts.push(row.samples);
            let i = table.sizes.len() - 1;
            if table.indexed.len() <= i / 64 {
                table.indexed.push(0);
            }
            if row.has_index {
                table.indexed[i / 64] |= 1 << (i % 64);
            }
        }
        table.names.shrink_to_fit();
        table.bases.shrink_to_fit();
        table.ends.shrink_to_fit();
        table.sizes.shrink_to_fit();
        table.counts = counts.into();
        table
    }

    /// Appends `name` as the key object_store reads it by: the name itself when it is a valid
    /// [`Path`] (nearly always), else its encoding.
    fn push_name(&mut self, name: &str) {
        if self.ends.len().is_multiple_of(BLOCK) {
            self.bases.push(self.names.len() as u64);
        }
        match Path::parse(name) {
            Ok(_) => self.names.push_str(name),
            Err(_) => self.names.push_str(key_path(name).as_ref()),
        }
        let base = self.bases.last().copied().unwrap_or_default();
        // Below 4 GiB: see [`BLOCK`].
        let end = u32::try_from(self.names.len() as u64 - base).unwrap_or(u32::MAX);
        self.ends.push(end);
    }

    /// Number of shards.
    pub(crate) fn len(&self) -> usize {
        self.sizes.len()
    }

    /// Shard `i`'s key as a string.
    pub(crate) fn name(&self, i: usize) -> &str {
        let base = self.bases[i / BLOCK] as usize;
        let start = match i % BLOCK {
            0 => base,
            _ => base + self.ends[i - 1] as usize,
        };
        &self.names[start..base + self.ends[i] as usize]
    }

    /// Shard `i`'s key (one allocation: for a request, never kept).
    pub(crate) fn key(&self, i: usize) -> Path {
        key_path(self.name(i))
    }

    /// Shard `i`'s size in bytes.
    pub(crate) fn size(&self, i: usize) -> u64 {
        self.sizes[i]
    }

    /// Samples of shard `i`.
    pub(crate) fn samples(&self, i: usize) -> u64 {
        self.counts[i]
    }

    /// Whether shard `i` has an index.
    pub(crate) fn has_index(&self, i: usize) -> bool {
        self.indexed[i / 64] & (1 << (i % 64)) != 0
    }

    /// Samples per shard, shared with the plan.
    pub(crate) fn counts(&self) -> &Arc<[u64]> {
        &self.counts
    }

    /// The first shard without an index, if any.
    pub(crate) fn first_unindexed(&self) -> Option<usize> {
        (0..self.len()).find(|&i| !self.has_index(i))
    }

    /// Bytes the table holds (its arrays' capacities), for the scale benchmarks' per-shard figure.
    pub(crate) fn resident_bytes(&self) -> usize {
        self.names.capacity()
            + 8 * (self.bases.capacity() + self.sizes.capacity() + self.indexed.capacity())
            + 4 * self.ends.capacity()
            + 8 * self.counts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, bytes: u64, samples: u64, has_index: bool) -> ShardRow<'_> {
        ShardRow {
            name,
            bytes,
            samples,
            has_index,
        }
    }

    #[test]
    fn rows_come_back_as_given() {
        let names: Vec<String> = (0..130).map(|i| format!("s/shard-{i:06}.tar")).collect();
        let rows = names
            .iter()
            .enumerate()
            .map(|(i, n)| row(n, 1000 + i as u64, i as u64 % 7, i % 3 != 0));
        let table = ShardTable::from_rows(rows);
        assert_eq!(table.len(), 130);
        for (i, name) in names.iter().enumerate() {
            assert_eq!(table.name(i), name);
            assert_eq!(table.key(i).as_ref(), name);
            assert_eq!(table.size(i), 1000 + i as u64);
            assert_eq!(table.samples(i), i as u64 % 7);
            assert_eq!(table.has_index(i), i % 3 != 0, "shard {i}");
        }
        assert_eq!(table.first_unindexed(), Some(0));
    }

    #[test]
    fn keys_keep_what_a_path_would_encode() {
        let table =
            ShardTable::from_rows([row("a/ü 1.tar", 1, 1, true), row("a//b.tar", 1, 1, true)]);
        assert_eq!(table.key(0).as_ref(), "a/ü 1.tar");
        assert_eq!(table.key(1).as_ref(), key_path("a//b.tar").as_ref());
    }

    #[test]
    fn a_million_shards_cost_under_64_bytes_each() {
        let n = 1_000_000;
        let names: Vec<String> = (0..n).map(|i| format!("train/shard-{i:07}.tar")).collect();
        let table = ShardTable::from_rows(names.iter().map(|n| row(n, 1 << 30, 1000, true)));
        for i in [0, BLOCK - 1, BLOCK, BLOCK + 1, n - 1] {
            assert_eq!(table.name(i), names[i]);
        }
        // With the indexed plan's first sample of each shard (8 bytes; its counts are shared).
        let per_shard = (table.resident_bytes() + 8 * n) as f64 / n as f64;
        assert!(per_shard <= 64.0, "{per_shard} bytes per shard");
    }
}
