//! Property tests of a mixture's draws: for any weights, a dataset's running count is within one
//! draw of `weight × n` at every block boundary, counting agrees with iterating, and iterating
//! from any position continues the same draws.
#![allow(clippy::unwrap_used)]

use bucketload::source::mix::{Draws, Weights};
use proptest::collection::vec;
use proptest::prelude::*;

fn weights() -> impl Strategy<Value = Vec<f64>> {
    vec(prop_oneof![Just(0.0), 0.01f64..100.0], 1..6)
        .prop_filter("a positive total", |w| w.iter().any(|&x| x > 0.0))
}

proptest! {
    #[test]
    fn counts_stay_within_one_draw_of_the_weights(
        w in weights(),
        seed in any::<u64>(),
        epoch in 0u64..4,
        len in 0u64..3_000,
    ) {
        let weights = Weights::new(&w).unwrap();
        let draws = Draws::new(&weights, Some(seed), epoch, (1, 0, 2), len);
        let seen: Vec<usize> = draws.iter_from(0).collect();
        prop_assert_eq!(seen.len() as u64, len);
        let block = weights.block();
        let mut counted = vec![0u64; w.len()];
        for (n, &i) in seen.iter().enumerate() {
            prop_assert!(weights.is_drawn(i), "dataset {} has weight 0", i);
            if (n as u64).is_multiple_of(block) {
                prop_assert_eq!(&draws.counts(n as u64), &counted);
                for (i, &c) in counted.iter().enumerate() {
                    let exact = weights.weight(i) * n as f64;
                    prop_assert!((c as f64 - exact).abs() < 1.0 + 1e-6, "{} vs {}", c, exact);
                }
            }
            counted[i] += 1;
        }
        prop_assert_eq!(draws.counts(len), counted);
        let from = len / 3;
        let tail: Vec<usize> = draws.iter_from(from).collect();
        prop_assert_eq!(&tail[..], &seen[from as usize..]);
    }
}
