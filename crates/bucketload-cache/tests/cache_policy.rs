//! Hit rates of the eviction policies on shuffled epochs over a dataset
//! twice the size of the cache (the numbers in docs/BENCHMARKS.md come from
//! `examples/cache_policy.rs`, which runs the same loop at a larger scale).

use bucketload_cache::{BLOCK, CacheBuilder, CacheKey, ObjectVersion, Policy};
use bytes::Bytes;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

const OBJECTS: u64 = 600;
/// 10 KB bodies take 3 blocks with their header.
const BODY: usize = 10_000;

/// Hit rate of each of `epochs` shuffled epochs over `objects` objects with
/// a cache holding `OBJECTS / 2`, reading through the cache like a loader.
fn hit_rates(policy: Policy, objects: u64, epochs: u64, seed: u64) -> Vec<f64> {
    let dir = tempfile::tempdir().expect("tempdir");
    let capacity = OBJECTS / 2 * 3 * BLOCK;
    let cache = CacheBuilder::new(dir.path(), capacity)
        .with_policy(policy)
        .build()
        .expect("open");
    let body = Bytes::from(vec![7u8; BODY]);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<u64> = (0..objects).collect();
    let mut rates = Vec::new();
    for epoch in 0..epochs {
        cache
            .begin_epoch("s3://bucket/train", epoch)
            .expect("epoch");
        order.shuffle(&mut rng);
        let before = cache.stats().expect("stats").hits;
        for &i in &order {
            let key = CacheKey::new("s3://bucket/train", format!("{i:06}.jpg"));
            let version = ObjectVersion::new(format!("\"{i}\""), BODY as u64);
            if cache.get(&key, &version).expect("get").hit().is_none() {
                cache.insert(&key, &version, body.clone()).expect("insert");
            }
        }
        let hits = cache.stats().expect("stats").hits - before;
        rates.push(hits as f64 / objects as f64);
        assert!(cache.stats().expect("stats").size_bytes <= capacity);
    }
    rates
}

#[test]
fn resident_hits_half_of_a_dataset_twice_the_cache() {
    for seed in 0..2 {
        let resident = hit_rates(Policy::default(), OBJECTS, 3, seed);
        let lru = hit_rates(Policy::Lru, OBJECTS, 3, seed);
        assert_eq!(resident[0], 0.0);
        for epoch in 1..3 {
            assert!(
                resident[epoch] >= 0.45,
                "epoch {} resident hit rate {resident:?}",
                epoch + 1
            );
            assert!(
                lru[epoch] < resident[epoch] - 0.1,
                "epoch {}: lru {lru:?} vs resident {resident:?}",
                epoch + 1
            );
        }
    }
}

#[test]
fn a_dataset_that_fits_is_served_from_disk_from_epoch_two() {
    for policy in [Policy::default(), Policy::Lru] {
        let rates = hit_rates(policy, OBJECTS / 2, 3, 7);
        assert_eq!(rates, [0.0, 1.0, 1.0], "{policy:?}");
    }
}
