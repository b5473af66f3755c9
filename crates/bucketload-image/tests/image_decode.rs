//! Decoded pixels against Pillow's (libjpeg-turbo), and bad inputs.
#![allow(clippy::unwrap_used)]

mod common;

use bucketload_image::{DEFAULT_MAX_PIXELS, Error, RgbImage, decode};

const JPEGS: &[&str] = &[
    "photo_420.jpg",
    "photo_422.jpg",
    "photo_444.jpg",
    "photo_progressive.jpg",
    "photo_restart.jpg",
    "photo_restart_rows.jpg",
    "odd_97x61.jpg",
    "odd_17x9_444.jpg",
    "tiny_1x1.jpg",
    "tall_31x203.jpg",
    "gray.jpg",
    "gray_progressive.jpg",
    "cmyk.jpg",
    "noise_444.jpg",
];
const PNGS: &[&str] = &["rgb.png", "rgba.png", "gray.png", "palette.png"];

/// Per-channel difference from Pillow's libjpeg-turbo that every value stays within.
const JPEG_TOLERANCE: u8 = 2;
/// JPEGs are decoded by libjpeg-turbo too (the system's 2.1, Pillow bundles 3.2; both use the
/// same integer IDCT and fancy upsampling): the pixels are identical. CMYK and YCCK, which
/// libjpeg-turbo does not convert to RGB, go through zune-jpeg and stay within the tolerance.
const JPEG_MAX_DIFF: u8 = JPEG_TOLERANCE;
const JPEG_MAX_SHARE_OVER_TOLERANCE: f64 = 0.0;
const JPEG_MAX_MEAN_DIFF: f64 = 0.05;
/// Fixtures decoded by zune-jpeg rather than libjpeg-turbo.
const NOT_IDENTICAL: &[&str] = &["cmyk.jpg"];

fn pil_decode(names: &[&str]) -> Vec<RgbImage> {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![dir.path().as_os_str().to_owned()];
    args.extend(names.iter().map(|n| common::data(n).into_os_string()));
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let version = common::run_python(
        &bucketload_test_support::venv_python(),
        "pil_decode.py",
        &args,
    );
    eprintln!("reference: Pillow with {}", version.trim());
    names
        .iter()
        .map(|n| {
            let raw = std::fs::read(dir.path().join(format!("{n}.rgb"))).unwrap();
            let width = u32::from_le_bytes(raw[0..4].try_into().unwrap());
            let height = u32::from_le_bytes(raw[4..8].try_into().unwrap());
            RgbImage {
                width,
                height,
                pixels: raw[8..].to_vec(),
            }
        })
        .collect()
}

/// (largest difference, mean absolute difference, share of values off by more than
/// [`JPEG_TOLERANCE`]) over every channel of every pixel.
fn compare(ours: &RgbImage, theirs: &RgbImage) -> (u8, f64, f64) {
    assert_eq!((ours.width, ours.height), (theirs.width, theirs.height));
    assert_eq!(ours.pixels.len(), theirs.pixels.len());
    let mut max = 0;
    let mut sum = 0u64;
    let mut over = 0usize;
    for (a, b) in ours.pixels.iter().zip(&theirs.pixels) {
        let d = a.abs_diff(*b);
        max = max.max(d);
        sum += u64::from(d);
        over += usize::from(d > JPEG_TOLERANCE);
    }
    let n = ours.pixels.len() as f64;
    (max, sum as f64 / n, over as f64 / n)
}

#[test]
fn jpeg_matches_libjpeg_turbo() {
    let reference = pil_decode(JPEGS);
    let mut failures = Vec::new();
    for (name, theirs) in JPEGS.iter().zip(&reference) {
        let ours = decode(name, &common::read(name), DEFAULT_MAX_PIXELS).unwrap();
        let (max, mean, over) = compare(&ours, theirs);
        eprintln!(
            "{name}: {}x{} max diff {max}, mean {mean:.4}, over {JPEG_TOLERANCE}: {:.4}%",
            ours.width,
            ours.height,
            over * 100.0
        );
        let identical = !NOT_IDENTICAL.contains(name);
        if max > JPEG_MAX_DIFF
            || over > JPEG_MAX_SHARE_OVER_TOLERANCE
            || mean > JPEG_MAX_MEAN_DIFF
            || (identical && max > 0)
        {
            failures.push(format!(
                "{name}: max diff {max}, mean {mean}, share over: {over}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn png_matches_pillow_exactly() {
    let reference = pil_decode(PNGS);
    for (name, theirs) in PNGS.iter().zip(&reference) {
        let ours = decode(name, &common::read(name), DEFAULT_MAX_PIXELS).unwrap();
        assert_eq!(compare(&ours, theirs).0, 0, "{name}");
    }
}

#[test]
fn sixteen_bit_png_keeps_the_high_byte() {
    let gray = decode("gray.png", &common::read("gray.png"), DEFAULT_MAX_PIXELS).unwrap();
    let wide = decode(
        "gray16.png",
        &common::read("gray16.png"),
        DEFAULT_MAX_PIXELS,
    )
    .unwrap();
    assert_eq!(gray, wide);
}

fn decode_err(key: &str, bytes: &[u8], max_pixels: u64) -> Error {
    match decode(key, bytes, max_pixels) {
        Ok(image) => panic!(
            "{key} decoded to {}x{} instead of failing",
            image.width, image.height
        ),
        Err(e) => e,
    }
}

#[test]
fn bad_inputs_are_errors_naming_the_key() {
    for name in [
        "bad/truncated.jpg",
        "bad/header_only.jpg",
        "bad/garbage.jpg",
        "bad/empty.jpg",
        "bad/truncated.png",
    ] {
        let key = format!("s3://bucket/train/{name}");
        let err = decode_err(&key, &common::read(name), DEFAULT_MAX_PIXELS);
        assert_eq!(err.key(), Some(key.as_str()), "{name}: {err}");
        assert!(err.to_string().contains(&key), "{name}: {err}");
        assert!(
            matches!(err, Error::Corrupt { .. } | Error::UnknownFormat { .. }),
            "{name}: {err:?}"
        );
    }
}

#[test]
fn decompression_bombs_are_refused_before_decoding() {
    for (name, width, height) in [
        ("bad/bomb.jpg", 60_000, 60_000),
        ("bad/bomb.png", 100_000, 100_000),
    ] {
        let err = decode_err(name, &common::read(name), DEFAULT_MAX_PIXELS);
        match err {
            Error::TooLarge {
                key,
                width: w,
                height: h,
                limit,
                ..
            } => {
                assert_eq!(
                    (key.as_str(), w, h, limit),
                    (name, width, height, DEFAULT_MAX_PIXELS)
                );
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn the_pixel_limit_is_configurable() {
    let bytes = common::read("photo_420.jpg");
    assert!(decode("a", &bytes, 160 * 120).is_ok());
    let err = decode_err("a", &bytes, 160 * 120 - 1);
    assert!(
        matches!(err, Error::TooLarge { pixels: 19_200, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("raise max_pixels"), "{err}");
}
