//! Reusable read buffers for object bodies.
//!
//! A GET of a small object reads it into a buffer handed to hyper as [`Bytes`]; allocating a
//! fresh 100 KB buffer per request costs page faults (glibc returns freed memory to the
//! kernel), and `read_to_end` splits a read into growing 8 KiB.. pieces. Pooled buffers are
//! already initialised, so one `pread` fills them, and they return to the pool when hyper
//! drops the `Bytes`.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

/// Smallest pooled buffer; smaller reads use their own allocation.
const MIN_CLASS: usize = 16 * 1024;
/// Number of size classes: 16 KiB, 32 KiB, ... 1 MiB.
const CLASSES: usize = 7;
/// Bytes kept per class at most (idle buffers), so the pool holds at most 7 × 16 MiB.
const BYTES_PER_CLASS: usize = 16 * 1024 * 1024;

#[derive(Debug, Default)]
pub(crate) struct BufferPool {
    classes: [Mutex<Vec<Vec<u8>>>; CLASSES],
}

fn class_of(len: usize) -> Option<usize> {
    let size = len.max(MIN_CLASS).next_power_of_two();
    let index = (size / MIN_CLASS).trailing_zeros() as usize;
    (index < CLASSES).then_some(index)
}

impl BufferPool {
    /// Fills a buffer of `len` bytes with `fill` and returns it as `Bytes`.
    pub(crate) fn read_with(
        self: &Arc<Self>,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> std::io::Result<()>,
    ) -> std::io::Result<Bytes> {
        let Some(class) = class_of(len) else {
            let mut buf = vec![0u8; len];
            fill(&mut buf)?;
            return Ok(Bytes::from(buf));
        };
        let pooled = self.classes[class]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut buf = pooled.unwrap_or_else(|| vec![0u8; MIN_CLASS << class]);
        fill(&mut buf[..len])?;
        Ok(Bytes::from_owner(Pooled {
            buf,
            len,
            class,
            pool: Arc::clone(self),
        }))
    }
}

struct Pooled {
    buf: Vec<u8>,
    len: usize,
    class: usize,
    pool: Arc<BufferPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        let mut free = self.pool.classes[self.class]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if (free.len() + 1) * buf.len() <= BYTES_PER_CLASS {
            free.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(class_of(1), Some(0));
        assert_eq!(class_of(16 * 1024), Some(0));
        assert_eq!(class_of(100_000), Some(3));
        assert_eq!(class_of(1 << 20), Some(6));
        assert_eq!(class_of((1 << 20) + 1), None);
    }

    #[test]
    fn buffers_are_reused_and_sliced() {
        let pool = Arc::new(BufferPool::default());
        let a = pool.read_with(5, |b| {
            b.copy_from_slice(b"hello");
            Ok(())
        });
        let a = a.unwrap();
        assert_eq!(&a[..], b"hello");
        let ptr = a.as_ptr();
        drop(a);
        let b = pool.read_with(3, |b| {
            b.copy_from_slice(b"abc");
            Ok(())
        });
        let b = b.unwrap();
        assert_eq!(&b[..], b"abc");
        assert_eq!(b.as_ptr(), ptr, "the freed buffer is reused");
    }
}
