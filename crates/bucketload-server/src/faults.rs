//! Request counters, deterministic fault rules, seeded random numbers and the per-prefix
//! rate limiter. All of it is shared by every connection of one server.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use serde::Serialize;

/// Names of the operations the server counts; anything else is counted as `"Other"`.
pub(crate) const OPERATIONS: &[&str] = &[
    "ListBuckets",
    "CreateBucket",
    "HeadBucket",
    "DeleteBucket",
    "ListObjects",
    "ListObjectsV2",
    "ListMultipartUploads",
    "CreateSession",
    "HeadObject",
    "GetObject",
    "PutObject",
    "CopyObject",
    "DeleteObject",
    "DeleteObjects",
    "CreateMultipartUpload",
    "UploadPart",
    "UploadPartCopy",
    "CompleteMultipartUpload",
    "AbortMultipartUpload",
    "ListParts",
    "Other",
];

/// Live per-operation counts (one atomic per operation, no lock on the request path).
#[derive(Debug, Default)]
pub(crate) struct CounterSet {
    counts: [AtomicU64; OPERATIONS.len()],
}

impl CounterSet {
    pub(crate) fn increment(&self, op: &'static str) {
        let index = OPERATIONS
            .iter()
            .position(|o| *o == op)
            .unwrap_or(OPERATIONS.len() - 1);
        self.counts[index].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Counters {
        let counts = OPERATIONS
            .iter()
            .zip(&self.counts)
            .map(|(op, n)| (*op, n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect();
        Counters { counts }
    }
}

/// A snapshot of per-operation request counts, faulted and rejected requests included.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Counters {
    counts: BTreeMap<&'static str, u64>,
}

impl Counters {
    /// Requests seen for `op` (an S3 operation name such as `"GetObject"` or `"UploadPart"`).
    pub fn get(&self, op: &str) -> u64 {
        self.counts.get(op).copied().unwrap_or(0)
    }

    /// Requests seen for all operations together.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Operations with at least one request, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.counts.iter().map(|(op, n)| (*op, *n))
    }
}

/// How an injected fault answers a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultKind {
    /// An S3 XML error with this status: 503 answers SlowDown, 500 InternalError.
    Status(u16),
    /// An S3 XML error with this status and error code, e.g. 409 `BucketAlreadyExists` as
    /// some servers answer CreateBucket on a bucket that exists.
    Error {
        /// HTTP status.
        status: u16,
        /// S3 error code (`<Code>`).
        code: &'static str,
    },
    /// The connection is reset (TCP RST) half-way through the response body, or before the
    /// response when it has no body.
    ResetMidBody,
    /// The response promises its full Content-Length, sends half and closes the connection.
    Truncate,
}

#[derive(Debug)]
struct Rule {
    op: String,
    remaining: usize,
    kind: FaultKind,
}

/// Runtime fault rules, shared with the running server: `fail_next("GetObject", 2,
/// FaultKind::Status(503))` makes the next two GetObject requests fail, whatever the
/// random fault rates say.
#[derive(Clone, Debug, Default)]
pub struct FaultControl {
    rules: Arc<Mutex<Vec<Rule>>>,
}

impl FaultControl {
    /// Makes the next `count` requests of operation `op` fail with `kind`. Rules for the same
    /// operation apply in the order they were added.
    pub fn fail_next(&self, op: &str, count: usize, kind: FaultKind) {
        let mut rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        rules.push(Rule {
            op: op.to_owned(),
            remaining: count,
            kind,
        });
    }

    /// Removes every pending rule.
    pub fn clear(&self) {
        self.rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Requests still to be failed by rules for `op`.
    pub fn pending(&self, op: &str) -> usize {
        let rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        rules
            .iter()
            .filter(|r| r.op == op)
            .map(|r| r.remaining)
            .sum()
    }

    /// Takes one fault for `op` if a rule asks for it.
    pub(crate) fn take(&self, op: &str) -> Option<FaultKind> {
        let mut rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        let index = rules.iter().position(|r| r.op == op && r.remaining > 0)?;
        let rule = &mut rules[index];
        rule.remaining -= 1;
        let kind = rule.kind;
        if rule.remaining == 0 {
            rules.remove(index);
        }
        Some(kind)
    }
}

/// Lock-free seeded random numbers (SplitMix64 over an atomic counter): reproducible for a
/// given seed and request order.
#[derive(Debug)]
pub(crate) struct Rng {
    state: AtomicU64,
}

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            state: AtomicU64::new(seed),
        }
    }

    pub(crate) fn next_u64(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn next_f64(&self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Debug)]
struct TokenBucket {
    tokens: f64,
    last: Instant,
}

/// Token bucket per prefix (bucket + first key segment); the burst equals one second of rate.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    rate: f64,
    buckets: Mutex<HashMap<String, TokenBucket>>,
}

impl RateLimiter {
    pub(crate) fn new(requests_per_sec: u32) -> Self {
        Self {
            rate: f64::from(requests_per_sec),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes a token for `prefix`; `false` means the request must be refused with SlowDown.
    pub(crate) fn admit(&self, prefix: &str) -> bool {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let bucket = match buckets.get_mut(prefix) {
            Some(b) => b,
            None => buckets.entry(prefix.to_owned()).or_insert(TokenBucket {
                tokens: self.rate,
                last: now,
            }),
        };
        let elapsed = now.duration_since(bucket.last).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.rate).min(self.rate);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The partition key S3 throttles on: bucket plus the key up to its first '/'; keys
/// without a '/' share the bucket's partition.
pub(crate) fn partition_of(path: &str) -> &str {
    let path = path.trim_start_matches('/');
    let Some(slash) = path.find('/') else {
        return path;
    };
    match path[slash + 1..].find('/') {
        Some(second) => &path[..slash + 1 + second],
        None => &path[..slash],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_apply_in_order_then_expire() {
        let control = FaultControl::default();
        control.fail_next("GetObject", 2, FaultKind::Status(503));
        control.fail_next("GetObject", 1, FaultKind::Truncate);
        assert_eq!(control.pending("GetObject"), 3);
        assert_eq!(control.take("PutObject"), None);
        assert_eq!(control.take("GetObject"), Some(FaultKind::Status(503)));
        assert_eq!(control.take("GetObject"), Some(FaultKind::Status(503)));
        assert_eq!(control.take("GetObject"), Some(FaultKind::Truncate));
        assert_eq!(control.take("GetObject"), None);
    }

    #[test]
    fn counters_count_unknown_as_other() {
        let set = CounterSet::default();
        set.increment("GetObject");
        set.increment("GetObject");
        set.increment("Nonsense");
        let snap = set.snapshot();
        assert_eq!(snap.get("GetObject"), 2);
        assert_eq!(snap.get("Other"), 1);
        assert_eq!(snap.get("PutObject"), 0);
        assert_eq!(snap.total(), 3);
        assert_eq!(
            serde_json::to_string(&snap).unwrap(),
            r#"{"GetObject":2,"Other":1}"#
        );
    }

    #[test]
    fn rng_is_reproducible_and_uniformish() {
        let a = Rng::new(42);
        let b = Rng::new(42);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mean = (0..10_000).map(|_| a.next_f64()).sum::<f64>() / 10_000.0;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }

    #[test]
    fn rate_limiter_refuses_after_burst() {
        let limiter = RateLimiter::new(3);
        assert!(limiter.admit("b/p"));
        assert!(limiter.admit("b/p"));
        assert!(limiter.admit("b/p"));
        assert!(!limiter.admit("b/p"));
        assert!(limiter.admit("b/q"));
    }

    #[test]
    fn partitions() {
        assert_eq!(partition_of("/bkt/train/shard-1.tar"), "bkt/train");
        assert_eq!(partition_of("/bkt/flat-key"), "bkt");
        assert_eq!(partition_of("/bkt"), "bkt");
        assert_eq!(partition_of("/bkt/"), "bkt");
    }
}
