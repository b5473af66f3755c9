//! Property tests of elastic resume: every rank of a world consumes part of an epoch in step,
//! rank 0's state is saved (through JSON) and every rank of a world of another size resumes
//! from it; the samples consumed before and after cover the epoch with none repeated (only
//! padding, with `Remainder::Pad`) and none skipped (but the fewer than `world_size` that
//! `Remainder::Drop` leaves out).
#![allow(clippy::unwrap_used)]

mod source_support;

use std::collections::HashMap;

use bucketload::source::{
    EpochProgress, Order, Partition, Plan, Remainder, STATE_VERSION, SampleRef, Source, SourceState,
};
use proptest::collection::vec;
use proptest::prelude::*;
use source_support::{order, plan, remainder};

/// A world size and the workers of each of its ranks.
fn world() -> impl Strategy<Value = (u32, u32)> {
    (prop_oneof![1u32..5, Just(8)], 1u32..4)
}

#[derive(Debug, Clone)]
struct Run {
    plan: Plan,
    order: Order,
    remainder: Remainder,
    epoch: u64,
}

impl Run {
    fn source(&self, rank: u32, world: u32) -> Source {
        let partition = Partition::new(rank, world).with_remainder(self.remainder);
        Source::new(self.plan.clone(), self.order, partition).unwrap()
    }

    /// Every rank of `world` starts from `state` (or the epoch's start) with `workers` workers.
    fn start(&self, world: u32, workers: u32, state: Option<&SourceState>) -> Vec<EpochProgress> {
        (0..world)
            .map(|rank| {
                let source = self.source(rank, world);
                match state {
                    Some(state) => source.resume(state, workers).unwrap(),
                    None => source.begin(self.epoch, workers).unwrap(),
                }
            })
            .collect()
    }
}

/// Lets every rank's worker `w` hand out `takes[w]` samples (modulo what rank 0's has left;
/// everything when `takes` is empty), in step: a rank whose worker is shorter hands out what it has, and a worker rank 0 finishes
/// is finished on every rank.
fn consume_in_step(ranks: &mut [EpochProgress], takes: &[u64]) -> Vec<SampleRef> {
    let mut got = Vec::new();
    for w in 0..ranks[0].num_workers() {
        let left0 = ranks[0].worker(w).unwrap().len() as u64;
        let n = match takes {
            [] => left0,
            _ => takes[w as usize % takes.len()] % (left0 + 1),
        };
        for progress in ranks.iter_mut() {
            let it = progress.worker(w).unwrap();
            let left = it.len() as u64;
            let mine = if n == left0 { left } else { n.min(left) };
            got.extend(it.take(mine as usize));
            progress.record(w, mine).unwrap();
        }
    }
    got
}

fn consume_all(ranks: &mut [EpochProgress]) -> Vec<SampleRef> {
    consume_in_step(ranks, &[])
}

fn json_round_trip(state: &SourceState) -> SourceState {
    serde_json::from_str(&serde_json::to_string(state).unwrap()).unwrap()
}

fn counts(samples: &[SampleRef]) -> HashMap<SampleRef, u64> {
    let mut seen = HashMap::new();
    for s in samples {
        *seen.entry(*s).or_default() += 1;
    }
    seen
}

/// Checks that `got` covers the epoch as the remainder promises; `worlds` are the world sizes
/// the epoch went through, the last one finishing it.
fn check_cover(run: &Run, worlds: &[u32], got: &[SampleRef]) -> Result<(), TestCaseError> {
    let n = run.plan.samples();
    let seen = counts(got);
    let extra = got.len() as u64 - seen.len() as u64;
    let last = u64::from(*worlds.last().unwrap());
    match run.remainder {
        Remainder::Exact => {
            prop_assert_eq!(extra, 0, "a sample twice");
            prop_assert_eq!(seen.len() as u64, n, "a sample skipped");
        }
        Remainder::Drop => {
            prop_assert_eq!(extra, 0, "a sample twice");
            prop_assert!(
                n - (seen.len() as u64) < last,
                "{} of {} seen",
                seen.len(),
                n
            );
        }
        _ => {
            prop_assert_eq!(seen.len() as u64, n, "a sample skipped");
            // Padding: fewer than world_size samples per world.
            let padding: u64 = worlds.iter().map(|&w| u64::from(w) - 1).sum();
            prop_assert!(extra <= padding, "{} repeats, padding {}", extra, padding);
        }
    }
    Ok(())
}

/// Per-rank counts after a resume: equal, or within one sample with `Remainder::Exact`.
fn check_balance(run: &Run, ranks: &[EpochProgress]) -> Result<(), TestCaseError> {
    let left: Vec<u64> = ranks.iter().map(|p| p.remaining()).collect();
    let spread = left.iter().max().unwrap() - left.iter().min().unwrap();
    let most = u64::from(run.remainder == Remainder::Exact);
    prop_assert!(spread <= most, "unequal ranks {:?}", left);
    Ok(())
}

fn run() -> impl Strategy<Value = Run> {
    (plan(16), order(), remainder(), 0u64..3).prop_map(|(plan, order, remainder, epoch)| Run {
        plan,
        order,
        remainder,
        epoch,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn another_world_size_neither_repeats_nor_skips(
        run in run(),
        worlds in vec(world(), 2..4),
        takes in vec(any::<u64>(), 1..5),
    ) {
        let (w0, k0) = worlds[0];
        let mut ranks = run.start(w0, k0, None);
        let mut got = Vec::new();
        for (hop, &(world, workers)) in worlds.iter().enumerate().skip(1) {
            let shifted: Vec<u64> = takes.iter().map(|t| t.rotate_left(hop as u32 * 11)).collect();
            got.extend(consume_in_step(&mut ranks, &shifted));
            let state = json_round_trip(&ranks[0].state());
            ranks = run.start(world, workers, Some(&state));
            check_balance(&run, &ranks)?;
        }
        got.extend(consume_all(&mut ranks));
        prop_assert!(ranks.iter().all(|p| p.is_complete()));
        let sizes: Vec<u32> = worlds.iter().map(|w| w.0).collect();
        check_cover(&run, &sizes, &got)?;
    }

    #[test]
    fn any_ranks_state_resumes_every_rank_alike(
        run in run().prop_filter("ranks in step hold equal positions", |r| {
            r.remainder != Remainder::Exact
        }),
        (w0, k0) in world(),
        (w1, k1) in world(),
        takes in vec(any::<u64>(), 1..5),
        saver in 0u32..8,
    ) {
        let mut ranks = run.start(w0, k0, None);
        consume_in_step(&mut ranks, &takes);
        let saver = (saver % w0) as usize;
        let from_saver = run.start(w1, k1, Some(&ranks[saver].state()));
        let from_first = run.start(w1, k1, Some(&ranks[0].state()));
        for (a, b) in from_saver.iter().zip(&from_first) {
            let a: Vec<Vec<SampleRef>> = (0..k1).map(|w| a.worker(w).unwrap().collect()).collect();
            let b: Vec<Vec<SampleRef>> = (0..k1).map(|w| b.worker(w).unwrap().collect()).collect();
            prop_assert_eq!(a, b);
        }
        if w1 == w0 && k1 == k0 {
            // The same world: each rank continues exactly as from its own state.
            for (rank, own) in ranks.iter().enumerate() {
                let own: Vec<SampleRef> = (0..k0).flat_map(|w| own.worker(w).unwrap()).collect();
                let adopted = &from_first[rank];
                let adopted: Vec<SampleRef> =
                    (0..k0).flat_map(|w| adopted.worker(w).unwrap()).collect();
                prop_assert_eq!(own, adopted);
            }
        }
    }
}

#[test]
fn a_state_of_the_first_version_still_resumes() {
    // Saved by the first release: rank 1 of 2, shuffled, a change from one worker to two.
    let saved = r#"{"version":1,"plan":{"kind":"files","samples":10,"shards":0,
        "digest":"48410c16fead434b"},"seed":7,"shuffle_buffer":0,"rank":1,"world_size":2,
        "remainder":"pad","epoch":0,"history":[[1]],"consumed":[1,0]}"#;
    let state: SourceState = serde_json::from_str(saved).unwrap();
    let run = Run {
        plan: Plan::files(10),
        order: Order::shuffled(7),
        remainder: Remainder::Pad,
        epoch: 0,
    };
    let source = run.source(1, 2);
    let mut progress = source.begin(0, 1).unwrap();
    progress.record(0, 1).unwrap();
    let mut again = source.resume(&progress.state(), 2).unwrap();
    again.record(0, 1).unwrap();
    let current = saved.replace(r#""version":1"#, &format!(r#""version":{STATE_VERSION}"#));
    assert_eq!(
        serde_json::from_str::<SourceState>(&current).unwrap(),
        again.state()
    );
    let resumed = source.resume(&state, 2).unwrap();
    assert_eq!((resumed.consumed(), resumed.remaining()), (2, 3));
    let tail: Vec<SampleRef> = (0..2).flat_map(|w| resumed.worker(w).unwrap()).collect();
    let want: Vec<SampleRef> = (0..2).flat_map(|w| again.worker(w).unwrap()).collect();
    assert_eq!(tail, want);
    // Another world size: rank 0 of 3 takes its share of what the two ranks left.
    assert_eq!(run.source(0, 3).resume(&state, 1).unwrap().remaining(), 2);
}

/// A stream's state as the first version saved it: the current one, relabelled.
fn as_version_one(state: &SourceState) -> SourceState {
    let mut json = serde_json::to_value(state).unwrap();
    json["version"] = 1.into();
    serde_json::from_value(json).unwrap()
}

#[test]
fn a_first_version_stream_state_resumes_only_where_its_order_is_unchanged() {
    let plan = Plan::shards(&[400, 250, 300, 350]);
    for (buffer, resumes) in [(0, true), (100, true), (101, false), (1_000, false)] {
        let run = Run {
            plan: plan.clone(),
            order: Order::shuffled(3).with_shuffle_buffer(buffer),
            remainder: Remainder::Pad,
            epoch: 1,
        };
        let source = run.source(0, 2);
        let mut progress = source.begin(1, 2).unwrap();
        progress.record(1, 17).unwrap();
        let old = as_version_one(&progress.state());
        match source.resume(&old, 2) {
            Ok(resumed) => {
                assert!(resumes, "buffer {buffer}: a version 1 state resumed");
                let want = source.resume(&progress.state(), 2).unwrap();
                let tail: Vec<SampleRef> =
                    (0..2).flat_map(|w| resumed.worker(w).unwrap()).collect();
                let same: Vec<SampleRef> = (0..2).flat_map(|w| want.worker(w).unwrap()).collect();
                assert_eq!(tail, same);
            }
            Err(err) => {
                assert!(!resumes, "buffer {buffer}: {err}");
                let text = err.to_string();
                assert!(text.contains("by an older bucketload"), "{text}");
                assert!(text.contains("another stream order"), "{text}");
            }
        }
    }
}
