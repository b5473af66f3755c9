//! What one store has learned about its endpoint while sending requests: whether it has ever
//! answered, and how fast it lets us go.
//!
//! Every HTTP attempt of a [`Store`](crate::Store) passes through [`Link`] (from the counting
//! connector in [`crate::http`]), below object_store's retry loop:
//!
//! - **First contact.** An endpoint that has never answered is most likely a typo or a server
//!   that is not running, so refused connections are retried only for [`CONNECT_GRACE`] after
//!   the first attempt; after that they fail at once with "cannot reach". Once the endpoint has
//!   answered, a refused connection is an outage (a restart) and is retried within the whole
//!   retry budget like any other transient failure.
//! - **Adaptive slowing** (retry mode `adaptive`, as in the AWS SDKs). When the store answers
//!   `503` or `429`, the client limits its own sending rate to 70% of the rate it was sending
//!   at, grows it back over the following seconds (CUBIC, see `Throttle`), and stops limiting
//!   once the rate is well above where throttling began.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// How long refused connections are retried before the endpoint has ever answered.
pub const CONNECT_GRACE: Duration = Duration::from_secs(3);

/// The share of the sending rate kept when the store throttles (CUBIC's beta).
const BETA: f64 = 0.7;
/// CUBIC's scaling constant: how fast the rate grows back, in requests/s per s³.
const SCALE: f64 = 0.4;
/// The lowest rate the client slows down to, in requests per second.
const MIN_RATE: f64 = 1.0;
/// Limiting stops when the allowed rate has grown to this multiple of the rate at the last
/// throttle.
const RELEASE_FACTOR: f64 = 4.0;
/// At most one decrease per this interval: a burst of requests throttled together is one
/// signal, not one per request.
const DECREASE_INTERVAL: Duration = Duration::from_millis(200);
/// The window over which the sending rate is measured.
const RATE_WINDOW: Duration = Duration::from_millis(500);

/// Shared state of one store's endpoint.
#[derive(Debug, Default)]
pub(crate) struct Link {
    adaptive: bool,
    first_attempt: OnceLock<Instant>,
    answered: AtomicBool,
    throttle: Mutex<Throttle>,
}

/// CUBIC rate control, as the AWS SDKs' adaptive retry mode does it: after a throttle at
/// sending rate `w_max` the rate drops to `BETA * w_max`, then grows back as
/// `SCALE * (t - K)^3 + w_max` with `K = cbrt(w_max * (1 - BETA) / SCALE)`, reaching `w_max`
/// after `K` seconds and growing faster beyond it.
#[derive(Debug, Default)]
struct Throttle {
    /// The sending rate at the last throttle; `None` while not limiting.
    w_max: Option<f64>,
    last_throttle: Option<Instant>,
    /// The earliest time the next request may be sent while limiting.
    next_slot: Option<Instant>,
    window_start: Option<Instant>,
    window_sends: u32,
    /// Requests per second sent over the last full window.
    measured: f64,
}

impl Throttle {
    fn count_send(&mut self, now: Instant) {
        let start = *self.window_start.get_or_insert(now);
        let elapsed = now.duration_since(start);
        if elapsed >= RATE_WINDOW {
            self.measured = f64::from(self.window_sends) / elapsed.as_secs_f64();
            self.window_start = Some(now);
            self.window_sends = 0;
        }
        self.window_sends += 1;
    }

    /// The sending rate: the last full window's, or the current window's when that is higher
    /// (a burst that began within it).
    fn sending_rate(&self, now: Instant) -> f64 {
        let current = self.window_start.map_or(0.0, |s| {
            let secs = now.duration_since(s).as_secs_f64().max(0.05);
            f64::from(self.window_sends) / secs
        });
        self.measured.max(current)
    }

    /// The allowed rate at `now`, or `None` when not limiting (releasing the limit once it
    /// has grown well past the rate throttling began at).
    fn rate(&mut self, now: Instant) -> Option<f64> {
        let (w_max, since) = (self.w_max?, self.last_throttle?);
        let k = (w_max * (1.0 - BETA) / SCALE).cbrt();
        let t = now.duration_since(since).as_secs_f64();
        let rate = (SCALE * (t - k).powi(3) + w_max).max(MIN_RATE);
        if rate > w_max * RELEASE_FACTOR {
            tracing::debug!("the store stopped throttling: no longer limiting the rate");
            self.w_max = None;
            self.next_slot = None;
            return None;
        }
        Some(rate)
    }

    fn throttled(&mut self, now: Instant) {
        let recent = self
            .last_throttle
            .is_some_and(|d| now.duration_since(d) < DECREASE_INTERVAL);
        if recent {
            return;
        }
        let sending = self.sending_rate(now).max(MIN_RATE);
        let w_max = self.rate(now).map_or(sending, |r| r.min(sending));
        tracing::debug!(rate = w_max * BETA, "the store is throttling: slowing down");
        self.w_max = Some(w_max);
        self.last_throttle = Some(now);
    }
}

impl Link {
    /// The state of a new store; `adaptive` turns on rate limiting when throttled.
    pub(crate) fn new(adaptive: bool) -> Link {
        Link {
            adaptive,
            ..Link::default()
        }
    }

    /// Waits for this request's turn while the store is throttling us; counts the send.
    pub(crate) async fn pace(&self) {
        self.first_attempt.get_or_init(Instant::now);
        if !self.adaptive {
            return;
        }
        let slot = {
            let mut t = self.throttle.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            t.count_send(now);
            t.rate(now).map(|rate| {
                let slot = t.next_slot.map_or(now, |s| s.max(now));
                t.next_slot = Some(slot + Duration::from_secs_f64(1.0 / rate));
                slot
            })
        };
        if let Some(slot) = slot {
            tokio::time::sleep_until(slot).await;
        }
    }

    /// The endpoint answered; `throttled` when it said 503 or 429.
    pub(crate) fn answered(&self, throttled: bool) {
        self.answered.store(true, Ordering::Relaxed);
        if self.adaptive && throttled {
            let mut t = self.throttle.lock().unwrap_or_else(PoisonError::into_inner);
            t.throttled(Instant::now());
        }
    }

    /// True when a refused connection should no longer be retried: the endpoint has never
    /// answered and [`CONNECT_GRACE`] has passed since the first attempt.
    pub(crate) fn give_up_connecting(&self) -> bool {
        !self.answered.load(Ordering::Relaxed)
            && self
                .first_attempt
                .get()
                .is_some_and(|t| t.elapsed() >= CONNECT_GRACE)
    }

    /// The current self-imposed rate limit, if any.
    #[cfg(test)]
    fn rate(&self) -> Option<f64> {
        self.throttle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .rate(Instant::now())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A throttle that saw `n` sends spread over one second before `at`.
    fn after_sends(n: u32, at: Instant) -> Throttle {
        let mut t = Throttle::default();
        let start = at - Duration::from_secs(1);
        for i in 0..n {
            t.count_send(start + Duration::from_secs_f64(f64::from(i) / f64::from(n)));
        }
        t
    }

    #[test]
    fn a_throttle_cuts_the_rate_then_it_grows_back_and_is_released() {
        let now = Instant::now();
        let mut t = after_sends(100, now);
        assert_eq!(t.rate(now), None, "no limit before any throttle");
        t.throttled(now);
        let first = t.rate(now).unwrap();
        assert!((60.0..=80.0).contains(&first), "70% of ~100/s: {first}");
        // A burst throttled together is one signal.
        let w_max = t.w_max;
        t.throttled(now + Duration::from_millis(50));
        assert_eq!(t.w_max, w_max);
        // CUBIC: back at the old rate after K seconds, released well beyond it.
        let k = (100.0_f64 * (1.0 - BETA) / SCALE).cbrt();
        let at_k = t.rate(now + Duration::from_secs_f64(k)).unwrap();
        assert!(at_k > 95.0, "{at_k}");
        assert_eq!(t.rate(now + Duration::from_secs(60)), None);
    }

    #[test]
    fn repeated_throttling_slows_further_but_not_below_the_floor() {
        let now = Instant::now();
        let mut t = after_sends(10, now);
        let mut at = now;
        for _ in 0..50 {
            t.throttled(at);
            at += DECREASE_INTERVAL;
        }
        let rate = t.rate(at).unwrap();
        assert!((MIN_RATE..3.0).contains(&rate), "{rate}");
    }

    #[tokio::test]
    async fn standard_mode_never_limits_and_adaptive_spaces_requests() {
        let standard = Link::new(false);
        standard.pace().await;
        standard.answered(true);
        assert_eq!(standard.rate(), None);
        let adaptive = Link::new(true);
        adaptive.pace().await;
        adaptive.answered(true);
        let rate = adaptive.rate().unwrap();
        let slot = {
            let t = adaptive.throttle.lock().unwrap();
            t.next_slot
        };
        assert_eq!(slot, None, "the throttle came after the only send");
        adaptive.pace().await;
        let t = adaptive.throttle.lock().unwrap();
        let gap = t.next_slot.unwrap() - Instant::now();
        assert!(
            gap.as_secs_f64() <= 1.0 / rate + 0.01,
            "{gap:?} at {rate}/s"
        );
    }

    #[test]
    fn connecting_is_given_up_only_before_any_answer() {
        let link = Link::default();
        assert!(!link.give_up_connecting(), "no attempt yet");
        link.first_attempt
            .set(Instant::now() - CONNECT_GRACE)
            .unwrap();
        assert!(link.give_up_connecting());
        link.answered(false);
        assert!(!link.give_up_connecting());
    }
}
