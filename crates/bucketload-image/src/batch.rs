//! Batches: one contiguous, 64-byte aligned pixel buffer plus labels.

/// Alignment of every batch buffer, in bytes: a cache line, and enough for AVX-512 loads and
/// for the pinned-memory copies of accelerator runtimes.
pub const BATCH_ALIGN: usize = 64;

/// A zero-initialised slice of `len` elements whose first element sits on a [`BATCH_ALIGN`]
/// boundary (the backing vector is over-allocated and the slice starts at the first aligned
/// element, so no `unsafe` is needed).
#[derive(Debug, Clone)]
pub struct AlignedBuf<T> {
    raw: Vec<T>,
    offset: usize,
    len: usize,
}

impl<T: Copy + Default> AlignedBuf<T> {
    /// `len` default values, aligned.
    pub fn zeroed(len: usize) -> AlignedBuf<T> {
        let size = std::mem::size_of::<T>().max(1);
        let mut raw = vec![T::default(); len + BATCH_ALIGN / size];
        crate::hugepages::advise(&mut raw);
        let misalign = raw.as_ptr() as usize % BATCH_ALIGN;
        let offset = ((BATCH_ALIGN - misalign) % BATCH_ALIGN) / size;
        AlignedBuf { raw, offset, len }
    }

    /// This buffer resized to `len` elements without reallocating, if it has room; the
    /// contents are whatever was there (callers overwrite every element).
    pub fn reuse(mut self, len: usize) -> Option<AlignedBuf<T>> {
        if self.offset + len > self.raw.len() {
            return None;
        }
        self.len = len;
        Some(self)
    }

    /// Keeps the first `len` elements (no reallocation).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

impl<T> std::ops::Deref for AlignedBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.raw[self.offset..self.offset + self.len]
    }
}

impl<T> std::ops::DerefMut for AlignedBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.raw[self.offset..self.offset + self.len]
    }
}

/// The pixels of a batch.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum BatchData {
    /// `[n, height, width, 3]` bytes.
    HwcU8(AlignedBuf<u8>),
    /// `[n, 3, height, width]` normalised floats.
    ChwF32(AlignedBuf<f32>),
}

/// A sample that was skipped under `OnError::Skip`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Key of the sample.
    pub key: String,
    /// Why it was skipped.
    pub reason: String,
}

/// A batch of augmented images.
#[derive(Debug, Clone)]
pub struct Batch {
    /// The pixels, one contiguous aligned buffer.
    pub data: BatchData,
    /// One label per image, in order.
    pub labels: Vec<i64>,
    /// Sample indices, in order (the `index` of each input sample kept).
    pub indices: Vec<u64>,
    /// Shape of `data`: `[n, h, w, 3]` for HWC, `[n, 3, h, w]` for CHW.
    pub shape: [usize; 4],
    /// Samples dropped from this batch under `OnError::Skip`.
    pub skipped: Vec<Skipped>,
}

impl Batch {
    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the batch holds no image (every sample was skipped).
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The bytes of an HWC batch, if it is one.
    pub fn as_u8(&self) -> Option<&[u8]> {
        match &self.data {
            BatchData::HwcU8(b) => Some(b),
            BatchData::ChwF32(_) => None,
        }
    }

    /// The floats of a CHW batch, if it is one.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            BatchData::ChwF32(b) => Some(b),
            BatchData::HwcU8(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_sized() {
        for len in [0, 1, 3, 1000] {
            let b = AlignedBuf::<f32>::zeroed(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % BATCH_ALIGN, 0);
            let b = AlignedBuf::<u8>::zeroed(len);
            assert_eq!(b.as_ptr() as usize % BATCH_ALIGN, 0);
        }
    }
}
