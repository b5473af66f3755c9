//! The fused kernel, and the whole pipeline (crop-region decode, exact and DCT-scaled),
//! against torchvision v2 on CPU, for the same source pixels and crop box.
//!
//! Needs a Python with torch and torchvision: `BUCKETLOAD_TORCH_PYTHON`, else the workspace
//! virtualenv's (`scripts/setup.sh --python` installs them from requirements-torch.txt). The
//! test fails, never skips, when torchvision is missing.
#![allow(clippy::unwrap_used)]

mod common;

use std::fmt::Write as _;
use std::path::PathBuf;

use bucketload_image::resample::{CropBox, Normalize, ResamplePlan, Scratch, Sink, resample};
use bucketload_image::{
    Augment, DEFAULT_MAX_PIXELS, Geometry, IMAGENET_MEAN, IMAGENET_STD, ImagePipeline, JpegDecode,
    Sample, SampleRng, decode,
};

/// Largest difference from torchvision allowed, in 8-bit grey levels before normalisation.
const MAX_LEVELS: u32 = 1;
/// Share of output values allowed to differ by that one level.
const MAX_SHARE_DIFFERENT: f64 = 0.01;
/// `JpegDecode::RegionScaled` decodes the box at a DCT scale (a low-pass filter) before the
/// bilinear resize, where torchvision resizes the full-resolution pixels without antialias: a
/// different, less aliased image. The bound is on the mean difference per value, in grey
/// levels, for photo-like fixtures (docs/IMAGE.md gives the measured values).
const SCALED_MAX_MEAN_LEVELS: f64 = 6.0;

/// Output size of the pipeline cases: small enough next to the 160x120 fixtures that most
/// boxes are decoded at a reduced DCT scale.
const PIPELINE_SIZE: u32 = 40;

struct Case {
    name: String,
    kind: &'static str,
    image: &'static str,
    plan: ResamplePlan,
    shorter: u32,
    /// Run through the whole pipeline with this JPEG mode (sample index in `plan_index`)
    /// instead of the kernel alone.
    pipeline: Option<JpegDecode>,
    plan_index: u64,
}

fn rrc(image: &'static str, n: usize, crop: CropBox, out: (u32, u32), flip: bool) -> Case {
    Case {
        name: format!("rrc{n}"),
        kind: "rrc",
        image,
        plan: ResamplePlan {
            crop,
            resized: out,
            window: (0, 0),
            output: out,
            flip,
            antialias: false,
        },
        shorter: 0,
        pipeline: None,
        plan_index: 0,
    }
}

const PIPELINE_SEED: u64 = 5;

fn pipeline_augment() -> Augment {
    Augment {
        geometry: Geometry::random_resized_crop(PIPELINE_SIZE),
        flip: 0.5,
        antialias: false,
    }
}

/// Samples through the pipeline, exact (crop region at full scale) and DCT-scaled; the plan
/// (box and flip) is the one the pipeline draws, so torchvision gets the same box.
fn pipeline_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (image, width, height) in [
        ("photo_420.jpg", 160, 120),
        ("photo_progressive.jpg", 160, 120),
    ] {
        for index in 0..6u64 {
            for (mode, name) in [
                (JpegDecode::Region, "region"),
                (JpegDecode::RegionScaled, "scaled"),
            ] {
                let plan = pipeline_augment().plan(
                    width,
                    height,
                    &mut SampleRng::new(PIPELINE_SEED, 0, index),
                );
                cases.push(Case {
                    name: format!("{name}_{}_{index}", image.trim_end_matches(".jpg")),
                    kind: "rrc",
                    image,
                    plan,
                    shorter: 0,
                    pipeline: Some(mode),
                    plan_index: index,
                });
            }
        }
    }
    cases
}

/// The pipeline's float CHW output for `case`.
fn through_pipeline(case: &Case, mode: JpegDecode) -> Vec<f32> {
    let pipeline = ImagePipeline::builder()
        .with_threads(1)
        .with_seed(PIPELINE_SEED)
        .with_augment(pipeline_augment())
        .with_jpeg_decode(mode)
        .build()
        .unwrap();
    let sample = Sample {
        key: case.image.to_owned(),
        index: case.plan_index,
        label: 0,
        bytes: bytes::Bytes::from(common::read(case.image)),
    };
    pipeline
        .process(0, &[sample])
        .unwrap()
        .as_f32()
        .unwrap()
        .to_vec()
}

fn cases() -> Vec<Case> {
    let b = |x, y, width, height| CropBox {
        x,
        y,
        width,
        height,
    };
    let mut cases = vec![
        // Upscaling, downscaling, mixed, identity, whole image, one-pixel box, flips.
        rrc("photo_420.jpg", 0, b(10, 7, 61, 45), (224, 224), false),
        rrc("photo_420.jpg", 1, b(0, 0, 160, 120), (64, 48), true),
        rrc("photo_420.jpg", 2, b(33, 2, 127, 50), (80, 200), false),
        rrc("photo_420.jpg", 3, b(5, 5, 100, 100), (100, 100), true),
        rrc("odd_97x61.jpg", 4, b(96, 60, 1, 1), (7, 5), false),
        rrc("noise_444.jpg", 5, b(3, 9, 117, 101), (224, 224), true),
        rrc("noise_444.jpg", 6, b(0, 0, 128, 128), (33, 17), false),
        rrc("tall_31x203.jpg", 7, b(0, 11, 31, 190), (56, 56), false),
    ];
    // Boxes as the pipeline samples them.
    let augment = Augment {
        geometry: Geometry::random_resized_crop(224),
        flip: 0.5,
        antialias: false,
    };
    for index in 0..8 {
        let mut c = rrc(
            "noise_444.jpg",
            100 + index,
            b(0, 0, 1, 1),
            (224, 224),
            false,
        );
        c.plan = augment.plan(128, 128, &mut SampleRng::new(42, 0, index as u64));
        cases.push(c);
    }
    // Evaluation transform, with and without antialias.
    for (n, antialias) in [(0, false), (1, true)] {
        let augment = Augment {
            geometry: Geometry::ResizeCenterCrop {
                shorter: 64,
                crop: (56, 56),
            },
            flip: 0.0,
            antialias,
        };
        cases.push(Case {
            name: format!("eval{n}"),
            kind: "eval",
            image: "photo_420.jpg",
            plan: augment.plan(160, 120, &mut SampleRng::new(0, 0, 0)),
            shorter: 64,
            pipeline: None,
            plan_index: 0,
        });
    }
    cases.extend(pipeline_cases());
    cases
}

fn torch_python() -> PathBuf {
    std::env::var_os("BUCKETLOAD_TORCH_PYTHON")
        .map_or_else(bucketload_test_support::venv_python, PathBuf::from)
}

#[test]
fn fused_kernel_matches_torchvision() {
    let dir = tempfile::tempdir().unwrap();
    let norm = Normalize::new(IMAGENET_MEAN, IMAGENET_STD);
    let mut lines = String::new();
    for case in cases() {
        let image = decode(case.image, &common::read(case.image), DEFAULT_MAX_PIXELS).unwrap();
        let rgb = format!("{}.rgb", case.image);
        std::fs::write(dir.path().join(&rgb), &image.pixels).unwrap();
        let (oh, ow) = case.plan.output;
        let mut out = vec![0f32; (oh * ow * 3) as usize];
        if let Some(mode) = case.pipeline {
            out = through_pipeline(&case, mode);
        } else {
            let sink = Sink::ChwF32 {
                out: &mut out,
                norm: &norm,
            };
            resample(
                &image.pixels,
                image.width,
                &case.plan,
                sink,
                &mut Scratch::default(),
            );
        }
        let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(dir.path().join(format!("{}.f32", case.name)), bytes).unwrap();
        let p = &case.plan;
        let c = p.crop;
        writeln!(
            lines,
            "{} {} {rgb} {} {} {} {} {} {} {oh} {ow} {} {} {}",
            case.name,
            case.kind,
            image.width,
            image.height,
            c.y,
            c.x,
            c.height,
            c.width,
            u8::from(p.flip),
            u8::from(p.antialias),
            case.shorter
        )
        .unwrap();
    }
    std::fs::write(dir.path().join("cases.txt"), lines).unwrap();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/torchvision_compare.py");
    let output = std::process::Command::new(torch_python())
        .arg(&script)
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_ne!(
        output.status.code(),
        Some(3),
        "{stdout}: run scripts/setup.sh --python (it installs requirements-torch.txt into .venv) \
         or point BUCKETLOAD_TORCH_PYTHON at a Python with torch and torchvision"
    );
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut failures = Vec::new();
    let mut scaled_means = Vec::new();
    for line in stdout.lines().skip(1) {
        eprintln!("{line}");
        let mut parts = line.split_whitespace();
        let name = parts.next().unwrap();
        let levels: u32 = parts.next().unwrap().parse().unwrap();
        let share: f64 = parts.next().unwrap().parse().unwrap();
        let mean: f64 = parts.next().unwrap().parse().unwrap();
        if name.starts_with("scaled") {
            scaled_means.push(mean);
            if mean > SCALED_MAX_MEAN_LEVELS {
                failures.push(format!("{name}: mean difference {mean} levels"));
            }
        } else if levels > MAX_LEVELS || share > MAX_SHARE_DIFFERENT {
            failures.push(format!("{name}: {levels} levels, {share} of values differ"));
        }
    }
    // The scaled cases must include boxes that were really decoded at a reduced scale.
    assert!(
        scaled_means.iter().any(|m| *m > 0.0),
        "no DCT-scaled case differs from torchvision: {scaled_means:?}"
    );
    assert_eq!(stdout.lines().count(), cases().len() + 1, "{stdout}");
    assert!(failures.is_empty(), "{failures:?}");
}
