//! The prefetching range reader and the shard sample stream against the embedded S3 server:
//! exact bytes for many ranges and window settings, the request sequence of a growing window
//! (counted by the server), back-pressure, recovery from bodies cut mid-way, and tar shards
//! streamed whole, by span and when corrupt.

#![allow(clippy::unwrap_used)] // tests fail loudly on any error

use std::sync::Arc;
use std::time::Duration;

use bucketload::base::Location;
use bucketload::io::{PrefetchConfig, PrefetchCounters, read_range};
use bucketload::loader::{ShardSample, ShardSpan, shard_samples};
use bucketload_format::{ShardIndex, ShardIndexBuilder, TarWriter};
use bucketload_server::FaultKind;
use bucketload_store::object_store::path::Path;
use bucketload_store::object_store::{ObjectStoreExt, PutPayload};
use bucketload_store::{Store, StoreConfig};
use bucketload_test_support::EmbeddedServer;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

const MIB: u64 = 1 << 20;

/// A server, a fresh bucket on it and the bucket as a [`Location`]; `configure` adjusts the
/// client (e.g. turns object_store's own retries off).
async fn setup(configure: impl FnOnce(StoreConfig) -> StoreConfig) -> (EmbeddedServer, Location) {
    let server = EmbeddedServer::start().await;
    let bucket = server.bucket().await;
    let config = configure(server.store_config());
    let store = Store::open(&format!("s3://{bucket}"), &config).unwrap();
    (server, Location::from_store(&store))
}

async fn put(location: &Location, key: &str, data: Bytes) -> Path {
    let path = Path::from(key);
    let payload = PutPayload::from_bytes(data);
    location.store().put(&path, payload).await.unwrap();
    path
}

/// Bytes no two offsets of which repeat within a few KiB, so a shifted chunk cannot pass.
fn pattern(len: usize) -> Bytes {
    bucketload_test_support::pattern(len, 0).into()
}

async fn read_all(
    location: &Location,
    key: &Path,
    range: std::ops::Range<u64>,
    config: PrefetchConfig,
    counters: &Arc<PrefetchCounters>,
) -> bucketload::Result<Vec<u8>> {
    let stream = read_range(
        location.clone(),
        key.clone(),
        range,
        config,
        Arc::clone(counters),
    );
    let chunks: Vec<Bytes> = stream.try_collect().await?;
    Ok(chunks.concat())
}

fn small(first: u64, part: u64, window: u64) -> PrefetchConfig {
    PrefetchConfig::default()
        .with_first_request(first)
        .with_part_size(part)
        .with_max_window(window)
}

#[tokio::test]
async fn read_range_returns_the_exact_bytes_for_many_ranges_and_windows() {
    let (_server, location) = setup(|c| c).await;
    let len = 3 * MIB as usize + 13;
    let data = pattern(len);
    let key = put(&location, "obj.bin", data.clone()).await;
    let len = len as u64;
    let configs = [
        small(1, 7_777, 100_000),
        small(1_000, 4_096, 16_384),
        small(MIB, MIB, 2 * MIB),
        PrefetchConfig::default(),
    ];
    let ranges = [
        0..len,
        0..0,
        1..2,
        5..len - 3,
        len - 1..len,
        100_000..2_000_001,
    ];
    for config in configs {
        for range in ranges.clone() {
            let counters = Arc::new(PrefetchCounters::default());
            let got = read_all(&location, &key, range.clone(), config, &counters).await;
            let want = &data[range.start as usize..range.end as usize];
            assert!(got.unwrap() == want, "{range:?} with {config:?}");
            let s = counters.snapshot();
            assert_eq!(s.bytes, range.end - range.start);
            assert_eq!((s.retries, s.in_flight, s.window, s.ahead), (0, 0, 0, 0));
        }
    }
}

#[tokio::test]
async fn the_window_grows_as_the_consumer_drains_requests() {
    let (server, location) = setup(|c| c).await;
    let key = put(&location, "big.bin", pattern(64 * MIB as usize)).await;
    let before = server.counters().get("GetObject");
    let counters = Arc::new(PrefetchCounters::default());
    let config = PrefetchConfig::default();
    let got = read_all(&location, &key, 0..64 * MIB, config, &counters).await;
    assert_eq!(got.unwrap().len() as u64, 64 * MIB);
    // 1, 2, 4, 8, 8, 8, 8, 8, 8, 8 and 1 MiB: the window doubles to 64 MiB, parts stay 8 MiB.
    assert_eq!(server.counters().get("GetObject") - before, 11);
    assert_eq!(counters.snapshot().requests, 11);

    // A fixed window of one part: one GET per 4 MiB.
    let before = server.counters().get("GetObject");
    let flat = small(4 * MIB, 4 * MIB, 4 * MIB);
    read_all(&location, &key, 0..64 * MIB, flat, &counters)
        .await
        .unwrap();
    assert_eq!(server.counters().get("GetObject") - before, 16);
}

/// Waits until no request of `counters` runs (the server answers quickly on loopback).
async fn settle(counters: &PrefetchCounters) {
    for _ in 0..500 {
        if counters.snapshot().in_flight == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "requests still in flight after 5 s: {:?}",
        counters.snapshot()
    );
}

#[tokio::test]
async fn a_consumer_that_stops_polling_stops_new_requests() {
    let (server, location) = setup(|c| c).await;
    let key = put(&location, "big.bin", pattern(32 * MIB as usize)).await;
    let before = server.counters().get("GetObject");
    let counters = Arc::new(PrefetchCounters::default());
    let config = PrefetchConfig::default();
    let mut stream = read_range(location, key, 0..32 * MIB, config, Arc::clone(&counters));
    // Drain the first 1 MiB request and take one chunk of the second (2 MiB).
    let mut got = 0;
    while got <= MIB {
        got += stream.next().await.unwrap().unwrap().len() as u64;
    }
    settle(&counters).await;
    let s = counters.snapshot();
    assert_eq!(server.counters().get("GetObject") - before, 2, "{s:?}");
    assert_eq!(s.requests, 2);
    assert_eq!(s.window, 2 * MIB);
    assert_eq!(s.ahead, 3 * MIB - got);
    drop(stream);
    assert_eq!(counters.snapshot().ahead, 0);
}

#[tokio::test]
async fn resets_and_truncations_are_requested_again_from_the_first_missing_byte() {
    // object_store's own body retries are off, so every cut reaches the prefetcher.
    let (server, location) = setup(|c| c.with_max_retries(0)).await;
    let data = pattern(3 * MIB as usize);
    let key = put(&location, "obj.bin", data.clone()).await;
    let faults = server.faults();
    faults.fail_next("GetObject", 2, FaultKind::ResetMidBody);
    faults.fail_next("GetObject", 1, FaultKind::Truncate);
    let before = server.counters().get("GetObject");
    let counters = Arc::new(PrefetchCounters::default());
    let config = small(MIB, MIB, 2 * MIB);
    let got = read_all(&location, &key, 0..3 * MIB, config, &counters).await;
    assert!(got.unwrap() == data, "bytes differ after recovery");
    let s = counters.snapshot();
    assert_eq!(s.retries, 3);
    assert_eq!(s.requests, 3 + 3, "three parts, three re-requests");
    assert_eq!(server.counters().get("GetObject") - before, 6);
    assert_eq!(
        s.bytes,
        3 * MIB,
        "bytes before a cut are not requested again"
    );
}

#[tokio::test]
async fn cuts_are_also_recovered_with_the_store_retrying_bodies() {
    let (server, location) = setup(|c| c).await;
    let data = pattern(2 * MIB as usize + 5);
    let key = put(&location, "obj.bin", data.clone()).await;
    server
        .faults()
        .fail_next("GetObject", 2, FaultKind::Truncate);
    let counters = Arc::new(PrefetchCounters::default());
    let got = read_all(
        &location,
        &key,
        7..data.len() as u64,
        small(MIB, MIB, 2 * MIB),
        &counters,
    )
    .await;
    assert!(got.unwrap() == data[7..], "bytes differ after recovery");
}

#[tokio::test]
async fn a_body_that_keeps_breaking_fails_naming_the_object_and_range() {
    let (server, location) = setup(|c| c.with_max_retries(0)).await;
    let key = put(&location, "obj.bin", pattern(MIB as usize)).await;
    server
        .faults()
        .fail_next("GetObject", 100, FaultKind::Truncate);
    let counters = Arc::new(PrefetchCounters::default());
    let config = small(MIB, MIB, MIB).with_max_retries(2);
    let err = read_all(&location, &key, 0..MIB, config, &counters)
        .await
        .unwrap_err();
    let msg = err.to_string();
    let uri = location.uri_of(&key);
    assert!(msg.contains(&format!("{uri} (bytes 0-1048575)")), "{msg}");
    assert!(msg.contains("after 2 re-requests"), "{msg}");
    assert_eq!(counters.snapshot().retries, 2);
    assert_eq!(counters.snapshot().requests, 3);
    server.faults().clear();
}

#[tokio::test]
async fn a_missing_object_fails_with_its_uri() {
    let (_server, location) = setup(|c| c).await;
    let key = Path::from("absent.tar");
    let counters = Arc::new(PrefetchCounters::default());
    let err = read_all(&location, &key, 0..10, PrefetchConfig::default(), &counters).await;
    let msg = err.unwrap_err().to_string();
    assert!(msg.contains(&location.uri_of(&key)), "{msg}");
    assert!(msg.contains("not found"), "{msg}");
}

#[tokio::test]
async fn a_range_past_the_end_fails_at_once_with_the_size() {
    let (server, location) = setup(|c| c).await;
    let key = put(&location, "obj.bin", pattern(10_000)).await;
    let before = server.counters().get("GetObject");
    let counters = Arc::new(PrefetchCounters::default());
    let config = small(4096, 4096, 8192);
    let err = read_all(&location, &key, 0..10_100, config, &counters)
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("has only 10000 bytes"), "{msg}");
    assert!(msg.contains(&location.uri_of(&key)), "{msg}");
    assert_eq!(err.kind(), bucketload::ErrorKind::Corrupt, "{msg}");
    assert_eq!(counters.snapshot().retries, 0);
    assert_eq!(server.counters().get("GetObject") - before, 3);
}

#[tokio::test]
async fn an_object_overwritten_while_read_fails_instead_of_mixing_versions() {
    let (_server, location) = setup(|c| c).await;
    let key = put(&location, "obj.bin", pattern(8 * MIB as usize)).await;
    let counters = Arc::new(PrefetchCounters::default());
    let config = small(MIB, MIB, 4 * MIB);
    let mut stream = read_range(location.clone(), key.clone(), 0..8 * MIB, config, counters);
    let first = stream.next().await.unwrap().unwrap();
    put(
        &location,
        "obj.bin",
        Bytes::from(vec![7u8; 8 * MIB as usize]),
    )
    .await;
    let mut got = first.len() as u64;
    let err = loop {
        match stream.next().await.unwrap() {
            Ok(chunk) => got += chunk.len() as u64,
            Err(e) => break e,
        }
    };
    assert!(
        got <= MIB,
        "only bytes of the first version arrive, got {got}"
    );
    assert!(
        err.to_string().contains("changed while being read"),
        "{err}"
    );
}

/// One sample as written: key and (extension, data) members.
type Written = (String, Vec<(String, Bytes)>);

/// A shard of `n` samples of 2 or 3 members (sizes 0 to ~40 KB, one with a long PAX name),
/// its samples and its index.
fn shard(n: usize) -> (Bytes, Vec<Written>, ShardIndex) {
    let mut out = Vec::new();
    let mut writer = TarWriter::new("test.tar");
    let mut index = ShardIndexBuilder::new();
    let mut samples = Vec::new();
    for i in 0..n {
        let key = match i {
            7 => format!("{}/{i:06}", "deep".repeat(40)),
            _ => format!("class_{:03}/{i:06}", i % 5),
        };
        let mut members = vec![
            ("jpg".to_owned(), pattern((i * 7919) % 40_000)),
            ("cls".to_owned(), Bytes::from((i % 5).to_string())),
        ];
        if i % 3 == 0 {
            members.push(("seg.png".to_owned(), pattern(i * 13)));
        }
        for (ext, data) in &members {
            let name = format!("{key}.{ext}");
            let location = writer.append(&mut out, &name, data).unwrap();
            index.add(&name, location, data);
        }
        samples.push((key, members));
    }
    let summary = writer.finish(&mut out).unwrap();
    (out.into(), samples, index.finish(&summary))
}

async fn samples(
    location: &Location,
    key: &Path,
    span: ShardSpan,
    config: PrefetchConfig,
    counters: &Arc<PrefetchCounters>,
) -> bucketload::Result<Vec<ShardSample>> {
    let stream = shard_samples(
        location.clone(),
        key.clone(),
        span,
        config,
        Arc::clone(counters),
    );
    stream.try_collect().await
}

fn check(got: &[ShardSample], want: &[Written], first: u64, shard: usize) {
    assert_eq!(got.len(), want.len());
    for (i, (sample, (key, members))) in got.iter().zip(want).enumerate() {
        assert_eq!(sample.shard, shard);
        assert_eq!(sample.index, first + i as u64);
        assert_eq!(&sample.key, key);
        assert!(&sample.members == members, "members of {key} differ");
    }
}

#[tokio::test]
async fn a_shard_streams_every_sample_with_exact_members() {
    let (_server, location) = setup(|c| c).await;
    let (bytes, written, _) = shard(300);
    let size = bytes.len() as u64;
    let key = put(&location, "shard-000.tar", bytes).await;
    for config in [
        small(1, 5_000, 20_000),
        small(65_536, MIB, 4 * MIB),
        PrefetchConfig::default(),
    ] {
        let counters = Arc::new(PrefetchCounters::default());
        let got = samples(
            &location,
            &key,
            ShardSpan::whole(4, size),
            config,
            &counters,
        )
        .await;
        check(&got.unwrap(), &written, 0, 4);
        assert_eq!(counters.snapshot().bytes, size);
    }
}

#[tokio::test]
async fn a_span_yields_exactly_its_samples_and_reads_little_past_them() {
    let (server, location) = setup(|c| c).await;
    let (bytes, written, index) = shard(300);
    let size = bytes.len() as u64;
    let key = put(&location, "shard-001.tar", bytes).await;
    let (first, count) = (37u64, 5u64);
    let (offset, _) = index.samples[first as usize].byte_range().unwrap();
    let (_, end) = index.samples[(first + count - 1) as usize]
        .byte_range()
        .unwrap();
    let want = &written[first as usize..(first + count) as usize];
    let config = small(65_536, MIB, 8 * MIB);

    let span = ShardSpan {
        shard: 1,
        size,
        first,
        count: Some(count),
        offset,
    };
    let counters = Arc::new(PrefetchCounters::default());
    let got = samples(&location, &key, span, config, &counters)
        .await
        .unwrap();
    check(&got, want, first, 1);
    settle(&counters).await;
    // The documented bound: at most the span, one header and a window of
    // max(first_request, 2 × consumed) more; here one 64 KiB request and one of 128 KiB.
    let needed = end + 512 - offset;
    let bound = needed + (2 * needed).max(config.first_request);
    let s = counters.snapshot();
    assert!(s.bytes <= bound, "{s:?}, bound {bound}");
    assert_eq!(s.requests, 2, "{s:?}");

    // Without an offset the shard is read from its start and the first samples are dropped.
    let span = ShardSpan { offset: 0, ..span };
    let got = samples(&location, &key, span, config, &counters)
        .await
        .unwrap();
    check(&got, want, first, 1);

    // Every sample from `first` to the end.
    let span = ShardSpan {
        count: None,
        offset,
        ..span
    };
    let got = samples(&location, &key, span, config, &counters)
        .await
        .unwrap();
    check(&got, &written[first as usize..], first, 1);

    // A count past the end of the shard means the index is stale.
    let before = server.counters().get("GetObject");
    let span = ShardSpan {
        count: Some(1000),
        ..span
    };
    let msg = samples(&location, &key, span, config, &counters)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("expected 1000 samples from sample 37, found 263"),
        "{msg}"
    );
    assert!(server.counters().get("GetObject") > before);
}

#[tokio::test]
async fn a_corrupt_shard_fails_naming_it_and_the_offset() {
    let (_server, location) = setup(|c| c).await;
    let (bytes, _, index) = shard(100);
    let size = bytes.len() as u64;
    let (bad, _) = index.samples[60].byte_range().unwrap();
    let mut corrupt = bytes.to_vec();
    corrupt[bad as usize + 3] ^= 0x55; // inside the name: the header checksum no longer matches
    let key = put(&location, "bad.tar", corrupt.into()).await;
    let uri = location.uri_of(&key);
    let config = small(4096, 65_536, MIB);
    let counters = Arc::new(PrefetchCounters::default());

    let span = ShardSpan::whole(0, size);
    let msg = samples(&location, &key, span, config, &counters)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains(&format!("{uri} at byte {bad}: bad header checksum")),
        "{msg}"
    );

    // Read from a mid-shard offset, the offset is still counted from the shard's start.
    let (offset, _) = index.samples[40].byte_range().unwrap();
    let span = ShardSpan {
        first: 40,
        offset,
        ..span
    };
    let msg = samples(&location, &key, span, config, &counters)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains(&format!("{uri} at byte {bad}: bad header checksum")),
        "{msg}"
    );

    // The samples before the damage arrive first; sample 59 is never known to be complete.
    let stream = shard_samples(location.clone(), key.clone(), span, config, counters);
    let items: Vec<_> = stream.collect().await;
    assert_eq!(items.len(), 20);
    assert!(items[..19].iter().all(Result::is_ok));

    // A shard cut short: the error names where it ends.
    let cut = (size / 2) as usize;
    let key = put(&location, "cut.tar", bytes.slice(..cut)).await;
    let span = ShardSpan::whole(0, cut as u64);
    let counters = Arc::new(PrefetchCounters::default());
    let msg = samples(&location, &key, span, config, &counters)
        .await
        .unwrap_err()
        .to_string();
    let uri = location.uri_of(&key);
    assert!(msg.contains(&format!("{uri} at byte ")), "{msg}");
    assert!(msg.contains("truncated shard"), "{msg}");
}
