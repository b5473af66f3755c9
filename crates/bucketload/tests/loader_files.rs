//! The files source against the embedded S3 server: every object once per epoch with its bytes
//! and folder label, from a manifest or a listing; ranks disjoint and equal; a new order every
//! epoch; strict delivery in the source's order.
#![allow(clippy::unwrap_used)]

mod loader_support;

use std::collections::HashSet;

use bucketload::loader::{Delivery, Format, Loader};
use bucketload::source::{Order, Partition, Remainder};
use loader_support::{TestData, drain, keys};

async fn every_object_once(manifest: bool) {
    let data = TestData::files(57, manifest).await;
    let config = data.loader("src").with_concurrency(16).build().unwrap();
    let loader = Loader::open(config).await.unwrap();
    assert_eq!(loader.format(), Format::Files);
    let samples = drain(&loader, 0).await;
    assert_eq!(samples.len(), 57);
    for sample in &samples {
        data.check(sample);
    }
    let mut expected: Vec<String> = data.objects.keys().cloned().collect();
    expected.sort();
    assert_eq!(keys(&samples), expected, "every object exactly once");
    let stats = loader.stats();
    assert_eq!(stats.samples, 57);
    assert_eq!(stats.requests.get, 57);
    assert!(stats.in_flight.max <= 16, "{:?}", stats.in_flight);
}

#[tokio::test]
async fn every_object_once_from_the_manifest() {
    every_object_once(true).await;
}

#[tokio::test]
async fn every_object_once_from_a_listing() {
    every_object_once(false).await;
}

#[tokio::test]
async fn the_order_changes_every_epoch_and_strict_delivery_keeps_it() {
    let data = TestData::files(40, true).await;
    let config = data.loader("src").with_delivery(Delivery::Strict);
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    let first = drain(&loader, 0).await;
    let again = drain(&loader, 0).await;
    let second = drain(&loader, 1).await;
    let order =
        |s: &[bucketload::loader::Sample]| s.iter().map(|s| s.key.clone()).collect::<Vec<_>>();
    assert_eq!(order(&first), order(&again), "same epoch, same order");
    assert_ne!(order(&first), order(&second), "a new shuffle each epoch");
    let positions: Vec<u64> = first.iter().map(|s| s.position).collect();
    assert_eq!(
        positions,
        (0..40).collect::<Vec<_>>(),
        "strict delivery is in order"
    );
}

#[tokio::test]
async fn ranks_are_disjoint_and_equal() {
    let data = TestData::files(50, true).await;
    for (remainder, per_rank) in [(Remainder::Drop, 16), (Remainder::Pad, 17)] {
        let mut seen = Vec::new();
        for rank in 0..3 {
            let partition = Partition::new(rank, 3).with_remainder(remainder);
            let config = data.loader("src").with_partition(partition);
            let loader = Loader::open(config.build().unwrap()).await.unwrap();
            let samples = drain(&loader, 2).await;
            assert_eq!(samples.len(), per_rank, "rank {rank} with {remainder:?}");
            seen.extend(keys(&samples));
        }
        let distinct: HashSet<&String> = seen.iter().collect();
        match remainder {
            Remainder::Drop => assert_eq!(distinct.len(), 48, "disjoint ranks"),
            _ => assert_eq!(distinct.len(), 50, "padding covers every object"),
        }
    }
}

#[tokio::test]
async fn workers_split_a_rank() {
    let data = TestData::files(31, true).await;
    let mut seen = Vec::new();
    for worker in 0..3 {
        let config = data.loader("src").with_worker(worker, 3);
        let loader = Loader::open(config.build().unwrap()).await.unwrap();
        seen.extend(keys(&drain(&loader, 0).await));
    }
    seen.sort();
    let mut expected: Vec<String> = data.objects.keys().cloned().collect();
    expected.sort();
    assert_eq!(seen, expected, "workers are disjoint and cover the rank");
}

#[tokio::test]
async fn epochs_chains_every_epoch() {
    let data = TestData::files(9, true).await;
    let config = data.loader("src").with_epochs(3).build().unwrap();
    let loader = Loader::open(config).await.unwrap();
    let all: Vec<_> = futures::TryStreamExt::try_collect(loader.epochs())
        .await
        .unwrap();
    assert_eq!(all.len(), 27);
    assert_eq!(
        keys(&all[..9]),
        keys(&all[18..]),
        "each epoch reads every object"
    );
}

#[tokio::test]
async fn a_sequential_order_is_the_key_order() {
    let data = TestData::files(12, true).await;
    let config = data
        .loader("src")
        .with_order(Order::sequential())
        .with_delivery(Delivery::Strict);
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    let got: Vec<String> = drain(&loader, 0).await.into_iter().map(|s| s.key).collect();
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(got, sorted);
}

#[tokio::test]
async fn throttled_and_failed_gets_are_retried() {
    use bucketload_server::FaultKind;
    let data = TestData::files(30, true).await;
    let config = data.loader("src").build().unwrap();
    let loader = Loader::open(config).await.unwrap();
    let before = data.gets();
    let faults = data.server.faults();
    faults.fail_next("GetObject", 2, FaultKind::Status(503));
    faults.fail_next("GetObject", 2, FaultKind::Status(500));
    let samples = drain(&loader, 0).await;
    samples.iter().for_each(|s| data.check(s));
    assert_eq!(samples.len(), 30);
    assert_eq!(
        data.gets() - before,
        30 + 4,
        "every object, and four retries"
    );
}

#[tokio::test]
async fn a_stale_manifest_is_named_checked_or_ignored() {
    use bucketload::loader::ManifestUse;
    use bucketload::{ErrorKind, Hint};
    use bucketload_store::object_store::{ObjectStoreExt, PutPayload};

    let data = TestData::files(12, true).await;
    let src = data.store("src");
    let objects = src.object_store();
    let key = |k: &str| bucketload_store::key_path(k);
    let refresh = Hint::RefreshManifest {
        command: format!("bucketload manifest s3://{}/src", data.bucket),
    };
    objects.delete(&key("class_2/0002.jpg")).await.unwrap();
    let trusted = Loader::open(data.loader("src").build().unwrap()).await;
    let epoch: Result<Vec<_>, _> =
        futures::TryStreamExt::try_collect(trusted.unwrap().epoch(0).unwrap()).await;
    let err = epoch.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let gone = format!("s3://{}/src/class_2/0002.jpg", data.bucket);
    assert!(
        err.to_string()
            .contains(&format!("is stale: it lists {gone}, which is not found")),
        "{err}"
    );
    assert_eq!(err.hint(), Some(refresh.clone()));

    let added = PutPayload::from_static(b"added later");
    objects.put(&key("class_0/9999.jpg"), added).await.unwrap();
    let resized = PutPayload::from_static(b"another size");
    objects
        .put(&key("class_1/0001.jpg"), resized)
        .await
        .unwrap();
    let checked = data.loader("src").with_manifest(ManifestUse::Check);
    let err = Loader::open(checked.build().unwrap()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    for said in [
        "1 object added since it was written (class_0/9999.jpg)",
        "1 object listed but gone (class_2/0002.jpg)",
        "1 object of another size than it records (class_1/0001.jpg)",
    ] {
        assert!(err.to_string().contains(said), "{said:?} not in {err}");
    }
    assert_eq!(err.hint(), Some(refresh));

    let ignored = data.loader("src").with_manifest(ManifestUse::Ignore);
    let loader = Loader::open(ignored.build().unwrap()).await.unwrap();
    let samples = drain(&loader, 0).await;
    assert_eq!(samples.len(), 12, "one added, one gone");
    assert!(samples.iter().any(|s| s.key == "class_0/9999.jpg"));
}
