//! `bucketload bench`: the training emulation of MLPerf Storage and DLIO over the loader.
//!
//! Reads a dataset for `--epochs` epochs in batches (decoded and augmented unless
//! `--no-decode`), emulating the model with a fixed compute time per batch, and writes one JSON
//! log with the training benchmark's keys ([`log::BenchLog`], docs/BENCH.md), which `bucketload
//! report` draws. `--metrics-addr` serves live Prometheus metrics during the run;
//! `--find-max` searches the smallest compute time (the most samples/s) that keeps the
//! emulated accelerator at least 90% busy.

mod ckpt;
mod log;
mod prom;
mod train;

pub use ckpt::model_bytes;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bucketload::loader::DEFAULT_LOADER_CONCURRENCY;
use clap::Args;

use crate::args::loader::{Datasets, LoaderArgs};
use crate::args::store::StoreArgs;
use crate::common::local_to_absolute;
use crate::decode::{DecodeArgs, Dtype};
use bucketload::decode::{Decoder, PREFETCH_BATCHES};
use log::{BenchLog, FindMax, Machine, Probe, RunConfig, StageSeconds, WaitPercentiles};
use train::{EpochRun, Trainer};

/// Utilisation `--find-max` must keep.
const TARGET_UTILIZATION: f64 = 0.9;
/// Probes of `--find-max` at most (the first, at 0 ms, measures the input's pace).
const MAX_PROBES: usize = 10;

/// `bucketload bench` arguments; the global `--concurrency` sets the requests in flight.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Dataset URI (s3://bucket/prefix, file:///dir or a local path); repeat it to mix
    /// several (see --weights)
    #[arg(long, value_name = "URI", required = true)]
    pub dataset: Vec<String>,
    /// Epochs to train
    #[arg(long, default_value_t = 3, value_name = "E")]
    pub epochs: u64,
    #[command(flatten)]
    pub loader: LoaderArgs,
    /// Samples per batch
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub batch_size: usize,
    /// Side of the square crop, in pixels
    #[arg(long, default_value_t = 224, value_name = "PX")]
    pub image_size: u32,
    /// Decode threads [default: the cores available]
    #[arg(long, value_name = "N")]
    pub decode_threads: Option<usize>,
    /// Batch element type: f32 (CHW, normalised) or u8 (HWC)
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    pub dtype: Dtype,
    /// Hand the training step encoded samples: measures the input alone, as DLIO does
    #[arg(long)]
    pub no_decode: bool,
    /// Drop the last batch of an epoch when it is short
    #[arg(long)]
    pub drop_last: bool,
    /// Leave out images that cannot be decoded (counted and reported) instead of stopping
    #[arg(long)]
    pub skip_corrupt: bool,
    #[command(flatten)]
    pub transform: crate::decode::TransformArgs,
    /// Emulated compute per batch, milliseconds (0: as fast as the input allows)
    #[arg(long, default_value_t = 0.0, value_name = "MS")]
    pub compute_ms: f64,
    /// Search the smallest compute time that keeps accelerator utilisation >= 90%
    #[arg(long, conflicts_with = "compute_ms")]
    pub find_max: bool,
    /// Open each epoch only after the previous one's last batch, as a DataLoader without
    /// persistent workers does (by default the next epoch starts fetching once the current
    /// one's input has all arrived or is on its way)
    #[arg(long)]
    pub no_epoch_overlap: bool,
    /// Save a checkpoint every N training steps (0: none)
    #[arg(
        long,
        default_value_t = 0,
        value_name = "N",
        requires = "ckpt_to",
        conflicts_with = "find_max"
    )]
    pub ckpt_steps: u64,
    /// Size of each checkpoint
    #[arg(long, value_parser = crate::args::store::parse_size, default_value = "1GiB", value_name = "SIZE")]
    pub ckpt_size: u64,
    /// Where checkpoints go: an object-store prefix or a local directory
    #[arg(long, value_name = "URI")]
    pub ckpt_to: Option<String>,
    /// Save checkpoints in the background: the step waits only for the in-memory snapshot
    #[arg(long)]
    pub async_ckpt: bool,
    #[command(flatten)]
    pub ckpt_transfer: crate::args::ckpt::TransferArgs,
    /// Directory of the JSON log (created)
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// The run's name: the log is <log-dir>/<name>.json
    #[arg(long, default_value = "bench", value_name = "NAME")]
    pub name: String,
    /// Serve live Prometheus metrics at http://ADDR/metrics during the run (port 0: any)
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Print the log on stdout as JSON instead of the text summary
    #[arg(long)]
    pub json: bool,
}

/// Runs `bucketload bench`.
pub async fn bench(store: &StoreArgs, a: BenchArgs) -> anyhow::Result<()> {
    if !(a.compute_ms.is_finite() && a.compute_ms >= 0.0) {
        return Err(bucketload::Error::invalid_input(format!(
            "--compute-ms must be 0 or more, got {}",
            a.compute_ms
        ))
        .into());
    }
    check_name(&a.name)?;
    let uris = a
        .dataset
        .iter()
        .map(|uri| local_to_absolute(uri))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let uri = uris.join(" + ");
    let loader = Datasets::open(store, &a.loader, &uris, a.epochs).await?;
    let decoder = crate::decode::decoder(&decode_args(&a), a.loader.seed)?;
    let stores = loader.stores().into_iter().cloned().collect();
    let live = Arc::new(prom::Live::new(stores));
    let server = match a.metrics_addr {
        Some(addr) => {
            let (bound, task) = prom::serve(addr, Arc::clone(&live)).await?;
            eprintln!("bucketload bench: metrics at http://{bound}/metrics");
            Some(task)
        }
        None => None,
    };
    let trainer = Trainer {
        loader: &loader,
        decoder: decoder.as_ref(),
        batch_size: a.batch_size,
        drop_last: a.drop_last,
        compute: Duration::ZERO,
        compute_ms: 0.0,
        live,
        lead: (!a.no_epoch_overlap).then(|| epoch_lead(store, &a, &loader.format())),
        cached: a.loader.cache.is_some(),
    };
    let outcome = run(store, &a, &uri, trainer).await;
    if let Some(task) = server {
        task.abort();
    }
    let log = outcome?;
    write_log(&a, &log)
}

/// Samples the loader holds ahead of its consumer at most: its requests in flight, the
/// shuffle buffer of streamed shards, and the batches queued for the training step. Once this
/// few are left in an epoch, all of its input has arrived or is on its way. The shuffle buffer
/// counts twice: the next epoch's fills to its size taking two samples in for every one it
/// hands out, and opened this early that fill is over before its first batch is asked for.
fn epoch_lead(store: &StoreArgs, a: &BenchArgs, format: &str) -> u64 {
    let concurrency = store.concurrency.unwrap_or(DEFAULT_LOADER_CONCURRENCY) as u64;
    let streamed = format.split('+').any(|f| f == "shards");
    let buffer = match (streamed, a.loader.no_shuffle) {
        (true, false) => a
            .loader
            .shuffle_buffer
            .unwrap_or(bucketload::source::Order::DEFAULT_SHUFFLE_BUFFER),
        _ => 0,
    };
    let queued = (PREFETCH_BATCHES * a.batch_size.max(1)) as u64;
    concurrency + 2 * buffer + queued
}

/// A name that is one plain file name.
fn check_name(name: &str) -> anyhow::Result<()> {
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\'])
        && !name.chars().any(char::is_control);
    if !plain {
        return Err(bucketload::Error::invalid_input(format!(
            "--name {name:?} must be a plain file name (no slashes)"
        ))
        .into());
    }
    Ok(())
}

fn decode_args(a: &BenchArgs) -> DecodeArgs {
    DecodeArgs {
        decode: !a.no_decode,
        image_size: a.image_size,
        batch_size: a.batch_size,
        decode_threads: a.decode_threads,
        dtype: a.dtype,
        drop_last: a.drop_last,
        skip_corrupt: a.skip_corrupt,
        jpeg_decode: crate::decode::JpegMode::Region,
        transform: a.transform.clone(),
    }
}

async fn run(
    store: &StoreArgs,
    a: &BenchArgs,
    uri: &str,
    mut trainer: Trainer<'_>,
) -> anyhow::Result<BenchLog> {
    if !a.find_max {
        trainer.compute = compute(a.compute_ms);
        trainer.compute_ms = a.compute_ms;
        return train(store, a, uri, &trainer).await;
    }
    let mut probes: Vec<(Probe, BenchLog)> = Vec::new();
    let batch = a.batch_size.max(1);
    while let Some(ms) = next_probe(&probes.iter().map(|(p, _)| *p).collect::<Vec<_>>(), batch) {
        trainer.compute = compute(ms);
        trainer.compute_ms = ms;
        eprintln!("bucketload bench: find-max probe at {ms:.2} ms of compute per batch");
        let log = train(store, a, uri, &trainer).await?;
        let probe = Probe {
            compute_ms: ms,
            accelerator_utilization: log.accelerator_utilization,
            samples_per_second: log.samples_per_second,
            training_time: log.training_time,
        };
        let line = format!(
            "probe {:>8.2} ms/batch: utilisation {:>5.1}%, {:.0} samples/s",
            ms,
            probe.accelerator_utilization * 100.0,
            probe.samples_per_second
        );
        // With --json, stdout carries the log alone.
        match a.json {
            true => eprintln!("{line}"),
            false => println!("{line}"),
        }
        probes.push((probe, log));
    }
    let best = best_probe(probes.iter().map(|(p, _)| *p));
    // The log of the best probe stands for the run; without one, the last probe's.
    let index = best
        .and_then(|b| {
            probes
                .iter()
                .position(|(p, _)| p.compute_ms == b.compute_ms)
        })
        .unwrap_or(probes.len() - 1);
    let mut log = probes[index].1.clone();
    log.find_max = Some(FindMax {
        target_utilization: TARGET_UTILIZATION,
        probes: probes.iter().map(|(p, _)| *p).collect(),
        best,
    });
    Ok(log)
}

fn compute(ms: f64) -> Duration {
    Duration::from_secs_f64(ms / 1e3)
}

/// The next compute time to try, or `None` when the search is done.
///
/// The first probe runs at 0 ms and measures the input's own pace: one batch every `t` ms.
/// Overlapped perfectly, a step of `c` ms keeps utilisation at `c / max(c, t)`, so the answer
/// lies near `t`; the search doubles from `t` until a probe reaches the target, then bisects
/// the bracket down to 5% (or 0.5 ms).
fn next_probe(probes: &[Probe], batch_size: usize) -> Option<f64> {
    let Some(first) = probes.first() else {
        return Some(0.0);
    };
    if probes.len() >= MAX_PROBES {
        return None;
    }
    let ok = |p: &&Probe| p.accelerator_utilization >= TARGET_UTILIZATION;
    let hi = probes
        .iter()
        .filter(ok)
        .map(|p| p.compute_ms)
        .reduce(f64::min);
    let lo = probes
        .iter()
        .filter(|p| !ok(p))
        .map(|p| p.compute_ms)
        .reduce(f64::max)
        .unwrap_or(0.0);
    // Probes land on hundredths of a millisecond: the log reads cleanly, nothing finer matters.
    let round = |ms: f64| (ms * 100.0).round() / 100.0;
    match hi {
        None if probes.len() == 1 => Some(round(batch_ms(first, batch_size).max(1.0))),
        None => Some(round(lo * 2.0)),
        Some(hi) if hi - lo <= (hi * 0.05).max(0.5) => None,
        Some(hi) => Some(round((lo + hi) / 2.0)),
    }
}

/// Milliseconds per batch of a probe at 0 ms of compute.
fn batch_ms(p: &Probe, batch_size: usize) -> f64 {
    if p.samples_per_second > 0.0 {
        batch_size as f64 * 1e3 / p.samples_per_second
    } else {
        1.0
    }
}

fn best_probe(probes: impl Iterator<Item = Probe>) -> Option<Probe> {
    probes
        .filter(|p| p.accelerator_utilization >= TARGET_UTILIZATION && p.compute_ms > 0.0)
        .min_by(|a, b| a.compute_ms.total_cmp(&b.compute_ms))
}

/// One training run: every epoch, then the log.
async fn train(
    store: &StoreArgs,
    a: &BenchArgs,
    uri: &str,
    trainer: &Trainer<'_>,
) -> anyhow::Result<BenchLog> {
    let expected = trainer.loader.samples_per_epoch()?;
    let mut ckpt = checkpointer(store, a).await?;
    let store_before = snapshots(trainer.loader);
    let mut runs = Vec::new();
    let mut opened = None;
    for epoch in 0..a.epochs {
        trainer.live.set_epoch(epoch);
        let next = (epoch + 1 < a.epochs).then_some(epoch + 1);
        let (run, ahead) = trainer
            .epoch(epoch, expected, &mut ckpt, opened.take(), next)
            .await?;
        opened = ahead;
        if !a.json {
            print_epoch(&mut std::io::stdout().lock(), &run)?;
        }
        runs.push(run);
    }
    let after = snapshots(trainer.loader);
    let mut log = assemble(store, a, uri, trainer, &runs);
    for (before, after) in store_before.iter().zip(&after) {
        for (kind, n) in requests(&before.requests, &after.requests) {
            *log.requests.entry(kind).or_default() += n;
        }
        log.cost_usd += (after.cost.total_usd - before.cost.total_usd).max(0.0);
    }
    if let Some(ckpt) = ckpt {
        let ckpt = ckpt.finish().await?;
        for (i, t) in ckpt.times.iter().enumerate() {
            log.numbered.insert(format!("t_ckpt_{}", i + 1), *t);
        }
        if !ckpt.times.is_empty() {
            let mean = ckpt.times.iter().sum::<f64>() / ckpt.times.len() as f64;
            log.numbered.insert("t_ckpt_ave".to_owned(), mean);
        }
        log.ckpt = Some(ckpt);
    }
    Ok(log)
}

/// The run's checkpoints, with `--ckpt-steps`.
async fn checkpointer(
    store: &StoreArgs,
    a: &BenchArgs,
) -> anyhow::Result<Option<ckpt::Checkpointer>> {
    let (Some(to), true) = (&a.ckpt_to, a.ckpt_steps > 0) else {
        return Ok(None);
    };
    let target = crate::args::ckpt::open_prefix(store, to, a.ckpt_transfer.config(store))?;
    crate::args::ckpt::create_local_bucket(store, &target).await?;
    Ok(Some(ckpt::Checkpointer::new(
        target,
        a.ckpt_size,
        a.ckpt_steps,
        a.async_ckpt,
    )?))
}

fn assemble(
    store: &StoreArgs,
    a: &BenchArgs,
    uri: &str,
    trainer: &Trainer<'_>,
    runs: &[EpochRun],
) -> BenchLog {
    let training_time: f64 = runs.iter().map(|r| r.log.seconds).sum();
    let samples: u64 = runs.iter().map(|r| r.log.samples).sum();
    let compute_s: f64 = runs.iter().map(|r| r.compute_s).sum();
    let waits: Vec<f64> = runs.iter().flat_map(|r| r.waits.iter().copied()).collect();
    let (hits, misses) = runs.iter().fold((0, 0), |(h, m), r| {
        (h + r.log.cache_hits, m + r.log.cache_misses)
    });
    let mut numbered = BTreeMap::new();
    for (i, r) in runs.iter().enumerate() {
        numbered.insert(format!("t_epoch_{}", i + 1), r.log.seconds);
    }
    let sum = |f: fn(&EpochRun) -> StageSeconds| {
        runs.iter()
            .map(f)
            .fold(StageSeconds::default(), |a, b| StageSeconds {
                busy_s: a.busy_s + b.busy_s,
                wait_s: a.wait_s + b.wait_s,
            })
    };
    let mut stages = BTreeMap::new();
    stages.insert("fetch".to_owned(), sum(|r| r.fetch));
    if trainer.decoder.is_some() {
        stages.insert("decode".to_owned(), sum(|r| r.decode));
    }
    stages.insert(
        "compute".to_owned(),
        StageSeconds {
            busy_s: compute_s,
            wait_s: waits.iter().sum::<f64>() / 1e3,
        },
    );
    BenchLog {
        schema_version: log::SCHEMA_VERSION,
        name: a.name.clone(),
        tool: "bucketload".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        training_time,
        samples_per_second: if training_time > 0.0 {
            samples as f64 / training_time
        } else {
            0.0
        },
        samples_processed_total: samples,
        accelerator_utilization: if training_time > 0.0 {
            (compute_s / training_time).min(1.0)
        } else {
            0.0
        },
        data_wait_ms: WaitPercentiles::of(&waits),
        requests: BTreeMap::new(),
        bytes_read: runs.iter().map(|r| r.log.bytes).sum(),
        cost_usd: 0.0,
        cache_hit_rate: a
            .loader
            .cache
            .as_ref()
            .map(|_| hits as f64 / (hits + misses).max(1) as f64),
        stages,
        config: RunConfig {
            dataset: uri.to_owned(),
            format: trainer.loader.format(),
            cache: a.loader.cache.is_some(),
            cache_size: a.loader.cache_size,
            epochs: a.epochs,
            batch_size: a.batch_size,
            image_size: a.image_size,
            decode: trainer.decoder.is_some(),
            augment: format!("{:?}", a.transform.augment).to_lowercase(),
            decode_threads: trainer.decoder.map(Decoder::threads),
            compute_ms: trainer.compute_ms,
            concurrency: store.concurrency.unwrap_or(DEFAULT_LOADER_CONCURRENCY),
            seed: a.loader.seed,
            rank: a.loader.rank,
            world_size: a.loader.world_size,
            machine: Machine::here(),
        },
        ckpt: None,
        epochs: runs.iter().map(|r| r.log.clone()).collect(),
        find_max: None,
        numbered,
    }
}

/// Requests made between two snapshots, by kind (kinds with none left out).
/// The metrics of every store the run reads.
fn snapshots(datasets: &Datasets) -> Vec<bucketload_store::MetricsSnapshot> {
    let stores = datasets.stores();
    stores.iter().map(|s| s.metrics().snapshot()).collect()
}

fn requests(
    before: &bucketload_store::RequestCounts,
    after: &bucketload_store::RequestCounts,
) -> BTreeMap<String, u64> {
    let (Ok(b), Ok(a)) = (serde_json::to_value(before), serde_json::to_value(after)) else {
        return BTreeMap::new();
    };
    let (Some(b), Some(a)) = (b.as_object(), a.as_object()) else {
        return BTreeMap::new();
    };
    a.iter()
        .filter_map(|(kind, n)| {
            let n = n.as_u64()? - b.get(kind).and_then(|v| v.as_u64()).unwrap_or(0);
            (n > 0).then(|| (kind.clone(), n))
        })
        .collect()
}

fn print_epoch(out: &mut impl Write, r: &EpochRun) -> std::io::Result<()> {
    let e = &r.log;
    let w = &e.data_wait_ms;
    writeln!(
        out,
        "epoch {}  {} samples in {} batches, {:.2} s: {:.0} samples/s, accelerator {:.1}% busy, \
         data wait p50 {:.1} ms p99 {:.1} ms{}",
        e.epoch,
        e.samples,
        e.batches,
        e.seconds,
        e.samples_per_second,
        e.accelerator_utilization * 100.0,
        w.p50,
        w.p99,
        match e.cache_hits + e.cache_misses {
            0 => String::new(),
            _ => format!(", cache {} hits {} misses", e.cache_hits, e.cache_misses),
        }
    )
}

fn write_log(a: &BenchArgs, log: &BenchLog) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(log)?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{text}")?;
    } else {
        print_summary(&mut out, log)?;
    }
    let Some(dir) = &a.log_dir else {
        return Ok(());
    };
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the log directory {}", dir.display()))?;
    let path = dir.join(format!("{}.json", a.name));
    // Written beside and renamed, so a reader never sees half a log.
    let partial = dir.join(format!(".{}.json.partial", a.name));
    std::fs::write(&partial, text + "\n")
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, &path).with_context(|| format!("cannot write {}", path.display()))?;
    if !a.json {
        writeln!(out, "log: {}", path.display())?;
    }
    Ok(())
}

fn print_summary(out: &mut impl Write, log: &BenchLog) -> std::io::Result<()> {
    let epochs: Vec<String> = log
        .epochs
        .iter()
        .map(|e| format!("{:.2}", e.seconds))
        .collect();
    writeln!(
        out,
        "{}: {} samples in {:.2} s ({} s per epoch): {:.0} samples/s, accelerator {:.1}% busy, \
         {} requests, ${:.6}",
        log.name,
        log.samples_processed_total,
        log.training_time,
        epochs.join(" / "),
        log.samples_per_second,
        log.accelerator_utilization * 100.0,
        log.requests.values().sum::<u64>(),
        log.cost_usd
    )?;
    if let Some(best) = log.find_max.as_ref().and_then(|f| f.best) {
        writeln!(
            out,
            "find-max: {:.0} samples/s at {:.2} ms of compute per batch keeps the accelerator \
             {:.1}% busy",
            best.samples_per_second,
            best.compute_ms,
            best.accelerator_utilization * 100.0
        )?;
    } else if log.find_max.is_some() {
        writeln!(
            out,
            "find-max: no probe reached {:.0}% utilisation",
            TARGET_UTILIZATION * 100.0
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(compute_ms: f64, util: f64) -> Probe {
        Probe {
            compute_ms,
            accelerator_utilization: util,
            samples_per_second: 640.0,
            training_time: 1.0,
        }
    }

    #[test]
    fn the_search_starts_at_the_inputs_pace_then_bisects() {
        assert_eq!(next_probe(&[], 64), Some(0.0));
        // 640 samples/s at 0 ms: one batch of 64 every 100 ms.
        let mut probes = vec![probe(0.0, 0.0)];
        assert_eq!(next_probe(&probes, 64), Some(100.0));
        probes.push(probe(100.0, 0.5));
        assert_eq!(next_probe(&probes, 64), Some(200.0));
        probes.push(probe(200.0, 0.95));
        assert_eq!(next_probe(&probes, 64), Some(150.0));
        probes.push(probe(150.0, 0.93));
        assert_eq!(next_probe(&probes, 64), Some(125.0));
        probes.push(probe(125.0, 0.89));
        assert_eq!(next_probe(&probes, 64), Some(137.5));
        probes.push(probe(137.5, 0.91));
        // [125, 137.5] is wider than 5% of its top: one more.
        assert_eq!(next_probe(&probes, 64), Some(131.25));
        probes.push(probe(131.25, 0.9));
        // [125, 131.25]: 6.25 <= 6.56, done.
        assert_eq!(next_probe(&probes, 64), None);
        assert_eq!(best_probe(probes.into_iter()).unwrap().compute_ms, 131.25);
    }

    #[test]
    fn the_search_is_bounded() {
        let probes: Vec<Probe> = (0..MAX_PROBES).map(|i| probe(i as f64, 0.1)).collect();
        assert_eq!(next_probe(&probes, 64), None);
        assert!(best_probe(probes.into_iter()).is_none());
    }

    #[test]
    fn names_are_plain_file_names() {
        assert!(check_name("files-cached").is_ok());
        for bad in ["", "..", "a/b", "a\\b"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
