//! Hit rate per epoch of `Policy::Resident` and `Policy::Lru` on shuffled
//! epochs (a new random permutation each epoch), through the real cache on
//! disk, for datasets 0.5, 1.25, 2 and 4 times the cache; then for one node
//! of four, which reads a different random quarter of the dataset each
//! epoch.
//!
//! ```sh
//! cargo run -p bucketload-cache --release --example cache_policy
//! ```

use bucketload_cache::{BLOCK, CacheBuilder, CacheKey, ObjectVersion, Policy};
use bytes::Bytes;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// Entries the cache holds (4 KB bodies: one block each with the header
/// would overflow, so 3 KB bodies keep every entry at one block).
const CACHE_ENTRIES: u64 = 2_000;
const BODY: usize = 3_000;
const EPOCHS: u64 = 4;
const SEEDS: u64 = 3;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("| dataset / cache | policy | epoch 1 | epoch 2 | epoch 3 | epoch 4 |");
    println!("|---|---|---|---|---|---|");
    for ratio in [0.5, 1.25, 2.0, 4.0] {
        let objects = (CACHE_ENTRIES as f64 * ratio) as u64;
        for (name, policy) in [("resident", Policy::default()), ("lru", Policy::Lru)] {
            let mut sums = vec![0.0; EPOCHS as usize];
            for seed in 0..SEEDS {
                for (s, r) in sums.iter_mut().zip(run(policy, objects, seed)?) {
                    *s += r / SEEDS as f64;
                }
            }
            let cells: Vec<String> = sums.iter().map(|r| format!("{:.1} %", r * 100.0)).collect();
            println!("| {ratio} | {name} | {} |", cells.join(" | "));
        }
    }
    multi_node()
}

/// One node of four: each epoch the dataset (8 times the cache) is
/// shuffled and this node reads its quarter (twice the cache).
fn multi_node() -> Result<(), Box<dyn std::error::Error>> {
    const NODES: u64 = 4;
    println!();
    println!("| one node of {NODES}, dataset / cache = 8 | policy | epochs 2–6 (mean) |");
    println!("|---|---|---|");
    let policies = [
        (
            "resident, idle_epochs 1",
            Policy::Resident { idle_epochs: 1 },
        ),
        (
            "resident, idle_epochs 4",
            Policy::Resident { idle_epochs: 4 },
        ),
        ("lru", Policy::Lru),
    ];
    for (name, policy) in policies {
        let mut mean = 0.0;
        for seed in 0..SEEDS {
            let rates = run_share(policy, CACHE_ENTRIES * 2 * NODES, NODES, 6, seed)?;
            mean += rates[1..].iter().sum::<f64>() / 5.0 / SEEDS as f64;
        }
        println!("| | {name} | {:.1} % |", mean * 100.0);
    }
    Ok(())
}

/// Hit rate of each epoch over `objects` objects, reading through the cache.
fn run(policy: Policy, objects: u64, seed: u64) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    run_share(policy, objects, 1, EPOCHS, seed)
}

/// Hit rate of each of `epochs` epochs in which this node reads the first
/// `1 / nodes` of a fresh permutation of `objects` objects.
fn run_share(
    policy: Policy,
    objects: u64,
    nodes: u64,
    epochs: u64,
    seed: u64,
) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let cache = CacheBuilder::new(dir.path(), CACHE_ENTRIES * BLOCK)
        .with_policy(policy)
        .build()?;
    let body = Bytes::from(vec![1u8; BODY]);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<u64> = (0..objects).collect();
    let mut rates = Vec::new();
    let share = (objects / nodes) as usize;
    for epoch in 0..epochs {
        cache.begin_epoch("s3://bucket/train", epoch)?;
        order.shuffle(&mut rng);
        let before = cache.stats()?.hits;
        for &i in &order[..share] {
            let key = CacheKey::new("s3://bucket/train", format!("{i:08}.jpg"));
            let version = ObjectVersion::new(format!("\"{i}\""), BODY as u64);
            if cache.get(&key, &version)?.hit().is_none() {
                cache.insert(&key, &version, body.clone())?;
            }
        }
        rates.push((cache.stats()?.hits - before) as f64 / share as f64);
    }
    Ok(rates)
}
