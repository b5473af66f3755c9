//! Throughput of the cache on this machine's disk: inserts and reads per
//! second of 100 KB entries, and MB/s of 8 MiB entries, with and without
//! fsync, next to plain files written and read with `std::fs` (create,
//! write, close; read whole) in the same directory. Reads come from the
//! page cache (the entries were just written); that is the common case for
//! a cache smaller than memory.
//!
//! ```sh
//! cargo run -p bucketload-cache --release --example cache_throughput [DIR]
//! ```
//!
//! DIR (default: a temporary directory under the system's) picks the disk.

use std::path::Path;
use std::time::Instant;

use bucketload_cache::{Cache, CacheBuilder, CacheKey, ObjectVersion, Policy};
use bytes::Bytes;

const SMALL: usize = 100_000;
const SMALL_COUNT: u64 = 10_000;
const LARGE: usize = 8 << 20;
const LARGE_COUNT: u64 = 128;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::env::args().nth(1).map(std::path::PathBuf::from);
    println!("| case | fsync | inserts | reads | plain files: writes | plain files: reads |");
    println!("|---|---|---|---|---|---|");
    for fsync in [false, true] {
        let dir = match &base {
            Some(b) => tempfile::tempdir_in(b)?,
            None => tempfile::tempdir()?,
        };
        let cache = CacheBuilder::new(dir.path(), 4 << 30)
            .with_policy(Policy::Lru)
            .with_fsync(fsync)
            .build()?;
        for (len, count) in [(SMALL, SMALL_COUNT), (LARGE, LARGE_COUNT)] {
            let (w, r) = measure(&cache, len, count)?;
            let (pw, pr) = plain(dir.path(), len, count)?;
            println!(
                "| {count} × {} | {fsync} | {} | {} | {} | {} |",
                if len == SMALL { "100 KB" } else { "8 MiB" },
                rate(w, len),
                rate(r, len),
                rate(pw, len),
                rate(pr, len)
            );
        }
    }
    Ok(())
}

/// Inserts then reads `count` entries of `len` bytes; entries per second.
fn measure(
    cache: &Cache,
    len: usize,
    count: u64,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let body: Bytes = (0..len).map(|i| (i % 251) as u8).collect::<Vec<_>>().into();
    let key = |i: u64| CacheKey::new("s3://bucket/bench", format!("{len}/{i:08}"));
    let version = ObjectVersion::new("\"etag\"", len as u64);
    let start = Instant::now();
    for i in 0..count {
        cache.insert(&key(i), &version, body.clone())?;
    }
    let inserts = count as f64 / start.elapsed().as_secs_f64();
    let start = Instant::now();
    for i in 0..count {
        let got = cache.get(&key(i), &version)?.hit().ok_or("entry missing")?;
        assert_eq!(got.len(), len);
    }
    let reads = count as f64 / start.elapsed().as_secs_f64();
    Ok((inserts, reads))
}

/// Writes then reads `count` plain files of `len` bytes; files per second.
fn plain(dir: &Path, len: usize, count: u64) -> std::io::Result<(f64, f64)> {
    let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let dir = dir.join(format!("plain-{len}"));
    std::fs::create_dir_all(&dir)?;
    let start = Instant::now();
    for i in 0..count {
        std::fs::write(dir.join(format!("{i:08}")), &body)?;
    }
    let writes = count as f64 / start.elapsed().as_secs_f64();
    let start = Instant::now();
    for i in 0..count {
        assert_eq!(std::fs::read(dir.join(format!("{i:08}")))?.len(), len);
    }
    let reads = count as f64 / start.elapsed().as_secs_f64();
    Ok((writes, reads))
}

/// Entries per second as a table cell: per second for small entries, MB/s
/// for large ones.
fn rate(per_second: f64, len: usize) -> String {
    let mb = per_second * len as f64 / 1e6;
    if len == SMALL {
        format!("{per_second:.0} /s ({mb:.0} MB/s)")
    } else {
        format!("{mb:.0} MB/s")
    }
}
