//! Runs the embedded S3 server as its own process (for load tests until `bucketload serve`
//! exists).
//!
//! ```text
//! cargo run --release -p bucketload-server --example serve -- --root /tmp/data --addr 127.0.0.1:9000 \
//!     [--bucket NAME]... [--latency 30ms..120ms] [--bandwidth BYTES_PER_SEC] [--rate-limit REQ_PER_SEC] \
//!     [--faults error=0.01,seed=1] [--min-part-size BYTES]
//! ```
//!
//! Prints `endpoint http://…` once listening, and stops on Ctrl-C.

use std::path::PathBuf;

use bucketload_server::ServerConfig;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut root = PathBuf::from("/tmp/bucketload-data");
    let mut buckets = Vec::new();
    let mut builder_steps: Vec<(String, String)> = Vec::new();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--root" => root = PathBuf::from(value),
            "--bucket" => buckets.push(value),
            _ => builder_steps.push((flag, value)),
        }
    }
    let mut builder = ServerConfig::builder(&root);
    for (flag, value) in builder_steps {
        builder = match flag.as_str() {
            "--addr" => builder.with_addr(value.parse()?),
            "--latency" => builder.with_latency(value.parse()?),
            "--bandwidth" => builder.with_bandwidth(value.parse()?),
            "--rate-limit" => builder.with_rate_limit(value.parse()?),
            "--faults" => builder.with_faults(value.parse()?),
            "--min-part-size" => builder.with_min_part_size(value.parse()?),
            other => return Err(format!("unknown flag {other}").into()),
        };
    }
    let config = builder.build()?;
    for bucket in &buckets {
        std::fs::create_dir_all(root.join(bucket))?;
    }
    println!("{config}");
    let server = bucketload_server::start(config).await?;
    println!("endpoint {}", server.endpoint());
    tokio::signal::ctrl_c().await?;
    server.shutdown().await;
    Ok(())
}
