//! Shard indexes on demand against the embedded S3 server: an indexed loader with a manifest
//! fetches the index of a shard only when one of its samples comes up (never when it opens,
//! counts or saves its state), holds them in a bounded cache, and an index that disagrees met
//! mid-epoch is an error naming it.
#![allow(clippy::unwrap_used)]

mod loader_support;

use std::collections::BTreeSet;

use bucketload::loader::{Delivery, Format, Loader, Sample};
use bucketload::source::{Order, Partition, SampleRef};
use bucketload_format::ShardIndex;
use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path};
use futures::{StreamExt, TryStreamExt};
use loader_support::{TestData, drain, keys};

fn shard_of(sample: &Sample) -> u64 {
    match sample.source {
        SampleRef::Shard { shard, .. } => shard,
        SampleRef::File { .. } => panic!("a file sample from shards"),
    }
}

#[tokio::test]
async fn indexes_are_fetched_only_for_the_shards_a_rank_reads() {
    // 40 shards of 5 samples; rank 0 of 8 reads 25 samples of a shuffled order.
    let data = TestData::shards(200, 5).await;
    let before = data.gets();
    let config = data
        .loader("shards")
        .with_format(Format::Indexed)
        .with_partition(Partition::new(0, 8))
        .with_order(Order::shuffled(11));
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    assert_eq!(loader.samples_per_epoch().unwrap(), 25);
    let stream = loader.epoch(0).unwrap();
    let state = stream.state().unwrap();
    let resumed = loader.resume(&state).unwrap();
    drop((stream, resumed));
    assert_eq!(data.gets() - before, 1, "opening reads the manifest only");
    assert_eq!(loader.stats().requests.index_get, 0);

    let samples = drain(&loader, 0).await;
    samples.iter().for_each(|s| data.check(s));
    assert_eq!(samples.len(), 25);
    let touched: BTreeSet<u64> = samples.iter().map(shard_of).collect();
    assert!(touched.len() < 40, "a rank's share touches some shards");
    let stats = loader.stats();
    assert_eq!(stats.requests.index_get, touched.len() as u64, "{stats:?}");
    // The server agrees: its GETs are the manifest, the indexes and the samples' ranges.
    let indexes = data.gets() - before - 1 - stats.requests.ranged_get;
    assert_eq!(indexes, touched.len() as u64);
}

#[tokio::test]
async fn a_tiny_index_cache_still_reads_every_sample() {
    let data = TestData::shards(45, 6).await;
    let mut expected: Vec<String> = data.objects.keys().cloned().collect();
    expected.sort();
    let config = data
        .loader("shards")
        .with_format(Format::Indexed)
        .with_order(Order::shuffled(5))
        .with_coalescing(4, 0)
        .with_index_cache(1);
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    for epoch in 0..2 {
        let samples = drain(&loader, epoch).await;
        samples.iter().for_each(|s| data.check(s));
        assert_eq!(keys(&samples), expected, "epoch {epoch}");
    }
    let fetched = loader.stats().requests.index_get;
    assert!(fetched > 8, "indexes evicted and fetched again: {fetched}");

    // With the default bound, each of the 8 indexes is fetched once over both epochs.
    let config = data
        .loader("shards")
        .with_format(Format::Indexed)
        .with_order(Order::shuffled(5))
        .with_coalescing(4, 0);
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    for epoch in 0..2 {
        assert_eq!(keys(&drain(&loader, epoch).await), expected);
    }
    assert_eq!(loader.stats().requests.index_get, 8);
}

/// Replaces the index of shard 3 (of 6, read in order) with `bytes`.
async fn put_index(data: &TestData, bytes: Vec<u8>) {
    let store = data.store("shards");
    let path = Path::from("shard-000003.tar.idx");
    store
        .object_store()
        .put(&path, PutPayload::from(bytes))
        .await
        .unwrap();
}

#[tokio::test]
async fn an_index_that_disagrees_met_mid_epoch_is_an_error_naming_it() {
    let data = TestData::shards(36, 6).await;
    let store = data.store("shards");
    let path = Path::from("shard-000003.tar.idx");
    let good = store.object_store().get(&path).await.unwrap();
    let good = good.bytes().await.unwrap();
    let mut short = ShardIndex::parse("idx", &good).unwrap();
    short.samples.pop();
    let cases = [
        (
            "one sample fewer than the manifest",
            short.to_bytes("idx").unwrap(),
            "rebuild the manifest",
        ),
        ("garbage", b"not an index at all".to_vec(), ""),
    ];
    for (name, bytes, says) in cases {
        put_index(&data, bytes).await;
        let config = data
            .loader("shards")
            .with_format(Format::Indexed)
            .with_order(Order::sequential())
            .with_delivery(Delivery::Strict)
            .with_coalescing(1, 0)
            .with_concurrency(2);
        let loader = Loader::open(config.build().unwrap()).await.unwrap();
        let mut stream = loader.epoch(0).unwrap();
        let mut delivered = 0;
        let err = loop {
            match stream.next().await {
                Some(Ok(sample)) => {
                    data.check(&sample);
                    delivered += 1;
                }
                Some(Err(e)) => break e.to_string(),
                None => panic!("{name}: the epoch ended without an error"),
            }
        };
        assert_eq!(delivered, 18, "{name}: shards 0 to 2 come first");
        assert!(err.contains("shard-000003.tar.idx"), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(!err.contains("panic"), "{name}: {err}");
    }
    put_index(&data, good.to_vec()).await;
    let config = data.loader("shards").with_format(Format::Indexed);
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    let samples: Vec<Sample> = loader.epoch(0).unwrap().try_collect().await.unwrap();
    assert_eq!(samples.len(), 36);
}
