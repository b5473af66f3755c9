//! Keyed permutations and the small random-number generator of the source.
//!
//! Both are written here rather than taken from `rand`: a saved [`SourceState`](super::SourceState)
//! must resume to the same order after an upgrade, and `rand` does not promise value stability of
//! its range sampling across versions. The arithmetic below is frozen; changing it changes every
//! order and must bump [`STATE_VERSION`](super::STATE_VERSION).
//!
//! [`Permutation`] maps positions `0..n` to samples `0..n` bijectively:
//!
//! - up to [`TABLE_MAX`] elements (shards, small datasets), a Fisher–Yates shuffle driven by
//!   SplitMix64: every permutation equally likely up to the generator, 4 bytes per element;
//! - above, an alternating (unbalanced) Feistel network over the smallest power-of-two domain
//!   `2^b ≥ n`, with cycle walking to stay below `n`: O(1) memory, O(1) time per position. Each
//!   half-round XORs one half with a keyed SplitMix64 finaliser of the other half. 12
//!   half-rounds (6 full rounds, twice the 3 of the Luby–Rackoff bound for a pseudo-random
//!   permutation) pass the uniformity and correlation checks below once each half has a few
//!   bits; on domains of 2–3 bits a Feistel network needs far more rounds to look uniform over
//!   keys, which is why small `n` use the table. Because `2^(b-1) < n`, cycle walking takes fewer
//!   than two network evaluations per position on average (≈ 50 ns).

/// Largest `n` permuted by a table rather than the Feistel network (256 KiB of `u32`).
pub(crate) const TABLE_MAX: u64 = 1 << 16;

/// Half-rounds of the Feistel network; see the module docs for why 12.
const ROUNDS: usize = 12;

/// The SplitMix64 increment (the golden ratio in 64-bit fixed point).
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// The SplitMix64 finaliser (Steele, Lea and Flood, 2014): a bijective 64-bit mixer with full
/// avalanche.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Derives a 64-bit key from a list of parts (a domain tag first, then seed, epoch, ...), so that
/// every use of randomness in the source draws from an independent stream.
pub(crate) fn derive_key(parts: &[u64]) -> u64 {
    parts
        .iter()
        .fold(GOLDEN, |h, &p| mix64(h ^ mix64(p.wrapping_add(GOLDEN))))
}

/// SplitMix64: a 64-bit generator that passes BigCrush, with a one-word state.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub(crate) fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        mix64(self.state)
    }

    /// A uniform integer in `0..n` (`n > 0`): Lemire's multiply-shift with rejection, exact.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0, "below(0) has no value");
        let mut m = u128::from(self.next_u64()) * u128::from(n);
        if (m as u64) < n {
            let threshold = n.wrapping_neg() % n;
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(n);
            }
        }
        (m >> 64) as u64
    }
}

/// A bijection of `0..n`: the identity, or chosen by a 64-bit key. Up to 65,536 elements it is
/// a Fisher–Yates table (4 bytes per element); above, a keyed Feistel network with cycle walking
/// (O(1) memory, O(1) time per position). The same `(n, key)` gives the same permutation on
/// every platform and release with the same `STATE_VERSION`.
#[derive(Debug, Clone)]
pub struct Permutation {
    n: u64,
    inner: Inner,
}

#[derive(Debug, Clone)]
enum Inner {
    Identity,
    Table(std::sync::Arc<[u32]>),
    Network(Network),
}

#[derive(Debug, Clone)]
struct Network {
    right_bits: u32,
    left_mask: u64,
    right_mask: u64,
    keys: [u64; ROUNDS],
}

impl Permutation {
    /// The identity of `0..n`.
    pub fn identity(n: u64) -> Permutation {
        Permutation {
            n,
            inner: Inner::Identity,
        }
    }

    /// A pseudo-random permutation of `0..n` chosen by `key`.
    pub fn keyed(n: u64, key: u64) -> Permutation {
        let inner = match n {
            0..2 => Inner::Identity,
            2..=TABLE_MAX => Inner::Table(table(n, key)),
            _ => Inner::Network(Network::new(n, key)),
        };
        Permutation { n, inner }
    }

    /// Number of elements permuted.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Whether the permutation is empty.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The element at `position` (`position < len()`).
    pub fn get(&self, position: u64) -> u64 {
        debug_assert!(position < self.n, "position {position} ≥ {}", self.n);
        match &self.inner {
            Inner::Identity => position,
            Inner::Table(table) => u64::from(table[position as usize]),
            Inner::Network(net) => net.get(self.n, position),
        }
    }
}

/// A Fisher–Yates shuffle of `0..n` (`n ≤ TABLE_MAX`).
fn table(n: u64, key: u64) -> std::sync::Arc<[u32]> {
    let mut rng = SplitMix64::new(key);
    let mut table: Vec<u32> = (0..n as u32).collect();
    for i in (1..table.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        table.swap(i, j);
    }
    table.into()
}

impl Network {
    fn new(n: u64, key: u64) -> Network {
        // Domain 2^bits ≥ n with at least one bit per half.
        let bits = (64 - (n - 1).leading_zeros()).max(2);
        let right_bits = bits / 2;
        let left_bits = bits - right_bits;
        let mut rng = SplitMix64::new(key);
        Network {
            right_bits,
            left_mask: u64::MAX >> (64 - left_bits),
            right_mask: u64::MAX >> (64 - right_bits),
            keys: std::array::from_fn(|_| rng.next_u64()),
        }
    }

    /// Cycle walking: the network permutes 0..2^bits, and the cycle through `position` returns
    /// to it, so it meets a value below n first.
    fn get(&self, n: u64, position: u64) -> u64 {
        let mut x = position;
        loop {
            x = self.encrypt(x);
            if x < n {
                return x;
            }
        }
    }

    fn encrypt(&self, x: u64) -> u64 {
        let mut left = x >> self.right_bits;
        let mut right = x & self.right_mask;
        for (round, key) in self.keys.iter().enumerate() {
            if round % 2 == 0 {
                left ^= mix64(right ^ key) & self.left_mask;
            } else {
                right ^= mix64(left ^ key) & self.right_mask;
            }
        }
        (left << self.right_bits) | right
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(p: &Permutation) -> Vec<u64> {
        (0..p.len()).map(|i| p.get(i)).collect()
    }

    /// The Feistel network whatever `n`, to test it on small domains.
    fn network(n: u64, key: u64) -> Permutation {
        Permutation {
            n,
            inner: Inner::Network(Network::new(n, key)),
        }
    }

    fn is_permutation(v: &[u64]) -> bool {
        let mut seen = vec![false; v.len()];
        v.iter()
            .all(|&x| (x as usize) < v.len() && !std::mem::replace(&mut seen[x as usize], true))
    }

    #[test]
    fn keyed_and_network_are_permutations() {
        for n in 0..300 {
            for key in 0..5 {
                assert!(is_permutation(&all(&Permutation::keyed(n, key))), "n={n}");
                if n >= 2 {
                    assert!(is_permutation(&all(&network(n, key))), "n={n}");
                }
            }
        }
        assert!(is_permutation(&all(&Permutation::keyed(TABLE_MAX, 1))));
        assert!(is_permutation(&all(&Permutation::keyed(TABLE_MAX + 1, 1))));
        assert!(is_permutation(&all(&Permutation::keyed(
            1 << 20 | 12_345,
            7
        ))));
    }

    #[test]
    fn identity_is_identity() {
        assert_eq!(all(&Permutation::identity(5)), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn full_width_domain_works() {
        let p = Permutation::keyed(u64::MAX, 3);
        let a = p.get(0);
        assert!(a < u64::MAX);
        assert_ne!(p.get(1), a);
    }

    /// Pearson correlation of two equally long sequences.
    fn correlation(a: &[f64], b: &[f64]) -> f64 {
        let n = a.len() as f64;
        let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
        let cov: f64 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
        let va: f64 = a.iter().map(|x| (x - ma).powi(2)).sum();
        let vb: f64 = b.iter().map(|y| (y - mb).powi(2)).sum();
        cov / (va * vb).sqrt()
    }

    fn as_f64(p: &Permutation) -> Vec<f64> {
        all(p).into_iter().map(|x| x as f64).collect()
    }

    #[test]
    fn positions_and_neighbours_are_uncorrelated() {
        // Under a uniform permutation each correlation is ~N(0, 1/n): 1/sqrt(200_003) ≈ 0.0022;
        // 0.012 is over five standard deviations.
        let n = 200_003;
        let v = as_f64(&Permutation::keyed(n, 42));
        let index: Vec<f64> = (0..n).map(|i| i as f64).collect();
        assert!(correlation(&index, &v).abs() < 0.012);
        assert!(correlation(&v[..v.len() - 1], &v[1..]).abs() < 0.012);
        let other = as_f64(&Permutation::keyed(n, 43));
        assert!(correlation(&v, &other).abs() < 0.012);
        // Gaps between neighbours follow the |X − Y| law of two uniforms: mean n/3, and the
        // standard error of the mean here is about 0.0013 of it.
        let mean_gap = v.windows(2).map(|w| (w[0] - w[1]).abs()).sum::<f64>() / (n - 1) as f64;
        assert!(
            (mean_gap / (n as f64 / 3.0) - 1.0).abs() < 0.01,
            "{mean_gap}"
        );
    }

    /// Chi-square statistic of observed counts against a uniform expectation.
    fn chi_square(counts: &[u64]) -> f64 {
        let total: u64 = counts.iter().sum();
        let expected = total as f64 / counts.len() as f64;
        counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum()
    }

    /// Over `keys` keys, counts of the first element and of the (first, last) pair.
    fn first_and_pairs(n: u64, keys: u64, make: fn(u64, u64) -> Permutation) -> [f64; 2] {
        let mut first = vec![0u64; n as usize];
        let mut pairs = vec![0u64; (n * n) as usize];
        for key in 0..keys {
            let p = make(n, derive_key(&[key]));
            let (a, b) = (p.get(0), p.get(n - 1));
            first[a as usize] += 1;
            pairs[(a * n + b) as usize] += 1;
        }
        let pairs: Vec<u64> = (0..n * n)
            .filter(|i| i / n != i % n)
            .map(|i| pairs[i as usize])
            .collect();
        [chi_square(&first), chi_square(&pairs)]
    }

    #[test]
    fn small_tables_are_uniform_over_keys() {
        // n = 7: 6 and 41 degrees of freedom, 99.99th percentiles 27.9 and 83.
        let [first, pairs] = first_and_pairs(7, 42_000, Permutation::keyed);
        assert!(first < 27.9 && pairs < 83.0, "{first} {pairs}");
    }

    #[test]
    fn network_is_uniform_over_keys_from_seven_bits() {
        // n = 100 (halves of 4 and 3 bits): 99 and 9899 degrees of freedom; the bounds are the
        // mean plus five standard deviations (sqrt(2 df)).
        let [first, pairs] = first_and_pairs(100, 99_000, network);
        assert!(first < 99.0 + 5.0 * 14.1, "{first}");
        assert!(pairs < 9899.0 + 5.0 * 140.7, "{pairs}");
    }

    #[test]
    fn fixed_points_average_one() {
        // A uniform permutation has one fixed point on average, whatever n; the mean over 2000
        // keys has a standard error of 0.022.
        for make in [Permutation::keyed, network] {
            let fixed: usize = (0..2000)
                .map(|key| {
                    let p = make(1000, derive_key(&[key]));
                    (0..1000).filter(|&i| p.get(i) == i).count()
                })
                .sum();
            let mean = fixed as f64 / 2000.0;
            assert!((mean - 1.0).abs() < 0.12, "{mean}");
        }
    }

    #[test]
    fn below_is_uniform_and_in_range() {
        let mut rng = SplitMix64::new(1);
        let mut counts = [0u64; 6];
        for _ in 0..60_000 {
            counts[rng.below(6) as usize] += 1;
        }
        // 5 degrees of freedom: 99.99th percentile 25.7.
        assert!(chi_square(&counts) < 25.7, "{counts:?}");
        assert_eq!(SplitMix64::new(9).below(1), 0);
    }

    #[test]
    fn derived_keys_differ_by_part_and_order() {
        assert_ne!(derive_key(&[1, 2]), derive_key(&[2, 1]));
        assert_ne!(derive_key(&[1]), derive_key(&[1, 0]));
    }

    #[test]
    fn frozen_values() {
        // Saved states depend on these exact values; see the module docs.
        assert_eq!(mix64(1), 0x5692_161d_100b_05e5);
        assert_eq!(derive_key(&[1, 2, 3]), 0xd56d_0264_932a_233f);
        let mut rng = SplitMix64::new(7);
        assert_eq!(
            (rng.next_u64(), rng.below(1000)),
            (0x63cb_e1e4_5932_0dd7, 16)
        );
        assert_eq!(
            all(&Permutation::keyed(10, 99)),
            [7, 4, 3, 9, 5, 1, 8, 6, 0, 2]
        );
        assert_eq!(all(&network(10, 99)), [9, 7, 3, 1, 0, 6, 5, 8, 2, 4]);
    }
}
