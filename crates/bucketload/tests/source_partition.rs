//! Property tests of the source's order and partitions: every sample once per epoch, the same
//! count on every rank, determinism, new orders per epoch, and the stream read plan.
#![allow(clippy::unwrap_used)]

mod source_support;

use std::collections::{HashMap, VecDeque};

use bucketload::source::{EpochProgress, Order, Partition, Plan, Remainder, SampleRef, Source};
use proptest::collection::vec;
use proptest::prelude::*;
use source_support::{order, remainder};

#[derive(Debug, Clone)]
enum Shape {
    Files(u64),
    Indexed(Vec<u64>),
    Shards(Vec<u64>),
}

impl Shape {
    fn plan(&self) -> Plan {
        match self {
            Shape::Files(n) => Plan::files(*n),
            Shape::Indexed(counts) => Plan::indexed(counts),
            Shape::Shards(counts) => Plan::shards(counts),
        }
    }

    fn samples(&self) -> Vec<SampleRef> {
        let shards = |counts: &[u64]| -> Vec<SampleRef> {
            let per_shard = counts.iter().enumerate();
            per_shard
                .flat_map(|(shard, &n)| {
                    (0..n).map(move |sample| SampleRef::Shard {
                        shard: shard as u64,
                        sample,
                    })
                })
                .collect()
        };
        match self {
            Shape::Files(n) => (0..*n).map(|index| SampleRef::File { index }).collect(),
            Shape::Indexed(counts) | Shape::Shards(counts) => shards(counts),
        }
    }
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        (0u64..300).prop_map(Shape::Files),
        vec(0u64..40, 0..20).prop_map(Shape::Indexed),
        vec(0u64..40, 0..20).prop_map(Shape::Shards),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    shape: Shape,
    world: u32,
    workers: u32,
    order: Order,
    remainder: Remainder,
    epoch: u64,
}

impl Case {
    fn source(&self, rank: u32) -> Source {
        let partition = Partition::new(rank, self.world).with_remainder(self.remainder);
        Source::new(self.shape.plan(), self.order, partition).unwrap()
    }
}

fn case() -> impl Strategy<Value = Case> {
    (shape(), 1u32..7, 1u32..5, order(), remainder(), 0u64..4).prop_map(
        |(shape, world, workers, order, remainder, epoch)| Case {
            shape,
            world,
            workers,
            order,
            remainder,
            epoch,
        },
    )
}

/// Each worker's samples, in order.
fn per_worker(progress: &EpochProgress) -> Vec<Vec<SampleRef>> {
    (0..progress.num_workers())
        .map(|w| progress.worker(w).unwrap().collect())
        .collect()
}

proptest! {
    #[test]
    fn every_sample_once_and_equal_counts_per_rank(case in case()) {
        let expected = case.shape.samples();
        let mut all = Vec::new();
        let mut counts = Vec::new();
        for rank in 0..case.world {
            let progress = case.source(rank).begin(case.epoch, case.workers).unwrap();
            let lens: Vec<u64> =
                (0..case.workers).map(|w| progress.worker_len(w).unwrap()).collect();
            prop_assert!(lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1);
            let got: Vec<SampleRef> = per_worker(&progress).concat();
            prop_assert_eq!(got.len() as u64, progress.samples());
            prop_assert_eq!(lens.iter().sum::<u64>(), progress.samples());
            counts.push(got.len());
            all.extend(got);
        }
        let spread = counts.iter().max().unwrap() - counts.iter().min().unwrap();
        let most = usize::from(case.remainder == Remainder::Exact);
        prop_assert!(spread <= most, "unequal ranks {:?}", counts);
        let mut seen: HashMap<SampleRef, usize> = HashMap::new();
        for s in &all {
            *seen.entry(*s).or_default() += 1;
        }
        prop_assert!(seen.keys().all(|s| expected.contains(s)), "a sample outside the plan");
        let (n, world) = (expected.len(), case.world as usize);
        match case.remainder {
            Remainder::Drop => {
                prop_assert!(seen.values().all(|&c| c == 1), "a sample twice");
                prop_assert_eq!(all.len(), n / world * world);
            }
            Remainder::Exact => {
                prop_assert!(seen.values().all(|&c| c == 1), "a sample twice");
                prop_assert_eq!(all.len(), n);
            }
            _ => {
                prop_assert_eq!(seen.len(), n, "a sample missing");
                prop_assert_eq!(all.len(), n.div_ceil(world) * world);
                // Padding repeats whole rounds of the order at most.
                let most = all.len().div_ceil(n.max(1));
                prop_assert!(seen.values().all(|&c| c <= most));
            }
        }
    }

    #[test]
    fn same_inputs_give_the_same_order(case in case(), rank in 0u32..7) {
        let rank = rank % case.world;
        let a = per_worker(&case.source(rank).begin(case.epoch, case.workers).unwrap());
        let b = per_worker(&case.clone().source(rank).begin(case.epoch, case.workers).unwrap());
        prop_assert_eq!(a, b);
    }

    #[test]
    fn epochs_get_new_orders(
        seed in any::<u64>(),
        files in 12u64..500,
        shards in vec(1u64..10, 12..30),
        epoch in 0u64..1000,
    ) {
        // 12! ≈ 4.8e8 orders: a repeat would be a bug, not chance.
        for plan in [Plan::files(files), Plan::indexed(&shards), Plan::shards(&shards)] {
            let source = Source::new(plan, Order::shuffled(seed), Partition::single()).unwrap();
            let a = per_worker(&source.begin(epoch, 1).unwrap());
            let b = per_worker(&source.begin(epoch + 1, 1).unwrap());
            prop_assert_ne!(a, b);
        }
    }

    #[test]
    fn stream_reads_cover_the_samples_within_the_buffer(
        counts in vec(0u64..40, 0..20),
        case in case(),
        rank in 0u32..7,
        consumed in vec(any::<u64>(), 4),
        resumed_workers in 1u32..5,
    ) {
        let case = Case { shape: Shape::Shards(counts), ..case };
        let source = case.source(rank % case.world);
        let mut progress = source.begin(case.epoch, case.workers).unwrap();
        for (w, c) in consumed.iter().enumerate().take(case.workers as usize) {
            let len = progress.worker_len(w as u32).unwrap();
            progress.record(w as u32, c % (len + 1)).unwrap();
        }
        // Restored with the same workers (buffers replayed) or another count (a new generation
        // whose spans hold the samples the old buffers held).
        let progress = source.resume(&progress.state(), resumed_workers).unwrap();
        for w in 0..resumed_workers {
            let it = progress.worker(w).unwrap();
            let reads = it.reads().unwrap();
            let limit = case.order.shuffle_buffer() as usize + 1;
            check_reads(reads, it, limit)?;
        }
    }
}

/// Follows a read plan like a loader: read until the next sample has arrived, never holding
/// more than `limit` samples, and ending with nothing unread and nothing held.
fn check_reads(
    reads: Vec<bucketload::source::WorkItem>,
    samples: impl Iterator<Item = SampleRef>,
    limit: usize,
) -> Result<(), TestCaseError> {
    let mut unread: VecDeque<SampleRef> = reads
        .iter()
        .flat_map(|r| {
            r.samples.clone().map(|sample| SampleRef::Shard {
                shard: r.shard,
                sample,
            })
        })
        .collect();
    let mut held: HashMap<SampleRef, usize> = HashMap::new();
    for sample in samples {
        while !held.contains_key(&sample) {
            let Some(next) = unread.pop_front() else {
                return Err(TestCaseError::fail(format!("{sample:?} is never read")));
            };
            *held.entry(next).or_default() += 1;
            prop_assert!(
                held.values().sum::<usize>() <= limit,
                "more than {} held",
                limit
            );
        }
        let count = held.get_mut(&sample).unwrap();
        *count -= 1;
        if *count == 0 {
            held.remove(&sample);
        }
    }
    prop_assert!(
        unread.is_empty() && held.is_empty(),
        "read but never yielded"
    );
    Ok(())
}
