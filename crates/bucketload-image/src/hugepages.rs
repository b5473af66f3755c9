//! One of the three places this crate uses `unsafe` (with the AVX2 kernels, `simd.rs`, and the
//! libjpeg-turbo binding, `turbo.rs`): asking Linux to back batch buffers with transparent
//! huge pages.
//!
//! A float batch of 64 images of 224x224 is 38 MB, written one output row at a time across
//! three planes; with 4 KiB pages each image's 600 KB crosses about 150 pages, and the page
//! walks of those writes cost about a tenth of the augmentation on the benchmark machine
//! (docs/BENCHMARKS.md). Linux's default transparent-huge-page mode, `madvise`, gives huge
//! pages only to memory that asks for them.
#![allow(unsafe_code)]

/// Buffers smaller than a huge page gain nothing.
const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back the whole pages inside `buf` with transparent huge pages
/// (`madvise(MADV_HUGEPAGE)`), if `buf` is at least 2 MiB. Advice only: it changes how the
/// memory is backed, never what it holds, and where the kernel declines (huge pages disabled,
/// an old kernel, another OS) nothing happens.
pub(crate) fn advise<T>(buf: &mut [T]) {
    let bytes = std::mem::size_of_val(buf);
    if bytes < HUGE_PAGE {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `sysconf` only reads a system constant.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            p if p > 0 => p as usize,
            _ => return,
        };
        let start = buf.as_mut_ptr() as usize;
        let first = start.next_multiple_of(page);
        let end = (start + bytes) / page * page;
        if end > first {
            // SAFETY: `first .. end` lies inside `buf`, which is borrowed mutably here, so no
            // one else holds it; MADV_HUGEPAGE leaves its contents as they are, and a failure
            // (the return value) only means the advice was not taken.
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            }
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// The advice reaches the kernel: where transparent huge pages are on (`always` or
    /// `madvise`), the kernel reports the buffer's mapping eligible for them, which in
    /// `madvise` mode it is only once advised.
    #[test]
    fn advised_buffers_are_eligible_for_huge_pages() {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if !mode.contains("[always]") && !mode.contains("[madvise]") {
            eprintln!("transparent huge pages are off here: nothing to check");
            return;
        }
        let mut buf = vec![0u8; 16 << 20];
        super::advise(&mut buf);
        buf.iter_mut().step_by(4096).for_each(|b| *b = 1);
        let at = buf.as_ptr() as usize + (8 << 20);
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let mut inside = false;
        let mut eligible = None;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = range.split_once('-')
                && let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = (lo..hi).contains(&at);
            } else if inside && let Some(v) = line.strip_prefix("THPeligible:") {
                eligible = Some(v.trim() == "1");
            }
        }
        assert_eq!(
            eligible,
            Some(true),
            "the advised mapping, in mode {mode:?}"
        );
        assert!(buf.iter().step_by(4096).all(|b| *b == 1));
    }
}
