//! Resuming an epoch at another world size: the positions every rank had consumed, in the
//! epoch's own coordinates, and what is left of them.
//!
//! Training runs in step: at a checkpoint every rank has handed out the same number of batches,
//! so one rank's positions (its workers' counts, and their history of worker-count changes)
//! say where every rank of that world stood. A rank of another size of world is a different
//! cut of the epoch, so its local indices mean nothing to the new world; the epoch's positions
//! do. For each old rank, replaying its generations gives the local indices it had consumed
//! (for streams, the samples its shuffle buffers had yielded, not those they held); mapped to
//! numbers of the positions the old world shared (random access: `j * world + rank`; streams:
//! the rank's run start + `j`; padding wraps to the start), their union is what that world
//! consumed. The rest, as sorted spans of epoch positions ([`Positions`]), is what the new world
//! shares out, with the same layouts as a fresh epoch over fewer positions.
//!
//! A [`PastWorld`] records each change in the state, so changes compose: the positions left
//! after several are computed world after world. Nothing is stored per sample: restoring
//! costs a replay of every old rank's workers (for streams with a buffer, about 30 ns per
//! sample consumed, the whole world's) and memory for the spans of what was consumed — a
//! few per worker for random access, and for buffered streams up to the samples the buffers
//! held.

use std::ops::Range;
use std::sync::Arc;

use super::partition::{EpochOrder, Place, Positions, RankSeq, cyclic};
use super::state::{Keys, PastWorld, Replay, SourceState};
use super::{Kind, Plan};
use crate::Result;

/// The epoch positions left to the current world after the changes of world size in
/// `state`; `None` when there was none (every position).
pub(crate) fn positions_left(
    order: &EpochOrder<'_>,
    plan: &Plan,
    state: &SourceState,
) -> Result<Option<Arc<Positions>>> {
    let mut left: Option<Arc<Positions>> = None;
    for (index, past) in state.past_worlds.iter().enumerate() {
        let world = World {
            order,
            plan,
            state,
            index: index as u64,
            world: u64::from(past.world_size),
            left: left.as_ref(),
        };
        left = Some(Arc::new(world.left_after(past)?));
    }
    Ok(left)
}

/// The worker positions of rank `rank` of a world, from those of another rank of it (the one
/// that saved the state): in step, each worker is where the saver's is, within its own length,
/// and a worker the saver had finished is finished (with exact remainders, ranks differ by one
/// sample).
pub(crate) fn align(saved: &[u64], saved_lens: &[u64], lens: &[u64]) -> Vec<u64> {
    let aligned = saved.iter().zip(saved_lens).zip(lens);
    aligned
        .map(|((&p, &saved_len), &len)| if p >= saved_len { len } else { p.min(len) })
        .collect()
}

/// The worker lengths of each generation of the rank that saved `past`, checking its positions.
pub(crate) fn saved_lens(
    seq: Arc<RankSeq>,
    keys: Keys,
    generations: &[&Vec<u64>],
) -> Result<Vec<Vec<u64>>> {
    let mut replay = Replay::new(seq, keys);
    let mut lens = Vec::with_capacity(generations.len());
    for positions in generations {
        lens.push(replay.check(positions)?);
        replay.advance(positions);
    }
    Ok(lens)
}

/// A rank's generations replayed in step with the saver's.
pub(crate) struct Aligned {
    /// The rank's worker positions of each generation.
    pub(crate) positions: Vec<Vec<u64>>,
    /// The local indices left after the last generation.
    pub(crate) left: Vec<Range<u64>>,
}

/// Replays rank generations whose positions follow the saver's (see [`align`]).
pub(crate) fn replay_aligned(
    seq: Arc<RankSeq>,
    keys: Keys,
    generations: &[&Vec<u64>],
    saved_lens: &[Vec<u64>],
) -> Result<Aligned> {
    let mut replay = Replay::new(seq, keys);
    let mut aligned = Vec::with_capacity(generations.len());
    for (positions, saved) in generations.iter().zip(saved_lens) {
        let lens = replay.check(&vec![0; positions.len()])?;
        let mine = align(positions, saved, &lens);
        replay.advance(&mine);
        aligned.push(mine);
    }
    Ok(Aligned {
        positions: aligned,
        left: replay.spans().to_vec(),
    })
}

/// One past world: its size, its place among the changes, and the positions it shared.
struct World<'a> {
    order: &'a EpochOrder<'a>,
    plan: &'a Plan,
    state: &'a SourceState,
    index: u64,
    world: u64,
    left: Option<&'a Arc<Positions>>,
}

impl World<'_> {
    /// Number of positions the world shared.
    fn total(&self) -> u64 {
        self.left.map_or(self.plan.total, |l| l.len())
    }

    fn place(&self, rank: u64) -> Place {
        Place {
            rank,
            world: self.world,
            remainder: self.state.remainder,
        }
    }

    fn seq(&self, rank: u64) -> Arc<RankSeq> {
        Arc::new(self.order.rank(self.place(rank), self.left))
    }

    fn keys(&self, rank: u64) -> Keys {
        Keys {
            rank: rank as u32,
            world: self.index,
            ..self.state.keys()
        }
    }

    /// The positions left after every rank of this world consumed what `past` says.
    fn left_after(&self, past: &PastWorld) -> Result<Positions> {
        let generations: Vec<&Vec<u64>> = past.generations().collect();
        let saver = u64::from(past.rank);
        let lens = saved_lens(self.seq(saver), self.keys(saver), &generations)?;
        let mut consumed = Vec::new();
        for rank in 0..self.world {
            let seq = self.seq(rank);
            let len = seq.len();
            let aligned = replay_aligned(seq, self.keys(rank), &generations, &lens)?;
            consumed.push(complement(&aligned.left, len));
        }
        let numbers = match self.plan.kind {
            Kind::Files | Kind::Indexed => strided(&consumed, self.world),
            Kind::Shards => {
                let runs = consumed.iter().enumerate();
                let shifted = runs.flat_map(|(rank, spans)| {
                    let start = self.place(rank as u64).start(self.total());
                    spans.iter().map(move |s| s.start + start..s.end + start)
                });
                shifted.collect()
            }
        };
        let total = self.total();
        let folded = numbers.into_iter().flat_map(|s| cyclic(s, total)).collect();
        let remaining = complement(&union(folded), total);
        let positions = match self.left {
            None => remaining,
            Some(left) => remaining
                .iter()
                .flat_map(|s| left.slice(s.start, s.end))
                .collect(),
        };
        Ok(Positions::new(positions))
    }
}

/// The numbers `j * world + rank` for `j` in `per_rank[rank]`, for every rank, as sorted spans.
/// Ranks in step consumed the same local indices, so an interval every rank holds is one span;
/// where they differ (a sample or so per worker), a span per index and run of ranks.
fn strided(per_rank: &[Vec<Range<u64>>], world: u64) -> Vec<Range<u64>> {
    let mut cuts: Vec<u64> = per_rank
        .iter()
        .flatten()
        .flat_map(|s| [s.start, s.end])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut cursors = vec![0usize; per_rank.len()];
    let mut out = Vec::new();
    for pair in cuts.windows(2) {
        let (x, y) = (pair[0], pair[1]);
        // Between two cuts a rank holds all of [x, y) or none of it.
        let inside: Vec<bool> = per_rank
            .iter()
            .zip(&mut cursors)
            .map(|(spans, at)| {
                while spans.get(*at).is_some_and(|s| s.end <= x) {
                    *at += 1;
                }
                spans.get(*at).is_some_and(|s| s.start <= x)
            })
            .collect();
        if inside.iter().all(|&i| i) {
            out.push(x * world..y * world);
            continue;
        }
        let runs = runs(&inside);
        if runs.is_empty() {
            continue;
        }
        for j in x..y {
            out.extend(runs.iter().map(|r| j * world + r.start..j * world + r.end));
        }
    }
    out
}

/// The maximal runs of `true` in `flags`, as index ranges.
fn runs(flags: &[bool]) -> Vec<Range<u64>> {
    let mut out: Vec<Range<u64>> = Vec::new();
    for (i, _) in flags.iter().enumerate().filter(|(_, f)| **f) {
        let i = i as u64;
        match out.last_mut() {
            Some(last) if last.end == i => last.end += 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// The union of any spans, as sorted, disjoint spans.
fn union(mut spans: Vec<Range<u64>>) -> Vec<Range<u64>> {
    spans.retain(|s| s.start < s.end);
    spans.sort_unstable_by_key(|s| s.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(spans.len());
    for span in spans {
        match out.last_mut() {
            Some(last) if last.end >= span.start => last.end = last.end.max(span.end),
            _ => out.push(span),
        }
    }
    out
}

/// What of `0..n` sorted, disjoint `spans` leave out.
fn complement(spans: &[Range<u64>], n: u64) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let mut at = 0;
    for span in spans {
        if span.start > at {
            out.push(at..span.start);
        }
        at = at.max(span.end);
    }
    if at < n {
        out.push(at..n);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_spans_join_ranks_in_step() {
        // Three ranks that all consumed local 0..2 and 4..5: numbers 0..6 and 12..15.
        let same = vec![vec![0..2, 4..5]; 3];
        assert_eq!(strided(&same, 3), vec![0..6, 12..15]);
        // Rank 2 one sample short at the end.
        let short = vec![vec![0..3], vec![0..3], vec![0..2]];
        assert_eq!(strided(&short, 3), vec![0..6, 6..8]);
        assert!(strided(&[vec![], vec![]], 2).is_empty());
    }

    #[test]
    fn union_and_complement() {
        assert_eq!(union(vec![5..7, 0..2, 1..3, 3..3, 7..8]), vec![0..3, 5..8]);
        assert_eq!(complement(&[0..3, 5..8], 10), vec![3..5, 8..10]);
        assert_eq!(complement(&[], 2), vec![0..2]);
        assert!(complement(&[0..2], 2).is_empty());
    }

    #[test]
    fn align_follows_the_saver_within_each_length() {
        assert_eq!(align(&[2, 5, 1], &[4, 5, 5], &[3, 4, 4]), vec![2, 4, 1]);
        assert_eq!(align(&[4], &[4], &[3]), vec![3]);
    }
}
