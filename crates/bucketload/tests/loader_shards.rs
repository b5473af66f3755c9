//! The shards (streamed) and indexed sources against the embedded S3 server: every sample once
//! per epoch with its bytes and `.cls` label, ranks disjoint and equal, close ranges coalesced.
#![allow(clippy::unwrap_used)]

mod loader_support;

use std::collections::HashSet;

use bucketload::io::PrefetchConfig;
use bucketload::loader::{Delivery, Format, Loader};
use bucketload::source::{Order, Partition, Remainder};
use loader_support::{TestData, drain, keys, object_bytes};

fn all_keys(data: &TestData) -> Vec<String> {
    let mut expected: Vec<String> = data.objects.keys().cloned().collect();
    expected.sort();
    expected
}

#[tokio::test]
async fn auto_streams_shards_and_reads_every_sample_once() {
    let data = TestData::shards(45, 6).await;
    let small = PrefetchConfig::default().with_first_request(4096);
    let config = data
        .loader("shards")
        .with_prefetch(small)
        .with_shards_in_flight(3);
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    assert_eq!(loader.format(), Format::Shards);
    for epoch in 0..2 {
        let samples = drain(&loader, epoch).await;
        samples.iter().for_each(|s| data.check(s));
        assert_eq!(keys(&samples), all_keys(&data), "epoch {epoch}");
    }
    let stats = loader.stats();
    assert!(
        stats.prefetch.requests >= 16,
        "8 shards, 2 epochs: {stats:?}"
    );
    assert!(stats.max_reorder_held <= Order::DEFAULT_SHUFFLE_BUFFER + 1);
}

#[tokio::test]
async fn a_small_shuffle_buffer_bounds_the_reorder() {
    let data = TestData::shards(40, 5).await;
    let order = Order::shuffled(3).with_shuffle_buffer(4);
    let config = data.loader("shards").with_order(order);
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    let samples = drain(&loader, 0).await;
    assert_eq!(keys(&samples), all_keys(&data));
    assert!(loader.stats().max_reorder_held <= 5, "{:?}", loader.stats());
}

#[tokio::test]
async fn indexed_reads_every_sample_once_with_coalesced_ranges() {
    let data = TestData::shards(45, 6).await;
    for delivery in [Delivery::Completion, Delivery::Strict] {
        let config = data
            .loader("shards")
            .with_format(Format::Indexed)
            .with_order(Order::sequential())
            .with_delivery(delivery);
        let loader = Loader::open(config.build().unwrap()).await.unwrap();
        assert_eq!(loader.format(), Format::Indexed);
        let samples = drain(&loader, 0).await;
        samples.iter().for_each(|s| data.check(s));
        assert_eq!(keys(&samples), all_keys(&data));
        let stats = loader.stats();
        // In shard order, each shard's samples are adjacent: one GET per shard.
        assert_eq!(stats.requests.ranged_get, 8, "{delivery:?}: {stats:?}");
        assert_eq!(stats.requests.samples_coalesced, 45 - 8);
        if delivery == Delivery::Strict {
            let positions: Vec<u64> = samples.iter().map(|s| s.position).collect();
            assert_eq!(positions, (0..45).collect::<Vec<_>>());
        }
    }
}

#[tokio::test]
async fn indexed_without_coalescing_sends_one_get_per_sample() {
    let data = TestData::shards(20, 6).await;
    let config = data
        .loader("shards")
        .with_format(Format::Indexed)
        .with_coalescing(1, 0);
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    let samples = drain(&loader, 0).await;
    samples.iter().for_each(|s| data.check(s));
    assert_eq!(loader.stats().requests.ranged_get, 20);
}

async fn ranks(format: Format) {
    let data = TestData::shards(50, 7).await;
    for (remainder, per_rank) in [(Remainder::Drop, 16), (Remainder::Pad, 17)] {
        let mut seen = Vec::new();
        for rank in 0..3 {
            let partition = Partition::new(rank, 3).with_remainder(remainder);
            let config = data
                .loader("shards")
                .with_format(format)
                .with_partition(partition);
            let loader = Loader::open(config.build().unwrap()).await.unwrap();
            let samples = drain(&loader, 1).await;
            samples.iter().for_each(|s| data.check(s));
            assert_eq!(
                samples.len(),
                per_rank,
                "{format:?} rank {rank} {remainder:?}"
            );
            seen.extend(keys(&samples));
        }
        let distinct: HashSet<&String> = seen.iter().collect();
        match remainder {
            Remainder::Drop => assert_eq!(distinct.len(), 48, "{format:?}: disjoint"),
            _ => assert_eq!(distinct.len(), 50, "{format:?}: padding covers all"),
        }
    }
}

#[tokio::test]
async fn shard_ranks_are_disjoint_and_equal() {
    ranks(Format::Shards).await;
}

#[tokio::test]
async fn indexed_ranks_are_disjoint_and_equal() {
    ranks(Format::Indexed).await;
}

#[tokio::test]
async fn a_files_dataset_cannot_be_read_as_shards() {
    let data = TestData::files(3, true).await;
    let config = data.loader("src").with_format(Format::Shards);
    let err = Loader::open(config.build().unwrap()).await.unwrap_err();
    assert!(
        err.to_string().contains("set `format` to \"auto\""),
        "{err}"
    );
}

#[tokio::test]
async fn a_shard_changed_after_indexing_is_an_error_naming_it() {
    use bucketload_store::object_store::{ObjectStoreExt, PutPayload, path::Path};
    let data = TestData::shards(12, 6).await;
    let store = data.store("shards");
    let key = Path::from("shard-000000.tar");
    let mut bytes = object_bytes(&store, &key).await;
    // Flip every data byte after the first header: the index's checksums no longer match.
    for b in &mut bytes[512..1024] {
        *b ^= 0x55;
    }
    store
        .object_store()
        .put(&key, PutPayload::from(bytes))
        .await
        .unwrap();
    let config = data
        .loader("shards")
        .with_format(Format::Indexed)
        .with_order(Order::sequential());
    let loader = Loader::open(config.build().unwrap()).await.unwrap();
    let err = futures::TryStreamExt::try_collect::<Vec<_>>(loader.epoch(0).unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("shard-000000.tar"), "{err}");
    assert!(err.contains("does not match its index checksum"), "{err}");
}

/// Tar shards without index or manifest, as GNU tar or Python's tarfile leave them, are
/// planned by reading them once: every sample once in every format, ranks equal.
#[tokio::test]
async fn plain_tars_without_index_or_manifest_are_read() {
    use bucketload_store::object_store::{ObjectStore, ObjectStoreExt};
    use futures::TryStreamExt;

    let data = TestData::shards(45, 6).await;
    let store = data.store("shards").object_store();
    let listed: Vec<_> = store.list(None).try_collect().await.unwrap();
    let extra = listed
        .iter()
        .filter(|m| !m.location.as_ref().ends_with(".tar"));
    for meta in extra {
        store.delete(&meta.location).await.unwrap();
    }
    for format in [Format::Auto, Format::Shards, Format::Indexed] {
        let config = data.loader("shards").with_format(format);
        let loader = Loader::open(config.build().unwrap()).await.unwrap();
        let samples = drain(&loader, 0).await;
        samples.iter().for_each(|s| data.check(s));
        assert_eq!(keys(&samples), all_keys(&data), "{format:?}");
    }
    let mut seen = HashSet::new();
    for rank in 0..3 {
        let partition = Partition::new(rank, 3);
        let config = data.loader("shards").with_partition(partition);
        let loader = Loader::open(config.build().unwrap()).await.unwrap();
        let samples = drain(&loader, 0).await;
        assert_eq!(samples.len(), 15, "rank {rank}");
        seen.extend(keys(&samples));
    }
    assert_eq!(seen.len(), 45);
}
