//! `bucketload read`: drains the loader over a dataset and reports how fast each epoch went,
//! which requests it took, how the cache did and which stage limited the run.

use std::io::Write;
use std::time::Instant;

use anyhow::bail;
use bucketload::base::Progress;
use bucketload::loader::LoaderStats;
use clap::Args;
use futures::TryStreamExt;
use serde::Serialize;

use crate::args::loader::{Datasets, LoaderArgs};
use crate::args::store::StoreArgs;
use crate::common::local_to_absolute;
use crate::decode::DecodeArgs;
use crate::progress::Bar;
use bucketload::decode::{DecodeEpoch, Decoder};

/// `bucketload read` arguments; the global `--concurrency` sets the requests in flight
/// (default 256 here).
#[derive(Debug, Args)]
pub struct ReadArgs {
    /// Dataset URI (s3://bucket/prefix, file:///dir or a local path); several are mixed
    /// (see --weights)
    #[arg(required = true, value_name = "URI")]
    pub uris: Vec<String>,
    /// Epochs to read
    #[arg(long, default_value_t = 1, value_name = "E")]
    pub epochs: u64,
    #[command(flatten)]
    pub loader: LoaderArgs,
    /// Print the report as JSON on stdout
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub decode: DecodeArgs,
}

/// One epoch of the report.
#[derive(Debug, Serialize)]
struct EpochReport {
    epoch: u64,
    samples: u64,
    /// Samples left out because their object changed (`--skip-changed`): the epoch delivered
    /// `samples` of `samples + skipped_changed`.
    skipped_changed: u64,
    bytes: u64,
    seconds: f64,
    /// Seconds from the epoch's start until the loader had delivered a first batch of samples
    /// (`--batch-size`, also without `--decode`; the whole epoch if it is shorter).
    first_batch_s: f64,
    samples_per_s: f64,
    mb_per_s: f64,
    get: u64,
    ranged_get: u64,
    shard_ranged_get: u64,
    samples_coalesced: u64,
    cache_hits: u64,
    cache_misses: u64,
    /// Share of the epoch with at least one request in flight.
    fetch_busy: f64,
    /// Mean requests in flight (shards: shard streams running).
    mean_in_flight: f64,
    /// Share of the epoch the consumer (this command) waited for a sample.
    consumer_waiting: f64,
    /// Images decoded into batches (`--decode`).
    #[serde(skip_serializing_if = "Option::is_none")]
    decode: Option<DecodeEpoch>,
    /// Samples drawn from each dataset of a mixture, in their order.
    #[serde(skip_serializing_if = "Option::is_none")]
    mixed: Option<Vec<u64>>,
}

#[derive(Debug, Serialize)]
struct Report {
    /// The dataset; a mixture's URIs joined by ` + `.
    uri: String,
    /// Each dataset's weight (normalised) when several are mixed.
    #[serde(skip_serializing_if = "Option::is_none")]
    weights: Option<Vec<f64>>,
    format: String,
    samples_per_epoch: u64,
    /// Seconds to open the dataset (its manifest or listing, and what planning needs), before
    /// the first epoch starts.
    open_s: f64,
    epochs: Vec<EpochReport>,
    loader: LoaderStats,
}

/// Runs `bucketload read`.
pub async fn read(store: &StoreArgs, a: ReadArgs) -> anyhow::Result<()> {
    let uris = a
        .uris
        .iter()
        .map(|uri| local_to_absolute(uri))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let opening = std::time::Instant::now();
    let loader = Datasets::open(store, &a.loader, &uris, a.epochs).await?;
    let samples_per_epoch = loader.samples_per_epoch()?;
    let open_s = opening.elapsed().as_secs_f64();
    let decoder = crate::decode::decoder(&a.decode, a.loader.seed)?;
    let mut epochs = Vec::new();
    for epoch in 0..a.epochs {
        let batch = a.decode.batch_size as u64;
        let report = run_epoch(&loader, epoch, samples_per_epoch, batch, decoder.as_ref()).await?;
        epochs.push(report);
        if !a.json {
            let streams = loader.streams_shards();
            print_epoch(&mut std::io::stdout().lock(), epochs.last(), streams)?;
        }
    }
    let weights = match &loader {
        Datasets::Mix(mix) => Some((0..uris.len()).map(|i| mix.weights().weight(i)).collect()),
        Datasets::One(_) => None,
    };
    let report = Report {
        uri: uris.join(" + "),
        weights,
        format: loader.format(),
        samples_per_epoch,
        open_s,
        epochs,
        loader: loader.stats(),
    };
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_summary(&mut out, &report)?;
    }
    Ok(())
}

async fn run_epoch(
    loader: &Datasets,
    epoch: u64,
    expected: u64,
    batch: u64,
    decoder: Option<&Decoder>,
) -> anyhow::Result<EpochReport> {
    let before = loader.stats();
    let bar = Bar::new(&format!("epoch {epoch}"));
    bar.set_total(expected, None);
    let started = Instant::now();
    let mut decode = decoder.map(|d| d.start(epoch));
    let mut samples = loader.epoch(epoch)?;
    let mut delivered = 0u64;
    let mut first_batch_s = None;
    let mut mixed = match loader {
        Datasets::Mix(mix) => Some(vec![0u64; mix.loaders().len()]),
        Datasets::One(_) => None,
    };
    while let Some(sample) = samples.try_next().await? {
        if let Some(decode) = &mut decode {
            decode.push(&sample).await?;
        }
        if let Some(count) = mixed
            .as_mut()
            .and_then(|m| m.get_mut(sample.dataset as usize))
        {
            *count += 1;
        }
        delivered += 1;
        if delivered == batch {
            first_batch_s = Some(started.elapsed().as_secs_f64());
        }
        bar.advance(1, sample.bytes());
    }
    // The loader errs on a short epoch itself; the report must agree with the plan too. Samples
    // left out with --skip-changed were asked to be left out: they are counted, not missing.
    // A mixture draws again from a dataset that skipped one: it delivers its whole plan.
    let skipped = match loader {
        Datasets::One(_) => loader.stats().skipped_changed - before.skipped_changed,
        Datasets::Mix(_) => 0,
    };
    if delivered + skipped != expected {
        bail!(
            "epoch {epoch} delivered {delivered} samples ({skipped} skipped), its plan {expected}"
        );
    }
    let decoded = match decode {
        Some(decode) => Some(decode.finish().await?),
        None => None,
    };
    let seconds = started.elapsed().as_secs_f64();
    bar.finish();
    let mut report = epoch_report(epoch, seconds, &before, &loader.stats());
    report.first_batch_s = first_batch_s.unwrap_or(seconds);
    report.mixed = mixed;
    report.decode = decoded.map(|mut d| {
        d.images_per_s = d.images as f64 / seconds.max(1e-9);
        d
    });
    Ok(report)
}

fn epoch_report(epoch: u64, seconds: f64, a: &LoaderStats, b: &LoaderStats) -> EpochReport {
    let share = |x: f64| if seconds > 0.0 { x / seconds } else { 0.0 };
    let samples = b.samples - a.samples;
    let bytes = b.bytes - a.bytes;
    EpochReport {
        epoch,
        samples,
        skipped_changed: b.skipped_changed - a.skipped_changed,
        bytes,
        seconds,
        first_batch_s: seconds,
        samples_per_s: share(samples as f64),
        mb_per_s: share(bytes as f64 / 1e6),
        get: b.requests.get - a.requests.get,
        ranged_get: b.requests.ranged_get - a.requests.ranged_get,
        shard_ranged_get: b.requests.shard_ranged_get - a.requests.shard_ranged_get,
        samples_coalesced: b.requests.samples_coalesced - a.requests.samples_coalesced,
        cache_hits: b.cache.hits - a.cache.hits,
        cache_misses: b.cache.misses - a.cache.misses,
        fetch_busy: share(b.fetch.busy_s - a.fetch.busy_s).min(1.0),
        mean_in_flight: share(b.in_flight.request_s - a.in_flight.request_s),
        consumer_waiting: share(b.consumer.idle_or_waiting_s - a.consumer.idle_or_waiting_s)
            .min(1.0),
        decode: None,
        mixed: None,
    }
}

fn print_epoch(
    out: &mut impl Write,
    e: Option<&EpochReport>,
    streams: bool,
) -> std::io::Result<()> {
    let Some(e) = e else { return Ok(()) };
    writeln!(
        out,
        "epoch {}  {} samples, {:.1} MB in {:.2} s: {:.0} samples/s, {:.1} MB/s",
        e.epoch,
        e.samples,
        e.bytes as f64 / 1e6,
        e.seconds,
        e.samples_per_s,
        e.mb_per_s
    )?;
    writeln!(
        out,
        "  requests  {} GET, {} ranged GET ({} samples shared one), {} shard ranged GET",
        e.get, e.ranged_get, e.samples_coalesced, e.shard_ranged_get
    )?;
    if let Some(d) = &e.decode {
        writeln!(
            out,
            "  decode    {} images in {} batches: {:.0} images/s ({:.2} s decoding, {:.2} s \
             augmenting, thread time){}",
            d.images,
            d.batches,
            d.images_per_s,
            d.decode_s,
            d.augment_s,
            match d.skipped {
                0 => String::new(),
                n => format!(", {n} corrupt images skipped"),
            }
        )?;
    }
    if let Some(mixed) = &e.mixed {
        let counts: Vec<String> = mixed.iter().map(u64::to_string).collect();
        writeln!(
            out,
            "  mixed     {} samples from each dataset",
            counts.join(" / ")
        )?;
    }
    if e.skipped_changed > 0 {
        writeln!(
            out,
            "  skipped   {} samples whose objects changed since the manifest or listing: the \
             epoch is incomplete",
            e.skipped_changed
        )?;
    }
    if e.cache_hits + e.cache_misses > 0 {
        writeln!(
            out,
            "  cache     {} hits, {} misses",
            e.cache_hits, e.cache_misses
        )?;
    }
    writeln!(
        out,
        "  stages    fetch busy {:.0}% (mean {:.1} {} in flight), consumer waiting {:.0}%",
        e.fetch_busy * 100.0,
        e.mean_in_flight,
        if streams { "shard streams" } else { "requests" },
        e.consumer_waiting * 100.0
    )
}

fn print_summary(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    let total: f64 = r.epochs.iter().map(|e| e.seconds).sum();
    let samples: u64 = r.epochs.iter().map(|e| e.samples).sum();
    writeln!(
        out,
        "read {} ({}): {} epochs, {} samples in {:.2} s, at most {} requests in flight",
        r.uri,
        r.format,
        r.epochs.len(),
        samples,
        total,
        r.loader.in_flight.max
    )?;
    if r.loader.skipped_changed > 0 {
        writeln!(
            out,
            "incomplete: {} samples skipped because their objects changed (--skip-changed)",
            r.loader.skipped_changed
        )?;
    }
    Ok(())
}
