//! One of the two places this crate uses `unsafe` (the other is the libjpeg-turbo binding,
//! `turbo.rs`): calling a copy of the resample kernel compiled
//! with AVX2 enabled, after checking at run time that the CPU has AVX2. The kernel itself is
//! safe Rust; AVX2 lets the compiler vectorise its 32-bit multiplies, min/max and table
//! lookups (x86-64's baseline SSE2 has none of them), which makes it several times faster.
#![allow(unsafe_code)]

use crate::resample::{ResamplePlan, Scratch, Sink, Source, resample_portable};

/// [`resample_portable`] compiled for AVX2 and FMA. Call only where the CPU has both.
#[target_feature(enable = "avx2,fma")]
fn resample_avx2_inner(
    source: &Source<'_>,
    plan: &ResamplePlan,
    sink: Sink<'_, '_>,
    s: &mut Scratch,
) {
    resample_portable(source, plan, sink, s);
}

/// Runs the AVX2 copy of the kernel; the caller has checked `is_x86_feature_detected!("avx2")`.
pub(crate) fn resample_avx2(
    source: &Source<'_>,
    plan: &ResamplePlan,
    sink: Sink<'_, '_>,
    s: &mut Scratch,
) {
    if !std::arch::is_x86_feature_detected!("fma") {
        return resample_portable(source, plan, sink, s);
    }
    // SAFETY: the CPU supports AVX2 (checked by the caller) and FMA (checked above), the only
    // requirement of calling a `#[target_feature(enable = "avx2,fma")]` function.
    unsafe { resample_avx2_inner(source, plan, sink, s) }
}
