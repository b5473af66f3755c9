//! `ls`: objects and folders, or with `--samples` the samples inside tar shards.

use std::io::Write;

use bucketload::dataset::{self, Entry, ListReport, Location, ShardSamples};
use bucketload::shards::SHARD_EXT;
use bucketload_store::StoreConfig;
use bucketload_store::object_store::ObjectStoreExt;
use clap::Args;
use futures::TryStreamExt;

use crate::args::store::{StoreArgs, open_dir, open_object};
use crate::common::{human, local_to_absolute, nothing_at};

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
    let mut entries = dataset::list(&location, None, a.recursive);
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
    let mut shards = dataset::read_indexes(&location, found, config.concurrency());
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
        let extensions = dataset::extensions(sample).join(",");
        let bytes = dataset::sample_bytes(sample);
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
            "extensions": dataset::extensions(sample),
            "bytes": dataset::sample_bytes(sample),
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
