//! `bucketload ckpt-bench`: checkpoints to the object store against the local disk — seconds
//! and GB/s of save and load, synchronous and in the background — with one log per target and
//! mode that `bucketload report` draws.
//!
//! The background ("async") save is measured as a training loop sees it: the stall is the time
//! to snapshot the model's bytes in memory (one copy) and start the upload; the save is durable
//! when its handle completes. The time of the copy alone is measured next to it, since that is
//! the floor of any background save.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use bucketload::checkpoint::Checkpoints;
use bytes::Bytes;
use clap::Args;
use serde::Serialize;

use crate::args::ckpt::{TransferArgs, create_local_bucket, open_prefix};
use crate::args::store::{StoreArgs, parse_size};
use crate::cmd::bench::model_bytes;
use crate::common::human;

/// `ckpt-bench` arguments.
#[derive(Debug, Args)]
pub struct CkptBenchArgs {
    /// Checkpoint size, e.g. 4GiB
    #[arg(long, value_parser = parse_size, default_value = "1GiB", value_name = "SIZE")]
    pub size: u64,
    /// Where to save: an object-store prefix (or any checkpoint URI prefix)
    #[arg(long, value_name = "URI")]
    pub to: String,
    /// A local directory to compare with (the disk)
    #[arg(long, value_name = "DIR")]
    pub vs: Option<PathBuf>,
    /// Saves (and loads) per target and mode
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub runs: usize,
    /// Measure synchronous saves only
    #[arg(long)]
    pub no_async: bool,
    #[command(flatten)]
    pub transfer: TransferArgs,
    /// Directory of the JSON logs (one per target and mode)
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// Prefix of the logs' names: NAME-s3-sync.json, NAME-disk-async.json, ...
    #[arg(long, default_value = "ckpt", value_name = "NAME")]
    pub name: String,
    /// Keep the checkpoints written (deleted by default)
    #[arg(long)]
    pub keep: bool,
}

/// The log of one target and mode, in the keys `bucketload report` reads.
#[derive(Debug, Serialize)]
struct CkptLog {
    schema_version: u32,
    name: String,
    tool: &'static str,
    ckpt: Measured,
    t_ckpt_ave: f64,
    #[serde(flatten)]
    numbered: BTreeMap<String, f64>,
}

#[derive(Debug, Default, Serialize)]
struct Measured {
    /// `s3` (object store) or `disk`.
    target: String,
    /// `sync` or `async`.
    mode: String,
    uri: String,
    size_bytes: u64,
    part_size: u64,
    parts_in_flight: usize,
    /// Seconds the caller waited for each save (async: the stall).
    times: Vec<f64>,
    /// Seconds of each load (sync runs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    load_times: Vec<f64>,
    /// Async: seconds until each save was durable.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    durable_times: Vec<f64>,
    /// Async: seconds of copying the bytes once in memory, measured next to each save.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    copy_times: Vec<f64>,
}

/// Runs `bucketload ckpt-bench`.
pub async fn ckpt_bench(store: &StoreArgs, a: CkptBenchArgs) -> anyhow::Result<()> {
    if a.runs == 0 {
        return Err(bucketload::Error::invalid_input("--runs must be at least 1").into());
    }
    let size = usize::try_from(a.size).context("--size does not fit in memory")?;
    eprintln!("ckpt-bench: filling {} of checkpoint bytes", human(a.size));
    let state = model_bytes(size);
    let to = open_prefix(store, &a.to, a.transfer.config(store))?;
    create_local_bucket(store, &to).await?;
    let mut targets = vec![("s3", to)];
    if let Some(dir) = &a.vs {
        let uri = std::path::absolute(dir)
            .with_context(|| format!("cannot resolve {}", dir.display()))?;
        let uri = uri.display().to_string();
        targets.push(("disk", open_prefix(store, &uri, a.transfer.config(store))?));
    }
    let mut logs = Vec::new();
    for (target, ckpt) in &targets {
        let mut sync = measured(&a, target, "sync", ckpt);
        run_sync(&a, ckpt, &state, &mut sync).await?;
        logs.push(sync);
        if !a.no_async {
            let mut bg = measured(&a, target, "async", ckpt);
            run_async(&a, ckpt, &state, &mut bg).await?;
            logs.push(bg);
        }
        if !a.keep {
            for name in ["ckpt-bench-sync.bin", "ckpt-bench-async.bin"] {
                ckpt.delete(name)
                    .await
                    .with_context(|| format!("cannot delete {}", ckpt.uri_of(name)))?;
            }
        }
    }
    print_table(&mut std::io::stdout().lock(), &logs)?;
    write_logs(&a, logs)
}

fn measured(a: &CkptBenchArgs, target: &str, mode: &str, ckpt: &Checkpoints) -> Measured {
    let config = ckpt.config();
    Measured {
        target: target.to_owned(),
        mode: mode.to_owned(),
        uri: ckpt.uri_of(&format!("ckpt-bench-{mode}.bin")),
        size_bytes: a.size,
        part_size: config.part_size(),
        parts_in_flight: config.parts_in_flight(),
        ..Measured::default()
    }
}

async fn run_sync(
    a: &CkptBenchArgs,
    ckpt: &Checkpoints,
    state: &Bytes,
    m: &mut Measured,
) -> anyhow::Result<()> {
    let name = "ckpt-bench-sync.bin";
    for run in 0..a.runs {
        let saved = ckpt.save(name, state.clone()).await?;
        m.times.push(saved.seconds);
        let started = Instant::now();
        let back = ckpt.load(name).await?;
        m.load_times.push(started.elapsed().as_secs_f64());
        if run == 0 && back != *state {
            bail!("{} read back differs from what was saved", m.uri);
        }
        eprintln!(
            "ckpt-bench: {} sync run {}: save {:.2} s, load {:.2} s",
            m.target,
            run + 1,
            saved.seconds,
            m.load_times[run]
        );
    }
    Ok(())
}

async fn run_async(
    a: &CkptBenchArgs,
    ckpt: &Checkpoints,
    state: &Bytes,
    m: &mut Measured,
) -> anyhow::Result<()> {
    let name = "ckpt-bench-async.bin";
    for run in 0..a.runs {
        // The floor: one copy of the bytes in memory.
        let started = Instant::now();
        let copy = Bytes::copy_from_slice(state);
        m.copy_times.push(started.elapsed().as_secs_f64());
        drop(copy);
        // What the training loop waits for: the snapshot, then starting the upload.
        let started = Instant::now();
        let snapshot = Bytes::copy_from_slice(state);
        let handle = ckpt.save_background(name, snapshot).await?;
        let stall = started.elapsed().as_secs_f64();
        handle.wait().await?;
        let durable = started.elapsed().as_secs_f64();
        m.times.push(stall);
        m.durable_times.push(durable);
        eprintln!(
            "ckpt-bench: {} async run {}: stall {:.3} s (copy {:.3} s), durable after {:.2} s",
            m.target,
            run + 1,
            stall,
            m.copy_times[run],
            durable
        );
    }
    Ok(())
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn print_table(out: &mut impl Write, logs: &[Measured]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<6} {:<6} {:>10}  {:>16}  {:>16}  {:>26}",
        "target", "mode", "size", "save s (GB/s)", "load s (GB/s)", "stall s (copy s) durable s"
    )?;
    for m in logs {
        let gbps = |s: f64| m.size_bytes as f64 / 1e9 / s.max(1e-9);
        let (save, load) = (mean(&m.times), mean(&m.load_times));
        let save_col = match m.mode.as_str() {
            "sync" => format!("{save:.2} ({:.2})", gbps(save)),
            _ => "-".to_owned(),
        };
        let load_col = match m.load_times.is_empty() {
            true => "-".to_owned(),
            false => format!("{load:.2} ({:.2})", gbps(load)),
        };
        let async_col = match m.mode.as_str() {
            "async" => format!(
                "{save:.3} ({:.3}) {:.2}",
                mean(&m.copy_times),
                mean(&m.durable_times)
            ),
            _ => "-".to_owned(),
        };
        writeln!(
            out,
            "{:<6} {:<6} {:>10}  {:>16}  {:>16}  {:>26}",
            m.target,
            m.mode,
            human(m.size_bytes),
            save_col,
            load_col,
            async_col
        )?;
    }
    Ok(())
}

fn write_logs(a: &CkptBenchArgs, logs: Vec<Measured>) -> anyhow::Result<()> {
    let Some(dir) = &a.log_dir else {
        return Ok(());
    };
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the log directory {}", dir.display()))?;
    for m in logs {
        let name = format!("{}-{}-{}", a.name, m.target, m.mode);
        let numbered = m
            .times
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("t_ckpt_{}", i + 1), *t))
            .collect();
        let log = CkptLog {
            schema_version: 1,
            name: name.clone(),
            tool: "bucketload",
            t_ckpt_ave: mean(&m.times),
            ckpt: m,
            numbered,
        };
        let path = dir.join(format!("{name}.json"));
        let partial = dir.join(format!(".{name}.json.partial"));
        std::fs::write(&partial, serde_json::to_string_pretty(&log)? + "\n")
            .with_context(|| format!("cannot write {}", partial.display()))?;
        std::fs::rename(&partial, &path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("log: {}", path.display());
    }
    Ok(())
}
