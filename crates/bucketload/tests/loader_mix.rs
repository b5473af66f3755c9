//! Weighted mixtures of datasets: proportions, per-dataset epochs, equal ranks, determinism and
//! resume, over real loaders of in-memory stores.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;

use bucketload::loader::{Delivery, LoaderBuilder, LoaderConfig, MixState, Mixture, Sample};
use bucketload::source::{Order, Partition, Remainder};
use bucketload_store::object_store::{ObjectStoreExt, PutPayload};
use bucketload_store::{Store, StoreConfig, key_path};
use futures::{StreamExt, TryStreamExt};

/// A files dataset of `n` objects (`name/class_k/i.jpg`) in a memory store of its own.
async fn dataset(name: &str, n: u64) -> Store {
    let store = Store::open(&format!("mem://{name}"), &StoreConfig::default()).unwrap();
    for i in 0..n {
        let key = format!("class_{}/{name}-{i:05}.jpg", i % 2);
        let put = PutPayload::from(key.clone().into_bytes());
        store
            .object_store()
            .put(&key_path(&key), put)
            .await
            .unwrap();
    }
    store
}

struct Sets {
    stores: Vec<Store>,
}

impl Sets {
    async fn new(tag: &str, sizes: &[u64]) -> Sets {
        let mut stores = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            stores.push(dataset(&format!("{tag}{i}"), n).await);
        }
        Sets { stores }
    }

    fn configs(&self, each: impl Fn(LoaderBuilder) -> LoaderBuilder) -> Vec<LoaderConfig> {
        let builder =
            |s: &Store| each(LoaderConfig::for_store(s.clone()).with_delivery(Delivery::Strict));
        self.stores
            .iter()
            .map(|s| builder(s).build().unwrap())
            .collect()
    }

    async fn mixture(
        &self,
        weights: &[f64],
        samples: Option<u64>,
        each: impl Fn(LoaderBuilder) -> LoaderBuilder,
    ) -> Mixture {
        Mixture::open(self.configs(each), weights, samples)
            .await
            .unwrap()
    }
}

fn seeded(seed: u64) -> impl Fn(LoaderBuilder) -> LoaderBuilder {
    move |b| b.with_order(Order::shuffled(seed))
}

/// `dataset:key` of each sample, in order.
fn names(samples: &[Sample]) -> Vec<String> {
    samples
        .iter()
        .map(|s| format!("{}:{}", s.dataset, s.key))
        .collect()
}

fn proportions(samples: &[Sample], datasets: usize) -> Vec<f64> {
    let mut counts = vec![0u64; datasets];
    samples.iter().for_each(|s| counts[s.dataset as usize] += 1);
    counts
        .iter()
        .map(|&c| c as f64 / samples.len() as f64)
        .collect()
}

#[tokio::test]
async fn ten_thousand_samples_hold_the_weights_within_one_percent() {
    let sets = Sets::new("prop", &[300, 200]).await;
    let mixture = sets.mixture(&[0.7, 0.3], Some(10_000), seeded(3)).await;
    let samples: Vec<Sample> = mixture.epoch(0).unwrap().try_collect().await.unwrap();
    assert_eq!(samples.len(), 10_000);
    let p = proportions(&samples, 2);
    assert!(
        (p[0] - 0.7).abs() < 0.01 && (p[1] - 0.3).abs() < 0.01,
        "{p:?}"
    );
    // Each sample is the object its dataset holds under its key.
    for s in &samples {
        let expected = format!("{}-", ["prop0", "prop1"][s.dataset as usize]);
        assert!(
            s.key.contains(&expected),
            "{} from dataset {}",
            s.key,
            s.dataset
        );
        assert_eq!(s.members[0].1.as_ref(), s.key.as_bytes());
    }

    let sets = Sets::new("odd", &[50, 70, 90]).await;
    let weights = [0.137, 0.291, 0.572];
    let mixture = sets.mixture(&weights, Some(10_000), seeded(5)).await;
    let samples: Vec<Sample> = mixture.epoch(2).unwrap().try_collect().await.unwrap();
    let p = proportions(&samples, 3);
    for (got, want) in p.iter().zip(weights) {
        assert!((got - want).abs() < 0.01, "{p:?}");
    }
}

#[tokio::test]
async fn a_small_dataset_repeats_in_new_orders_while_a_large_one_streams() {
    let sets = Sets::new("epochs", &[10, 1_000]).await;
    let mixture = sets.mixture(&[1.0, 1.0], Some(256), seeded(8)).await;
    let mut stream = mixture.epoch(0).unwrap();
    let mut samples = Vec::new();
    while let Some(sample) = stream.try_next().await.unwrap() {
        samples.push(sample);
    }
    let small: Vec<&str> = samples
        .iter()
        .filter(|s| s.dataset == 0)
        .map(|s| s.key.as_str())
        .collect();
    let large: Vec<&str> = samples
        .iter()
        .filter(|s| s.dataset == 1)
        .map(|s| s.key.as_str())
        .collect();
    // Two whole blocks of draws: exactly half each.
    assert_eq!((small.len(), large.len()), (128, 128));
    let orders: Vec<&[&str]> = small.chunks(10).collect();
    for order in &orders[..12] {
        let distinct: HashSet<_> = order.iter().collect();
        assert_eq!(
            distinct.len(),
            10,
            "each epoch of the small set holds it once"
        );
    }
    let distinct_orders: HashSet<_> = orders.iter().collect();
    assert!(distinct_orders.len() > 5, "each epoch in a new order");
    assert_eq!(large.iter().collect::<HashSet<_>>().len(), 128, "no repeat");
    let state = stream.state().unwrap();
    assert_eq!(
        state.datasets()[0].epoch(),
        12,
        "a 13th epoch of the small set"
    );
    assert_eq!(state.datasets()[0].worker_positions(), &[8]);
    assert_eq!(state.datasets()[1].epoch(), 0);

    // The next mixture epoch continues each dataset where the last one left it.
    let next: Vec<Sample> = mixture.epoch(1).unwrap().try_collect().await.unwrap();
    let more: HashSet<&str> = next
        .iter()
        .filter(|s| s.dataset == 1)
        .map(|s| s.key.as_str())
        .collect();
    assert!(
        more.iter().all(|k| !large.contains(k)),
        "epoch 1 reads new samples of the large set"
    );
}

#[tokio::test]
async fn every_rank_gets_the_same_number_of_samples() {
    let sets = Sets::new("ranks", &[37, 24]).await;
    for world in 1..=4u32 {
        for remainder in [Remainder::Pad, Remainder::Drop] {
            let mut lens = Vec::new();
            for rank in 0..world {
                let part = Partition::new(rank, world).with_remainder(remainder);
                let each = move |b: LoaderBuilder| b.with_partition(part);
                let mixture = sets.mixture(&[0.6, 0.4], None, each).await;
                let n = mixture.epoch(1).unwrap().count().await;
                assert_eq!(n as u64, mixture.worker_samples_per_epoch());
                lens.push(n);
            }
            let want = match remainder {
                Remainder::Pad => 61usize.div_ceil(world as usize),
                _ => 61 / world as usize,
            };
            assert_eq!(
                lens,
                vec![want; world as usize],
                "{world} ranks, {remainder:?}"
            );
        }
    }
}

#[tokio::test]
async fn workers_read_disjoint_parts_of_each_dataset_epoch() {
    let sets = Sets::new("workers", &[20, 500]).await;
    let mut parts = Vec::new();
    for worker in 0..2 {
        let each = move |b: LoaderBuilder| b.with_order(Order::shuffled(6)).with_worker(worker, 2);
        let mixture = sets.mixture(&[0.5, 0.5], Some(80), each).await;
        let samples: Vec<Sample> = mixture.epoch(0).unwrap().try_collect().await.unwrap();
        assert_eq!(samples.len(), 40);
        parts.push(samples);
    }
    let of = |samples: &[Sample], dataset: u32| -> Vec<String> {
        samples
            .iter()
            .filter(|s| s.dataset == dataset)
            .map(|s| s.key.clone())
            .collect()
    };
    // The small set: each worker reads its half, epoch after epoch.
    let (a, b) = (of(&parts[0], 0), of(&parts[1], 0));
    let first: HashSet<&String> = a[..10].iter().chain(&b[..10]).collect();
    assert_eq!(
        first.len(),
        20,
        "one epoch of the small set over both workers"
    );
    let (a, b) = (of(&parts[0], 1), of(&parts[1], 1));
    let large: HashSet<&String> = a.iter().chain(&b).collect();
    assert_eq!(
        large.len(),
        a.len() + b.len(),
        "the large set: nothing read twice"
    );
}

#[tokio::test]
async fn the_seed_decides_the_mixture() {
    let sets = Sets::new("seed", &[40, 30]).await;
    let read = |seed: u64| {
        let sets = &sets;
        async move {
            let mixture = sets.mixture(&[0.5, 0.5], Some(150), seeded(seed)).await;
            let samples: Vec<Sample> = mixture.epoch(1).unwrap().try_collect().await.unwrap();
            names(&samples)
        }
    };
    let a = read(1).await;
    assert_eq!(a, read(1).await);
    assert_ne!(a, read(2).await);
}

#[tokio::test]
async fn resume_mid_epoch_repeats_and_skips_nothing() {
    let sets = Sets::new("resume", &[7, 300]).await;
    let open = || sets.mixture(&[0.5, 0.5], Some(120), seeded(4));
    let whole: Vec<Sample> = open().await.epoch(2).unwrap().try_collect().await.unwrap();
    for cut in [0, 1, 13, 64, 119, 120] {
        let mut stream = open().await.epoch(2).unwrap();
        let tracker = stream.tracker();
        let mut before = Vec::new();
        for _ in 0..cut {
            before.push(stream.try_next().await.unwrap().unwrap());
        }
        let state = stream.state().unwrap();
        assert_eq!(
            tracker.state(cut).unwrap(),
            state,
            "the tracker agrees at {cut}"
        );
        let saved = serde_json::to_string(&state).unwrap();
        drop(stream);
        let state: MixState = serde_json::from_str(&saved).unwrap();
        let after: Vec<Sample> = open()
            .await
            .resume(&state)
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let joined = [names(&before), names(&after)].concat();
        assert_eq!(joined, names(&whole), "cut at {cut}");
    }
}

#[tokio::test]
async fn bad_mixtures_are_refused() {
    let sets = Sets::new("bad", &[5, 5]).await;
    let err = |weights: &'static [f64]| {
        let configs = sets.configs(|b| b);
        async move {
            Mixture::open(configs, weights, None)
                .await
                .unwrap_err()
                .to_string()
        }
    };
    assert!(err(&[1.0]).await.contains("2 datasets but 1 weights"));
    assert!(err(&[1.0, -1.0]).await.contains("weights[1] is -1"));
    assert!(err(&[0.0, 0.0]).await.contains("add up to 0"));
    let mut configs = sets.configs(|b| b);
    configs[1] = LoaderConfig::for_store(sets.stores[1].clone())
        .with_order(Order::shuffled(9))
        .build()
        .unwrap();
    let e = Mixture::open(configs, &[1.0, 1.0], None).await.unwrap_err();
    assert!(e.to_string().contains("same rank"), "{e}");
}
