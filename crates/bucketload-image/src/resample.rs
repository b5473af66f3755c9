//! The fused kernel: crop, resize, window, flip, normalise and layout change in two passes.
//!
//! A [`ResamplePlan`] says which source box is resized to which size, which window of the
//! resized image is kept (the centre crop of `Resize` + `CenterCrop`, or all of it), and
//! whether it is mirrored. [`resample`] then runs:
//!
//! 1. a horizontal pass over only the source rows the vertical taps touch, each reduced to the
//!    output width (8-bit, as PyTorch's uint8 path rounds between its two passes);
//! 2. a vertical pass per output row, whose 8-bit result is written once, mirrored if asked,
//!    either interleaved (HWC `u8`) or through a per-channel lookup table straight into the
//!    three planes of a normalised CHW `f32` tensor.
//!
//! Weights follow PyTorch's separable uint8 interpolation (`upsample_bilinear2d` and
//! `_upsample_bilinear2d_aa` on CPU): triangle filter on pixel centres, optional antialias
//! (filter support widened by the scale when shrinking), weights normalised per output pixel
//! and quantised to `i16` with the largest precision that fits. The result matches
//! torchvision's to within one grey level (tests/image_torchvision.rs states the bound).

/// Where the pixels of one output image come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResamplePlan {
    /// Source box: left column, top row, width and height, inside the source image.
    pub crop: CropBox,
    /// Size the box is resized to: (height, width).
    pub resized: (u32, u32),
    /// Window of the resized image that is kept: top row and left column; its size is the
    /// output size.
    pub window: (u32, u32),
    /// Output size: (height, width).
    pub output: (u32, u32),
    /// Mirror left-right.
    pub flip: bool,
    /// Widen the filter when shrinking (torchvision's `antialias=True`).
    pub antialias: bool,
}

/// A rectangle of source pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CropBox {
    /// Left column.
    pub x: u32,
    /// Top row.
    pub y: u32,
    /// Width in pixels, at least 1.
    pub width: u32,
    /// Height in pixels, at least 1.
    pub height: u32,
}

/// Where [`resample`] writes one image.
#[derive(Debug)]
pub enum Sink<'a, 'l> {
    /// Interleaved RGB bytes, `height * width * 3`.
    HwcU8(&'a mut [u8]),
    /// Three planes of `height * width` floats, each byte `v` of channel `c` written as
    /// `v * scale[c] + bias[c]` (one fused multiply-add).
    ChwF32 {
        /// The output planes, R then G then B.
        out: &'a mut [f32],
        /// The normalisation.
        norm: &'l Normalize,
    },
}

/// `Normalize(mean, std)` of pixels scaled to [0, 1], as one multiply-add per value:
/// `v * scale + bias` with `scale = 1 / (255 std)` and `bias = -mean / std`. It differs from
/// torchvision's `(v / 255 - mean) / std` by at most a few units in the last place (below
/// 1e-6), far under the 0.017 one grey level is worth after normalisation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalize {
    /// Per-channel factor.
    pub scale: [f32; 3],
    /// Per-channel offset.
    pub bias: [f32; 3],
}

impl Normalize {
    /// The normalisation with these channel means and standard deviations.
    pub fn new(mean: [f32; 3], std: [f32; 3]) -> Normalize {
        let scale = std::array::from_fn(|c| (1.0 / (255.0 * f64::from(std[c]))) as f32);
        let bias = std::array::from_fn(|c| (-f64::from(mean[c]) / f64::from(std[c])) as f32);
        Normalize { scale, bias }
    }
}

/// Fixed-point taps of one axis: for output index `i`, source indices
/// `start[i] .. start[i] + taps` weighted by `weights[i * taps ..][..taps]`. Kept in
/// [`Scratch`] and rebuilt in place for each image.
#[derive(Debug, Default)]
struct Axis {
    start: Vec<u32>,
    weights: Vec<i16>,
    taps: usize,
    precision: u32,
    /// Per output: first source index (relative to the box's integer origin) and the number of
    /// real weights in `real`.
    span: Vec<(i64, usize)>,
    /// Real weights, `window` per output.
    real: Vec<f64>,
}

/// One axis of a source box: `len` source pixels from `origin` (both may be fractional, when
/// the source is a DCT-scaled decode), of which the source holds indices `0 .. limit`.
#[derive(Debug, Clone, Copy)]
struct Span {
    origin: f64,
    len: f64,
    limit: u32,
}

impl Axis {
    /// Taps of outputs `first .. first + count` of resizing `span` to `out_size`. Zero weights
    /// at either end are trimmed, so plain bilinear has two taps.
    ///
    /// Taps are clamped to the box (PyTorch crops, then resizes) and to the source. With an
    /// integer origin the arithmetic is PyTorch's, operation for operation, relative to the box.
    fn build(&mut self, span: Span, out_size: u32, first: u32, count: u32, aa: bool) {
        let scale = span.len / f64::from(out_size);
        let widen = aa && scale >= 1.0;
        let support = if widen { scale } else { 1.0 };
        let invscale = if widen { 1.0 / scale } else { 1.0 };
        let base = span.origin.floor();
        let frac = span.origin - base;
        // A box origin is at most 65,535 (JPEG dimensions are 16-bit) and at least -1.
        let base = base as i64;
        let lo = (-base).max(0);
        let hi = ((frac + span.len).ceil() as i64).min(i64::from(span.limit) - base);
        // Triangle support plus the truncations on either side.
        let window = (2.0 * support).ceil() as usize + 2;
        self.span.clear();
        self.real.clear();
        self.real.resize(count as usize * window, 0.0);
        let mut taps = 1;
        for (k, i) in (first..first + count).enumerate() {
            let w = &mut self.real[k * window..(k + 1) * window];
            let (xmin, n) = output_taps(
                lo,
                hi,
                frac + scale * (f64::from(i) + 0.5),
                support,
                invscale,
                w,
            );
            taps = taps.max(n);
            self.span.push((xmin, n));
        }
        self.taps = taps;
        self.start.clear();
        let mut max = 0f64;
        for (k, &(xmin, n)) in self.span.iter().enumerate() {
            // Keep `taps` indices inside the box: shift left and pad with leading zeros.
            let s = xmin.min(hi - taps as i64).max(lo);
            let pad = (xmin - s) as usize;
            let w = &mut self.real[k * window..(k + 1) * window];
            w.copy_within(0..n, pad);
            w[..pad].fill(0.0);
            w[pad + n..].fill(0.0);
            max = w[..taps].iter().fold(max, |m, v| m.max(*v));
            // `s >= lo >= -base`, so the index is not negative, and below `limit`.
            self.start.push((base + s) as u32);
        }
        let precision = precision_for(max);
        let one = f64::from(1u32 << precision);
        self.weights.clear();
        for k in 0..self.span.len() {
            self.weights
                .extend(self.real[k * window..k * window + taps].iter().map(|w| {
                    let v = w * one;
                    // |w| <= max and max * 2^precision < 2^15 by `precision_for`, so this fits.
                    (if v < 0.0 { v - 0.5 } else { v + 0.5 }) as i16
                }));
        }
        self.precision = precision;
    }

    fn taps_of(&self, k: usize) -> &[i16] {
        &self.weights[k * self.taps..(k + 1) * self.taps]
    }
}

/// Writes the normalised triangle-filter weights of the output centred on `center` into `w`,
/// without zero weights at either end; returns the first source index and their count.
/// Indices are relative to the box's integer origin and clamped to `lo .. hi`.
fn output_taps(
    lo: i64,
    hi: i64,
    center: f64,
    support: f64,
    invscale: f64,
    w: &mut [f64],
) -> (i64, usize) {
    // Truncation towards zero, as PyTorch's int64 cast.
    let xmin = ((center - support + 0.5) as i64).clamp(lo, hi - 1);
    let xmax = ((center + support + 0.5) as i64).min(hi).max(xmin + 1);
    let n = ((xmax - xmin) as usize).min(w.len());
    let mut total = 0.0;
    for (k, v) in w[..n].iter_mut().enumerate() {
        let j = (xmin + k as i64) as f64;
        *v = (1.0 - ((j - center + 0.5) * invscale).abs()).max(0.0);
        total += *v;
    }
    if total != 0.0 {
        w[..n].iter_mut().for_each(|v| *v /= total);
    }
    let lead = w[..n].iter().take_while(|v| **v == 0.0).count().min(n - 1);
    let trail = w[lead..n]
        .iter()
        .rev()
        .take_while(|v| **v == 0.0)
        .count()
        .min(n - lead - 1);
    w.copy_within(lead..n - trail, 0);
    (xmin + lead as i64, n - lead - trail)
}

/// PyTorch's choice: the largest precision (< 15 bits) at which `max * 2^(p+1)` still fits
/// `i16` rounding.
fn precision_for(max: f64) -> u32 {
    let mut precision = 0;
    while precision < 15 {
        let next = (0.5 + max * f64::from(1u32 << (precision + 1))) as i64;
        if next >= 1 << 15 {
            break;
        }
        precision += 1;
    }
    precision
}

/// Scratch buffers of [`resample`], reused across images by one thread.
#[derive(Debug, Default)]
pub struct Scratch {
    xs: Axis,
    ys: Axis,
    rows: Vec<u8>,
    ready: Vec<bool>,
    acc: Vec<i32>,
    line: Vec<u8>,
    pair: PairTaps,
}

/// The two-tap horizontal pass laid out for vectorising: per output pixel (already mirrored)
/// the source byte offset of its left tap and both weights. A row is first gathered with one
/// 8-byte load per output pixel, split into `left` = the left tap's R, G, B (and a byte of
/// the right tap) and `right` = the right tap's R, G, B, then each channel is blended in
/// one contiguous loop that shifts its byte out of those words.
#[derive(Debug, Default)]
struct PairTaps {
    offsets: Vec<u32>,
    w0: Vec<i32>,
    w1: Vec<i32>,
    left: Vec<u32>,
    right: Vec<u32>,
}

impl PairTaps {
    fn prepare(&mut self, xs: &Axis, flip: bool) {
        let ow = xs.start.len();
        self.offsets.clear();
        self.w0.clear();
        self.w1.clear();
        for x in 0..ow {
            let k = if flip { ow - 1 - x } else { x };
            self.offsets.push(xs.start[k] * 3);
            self.w0.push(i32::from(xs.weights[2 * k]));
            self.w1.push(i32::from(xs.weights[2 * k + 1]));
        }
        self.left.resize(ow, 0);
        self.right.resize(ow, 0);
    }

    #[inline(always)]
    fn run(&mut self, src: &[u8], precision: u32, out: &mut [u8]) {
        let ow = self.offsets.len();
        for ((&at, l), r) in self.offsets.iter().zip(&mut self.left).zip(&mut self.right) {
            let at = at as usize;
            (*l, *r) = match src.get(at..at + 7) {
                Some(p) => (word(&p[..4]), word(&p[3..7])),
                // The last pixel pair of the row: no byte after it.
                None => {
                    let p = &src[at..at + 6];
                    (word(&[p[0], p[1], p[2], 0]), word(&[p[3], p[4], p[5], 0]))
                }
            };
        }
        let round = 1i32 << precision >> 1;
        for (c, plane) in out.chunks_exact_mut(ow).enumerate() {
            let shift = 8 * c as u32;
            let weights = self.w0.iter().zip(&self.w1);
            let pixels = self.left.iter().zip(&self.right);
            for (o, ((&w0, &w1), (&l, &r))) in plane.iter_mut().zip(weights.zip(pixels)) {
                let (a, b) = ((l >> shift & 0xFF) as i32, (r >> shift & 0xFF) as i32);
                *o = clamp_shift(round + w0 * a + w1 * b, precision);
            }
        }
    }
}

/// Four bytes as a little-endian word (one unaligned load).
#[inline(always)]
fn word(bytes: &[u8]) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(bytes);
    u32::from_le_bytes(w)
}

/// Resamples the RGB `pixels` (`width` columns, interleaved) along `plan` into `sink`.
///
/// Reduced rows are planar (`ow` reds, `ow` greens, `ow` blues) and already mirrored, so the
/// vertical pass is one contiguous loop and the store a contiguous table lookup per plane.
///
/// # Panics
/// If the plan's crop box lies outside the source, or the sink is not `output` sized.
pub fn resample(
    pixels: &[u8],
    width: u32,
    plan: &ResamplePlan,
    sink: Sink<'_, '_>,
    s: &mut Scratch,
) {
    let c = plan.crop;
    let source = Source {
        pixels,
        width,
        height: (pixels.len() / (width as usize * 3).max(1)) as u32,
        x: f64::from(c.x),
        y: f64::from(c.y),
        box_width: f64::from(c.width),
        box_height: f64::from(c.height),
    };
    resample_from(&source, plan, sink, s);
}

/// Interleaved RGB rows and the box of a plan in their coordinates. The box is the plan's
/// crop box, moved and scaled when the pixels are a region of the image decoded at a DCT
/// scale, so its corners may be fractional.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source<'a> {
    /// `width * height * 3` bytes (or more).
    pub pixels: &'a [u8],
    pub width: u32,
    pub height: u32,
    pub x: f64,
    pub y: f64,
    pub box_width: f64,
    pub box_height: f64,
}

/// [`resample`] from a [`Source`], with the box of the plan replaced by the source's.
pub(crate) fn resample_from(
    source: &Source<'_>,
    plan: &ResamplePlan,
    sink: Sink<'_, '_>,
    s: &mut Scratch,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        return crate::simd::resample_avx2(source, plan, sink, s);
    }
    resample_portable(source, plan, sink, s);
}

/// The body of [`resample`]; inlined into a copy compiled for AVX2 where the CPU has it.
#[inline(always)]
pub(crate) fn resample_portable(
    source: &Source<'_>,
    plan: &ResamplePlan,
    sink: Sink<'_, '_>,
    s: &mut Scratch,
) {
    let (oh, ow) = plan.output;
    let (rh, rw) = plan.resized;
    let (top, left) = plan.window;
    let xspan = Span {
        origin: source.x,
        len: source.box_width,
        limit: source.width,
    };
    let yspan = Span {
        origin: source.y,
        len: source.box_height,
        limit: source.height,
    };
    s.xs.build(xspan, rw, left, ow, plan.antialias);
    s.ys.build(yspan, rh, top, oh, plan.antialias);
    let (xs, ys) = (&s.xs, &s.ys);
    let first_row = ys.start.first().copied().unwrap_or(0) as usize;
    let last_row = ys.start.last().map_or(first_row, |s| *s as usize + ys.taps);
    let row_len = ow as usize * 3;
    s.rows.resize((last_row - first_row) * row_len, 0);
    s.ready.clear();
    s.ready.resize(last_row - first_row, false);
    s.line.resize(row_len, 0);
    let stride = source.width as usize * 3;
    let paired = xs.taps == 2;
    if paired {
        s.pair.prepare(xs, plan.flip);
    }
    let pixels = source.pixels;
    let mut sink = sink;
    for (y, &start) in ys.start.iter().enumerate() {
        let start = start as usize;
        for r in start..start + ys.taps {
            if !s.ready[r - first_row] {
                let src = &pixels[r * stride..(r + 1) * stride];
                let out = &mut s.rows[(r - first_row) * row_len..][..row_len];
                if paired {
                    s.pair.run(src, xs.precision, out);
                } else {
                    horizontal(src, xs, plan.flip, out);
                }
                s.ready[r - first_row] = true;
            }
        }
        let rows = &s.rows[(start - first_row) * row_len..][..ys.taps * row_len];
        vertical(rows, ys.taps_of(y), ys.precision, &mut s.acc, &mut s.line);
        store(&s.line, y, plan, &mut sink);
    }
}

/// One source row reduced to the output width, as three planes, mirrored if `flip`.
#[inline(always)]
fn horizontal(src: &[u8], xs: &Axis, flip: bool, out: &mut [u8]) {
    let ow = xs.start.len();
    let (reds, rest) = out.split_at_mut(ow);
    let (greens, blues) = rest.split_at_mut(ow);
    let planes = Planes {
        reds,
        greens,
        blues,
        flip,
    };
    horizontal_n(src, xs, planes);
}

struct Planes<'a> {
    reds: &'a mut [u8],
    greens: &'a mut [u8],
    blues: &'a mut [u8],
    flip: bool,
}

impl Planes<'_> {
    #[inline(always)]
    fn put(&mut self, k: usize, rgb: [i32; 3], precision: u32) {
        let o = if self.flip {
            self.reds.len() - 1 - k
        } else {
            k
        };
        self.reds[o] = clamp_shift(rgb[0], precision);
        self.greens[o] = clamp_shift(rgb[1], precision);
        self.blues[o] = clamp_shift(rgb[2], precision);
    }
}

#[inline(always)]
fn horizontal_n(src: &[u8], xs: &Axis, mut out: Planes<'_>) {
    let round = 1i32 << xs.precision >> 1;
    for k in 0..xs.start.len() {
        let at = xs.start[k] as usize * 3;
        let taps = xs.taps_of(k);
        let px = &src[at..at + taps.len() * 3];
        let mut rgb = [round; 3];
        for (&w, p) in taps.iter().zip(px.chunks_exact(3)) {
            let w = i32::from(w);
            rgb[0] += w * i32::from(p[0]);
            rgb[1] += w * i32::from(p[1]);
            rgb[2] += w * i32::from(p[2]);
        }
        out.put(k, rgb, xs.precision);
    }
}

#[inline(always)]
fn clamp_shift(v: i32, precision: u32) -> u8 {
    // Clamped to 0..=255 first, so the cast cannot truncate.
    (v >> precision).clamp(0, 255) as u8
}

/// Blends `weights.len()` consecutive reduced rows (each `line.len()` bytes) into `line`.
#[inline(always)]
fn vertical(rows: &[u8], weights: &[i16], precision: u32, acc: &mut Vec<i32>, line: &mut [u8]) {
    let n = line.len();
    let round = 1i32 << precision >> 1;
    match *weights {
        [w0] => {
            let w0 = i32::from(w0);
            for (o, &a) in line.iter_mut().zip(&rows[..n]) {
                *o = clamp_shift(round + w0 * i32::from(a), precision);
            }
        }
        [w0, w1] => {
            let (w0, w1) = (i32::from(w0), i32::from(w1));
            let (r0, r1) = rows.split_at(n);
            for ((o, &a), &b) in line.iter_mut().zip(r0).zip(r1) {
                *o = clamp_shift(round + w0 * i32::from(a) + w1 * i32::from(b), precision);
            }
        }
        _ => {
            acc.clear();
            acc.resize(n, round);
            for (&w, row) in weights.iter().zip(rows.chunks_exact(n)) {
                let w = i32::from(w);
                for (a, &p) in acc.iter_mut().zip(row) {
                    *a += w * i32::from(p);
                }
            }
            for (o, &a) in line.iter_mut().zip(acc.iter()) {
                *o = clamp_shift(a, precision);
            }
        }
    }
}

/// Writes output row `y` (three planes in `line`) into the sink.
#[inline(always)]
fn store(line: &[u8], y: usize, plan: &ResamplePlan, sink: &mut Sink<'_, '_>) {
    let (oh, ow) = (plan.output.0 as usize, plan.output.1 as usize);
    let (reds, rest) = line.split_at(ow);
    let (greens, blues) = rest.split_at(ow);
    match sink {
        Sink::HwcU8(out) => {
            let dst = &mut out[y * ow * 3..(y + 1) * ow * 3];
            for (((d, &r), &g), &b) in dst.chunks_exact_mut(3).zip(reds).zip(greens).zip(blues) {
                d.copy_from_slice(&[r, g, b]);
            }
        }
        Sink::ChwF32 { out, norm } => {
            let plane = oh * ow;
            for (c, src) in [reds, greens, blues].into_iter().enumerate() {
                let (scale, bias) = (norm.scale[c], norm.bias[c]);
                let dst = &mut out[c * plane + y * ow..c * plane + (y + 1) * ow];
                dst.iter_mut()
                    .zip(src)
                    .for_each(|(d, &v)| *d = f32::from(v).mul_add(scale, bias));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(crop: CropBox, out: (u32, u32)) -> ResamplePlan {
        ResamplePlan {
            crop,
            resized: out,
            window: (0, 0),
            output: out,
            flip: false,
            antialias: false,
        }
    }

    #[test]
    fn identity_copies_the_box() {
        let pixels: Vec<u8> = (0..6 * 5 * 3).map(|v| v as u8).collect();
        let crop = CropBox {
            x: 1,
            y: 2,
            width: 4,
            height: 3,
        };
        let mut out = vec![0u8; 3 * 4 * 3];
        resample(
            &pixels,
            6,
            &plan(crop, (3, 4)),
            Sink::HwcU8(&mut out),
            &mut Scratch::default(),
        );
        for y in 0..3 {
            let src = ((y + 2) * 6 + 1) * 3;
            assert_eq!(&out[y * 12..(y + 1) * 12], &pixels[src..src + 12]);
        }
    }

    #[test]
    fn upscaling_by_two_interpolates_midpoints() {
        // One row 0, 100: bilinear x2 on pixel centres gives 0, 25, 75, 100.
        let pixels = [0, 0, 0, 100, 100, 100];
        let crop = CropBox {
            x: 0,
            y: 0,
            width: 2,
            height: 1,
        };
        let mut out = vec![0u8; 4 * 3];
        resample(
            &pixels,
            2,
            &plan(crop, (1, 4)),
            Sink::HwcU8(&mut out),
            &mut Scratch::default(),
        );
        let reds: Vec<u8> = out.iter().step_by(3).copied().collect();
        assert_eq!(reds, [0, 25, 75, 100]);
    }

    #[test]
    fn flip_and_chw_planes() {
        let pixels = [1, 2, 3, 4, 5, 6];
        let crop = CropBox {
            x: 0,
            y: 0,
            width: 2,
            height: 1,
        };
        let norm = Normalize {
            scale: [10.0, 100.0, 1.0],
            bias: [0.5, 0.0, -1.0],
        };
        let mut out = vec![0f32; 6];
        let mut p = plan(crop, (1, 2));
        p.flip = true;
        resample(
            &pixels,
            2,
            &p,
            Sink::ChwF32 {
                out: &mut out,
                norm: &norm,
            },
            &mut Scratch::default(),
        );
        assert_eq!(out, [40.5, 10.5, 500.0, 200.0, 5.0, 2.0]);
    }

    #[test]
    fn precision_matches_pytorch_rule() {
        assert_eq!(precision_for(1.0), 14);
        assert_eq!(precision_for(0.5), 15);
    }
}
