//! A rank's sequence of samples for one epoch, and the span arithmetic that splits it.
//!
//! Every rank sees its epoch as local indices `0..len`. A [`RankSeq`] maps a local index to a
//! sample: through the keyed permutation for random access, through the rank's list of shard
//! ranges for streams. Workers, and resumes after a change of worker count, only ever deal in
//! sorted, disjoint spans of local indices.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use super::permute::{Permutation, derive_key};
use super::{Kind, Plan, Remainder, SampleRef, WorkItem};

/// Domain tags that keep the random streams of the source independent.
pub(crate) const TAG_SAMPLES: u64 = 0x5341_4d50; // "SAMP"
pub(crate) const TAG_SHARDS: u64 = 0x5348_5244; // "SHRD"
pub(crate) const TAG_BUFFER: u64 = 0x4255_4646; // "BUFF"

/// Samples rank `rank` gets for `total` samples over `world` ranks (`world > 0`).
pub(crate) fn per_rank(total: u64, world: u64, rank: u64, remainder: Remainder) -> u64 {
    match remainder {
        Remainder::Drop => total / world,
        Remainder::Pad => total.div_ceil(world),
        Remainder::Exact => total / world + u64::from(rank < total % world),
    }
}

/// The first position of rank `rank`'s contiguous run when `total` samples are cut into
/// `world` runs (streams).
pub(crate) fn rank_start(total: u64, world: u64, rank: u64, remainder: Remainder) -> u64 {
    match remainder {
        Remainder::Exact => rank * (total / world) + rank.min(total % world),
        _ => rank * per_rank(total, world, rank, remainder),
    }
}

/// Where a rank stands among its peers: rank `rank` of `world`, with the remainder policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) rank: u64,
    pub(crate) world: u64,
    pub(crate) remainder: Remainder,
}

impl Place {
    /// Samples of the rank out of `total`.
    pub(crate) fn len(&self, total: u64) -> u64 {
        per_rank(total, self.world, self.rank, self.remainder)
    }

    /// Where the rank's run starts among `total` (streams).
    pub(crate) fn start(&self, total: u64) -> u64 {
        rank_start(total, self.world, self.rank, self.remainder)
    }
}

/// The positions of an epoch still to read after a change of world size: sorted, disjoint
/// spans of positions of the epoch's order (random access: of the permutation; streams: of the
/// concatenated shard sequence), numbered `0..len()` in that order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Positions {
    spans: Vec<Range<u64>>,
    /// `offsets[i]` is the number of positions before `spans[i]`.
    offsets: Vec<u64>,
    len: u64,
}

impl Positions {
    pub(crate) fn new(spans: Vec<Range<u64>>) -> Positions {
        let spans = join(spans);
        let mut offsets = Vec::with_capacity(spans.len());
        let mut len = 0;
        for span in &spans {
            offsets.push(len);
            len += span.end - span.start;
        }
        Positions {
            spans,
            offsets,
            len,
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The position numbered `k < len()`.
    pub(crate) fn get(&self, k: u64) -> u64 {
        let i = self.offsets.partition_point(|&o| o <= k) - 1;
        self.spans[i].start + (k - self.offsets[i])
    }

    /// The positions numbered `from..to`, as spans.
    pub(crate) fn slice(&self, from: u64, to: u64) -> Vec<Range<u64>> {
        let first = self.offsets.partition_point(|&o| o <= from).max(1) - 1;
        let mut out = Vec::new();
        for (span, &offset) in self.spans[first..].iter().zip(&self.offsets[first..]) {
            if offset >= to {
                break;
            }
            let len = span.end - span.start;
            let (a, b) = (from.max(offset), to.min(offset + len));
            if a < b {
                out.push(span.start + (a - offset)..span.start + (b - offset));
            }
        }
        out
    }
}

/// Numbers `span` of a sequence of `n` repeated cyclically, as pieces within `0..n`, in order.
pub(crate) fn cyclic(span: Range<u64>, n: u64) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let mut at = span.start;
    while at < span.end && n > 0 {
        let base = at / n * n;
        let end = span.end.min(base + n);
        out.push(at - base..end - base);
        at = end;
    }
    out
}

/// The permutation of `0..n` for one epoch: keyed by (tag, seed, epoch) or the identity.
pub(crate) fn epoch_permutation(n: u64, shuffle: Option<u64>, tag: u64, epoch: u64) -> Permutation {
    match shuffle {
        Some(seed) => Permutation::keyed(n, derive_key(&[tag, seed, epoch])),
        None => Permutation::identity(n),
    }
}

/// The order of one epoch of a plan, shared by its ranks: the permutation of samples (random
/// access) or of shards (streams).
#[derive(Debug, Clone)]
pub(crate) struct EpochOrder<'a> {
    plan: &'a Plan,
    perm: Permutation,
    /// Streams: where each shard of the permuted order starts ([`cycle_starts`]), computed
    /// once for every rank cut from this order (a resume cuts one per old rank).
    starts: Arc<OnceLock<Vec<u64>>>,
}

impl EpochOrder<'_> {
    pub(crate) fn new(plan: &Plan, seed: Option<u64>, epoch: u64) -> EpochOrder<'_> {
        let perm = match plan.kind {
            Kind::Files | Kind::Indexed => epoch_permutation(plan.total, seed, TAG_SAMPLES, epoch),
            Kind::Shards => epoch_permutation(plan.counts.len() as u64, seed, TAG_SHARDS, epoch),
        };
        EpochOrder {
            plan,
            perm,
            starts: Arc::default(),
        }
    }

    /// Rank `place`'s samples, drawn from `left` (all positions when `None`).
    pub(crate) fn rank(&self, place: Place, left: Option<&Arc<Positions>>) -> RankSeq {
        let plan = self.plan;
        let total = left.map_or(plan.total, |l| l.len());
        let len = place.len(total);
        match plan.kind {
            Kind::Files | Kind::Indexed => RankSeq::Random(RandomRank {
                total,
                world: place.world,
                rank: place.rank,
                len,
                perm: self.perm.clone(),
                left: left.cloned(),
                layout: match plan.kind {
                    Kind::Files => Layout::Files,
                    _ => Layout::Indexed(plan.starts.clone()),
                },
            }),
            Kind::Shards => {
                let start = place.start(total);
                let run = start..start + len;
                let spans = match left {
                    None => vec![run],
                    Some(left) => cyclic(run, total)
                        .into_iter()
                        .flat_map(|piece| left.slice(piece.start, piece.end))
                        .collect(),
                };
                let starts = self
                    .starts
                    .get_or_init(|| cycle_starts(&plan.counts, &self.perm));
                RankSeq::Stream(StreamRank::new(&plan.counts, &self.perm, starts, &spans))
            }
        }
    }
}

/// One rank's samples for one epoch.
#[derive(Debug)]
pub(crate) enum RankSeq {
    /// Files or indexed shards: local index → global position → permuted sample.
    Random(RandomRank),
    /// Streamed shards: local index → a sample of one of the rank's shard ranges.
    Stream(StreamRank),
}

impl RankSeq {
    /// Number of samples of the rank.
    pub(crate) fn len(&self) -> u64 {
        match self {
            RankSeq::Random(r) => r.len,
            RankSeq::Stream(s) => s.len,
        }
    }

    /// The sample at local index `local < len()`.
    pub(crate) fn sample(&self, local: u64) -> SampleRef {
        match self {
            RankSeq::Random(r) => r.sample(local),
            RankSeq::Stream(s) => s.sample(local),
        }
    }
}

/// Where the samples of a random-access plan live.
#[derive(Debug, Clone)]
pub(crate) enum Layout {
    /// One object per sample.
    Files,
    /// Samples numbered across shards: `starts[i]` is the first sample of shard `i`.
    Indexed(Arc<[u64]>),
}

/// A rank of a random-access plan: number `j * world + rank` of the epoch's positions (all of
/// the permutation, or those `left` after a change of world size), the numbers past the end
/// wrapping to the start (padding).
#[derive(Debug)]
pub(crate) struct RandomRank {
    /// Positions to share among the ranks.
    pub(crate) total: u64,
    pub(crate) world: u64,
    pub(crate) rank: u64,
    pub(crate) len: u64,
    pub(crate) perm: Permutation,
    pub(crate) left: Option<Arc<Positions>>,
    pub(crate) layout: Layout,
}

impl RandomRank {
    /// The number among the positions to share of local index `local`, before padding wraps.
    pub(crate) fn number(&self, local: u64) -> u64 {
        local * self.world + self.rank
    }

    fn sample(&self, local: u64) -> SampleRef {
        let mut k = self.number(local);
        if k >= self.total {
            k = (k - self.total) % self.total;
        }
        let position = self.left.as_ref().map_or(k, |left| left.get(k));
        let global = self.perm.get(position);
        match &self.layout {
            Layout::Files => SampleRef::File { index: global },
            Layout::Indexed(starts) => {
                let shard = starts.partition_point(|&s| s <= global) - 1;
                SampleRef::Shard {
                    shard: shard as u64,
                    sample: global - starts[shard],
                }
            }
        }
    }
}

/// A rank of a streamed plan: its shard ranges in reading order.
#[derive(Debug)]
pub(crate) struct StreamRank {
    items: Vec<WorkItem>,
    /// `offsets[i]` is the local index of the first sample of `items[i]`.
    offsets: Vec<u64>,
    len: u64,
}

impl StreamRank {
    /// The rank's part of the epoch's sequence: shards in permuted order, concatenated, repeated
    /// from the start as often as padding needs, cut at `spans` (in this order). `starts` is
    /// [`cycle_starts`] of `counts` and `perm`.
    pub(crate) fn new(
        counts: &[u64],
        perm: &Permutation,
        starts: &[u64],
        spans: &[Range<u64>],
    ) -> StreamRank {
        let items: Vec<WorkItem> = spans
            .iter()
            .flat_map(|span| cut(counts, perm, starts, span.start, span.end))
            .collect();
        let mut offsets = Vec::with_capacity(items.len());
        let mut len = 0;
        for item in &items {
            offsets.push(len);
            len += item.samples.end - item.samples.start;
        }
        StreamRank {
            items,
            offsets,
            len,
        }
    }

    fn locate(&self, local: u64) -> usize {
        self.offsets.partition_point(|&o| o <= local) - 1
    }

    fn sample(&self, local: u64) -> SampleRef {
        let i = self.locate(local);
        let item = &self.items[i];
        SampleRef::Shard {
            shard: item.shard,
            sample: item.samples.start + (local - self.offsets[i]),
        }
    }

    /// The shard ranges that hold local indices `span`, in order.
    pub(crate) fn reads(&self, span: Range<u64>) -> Vec<WorkItem> {
        let mut out = Vec::new();
        let mut at = span.start;
        while at < span.end {
            let i = self.locate(at);
            let item = &self.items[i];
            let from = item.samples.start + (at - self.offsets[i]);
            let to = item.samples.end.min(from + (span.end - at));
            out.push(WorkItem {
                shard: item.shard,
                samples: from..to,
            });
            at += to - from;
        }
        out
    }
}

/// Where each shard of the cyclic sequence in `perm` order starts within one cycle: `starts[k]`
/// for the shard at position `k`, then the cycle's length. 8 bytes a shard, built once an epoch.
pub(crate) fn cycle_starts(counts: &[u64], perm: &Permutation) -> Vec<u64> {
    let mut starts = Vec::with_capacity(counts.len() + 1);
    let mut at = 0;
    for k in 0..perm.len() {
        starts.push(at);
        at += counts[perm.get(k) as usize];
    }
    starts.push(at);
    starts
}

/// The shard ranges covering positions `[lo, hi)` of the cyclic sequence of shards in `perm`
/// order, found from `starts` ([`cycle_starts`]) by binary search: the cost is the ranges
/// returned, not the shards before `lo`.
fn cut(counts: &[u64], perm: &Permutation, starts: &[u64], lo: u64, hi: u64) -> Vec<WorkItem> {
    let total = starts.last().copied().unwrap_or(0);
    let mut items = Vec::new();
    if lo >= hi || total == 0 {
        return items;
    }
    // Whole cycles before `lo` are skipped at once, then the shards before it in its cycle:
    // the last position starting at or before `lo` holds it (an empty shard there starts where
    // the next one does, so it is never the last).
    let mut base = lo / total * total;
    let shards = starts.len() - 1;
    let mut k = starts.partition_point(|&s| s <= lo - base) - 1;
    loop {
        while k < shards {
            let (start, end) = (base + starts[k], base + starts[k + 1]);
            if end > lo && start < end {
                let shard = perm.get(k as u64);
                debug_assert_eq!(end - start, counts[shard as usize]);
                let (a, b) = (lo.max(start), hi.min(end));
                items.push(WorkItem {
                    shard,
                    samples: a - start..b - start,
                });
                if end >= hi {
                    return items;
                }
            }
            k += 1;
        }
        base += total;
        k = 0;
    }
}

/// Total number of indices in `spans`.
pub(crate) fn spans_len(spans: &[Range<u64>]) -> u64 {
    spans.iter().map(|s| s.end - s.start).sum()
}

/// Indices `from..to` of the concatenation of `spans`, as spans.
pub(crate) fn slice(spans: &[Range<u64>], from: u64, to: u64) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let mut offset = 0;
    for span in spans {
        let len = span.end - span.start;
        let (a, b) = (from.max(offset), to.min(offset + len));
        if a < b {
            out.push(span.start + (a - offset)..span.start + (b - offset));
        }
        offset += len;
    }
    out
}

/// Worker `worker`'s contiguous share of `spans` among `workers`: sizes differ by at most one.
pub(crate) fn worker_share(spans: &[Range<u64>], worker: u64, workers: u64) -> Vec<Range<u64>> {
    let n = u128::from(spans_len(spans));
    let bound = |w: u64| (n * u128::from(w) / u128::from(workers)) as u64;
    slice(spans, bound(worker), bound(worker + 1))
}

/// Sorted, distinct indices as maximal spans.
pub(crate) fn coalesce(sorted: &[u64]) -> Vec<Range<u64>> {
    let mut out: Vec<Range<u64>> = Vec::new();
    for &i in sorted {
        match out.last_mut() {
            Some(last) if last.end == i => last.end += 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// Joins touching neighbours of sorted, disjoint spans.
pub(crate) fn join(spans: Vec<Range<u64>>) -> Vec<Range<u64>> {
    let mut out: Vec<Range<u64>> = Vec::with_capacity(spans.len());
    for span in spans.into_iter().filter(|s| s.start < s.end) {
        match out.last_mut() {
            Some(last) if last.end == span.start => last.end = span.end,
            _ => out.push(span),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_rank_pads_drops_or_splits_exactly() {
        assert_eq!(per_rank(10, 3, 0, Remainder::Pad), 4);
        assert_eq!(per_rank(10, 3, 2, Remainder::Drop), 3);
        assert_eq!(per_rank(9, 3, 1, Remainder::Pad), 3);
        assert_eq!(per_rank(2, 5, 4, Remainder::Pad), 1);
        assert_eq!(per_rank(2, 5, 0, Remainder::Drop), 0);
        let exact: Vec<u64> = (0..3)
            .map(|r| per_rank(10, 3, r, Remainder::Exact))
            .collect();
        assert_eq!(exact, vec![4, 3, 3]);
        let starts: Vec<u64> = (0..3)
            .map(|r| rank_start(10, 3, r, Remainder::Exact))
            .collect();
        assert_eq!(starts, vec![0, 4, 7]);
        assert_eq!(rank_start(10, 3, 2, Remainder::Pad), 8);
    }

    #[test]
    fn positions_number_their_spans() {
        let p = Positions::new(vec![2..4, 4..5, 9..12]);
        assert_eq!(p.len(), 6);
        let all: Vec<u64> = (0..6).map(|k| p.get(k)).collect();
        assert_eq!(all, vec![2, 3, 4, 9, 10, 11]);
        assert_eq!(p.slice(1, 5), vec![3..5, 9..11]);
        assert_eq!(p.slice(3, 3), Vec::<Range<u64>>::new());
        assert_eq!(cyclic(3..9, 4), vec![3..4, 0..4, 0..1]);
        assert!(cyclic(0..2, 0).is_empty());
    }

    #[test]
    fn shares_are_contiguous_and_balanced() {
        let spans = vec![0..3, 5..9, 20..21];
        let shares: Vec<_> = (0..3).map(|w| worker_share(&spans, w, 3)).collect();
        assert_eq!(
            shares,
            vec![vec![0..2], vec![2..3, 5..7], vec![7..9, 20..21]]
        );
        // Five workers of eight: bounds 0, 1, 3, 4, 6, 8.
        assert_eq!(worker_share(&spans, 4, 5), vec![8..9, 20..21]);
        assert_eq!(worker_share(&[0..1], 0, 2), Vec::<Range<u64>>::new());
    }

    #[test]
    fn coalesce_and_join() {
        assert_eq!(coalesce(&[1, 2, 3, 7, 9, 10]), vec![1..4, 7..8, 9..11]);
        assert_eq!(join(vec![1..4, 4..4, 4..6, 8..9]), vec![1..6, 8..9]);
    }

    #[test]
    fn cut_splits_shards_and_wraps_for_padding() {
        let counts = [3, 0, 4];
        let perm = Permutation::identity(3);
        let starts = cycle_starts(&counts, &perm);
        assert_eq!(starts, vec![0, 3, 3, 7]);
        let items = |lo, hi| -> Vec<(u64, Range<u64>)> {
            cut(&counts, &perm, &starts, lo, hi)
                .into_iter()
                .map(|w| (w.shard, w.samples))
                .collect()
        };
        assert_eq!(items(0, 3), vec![(0, 0..3)]);
        assert_eq!(items(2, 5), vec![(0, 2..3), (2, 0..2)]);
        // Padding past 7 samples starts over with shard 0.
        assert_eq!(items(6, 9), vec![(2, 3..4), (0, 0..2)]);
        assert_eq!(items(15, 16), vec![(0, 1..2)]);
        assert!(items(4, 4).is_empty());
        // Starting exactly where the empty shard 1 sits: shard 2 holds position 3.
        assert_eq!(items(3, 4), vec![(2, 0..1)]);
        assert_eq!(items(7, 8), vec![(0, 0..1)]);
    }

    /// The binary search finds what walking every shard from the start finds, for shuffled
    /// orders with empty shards and spans across cycles.
    #[test]
    fn cut_agrees_with_a_walk_from_the_first_shard() {
        let counts: Vec<u64> = (0..40u64).map(|i| (i * 7 + 3) % 5).collect();
        let perm = epoch_permutation(40, Some(9), TAG_SHARDS, 2);
        let starts = cycle_starts(&counts, &perm);
        let order: Vec<u64> = (0..40).map(|k| perm.get(k)).collect();
        let total: u64 = counts.iter().sum();
        for lo in 0..2 * total + 3 {
            for len in [1, 2, 5, total, total + 4] {
                let hi = lo + len;
                // Every position of [lo, hi) in turn, from the cyclic sequence itself.
                let mut want: Vec<(u64, u64)> = Vec::new();
                for p in lo..hi {
                    let mut at = p % total;
                    let shard = *order
                        .iter()
                        .find(|&&s| {
                            let c = counts[s as usize];
                            if at < c {
                                true
                            } else {
                                at -= c;
                                false
                            }
                        })
                        .unwrap();
                    want.push((shard, at));
                }
                let got: Vec<(u64, u64)> = cut(&counts, &perm, &starts, lo, hi)
                    .into_iter()
                    .flat_map(|w| w.samples.map(move |s| (w.shard, s)))
                    .collect();
                assert_eq!(got, want, "[{lo}, {hi})");
            }
        }
    }

    #[test]
    fn stream_rank_maps_local_indices() {
        let perm = Permutation::identity(2);
        let rank = StreamRank::new(&[3, 4], &perm, &cycle_starts(&[3, 4], &perm), &[2..6]);
        assert_eq!(rank.len, 4);
        assert_eq!(
            rank.sample(1),
            SampleRef::Shard {
                shard: 1,
                sample: 0
            }
        );
        let reads: Vec<_> = rank
            .reads(0..4)
            .into_iter()
            .map(|w| (w.shard, w.samples))
            .collect();
        assert_eq!(reads, vec![(0, 2..3), (1, 0..3)]);
    }
}
