//! Request, byte, error, latency and retry counters of one store, and their
//! price.
//!
//! [`METRICS`] is the single list of metric names, units and meanings;
//! `docs/METRICS.md` mirrors it. Counters are lock-free atomics; the two
//! latency histograms sit behind a mutex held only to record one value.
//!
//! Retries: object_store retries inside its own calls, so the store counts
//! every HTTP attempt at the HTTP client and every logical request at the
//! `ObjectStore` API. For each logical request, retries = attempts − the
//! distinct requests it needed (1 for a GET/PUT/HEAD, one per page for a
//! LIST, one per batch for a bulk DELETE).

use crate::error::ErrorClass;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// One metric: its name in snapshots, its unit, what it counts.
#[derive(Debug, Clone, Copy)]
pub struct MetricDef {
    /// Field path in the serialised [`MetricsSnapshot`].
    pub name: &'static str,
    /// Unit of the value.
    pub unit: &'static str,
    /// What is counted.
    pub meaning: &'static str,
}

/// Every metric the store reports.
pub const METRICS: &[MetricDef] = &[
    MetricDef {
        name: "requests.get",
        unit: "requests",
        meaning: "whole-object GETs (logical, retries excluded)",
    },
    MetricDef {
        name: "requests.ranged_get",
        unit: "requests",
        meaning: "GETs of a byte range",
    },
    MetricDef {
        name: "requests.head",
        unit: "requests",
        meaning: "HEADs (object metadata)",
    },
    MetricDef {
        name: "requests.put",
        unit: "requests",
        meaning: "single-request PUTs",
    },
    MetricDef {
        name: "requests.multipart_create",
        unit: "requests",
        meaning: "multipart uploads started (POST ?uploads)",
    },
    MetricDef {
        name: "requests.multipart_part",
        unit: "requests",
        meaning: "parts uploaded (PUT ?partNumber)",
    },
    MetricDef {
        name: "requests.multipart_complete",
        unit: "requests",
        meaning: "multipart uploads completed (POST ?uploadId)",
    },
    MetricDef {
        name: "requests.multipart_abort",
        unit: "requests",
        meaning: "multipart uploads aborted (DELETE ?uploadId)",
    },
    MetricDef {
        name: "requests.list",
        unit: "requests",
        meaning: "LIST calls (a paginated listing counts once per call)",
    },
    MetricDef {
        name: "requests.delete",
        unit: "requests",
        meaning: "objects deleted",
    },
    MetricDef {
        name: "requests.copy",
        unit: "requests",
        meaning: "server-side copies",
    },
    MetricDef {
        name: "bytes_in",
        unit: "bytes",
        meaning: "object bytes received from the store (GET bodies)",
    },
    MetricDef {
        name: "bytes_out",
        unit: "bytes",
        meaning: "object bytes sent to the store (PUT and part bodies)",
    },
    MetricDef {
        name: "errors.not_found",
        unit: "requests",
        meaning: "requests that failed: object or bucket missing",
    },
    MetricDef {
        name: "errors.permission",
        unit: "requests",
        meaning: "requests that failed: credentials refused (401/403)",
    },
    MetricDef {
        name: "errors.throttled",
        unit: "requests",
        meaning: "requests that failed after retries: 429 / 503 SlowDown",
    },
    MetricDef {
        name: "errors.server",
        unit: "requests",
        meaning: "requests that failed after retries: other 5xx",
    },
    MetricDef {
        name: "errors.network",
        unit: "requests",
        meaning: "requests that failed after retries: connect, reset, timeout",
    },
    MetricDef {
        name: "errors.other",
        unit: "requests",
        meaning: "requests that failed for any other reason",
    },
    MetricDef {
        name: "http_attempts",
        unit: "requests",
        meaning: "HTTP requests sent, retries included (S3/GCS/Azure only)",
    },
    MetricDef {
        name: "retries",
        unit: "requests",
        meaning: "HTTP attempts beyond the distinct requests each logical request needed",
    },
    MetricDef {
        name: "latency.first_byte_ms",
        unit: "milliseconds",
        meaning: "GET: from the call until the response headers arrived (p50/p90/p99/max)",
    },
    MetricDef {
        name: "latency.total_ms",
        unit: "milliseconds",
        meaning: "any request: from the call until its body was fully read (p50/p90/p99/max)",
    },
    MetricDef {
        name: "cost.requests_usd",
        unit: "US dollars",
        meaning: "request charges at the price table",
    },
    MetricDef {
        name: "cost.transfer_usd",
        unit: "US dollars",
        meaning: "data transfer out of the store at the price table",
    },
    MetricDef {
        name: "cost.total_usd",
        unit: "US dollars",
        meaning: "requests_usd + transfer_usd",
    },
];

/// Kinds of logical request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestKind {
    /// Whole-object GET.
    Get,
    /// Ranged GET.
    RangedGet,
    /// HEAD.
    Head,
    /// Single PUT.
    Put,
    /// Multipart upload start.
    MultipartCreate,
    /// Multipart part upload.
    MultipartPart,
    /// Multipart completion.
    MultipartComplete,
    /// Multipart abort.
    MultipartAbort,
    /// LIST.
    List,
    /// DELETE (per object).
    Delete,
    /// Server-side COPY.
    Copy,
}

const KINDS: usize = 11;

impl RequestKind {
    fn index(self) -> usize {
        self as usize
    }

    /// The S3 price tier of this request.
    fn tier(self) -> Tier {
        match self {
            RequestKind::Put
            | RequestKind::Copy
            | RequestKind::List
            | RequestKind::MultipartCreate
            | RequestKind::MultipartPart
            | RequestKind::MultipartComplete => Tier::Write,
            RequestKind::Delete | RequestKind::MultipartAbort => Tier::Free,
            RequestKind::Get | RequestKind::RangedGet | RequestKind::Head => Tier::Read,
        }
    }
}

enum Tier {
    Write,
    Read,
    Free,
}

/// Request prices. Defaults: S3 Standard, us-east-1, as published by AWS:
/// PUT/COPY/POST/LIST $0.005 per 1,000; GET/HEAD and others $0.0004 per 1,000;
/// DELETE free; transfer out to the internet $0.09/GB, free in-region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PriceTable {
    /// USD per 1,000 PUT, COPY, POST (multipart) and LIST requests.
    pub write_per_1000: f64,
    /// USD per 1,000 GET, HEAD and other requests.
    pub read_per_1000: f64,
    /// USD per 1,000 DELETE requests (incl. multipart aborts).
    pub delete_per_1000: f64,
    /// USD per GB (10^9 bytes) transferred out of the store.
    pub transfer_out_per_gb: f64,
    /// True when the reader runs in the bucket's region: transfer is free.
    pub in_region: bool,
}

impl Default for PriceTable {
    fn default() -> Self {
        PriceTable {
            write_per_1000: 0.005,
            read_per_1000: 0.0004,
            delete_per_1000: 0.0,
            transfer_out_per_gb: 0.09,
            in_region: true,
        }
    }
}

impl PriceTable {
    /// Reads a price table from JSON; missing fields keep their defaults,
    /// e.g. `{"in_region": false}`.
    pub fn from_json(text: &str) -> Result<PriceTable, crate::Error> {
        serde_json::from_str(text).map_err(|e| crate::Error::InvalidInput {
            message: format!(
                "price table JSON is invalid: {e}; expected fields write_per_1000, read_per_1000, delete_per_1000, transfer_out_per_gb, in_region"
            ),
        })
    }

    /// The cost of the requests and bytes in `snapshot`.
    pub fn price(&self, snapshot: &MetricsSnapshot) -> Cost {
        let r = &snapshot.requests;
        let per = |n: u64, usd: f64| n as f64 / 1000.0 * usd;
        let mut requests_usd = 0.0;
        for (kind, n) in r.by_kind() {
            requests_usd += match kind.tier() {
                Tier::Write => per(n, self.write_per_1000),
                Tier::Read => per(n, self.read_per_1000),
                Tier::Free => per(n, self.delete_per_1000),
            };
        }
        let transfer_usd = match self.in_region {
            true => 0.0,
            false => snapshot.bytes_in as f64 / 1e9 * self.transfer_out_per_gb,
        };
        Cost {
            requests_usd,
            transfer_usd,
            total_usd: requests_usd + transfer_usd,
        }
    }
}

/// Logical request counts by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct RequestCounts {
    pub get: u64,
    pub ranged_get: u64,
    pub head: u64,
    pub put: u64,
    pub multipart_create: u64,
    pub multipart_part: u64,
    pub multipart_complete: u64,
    pub multipart_abort: u64,
    pub list: u64,
    pub delete: u64,
    pub copy: u64,
}

impl RequestCounts {
    fn by_kind(&self) -> [(RequestKind, u64); KINDS] {
        use RequestKind as K;
        [
            (K::Get, self.get),
            (K::RangedGet, self.ranged_get),
            (K::Head, self.head),
            (K::Put, self.put),
            (K::MultipartCreate, self.multipart_create),
            (K::MultipartPart, self.multipart_part),
            (K::MultipartComplete, self.multipart_complete),
            (K::MultipartAbort, self.multipart_abort),
            (K::List, self.list),
            (K::Delete, self.delete),
            (K::Copy, self.copy),
        ]
    }

    /// All logical requests.
    pub fn total(&self) -> u64 {
        self.by_kind().iter().map(|(_, n)| n).sum()
    }
}

/// Failed requests by cause.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct ErrorCounts {
    pub not_found: u64,
    pub permission: u64,
    pub throttled: u64,
    pub server: u64,
    pub network: u64,
    pub other: u64,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct LatencyPercentiles {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// Both latency distributions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// GET: call until response headers.
    pub first_byte_ms: LatencyPercentiles,
    /// Any request: call until its body ended.
    pub total_ms: LatencyPercentiles,
}

/// What the counted requests cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Cost {
    pub requests_usd: f64,
    pub transfer_usd: f64,
    pub total_usd: f64,
}

/// A point-in-time copy of a store's [`Metrics`]; see [`METRICS`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct MetricsSnapshot {
    pub requests: RequestCounts,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub errors: ErrorCounts,
    pub http_attempts: u64,
    pub retries: u64,
    pub latency: Latency,
    pub cost: Cost,
}

#[derive(Debug)]
struct Inner {
    requests: [AtomicU64; KINDS],
    errors: [AtomicU64; 6],
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    http_attempts: AtomicU64,
    retries: AtomicU64,
    first_byte: Mutex<Histogram<u64>>,
    total: Mutex<Histogram<u64>>,
    prices: Mutex<PriceTable>,
}

/// Live counters of one store; cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Metrics(Arc<Inner>);

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Histograms record microseconds up to one hour with 3 significant digits.
fn histogram() -> Histogram<u64> {
    const HOUR_US: u64 = 3_600_000_000;
    Histogram::new_with_bounds(1, HOUR_US, 3)
        .expect("bounds 1..=1h with 3 significant digits are valid for hdrhistogram")
}

impl Metrics {
    /// Fresh zeroed metrics with the default [`PriceTable`].
    pub fn new() -> Metrics {
        Metrics(Arc::new(Inner {
            requests: Default::default(),
            errors: Default::default(),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            http_attempts: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            first_byte: Mutex::new(histogram()),
            total: Mutex::new(histogram()),
            prices: Mutex::new(PriceTable::default()),
        }))
    }

    /// Replaces the price table used by [`Metrics::snapshot`].
    pub fn set_price_table(&self, prices: PriceTable) {
        *self.0.prices.lock().unwrap_or_else(PoisonError::into_inner) = prices;
    }

    /// Copies the current values and prices them.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let i = &self.0;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let r = |k: RequestKind| n(&i.requests[k.index()]);
        let e = |c: ErrorClass| n(&i.errors[class_index(c)]);
        let mut snap = MetricsSnapshot {
            requests: RequestCounts {
                get: r(RequestKind::Get),
                ranged_get: r(RequestKind::RangedGet),
                head: r(RequestKind::Head),
                put: r(RequestKind::Put),
                multipart_create: r(RequestKind::MultipartCreate),
                multipart_part: r(RequestKind::MultipartPart),
                multipart_complete: r(RequestKind::MultipartComplete),
                multipart_abort: r(RequestKind::MultipartAbort),
                list: r(RequestKind::List),
                delete: r(RequestKind::Delete),
                copy: r(RequestKind::Copy),
            },
            bytes_in: n(&i.bytes_in),
            bytes_out: n(&i.bytes_out),
            errors: ErrorCounts {
                not_found: e(ErrorClass::NotFound),
                permission: e(ErrorClass::Permission),
                throttled: e(ErrorClass::Throttled),
                server: e(ErrorClass::Server),
                network: e(ErrorClass::Network),
                other: e(ErrorClass::Other),
            },
            http_attempts: n(&i.http_attempts),
            retries: n(&i.retries),
            latency: Latency {
                first_byte_ms: percentiles(&i.first_byte),
                total_ms: percentiles(&i.total),
            },
            cost: Cost::default(),
        };
        let prices = i
            .prices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        snap.cost = prices.price(&snap);
        snap
    }

    pub(crate) fn request(&self, kind: RequestKind, n: u64) {
        self.0.requests[kind.index()].fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn error(&self, class: ErrorClass) {
        self.0.errors[class_index(class)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn bytes_in(&self, n: u64) {
        self.0.bytes_in.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn bytes_out(&self, n: u64) {
        self.0.bytes_out.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn http_attempt(&self) {
        self.0.http_attempts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn retries(&self, n: u64) {
        if n > 0 {
            self.0.retries.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub(crate) fn first_byte(&self, d: Duration) {
        record(&self.0.first_byte, d);
    }

    pub(crate) fn total(&self, d: Duration) {
        record(&self.0.total, d);
    }
}

fn class_index(c: ErrorClass) -> usize {
    match c {
        ErrorClass::NotFound => 0,
        ErrorClass::Permission => 1,
        ErrorClass::Throttled => 2,
        ErrorClass::Server => 3,
        ErrorClass::Network => 4,
        ErrorClass::Other => 5,
    }
}

fn record(h: &Mutex<Histogram<u64>>, d: Duration) {
    let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
    h.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .saturating_record(us);
}

fn percentiles(h: &Mutex<Histogram<u64>>) -> LatencyPercentiles {
    let h = h.lock().unwrap_or_else(PoisonError::into_inner);
    let ms = |us: u64| us as f64 / 1000.0;
    LatencyPercentiles {
        count: h.len(),
        p50: ms(h.value_at_quantile(0.50)),
        p90: ms(h.value_at_quantile(0.90)),
        p99: ms(h.value_at_quantile(0.99)),
        max: ms(h.max()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn default_prices_follow_s3_standard() {
        let m = Metrics::new();
        m.request(RequestKind::Get, 1_000_000);
        m.request(RequestKind::Put, 1000);
        m.request(RequestKind::Delete, 1000);
        m.bytes_in(2_000_000_000);
        let s = m.snapshot();
        assert!(
            (s.cost.requests_usd - (0.4 + 0.005)).abs() < 1e-9,
            "{:?}",
            s.cost
        );
        assert_eq!(s.cost.transfer_usd, 0.0, "in-region transfer is free");
        let out = PriceTable::from_json(r#"{"in_region": false}"#).unwrap();
        assert!((out.price(&s).transfer_usd - 0.18).abs() < 1e-9);
        m.set_price_table(out);
        assert!((m.snapshot().cost.total_usd - 0.585).abs() < 1e-9);
    }

    #[test]
    fn price_table_json_errors_are_explained() {
        let err = PriceTable::from_json(r#"{"gets": 1}"#).unwrap_err();
        assert!(err.to_string().contains("write_per_1000"), "{err}");
    }

    #[test]
    fn snapshot_serialises_every_documented_metric() {
        let m = Metrics::new();
        m.first_byte(Duration::from_millis(20));
        m.total(Duration::from_millis(30));
        let json = serde_json::to_value(m.snapshot()).unwrap();
        for def in METRICS {
            let mut v = &json;
            for part in def.name.split('.') {
                v = v
                    .get(part)
                    .unwrap_or_else(|| panic!("{} missing in {json}", def.name));
            }
        }
        let p50 = json["latency"]["first_byte_ms"]["p50"].as_f64().unwrap();
        assert!((19.9..20.1).contains(&p50), "{p50}");
    }
}
