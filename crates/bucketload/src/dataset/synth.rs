//! Synthetic JPEG images: Gaussian noise around a per-class grey level.
//!
//! Pure and synchronous (CPU only). [`ImageShape::search`] picks dimensions and quality once per
//! requested file size; [`encode_sample`] then renders sample `index` of a dataset from a RNG
//! seeded by `(seed, index)`, so the same seed always gives the same bytes.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};

/// Standard deviation of the noise, in grey levels. Large enough that JPEG cannot compress the
/// image much (so the file size is set by the pixel count), small enough that little clips at 0/255.
const NOISE_SIGMA: f64 = 40.0;
/// Class means are spread over [`MEAN_LOW`, `MEAN_HIGH`], clear of the clipping range.
const MEAN_LOW: f64 = 64.0;
const MEAN_HIGH: f64 = 192.0;
/// Qualities tried by the size search, best looking first.
const QUALITIES: [u8; 6] = [90, 85, 80, 75, 70, 60];
/// Smallest side of an image, in pixels.
const MIN_SIDE: u32 = 8;
/// Largest side: JPEG stores dimensions in 16 bits.
const MAX_SIDE: u32 = 16_384;
/// Number of noise values in the lookup table (indexed by a 16-bit random number).
const TABLE_LEN: usize = 1 << 16;

/// Dimensions and quality shared by every image of a dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ImageShape {
    /// Width in pixels.
    pub width: u16,
    /// Height in pixels.
    pub height: u16,
    /// JPEG quality, 1..=100.
    pub quality: u8,
}

/// Zero-mean Gaussian noise, quantised, looked up by 16-bit random indices (much faster than
/// drawing a normal variate per pixel, and just as deterministic).
#[derive(Debug)]
pub struct NoiseTable(Box<[i16]>);

impl NoiseTable {
    /// Builds the table from a fixed seed (Box–Muller over a ChaCha stream).
    pub fn new() -> NoiseTable {
        let mut rng = ChaCha8Rng::seed_from_u64(0x6275_636b_6574);
        let mut values = Vec::with_capacity(TABLE_LEN);
        while values.len() < TABLE_LEN {
            let u1 = (f64::from(rng.next_u32()) + 1.0) / (f64::from(u32::MAX) + 2.0);
            let u2 = f64::from(rng.next_u32()) / (f64::from(u32::MAX) + 1.0);
            let r = (-2.0 * u1.ln()).sqrt() * NOISE_SIGMA;
            let theta = std::f64::consts::TAU * u2;
            // Rounded values lie well within i16 (|N| < 10 sigma).
            values.push((r * theta.cos()).round() as i16);
            values.push((r * theta.sin()).round() as i16);
        }
        NoiseTable(values.into_boxed_slice())
    }
}

impl Default for NoiseTable {
    fn default() -> Self {
        NoiseTable::new()
    }
}

/// The grey level around which class `class` of `classes` is drawn.
pub fn class_mean(class: usize, classes: usize) -> f64 {
    if classes <= 1 {
        return (MEAN_LOW + MEAN_HIGH) / 2.0;
    }
    MEAN_LOW + (MEAN_HIGH - MEAN_LOW) * class as f64 / (classes - 1) as f64
}

/// The RNG of sample `index` of a dataset generated with `seed`.
fn sample_rng(seed: u64, index: u64) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&index.to_le_bytes());
    key[16..24].copy_from_slice(b"bktload1");
    ChaCha8Rng::from_seed(key)
}

/// Renders RGB noise pixels around `mean`.
fn render(table: &NoiseTable, rng: &mut ChaCha8Rng, mean: f64, width: u16, height: u16) -> Vec<u8> {
    let len = usize::from(width) * usize::from(height) * 3;
    let mean = mean.round() as i16;
    let mut pixels = Vec::with_capacity(len + 4);
    while pixels.len() < len {
        let bits = rng.next_u64();
        for shift in [0, 16, 32, 48] {
            let noise = table.0[((bits >> shift) & 0xFFFF) as usize];
            // Clamped to 0..=255 first, so the cast cannot truncate.
            pixels.push((mean + noise).clamp(0, 255) as u8);
        }
    }
    pixels.truncate(len);
    pixels
}

/// Encodes RGB pixels as a baseline JPEG with 4:4:4 sampling (8-pixel blocks, so the file size
/// follows the dimensions closely).
fn encode_rgb(pixels: &[u8], shape: ImageShape) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(pixels.len() / 2);
    let mut encoder = jpeg_encoder::Encoder::new(&mut out, shape.quality);
    encoder.set_sampling_factor(jpeg_encoder::SamplingFactor::F_1_1);
    encoder
        .encode(
            pixels,
            shape.width,
            shape.height,
            jpeg_encoder::ColorType::Rgb,
        )
        .map_err(|e| Error::Encode {
            reason: e.to_string(),
        })?;
    Ok(out)
}

/// Encodes sample `index` of class `class` (of `classes`) for `seed`.
pub fn encode_sample(
    table: &NoiseTable,
    shape: ImageShape,
    seed: u64,
    index: u64,
    class: usize,
    classes: usize,
) -> Result<Vec<u8>> {
    let mut rng = sample_rng(seed, index);
    let pixels = render(
        table,
        &mut rng,
        class_mean(class, classes),
        shape.width,
        shape.height,
    );
    encode_rgb(&pixels, shape)
}

impl ImageShape {
    /// Finds dimensions and a quality whose JPEGs come closest to `target` bytes.
    ///
    /// For each quality in a short list, a binary search over the pixel count (square, or one
    /// pixel taller) finds the closest size, averaged over probe images of the lowest, middle and
    /// highest class level; the first quality within 2% wins, else the closest overall. Probes use
    /// a fixed seed, so the shape depends only on `target` and `classes`.
    pub fn search(table: &NoiseTable, target: u64, classes: usize) -> Result<ImageShape> {
        let mut best: Option<(ImageShape, f64)> = None;
        for quality in QUALITIES {
            let (shape, size) = search_quality(table, target, classes, quality)?;
            let error = (size - target as f64).abs() / target as f64;
            if best.is_none_or(|(_, e)| error < e) {
                best = Some((shape, error));
            }
            if error < 0.02 {
                break;
            }
        }
        let (shape, _) = best.ok_or_else(|| Error::invalid_input("no JPEG quality to search"))?;
        Ok(shape)
    }
}

/// Shape of search step `k`: (s, s) for even k, (s, s + 1) for odd k, with s = MIN_SIDE + k / 2;
/// the pixel count grows with k.
fn step_shape(k: u32, quality: u8) -> ImageShape {
    let side = MIN_SIDE + k / 2;
    // side < MAX_SIDE by the search bounds, so it fits u16.
    ImageShape {
        width: side as u16,
        height: (side + k % 2) as u16,
        quality,
    }
}

/// Mean encoded size of the probe images for `shape`.
fn probe_size(table: &NoiseTable, shape: ImageShape, classes: usize) -> Result<f64> {
    let probes = [0, classes / 2, classes.saturating_sub(1)];
    let mut total = 0usize;
    for (i, class) in probes.iter().enumerate() {
        total += encode_sample(table, shape, 0x5eed, i as u64, *class, classes)?.len();
    }
    Ok(total as f64 / probes.len() as f64)
}

fn search_quality(
    table: &NoiseTable,
    target: u64,
    classes: usize,
    quality: u8,
) -> Result<(ImageShape, f64)> {
    let target = target as f64;
    let max_k = 2 * (MAX_SIDE - MIN_SIDE) - 1;
    // Exponential search for an upper bound first: probes stay small for small targets.
    let (mut lo, mut hi) = (0u32, 1u32);
    while hi < max_k && probe_size(table, step_shape(hi, quality), classes)? < target {
        lo = hi + 1;
        hi = (hi * 2).min(max_k);
    }
    // Smallest k whose size reaches the target.
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if probe_size(table, step_shape(mid, quality), classes)? < target {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let above = (
        step_shape(lo, quality),
        probe_size(table, step_shape(lo, quality), classes)?,
    );
    if lo == 0 {
        return Ok(above);
    }
    let below_shape = step_shape(lo - 1, quality);
    let below = (below_shape, probe_size(table, below_shape, classes)?);
    Ok(if (below.1 - target).abs() < (above.1 - target).abs() {
        below
    } else {
        above
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::jpeg::parse_header;

    #[test]
    fn search_lands_close_to_the_target_size() {
        let table = NoiseTable::new();
        for target in [20_000u64, 100_000] {
            let shape = ImageShape::search(&table, target, 10).unwrap();
            for (index, class) in [(0u64, 0usize), (1, 5), (2, 9)] {
                let len = encode_sample(&table, shape, 7, index, class, 10)
                    .unwrap()
                    .len() as f64;
                let error = (len - target as f64).abs() / target as f64;
                assert!(error < 0.10, "target {target}: {len} bytes with {shape:?}");
            }
        }
    }

    #[test]
    fn samples_are_deterministic_and_distinct() {
        let table = NoiseTable::new();
        let shape = ImageShape {
            width: 32,
            height: 24,
            quality: 85,
        };
        let a = encode_sample(&table, shape, 1, 5, 2, 4).unwrap();
        assert_eq!(a, encode_sample(&table, shape, 1, 5, 2, 4).unwrap());
        assert_ne!(a, encode_sample(&table, shape, 2, 5, 2, 4).unwrap());
        assert_ne!(a, encode_sample(&table, shape, 1, 6, 2, 4).unwrap());
        let info = parse_header(&a).unwrap();
        assert_eq!((info.width, info.height), (32, 24));
    }

    #[test]
    fn class_levels_are_spread_and_ordered() {
        assert_eq!(class_mean(0, 1), 128.0);
        assert_eq!(class_mean(0, 3), MEAN_LOW);
        assert_eq!(class_mean(2, 3), MEAN_HIGH);
        assert!(class_mean(1, 3) > class_mean(0, 3));
    }

    #[test]
    fn noise_table_is_centred_with_the_chosen_spread() {
        let table = NoiseTable::new();
        let n = table.0.len() as f64;
        let mean = table.0.iter().map(|v| f64::from(*v)).sum::<f64>() / n;
        let var = table
            .0
            .iter()
            .map(|v| (f64::from(*v) - mean).powi(2))
            .sum::<f64>()
            / n;
        assert!(mean.abs() < 1.0, "mean {mean}");
        assert!(
            (var.sqrt() - NOISE_SIGMA).abs() < 1.0,
            "sigma {}",
            var.sqrt()
        );
    }
}
