//! Cost of the source's order logic: positions per second of the keyed permutation, samples
//! per second of worker iterators (files, indexed shards, streamed shards with a shuffle
//! buffer), the time to begin an epoch and to resume one mid-way (which replays the shuffle
//! buffer), the size of the saved state, and the mixing of streamed shards by the shuffle buffer
//! (how far samples move, how many shards a batch of 256 draws from).
//!
//! `cargo bench -p bucketload --bench source_order`
//! Record results in docs/BENCHMARKS.md together with this command.

#![allow(clippy::unwrap_used)] // a benchmark aborts on any error

use std::collections::HashMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use bucketload::source::{
    EpochProgress, Order, Partition, Permutation, Plan, SampleRef, Source, WorkItem,
};

/// Runs `f` once and returns the time it took.
fn time<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

fn ns_per(d: Duration, n: u64) -> f64 {
    d.as_nanos() as f64 / n as f64
}

fn permutation(n: u64) {
    let (p, build) = time(|| Permutation::keyed(n, 42));
    let (sum, walk) = time(|| (0..n).map(|i| p.get(i)).fold(0u64, u64::wrapping_add));
    black_box(sum);
    println!(
        "permutation of {n}: build {:.2} ms, {:.1} ns per position",
        build.as_secs_f64() * 1e3,
        ns_per(walk, n)
    );
}

/// Iterates worker 0 of rank 0 to the end; returns ns per sample.
fn iterate(progress: &EpochProgress) -> f64 {
    let it = progress.worker(0).unwrap();
    let n = it.len() as u64;
    let (count, d) = time(|| it.map(black_box).count());
    assert_eq!(count as u64, n);
    ns_per(d, n)
}

fn workers(name: &str, plan: Plan, order: Order) {
    let partition = Partition::new(0, 8);
    let source = Source::new(plan, order, partition).unwrap();
    let (progress, begin) = time(|| source.begin(0, 4).unwrap());
    let per_sample = iterate(&progress);
    println!(
        "{name}: begin {:.2} ms, {:.1} ns per sample ({} samples per rank)",
        begin.as_secs_f64() * 1e3,
        per_sample,
        progress.samples()
    );
    resume(name, &source, progress);
}

/// Saves half-way through each worker and resumes with the same and with another worker count.
fn resume(name: &str, source: &Source, mut progress: EpochProgress) {
    for w in 0..progress.num_workers() {
        let half = progress.worker_len(w).unwrap() / 2;
        progress.record(w, half).unwrap();
    }
    let state = progress.state();
    let (same, d_same) = time(|| source.resume(&state, 4).unwrap());
    let (_, d_worker) = time(|| same.worker(0).unwrap());
    let (other, d_other) = time(|| source.resume(&state, 3).unwrap());
    let json = serde_json::to_string(&other.state()).unwrap();
    println!(
        "{name}: resume half-way: {:.2} ms + {:.2} ms for a worker's iterator; with 3 workers \
         instead of 4: {:.2} ms, state {} bytes of JSON (before: {})",
        d_same.as_secs_f64() * 1e3,
        d_worker.as_secs_f64() * 1e3,
        d_other.as_secs_f64() * 1e3,
        json.len(),
        serde_json::to_string(&state).unwrap().len()
    );
}

/// Read order of every sample of a worker's read plan.
fn arrival_order(reads: &[WorkItem]) -> HashMap<SampleRef, usize> {
    let samples = reads.iter().flat_map(|r| {
        let shard = r.shard;
        r.samples
            .clone()
            .map(move |sample| SampleRef::Shard { shard, sample })
    });
    samples.enumerate().map(|(i, s)| (s, i)).collect()
}

/// Mixing of 200 shards of `size` samples through a buffer of `buffer` samples.
fn mixing(size: u64, buffer: u64) {
    const BATCH: usize = 256;
    let order = Order::shuffled(3).with_shuffle_buffer(buffer);
    let source = Source::new(Plan::shards(&[size; 200]), order, Partition::single()).unwrap();
    let progress = source.begin(0, 1).unwrap();
    let arrival = arrival_order(&progress.worker(0).unwrap().reads().unwrap());
    let out: Vec<SampleRef> = progress.worker(0).unwrap().collect();
    let moved = out
        .iter()
        .enumerate()
        .map(|(k, s)| k.abs_diff(arrival[s]) as f64)
        .sum::<f64>()
        / out.len() as f64;
    let (mut shards, mut top) = (0.0, 0.0);
    let batches = out.chunks(BATCH);
    let n = batches.len() as f64;
    for batch in batches {
        let mut per_shard: HashMap<u64, usize> = HashMap::new();
        for s in batch {
            if let SampleRef::Shard { shard, .. } = s {
                *per_shard.entry(*shard).or_default() += 1;
            }
        }
        shards += per_shard.len() as f64 / n;
        top += *per_shard.values().max().unwrap() as f64 / batch.len() as f64 / n;
    }
    println!(
        "mixing, shards of {size} samples, buffer {buffer}: samples move {moved:.0} places on \
         average; a batch of {BATCH} draws from {shards:.1} shards, {:.0}% from its largest",
        top * 100.0
    );
}

fn main() {
    permutation(50_000);
    permutation(10_000_000);
    let shards = vec![1_000u64; 10_000];
    workers("files 10M", Plan::files(10_000_000), Order::shuffled(1));
    workers(
        "indexed 10k x 1k",
        Plan::indexed(&shards),
        Order::shuffled(1),
    );
    for buffer in [0, 1_000, 10_000] {
        workers(
            &format!("shards 10k x 1k, buffer {buffer}"),
            Plan::shards(&shards),
            Order::shuffled(1).with_shuffle_buffer(buffer),
        );
    }
    for (size, buffer) in [
        (1_000, 0),
        (1_000, 1_000),
        (1_000, 5_000),
        (1_000, 10_000),
        (100, 1_000),
    ] {
        mixing(size, buffer);
    }
}
