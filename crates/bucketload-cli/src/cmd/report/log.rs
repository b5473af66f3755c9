//! Benchmark logs as `report` reads them: every field optional, unknown keys ignored.
//!
//! `bucketload bench` and the Python peers in `benchmarks/peers/` write the same keys; older logs
//! and peers' logs lack some of them, so nothing here is required. A file holds one JSON object,
//! an array of them, or one object per line (JSON lines).

use std::collections::BTreeMap;
use std::io::{Error as IoError, ErrorKind};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Deserialize;
use serde_json::Value;

/// One run: a `bucketload bench` or peer log.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct RunLog {
    /// The run's label; the file name when absent.
    #[serde(alias = "label")]
    pub name: Option<String>,
    /// `bucketload`, `s3torchconnector`, …
    #[serde(alias = "peer")]
    pub tool: Option<String>,
    pub training_time: Option<f64>,
    #[serde(alias = "samples_per_s")]
    pub samples_per_second: Option<f64>,
    pub t_ckpt_ave: Option<f64>,
    pub accelerator_utilization: Option<f64>,
    pub data_wait_ms: Option<LoggedWaitPercentiles>,
    pub requests: Option<BTreeMap<String, f64>>,
    pub cost_usd: Option<f64>,
    pub cache_hit_rate: Option<f64>,
    pub config: Option<RunConfig>,
    pub ckpt: Option<Checkpoint>,
    /// Everything else, among it `t_epoch_<n>` and `t_ckpt_<n>`; keys the report does not
    /// draw (`stages`, `bytes_read`, …) stay here unparsed, so their shape never fails a log.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `data_wait_ms`: how long the training step waited for data.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct LoggedWaitPercentiles {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

/// `config`: what the run was asked to do.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct RunConfig {
    /// The dataset's URI (the first, when several were mixed).
    pub dataset: Option<String>,
    /// `files`, `shards` or `indexed`.
    pub format: Option<String>,
    pub cache: Option<bool>,
    pub batch_size: Option<u64>,
    pub concurrency: Option<u64>,
    /// Emulated compute per batch; 0 means none, so utilisation says nothing.
    pub compute_ms: Option<f64>,
    /// Whether samples were decoded into images (false: raw bytes).
    pub decode: Option<bool>,
}

impl RunConfig {
    /// The format, and `express` when the dataset is in an S3 Express One Zone directory
    /// bucket: the same workload there is another row of the workshop's comparison.
    fn what(&self) -> Vec<String> {
        let mut parts = vec![self.format.clone().unwrap_or_else(|| "?".into())];
        let bucket = self
            .dataset
            .as_deref()
            .and_then(|d| d.strip_prefix("s3://"))
            .map(|rest| rest.split('/').next().unwrap_or(""));
        if bucket.is_some_and(bucketload_store::is_directory_bucket) {
            parts.push("express".into());
        }
        parts
    }
}

/// `ckpt`: checkpoint saves (and loads, when measured).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct Checkpoint {
    /// `s3` (object store) or `disk`.
    pub target: Option<String>,
    /// `sync` or `async`.
    pub mode: Option<String>,
    /// Seconds of each save.
    pub times: Option<Vec<f64>>,
    /// Seconds of each load, when the run measured them.
    pub load_times: Option<Vec<f64>>,
}

impl RunLog {
    /// The run's label.
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or("run")
    }

    /// The tool that produced the run; `bucketload` unless the log names another.
    pub fn tool(&self) -> &str {
        self.tool.as_deref().unwrap_or("bucketload")
    }

    /// Seconds of each epoch from the `t_epoch_<n>` keys, in epoch order.
    pub fn epochs(&self) -> Vec<f64> {
        numbered(&self.extra, "t_epoch_")
    }

    /// Seconds of each checkpoint save: `ckpt.times`, else the `t_ckpt_<n>` keys.
    pub fn ckpt_saves(&self) -> Vec<f64> {
        match self.ckpt.as_ref().and_then(|c| c.times.as_ref()) {
            Some(times) if !times.is_empty() => times.clone(),
            _ => numbered(&self.extra, "t_ckpt_"),
        }
    }

    /// Mean checkpoint save seconds: `t_ckpt_ave`, else the mean of the saves.
    pub fn ckpt_save_mean(&self) -> Option<f64> {
        self.t_ckpt_ave.or_else(|| mean(&self.ckpt_saves()))
    }

    /// Mean checkpoint load seconds, when measured.
    pub fn ckpt_load_mean(&self) -> Option<f64> {
        let loads = self.ckpt.as_ref()?.load_times.as_ref()?;
        mean(loads)
    }

    /// Accelerator utilisation, when the run emulated compute (a run at `compute_ms: 0` has
    /// nothing to utilise).
    pub fn utilization(&self) -> Option<f64> {
        let computed = self.config.as_ref().and_then(|c| c.compute_ms) != Some(0.0);
        self.accelerator_utilization.filter(|_| computed)
    }

    /// Whether the run cached samples after the first epoch.
    pub fn cached(&self) -> bool {
        self.config.as_ref().and_then(|c| c.cache).unwrap_or(false)
    }

    /// Total requests of every kind.
    pub fn requests_total(&self) -> Option<f64> {
        self.requests.as_ref().map(|r| r.values().sum())
    }

    /// What was read and how, without the knobs (format · where · cache · decoded or raw), so
    /// runs of different tools on the same workload share a group; the run's label without a
    /// `config`.
    pub fn workload_label(&self) -> String {
        let Some(c) = self.config.as_ref() else {
            return self.label().to_string();
        };
        let mut parts = c.what();
        if c.cache == Some(true) {
            parts.push("cached".into());
        }
        match c.decode {
            Some(true) => parts.push("decoded".into()),
            Some(false) => parts.push("raw".into()),
            None => {}
        }
        parts.join(" · ")
    }

    /// The configuration in a few words, when the log has a `config`.
    pub fn config_words(&self) -> Option<String> {
        let c = self.config.as_ref()?;
        let mut parts = c.what();
        match c.cache {
            Some(true) => parts.push("cached".into()),
            Some(false) => parts.push("uncached".into()),
            None => {}
        }
        match c.decode {
            Some(true) => parts.push("decoded".into()),
            Some(false) => parts.push("raw".into()),
            None => {}
        }
        if let Some(n) = c.concurrency {
            parts.push(format!("c{n}"));
        }
        if let Some(n) = c.batch_size {
            parts.push(format!("b{n}"));
        }
        Some(parts.join(" · "))
    }

    /// Checkpoint target and mode, e.g. `s3 · async`.
    pub fn ckpt_label(&self) -> Option<String> {
        let c = self.ckpt.as_ref()?;
        let target = c.target.as_deref().unwrap_or("?");
        let mode = c.mode.as_deref().unwrap_or("?");
        Some(format!("{target} · {mode}"))
    }
}

/// The mean of the values, `None` when there are none.
pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// The numeric values of the keys `<prefix><n>`, ordered by `n`.
fn numbered(extra: &BTreeMap<String, Value>, prefix: &str) -> Vec<f64> {
    let mut found: Vec<(u32, f64)> = extra
        .iter()
        .filter_map(|(key, value)| {
            let n = key.strip_prefix(prefix)?.parse::<u32>().ok()?;
            Some((n, value.as_f64()?))
        })
        .collect();
    found.sort_by_key(|(n, _)| *n);
    found.into_iter().map(|(_, v)| v).collect()
}

/// The log files named on the command line: files as given, directories' `*.json` and `*.jsonl`
/// files in name order.
pub fn log_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        if !path.is_dir() {
            files.push(path.clone());
            continue;
        }
        let mut inside = json_files_in(path)?;
        if inside.is_empty() {
            let msg = format!(
                "no *.json logs in {}; pass log files or a folder of them",
                path.display()
            );
            return Err(IoError::new(ErrorKind::NotFound, msg).into());
        }
        inside.sort();
        files.extend(inside);
    }
    Ok(files)
}

fn json_files_in(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("cannot list {}", dir.display()))?
            .path();
        let ext = path.extension().and_then(|e| e.to_str());
        if path.is_file() && matches!(ext, Some("json" | "jsonl")) {
            files.push(path);
        }
    }
    Ok(files)
}

/// Reads every run in one log file; unnamed runs take the file's name.
pub fn read_log(path: &Path) -> anyhow::Result<Vec<RunLog>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the log {}", path.display()))?;
    let runs = parse_runs(&text).with_context(|| {
        format!(
            "{} is not a benchmark log (JSON object, array or JSON lines)",
            path.display()
        )
    })?;
    let stem = path
        .file_stem()
        .map_or_else(|| "run".into(), |s| s.to_string_lossy().into_owned());
    let many = runs.len() > 1;
    Ok(runs
        .into_iter()
        .enumerate()
        .map(|(i, mut run)| {
            if run.name.is_none() {
                run.name = Some(if many {
                    format!("{stem}#{}", i + 1)
                } else {
                    stem.clone()
                });
            }
            run
        })
        .collect())
}

/// The runs in a log's text; an error says where the JSON breaks.
fn parse_runs(text: &str) -> Result<Vec<RunLog>, IoError> {
    let mut runs = Vec::new();
    for value in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
        match value.map_err(invalid)? {
            Value::Array(items) => {
                for item in items {
                    runs.push(serde_json::from_value(item).map_err(invalid)?);
                }
            }
            item @ Value::Object(_) => runs.push(serde_json::from_value(item).map_err(invalid)?),
            other => {
                let msg = format!("expected a JSON object per run, found {other}");
                return Err(IoError::new(ErrorKind::InvalidData, msg));
            }
        }
    }
    if runs.is_empty() {
        return Err(IoError::new(
            ErrorKind::InvalidData,
            "the file holds no runs",
        ));
    }
    Ok(runs)
}

fn invalid(err: serde_json::Error) -> IoError {
    IoError::new(ErrorKind::InvalidData, err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_and_checkpoints_come_in_order() {
        let runs = parse_runs(
            r#"{"name":"a","t_epoch_10":1,"t_epoch_2":3,"t_epoch_1":9,"t_ckpt_2":4,"t_ckpt_1":2,
                "ckpt":{"times":null},"stages":{"fetch":[1,2]},
                "config":{"format":"shards","cache":true,"concurrency":8,"compute_ms":null}}"#,
        )
        .unwrap();
        assert_eq!(runs[0].epochs(), vec![9.0, 3.0, 1.0]);
        assert_eq!(runs[0].ckpt_saves(), vec![2.0, 4.0]);
        assert_eq!(runs[0].ckpt_save_mean(), Some(3.0));
        assert_eq!(runs[0].config_words().unwrap(), "shards · cached · c8");
    }

    #[test]
    fn peers_keys_and_json_lines_are_accepted() {
        let runs = parse_runs(
            "{\"label\":\"p\",\"peer\":\"s3torchconnector\",\"samples_per_s\":12.5}\n{}\n",
        )
        .unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].label(), "p");
        assert_eq!(runs[0].tool(), "s3torchconnector");
        assert_eq!(runs[0].samples_per_second, Some(12.5));
        assert_eq!(runs[1].tool(), "bucketload");
    }

    #[test]
    fn utilisation_needs_emulated_compute() {
        let runs = parse_runs(
            r#"[{"accelerator_utilization":0.0,"config":{"compute_ms":0.0}},
                {"accelerator_utilization":0.93,"config":{"compute_ms":12.5}},
                {"accelerator_utilization":0.5,"config":{"format":"files","decode":false}}]"#,
        )
        .unwrap();
        let util: Vec<Option<f64>> = runs.iter().map(RunLog::utilization).collect();
        assert_eq!(util, [None, Some(0.93), Some(0.5)]);
        assert_eq!(runs[2].config_words().unwrap(), "files · raw");
        assert_eq!(runs[2].workload_label(), "files · raw");
        assert_eq!(runs[1].workload_label(), "?");
    }

    /// The same files read from a general purpose bucket and from a directory bucket are two
    /// workloads, each with its bar, not one bar drawn twice.
    #[test]
    fn a_directory_bucket_is_its_own_workload() {
        let runs = parse_runs(
            r#"[{"config":{"dataset":"s3://demo/train","format":"files","decode":false}},
                {"config":{"dataset":"s3://demo--use1-az4--x-s3/train","format":"files",
                           "cache":false,"decode":false}}]"#,
        )
        .unwrap();
        assert_eq!(runs[0].workload_label(), "files · raw");
        assert_eq!(runs[1].workload_label(), "files · express · raw");
        assert_eq!(
            runs[1].config_words().unwrap(),
            "files · express · uncached · raw"
        );
    }

    #[test]
    fn bad_json_says_where() {
        let err = parse_runs("{\"name\": 3,").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidData);
        assert!(err.to_string().contains("line 1"), "{err}");
        assert!(parse_runs("  ").is_err());
        assert!(parse_runs("[1]").is_err());
    }
}
