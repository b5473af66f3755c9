//! Per-stage counters of a loader: what the fetch stage and the consumer did, and how long each
//! waited for the other.
//!
//! - **Fetch stage**: requests by kind, requests in flight (now, at most, on average), and the
//!   time at least one request was in flight (`fetch.busy_s`) or none (`fetch.idle_s`).
//! - **Consumer**: the time it spent waiting inside `poll_next` for a sample
//!   (`consumer.waiting_s`) and the rest of the run (`consumer.busy_s`, its own work).
//!
//! Reading them: a consumer that mostly waits while the mean in flight is near the configured
//! concurrency is limited by the store (raise the concurrency); one that mostly waits with few
//! requests in flight is limited by the loader itself (CPU, cache); one that is mostly busy is
//! the bottleneck itself, and the loader keeps up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::io::{CacheCounts, PrefetchSnapshot};

/// Counters shared by a loader's tasks (atomics).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) samples: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) gets: AtomicU64,
    pub(crate) ranged_gets: AtomicU64,
    pub(crate) index_gets: AtomicU64,
    pub(crate) coalesced: AtomicU64,
    pub(crate) in_flight: AtomicU64,
    pub(crate) max_in_flight: AtomicU64,
    pub(crate) request_nanos: AtomicU64,
    pub(crate) consumer_wait_nanos: AtomicU64,
    pub(crate) max_held: AtomicU64,
    pub(crate) skipped_changed: AtomicU64,
    clock: Mutex<Clock>,
}

#[derive(Debug, Default)]
struct Clock {
    started: Option<Instant>,
    busy_since: Option<Instant>,
    busy: Duration,
}

pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Counters {
    /// Starts the wall clock at the first poll of a stream.
    pub(crate) fn start(&self) {
        let mut clock = self.clock.lock().unwrap_or_else(PoisonError::into_inner);
        clock.started.get_or_insert_with(Instant::now);
    }

    /// A request starts; the guard ends it when dropped.
    pub(crate) fn request(&self, ranged: bool) -> RequestGuard<'_> {
        add(
            if ranged {
                &self.ranged_gets
            } else {
                &self.gets
            },
            1,
        );
        self.busy()
    }

    /// Something is in flight (a request, or a shard stream) until the guard drops.
    pub(crate) fn busy(&self) -> RequestGuard<'_> {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_in_flight.fetch_max(now, Ordering::Relaxed);
        if now == 1 {
            let mut clock = self.clock.lock().unwrap_or_else(PoisonError::into_inner);
            clock.busy_since.get_or_insert_with(Instant::now);
        }
        RequestGuard {
            counters: self,
            started: Instant::now(),
        }
    }

    pub(crate) fn note_held(&self, held: u64) {
        self.max_held.fetch_max(held, Ordering::Relaxed);
    }

    pub(crate) fn consumer_waited(&self, waited: Duration) {
        add(&self.consumer_wait_nanos, nanos(waited));
    }

    /// A snapshot; `prefetch` comes from the shard readers' counters, `cache` from the cache's.
    pub(crate) fn snapshot(&self, prefetch: PrefetchSnapshot, cache: CacheCounts) -> LoaderStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let clock = self.clock.lock().unwrap_or_else(PoisonError::into_inner);
        let elapsed = clock.started.map_or(Duration::ZERO, |s| s.elapsed());
        let busy = clock.busy + clock.busy_since.map_or(Duration::ZERO, |s| s.elapsed());
        let secs = elapsed.as_secs_f64();
        let waiting = get(&self.consumer_wait_nanos) as f64 / 1e9;
        let request_s = get(&self.request_nanos) as f64 / 1e9;
        LoaderStats {
            elapsed_s: secs,
            samples: get(&self.samples),
            bytes: get(&self.bytes),
            skipped_changed: get(&self.skipped_changed),
            requests: RequestStats {
                get: get(&self.gets),
                ranged_get: get(&self.ranged_gets),
                index_get: get(&self.index_gets),
                shard_ranged_get: prefetch.requests,
                samples_coalesced: get(&self.coalesced),
            },
            in_flight: InFlight {
                now: get(&self.in_flight),
                max: get(&self.max_in_flight),
                mean: if secs > 0.0 { request_s / secs } else { 0.0 },
                request_s,
            },
            cache,
            fetch: StageTime {
                busy_s: busy.as_secs_f64().min(secs),
                idle_or_waiting_s: (secs - busy.as_secs_f64()).max(0.0),
            },
            consumer: StageTime {
                busy_s: (secs - waiting).max(0.0),
                idle_or_waiting_s: waiting.min(secs),
            },
            max_reorder_held: get(&self.max_held),
            prefetch,
        }
    }
}

/// Ends a request in the counters when dropped (also when its future is cancelled).
#[derive(Debug)]
pub(crate) struct RequestGuard<'a> {
    counters: &'a Counters,
    started: Instant,
}

impl Drop for RequestGuard<'_> {
    fn drop(&mut self) {
        let c = self.counters;
        add(&c.request_nanos, nanos(self.started.elapsed()));
        if c.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            let mut clock = c.clock.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(since) = clock.busy_since.take() {
                clock.busy += since.elapsed();
            }
        }
    }
}

/// What a loader did since it opened (serde `Serialize`, for `bucketload read --json`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoaderStats {
    /// Seconds since the first sample was asked for.
    pub elapsed_s: f64,
    /// Samples delivered.
    pub samples: u64,
    /// Member bytes delivered.
    pub bytes: u64,
    /// Samples left out because their object differs from what the manifest or listing says
    /// (only with [`LoaderBuilder::with_skip_changed`](super::LoaderBuilder::with_skip_changed);
    /// otherwise such an object fails the stream). An epoch with skipped samples delivered
    /// fewer samples than it holds.
    pub skipped_changed: u64,
    /// Requests by kind.
    pub requests: RequestStats,
    /// Requests in flight (files and indexed sources) or shard streams running (shards).
    pub in_flight: InFlight,
    /// Cache lookups.
    pub cache: CacheCounts,
    /// Time with at least one request in flight (`busy_s`) and with none.
    pub fetch: StageTime,
    /// Time the consumer spent on its own work (`busy_s`) and waiting for a sample.
    pub consumer: StageTime,
    /// Most samples held at once to restore the source's order (shards: at most the shuffle
    /// buffer + 1; strict delivery of random-access sources: at most the requests in flight).
    pub max_reorder_held: u64,
    /// The shard readers' counters.
    pub prefetch: PrefetchSnapshot,
}

impl LoaderStats {
    /// Samples per second.
    pub fn samples_per_s(&self) -> f64 {
        per_s(self.samples as f64, self.elapsed_s)
    }

    /// Megabytes (10^6 bytes) per second.
    pub fn mb_per_s(&self) -> f64 {
        per_s(self.bytes as f64 / 1e6, self.elapsed_s)
    }
}

fn per_s(x: f64, secs: f64) -> f64 {
    if secs > 0.0 { x / secs } else { 0.0 }
}

/// Requests by kind.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RequestStats {
    /// Whole-object GETs (files).
    pub get: u64,
    /// Ranged GETs of samples (indexed; one may carry several samples).
    pub ranged_get: u64,
    /// GETs of shard indexes when their shard came up (indexed shards, and streamed shards
    /// that start mid-shard); those a listing's open reads for its sample counts are not
    /// counted.
    pub index_get: u64,
    /// Ranged GETs of the shard streams' prefetchers.
    pub shard_ranged_get: u64,
    /// Samples that shared a ranged GET with an earlier sample.
    pub samples_coalesced: u64,
}

/// Requests in flight.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct InFlight {
    /// Now.
    pub now: u64,
    /// At most.
    pub max: u64,
    /// On average over the run (Little's law: total request time ÷ wall time).
    pub mean: f64,
    /// Total time of all requests, in seconds (their sum, not wall time).
    pub request_s: f64,
}

/// How a stage spent the run.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct StageTime {
    /// Seconds working.
    pub busy_s: f64,
    /// Seconds idle or waiting on the other stage.
    pub idle_or_waiting_s: f64,
}
