//! Which dataset each sample of a weighted mixture comes from.
//!
//! Pure logic, no I/O: [`crate::loader::Mixture`] drives it. A mixture's epoch is, for each
//! rank and worker, a sequence of *draws*: position `p` names the dataset its sample comes
//! from. The draws are cut into blocks of [`Weights::block`] positions. Block `b` holds exactly
//! `R(b + 1) − R(b)` draws of each dataset, where `R(b)` is the largest-remainder rounding of
//! `weights × b × block` (integer arithmetic, so every platform draws the same); the running
//! count of a dataset is therefore within one draw of `weight × position` at every block
//! boundary, and within a block the draws are shuffled by a permutation keyed by (seed, epoch,
//! rank, worker, block). Low discrepancy, not coin flips: 10,000 draws of a 0.7/0.3 mixture
//! hold 7,000 ± 1 of the first dataset at block boundaries, ± a block's share in between.
//!
//! The block is at least [`MIN_BLOCK`] draws, and long enough that every dataset of positive
//! weight gets at least one draw per block (so a block never holds a negative count).

use super::Partition;
use super::partition::{per_rank, spans_len, worker_share};
use super::permute::{Permutation, derive_key};
use crate::{Error, Result};

/// Fewest draws in a block: 128 keeps the shuffle within a block wide enough to interleave the
/// datasets, and short enough that the proportions hold over a few batches.
pub const MIN_BLOCK: u64 = 128;

/// Most draws in a block: a weight below `1/MAX_BLOCK` of the total would need longer blocks
/// (and a longer shuffle table per block) to give it a draw in each.
pub const MAX_BLOCK: u64 = 1 << 16;

/// Scale of the quantised weights: 2^32 parts of the total, far finer than any mixing ratio.
const SCALE: f64 = 4_294_967_296.0;

const TAG_MIX: u64 = 0x4d49_5844; // "MIXD"

/// The normalised weights of a mixture, as integer shares of a common total.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Weights {
    shares: Vec<u64>,
    total: u64,
    block: u64,
}

impl Weights {
    /// Weights of the datasets, in any unit (they are normalised by their sum); checks that
    /// each is finite and not negative, that their total is positive, and that none of the
    /// positive ones is below `1/MAX_BLOCK` of the total. Reports every problem at once.
    pub fn new(weights: &[f64]) -> Result<Weights> {
        let mut problems = Vec::new();
        if weights.is_empty() {
            problems.push("a mixture needs at least one dataset".to_owned());
        }
        for (i, &w) in weights.iter().enumerate() {
            if !w.is_finite() || w < 0.0 {
                problems.push(format!(
                    "weights[{i}] is {w}; a weight must be a finite number, 0 or more"
                ));
            }
        }
        let sum: f64 = weights.iter().filter(|w| w.is_finite() && **w > 0.0).sum();
        if problems.is_empty() && sum <= 0.0 {
            problems.push(
                "the weights add up to 0; give at least one dataset a positive weight".to_owned(),
            );
        }
        if !problems.is_empty() {
            return Err(Error::invalid_input(problems.join("; ")));
        }
        // At least one share for a positive weight, however small.
        let shares: Vec<u64> = weights
            .iter()
            .map(|&w| match w > 0.0 {
                true => ((w / sum * SCALE).round() as u64).max(1),
                false => 0,
            })
            .collect();
        let total: u64 = shares.iter().sum();
        let smallest = shares
            .iter()
            .copied()
            .filter(|&s| s > 0)
            .min()
            .unwrap_or(total);
        let block = total.div_ceil(smallest).max(MIN_BLOCK);
        if block > MAX_BLOCK {
            return Err(Error::invalid_input(format!(
                "a weight is less than 1/{MAX_BLOCK} of the total ({:?}); raise it or leave \
                 that dataset out",
                weights
            )));
        }
        Ok(Weights {
            shares,
            total,
            block,
        })
    }

    /// Number of datasets.
    pub fn len(&self) -> usize {
        self.shares.len()
    }

    /// Whether there is no dataset (never: [`Weights::new`] refuses it).
    pub fn is_empty(&self) -> bool {
        self.shares.is_empty()
    }

    /// Draws per block.
    pub fn block(&self) -> u64 {
        self.block
    }

    /// The normalised weight of dataset `i`.
    pub fn weight(&self, i: usize) -> f64 {
        self.shares[i] as f64 / self.total as f64
    }

    /// Whether dataset `i` is ever drawn.
    pub fn is_drawn(&self, i: usize) -> bool {
        self.shares[i] > 0
    }

    /// A digest of the shares, to tell a state of other weights.
    pub(crate) fn digest(&self) -> String {
        format!("{:016x}", derive_key(&self.shares))
    }

    /// Draws of each dataset among the first `n` (largest remainder, ties to the lower index).
    fn apportion(&self, n: u64) -> Vec<u64> {
        let n = u128::from(n);
        let total = u128::from(self.total);
        let mut counts = Vec::with_capacity(self.shares.len());
        let mut remainders = Vec::with_capacity(self.shares.len());
        for (i, &share) in self.shares.iter().enumerate() {
            let exact = n * u128::from(share);
            counts.push((exact / total) as u64);
            remainders.push((exact % total, i));
        }
        let left = n as u64 - counts.iter().sum::<u64>();
        remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for &(_, i) in remainders.iter().take(left as usize) {
            counts[i] += 1;
        }
        counts
    }
}

/// Draws worker `worker` of `workers` makes per epoch when a mixture's epoch holds `total`
/// samples over the ranks of `partition`: the rank's `ceil` (pad) or `floor` (drop) of
/// `total / world_size`, split among the workers as a dataset's samples are (sizes differ by at
/// most one), so every rank draws the same number.
pub fn worker_draws(total: u64, partition: Partition, worker: u32, workers: u32) -> u64 {
    let world = u64::from(partition.world_size().max(1));
    let rank_len = per_rank(total, world, partition.remainder());
    spans_len(&worker_share(
        &[0..rank_len],
        u64::from(worker),
        u64::from(workers.max(1)),
    ))
}

/// One worker's draws in one epoch of a mixture: the dataset of each position.
#[derive(Debug, Clone)]
pub struct Draws {
    weights: Weights,
    key: u64,
    len: u64,
}

impl Draws {
    /// The draws of worker `worker` of `workers` of rank `rank`, in epoch `epoch`, `len` long;
    /// keyed by `seed` (`None`: a fixed key, the interleave stays the same every epoch).
    pub fn new(
        weights: &Weights,
        seed: Option<u64>,
        epoch: u64,
        place: (u32, u32, u32),
        len: u64,
    ) -> Draws {
        let (rank, worker, workers) = place;
        let epoch = if seed.is_some() { epoch } else { 0 };
        let key = derive_key(&[
            TAG_MIX,
            seed.unwrap_or(0),
            epoch,
            u64::from(rank),
            u64::from(worker),
            u64::from(workers),
        ]);
        Draws {
            weights: weights.clone(),
            key,
            len,
        }
    }

    /// Positions in the epoch.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the epoch has no position.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Draws of each dataset among positions `0..end`.
    pub fn counts(&self, end: u64) -> Vec<u64> {
        let block = self.weights.block;
        let mut counts = self.weights.apportion(end / block * block);
        let partial = end % block;
        if partial > 0 {
            let it = Block::new(self, end / block);
            for j in 0..partial {
                counts[it.dataset(j)] += 1;
            }
        }
        counts
    }

    /// The draws from position `from` on.
    pub fn iter_from(&self, from: u64) -> DrawIter {
        DrawIter {
            draws: self.clone(),
            position: from,
            block: None,
        }
    }
}

/// One block's draws: its counts and its shuffle.
#[derive(Debug)]
struct Block {
    index: u64,
    /// Cumulative draws of datasets `0..=i` in the block.
    bounds: Vec<u64>,
    perm: Permutation,
}

impl Block {
    fn new(draws: &Draws, index: u64) -> Block {
        let block = draws.weights.block;
        let lo = draws.weights.apportion(index * block);
        let hi = draws.weights.apportion((index + 1) * block);
        let mut bounds = Vec::with_capacity(lo.len());
        let mut sum = 0;
        for (a, b) in lo.iter().zip(&hi) {
            sum += b - a;
            bounds.push(sum);
        }
        let perm = Permutation::keyed(block, derive_key(&[draws.key, index]));
        Block {
            index,
            bounds,
            perm,
        }
    }

    fn dataset(&self, offset: u64) -> usize {
        let slot = self.perm.get(offset);
        self.bounds.partition_point(|&b| b <= slot)
    }
}

/// The datasets of consecutive positions; see [`Draws::iter_from`].
#[derive(Debug)]
pub struct DrawIter {
    draws: Draws,
    position: u64,
    block: Option<Block>,
}

impl DrawIter {
    /// The position of the next draw.
    pub fn position(&self) -> u64 {
        self.position
    }
}

impl Iterator for DrawIter {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.position >= self.draws.len {
            return None;
        }
        let size = self.draws.weights.block;
        let index = self.position / size;
        if self.block.as_ref().is_none_or(|b| b.index != index) {
            self.block = Some(Block::new(&self.draws, index));
        }
        let block = self.block.as_ref()?;
        let dataset = block.dataset(self.position % size);
        self.position += 1;
        Some(dataset)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.draws.len.saturating_sub(self.position)).unwrap_or(0);
        (left, Some(left))
    }
}

impl ExactSizeIterator for DrawIter {}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(weights: &[f64], seed: u64, len: u64) -> Draws {
        Draws::new(
            &Weights::new(weights).unwrap(),
            Some(seed),
            0,
            (0, 0, 1),
            len,
        )
    }

    #[test]
    fn bad_weights_are_refused_with_every_problem() {
        let err = Weights::new(&[-1.0, f64::NAN]).unwrap_err().to_string();
        assert!(err.contains("weights[0] is -1"), "{err}");
        assert!(err.contains("weights[1] is NaN"), "{err}");
        let err = Weights::new(&[0.0, 0.0]).unwrap_err().to_string();
        assert!(err.contains("add up to 0"), "{err}");
        assert!(Weights::new(&[]).is_err());
        assert!(Weights::new(&[1.0, 1e-6]).is_err());
    }

    #[test]
    fn a_small_weight_gets_a_draw_in_every_block() {
        let weights = Weights::new(&[1.0, 1.0 / 300.0]).unwrap();
        let block = weights.block();
        assert!(block > 300, "{block}");
        let d = Draws::new(&weights, Some(1), 0, (0, 0, 1), 10 * block);
        for b in 0..10 {
            let (lo, hi) = (d.counts(b * block), d.counts((b + 1) * block));
            assert_eq!(hi[1] - lo[1], 1, "block {b}");
        }
    }

    #[test]
    fn blocks_hold_the_apportioned_counts() {
        let d = draws(&[0.7, 0.3], 5, 10_000);
        let seen: Vec<usize> = d.iter_from(0).collect();
        for end in [0, 1, 127, 128, 129, 1_000, 9_984, 10_000] {
            let mut counted = [0u64; 2];
            seen[..end as usize].iter().for_each(|&i| counted[i] += 1);
            assert_eq!(d.counts(end), counted.to_vec(), "at {end}");
        }
        for b in 1..=78u64 {
            let c = d.counts(b * 128);
            assert!((c[0] as f64 - 0.7 * (b * 128) as f64).abs() < 1.0, "{c:?}");
        }
    }

    #[test]
    fn iterating_from_a_position_continues_the_same_draws() {
        let d = draws(&[3.0, 2.0, 0.0, 1.0], 9, 1_000);
        let all: Vec<usize> = d.iter_from(0).collect();
        assert!(!all.contains(&2), "a weight of 0 is never drawn");
        for from in [1, 127, 128, 500, 999, 1_000] {
            let tail: Vec<usize> = d.iter_from(from).collect();
            assert_eq!(tail, all[from as usize..]);
        }
    }

    #[test]
    fn the_seed_and_the_place_choose_the_interleave() {
        let a: Vec<usize> = draws(&[1.0, 1.0], 1, 256).iter_from(0).collect();
        let b: Vec<usize> = draws(&[1.0, 1.0], 2, 256).iter_from(0).collect();
        assert_eq!(
            a,
            draws(&[1.0, 1.0], 1, 256).iter_from(0).collect::<Vec<_>>()
        );
        assert_ne!(a, b);
    }
}
