//! Strategies shared by the source's property tests: plans of every kind, orders and remainders.
#![allow(dead_code)]

use bucketload::source::{Order, Plan, Remainder};
use proptest::collection::vec;
use proptest::prelude::*;

/// Files, indexed or streamed plans of up to a few hundred samples (shards of 0–39).
pub fn plan(shards: usize) -> impl Strategy<Value = Plan> {
    prop_oneof![
        (0u64..300).prop_map(Plan::files),
        vec(0u64..40, 0..shards).prop_map(|c| Plan::indexed(&c)),
        vec(0u64..40, 0..shards).prop_map(|c| Plan::shards(&c)),
    ]
}

/// Sequential, or shuffled with a buffer of 0–24 or 100–159 samples.
pub fn order() -> impl Strategy<Value = Order> {
    prop_oneof![
        Just(Order::sequential()),
        (any::<u64>(), 0u64..25).prop_map(|(seed, b)| Order::shuffled(seed).with_shuffle_buffer(b)),
        // Past the 100 samples a buffer starts yielding with: it grows while the worker reads.
        (any::<u64>(), 100u64..160)
            .prop_map(|(seed, b)| Order::shuffled(seed).with_shuffle_buffer(b)),
    ]
}

/// Every remainder policy.
pub fn remainder() -> impl Strategy<Value = Remainder> {
    prop_oneof![
        Just(Remainder::Pad),
        Just(Remainder::Drop),
        Just(Remainder::Exact)
    ]
}
