//! The data commands: `gen`, `ls`, `stats`, `cp`.

use std::io::Write;

use anyhow::Context;
use bucketload::base::{self, Entry, ListReport, Location};
use bucketload::dataset::{
    self, ClassesFrom, CopyOptions, DatasetStats, GenSpec, StatsFrom, StatsOptions,
};
use bucketload::shards::format::{DatasetKind, MANIFEST_PATH, Parameters};
use bucketload::shards::{self, SHARD_EXT, ShardSamples};
use bucketload_store::object_store::{ObjectStoreExt, path::Path};
use bucketload_store::{Scheme, Store, StoreConfig, key_path};
use clap::Args;
use futures::TryStreamExt;

use crate::progress::Bar;
use crate::store_args::{StoreArgs, open_dir, open_object, parse_size, should_create_bucket};

/// Flags of `gen`.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// Where to write the dataset, e.g. s3://demo/train or ./train
    uri: String,
    /// Number of images
    #[arg(long, default_value_t = 1000, value_name = "N")]
    samples: u64,
    /// Number of classes (folders class_000, class_001, ...)
    #[arg(long, default_value_t = 10, value_name = "K")]
    classes: usize,
    /// Target size of each JPEG, e.g. 100KB (files land within ±10%)
    #[arg(long, default_value = "100KB", value_parser = parse_size, value_name = "SIZE")]
    size: u64,
    /// Seed: the same seed writes the same bytes
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Create the bucket if it does not exist (automatic for loopback endpoints)
    #[arg(long)]
    create_bucket: bool,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

/// Flags of `ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// What to list, e.g. s3://demo/train
    uri: String,
    /// List every object below, not one level
    #[arg(short, long)]
    recursive: bool,
    /// Print totals at the end: objects and their size, or with --samples the samples per shard
    #[arg(long)]
    summarize: bool,
    /// Print JSON Lines: one object per entry, and with --summarize a last line of totals
    #[arg(long)]
    json: bool,
    /// List the samples inside the tar shards below URI (or in the shard URI) from their `.idx`
    /// indexes, one line each: `shard  key  extensions  bytes`
    #[arg(long)]
    samples: bool,
}

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
}

/// Flags of `cp`.
#[derive(Debug, Args)]
pub struct CpArgs {
    /// Source: an object (or with --recursive, a prefix or folder)
    src: String,
    /// Destination: an object, a folder ending in `/`, or with --recursive a prefix
    dst: String,
    /// Copy every object below SRC to the same relative key below DST
    #[arg(short, long)]
    recursive: bool,
    /// Create the destination bucket if it does not exist (automatic for loopback endpoints)
    #[arg(long)]
    create_bucket: bool,
}

/// `gen`.
pub async fn gen_cmd(args: &StoreArgs, a: GenArgs) -> anyhow::Result<()> {
    let config = args.config();
    let spec = GenSpec::builder()
        .with_samples(a.samples)
        .with_classes(a.classes)
        .with_size(a.size)
        .with_seed(a.seed)
        .with_concurrency(config.concurrency())
        .build()?;
    let uri = local_to_absolute(&a.uri)?;
    let (store, location) = open_dir(&uri, &config)?;
    prepare_destination(&store, &config, a.create_bucket).await?;
    let bar = Bar::new("generating");
    let report = dataset::generate(&location, &spec, &bar).await?;
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
        return Ok(());
    }
    let secs = report.seconds.max(1e-3);
    writeln!(
        out,
        "wrote {}, {} in {:.1} s ({:.0} objects/s, {:.1} MB/s) to {}; images {}x{} quality {}",
        objects(report.objects),
        human(report.bytes),
        report.seconds,
        report.objects as f64 / secs,
        report.bytes as f64 / 1e6 / secs,
        location,
        report.shape.width,
        report.shape.height,
        report.shape.quality
    )?;
    Ok(())
}

/// Creates the bucket (or local folder) when allowed, see [`should_create_bucket`].
pub(crate) async fn prepare_destination(
    store: &Store,
    config: &StoreConfig,
    flag: bool,
) -> anyhow::Result<()> {
    let scheme = store.uri().scheme();
    if scheme == Scheme::File || (scheme == Scheme::S3 && should_create_bucket(flag, config)) {
        store
            .create_bucket()
            .await
            .with_context(|| format!("cannot create the bucket of {store}"))?;
    }
    Ok(())
}

/// Local relative paths become absolute, so the store and its messages name the real folder.
pub(crate) fn local_to_absolute(uri: &str) -> anyhow::Result<String> {
    // An empty URI is left for the store crate to refuse, never taken as the current folder.
    if uri.is_empty() || uri.contains("://") || uri.starts_with('/') {
        return Ok(uri.to_string());
    }
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let joined = cwd.join(uri.trim_start_matches("./"));
    Ok(joined.to_string_lossy().trim_end_matches("/.").to_string())
}

/// `ls`.
pub async fn ls(args: &StoreArgs, a: LsArgs) -> anyhow::Result<()> {
    let config = args.config();
    let uri = local_to_absolute(&a.uri)?;
    if a.samples {
        return ls_samples(&uri, &a, &config).await;
    }
    let (_store, location) = open_dir(&uri, &config)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut totals = ListReport::default();
    let mut entries = base::list(&location, None, a.recursive);
    let print = if a.json { print_json } else { print_entry };
    // Something is below the URI, if only its folder marker.
    let mut found = false;
    while let Some(entry) = entries.try_next().await? {
        found = true;
        // A recursive listing lists objects; folder markers are folders, not objects. The
        // marker of the listed folder itself is not shown either.
        match &entry {
            Entry::Dir(_) if a.recursive => continue,
            Entry::Dir(own) if own.is_empty() => continue,
            _ => {}
        }
        totals.add(&entry);
        print(&mut out, &entry)?;
    }
    if !found {
        // Nothing below the URI: it may name a single object.
        let meta = head_object(&uri, &config).await?;
        let entry = Entry::Object(meta);
        totals.add(&entry);
        print(&mut out, &entry)?;
    }
    if a.summarize && a.json {
        serde_json::to_writer(&mut out, &serde_json::json!({ "summary": totals }))?;
        writeln!(out)?;
    } else if a.summarize {
        writeln!(
            out,
            "\nTotal Objects: {}\n   Total Size: {} ({} bytes)",
            totals.objects,
            human(totals.bytes),
            totals.bytes
        )?;
    }
    out.flush()?;
    Ok(())
}

fn print_entry(out: &mut impl Write, entry: &Entry) -> std::io::Result<()> {
    match entry {
        Entry::Dir(prefix) => writeln!(out, "{:>30} {prefix}", "PRE"),
        Entry::Object(meta) => {
            writeln!(
                out,
                "{} {:>10} {}",
                meta.last_modified.format("%Y-%m-%d %H:%M:%S"),
                meta.size,
                meta.location
            )
        }
        Entry::Unaddressable(listed) => writeln!(
            out,
            "{} {:>10} {}",
            listed.last_modified.format("%Y-%m-%d %H:%M:%S"),
            listed.size,
            listed.key
        ),
        _ => Ok(()),
    }
}

fn print_json(out: &mut impl Write, entry: &Entry) -> std::io::Result<()> {
    let value = match entry {
        Entry::Dir(prefix) => serde_json::json!({ "prefix": prefix }),
        Entry::Object(meta) => serde_json::json!({
            "key": meta.location.as_ref(),
            "size": meta.size,
            "etag": meta.e_tag,
            "last_modified": meta.last_modified.to_rfc3339(),
        }),
        Entry::Unaddressable(listed) => serde_json::json!({
            "key": listed.key,
            "size": listed.size,
            "etag": listed.e_tag,
            "last_modified": listed.last_modified.to_rfc3339(),
        }),
        _ => return Ok(()),
    };
    serde_json::to_writer(&mut *out, &value)?;
    writeln!(out)
}

/// `ls --samples`: the samples of every shard below `uri` (or of the shard `uri`), shard by
/// shard in key order; fails after listing the rest if a shard has no index.
async fn ls_samples(uri: &str, a: &LsArgs, config: &StoreConfig) -> anyhow::Result<()> {
    let (store, location, key) = if uri.ends_with(SHARD_EXT) {
        let (store, location, key) = open_object(uri, config)?;
        (store, location, Some(key))
    } else {
        let (store, location) = open_dir(uri, config)?;
        (store, location, None)
    };
    let found = bucketload::shards::find_shards(&store, key.as_ref()).await?;
    if found.is_empty() {
        let message = format!(
            "no *{SHARD_EXT} shards below {uri}; --samples lists the samples inside tar shards"
        );
        return Err(bucketload::Error::invalid_input(message).into());
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut summary = SamplesSummary::default();
    let mut shards = shards::read_indexes(&location, found, config.concurrency());
    while let Some(shard) = shards.try_next().await? {
        if a.json {
            print_samples_json(&mut out, &shard)?;
        } else {
            print_samples(&mut out, &shard)?;
        }
        summary.add(&location, &shard);
    }
    if a.summarize && a.json {
        serde_json::to_writer(&mut out, &serde_json::json!({ "summary": summary }))?;
        writeln!(out)?;
    } else if a.summarize {
        summary.print(&mut out)?;
    }
    out.flush()?;
    summary.check(uri)
}

fn print_samples(out: &mut impl Write, shard: &ShardSamples) -> std::io::Result<()> {
    let Some(index) = &shard.index else {
        return Ok(());
    };
    for sample in &index.samples {
        let extensions = shards::extensions(sample).join(",");
        let bytes = shards::sample_bytes(sample);
        writeln!(out, "{}  {}  {extensions}  {bytes}", shard.key, sample.key)?;
    }
    Ok(())
}

fn print_samples_json(out: &mut impl Write, shard: &ShardSamples) -> std::io::Result<()> {
    let Some(index) = &shard.index else {
        return Ok(());
    };
    for sample in &index.samples {
        let (start, end) = sample.byte_range().unwrap_or_default();
        let value = serde_json::json!({
            "shard": shard.key.as_ref(),
            "key": sample.key,
            "extensions": shards::extensions(sample),
            "bytes": shards::sample_bytes(sample),
            "offset": start,
            "length": end.saturating_sub(start),
        });
        serde_json::to_writer(&mut *out, &value)?;
        writeln!(out)?;
    }
    Ok(())
}

/// Totals of `ls --samples` (`--summarize`).
#[derive(Debug, Default, serde::Serialize)]
struct SamplesSummary {
    shards: u64,
    samples: u64,
    /// Bytes of the shards.
    bytes: u64,
    /// Samples of each indexed shard, by shard key.
    samples_per_shard: std::collections::BTreeMap<String, u64>,
    /// Full URIs of the shards without index.
    unindexed: Vec<String>,
}

impl SamplesSummary {
    fn add(&mut self, location: &Location, shard: &ShardSamples) {
        self.shards += 1;
        self.bytes += shard.size;
        match &shard.index {
            Some(index) => {
                let n = index.samples.len() as u64;
                self.samples += n;
                self.samples_per_shard.insert(shard.key.to_string(), n);
            }
            None => self.unindexed.push(location.uri_of(&shard.key)),
        }
    }

    fn print(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(out)?;
        for (shard, n) in &self.samples_per_shard {
            writeln!(out, "{shard}  {n} samples")?;
        }
        let counts: Vec<u64> = self.samples_per_shard.values().copied().collect();
        let (lo, hi) = (
            counts.iter().min().copied().unwrap_or(0),
            counts.iter().max().copied().unwrap_or(0),
        );
        let unindexed = match self.unindexed.len() {
            0 => String::new(),
            n => format!(" ({n} without index)"),
        };
        writeln!(out, "\nTotal Shards: {}{unindexed}", self.shards)?;
        writeln!(
            out,
            "Total Samples: {} (per shard: min {lo}, max {hi})",
            self.samples
        )?;
        writeln!(
            out,
            "   Total Size: {} ({} bytes)",
            human(self.bytes),
            self.bytes
        )
    }

    /// Fails if a shard had no index (its samples were not listed).
    fn check(&self, uri: &str) -> anyhow::Result<()> {
        if self.unindexed.is_empty() {
            return Ok(());
        }
        let message = format!(
            "{} of {} shards have no index, so their samples are not listed: {}; \
             run `bucketload index {uri}`",
            self.unindexed.len(),
            self.shards,
            self.unindexed.join(", ")
        );
        Err(bucketload::Error::invalid_input(message).into())
    }
}

async fn head_object(
    uri: &str,
    config: &StoreConfig,
) -> anyhow::Result<bucketload_store::object_store::ObjectMeta> {
    let (_store, location, key) = open_object(uri, config).map_err(|_| nothing_at(uri))?;
    let meta = location
        .store()
        .head(&key)
        .await
        .map_err(|e| location.error(&key, e))?;
    Ok(meta)
}

fn nothing_at(uri: &str) -> anyhow::Error {
    bucketload_store::Error::NotFound {
        uri: uri.to_string(),
        what: "object or prefix",
        hint: "check the path with `bucketload ls` on its parent".to_string(),
    }
    .into()
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
        .with_prices(prices);
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
        print_stats(&mut out, &stats)?;
    }
    Ok(())
}

fn print_stats(out: &mut impl Write, s: &DatasetStats) -> std::io::Result<()> {
    writeln!(out, "dataset   {}", s.uri)?;
    let kind = match s.kind {
        DatasetKind::Shards => "tar shards",
        DatasetKind::Files => "one object per sample",
    };
    let from = match s.from {
        StatsFrom::Manifest => format!("described by {MANIFEST_PATH}"),
        StatsFrom::Indexes => "no manifest: listed, then the shards' indexes read".to_string(),
        StatsFrom::Listing => "no manifest: listed".to_string(),
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

/// `cp`.
pub async fn cp(args: &StoreArgs, a: CpArgs) -> anyhow::Result<()> {
    let config = args.config();
    let options = CopyOptions::default()
        .with_part_size(config.part_size())
        .with_concurrency(config.concurrency());
    let src = local_to_absolute(&a.src)?;
    let dst = local_to_absolute(&a.dst)?;
    let bar = Bar::new("copying");
    let report = if a.recursive {
        let (_s, src_loc) = open_dir(&src, &config)?;
        let (dst_store, dst_loc) = open_dir(&dst, &config)?;
        prepare_destination(&dst_store, &config, a.create_bucket).await?;
        dataset::copy_tree(&src_loc, &dst_loc, options, &bar).await?
    } else {
        let (_s, src_loc, src_key) = open_object(&src, &config)?;
        let (dst_loc, dst_key) =
            open_destination(&dst, &a.dst, &src_key, &config, a.create_bucket).await?;
        dataset::copy_object(&src_loc, &src_key, &dst_loc, &dst_key, options, &bar).await?
    };
    let secs = report.seconds.max(1e-3);
    writeln!(
        std::io::stdout().lock(),
        "copied {}, {} in {:.1} s ({:.1} MB/s)",
        objects(report.objects),
        human(report.bytes),
        report.seconds,
        report.bytes as f64 / 1e6 / secs
    )?;
    if report.skipped > 0 {
        writeln!(
            std::io::stdout().lock(),
            "skipped {} with an empty segment (`//`) in the key, which cannot be read (named above)",
            objects(report.skipped)
        )?;
    }
    Ok(())
}

/// The destination of a single-object copy: `dst/<name of src>` when `dst` ends with `/` or is a
/// local folder, else `dst` itself.
async fn open_destination(
    dst: &str,
    as_given: &str,
    src_key: &Path,
    config: &StoreConfig,
    create_bucket: bool,
) -> anyhow::Result<(Location, Path)> {
    let is_dir = as_given.ends_with('/')
        || crate::store_args::split_last(dst).1.is_empty()
        || std::path::Path::new(dst).is_dir();
    let (store, location, key) = if is_dir {
        let (store, location) = open_dir(dst, config)?;
        let name = src_key.filename().unwrap_or("object").to_string();
        (store, location, key_path(&name))
    } else {
        open_object(dst, config)?
    };
    prepare_destination(&store, config, create_bucket).await?;
    Ok((location, key))
}

/// "1 object", "2 objects".
fn objects(n: u64) -> String {
    if n == 1 {
        "1 object".to_string()
    } else {
        format!("{n} objects")
    }
}

/// Bytes in decimal units, e.g. "100.2 KB".
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes_use_decimal_units() {
        assert_eq!(human(999), "999 B");
        assert_eq!(human(100_200), "100.2 KB");
        assert_eq!(human(2_500_000_000), "2.5 GB");
    }
}
