//! One of the three places this crate uses `unsafe` (with the libjpeg-turbo binding,
//! `turbo.rs`, and the huge-page advice, `hugepages.rs`): the resample kernel compiled with
//! AVX2 enabled, called after checking at run time that the CPU has AVX2 and FMA.
//!
//! Most of the kernel is the safe Rust of `resample.rs`, which AVX2 lets the compiler
//! vectorise (32-bit multiplies, min/max and conversions that x86-64's baseline SSE2 lacks).
//! The two-tap horizontal pass, the kernel's largest part, is written here with intrinsics:
//! the compiler cannot vectorise its per-pixel gather, which here is one 16-byte load per
//! output pixel, a byte shuffle and a 16-bit multiply-add (the approach of PyTorch's and
//! Pillow-SIMD's uint8 kernels), giving exactly the scalar kernel's integers. The only unsafe
//! operations are the unaligned vector loads, each from a reference to exactly the bytes read.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m128i, __m256i, _MM_HINT_T0, _mm_cvtsi32_si128, _mm_loadu_si128, _mm_prefetch,
    _mm256_add_epi32, _mm256_avg_epu16, _mm256_cvtepi32_ps, _mm256_fmadd_ps, _mm256_loadu_si256,
    _mm256_madd_epi16, _mm256_or_si256, _mm256_packs_epi32, _mm256_packus_epi16, _mm256_set_m128i,
    _mm256_set1_epi32, _mm256_set1_ps, _mm256_setr_epi8, _mm256_shuffle_epi8, _mm256_sra_epi32,
    _mm256_storeu_ps, _mm256_storeu_si256,
};

use crate::resample::{
    Kernels, Normalize, PairTaps, ResamplePlan, Scratch, Sink, Source, resample_portable,
    resample_with,
};

/// The AVX2 kernels. A value exists only where the CPU has AVX2 and FMA ([`Avx2::detect`]),
/// which is what makes calling them sound.
pub(crate) struct Avx2 {
    _detected: (),
}

impl Avx2 {
    fn detect() -> Option<Avx2> {
        let yes = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        yes.then_some(Avx2 { _detected: () })
    }
}

impl Kernels for Avx2 {
    #[inline(always)]
    fn prefetch<T>(&self, data: &[T]) {
        let bytes = std::mem::size_of_val(data);
        let start: *const i8 = data.as_ptr().cast();
        for at in (0..bytes).step_by(64) {
            // SAFETY: an `Avx2` exists only where the CPU has AVX2, hence SSE; a prefetch
            // reads nothing the program sees, and `at` is inside `data` anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(at)) };
        }
    }

    #[inline(always)]
    fn pairs(&self, pair: &mut PairTaps, src: &[u8], precision: u32, out: &mut [u32]) {
        self.rows_of_pairs(pair, [src], precision, [out]);
    }

    #[inline(always)]
    fn pairs2(&self, pair: &mut PairTaps, srcs: [&[u8]; 2], precision: u32, outs: [&mut [u32]; 2]) {
        self.rows_of_pairs(pair, srcs, precision, outs);
    }

    #[inline(always)]
    fn rows_f32(
        &self,
        rows: [&[u32]; 2],
        weights: [i16; 2],
        precision: u32,
        planes: [&mut [f32]; 3],
        norm: &Normalize,
    ) {
        // The kernel leaves out the clamp to 0..=255, which needs both weights non-negative
        // and a precision of at least 9 (see `rows_f32_avx2`): true of every triangle filter
        // `Axis::build` makes, checked here anyway.
        if weights.iter().any(|w| *w < 0) || precision < 9 {
            return crate::resample::Portable.rows_f32(rows, weights, precision, planes, norm);
        }
        // SAFETY: an `Avx2` exists only where the CPU has AVX2 and FMA.
        unsafe { rows_f32_avx2(rows, weights, precision, planes, norm) }
    }
}

impl Avx2 {
    /// [`pairs_avx2`] with the rounding the taps allow.
    #[inline(always)]
    fn rows_of_pairs<const N: usize>(
        &self,
        pair: &PairTaps,
        srcs: [&[u8]; N],
        precision: u32,
        outs: [&mut [u32]; N],
    ) {
        // SAFETY: an `Avx2` exists only where the CPU has AVX2.
        unsafe {
            if halving(pair, precision) {
                pairs_avx2::<N, true>(pair, srcs, precision, outs)
            } else {
                pairs_avx2::<N, false>(pair, srcs, precision, outs)
            }
        }
    }
}

/// Whether [`pairs_avx2`] may round by halving: every weight at least 0 and a precision of at
/// least 1 (true of every triangle filter `Axis::build` makes).
#[inline(always)]
fn halving(pair: &PairTaps, precision: u32) -> bool {
    pair.nonnegative && precision >= 1
}

/// [`resample_with`] compiled for AVX2 and FMA (so that the compiler vectorises the portable
/// loops with them too), with the AVX2 kernels.
#[target_feature(enable = "avx2,fma")]
fn resample_avx2_inner(
    source: &Source<'_>,
    plan: &ResamplePlan,
    sink: Sink<'_, '_>,
    s: &mut Scratch,
    kernels: &Avx2,
) {
    resample_with(source, plan, sink, s, kernels);
}

/// Runs the AVX2 copy of the kernel where the CPU has AVX2 and FMA, the portable one
/// elsewhere.
pub(crate) fn resample_avx2(
    source: &Source<'_>,
    plan: &ResamplePlan,
    sink: Sink<'_, '_>,
    s: &mut Scratch,
) {
    let Some(kernels) = Avx2::detect() else {
        return resample_portable(source, plan, sink, s);
    };
    // SAFETY: `kernels` exists, so the CPU supports AVX2 and FMA, the only requirement of
    // calling a `#[target_feature(enable = "avx2,fma")]` function.
    unsafe { resample_avx2_inner(source, plan, sink, s, &kernels) }
}

/// The 16 bytes of `src` from `at`, which the caller has checked to lie inside it.
///
/// # Safety
/// `at + 16 <= src.len()`.
#[inline(always)]
unsafe fn load16(src: &[u8], at: u32) -> __m128i {
    // SAFETY: the 16 bytes from `at` are inside `src` (the caller's contract); the load has
    // no alignment requirement.
    unsafe { _mm_loadu_si128(src.as_ptr().add(at as usize).cast()) }
}

/// Stores eight packed pixels.
#[inline(always)]
fn store8(dst: &mut [u32; 8], v: __m256i) {
    // SAFETY: `dst` is a unique reference to 32 writable bytes; the store has no alignment
    // requirement.
    unsafe { _mm256_storeu_si256(dst.as_mut_ptr().cast(), v) }
}

/// Sixteen `i16` weights as one vector.
#[inline(always)]
fn load_weights(w: &[i16; 16]) -> __m256i {
    // SAFETY: `w` is a reference to 32 readable bytes; the load has no alignment requirement.
    unsafe { _mm256_loadu_si256(w.as_ptr().cast()) }
}

/// `N` consecutive source rows (interleaved RGB; each `srcs[i]` runs from its row's first
/// pixel to the image's end) reduced to the output width as packed pixels in `outs[i]`, eight
/// at a time; two rows at once share the offsets and weights.
///
/// Per output pixel: the 16 bytes from its left tap (its two taps are the first six), a
/// shuffle into `R0 R1 G0 G1 B0 B1 0 0` as `i16`, a multiply-add with
/// `w0 w1 w0 w1 w0 w1 0 0` giving R, G, B and 0 as `i32`; two pixels share a 256-bit register
/// (`k + j` in the low half, `k + 4 + j` in the high half). After rounding and the shift, two
/// saturating packs (the clamp to 0..=255) leave the eight pixels in order as `R G B 0`
/// bytes, stored as they are. A group whose loads would pass the image's end goes to the
/// scalar kernel.
///
/// With `HALVING` (no negative weight, precision `p >= 1`), the rounding takes one
/// instruction less per four pixels: `(v + 2^(p-1)) >> p` equals `((v >> (p-1)) + 1) >> 1`
/// (write `v = u 2^(p-1) + r` with `0 <= r < 2^(p-1)`), and the last step is the rounding
/// average with zero, done after the first pack; `u` is at most 765, so that pack
/// does not saturate.
#[target_feature(enable = "avx2")]
fn pairs_avx2<const N: usize, const HALVING: bool>(
    pair: &PairTaps,
    srcs: [&[u8]; N],
    precision: u32,
    mut outs: [&mut [u32]; N],
) {
    let ow = pair.offsets.len();
    let groups = ow / 8;
    let z = -128; // a shuffle index with the top bit set writes a zero byte
    #[rustfmt::skip]
    let spread = _mm256_setr_epi8(
        0, z, 3, z, 1, z, 4, z, 2, z, 5, z, z, z, z, z,
        0, z, 3, z, 1, z, 4, z, 2, z, 5, z, z, z, z, z,
    );
    // Below 2^14 (`precision_for`).
    let round = _mm256_set1_epi32((1i32 << precision) >> 1);
    let shift = _mm_cvtsi32_si128(precision as i32);
    // Only used when `HALVING`, where the precision is at least 1.
    let shift_less = _mm_cvtsi32_si128(precision.saturating_sub(1) as i32);
    let zero = _mm256_set1_epi32(0);
    // Later rows' slices are shorter.
    let len = srcs.iter().map(|s| s.len()).min().unwrap_or(0);
    for g in 0..groups {
        let k = 8 * g;
        if pair.reach[g] as usize > len {
            for (src, out) in srcs.iter().zip(&mut outs) {
                pair.run_scalar(src, precision, k..k + 8, out);
            }
            continue;
        }
        let at: &[u32; 8] = pair.offsets[k..k + 8]
            .try_into()
            .unwrap_or_else(|_| unreachable!());
        let w: [__m256i; 4] = std::array::from_fn(|j| {
            let w = &pair.lanes[64 * g + 16 * j..64 * g + 16 * j + 16];
            load_weights(w.try_into().unwrap_or_else(|_| unreachable!()))
        });
        for (src, out) in srcs.iter().zip(&mut outs) {
            let sum = |j: usize| {
                // SAFETY: every offset of the group is at most `reach[g] - 16`, and
                // `reach[g] <= src.len()` (checked above).
                let (lo, hi) = unsafe { (load16(src, at[j]), load16(src, at[4 + j])) };
                let px = _mm256_shuffle_epi8(_mm256_set_m128i(hi, lo), spread);
                let v = _mm256_madd_epi16(px, w[j]);
                if HALVING {
                    _mm256_sra_epi32(v, shift_less)
                } else {
                    _mm256_sra_epi32(_mm256_add_epi32(v, round), shift)
                }
            };
            let mut first = _mm256_packs_epi32(sum(0), sum(1));
            let mut second = _mm256_packs_epi32(sum(2), sum(3));
            if HALVING {
                first = _mm256_avg_epu16(first, zero);
                second = _mm256_avg_epu16(second, zero);
            }
            let dst: &mut [u32; 8] = (&mut out[k..k + 8])
                .try_into()
                .unwrap_or_else(|_| unreachable!());
            store8(dst, _mm256_packus_epi16(first, second));
        }
    }
    for (src, out) in srcs.iter().zip(&mut outs) {
        pair.run_scalar(src, precision, 8 * groups..ow, out);
    }
}

/// The two-tap vertical pass fused with normalisation and the float store, eight pixels at a
/// time: for each channel, a shuffle places the channel's byte of row 0 and of row 1 as the
/// two `i16` halves of each lane, one multiply-add with `w0 | w1 << 16` blends them, then
/// round, shift, convert, one fused multiply-add (`v * scale + bias`) and the store. The rest
/// past a multiple of eight takes the portable loop. (Non-temporal stores were measured and
/// gave nothing.)
///
/// No clamp is needed: with `w0, w1 >= 0`, each at most `2^p` and rounded from reals summing
/// to 1 (so `w0 + w1 <= 2^p + 1`), the result is at most
/// `(2^(p-1) + 255 (2^p + 1)) >> p = 255 + ((2^(p-1) + 255) >> p)`, which is 255 for `p >= 9`;
/// the caller checks both conditions.
#[target_feature(enable = "avx2,fma")]
fn rows_f32_avx2(
    [r0, r1]: [&[u32]; 2],
    [w0, w1]: [i16; 2],
    precision: u32,
    planes: [&mut [f32]; 3],
    norm: &Normalize,
) {
    let z = -128;
    let pick = |c: i8| {
        #[rustfmt::skip]
        let m = _mm256_setr_epi8(
            c, z, z, z, c + 4, z, z, z, c + 8, z, z, z, c + 12, z, z, z,
            c, z, z, z, c + 4, z, z, z, c + 8, z, z, z, c + 12, z, z, z,
        );
        #[rustfmt::skip]
        let high = _mm256_setr_epi8(
            z, z, c, z, z, z, c + 4, z, z, z, c + 8, z, z, z, c + 12, z,
            z, z, c, z, z, z, c + 4, z, z, z, c + 8, z, z, z, c + 12, z,
        );
        (m, high)
    };
    let picks = [pick(0), pick(1), pick(2)];
    // The two weights as the halves of one 32-bit lane (the casts keep their bits).
    let w = _mm256_set1_epi32(i32::from(w0 as u16) | i32::from(w1 as u16) << 16);
    let round = _mm256_set1_epi32((1i32 << precision) >> 1);
    let shift = _mm_cvtsi32_si128(precision as i32);
    let scale = norm.scale.map(|v| _mm256_set1_ps(v));
    let bias = norm.bias.map(|v| _mm256_set1_ps(v));
    let n = r0.len().min(r1.len());
    let whole = (n / 8 * 8).min(planes.iter().map(|p| p.len()).min().unwrap_or(0));
    let [red, green, blue] = planes;
    let (red, red_tail) = red.split_at_mut(whole);
    let (green, green_tail) = green.split_at_mut(whole);
    let (blue, blue_tail) = blue.split_at_mut(whole);
    let dsts = red
        .chunks_exact_mut(8)
        .zip(green.chunks_exact_mut(8))
        .zip(blue.chunks_exact_mut(8));
    let rows = r0.chunks_exact(8).zip(r1.chunks_exact(8));
    for (((r, g), b), (a0, a1)) in dsts.zip(rows) {
        let (a0, a1) = (load8(a0), load8(a1));
        for (c, d) in [r, g, b].into_iter().enumerate() {
            let (lo, hi) = picks[c];
            let pair = _mm256_or_si256(_mm256_shuffle_epi8(a0, lo), _mm256_shuffle_epi8(a1, hi));
            let v = _mm256_add_epi32(_mm256_madd_epi16(pair, w), round);
            let v = _mm256_cvtepi32_ps(_mm256_sra_epi32(v, shift));
            let f = _mm256_fmadd_ps(v, scale[c], bias[c]);
            let d: &mut [f32; 8] = d.try_into().unwrap_or_else(|_| unreachable!());
            // SAFETY: `d` is a unique reference to 32 writable bytes; the store has no
            // alignment requirement.
            unsafe { _mm256_storeu_ps(d.as_mut_ptr(), f) };
        }
    }
    if whole < n {
        let rest = [&r0[whole..], &r1[whole..]];
        let planes = [red_tail, green_tail, blue_tail];
        crate::resample::Portable.rows_f32(rest, [w0, w1], precision, planes, norm);
    }
}

/// Eight packed pixels as one vector.
#[inline(always)]
fn load8(px: &[u32]) -> __m256i {
    let px: &[u32; 8] = px.try_into().unwrap_or_else(|_| unreachable!());
    // SAFETY: `px` is a reference to 32 readable bytes; the load has no alignment requirement.
    unsafe { _mm256_loadu_si256(px.as_ptr().cast()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SampleRng;
    use crate::resample::CropBox;

    /// The AVX2 kernels give exactly the portable kernels' output: every box size from a
    /// pixel to the whole image, boxes touching each edge (where the 16-byte loads would
    /// overrun and the scalar kernel takes over), flips, output widths that are not a multiple
    /// of eight, antialias, and both sinks.
    #[test]
    fn avx2_kernels_match_the_portable_ones() {
        let Some(kernels) = Avx2::detect() else {
            eprintln!("no AVX2 on this CPU: nothing to compare");
            return;
        };
        let mut rng = SampleRng::new(7, 0, 0);
        let norm = Normalize::new([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]);
        let (mut a, mut b) = (Scratch::default(), Scratch::default());
        for case in 0..400 {
            let (width, height) = (1 + rng.below(300) as u32, 1 + rng.below(300) as u32);
            let pixels: Vec<u8> = (0..width * height * 3)
                .map(|_| rng.below(256) as u8)
                .collect();
            let (bw, bh) = (
                1 + rng.below(u64::from(width)) as u32,
                1 + rng.below(u64::from(height)) as u32,
            );
            // Every fourth box touches the right and bottom edges.
            let (x, y) = if case % 4 == 0 {
                (width - bw, height - bh)
            } else {
                (
                    rng.below(u64::from(width - bw + 1)) as u32,
                    rng.below(u64::from(height - bh + 1)) as u32,
                )
            };
            let output = (1 + rng.below(240) as u32, 1 + rng.below(240) as u32);
            let plan = ResamplePlan {
                crop: CropBox {
                    x,
                    y,
                    width: bw,
                    height: bh,
                },
                resized: output,
                window: (0, 0),
                output,
                flip: rng.below(2) == 1,
                antialias: case % 5 == 0,
            };
            let source = Source {
                pixels: &pixels,
                width,
                height,
                x: f64::from(x),
                y: f64::from(y),
                box_width: f64::from(bw),
                box_height: f64::from(bh),
            };
            let n = (output.0 * output.1 * 3) as usize;
            let (mut want, mut got) = (vec![0f32; n], vec![0f32; n]);
            resample_portable(
                &source,
                &plan,
                Sink::ChwF32 {
                    out: &mut want,
                    norm: &norm,
                },
                &mut a,
            );
            // SAFETY: `kernels` exists, so the CPU has AVX2 and FMA.
            unsafe {
                resample_avx2_inner(
                    &source,
                    &plan,
                    Sink::ChwF32 {
                        out: &mut got,
                        norm: &norm,
                    },
                    &mut b,
                    &kernels,
                );
            }
            assert_eq!(
                want, got,
                "float output of case {case}: {plan:?} of {width}x{height}"
            );
            let (mut want, mut got) = (vec![0u8; n], vec![0u8; n]);
            resample_portable(&source, &plan, Sink::HwcU8(&mut want), &mut a);
            // SAFETY: as above.
            unsafe { resample_avx2_inner(&source, &plan, Sink::HwcU8(&mut got), &mut b, &kernels) };
            assert_eq!(
                want, got,
                "byte output of case {case}: {plan:?} of {width}x{height}"
            );
        }
    }
}
