//! The emulated first-byte latency, slept on the kernel's high-resolution timers.
//!
//! Tokio's timer counts whole milliseconds: it rounds every deadline up to its next
//! millisecond tick, and its reactor waits in whole milliseconds as well. A read at one
//! request in flight against `--latency 50ms` took 52.1 ms on it, 51.1 ms on a timerfd armed
//! for the exact duration and waited on in Tokio's reactor, which fires within microseconds of
//! it and never before it (docs/BENCHMARKS.md).

use std::time::{Duration, Instant};

/// Waits `duration`: never less, and on Linux with a timerfd's precision. Where a timerfd
/// cannot be made (no descriptor left), Tokio's timer sleeps what is left. Runs on the
/// server's runtime, whose reactor serves its sockets.
pub(crate) async fn sleep(duration: Duration) {
    if duration.is_zero() {
        return;
    }
    let start = Instant::now();
    #[cfg(target_os = "linux")]
    if timerfd::sleep(duration).await.is_ok() {
        return;
    }
    tokio::time::sleep(duration.saturating_sub(start.elapsed())).await;
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod timerfd {
    use std::io;
    use std::time::Duration;

    use rustix::time::{
        Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
        timerfd_settime,
    };
    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;

    pub(super) async fn sleep(duration: Duration) -> io::Result<()> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        let value = Timespec {
            tv_sec: duration.as_secs().try_into().unwrap_or(i64::MAX),
            tv_nsec: duration.subsec_nanos().into(),
        };
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        timerfd_settime(
            &fd,
            TimerfdTimerFlags::empty(),
            &Itimerspec {
                it_interval: zero,
                it_value: value,
            },
        )?;
        // SAFETY: the AsyncFd owns the descriptor, which stays open and the same until the
        // AsyncFd is dropped (and closes it).
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(io::Error::from)?;
        loop {
            let mut ready = fd.readable().await?;
            // The number of expirations: 8 bytes once the timer has fired.
            let mut expirations = [0u8; 8];
            match rustix::io::read(ready.get_inner(), &mut expirations) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::AGAIN) => ready.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn never_wakes_before_its_time() {
        for micros in [1, 150, 999, 1_000, 2_300] {
            let asked = Duration::from_micros(micros);
            let start = Instant::now();
            sleep(asked).await;
            assert!(start.elapsed() >= asked, "{micros} µs");
        }
    }
}
