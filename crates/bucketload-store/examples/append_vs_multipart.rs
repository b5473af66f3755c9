//! Should a checkpoint save to an S3 Express One Zone directory bucket use appends? Times a
//! save of each size to a directory bucket of the embedded server (a few ms to first byte)
//! three ways: as checkpoints save today (one PUT below a part, else a multipart upload with
//! parts in parallel), and as a stream of appends of one part each (each must wait for the
//! one before: its offset is the size the last one made).
//!
//! `cargo run --release -p bucketload-store --example append_vs_multipart [LATENCY]`
//! (default `3ms..6ms`).

use std::time::Instant;

use bucketload_server::LatencySpec;
use bucketload_store::{Store, key_path};
use bucketload_test_support::EmbeddedServer;
use bytes::Bytes;

const PART: u64 = 8 << 20;
const PARTS_IN_FLIGHT: usize = 16;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let latency: LatencySpec = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "3ms..6ms".to_owned())
        .parse()?;
    let server = EmbeddedServer::start_with(|b| b.with_directory_latency(latency)).await;
    let config = server
        .store_config()
        .with_part_size(PART)
        .with_concurrency(64);
    let store = Store::open("s3://ckpt--use1-az4--x-s3", &config)?;
    store.create_bucket().await?;
    println!(
        "directory bucket at {latency:?}; part {} MiB, {PARTS_IN_FLIGHT} parts in flight",
        PART >> 20
    );
    println!(
        "{:>10} {:>16} {:>16} {:>9}",
        "size", "save today s", "appends s", "appends/today"
    );
    for size in [256u64 << 10, 4 << 20, 64 << 20, 512 << 20] {
        let data = Bytes::from(vec![7u8; size as usize]);
        let (mut today, mut appended) = (Vec::new(), Vec::new());
        for round in 0..3 {
            let key = format!("today-{size}-{round}");
            let start = Instant::now();
            let mut writer = store.writer(&key_path(&key), PARTS_IN_FLIGHT);
            writer.write(data.clone()).await?;
            writer.finish().await?;
            today.push(start.elapsed().as_secs_f64());

            let key = format!("appends-{size}-{round}");
            let start = Instant::now();
            let mut offset = 0;
            for chunk in data.chunks(PART as usize) {
                let chunk = data.slice_ref(chunk);
                offset = store.append(&key, offset, chunk).await?.size;
            }
            appended.push(start.elapsed().as_secs_f64());
            assert_eq!(offset, size);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (t, a) = (median(&mut today), median(&mut appended));
        println!(
            "{:>8} KiB {:>16.3} {:>16.3} {:>8.2}x",
            size >> 10,
            t,
            a,
            a / t
        );
    }
    Ok(())
}
