//! End-to-end store throughput against the embedded S3 server on loopback,
//! with WAN-like first-byte latency and per-connection bandwidth, plus the
//! cost of the metering layer on an in-memory store.
//!
//! `cargo bench -p bucketload-store --bench store_throughput`
//! Record results in docs/BENCHMARKS.md together with this command.

#![allow(clippy::unwrap_used)] // a benchmark aborts on any error

use bucketload_server::LatencySpec;
use bucketload_store::object_store::memory::InMemory;
use bucketload_store::object_store::path::Path;
use bucketload_store::object_store::{ObjectStore, ObjectStoreExt};
use bucketload_store::{MeteredStore, Metrics, ParallelGet, Store};
use bucketload_test_support::EmbeddedServer;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;
/// First-byte latency of an S3 GET in the same region, order of magnitude.
const LATENCY: Duration = Duration::from_millis(30);
/// Per-connection bandwidth cap, typical of one S3 connection (~80 MB/s).
const CONN_BANDWIDTH: u64 = 80_000_000;

fn mb_per_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

async fn large_object(store: &Store) {
    let key = Path::from("large.bin");
    let data = Bytes::from(vec![7u8; 128 * MIB]);
    store.object_store().put(&key, data.into()).await.unwrap();
    let start = Instant::now();
    let single = store
        .object_store()
        .get(&key)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let one = start.elapsed();
    assert_eq!(single.len(), 128 * MIB);
    for concurrency in [4, 8, 16] {
        let opts = ParallelGet {
            part_size: 8 * MIB as u64,
            concurrency,
            size: None,
        };
        let start = Instant::now();
        let n: usize = store
            .get_parallel(&key, opts)
            .map_ok(|b| b.len())
            .try_fold(0, |acc, n| async move { Ok(acc + n) })
            .await
            .unwrap();
        let par = start.elapsed();
        println!(
            "128 MiB object: single GET {:7.1} MB/s | get_parallel 8 MiB x {concurrency:2} {:7.1} MB/s ({:.1}x)",
            mb_per_s(n, one),
            mb_per_s(n, par),
            one.as_secs_f64() / par.as_secs_f64()
        );
    }
}

async fn small_objects(store: &Store) {
    const N: usize = 512;
    const SIZE: usize = 100_000;
    let os = store.object_store();
    futures::stream::iter(0..N)
        .map(|i| {
            let os = Arc::clone(&os);
            async move {
                os.put(&Path::from(format!("small/{i}")), vec![1u8; SIZE].into())
                    .await
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    for in_flight in [1, 16, 64] {
        let start = Instant::now();
        futures::stream::iter(0..N)
            .map(|i| {
                let os = Arc::clone(&os);
                async move {
                    os.get(&Path::from(format!("small/{i}")))
                        .await?
                        .bytes()
                        .await
                }
            })
            .buffer_unordered(in_flight)
            .try_collect::<Vec<_>>()
            .await
            .unwrap();
        let d = start.elapsed();
        println!(
            "{N} x 100 KB GETs, {in_flight:2} in flight: {:8.0} objects/s {:7.1} MB/s",
            N as f64 / d.as_secs_f64(),
            mb_per_s(N * SIZE, d)
        );
    }
    let s = store.metrics().snapshot();
    println!(
        "  first byte p50 {:.1} ms p99 {:.1} ms; total p50 {:.1} ms; retries {}",
        s.latency.first_byte_ms.p50, s.latency.first_byte_ms.p99, s.latency.total_ms.p50, s.retries
    );
}

async fn metering_overhead() {
    const N: usize = 200_000;
    let raw: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let metered: Arc<dyn ObjectStore> =
        Arc::new(MeteredStore::new(InMemory::new(), Metrics::new()));
    for (name, store) in [("InMemory", raw), ("MeteredStore<InMemory>", metered)] {
        let key = Path::from("k");
        store.put(&key, vec![0u8; 1024].into()).await.unwrap();
        let start = Instant::now();
        for _ in 0..N {
            store.get(&key).await.unwrap().bytes().await.unwrap();
        }
        let per = start.elapsed() / N as u32;
        println!(
            "{name:24} 1 KiB get+read: {:6.2} µs per request",
            per.as_secs_f64() * 1e6
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = EmbeddedServer::start_with(|b| {
        b.with_latency(LatencySpec::fixed(LATENCY))
            .with_bandwidth(CONN_BANDWIDTH)
    })
    .await;
    let bucket = server.bucket().await;
    let store = Store::open(&format!("s3://{bucket}"), &server.store_config()).unwrap();
    println!(
        "embedded server, {LATENCY:?} first-byte latency, {CONN_BANDWIDTH} B/s per connection"
    );
    large_object(&store).await;
    small_objects(&store).await;
    metering_overhead().await;
}
