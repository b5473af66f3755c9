//! `bench --metrics-addr`: the run's live counters in Prometheus' text format at `/metrics`,
//! for a Prometheus server and the Grafana dashboard in `dashboards/bucketload.json`.
//!
//! The endpoint is a minimal HTTP/1.1 responder on a Tokio listener: one short response per
//! connection, whatever the request line says apart from its path.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context;
use bucketload::loader::LoaderStats;
use bucketload_store::{RequestCounts, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Upper bounds of the data-wait histogram's buckets, seconds.
const WAIT_BUCKETS: [f64; 11] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// The run's live state, updated by the training loop after every step.
#[derive(Debug)]
pub struct Live {
    started: Instant,
    epoch: AtomicU64,
    samples: AtomicU64,
    batches: AtomicU64,
    compute_nanos: AtomicU64,
    wait_nanos: AtomicU64,
    /// Cumulative counts per bucket of [`WAIT_BUCKETS`] (the last is +Inf).
    wait_buckets: [AtomicU64; WAIT_BUCKETS.len() + 1],
    loader: Mutex<LoaderStats>,
    /// The dataset's store; a mixture's, one per dataset.
    stores: Vec<Store>,
}

impl Live {
    /// Counters of a run reading through `stores` (one per dataset).
    pub fn new(stores: Vec<Store>) -> Live {
        Live {
            started: Instant::now(),
            epoch: AtomicU64::new(0),
            samples: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            compute_nanos: AtomicU64::new(0),
            wait_nanos: AtomicU64::new(0),
            wait_buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            loader: Mutex::new(LoaderStats::default()),
            stores,
        }
    }

    /// An epoch begins.
    pub fn set_epoch(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::Relaxed);
    }

    /// A training step took a batch of `images` after waiting `wait`, then computed.
    pub fn step(&self, images: u64, wait: Duration, compute: Duration, loader: &LoaderStats) {
        self.samples.fetch_add(images, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.compute_nanos
            .fetch_add(nanos(compute), Ordering::Relaxed);
        self.wait_nanos.fetch_add(nanos(wait), Ordering::Relaxed);
        let secs = wait.as_secs_f64();
        for (bound, count) in WAIT_BUCKETS.iter().zip(&self.wait_buckets) {
            if secs <= *bound {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.wait_buckets[WAIT_BUCKETS.len()].fetch_add(1, Ordering::Relaxed);
        *self.loader.lock().unwrap_or_else(PoisonError::into_inner) = loader.clone();
    }

    /// The metrics in Prometheus' text exposition format.
    pub fn render(&self) -> String {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let secs = |a: &AtomicU64| n(a) as f64 / 1e9;
        let wall = self.started.elapsed().as_secs_f64();
        let loader = self
            .loader
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, value: f64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        metric(
            "bucketload_epoch",
            "gauge",
            "Epoch being trained.",
            n(&self.epoch) as f64,
        );
        metric(
            "bucketload_samples_total",
            "counter",
            "Samples handed to the training step.",
            n(&self.samples) as f64,
        );
        metric(
            "bucketload_batches_total",
            "counter",
            "Batches handed to the training step.",
            n(&self.batches) as f64,
        );
        metric(
            "bucketload_bytes_total",
            "counter",
            "Sample bytes delivered by the loader.",
            loader.bytes as f64,
        );
        metric(
            "bucketload_compute_seconds_total",
            "counter",
            "Emulated compute time.",
            secs(&self.compute_nanos),
        );
        metric(
            "bucketload_accelerator_utilization",
            "gauge",
            "Compute time divided by wall time since the run began.",
            if wall > 0.0 {
                (secs(&self.compute_nanos) / wall).min(1.0)
            } else {
                0.0
            },
        );
        metric(
            "bucketload_requests_in_flight",
            "gauge",
            "Requests in flight (shards: shard streams running).",
            loader.in_flight.now as f64,
        );
        metric(
            "bucketload_cache_hits_total",
            "counter",
            "Samples served by the local cache.",
            loader.cache.hits as f64,
        );
        metric(
            "bucketload_cache_misses_total",
            "counter",
            "Cache lookups that went to the store.",
            loader.cache.misses as f64,
        );
        self.render_requests(&mut out);
        self.render_wait(&mut out);
        out
    }

    fn render_requests(&self, out: &mut String) {
        let snaps: Vec<_> = self.stores.iter().map(|s| s.metrics().snapshot()).collect();
        let sum = |count: fn(&RequestCounts) -> u64| -> u64 {
            snaps.iter().map(|s| count(&s.requests)).sum()
        };
        let _ = writeln!(
            out,
            "# HELP bucketload_requests_total Requests to the dataset's store, by kind.\n\
             # TYPE bucketload_requests_total counter"
        );
        for (kind, count) in [
            ("get", sum(|r| r.get)),
            ("ranged_get", sum(|r| r.ranged_get)),
            ("head", sum(|r| r.head)),
            ("list", sum(|r| r.list)),
            ("put", sum(|r| r.put)),
            ("multipart_part", sum(|r| r.multipart_part)),
        ] {
            let _ = writeln!(out, "bucketload_requests_total{{kind=\"{kind}\"}} {count}");
        }
        let _ = writeln!(
            out,
            "# HELP bucketload_cost_usd Estimated request and transfer cost so far.\n\
             # TYPE bucketload_cost_usd gauge\nbucketload_cost_usd {}",
            snaps.iter().map(|s| s.cost.total_usd).sum::<f64>()
        );
    }

    fn render_wait(&self, out: &mut String) {
        let name = "bucketload_data_wait_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time each training step waited for its batch.\n# TYPE {name} histogram"
        );
        for (bound, count) in WAIT_BUCKETS.iter().zip(&self.wait_buckets) {
            let c = count.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {c}");
        }
        let total = self.wait_buckets[WAIT_BUCKETS.len()].load(Ordering::Relaxed);
        let sum = self.wait_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"+Inf\"}} {total}\n{name}_sum {sum}\n{name}_count {total}"
        );
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Serves `live` at `http://addr/metrics` until the returned task is aborted; the bound
/// address (port 0 picks a free one) is returned with it.
pub async fn serve(
    addr: SocketAddr,
    live: Arc<Live>,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for metrics on {addr}; choose another port"))?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(answer(conn, Arc::clone(&live)));
        }
    });
    Ok((bound, task))
}

/// Reads the request head (at most 8 KiB, 5 s) and answers it.
async fn answer(mut conn: TcpStream, live: Arc<Live>) {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let read = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .is_err()
    {
        return;
    }
    let line = String::from_utf8_lossy(&head);
    let path = line.split_whitespace().nth(1).unwrap_or("/");
    let (status, body) = match path {
        "/metrics" | "/" => ("200 OK", live.render()),
        _ => (
            "404 Not Found",
            "not found: the metrics are at /metrics\n".into(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(response.as_bytes()).await;
    let _ = conn.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_is_cumulative() {
        let store =
            Store::open("mem://metrics", &bucketload_store::StoreConfig::default()).unwrap();
        let live = Live::new(vec![store]);
        let stats = LoaderStats::default();
        live.step(4, Duration::from_millis(3), Duration::ZERO, &stats);
        live.step(4, Duration::from_millis(300), Duration::ZERO, &stats);
        let text = live.render();
        assert!(text.contains("bucketload_samples_total 8"), "{text}");
        assert!(text.contains("bucketload_data_wait_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("bucketload_data_wait_seconds_bucket{le=\"0.5\"} 2"));
        assert!(text.contains("bucketload_data_wait_seconds_bucket{le=\"+Inf\"} 2"));
        assert!(text.contains("bucketload_data_wait_seconds_count 2"));
    }

    #[test]
    fn the_dashboard_queries_only_metrics_the_endpoint_serves() {
        let dashboard: serde_json::Value =
            serde_json::from_str(include_str!("../../../../../dashboards/bucketload.json"))
                .unwrap();
        let store =
            Store::open("mem://metrics", &bucketload_store::StoreConfig::default()).unwrap();
        let served = Live::new(vec![store]).render();
        let panels = dashboard["panels"].as_array().unwrap();
        assert!(panels.len() >= 8);
        let mut queried = 0;
        for target in panels.iter().flat_map(|p| p["targets"].as_array().unwrap()) {
            let expr = target["expr"].as_str().unwrap();
            for name in expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("bucketload_"))
            {
                queried += 1;
                assert!(
                    served.contains(&format!("\n{name}"))
                        || served.contains(&format!("\n{name}{{")),
                    "the dashboard queries {name}, which /metrics does not serve"
                );
            }
        }
        assert!(queried >= 10);
    }
}
