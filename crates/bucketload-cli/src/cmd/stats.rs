//! `stats`: what a dataset holds and what reading it costs.

use std::io::Write;

use bucketload::dataset::{self, ClassesFrom, DatasetStats, StatsFrom, StatsOptions};
use bucketload::shards::format::{DatasetKind, MANIFEST_PATH, Parameters};
use clap::Args;

use crate::args::store::{StoreArgs, open_dir};
use crate::common::{human, local_to_absolute, nothing_at};
use crate::progress::Bar;

/// Flags of `stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The dataset, e.g. s3://demo/train
    uri: String,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
    /// Images whose header is read for their dimensions (0 skips)
    #[arg(long, default_value_t = 32, value_name = "N")]
    sample: usize,
    /// Price the transfer too, as read from outside the bucket's region
    #[arg(long)]
    out_of_region: bool,
    /// Describe the dataset from a listing even when it has a bucketload manifest
    #[arg(long)]
    no_manifest: bool,
}

/// `stats`.
pub async fn stats(args: &StoreArgs, a: StatsArgs) -> anyhow::Result<()> {
    let config = args.config();
    let uri = local_to_absolute(&a.uri)?;
    let (_store, location) = open_dir(&uri, &config)?;
    let prices = bucketload_store::PriceTable {
        in_region: !a.out_of_region,
        ..Default::default()
    };
    let options = StatsOptions::default()
        .with_sample(a.sample)
        .with_concurrency(config.concurrency())
        .with_prices(prices)
        .with_manifest(!a.no_manifest);
    let bar = Bar::new("listing");
    let stats = dataset::stats(&location, &options, &bar).await?;
    if stats.objects == 0 {
        return Err(nothing_at(&location.to_string()));
    }
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &stats)?;
        writeln!(out)?;
    } else {
        print_stats(&mut out, &stats, a.no_manifest)?;
    }
    Ok(())
}

fn print_stats(out: &mut impl Write, s: &DatasetStats, no_manifest: bool) -> std::io::Result<()> {
    writeln!(out, "dataset   {}", s.uri)?;
    let kind = match s.kind {
        DatasetKind::Shards => "tar shards",
        DatasetKind::Files => "one object per sample",
    };
    let from = match s.from {
        StatsFrom::Manifest => format!(
            "described by {}",
            s.manifest.as_deref().unwrap_or(MANIFEST_PATH)
        ),
        StatsFrom::Indexes => "listed, then the shards' indexes read".to_string(),
        StatsFrom::Listing => "listed".to_string(),
    };
    let from = match (s.from, no_manifest) {
        (StatsFrom::Manifest, _) => from,
        (_, true) => format!("--no-manifest: {from}"),
        (_, false) => format!("no manifest: {from}"),
    };
    writeln!(out, "kind      {kind} ({from})")?;
    match &s.shards {
        Some(shards) => print_shards(out, s, shards)?,
        None => print_files(out, s)?,
    }
    print_classes(out, s)?;
    print_images(out, s)?;
    if let Some(p) = &s.parameters {
        print_parameters(out, p)?;
    }
    print_cost(out, s)
}

fn print_files(out: &mut impl Write, s: &DatasetStats) -> std::io::Result<()> {
    writeln!(out, "objects   {} ({} total)", s.objects, human(s.bytes))?;
    let p = &s.sizes;
    writeln!(
        out,
        "sizes     p0 {}  p50 {}  p90 {}  p99 {}  max {}",
        human(p.p0),
        human(p.p50),
        human(p.p90),
        human(p.p99),
        human(p.max)
    )
}

fn print_shards(
    out: &mut impl Write,
    s: &DatasetStats,
    shards: &dataset::ShardStats,
) -> std::io::Result<()> {
    let (n, b) = (&shards.samples_per_shard, &shards.bytes_per_shard);
    writeln!(out, "samples   {}", s.samples)?;
    writeln!(out, "shards    {} ({} total)", shards.count, human(s.bytes))?;
    writeln!(
        out,
        "  samples per shard  min {}  p50 {}  max {}",
        n.p0, n.p50, n.max
    )?;
    writeln!(
        out,
        "  bytes per shard    min {}  p50 {}  max {}",
        human(b.p0),
        human(b.p50),
        human(b.max)
    )?;
    if let Some(p) = &shards.sample_bytes {
        writeln!(
            out,
            "  bytes per sample   p0 {}  p50 {}  p90 {}  max {}",
            human(p.p0),
            human(p.p50),
            human(p.p90),
            human(p.max)
        )?;
    }
    if !shards.extensions.is_empty() {
        let members: Vec<String> = shards
            .extensions
            .iter()
            .map(|(ext, n)| format!(".{ext} {n}"))
            .collect();
        writeln!(out, "  members            {}", members.join(", "))?;
    }
    if !shards.unindexed.is_empty() {
        writeln!(
            out,
            "unindexed {} of {} shards have no index and their samples are not counted; \
             run `bucketload index {}`",
            shards.unindexed.len(),
            shards.count,
            s.uri
        )?;
        for uri in &shards.unindexed {
            writeln!(out, "  {uri}")?;
        }
    }
    Ok(())
}

fn print_classes(out: &mut impl Write, s: &DatasetStats) -> std::io::Result<()> {
    if s.classes.is_empty() {
        return Ok(());
    }
    let counts: Vec<u64> = s.classes.values().copied().collect();
    let (lo, hi) = (
        counts.iter().min().copied().unwrap_or(0),
        counts.iter().max().copied().unwrap_or(0),
    );
    let unit = if s.shards.is_some() {
        "samples"
    } else {
        "objects"
    };
    let from = match s.classes_from {
        Some(ClassesFrom::Manifest) => "from the manifest",
        Some(ClassesFrom::KeyFolder) => "folders of the sample keys",
        Some(ClassesFrom::FirstFolder) | None => "first folders below the root",
    };
    writeln!(
        out,
        "classes   {} ({unit} per class: min {lo}, max {hi}; {from})",
        s.classes.len()
    )?;
    for (name, n) in &s.classes {
        writeln!(out, "  {name:<20} {n}")?;
    }
    Ok(())
}

fn print_images(out: &mut impl Write, s: &DatasetStats) -> std::io::Result<()> {
    let dims: Vec<String> = s
        .images
        .dimensions
        .iter()
        .map(|(d, n)| format!("{d} ({n})"))
        .collect();
    writeln!(
        out,
        "images    {} sampled: {}",
        s.images.sampled,
        dims.join(", ")
    )?;
    for bad in &s.images.unreadable {
        writeln!(out, "  unreadable: {bad}")?;
    }
    Ok(())
}

fn print_parameters(out: &mut impl Write, p: &Parameters) -> std::io::Result<()> {
    let mut how = vec![format!("labels {}", p.label_policy)];
    if let Some(bytes) = p.shard_size {
        how.push(format!("shard size {}", human(bytes)));
    }
    if let Some(n) = p.samples_per_shard {
        how.push(format!("{n} samples per shard"));
    }
    if let Some(seed) = p.seed {
        how.push(format!("shuffled with seed {seed}"));
    }
    if let Some(plan) = &p.plan {
        how.push(format!("plan {plan}"));
    }
    writeln!(
        out,
        "made by   bucketload {} at {} from {}",
        p.tool_version, p.created, p.source
    )?;
    writeln!(out, "  {}", how.join(", "))
}

fn print_cost(out: &mut impl Write, s: &DatasetStats) -> std::io::Result<()> {
    let c = &s.cost;
    let reads = match s.shards {
        Some(_) => "one streaming GET per shard",
        None => "one GET per object",
    };
    writeln!(
        out,
        "one pass  {} LIST + {} GET requests ({reads}) = ${:.4} requests + ${:.4} transfer \
         (S3 Standard prices)",
        c.list_requests, c.get_requests, c.requests_usd, c.transfer_usd
    )?;
    if let Some(r) = &c.random_access {
        writeln!(
            out,
            "  random access: {} GET requests (each index, then one ranged GET per sample) = \
             ${:.4} requests",
            r.get_requests, r.requests_usd
        )?;
    }
    Ok(())
}
