//! The JSON log of one `bucketload bench` run (schema in docs/BENCH.md).
//!
//! The top-level keys are the training benchmark's classic ones (`training_time`,
//! `samples_per_second`, `samples_processed_total`, `t_epoch_<n>`, `t_ckpt_<n>`, `t_ckpt_ave`)
//! plus MLPerf Storage's accelerator utilisation and bucketload's own counters. `bucketload
//! report` reads these files; the Python peers in `benchmarks/peers/` write the same keys.

use std::collections::BTreeMap;

use serde::Serialize;

/// Version of the log's layout; raised when a key changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;

/// One run.
#[derive(Debug, Clone, Serialize)]
pub struct BenchLog {
    pub schema_version: u32,
    /// The run's label (`--name`).
    pub name: String,
    /// Always `bucketload`; peers write their own name.
    pub tool: String,
    /// bucketload's version.
    pub version: String,
    /// Seconds of all epochs (checkpoint stalls included).
    pub training_time: f64,
    /// Samples trained on ÷ `training_time`.
    pub samples_per_second: f64,
    pub samples_processed_total: u64,
    /// Compute time ÷ wall time (MLPerf Storage's accelerator utilisation); 0 when
    /// `--compute-ms 0`, where no compute is emulated.
    pub accelerator_utilization: f64,
    /// How long each training step waited for its batch.
    pub data_wait_ms: WaitPercentiles,
    /// Requests to the dataset's store, by kind (only kinds that were made).
    pub requests: BTreeMap<String, u64>,
    /// Bytes of samples delivered by the loader.
    pub bytes_read: u64,
    /// Estimated request and transfer cost of the run, US dollars (the store's price table).
    pub cost_usd: f64,
    /// Cache hits ÷ lookups; absent without `--cache`.
    pub cache_hit_rate: Option<f64>,
    /// Busy and waiting seconds of each stage: `fetch`, `decode`, `compute`.
    pub stages: BTreeMap<String, StageSeconds>,
    /// The run's configuration.
    pub config: RunConfig,
    /// Checkpoints written during the run; null without `--ckpt-steps`.
    pub ckpt: Option<CkptLog>,
    /// Every epoch in detail.
    pub epochs: Vec<EpochLog>,
    /// `--find-max`: every probe and the best one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub find_max: Option<FindMax>,
    /// `t_epoch_<n>`, `t_ckpt_<n>` and `t_ckpt_ave`, flattened into the top level.
    #[serde(flatten)]
    pub numbered: BTreeMap<String, f64>,
}

/// Percentiles of the per-step data wait, milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct WaitPercentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

impl WaitPercentiles {
    /// Percentiles of `waits` (milliseconds; any order).
    pub fn of(waits: &[f64]) -> WaitPercentiles {
        if waits.is_empty() {
            return WaitPercentiles::default();
        }
        let mut sorted = waits.to_vec();
        sorted.sort_by(f64::total_cmp);
        // Nearest rank: the smallest value with at least q of the samples at or below it.
        let at = |q: f64| {
            let rank = (q * sorted.len() as f64).ceil() as usize;
            sorted[rank.clamp(1, sorted.len()) - 1]
        };
        WaitPercentiles {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: sorted[sorted.len() - 1],
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
        }
    }
}

/// How a stage spent the run, seconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct StageSeconds {
    pub busy_s: f64,
    pub wait_s: f64,
}

/// What the run was asked to do, and where.
#[derive(Debug, Clone, Serialize)]
pub struct RunConfig {
    pub dataset: String,
    /// `files`, `shards` or `indexed`.
    pub format: String,
    /// Whether a local cache was used.
    pub cache: bool,
    pub cache_size: Option<u64>,
    pub epochs: u64,
    pub batch_size: usize,
    pub image_size: u32,
    /// Whether samples were decoded and augmented (`--no-decode` turns it off).
    pub decode: bool,
    /// The transform of decoded images: `train` or `eval` (`--augment`).
    pub augment: String,
    pub decode_threads: Option<usize>,
    pub compute_ms: f64,
    /// Requests in flight.
    pub concurrency: usize,
    pub seed: u64,
    pub rank: u32,
    pub world_size: u32,
    pub machine: Machine,
}

/// Where the run ran.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub host: String,
    pub cores: usize,
    pub os: String,
    pub arch: String,
}

impl Machine {
    /// This machine.
    pub fn here() -> Machine {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "unknown".to_owned());
        Machine {
            host,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            os: std::env::consts::OS.to_owned(),
            arch: std::env::consts::ARCH.to_owned(),
        }
    }
}

/// One epoch.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EpochLog {
    pub epoch: u64,
    pub seconds: f64,
    pub samples: u64,
    pub batches: u64,
    pub bytes: u64,
    pub samples_per_second: f64,
    pub accelerator_utilization: f64,
    pub data_wait_ms: WaitPercentiles,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Images left out because they could not be decoded (`--skip-corrupt`).
    pub skipped: u64,
    /// Seconds the steps stalled for checkpoints.
    pub ckpt_s: f64,
    /// Samples of the previous epoch still to train when this epoch's stream was opened
    /// (0: opened after its last batch); its counters start at that moment.
    pub opened_ahead_samples: u64,
}

/// Checkpoints written during the run.
#[derive(Debug, Clone, Serialize)]
pub struct CkptLog {
    /// `s3` (object store) or `disk`.
    pub target: String,
    /// `sync` or `async`.
    pub mode: String,
    pub uri: String,
    pub size_bytes: u64,
    /// Seconds the training loop stalled for each save.
    pub times: Vec<f64>,
    /// Seconds until each save was durable (async saves; equal to `times` for sync ones).
    pub durable_times: Vec<f64>,
}

/// `--find-max`: the probes of the search and the best probe.
#[derive(Debug, Clone, Serialize)]
pub struct FindMax {
    /// Utilisation the best probe had to reach.
    pub target_utilization: f64,
    pub probes: Vec<Probe>,
    /// The probe with the smallest compute time that reached the target.
    pub best: Option<Probe>,
}

/// One probe of `--find-max`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Probe {
    pub compute_ms: f64,
    pub accelerator_utilization: f64,
    pub samples_per_second: f64,
    pub training_time: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let waits: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let p = WaitPercentiles::of(&waits);
        assert_eq!((p.p50, p.p90, p.p99, p.max), (50.0, 90.0, 99.0, 100.0));
        assert!((p.mean - 50.5).abs() < 1e-9);
        assert_eq!(WaitPercentiles::of(&[]).p99, 0.0);
        assert_eq!(WaitPercentiles::of(&[7.0]).p50, 7.0);
    }
}
