//! Throughput of `shard_samples` (prefetching range reader + tar parsing + WebDataset grouping)
//! over one large tar shard on the embedded S3 server, at 0 ms and at 50 ms first-byte latency.
//!
//! ```text
//! cargo run --release -p bucketload --example stream_throughput -- \
//!     [--size-mib 1024] [--sample-kib 100] [--runs 3] [--streams 1] [--latency-ms 0,50] \
//!     [--first-kib 1024] [--part-mib 8] [--window-mib 64]
//! ```
//!
//! One server writes the shard (multipart upload) into a temporary folder; then, for each
//! latency, a server with that first-byte latency serves the same folder on loopback and
//! `--streams` copies of the shard are streamed at once, `--runs` times. MB/s counts shard
//! bytes (10^6 bytes per MB) over wall time; the best and the median run are printed, with
//! the GETs the run sent. The client and the server share this machine's cores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bucketload::base::Location;
use bucketload::io::{PrefetchConfig, PrefetchCounters};
use bucketload::loader::{ShardSpan, shard_samples};
use bucketload_format::TarWriter;
use bucketload_server::{LatencySpec, RunningServer, ServerConfig};
use bucketload_store::object_store::path::Path;
use bucketload_store::{MultipartOptions, MultipartWriter, Store};
use bucketload_test_support::s3_config;
use bytes::Bytes;
use futures::StreamExt;

type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Command-line settings.
#[derive(Debug, Clone)]
struct Args {
    size_mib: u64,
    sample_kib: u64,
    runs: usize,
    streams: usize,
    latencies_ms: Vec<u64>,
    prefetch: PrefetchConfig,
}

fn parse_args() -> BoxResult<Args> {
    let mut args = Args {
        size_mib: 1024,
        sample_kib: 100,
        runs: 3,
        streams: 1,
        latencies_ms: vec![0, 50],
        prefetch: PrefetchConfig::default(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--size-mib" => args.size_mib = value.parse()?,
            "--sample-kib" => args.sample_kib = value.parse()?,
            "--runs" => args.runs = value.parse::<usize>()?.max(1),
            "--streams" => args.streams = value.parse::<usize>()?.max(1),
            "--first-kib" => args.prefetch.first_request = value.parse::<u64>()? << 10,
            "--part-mib" => args.prefetch.part_size = value.parse::<u64>()? << 20,
            "--window-mib" => args.prefetch.max_window = value.parse::<u64>()? << 20,
            "--latency-ms" => {
                args.latencies_ms = value.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    Ok(args)
}

async fn server(root: &std::path::Path, latency_ms: u64) -> BoxResult<RunningServer> {
    let latency = LatencySpec::fixed(Duration::from_millis(latency_ms));
    let config = ServerConfig::builder(root).with_latency(latency).build()?;
    Ok(bucketload_server::start(config).await?)
}

fn open(server: &RunningServer) -> BoxResult<Store> {
    let config = s3_config(
        &server.endpoint(),
        bucketload_server::DEFAULT_ACCESS_KEY,
        bucketload_server::DEFAULT_SECRET_KEY,
    );
    Ok(Store::open("s3://bench", &config)?)
}

/// Uploads a shard of about `size` bytes of `sample`-byte JPEG-like members plus labels;
/// returns its exact size.
async fn upload_shard(store: &Store, key: &Path, size: u64, sample: u64) -> BoxResult<u64> {
    let opts = MultipartOptions {
        part_size: 16 << 20,
        concurrency: 4,
    };
    let mut upload = MultipartWriter::new(store.object_store(), key.clone(), opts);
    let mut writer = TarWriter::new("bench.tar").with_md5(false);
    let data: Vec<u8> = (0..sample).map(|i| (i * 31 % 251) as u8).collect();
    let mut buf = Vec::with_capacity(32 << 20);
    let mut i = 0u64;
    while writer.offset() < size {
        writer.append(&mut buf, &format!("{i:08}.jpg"), &data)?;
        writer.append(
            &mut buf,
            &format!("{i:08}.cls"),
            (i % 1000).to_string().as_bytes(),
        )?;
        i += 1;
        if buf.len() >= 16 << 20 {
            upload.write(Bytes::from(std::mem::take(&mut buf))).await?;
        }
    }
    let summary = writer.finish(&mut buf)?;
    upload.write(Bytes::from(buf)).await?;
    upload.finish().await?;
    Ok(summary.size)
}

/// Streams the shard once per stream, all at once; returns (seconds, samples, GETs).
async fn run(
    location: &Location,
    key: &Path,
    size: u64,
    streams: usize,
    config: PrefetchConfig,
) -> BoxResult<(f64, u64, u64)> {
    let counters = Arc::new(PrefetchCounters::default());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for shard in 0..streams {
        let span = ShardSpan::whole(shard, size);
        let stream = shard_samples(
            location.clone(),
            key.clone(),
            span,
            config,
            Arc::clone(&counters),
        );
        tasks.push(tokio::spawn(async move {
            let mut stream = stream;
            let mut samples = 0u64;
            while let Some(sample) = stream.next().await {
                std::hint::black_box(sample?);
                samples += 1;
            }
            Ok::<_, bucketload::Error>(samples)
        }));
    }
    let mut samples = 0;
    for task in tasks {
        samples += task.await??;
    }
    Ok((
        start.elapsed().as_secs_f64(),
        samples,
        counters.snapshot().requests,
    ))
}

#[tokio::main]
async fn main() -> BoxResult<()> {
    let args = parse_args()?;
    let root = tempfile::tempdir()?;
    let key = Path::from("shard-000000.tar");
    let size = {
        let writer = server(root.path(), 0).await?;
        let store = open(&writer)?;
        store.create_bucket().await?;
        let started = Instant::now();
        let size = upload_shard(&store, &key, args.size_mib << 20, args.sample_kib * 1000).await?;
        println!(
            "uploaded {size} bytes in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        writer.shutdown().await;
        size
    };
    println!("latency_ms streams runs best_MB/s median_MB/s samples/s GETs/run");
    for &latency in &args.latencies_ms {
        let server = server(root.path(), latency).await?;
        let location = Location::from_store(&open(&server)?);
        let mut rates = Vec::new();
        let (mut samples_per_s, mut gets) = (0.0f64, 0);
        for _ in 0..args.runs {
            let (secs, samples, requests) =
                run(&location, &key, size, args.streams, args.prefetch).await?;
            rates.push((size * args.streams as u64) as f64 / secs / 1e6);
            samples_per_s = samples_per_s.max(samples as f64 / secs);
            gets = requests;
        }
        rates.sort_by(f64::total_cmp);
        let best = rates.last().copied().unwrap_or_default();
        let median = rates[rates.len() / 2];
        println!(
            "{latency:>10} {:>7} {:>4} {best:>10.0} {median:>12.0} {samples_per_s:>9.0} {gets:>8}",
            args.streams, args.runs
        );
        server.shutdown().await;
    }
    Ok(())
}
