//! Property tests of resume: save a rank's state at random positions, restore it (through
//! JSON, with the same or another number of workers, several times in one epoch) and check that
//! the samples consumed before and after add up to the uninterrupted epoch: none replayed, none
//! skipped.
#![allow(clippy::unwrap_used)]

mod source_support;

use bucketload::source::{EpochProgress, Partition, SampleRef, Source, SourceState};
use proptest::collection::vec;
use proptest::prelude::*;
use source_support::{order, plan, remainder};

fn source() -> impl Strategy<Value = Source> {
    let cases = (plan(20), order(), 1u32..7, 0u32..7, remainder());
    cases.prop_map(|(plan, order, world, rank, rem)| {
        let partition = Partition::new(rank % world, world).with_remainder(rem);
        Source::new(plan, order, partition).unwrap()
    })
}

fn sorted(mut samples: Vec<SampleRef>) -> Vec<SampleRef> {
    samples.sort();
    samples
}

fn json_round_trip(state: &SourceState) -> SourceState {
    serde_json::from_str(&serde_json::to_string(state).unwrap()).unwrap()
}

/// Lets every worker hand all its remaining samples to training.
fn consume_all(progress: &mut EpochProgress) -> Vec<Vec<SampleRef>> {
    consume(progress, &[u64::MAX], true)
}

/// Lets each worker hand `takes[w] mod (left + 1)` samples to training; returns them per worker.
fn consume(progress: &mut EpochProgress, takes: &[u64], all: bool) -> Vec<Vec<SampleRef>> {
    (0..progress.num_workers())
        .map(|w| {
            let it = progress.worker(w).unwrap();
            let left = it.len() as u64;
            let n = if all {
                left
            } else {
                takes[w as usize % takes.len()] % (left + 1)
            };
            let got: Vec<SampleRef> = it.take(n as usize).collect();
            progress.record(w, got.len() as u64).unwrap();
            got
        })
        .collect()
}

proptest! {
    // Cheap cases (under 10 ms each): many of them.
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn resume_neither_replays_nor_skips(
        source in source(),
        epoch in 0u64..4,
        workers in vec(1u32..5, 1..5),
        takes in vec(any::<u64>(), 1..8),
    ) {
        let whole: Vec<SampleRef> = source
            .begin(epoch, workers[0])
            .map(|p| (0..p.num_workers()).flat_map(|w| p.worker(w).unwrap()).collect())
            .unwrap();
        let mut progress = source.begin(epoch, workers[0]).unwrap();
        let mut got = Vec::new();
        for (segment, &next) in workers.iter().enumerate().skip(1) {
            let shifted: Vec<u64> = takes.iter().map(|t| t.rotate_left(segment as u32)).collect();
            got.extend(consume(&mut progress, &shifted, false).concat());
            let state = json_round_trip(&progress.state());
            progress = source.resume(&state, next).unwrap();
            prop_assert_eq!(progress.consumed(), got.len() as u64);
            prop_assert_eq!(progress.samples(), source.samples_per_rank());
        }
        got.extend(consume_all(&mut progress).concat());
        prop_assert!(progress.is_complete());
        prop_assert_eq!(sorted(got), sorted(whole));
    }

    #[test]
    fn resume_with_the_same_workers_keeps_each_workers_order(
        source in source(),
        epoch in 0u64..4,
        workers in 1u32..5,
        takes in vec(any::<u64>(), 1..8),
        saves in 1usize..4,
    ) {
        let whole: Vec<Vec<SampleRef>> = {
            let p = source.begin(epoch, workers).unwrap();
            (0..workers).map(|w| p.worker(w).unwrap().collect()).collect()
        };
        let mut progress = source.begin(epoch, workers).unwrap();
        let mut got = vec![Vec::new(); workers as usize];
        for save in 0..saves {
            let shifted: Vec<u64> = takes.iter().map(|t| t.rotate_left(save as u32 * 7)).collect();
            for (w, part) in consume(&mut progress, &shifted, false).into_iter().enumerate() {
                got[w].extend(part);
            }
            progress = source.resume(&json_round_trip(&progress.state()), workers).unwrap();
        }
        for (w, part) in consume_all(&mut progress).into_iter().enumerate() {
            got[w].extend(part);
        }
        prop_assert_eq!(got, whole);
    }

    #[test]
    fn a_worker_count_change_at_an_epoch_boundary_is_a_fresh_epoch(
        source in source(),
        epoch in 0u64..4,
        before in 1u32..5,
        after in 1u32..5,
    ) {
        let mut done = source.begin(epoch, before).unwrap();
        consume_all(&mut done);
        let resumed = source.resume(&done.state(), after).unwrap();
        prop_assert!(resumed.is_complete());
        prop_assert_eq!(resumed.remaining(), 0);
        let fresh = source.resume(&source.begin(epoch, before).unwrap().state(), after).unwrap();
        prop_assert_eq!(fresh.state(), source.begin(epoch, after).unwrap().state());
    }
}
