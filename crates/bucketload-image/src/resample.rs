//! The fused kernel: crop, resize, window, flip, normalise and layout change in two passes.
//!
//! A [`ResamplePlan`] says which source box is resized to which size, which window of the
//! resized image is kept (the centre crop of `Resize` + `CenterCrop`, or all of it), and
//! whether it is mirrored. [`resample`] then runs:
//!
//! 1. a horizontal pass over only the source rows the vertical taps touch, each reduced to the
//!    output width, mirrored if asked, as one packed word per pixel (8-bit channels, as
//!    PyTorch's uint8 path rounds between its two passes), into a ring of as many rows as the
//!    vertical filter has taps, which stays in L1;
//! 2. a vertical pass per output row, whose 8-bit result is written once: interleaved (HWC
//!    `u8`), or as `v * scale + bias` straight into the three planes of a normalised CHW `f32`
//!    tensor.
//!
//! The two-tap (plain bilinear) loops of both passes have AVX2 versions in `simd.rs`, chosen
//! at run time; the `Kernels` trait is the seam, and a test checks the two agree exactly.
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
/// `start[i] .. start[i] + taps` weighted by `weights[i * taps ..][..taps]`, counted from the
/// span's [`shift`](Span::shift) (so that boxes at different places share taps). Kept in
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
    /// Per output of [`Axis::build_narrow`]: first index, real weight count, real weights.
    narrow: Vec<(i64, usize, [f64; 4])>,
}

/// One axis of a source box: `len` source pixels from `origin` (both may be fractional, when
/// the source is a DCT-scaled decode), of which the source holds indices `0 .. limit`.
#[derive(Debug, Clone, Copy)]
struct Span {
    origin: f64,
    len: f64,
    limit: u32,
}

impl Span {
    /// Where an axis's taps are counted from: the box's integer origin, or 0 for a box
    /// starting left of the source (after DCT scaling, by less than a pixel).
    fn shift(&self) -> usize {
        // At most 65,535 (JPEG dimensions are 16-bit).
        self.origin.floor().max(0.0) as usize
    }
}

impl Axis {
    /// Taps of outputs `first .. first + count` of resizing `span` to `out_size`. Zero weights
    /// at either end are trimmed, so plain bilinear has two taps.
    ///
    /// Taps are clamped to the box (PyTorch crops, then resizes) and to the source. With an
    /// integer origin the arithmetic is PyTorch's, operation for operation, relative to the box.
    fn build(&mut self, span: Span, out_size: u32, first: u32, count: u32, aa: bool) {
        let scale = span.len / f64::from(out_size);
        if aa && scale >= 1.0 {
            return self.build_general(span, out_size, first, count, aa);
        }
        let base = span.origin.floor();
        let frac = span.origin - base;
        // A box origin is at most 65,535 (JPEG dimensions are 16-bit) and at least -1.
        let base = base as i64;
        let lo = (-base).max(0);
        let hi = ((frac + span.len).ceil() as i64).min(i64::from(span.limit) - base);
        self.build_narrow(frac, scale, base, lo..hi, first..first + count);
    }

    /// [`build`](Self::build) for any support.
    fn build_general(&mut self, span: Span, out_size: u32, first: u32, count: u32, aa: bool) {
        let scale = span.len / f64::from(out_size);
        let widen = aa && scale >= 1.0;
        let support = if widen { scale } else { 1.0 };
        let invscale = if widen { 1.0 / scale } else { 1.0 };
        let base = span.origin.floor();
        let frac = span.origin - base;
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
            let w = &mut self.real[k * window..(k + 1) * window];
            let s = place(xmin, n, w, taps, lo..hi, &mut max);
            // `s >= lo >= -base`, so the index is not negative, and below `limit`.
            self.start.push((base + s - base.max(0)) as u32);
        }
        let precision = precision_for(max);
        self.weights.clear();
        for k in 0..self.span.len() {
            let w = &self.real[k * window..k * window + taps];
            self.weights
                .extend(w.iter().map(|w| quantise(*w, precision)));
        }
        self.precision = precision;
    }

    /// [`build`](Self::build) for support 1 (plain bilinear, or antialias when enlarging):
    /// the same arithmetic, operation for operation, with each output's (at most four) real
    /// weights kept in a fixed array instead of a shared buffer. About half the work of the
    /// general path, which matters because it runs for both axes of every image.
    fn build_narrow(
        &mut self,
        frac: f64,
        scale: f64,
        base: i64,
        bounds: std::ops::Range<i64>,
        outputs: std::ops::Range<u32>,
    ) {
        let (lo, hi) = (bounds.start, bounds.end);
        self.narrow.clear();
        let mut taps = 1;
        for i in outputs {
            let center = frac + scale * (f64::from(i) + 0.5);
            let (xmin, n, w) = narrow_taps(lo, hi, center);
            taps = taps.max(n);
            self.narrow.push((xmin, n, w));
        }
        self.taps = taps;
        self.start.clear();
        let mut max = 0f64;
        for (xmin, _, w) in &mut self.narrow {
            // `place`, on a fixed array: shifted left to stay inside the bounds, padded with
            // leading zeros (`pad + n <= taps <= 4`, as `place` explains).
            let s = (*xmin).min(hi - taps as i64).max(lo);
            let pad = (*xmin - s) as usize;
            let placed = shift_right(*w, pad);
            *w = placed;
            max = placed[..taps]
                .iter()
                .fold(max, |m, &v| if v > m { v } else { m });
            // `s >= lo >= -base`, so the index is not negative, and below `limit`.
            self.start.push((base + s - base.max(0)) as u32);
        }
        let precision = precision_for(max);
        self.weights.clear();
        for (_, _, w) in &self.narrow {
            self.weights
                .extend(w[..taps].iter().map(|w| quantise(*w, precision)));
        }
        self.precision = precision;
    }

    /// The built taps without the building scratch.
    fn taps_only(&self) -> Axis {
        Axis {
            start: self.start.clone(),
            weights: self.weights.clone(),
            taps: self.taps,
            precision: self.precision,
            ..Axis::default()
        }
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
    // Dividing by exactly 1 (plain bilinear, away from the edges) changes nothing.
    if total != 0.0 && total != 1.0 {
        w[..n].iter_mut().for_each(|v| *v /= total);
    }
    let (lead, count) = nonzero(&w[..n]);
    w.copy_within(lead..lead + count, 0);
    (xmin + lead as i64, count)
}

/// The weights `w` (at least one) without zeros at either end, as their first index and
/// count; at least one is kept.
#[inline(always)]
fn nonzero(w: &[f64]) -> (usize, usize) {
    let n = w.len();
    let lead = w.iter().take_while(|v| **v == 0.0).count().min(n - 1);
    let trail = w[lead..]
        .iter()
        .rev()
        .take_while(|v| **v == 0.0)
        .count()
        .min(n - lead - 1);
    (lead, n - lead - trail)
}

/// [`output_taps`] for support 1 and an unchanged scale, on a fixed array: the same
/// arithmetic, operation for operation (adding or dividing the zeros past `n` changes
/// nothing), without the general path's slice copies. Returns the first index, the count and
/// the weights from the first.
#[inline(always)]
fn narrow_taps(lo: i64, hi: i64, center: f64) -> (i64, usize, [f64; 4]) {
    let xmin = ((center - 1.0 + 0.5) as i64).clamp(lo, hi - 1);
    let xmax = ((center + 1.0 + 0.5) as i64).min(hi).max(xmin + 1);
    let n = ((xmax - xmin) as usize).min(4);
    let mut w = [0f64; 4];
    let mut total = 0.0;
    for (k, v) in w.iter_mut().enumerate().take(n) {
        let j = (xmin + k as i64) as f64;
        *v = (1.0 - (j - center + 0.5).abs()).max(0.0);
        total += *v;
    }
    if total != 0.0 && total != 1.0 {
        w.iter_mut().for_each(|v| *v /= total);
    }
    let (lead, count) = nonzero(&w[..n]);
    (xmin + lead as i64, count, shift_left(w, lead))
}

/// `w` moved `by` places towards the front, zeros filling in. Whole-array moves with fixed
/// indices, which stay in registers; writing elements at a computed index and reading the
/// array back as vectors stalls on store forwarding.
#[inline(always)]
fn shift_left([a, b, c, d]: [f64; 4], by: usize) -> [f64; 4] {
    match by {
        0 => [a, b, c, d],
        1 => [b, c, d, 0.0],
        2 => [c, d, 0.0, 0.0],
        3 => [d, 0.0, 0.0, 0.0],
        _ => [0.0; 4],
    }
}

/// `w` moved `by` places towards the back, zeros filling in.
#[inline(always)]
fn shift_right([a, b, c, d]: [f64; 4], by: usize) -> [f64; 4] {
    match by {
        0 => [a, b, c, d],
        1 => [0.0, a, b, c],
        2 => [0.0, 0.0, a, b],
        3 => [0.0, 0.0, 0.0, a],
        _ => [0.0; 4],
    }
}

/// Places one output's `n` real weights (from index `xmin`, in `w`) so that its `taps`
/// indices stay inside `bounds`: shifted left, padded with leading zeros. Returns the first
/// index and raises `max` to the largest weight.
#[inline(always)]
fn place(
    xmin: i64,
    n: usize,
    w: &mut [f64],
    taps: usize,
    bounds: std::ops::Range<i64>,
    max: &mut f64,
) -> i64 {
    let s = xmin.min(bounds.end - taps as i64).max(bounds.start);
    let pad = (xmin - s) as usize;
    w.copy_within(0..n, pad);
    w[..pad].fill(0.0);
    w[pad + n..].fill(0.0);
    *max = w[..taps]
        .iter()
        .fold(*max, |m, &v| if v > m { v } else { m });
    s
}

/// A real weight in fixed point at `precision` bits, rounded half away from zero.
#[inline(always)]
fn quantise(w: f64, precision: u32) -> i16 {
    let v = w * f64::from(1u32 << precision);
    // |w| <= max and max * 2^precision < 2^15 by `precision_for`, so this fits.
    (if v < 0.0 { v - 0.5 } else { v + 0.5 }) as i16
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

/// Everything [`Axis::build`] depends on, so equal keys give equal taps: the fraction of the
/// box's origin, the integer part only when negative (taps counted from its
/// [`shift`](Span::shift), a box's place in the source does not matter otherwise), its
/// length, the end the taps are clamped to (the only way the source's size enters), and the
/// output's size, window and filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct AxisKey {
    frac: u64,
    below: i64,
    len: u64,
    end: i64,
    out_size: u32,
    first: u32,
    count: u32,
    aa: bool,
}

impl AxisKey {
    fn new(span: Span, out_size: u32, first: u32, count: u32, aa: bool) -> AxisKey {
        let base = span.origin.floor();
        // As in `Axis::build`.
        let end = (((span.origin - base) + span.len).ceil() as i64)
            .min(i64::from(span.limit) - base as i64);
        AxisKey {
            frac: (span.origin - base).to_bits(),
            below: (base as i64).min(0),
            len: span.len.to_bits(),
            end,
            out_size,
            first,
            count,
            aa,
        }
    }
}

/// Taps already built, by key. A box's length takes a few hundred values across a dataset and
/// where the box lies does not matter, so a training run soon finds nearly every axis here
/// instead of spending about a tenth of the augmentation rebuilding it. Bounded: two
/// generations of [`AxisCache::GENERATION`] entries (under 2 KB each for a 224-pixel side),
/// the older dropped when the newer fills; a hit in the older moves to the newer.
#[derive(Debug, Default)]
struct AxisCache {
    newer: std::collections::HashMap<AxisKey, Axis>,
    older: std::collections::HashMap<AxisKey, Axis>,
}

impl AxisCache {
    const GENERATION: usize = 256;

    /// Makes sure the taps of `key` are held, building them into `builder` (then copied)
    /// if not.
    fn ensure(&mut self, key: AxisKey, span: Span, builder: &mut Axis) {
        if self.newer.contains_key(&key) {
            return;
        }
        let axis = self.older.remove(&key).unwrap_or_else(|| {
            builder.build(span, key.out_size, key.first, key.count, key.aa);
            builder.taps_only()
        });
        if self.newer.len() >= Self::GENERATION {
            self.older = std::mem::take(&mut self.newer);
        }
        self.newer.insert(key, axis);
    }

    /// The taps of `key`, which [`ensure`](Self::ensure) has made sure of.
    fn get(&self, key: &AxisKey) -> &Axis {
        match self.newer.get(key).or_else(|| self.older.get(key)) {
            Some(axis) => axis,
            None => unreachable!("taps are built before they are used"),
        }
    }
}

/// Scratch buffers of [`resample`], reused across images by one thread, and the taps it has
/// built.
#[derive(Debug, Default)]
pub struct Scratch {
    axes: AxisCache,
    builder: Axis,
    rows: Vec<u32>,
    held: Vec<usize>,
    acc: Vec<i32>,
    line: Vec<u32>,
    pair: PairTaps,
}

/// Channel `c` of a pixel packed in a word (`R | G << 8 | B << 16`).
#[inline(always)]
fn channel(word: u32, c: usize) -> i32 {
    (word >> (8 * c) & 0xFF) as i32
}

/// The two-tap horizontal pass laid out for vectorising: per output pixel (already mirrored)
/// the source byte offset of its left tap and both weights. A row is first gathered with two
/// 4-byte loads per output pixel, `left` = the left tap's R, G, B (and a byte of the right
/// tap) and `right` = the right tap's R, G, B, then blended lane by lane into packed pixels.
///
/// `lanes` holds the same weights for the AVX2 kernel (`simd.rs`), which blends eight output
/// pixels in four 256-bit multiply-adds: for each group of eight outputs `k .. k + 8` and each
/// `j` in `0..4`, sixteen `i16`: `[w0, w1, w0, w1, w0, w1, 0, 0]` of output `k + j` then of
/// output `k + 4 + j`.
#[derive(Debug, Default)]
pub(crate) struct PairTaps {
    pub(crate) offsets: Vec<u32>,
    w0: Vec<i32>,
    w1: Vec<i32>,
    pub(crate) lanes: Vec<i16>,
    /// Per group of eight outputs: the end of its farthest 16-byte load, its largest offset
    /// plus 16.
    pub(crate) reach: Vec<u32>,
    /// Every weight is at least 0, so no blend is negative.
    pub(crate) nonnegative: bool,
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
        self.nonnegative = xs.weights.iter().all(|w| *w >= 0);
        self.lanes.clear();
        self.reach.clear();
        for group in self.offsets.chunks_exact(8) {
            self.reach.push(group.iter().max().map_or(0, |m| m + 16));
        }
        for group in 0..ow / 8 {
            for j in 0..4 {
                for k in [8 * group + j, 8 * group + 4 + j] {
                    // Both came from `i16` weights.
                    let (a, b) = (self.w0[k] as i16, self.w1[k] as i16);
                    self.lanes.extend_from_slice(&[a, b, a, b, a, b, 0, 0]);
                }
            }
        }
        self.left.resize(ow, 0);
        self.right.resize(ow, 0);
    }

    /// Blends the row's outputs `range` into `out`, one at a time.
    #[inline(always)]
    pub(crate) fn run_scalar(
        &self,
        src: &[u8],
        precision: u32,
        range: std::ops::Range<usize>,
        out: &mut [u32],
    ) {
        let round = 1i32 << precision >> 1;
        for k in range {
            let at = self.offsets[k] as usize;
            let (w0, w1) = (self.w0[k], self.w1[k]);
            out[k] = pack(|c| {
                let (a, b) = (i32::from(src[at + c]), i32::from(src[at + 3 + c]));
                clamp_shift(round + w0 * a + w1 * b, precision)
            });
        }
    }

    /// Blends the row `src` (its first pixel onwards) into `out`.
    #[inline(always)]
    pub(crate) fn run(&mut self, src: &[u8], precision: u32, out: &mut [u32]) {
        for ((&at, l), r) in self.offsets.iter().zip(&mut self.left).zip(&mut self.right) {
            let at = at as usize;
            (*l, *r) = match src.get(at..at + 7) {
                Some(p) => (word(&p[..4]), word(&p[3..7])),
                // The last pixel pair of the image: no byte after it.
                None => {
                    let p = &src[at..at + 6];
                    (word(&[p[0], p[1], p[2], 0]), word(&[p[3], p[4], p[5], 0]))
                }
            };
        }
        let round = 1i32 << precision >> 1;
        let weights = self.w0.iter().zip(&self.w1);
        let pixels = self.left.iter().zip(&self.right);
        for (o, ((&w0, &w1), (&l, &r))) in out.iter_mut().zip(weights.zip(pixels)) {
            *o = pack(|c| clamp_shift(round + w0 * channel(l, c) + w1 * channel(r, c), precision));
        }
    }
}

/// The packed pixel whose channel `c` is `f(c)`.
#[inline(always)]
fn pack(f: impl Fn(usize) -> u8) -> u32 {
    u32::from(f(0)) | u32::from(f(1)) << 8 | u32::from(f(2)) << 16
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
/// Reduced rows are packed pixels (`R | G << 8 | B << 16`, one word each) and already
/// mirrored, so both passes work lane by lane over whole pixels.
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
    return crate::simd::resample_avx2(source, plan, sink, s);
    #[cfg(not(target_arch = "x86_64"))]
    resample_portable(source, plan, sink, s);
}

/// The two inner loops that have a hand-vectorised copy (in `simd.rs`) besides the portable
/// one here: the two-tap horizontal pass and the two-tap vertical pass with the float store.
pub(crate) trait Kernels {
    /// Reduces the row starting `src` (which runs on to the image's end) into `out`.
    fn pairs(&self, pair: &mut PairTaps, src: &[u8], precision: u32, out: &mut [u32]);

    /// Asks the CPU to start loading `data` into cache (a hint; the portable kernel ignores
    /// it).
    #[inline(always)]
    fn prefetch<T>(&self, _data: &[T]) {}

    /// [`pairs`](Self::pairs) of two consecutive rows.
    #[inline(always)]
    fn pairs2(
        &self,
        pair: &mut PairTaps,
        [src0, src1]: [&[u8]; 2],
        precision: u32,
        [out0, out1]: [&mut [u32]; 2],
    ) {
        self.pairs(pair, src0, precision, out0);
        self.pairs(pair, src1, precision, out1);
    }

    /// Blends rows `r0` and `r1` with `weights` and writes channel `c` of each result as
    /// `v * scale[c] + bias[c]` into `planes[c]`.
    fn rows_f32(
        &self,
        rows: [&[u32]; 2],
        weights: [i16; 2],
        precision: u32,
        planes: [&mut [f32]; 3],
        norm: &Normalize,
    );
}

/// The portable kernels: safe Rust that compilers vectorise.
pub(crate) struct Portable;

impl Kernels for Portable {
    #[inline(always)]
    fn pairs(&self, pair: &mut PairTaps, src: &[u8], precision: u32, out: &mut [u32]) {
        pair.run(src, precision, out);
    }

    #[inline(always)]
    fn rows_f32(
        &self,
        [r0, r1]: [&[u32]; 2],
        [w0, w1]: [i16; 2],
        precision: u32,
        planes: [&mut [f32]; 3],
        norm: &Normalize,
    ) {
        let round = 1i32 << precision >> 1;
        let (w0, w1) = (i32::from(w0), i32::from(w1));
        for (c, dst) in planes.into_iter().enumerate() {
            let (scale, bias) = (norm.scale[c], norm.bias[c]);
            for ((d, &a), &b) in dst.iter_mut().zip(r0).zip(r1) {
                let v = clamp_shift(round + w0 * channel(a, c) + w1 * channel(b, c), precision);
                *d = f32::from(v).mul_add(scale, bias);
            }
        }
    }
}

/// The body of [`resample`] with the portable kernels.
#[inline(always)]
pub(crate) fn resample_portable(
    source: &Source<'_>,
    plan: &ResamplePlan,
    sink: Sink<'_, '_>,
    s: &mut Scratch,
) {
    resample_with(source, plan, sink, s, &Portable);
}

/// The body of [`resample`] with the kernels `k`; inlined into a copy compiled for AVX2 where
/// the CPU has it.
#[inline(always)]
pub(crate) fn resample_with(
    source: &Source<'_>,
    plan: &ResamplePlan,
    sink: Sink<'_, '_>,
    s: &mut Scratch,
    k: &impl Kernels,
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
    let xkey = AxisKey::new(xspan, rw, left, ow, plan.antialias);
    let ykey = AxisKey::new(yspan, rh, top, oh, plan.antialias);
    s.axes.ensure(xkey, xspan, &mut s.builder);
    s.axes.ensure(ykey, yspan, &mut s.builder);
    let (xs, ys) = (s.axes.get(&xkey), s.axes.get(&ykey));
    // Taps count from these source column and row.
    let (xshift, yshift) = (xspan.shift(), yspan.shift());
    // Reduced rows live in a ring, row `r` in slot `r % slots`, which stays in L1 where a
    // buffer of all rows would not. Output row `y` needs `taps` consecutive rows from
    // `start[y]`, and the rows of the next output row may be reduced early (below), so the
    // ring holds `taps` plus the largest step between starts.
    let step = ys
        .start
        .windows(2)
        .map(|w| (w[1] - w[0]) as usize)
        .max()
        .unwrap_or(0);
    let slots = ys.taps.max(1) + step;
    let row_len = ow as usize;
    s.rows.resize(slots * row_len, 0);
    s.held.clear();
    s.held.resize(slots, usize::MAX);
    s.line.resize(row_len, 0);
    let stride = source.width as usize * 3;
    // Row `r` from the first column the taps count from.
    let from = |r: usize| r * stride + xshift * 3;
    let paired = xs.taps == 2;
    if paired {
        s.pair.prepare(xs, plan.flip);
    }
    let pixels = source.pixels;
    // The bytes of a row the horizontal kernel reads.
    let span = match (s.pair.offsets.iter().min(), s.pair.offsets.iter().max()) {
        (Some(&lo), Some(&hi)) if paired => from(0) + lo as usize..from(0) + hi as usize + 6,
        _ => 0..stride,
    };
    let mut sink = sink;
    let mut fetched = ys.start.first().map_or(0, |&r| yshift + r as usize + 2);
    for (y, &start) in ys.start.iter().enumerate() {
        let start = yshift + start as usize;
        let mut r = start;
        while r < start + ys.taps {
            let slot = r % slots;
            if s.held[slot] == r {
                r += 1;
                continue;
            }
            // Rows are read top to bottom: start loading the one three ahead (once), which
            // the hardware prefetcher, seeing only a short run per row, may not.
            while fetched <= r + 3 {
                if let Some(row) = pixels.get(fetched * stride..(fetched + 1) * stride) {
                    k.prefetch(&row[span.clone()]);
                }
                fetched += 1;
            }
            let next = (r + 1) % slots;
            // The last row this output row or the next needs.
            let until = ys.start.get(y + 1).map_or(start, |&n| yshift + n as usize) + ys.taps;
            if paired && r + 1 < until && s.held[next] != r + 1 {
                // Reduce two rows at once (they share offsets and weights) when the second is
                // needed by this output row or the next.
                let outs = two_rows_mut(&mut s.rows, row_len, slot, next);
                let srcs = [&pixels[from(r)..], &pixels[from(r + 1)..]];
                k.pairs2(&mut s.pair, srcs, xs.precision, outs);
                (s.held[slot], s.held[next]) = (r, r + 1);
                r += 2;
                continue;
            }
            let out = &mut s.rows[slot * row_len..][..row_len];
            if paired {
                // The rest of the image from this row: a kernel may read (and ignore) bytes
                // past the row's end.
                k.pairs(&mut s.pair, &pixels[from(r)..], xs.precision, out);
            } else {
                horizontal(&pixels[from(r)..(r + 1) * stride], xs, plan.flip, out);
            }
            s.held[slot] = r;
            r += 1;
        }
        let row = |i: usize| &s.rows[(start + i) % slots * row_len..][..row_len];
        if let (Sink::ChwF32 { out, norm }, &[w0, w1]) = (&mut sink, ys.taps_of(y)) {
            let (oh, ow) = (oh as usize, ow as usize);
            let (red, rest) = out.split_at_mut(oh * ow);
            let (green, blue) = rest.split_at_mut(oh * ow);
            // The output rows are not prefetched: a store to a line not in cache waits for it
            // to be read, and the batch is far larger than the caches, but prefetching them
            // (two rows ahead, into either cache level) measured 4-10% slower in the pipeline,
            // whose stores are bound by memory bandwidth.
            let planes = [red, green, blue].map(|p| &mut p[y * ow..(y + 1) * ow]);
            k.rows_f32([row(0), row(1)], [w0, w1], ys.precision, planes, norm);
        } else {
            vertical(row, ys.taps_of(y), ys.precision, &mut s.acc, &mut s.line);
            store(&s.line, y, plan, &mut sink);
        }
    }
}

/// Rows `a` and `b` (different) of `n` words each in `rows`, both mutable.
fn two_rows_mut(rows: &mut [u32], n: usize, a: usize, b: usize) -> [&mut [u32]; 2] {
    if a < b {
        let (low, high) = rows.split_at_mut(b * n);
        [&mut low[a * n..][..n], &mut high[..n]]
    } else {
        let [second, first] = two_rows_mut(rows, n, b, a);
        [first, second]
    }
}

/// One source row reduced to the output width as packed pixels, mirrored if `flip`.
#[inline(always)]
fn horizontal(src: &[u8], xs: &Axis, flip: bool, out: &mut [u32]) {
    let ow = xs.start.len();
    let round = 1i32 << xs.precision >> 1;
    for k in 0..ow {
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
        out[if flip { ow - 1 - k } else { k }] = pack(|c| clamp_shift(rgb[c], xs.precision));
    }
}

#[inline(always)]
fn clamp_shift(v: i32, precision: u32) -> u8 {
    // Clamped to 0..=255 first, so the cast cannot truncate.
    (v >> precision).clamp(0, 255) as u8
}

/// Blends the reduced rows `row(0) .. row(weights.len())` (each `line.len()` packed pixels)
/// into `line`.
#[inline(always)]
fn vertical<'r>(
    row: impl Fn(usize) -> &'r [u32],
    weights: &[i16],
    precision: u32,
    acc: &mut Vec<i32>,
    line: &mut [u32],
) {
    let n = line.len();
    let round = 1i32 << precision >> 1;
    match *weights {
        [w0] => {
            let w0 = i32::from(w0);
            for (o, &a) in line.iter_mut().zip(row(0)) {
                *o = pack(|c| clamp_shift(round + w0 * channel(a, c), precision));
            }
        }
        [w0, w1] => {
            let (w0, w1) = (i32::from(w0), i32::from(w1));
            for ((o, &a), &b) in line.iter_mut().zip(row(0)).zip(row(1)) {
                *o = pack(|c| {
                    clamp_shift(round + w0 * channel(a, c) + w1 * channel(b, c), precision)
                });
            }
        }
        _ => {
            acc.clear();
            acc.resize(3 * n, round);
            for (i, &w) in weights.iter().enumerate() {
                let w = i32::from(w);
                for (a, &p) in acc.chunks_exact_mut(3).zip(row(i)) {
                    for (c, a) in a.iter_mut().enumerate() {
                        *a += w * channel(p, c);
                    }
                }
            }
            for (o, a) in line.iter_mut().zip(acc.chunks_exact(3)) {
                *o = pack(|c| clamp_shift(a[c], precision));
            }
        }
    }
}

/// Writes output row `y` (packed pixels in `line`) into the sink.
#[inline(always)]
fn store(line: &[u32], y: usize, plan: &ResamplePlan, sink: &mut Sink<'_, '_>) {
    let (oh, ow) = (plan.output.0 as usize, plan.output.1 as usize);
    match sink {
        Sink::HwcU8(out) => {
            let dst = &mut out[y * ow * 3..(y + 1) * ow * 3];
            for (d, &p) in dst.chunks_exact_mut(3).zip(line) {
                d.copy_from_slice(&p.to_le_bytes()[..3]);
            }
        }
        Sink::ChwF32 { out, norm } => {
            let plane = oh * ow;
            for c in 0..3 {
                let (scale, bias) = (norm.scale[c], norm.bias[c]);
                let dst = &mut out[c * plane + y * ow..c * plane + (y + 1) * ow];
                for (d, &p) in dst.iter_mut().zip(line) {
                    // `channel` is 0..=255.
                    *d = (channel(p, c) as f32).mul_add(scale, bias);
                }
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

    /// The separable resample done the plain way: every row of the box reduced, then every
    /// output row blended, with the same weights. Interleaved RGB out.
    fn reference(pixels: &[u8], width: u32, plan: &ResamplePlan) -> Vec<u8> {
        let (oh, ow) = (plan.output.0 as usize, plan.output.1 as usize);
        let height = (pixels.len() / (width as usize * 3)) as u32;
        let span = |origin: u32, len: u32, limit| Span {
            origin: f64::from(origin),
            len: f64::from(len),
            limit,
        };
        let (mut xs, mut ys) = (Axis::default(), Axis::default());
        let c = plan.crop;
        xs.build(
            span(c.x, c.width, width),
            plan.resized.1,
            plan.window.1,
            plan.output.1,
            plan.antialias,
        );
        ys.build(
            span(c.y, c.height, height),
            plan.resized.0,
            plan.window.0,
            plan.output.0,
            plan.antialias,
        );
        let blend = |taps: &[i16], values: &mut dyn Iterator<Item = u8>, precision: u32| {
            let sum = taps
                .iter()
                .zip(values)
                .map(|(&w, v)| i32::from(w) * i32::from(v))
                .sum::<i32>();
            clamp_shift(sum + (1i32 << precision >> 1), precision)
        };
        // reduced[r][x][ch] for every source row.
        let reduced: Vec<Vec<[u8; 3]>> = (0..height as usize)
            .map(|r| {
                (0..ow)
                    .map(|x| {
                        let k = if plan.flip { ow - 1 - x } else { x };
                        // Taps count from the box's origin.
                        let at = c.x as usize + xs.start[k] as usize;
                        std::array::from_fn(|ch| {
                            let mut v = (0..xs.taps)
                                .map(|t| pixels[(r * width as usize + at + t) * 3 + ch]);
                            blend(xs.taps_of(k), &mut v, xs.precision)
                        })
                    })
                    .collect()
            })
            .collect();
        let mut out = Vec::with_capacity(oh * ow * 3);
        for (y, &start) in ys.start.iter().enumerate() {
            let start = c.y as usize + start as usize;
            let rows = &reduced[start..start + ys.taps];
            for x in 0..ow * 3 {
                let mut v = rows.iter().map(|row| row[x / 3][x % 3]);
                out.push(blend(ys.taps_of(y), &mut v, ys.precision));
            }
        }
        out
    }

    /// The kernel (ring of reduced rows, rows reduced in pairs and ahead of need, prefetches,
    /// vectorised loops) gives the plain separable resample's bytes, on random boxes,
    /// outputs, flips and antialias settings.
    #[test]
    fn kernel_matches_the_plain_separable_resample() {
        let mut rng = crate::SampleRng::new(3, 0, 0);
        let mut scratch = Scratch::default();
        for case in 0..300 {
            let (width, height) = (1 + rng.below(200) as u32, 1 + rng.below(200) as u32);
            let pixels: Vec<u8> = (0..width * height * 3)
                .map(|_| rng.below(256) as u8)
                .collect();
            let bw = 1 + rng.below(u64::from(width)) as u32;
            let bh = 1 + rng.below(u64::from(height)) as u32;
            let crop = CropBox {
                x: rng.below(u64::from(width - bw + 1)) as u32,
                y: rng.below(u64::from(height - bh + 1)) as u32,
                width: bw,
                height: bh,
            };
            let mut p = plan(crop, (1 + rng.below(100) as u32, 1 + rng.below(100) as u32));
            p.flip = rng.below(2) == 1;
            p.antialias = case % 3 == 0;
            let mut out = vec![0u8; (p.output.0 * p.output.1 * 3) as usize];
            resample(&pixels, width, &p, Sink::HwcU8(&mut out), &mut scratch);
            assert_eq!(
                out,
                reference(&pixels, width, &p),
                "case {case}: {p:?} of {width}x{height}"
            );
            resample_portable(
                &Source {
                    pixels: &pixels,
                    width,
                    height,
                    x: f64::from(crop.x),
                    y: f64::from(crop.y),
                    box_width: f64::from(bw),
                    box_height: f64::from(bh),
                },
                &p,
                Sink::HwcU8(&mut out),
                &mut scratch,
            );
            assert_eq!(
                out,
                reference(&pixels, width, &p),
                "portable, case {case}: {p:?}"
            );
        }
    }

    /// Taps from the cache give the pixels of taps built afresh: boxes of a few lengths at
    /// many places (so most axes are hits, at other origins than where they were built),
    /// fractional and negative origins as after DCT scaling, boxes overhanging the source's
    /// far edge, and more keys than the cache holds (so generations turn over).
    #[test]
    fn cached_taps_give_the_pixels_of_fresh_ones() {
        let mut rng = crate::SampleRng::new(5, 0, 0);
        let (width, height) = (160u32, 120u32);
        let pixels: Vec<u8> = (0..width * height * 3)
            .map(|_| rng.below(256) as u8)
            .collect();
        let mut cached = Scratch::default();
        for case in 0..1500 {
            // A few lengths early on (hits), many later (turnover).
            let lengths = if case < 500 { 6 } else { 100 };
            let mut len = |limit: u32| (1 + rng.below(lengths) * 7 % u64::from(limit)) as f64;
            let (bw, bh) = (len(width), len(height));
            let origin = |rng: &mut crate::SampleRng, len: f64, limit: u32| {
                let room = f64::from(limit) - len;
                let at = (rng.next_f64() * (room + 1.0)).floor();
                // One in eight fractional, one slightly left of the source, one overhanging
                // its far edge by less than a pixel (taps clamped to it).
                // Eighths, as DCT scaling makes, so that keys meet.
                let eighths = (1 + rng.below(7)) as f64 / 8.0;
                match rng.below(8) {
                    0 => -eighths,
                    1 if at + 1.0 <= room => at + eighths,
                    2 => room + eighths,
                    _ => at,
                }
            };
            let (x, y) = (origin(&mut rng, bw, width), origin(&mut rng, bh, height));
            let source = Source {
                pixels: &pixels,
                width,
                height,
                x,
                y,
                box_width: bw,
                box_height: bh,
            };
            let crop = CropBox {
                x: 0,
                y: 0,
                width: 1,
                height: 1,
            };
            let mut p = plan(crop, (1 + rng.below(40) as u32, 1 + rng.below(40) as u32));
            p.flip = rng.below(2) == 1;
            p.antialias = case % 4 == 0;
            let n = (p.output.0 * p.output.1 * 3) as usize;
            let (mut got, mut want) = (vec![0u8; n], vec![0u8; n]);
            resample_from(&source, &p, Sink::HwcU8(&mut got), &mut cached);
            resample_from(&source, &p, Sink::HwcU8(&mut want), &mut Scratch::default());
            assert_eq!(got, want, "case {case}: {p:?} from {source:?}");
        }
        assert!(
            cached.axes.newer.len() + cached.axes.older.len() <= 2 * AxisCache::GENERATION,
            "the cache stays bounded"
        );
    }

    /// The support-1 fast path builds exactly the taps of the general one.
    #[test]
    fn narrow_axis_matches_the_general_one() {
        let mut rng = crate::SampleRng::new(11, 0, 0);
        let (mut fast, mut general) = (Axis::default(), Axis::default());
        for case in 0..2000 {
            let limit = 1 + rng.below(600) as u32;
            let len = 1 + rng.below(u64::from(limit));
            // Integer origins as in a plain crop; fractional ones as after DCT scaling.
            let origin = rng.below(u64::from(limit) - len + 1) as f64
                + if case % 2 == 0 {
                    0.0
                } else {
                    rng.next_f64() * 0.9 - 0.45
                };
            let len = if case % 2 == 0 {
                len as f64
            } else {
                len as f64 * (0.9 + 0.1 * rng.next_f64())
            };
            let span = Span {
                origin: origin.max(-0.9),
                len,
                limit,
            };
            let out = 1 + rng.below(500) as u32;
            let (first, count) = (rng.below(u64::from(out)) as u32 / 2, 0);
            let count = count + 1 + rng.below(u64::from(out - first)) as u32;
            // Enlarging with antialias is support 1 too.
            let aa = case % 3 == 0 && len < f64::from(out);
            fast.build(span, out, first, count, aa);
            general.build_general(span, out, first, count, aa);
            let what = format!("case {case}: {span:?} to {out} ({first}+{count}), aa {aa}");
            assert_eq!(fast.start, general.start, "{what}");
            assert_eq!(fast.weights, general.weights, "{what}");
            assert_eq!(
                (fast.taps, fast.precision),
                (general.taps, general.precision),
                "{what}"
            );
        }
    }

    #[test]
    fn precision_matches_pytorch_rule() {
        assert_eq!(precision_for(1.0), 14);
        assert_eq!(precision_for(0.5), 15);
    }
}
