//! Writes a synthetic format-2 files manifest of N objects, as `bucketload manifest` would of an
//! image-classification dataset: keys `train/class_042/sample_0001234.jpg` in 1,000 classes
//! (the sample number zero-padded to at least 7 digits, so keys sort as numbers), sizes of
//! 80–140 KB, S3-like ETags (32 hex digits) and CRC32Cs. The objects themselves are not
//! written: opening a dataset from its manifest needs only the manifest (benchmarks of the
//! files catalog, docs/BENCHMARKS.md).
//!
//! ```text
//! cargo run --release -p bucketload-format --example synthetic_manifest -- 100000000 /tmp/m.bin
//! # then upload it as s3://BUCKET/PREFIX/_bucketload/manifest.bin
//! ```

use std::fs::File;
use std::io::BufWriter;
use std::process::ExitCode;

use bucketload_format::{ClassCount, DatasetKind, FileEntry, ManifestWriter, Parameters};

/// Folders of the dataset, as ImageNet has.
const CLASSES: u64 = 1000;

/// A well-mixed 64-bit function of `x` (SplitMix64's finaliser): reproducible pseudo-random
/// sizes, ETags and checksums without a random number generator.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(n), Some(out)) = (args.get(1).and_then(|n| n.parse::<u64>().ok()), args.get(2))
    else {
        eprintln!("usage: synthetic_manifest N OUT (N objects, OUT the manifest.bin to write)");
        return ExitCode::from(2);
    };
    match write(n, out) {
        Ok(bytes) => {
            eprintln!("{out}: {n} objects, {bytes} bytes of data listed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write(n: u64, out: &str) -> Result<u64, Box<dyn std::error::Error>> {
    let file = BufWriter::with_capacity(1 << 20, File::create(out)?);
    let mut writer = ManifestWriter::new(out, file, DatasetKind::Files)?;
    let width = n.saturating_sub(1).to_string().len().max(7);
    let per = n.div_ceil(CLASSES).max(1);
    let mut counts = vec![0u64; CLASSES as usize];
    let mut total = 0u64;
    for i in 0..n {
        let class = i / per;
        let (a, b) = (mix(i), mix(i ^ 0x5555_5555_5555_5555));
        let size = 80_000 + a % 60_000;
        let entry = FileEntry {
            key: format!("train/class_{class:03}/sample_{i:0width$}.jpg"),
            size,
            etag: Some(format!("{a:016x}{b:016x}")),
            crc32c: Some(format!("{:08x}", b >> 32)),
        };
        writer.push_file(&entry)?;
        counts[class as usize] += 1;
        total += size;
    }
    let classes = counts
        .iter()
        .enumerate()
        .filter(|(_, count)| **count > 0)
        .map(|(c, count)| ClassCount {
            name: format!("class_{c:03}"),
            count: *count,
        })
        .collect();
    let parameters = Parameters {
        source: "s3://synthetic/train".to_owned(),
        label_policy: "folder".to_owned(),
        tool_version: env!("CARGO_PKG_VERSION").to_owned(),
        created: "2026-11-29T00:00:00Z".to_owned(),
        ..Parameters::default()
    };
    writer.finish(parameters, classes)?;
    Ok(total)
}
