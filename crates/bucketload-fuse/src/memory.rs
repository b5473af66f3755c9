//! The memory budget shared by every open handle (`--memory-limit`).
//!
//! Buffers are reserved before they are filled: a reader's prefetch window, a small file read
//! whole, a writer's parts. Reservations are counted in KiB on one semaphore, so the sum over all
//! handles never exceeds the limit. Readers take a smaller window when memory is short (down to
//! none: then every read is one ranged GET of what the kernel asked for); writers and whole-file
//! reads wait for memory, up to the configured wait (60 s by default), then fail with `ENOMEM`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

const UNIT: u64 = 1024;

/// The budget.
#[derive(Debug, Clone)]
pub(crate) struct Memory {
    permits: Arc<Semaphore>,
    limit: u64,
    wait: Duration,
}

/// Memory held until dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    _permit: Option<OwnedSemaphorePermit>,
}

fn units(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX)
}

impl Memory {
    pub(crate) fn new(limit: u64, wait: Duration) -> Memory {
        let total = units(limit).min(u32::try_from(Semaphore::MAX_PERMITS).unwrap_or(u32::MAX));
        Memory {
            permits: Arc::new(Semaphore::new(total as usize)),
            limit,
            wait,
        }
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes not reserved now.
    pub(crate) fn available(&self) -> u64 {
        self.permits.available_permits() as u64 * UNIT
    }

    /// Reserves `bytes` if they are free now.
    pub(crate) fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        if bytes == 0 {
            return Some(Reservation { _permit: None });
        }
        let permit = Arc::clone(&self.permits)
            .try_acquire_many_owned(units(bytes))
            .ok()?;
        Some(Reservation {
            _permit: Some(permit),
        })
    }

    /// Reserves `bytes`, waiting for other handles to free them; `None` if the limit is smaller
    /// than `bytes` or the wait ran out.
    pub(crate) async fn reserve(&self, bytes: u64) -> Option<Reservation> {
        let wait = self.wait;
        if bytes > self.limit {
            return None;
        }
        if bytes == 0 {
            return self.try_reserve(0);
        }
        let acquire = Arc::clone(&self.permits).acquire_many_owned(units(bytes));
        match tokio::time::timeout(wait, acquire).await {
            Ok(Ok(permit)) => Some(Reservation {
                _permit: Some(permit),
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reservations_are_bounded_and_released_on_drop() {
        let m = Memory::new(10 << 20, Duration::ZERO);
        let a = m.try_reserve(6 << 20).unwrap();
        assert!(m.try_reserve(6 << 20).is_none());
        assert!(m.reserve(6 << 20).await.is_none());
        assert!(m.reserve(11 << 20).await.is_none(), "over the limit");
        drop(a);
        assert_eq!(m.available(), 10 << 20);
        let _b = m.reserve(6 << 20).await.unwrap();
        assert_eq!(m.available(), 4 << 20);
    }
}
