//! Resuming a loader mid-epoch: with strict delivery no sample is replayed or skipped, for every
//! source, also when the state goes through JSON and when a job of another size resumes it;
//! with completion delivery none is skipped.
#![allow(clippy::unwrap_used)]

mod loader_support;

use bucketload::loader::{Delivery, Format, Loader, LoaderBuilder};
use bucketload::source::{Order, Partition, Remainder, SourceState};
use futures::{StreamExt, TryStreamExt};
use loader_support::{TestData, keys};

/// Reads `first` samples of epoch 3, saves the state, resumes in a new loader and reads the rest.
async fn resume(
    data: &TestData,
    config: impl Fn() -> LoaderBuilder,
    first: usize,
) -> (Vec<String>, Vec<String>) {
    let loader = Loader::open(config().build().unwrap()).await.unwrap();
    let mut stream = loader.epoch(3).unwrap();
    let mut before = Vec::new();
    for _ in 0..first {
        let sample = stream.next().await.unwrap().unwrap();
        data.check(&sample);
        before.push(sample);
    }
    let saved = serde_json::to_string(&stream.state().unwrap()).unwrap();
    drop(stream);
    let state: SourceState = serde_json::from_str(&saved).unwrap();
    let again = Loader::open(config().build().unwrap()).await.unwrap();
    let resumed = again.resume(&state).unwrap();
    assert_eq!(resumed.epoch(), 3);
    let after: Vec<_> = resumed.try_collect().await.unwrap();
    after.iter().for_each(|s| data.check(s));
    (keys(&before), keys(&after))
}

fn all_keys(data: &TestData) -> Vec<String> {
    let mut expected: Vec<String> = data.objects.keys().cloned().collect();
    expected.sort();
    expected
}

async fn exact(data: &TestData, prefix: &str, format: Format) {
    let config = || {
        data.loader(prefix)
            .with_format(format)
            .with_delivery(Delivery::Strict)
            .with_order(Order::shuffled(11).with_shuffle_buffer(8))
    };
    let (before, after) = resume(data, config, 17).await;
    assert_eq!(before.len(), 17);
    let mut all = [before, after].concat();
    all.sort();
    assert_eq!(
        all,
        all_keys(data),
        "{format:?}: nothing replayed, nothing skipped"
    );
}

/// Three ranks read `first` samples each, two ranks resume from rank 0's state: every sample
/// once (no padding).
async fn elastic(data: &TestData, prefix: &str, format: Format, first: usize) {
    let config = |rank, world| {
        let partition = Partition::new(rank, world).with_remainder(Remainder::Exact);
        let builder = data.loader(prefix).with_format(format);
        let builder = builder
            .with_partition(partition)
            .with_delivery(Delivery::Strict);
        builder.with_order(Order::shuffled(5).with_shuffle_buffer(8))
    };
    let mut seen = Vec::new();
    let mut saved = None;
    for rank in 0..3 {
        let loader = Loader::open(config(rank, 3).build().unwrap())
            .await
            .unwrap();
        let mut stream = loader.epoch(1).unwrap();
        for _ in 0..first {
            seen.push(stream.next().await.unwrap().unwrap());
        }
        if rank == 0 {
            saved = Some(serde_json::to_string(&stream.state().unwrap()).unwrap());
        }
    }
    let state: SourceState = serde_json::from_str(&saved.unwrap()).unwrap();
    for rank in 0..2 {
        let loader = Loader::open(config(rank, 2).build().unwrap())
            .await
            .unwrap();
        let rest: Vec<_> = loader.resume(&state).unwrap().try_collect().await.unwrap();
        seen.extend(rest);
    }
    seen.iter().for_each(|s| data.check(s));
    let mut all = keys(&seen);
    all.sort();
    assert_eq!(all, all_keys(data), "{format:?}: every sample once");
}

#[tokio::test]
async fn another_world_size_resumes_every_format_exactly() {
    let files = TestData::files(41, true).await;
    elastic(&files, "src", Format::Files, 5).await;
    let shards = TestData::shards(41, 6).await;
    elastic(&shards, "shards", Format::Shards, 9).await;
    elastic(&shards, "shards", Format::Indexed, 9).await;
}

#[tokio::test]
async fn files_resume_exactly() {
    let data = TestData::files(41, true).await;
    exact(&data, "src", Format::Files).await;
}

#[tokio::test]
async fn streamed_shards_resume_exactly() {
    let data = TestData::shards(41, 6).await;
    exact(&data, "shards", Format::Shards).await;
}

#[tokio::test]
async fn indexed_shards_resume_exactly() {
    let data = TestData::shards(41, 6).await;
    exact(&data, "shards", Format::Indexed).await;
}

#[tokio::test]
async fn completion_order_never_skips_on_resume() {
    let data = TestData::files(60, true).await;
    let config = || data.loader("src").with_concurrency(8);
    let (before, after) = resume(&data, config, 25).await;
    let read = before.len() + after.len();
    let mut all = [before, after].concat();
    all.sort();
    all.dedup();
    assert_eq!(all, all_keys(&data), "no sample skipped");
    assert!(
        read - 60 <= 8,
        "{} replayed: more than the requests in flight",
        read - 60
    );
}
