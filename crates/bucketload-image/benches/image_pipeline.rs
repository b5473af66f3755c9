//! Decode + augment throughput of bucketload-image, side by side with PIL + torchvision v2.
//!
//! `cargo bench -p bucketload-image --bench image_pipeline` builds in-memory corpora — 64 of
//! the 100 KB noise JPEGs of `bucketload gen` (261x261, 4:4:4), 64 photo-like 500x375 4:2:0
//! pictures and 16 of 1600x1200 from `benches/make_corpus.py` (needs the workspace
//! virtualenv's Pillow) — and measures, per core:
//!
//! - decode only, whole images: libjpeg-turbo (the crate's decoder), zune-jpeg and
//!   jpeg-decoder;
//! - the pipeline on one thread (RandomResizedCrop(224), flip, ImageNet normalise, float CHW
//!   batches of 64, buffers recycled as a training loop would), with its decode/augment split,
//!   for each `JpegDecode` mode (whole image, crop region, crop region + DCT scaling);
//! - the pipeline on every core (both region modes), for the scaling;
//! - the peer, `benches/peer_torchvision.py`, in the same run when `BUCKETLOAD_TORCH_PYTHON`
//!   names a Python with torch and torchvision.
//!
//! Rounds alternate between ours and the peer and the best round of each is kept, so a busy
//! machine penalises both alike. `BENCH_ROUNDS` sets the rounds (default 5). Before them, each
//! pipeline makes [`WARM_UP_EPOCHS`] passes (its first is reported on its own) as the peer
//! makes one uncounted round; every pass draws the crops of a different epoch.
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use bucketload::dataset::synth::{ImageShape, NoiseTable, encode_sample};
use bucketload_image::{ImagePipeline, JpegDecode, Sample};
use bucketload_test_support::venv_python;
use bytes::Bytes;

const IMAGES: usize = 64;

/// Passes over the corpus before the measured rounds, the first of them reported alone.
const WARM_UP_EPOCHS: u64 = 10;

struct Corpus {
    name: &'static str,
    files: Vec<PathBuf>,
    samples: Vec<Sample>,
}

fn load(name: &'static str, files: Vec<PathBuf>) -> Corpus {
    let samples = files
        .iter()
        .enumerate()
        .map(|(i, f)| Sample {
            key: f.display().to_string(),
            index: i as u64,
            label: (i % 10) as i64,
            bytes: Bytes::from(std::fs::read(f).unwrap()),
        })
        .collect();
    Corpus {
        name,
        files,
        samples,
    }
}

fn noise_corpus(dir: &Path) -> Corpus {
    let table = NoiseTable::new();
    let shape = ImageShape::search(&table, 100_000, 10).unwrap();
    let files = (0..IMAGES)
        .map(|i| {
            let bytes = encode_sample(&table, shape, 0, i as u64, i % 10, 10).unwrap();
            let path = dir.join(format!("noise_{i:04}.jpg"));
            std::fs::write(&path, bytes).unwrap();
            path
        })
        .collect();
    load("noise 261x261 4:4:4 (bucketload gen)", files)
}

/// `count` photo-like JPEGs of `width` x `height` from `benches/make_corpus.py`.
fn photo_corpus(
    dir: &Path,
    name: &'static str,
    count: usize,
    (width, height): (u32, u32),
) -> Option<Corpus> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/make_corpus.py");
    let out = dir.join(format!("photos_{width}x{height}"));
    let status = std::process::Command::new(venv_python())
        .arg(script)
        .arg(&out)
        .arg(count.to_string())
        .arg(width.to_string())
        .arg(height.to_string())
        .status()
        .ok()?;
    if !status.success() {
        return None;
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    Some(load(name, files))
}

/// Milliseconds per image of `f` over the corpus.
fn per_image(samples: &[Sample], mut f: impl FnMut(&Sample)) -> f64 {
    let started = Instant::now();
    samples.iter().for_each(&mut f);
    started.elapsed().as_secs_f64() * 1e3 / samples.len() as f64
}

fn turbo(s: &Sample) {
    let image = bucketload_image::decode(&s.key, &s.bytes, u64::MAX).unwrap();
    std::hint::black_box(image);
}

fn zune(s: &Sample) {
    let options = zune_core::options::DecoderOptions::new_fast()
        .jpeg_set_out_colorspace(zune_core::colorspace::ColorSpace::RGB);
    let cursor = zune_core::bytestream::ZCursor::new(&s.bytes[..]);
    let mut d = zune_jpeg::JpegDecoder::new_with_options(cursor, options);
    std::hint::black_box(d.decode().unwrap());
}

fn jpeg_decoder(s: &Sample) {
    let mut d = jpeg_decoder::Decoder::new(&s.bytes[..]);
    std::hint::black_box(d.decode().unwrap());
}

/// (ms per image, decode ms per image, augment ms per image) of one pass of the pipeline over
/// `samples` as epoch `epoch` (each epoch draws other crops).
fn pipeline_pass(pipeline: &ImagePipeline, samples: &[Sample], epoch: u64) -> (f64, f64, f64) {
    let before = pipeline.stats();
    let started = Instant::now();
    for chunk in samples.chunks(64) {
        let batch = pipeline.process(epoch, chunk).unwrap();
        std::hint::black_box(batch.as_f32());
        pipeline.recycle(batch);
    }
    let wall = started.elapsed().as_secs_f64() * 1e3;
    let after = pipeline.stats();
    let n = samples.len() as f64;
    let decode = (after.decode_nanos - before.decode_nanos) as f64 / 1e6 / n;
    let augment = (after.augment_nanos - before.augment_nanos) as f64 / 1e6 / n;
    (wall / n, decode, augment)
}

/// (images/s, decode, transform, collate ms per image) of the peer, if it can run.
fn peer(python: &Path, corpus: &Corpus) -> Option<[f64; 4]> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peer_torchvision.py");
    let output = std::process::Command::new(python)
        .arg(script)
        .arg("1")
        .args(&corpus.files)
        .output()
        .ok()?;
    if !output.status.success() {
        eprintln!("peer failed: {}", String::from_utf8_lossy(&output.stderr));
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let v: Vec<f64> = text
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    Some([v[0], v[1], v[2], v[3]])
}

fn best(a: f64, b: f64) -> f64 {
    if a < b { a } else { b }
}

/// The pipeline's JPEG modes, each measured on one thread.
const MODES: [(JpegDecode, &str); 3] = [
    (JpegDecode::Whole, "whole image"),
    (JpegDecode::Region, "crop region (default)"),
    (JpegDecode::RegionScaled, "crop region + DCT scaling"),
];

fn pipeline(threads: Option<usize>, jpeg: JpegDecode) -> ImagePipeline {
    let builder = ImagePipeline::builder().with_jpeg_decode(jpeg);
    match threads {
        Some(n) => builder.with_threads(n),
        None => builder,
    }
    .build()
    .unwrap()
}

fn bench(corpus: &Corpus, rounds: usize, torch: Option<&Path>) {
    let ones: Vec<ImagePipeline> = MODES.iter().map(|(m, _)| pipeline(Some(1), *m)).collect();
    let alls: Vec<ImagePipeline> = MODES[1..].iter().map(|(m, _)| pipeline(None, *m)).collect();
    let s = &corpus.samples;
    let kb = s.iter().map(|s| s.bytes.len()).sum::<usize>() as f64 / s.len() as f64 / 1e3;
    let (mut t, mut z, mut j) = (f64::MAX, f64::MAX, f64::MAX);
    let mut single = vec![(f64::MAX, 0.0, 0.0); ones.len()];
    let mut multi = vec![f64::MAX; alls.len()];
    let mut theirs: Option<[f64; 4]> = None;
    // The first pass of a new pipeline, then the warm-up: a training run's steady state is
    // after its first few hundred images (buffers faulted in, the taps of most box sizes
    // built), and the peer likewise leaves out its first round. Measured rounds draw crops of
    // epochs the warm-up did not see.
    let first: Vec<_> = ones
        .iter()
        .map(|p| pipeline_pass(p, s, WARM_UP_EPOCHS))
        .collect();
    for epoch in 1..WARM_UP_EPOCHS {
        for p in ones.iter().chain(&alls) {
            pipeline_pass(p, s, WARM_UP_EPOCHS + epoch);
        }
    }
    for round in 0..rounds as u64 {
        t = best(t, per_image(s, turbo));
        z = best(z, per_image(s, zune));
        j = best(j, per_image(s, jpeg_decoder));
        for (p, kept) in ones.iter().zip(&mut single) {
            let pass = pipeline_pass(p, s, round);
            if pass.0 < kept.0 {
                *kept = pass;
            }
        }
        for (p, kept) in alls.iter().zip(&mut multi) {
            *kept = best(*kept, pipeline_pass(p, s, round).0);
        }
        if let Some(p) = torch.and_then(|python| peer(python, corpus))
            && theirs.is_none_or(|t| p[0] > t[0])
        {
            theirs = Some(p);
        }
    }
    println!(
        "\n## {} — {} images, {kb:.0} KB average, best of {rounds} rounds",
        corpus.name,
        s.len()
    );
    println!(
        "decode only, 1 core: libjpeg-turbo {t:.3} ms/img, zune-jpeg {z:.3} ms/img, jpeg-decoder {j:.3} ms/img"
    );
    for ((_, name), (ms, decode, augment)) in MODES.iter().zip(&single) {
        println!(
            "bucketload-image, 1 thread, {name}: {:.0} img/s ({ms:.3} ms/img: decode {decode:.3}, augment {augment:.3} = {:.1}% of decode)",
            1e3 / ms,
            100.0 * augment / decode
        );
    }
    for ((_, name), (_, decode, augment)) in MODES.iter().zip(&first) {
        println!(
            "bucketload-image, 1 thread, {name}, first pass of a new pipeline: decode {decode:.3}, augment {augment:.3} = {:.1}% of decode",
            100.0 * augment / decode
        );
    }
    for ((i, (_, name)), ms) in MODES[1..].iter().enumerate().zip(&multi) {
        println!(
            "bucketload-image, {} threads, {name}: {:.0} img/s ({:.2}x one thread)",
            alls[i].threads(),
            1e3 / ms,
            single[i + 1].0 / ms
        );
    }
    match theirs {
        Some([ips, d, t, c]) => {
            println!(
                "PIL + torchvision v2, 1 core: {ips:.0} img/s (decode {d:.3}, transforms {t:.3}, collate {c:.3} ms/img)"
            );
            for ((_, name), (ms, _, _)) in MODES.iter().zip(&single) {
                println!("ratio per core, {name}: {:.2}x", 1e3 / ms / ips);
            }
        }
        None => println!("PIL + torchvision v2: not run (set BUCKETLOAD_TORCH_PYTHON)"),
    }
}

fn main() {
    let rounds = std::env::var("BENCH_ROUNDS").map_or(5, |v| v.parse().unwrap());
    let torch = std::env::var_os("BUCKETLOAD_TORCH_PYTHON").map(PathBuf::from);
    let dir = tempfile::tempdir().unwrap();
    let mut corpora = vec![noise_corpus(dir.path())];
    corpora.extend(photo_corpus(
        dir.path(),
        "photo 500x375 4:2:0 q90 (make_corpus.py)",
        IMAGES,
        (500, 375),
    ));
    // Large pictures, where RandomResizedCrop's boxes are often twice the output or more, so
    // DCT scaling applies; fewer of them, as each is ~16x the work.
    corpora.extend(photo_corpus(
        dir.path(),
        "large photo 1600x1200 4:2:0 q90 (make_corpus.py)",
        16,
        (1600, 1200),
    ));
    for corpus in &corpora {
        bench(corpus, rounds, torch.as_deref());
    }
}
