use proptest::prelude::*;

use super::*;

fn source(plan: Plan, order: Order, rank: u32, world: u32) -> Source {
    Source::new(plan, order, Partition::new(rank, world)).unwrap()
}

/// Every sample of every worker of a progress, worker by worker.
fn drain(progress: &EpochProgress) -> Vec<SampleRef> {
    (0..progress.num_workers())
        .flat_map(|w| progress.worker(w).unwrap())
        .collect()
}

fn files(samples: &[SampleRef]) -> Vec<u64> {
    samples
        .iter()
        .map(|s| match s {
            SampleRef::File { index } => *index,
            SampleRef::Shard { .. } => panic!("not a files plan"),
        })
        .collect()
}

#[test]
fn new_reports_every_problem() {
    let order = Order::shuffled(1).with_shuffle_buffer(u64::MAX);
    let err = Source::new(Plan::files(3), order, Partition::new(0, 0)).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("world_size must be at least 1"),
        "{message}"
    );
    assert!(message.contains("shuffle buffer"), "{message}");
    let err = Source::new(Plan::files(3), Order::sequential(), Partition::new(4, 4)).unwrap_err();
    assert!(err.to_string().contains("rank 4 is out of range"), "{err}");
}

#[test]
fn sequential_files_keep_dataset_order() {
    let s = source(Plan::files(5), Order::sequential(), 0, 1);
    assert_eq!(files(&drain(&s.begin(3, 1).unwrap())), vec![0, 1, 2, 3, 4]);
}

#[test]
fn ranks_take_strided_positions_and_pad_from_the_start() {
    // Sequential order shows the layout: rank r takes r, r + 3, …; 10 samples over 3 ranks
    // pad two positions with samples 0 and 1.
    let ranks: Vec<Vec<u64>> = (0..3)
        .map(|r| {
            let s = source(Plan::files(10), Order::sequential(), r, 3);
            files(&drain(&s.begin(0, 1).unwrap()))
        })
        .collect();
    assert_eq!(
        ranks,
        vec![vec![0, 3, 6, 9], vec![1, 4, 7, 0], vec![2, 5, 8, 1]]
    );
    let drop = Partition::new(2, 3).with_remainder(Remainder::Drop);
    let s = Source::new(Plan::files(10), Order::sequential(), drop).unwrap();
    assert_eq!(files(&drain(&s.begin(0, 1).unwrap())), vec![2, 5, 8]);
}

#[test]
fn exact_ranks_take_strided_positions_without_padding() {
    let exact = |r| Partition::new(r, 3).with_remainder(Remainder::Exact);
    let ranks: Vec<Vec<u64>> = (0..3)
        .map(|r| {
            let s = Source::new(Plan::files(10), Order::sequential(), exact(r)).unwrap();
            assert_eq!(s.samples_per_rank(), [4, 3, 3][r as usize]);
            files(&drain(&s.begin(0, 2).unwrap()))
        })
        .collect();
    assert_eq!(ranks, vec![vec![0, 3, 6, 9], vec![1, 4, 7], vec![2, 5, 8]]);
    // Streams: contiguous runs of 4, 3 and 3 samples.
    let reads: Vec<Vec<WorkItem>> = (0..3)
        .map(|r| {
            let s = Source::new(Plan::shards(&[5, 5]), Order::sequential(), exact(r)).unwrap();
            s.begin(0, 1).unwrap().worker(0).unwrap().reads().unwrap()
        })
        .collect();
    let item = |shard, samples| WorkItem { shard, samples };
    assert_eq!(reads[0], vec![item(0, 0..4)]);
    assert_eq!(reads[1], vec![item(0, 4..5), item(1, 0..2)]);
    assert_eq!(reads[2], vec![item(1, 2..5)]);
}

fn exact_plan() -> impl Strategy<Value = Plan> {
    prop_oneof![
        (0u64..200).prop_map(Plan::files),
        proptest::collection::vec(0u64..30, 0..12).prop_map(|c| Plan::indexed(&c)),
        proptest::collection::vec(0u64..30, 0..12).prop_map(|c| Plan::shards(&c)),
    ]
}

proptest! {
    #[test]
    fn exact_gives_every_sample_to_exactly_one_rank(
        plan in exact_plan(),
        world in 1u32..10,
        workers in 1u32..5,
        seed in proptest::option::of(any::<u64>()),
        buffer in 0u64..20,
    ) {
        let order = seed.map_or(Order::sequential(), |s| Order::shuffled(s).with_shuffle_buffer(buffer));
        let mut all = Vec::new();
        let mut counts = Vec::new();
        for rank in 0..world {
            let partition = Partition::new(rank, world).with_remainder(Remainder::Exact);
            let s = Source::new(plan.clone(), order, partition).unwrap();
            let got = drain(&s.begin(1, workers).unwrap());
            prop_assert_eq!(got.len() as u64, s.samples_per_rank());
            counts.push(got.len() as u64);
            all.extend(got);
        }
        let n = plan.samples();
        prop_assert_eq!(all.len() as u64, n);
        all.sort();
        all.dedup();
        prop_assert_eq!(all.len() as u64, n, "a sample twice");
        // The first N mod w ranks hold one more.
        let (q, r) = (n / u64::from(world), n % u64::from(world));
        let want: Vec<u64> = (0..u64::from(world)).map(|k| q + u64::from(k < r)).collect();
        prop_assert_eq!(counts, want);
    }
}

#[test]
fn shuffled_files_are_a_permutation_that_changes_by_epoch() {
    let s = source(Plan::files(1000), Order::shuffled(7), 0, 1);
    let e0 = files(&drain(&s.begin(0, 3).unwrap()));
    let e1 = files(&drain(&s.begin(1, 3).unwrap()));
    let mut sorted = e0.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
    assert_ne!(e0, e1);
    assert_eq!(e0, files(&drain(&s.begin(0, 3).unwrap())));
}

#[test]
fn indexed_samples_name_their_shard() {
    let s = source(Plan::indexed(&[2, 0, 3]), Order::shuffled(3), 0, 1);
    let mut got = drain(&s.begin(0, 2).unwrap());
    got.sort();
    let want: Vec<SampleRef> = [(0, 0), (0, 1), (2, 0), (2, 1), (2, 2)]
        .into_iter()
        .map(|(shard, sample)| SampleRef::Shard { shard, sample })
        .collect();
    assert_eq!(got, want);
}

#[test]
fn streamed_ranks_split_a_shard_by_sample_count() {
    // Two shards of 5 over 4 ranks: 3 samples each (Pad), the middle ranks read two shards.
    let reads: Vec<Vec<WorkItem>> = (0..4)
        .map(|r| {
            let s = source(Plan::shards(&[5, 5]), Order::sequential(), r, 4);
            s.begin(0, 1).unwrap().worker(0).unwrap().reads().unwrap()
        })
        .collect();
    let item = |shard, samples| WorkItem { shard, samples };
    assert_eq!(reads[0], vec![item(0, 0..3)]);
    assert_eq!(reads[1], vec![item(0, 3..5), item(1, 0..1)]);
    assert_eq!(reads[3], vec![item(1, 4..5), item(0, 0..2)]);
}

#[test]
fn record_and_worker_check_their_arguments() {
    let s = source(Plan::files(10), Order::shuffled(1), 0, 1);
    let mut p = s.begin(0, 3).unwrap();
    assert_eq!(p.worker_len(0).unwrap(), 3);
    assert_eq!(p.worker_len(2).unwrap(), 4);
    assert!(p.worker(3).is_err());
    assert!(p.record(0, 4).is_err());
    p.record(0, 3).unwrap();
    p.record(2, 1).unwrap();
    assert_eq!((p.consumed(), p.remaining()), (4, 6));
    assert!(s.begin(0, 0).is_err());
}

#[test]
fn state_round_trips_through_json() {
    let s = source(Plan::shards(&[4, 4, 4]), Order::shuffled(9), 1, 2);
    let mut p = s.begin(5, 2).unwrap();
    p.record(1, 2).unwrap();
    let json = serde_json::to_string(&p.state()).unwrap();
    assert!(json.contains("\"epoch\":5"), "{json}");
    assert!(!json.contains("history"), "{json}");
    let state: SourceState = serde_json::from_str(&json).unwrap();
    assert_eq!(state, p.state());
    assert_eq!(state.worker_positions(), &[0, 2]);
    let resumed = s.resume(&state, 3).unwrap();
    let json = serde_json::to_string(&resumed.state()).unwrap();
    assert!(json.contains(r#""history":[[0,2]]"#), "{json}");
    let again: SourceState = serde_json::from_str(&json).unwrap();
    assert_eq!(s.resume(&again, 3).unwrap().remaining(), 4);
}

#[test]
fn resume_refuses_a_state_of_another_source() {
    let plan = Plan::files(100);
    let s = source(plan.clone(), Order::shuffled(1), 0, 2);
    let state = s.begin(0, 1).unwrap().state();
    let others = [
        source(Plan::files(101), Order::shuffled(1), 0, 2),
        source(Plan::indexed(&[100]), Order::shuffled(1), 0, 2),
        source(plan.clone(), Order::shuffled(2), 0, 2),
        source(plan.clone(), Order::sequential(), 0, 2),
        Source::new(
            plan,
            Order::shuffled(1),
            Partition::new(0, 2).with_remainder(Remainder::Drop),
        )
        .unwrap(),
    ];
    for other in others {
        let err = other.resume(&state, 1).unwrap_err();
        assert!(
            err.to_string().starts_with("invalid input: cannot resume"),
            "{err}"
        );
    }
    // The shuffle buffer only matters to streams.
    let bigger = Order::shuffled(1).with_shuffle_buffer(5);
    assert!(
        source(Plan::files(100), bigger, 0, 2)
            .resume(&state, 1)
            .is_ok()
    );
    let mut bad = state.clone();
    bad.version = STATE_VERSION + 1;
    assert!(s.resume(&bad, 1).is_err());
    bad = state.clone();
    bad.consumed = vec![51];
    assert!(s.resume(&bad, 1).is_err());
    bad = state.clone();
    bad.consumed.clear();
    assert!(s.resume(&bad, 1).is_err());
    bad = state;
    bad.rank = 2;
    let err = s.resume(&bad, 1).unwrap_err();
    assert!(err.to_string().contains("rank 2 of 2"), "{err}");
}

#[test]
fn resume_before_any_sample_is_a_fresh_begin() {
    let s = source(
        Plan::shards(&[7, 3, 9]),
        Order::shuffled(4).with_shuffle_buffer(4),
        0,
        1,
    );
    let state = s.begin(2, 2).unwrap().state();
    let resumed = s.resume(&state, 3).unwrap();
    assert_eq!(resumed.state(), s.begin(2, 3).unwrap().state());
    assert_eq!(drain(&resumed), drain(&s.begin(2, 3).unwrap()));
}

#[test]
fn resume_with_the_same_workers_continues_each_worker() {
    let s = source(
        Plan::shards(&[7, 3, 9, 4]),
        Order::shuffled(4).with_shuffle_buffer(5),
        0,
        1,
    );
    let mut p = s.begin(0, 2).unwrap();
    let full: Vec<Vec<SampleRef>> = (0..2).map(|w| p.worker(w).unwrap().collect()).collect();
    p.record(0, 3).unwrap();
    p.record(1, 8).unwrap();
    let resumed = s.resume(&p.state(), 2).unwrap();
    let tail0: Vec<_> = resumed.worker(0).unwrap().collect();
    let tail1: Vec<_> = resumed.worker(1).unwrap().collect();
    assert_eq!(tail0, full[0][3..]);
    assert_eq!(tail1, full[1][8..]);
}

#[test]
fn from_manifest_uses_the_dataset_kind_and_access() {
    let json = br#"{"format_version":1,"kind":"shards","parameters":{"source":"s3://a",
        "label_policy":"none","tool_version":"0","created":"2026-11-22T00:00:00Z"},
        "samples":5,"bytes":20,"shards":[
        {"name":"a.tar","index":"a.tar.idx","samples":2,"bytes":10,"crc32c":"00000000","md5":"00000000000000000000000000000000"},
        {"name":"b.tar","index":"b.tar.idx","samples":3,"bytes":10,"crc32c":"00000000","md5":"00000000000000000000000000000000"}]}"#;
    let manifest = Manifest::from_json("m", json).unwrap();
    assert_eq!(
        Plan::from_manifest(&manifest, Access::Stream),
        Plan::shards(&[2, 3])
    );
    assert_eq!(
        Plan::from_manifest(&manifest, Access::Random),
        Plan::indexed(&[2, 3])
    );
}
