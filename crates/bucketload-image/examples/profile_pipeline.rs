//! Profiling aid: the pipeline on one thread over a folder of JPEGs, printing the
//! decode/augment split, for `perf record`.
//!
//! `cargo run --release -p bucketload-image --example profile_pipeline -- DIR [EPOCHS]` runs
//! RandomResizedCrop(224) + flip + ImageNet normalise into float CHW batches of 64 over every
//! `*.jpg` in `DIR` (or, for `DIR` = `noise`, the bench's noise corpus) for `EPOCHS` (default
//! 20) epochs, recycling batch buffers, and prints the images per second (wall clock, one
//! thread: the kernel's rate per core) and the split. `CHUNK` sets the batch size (default 64;
//! 1 keeps the output in cache); `THREADS` the decode threads (default 1).
//! `scripts/bench-decode.sh` uses it as "the kernel alone".
#![allow(clippy::unwrap_used, missing_docs)]

use bucketload::dataset::synth::{ImageShape, NoiseTable, encode_sample};
use bucketload_image::{ImagePipeline, Sample};
use bytes::Bytes;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().expect("usage: profile_pipeline DIR [EPOCHS]");
    let epochs: u64 = args.next().map_or(20, |e| e.parse().unwrap());
    let samples: Vec<Sample> = if dir == "noise" {
        // The bench's noise corpus: 64 ~100 KB JPEGs of `bucketload gen`.
        let table = NoiseTable::new();
        let shape = ImageShape::search(&table, 100_000, 10).unwrap();
        (0..64)
            .map(|i| Sample {
                key: format!("noise_{i}"),
                index: i,
                label: 0,
                bytes: Bytes::from(encode_sample(&table, shape, 0, i, 0, 10).unwrap()),
            })
            .collect()
    } else {
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "jpg"))
            .collect();
        files.sort();
        files
            .iter()
            .enumerate()
            .map(|(i, f)| Sample {
                key: f.display().to_string(),
                index: i as u64,
                label: 0,
                bytes: Bytes::from(std::fs::read(f).unwrap()),
            })
            .collect()
    };
    let threads: usize = std::env::var("THREADS").map_or(1, |t| t.parse().unwrap());
    let pipeline = ImagePipeline::builder()
        .with_threads(threads)
        .build()
        .unwrap();
    // Warm up: the first two batches fault their buffers in; later ones reuse them.
    let chunk: usize = std::env::var("CHUNK").map_or(64, |c| c.parse().unwrap());
    for epoch in 0..2 {
        let batch = pipeline
            .process(1000 + epoch, &samples[..chunk.min(samples.len())])
            .unwrap();
        pipeline.recycle(batch);
    }
    let before = pipeline.stats();
    let started = std::time::Instant::now();
    for epoch in 0..epochs {
        for chunk in samples.chunks(chunk) {
            let batch = pipeline.process(epoch, chunk).unwrap();
            std::hint::black_box(batch.as_f32());
            pipeline.recycle(batch);
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let s = pipeline.stats();
    let n = (s.images - before.images) as f64;
    let decode = (s.decode_nanos - before.decode_nanos) as f64 / 1e6 / n;
    let augment = (s.augment_nanos - before.augment_nanos) as f64 / 1e6 / n;
    println!(
        "{n} images: {:.1} img/s, decode {decode:.4} ms, augment {augment:.4} ms ({:.1}% of decode)",
        n / wall,
        100.0 * augment / decode
    );
}
