//! `shard` (a one-object-per-sample dataset into tar shards with indexes and a manifest) and
//! `merge` (the manifests of `shard --part i/N` slices into the dataset's manifest).

use std::io::Write;

use bucketload::shards::format::{ManifestFormat, PartSpec};
use bucketload::shards::{self, Cut, LabelFrom, ShardOptions, ShardReport};
use clap::{Args, ValueEnum};

use crate::args::store::{
    StoreArgs, open_dir, parse_manifest_format, parse_size, prepare_destination,
};
use crate::common::local_to_absolute;
use crate::progress::Bar;

/// Flags of `shard`.
#[derive(Debug, Args)]
pub struct ShardArgs {
    /// The dataset to shard (one object per sample), e.g. s3://demo/train or ./images
    src: String,
    /// Where the shards go (an empty prefix, or an unfinished run of the same plan to resume)
    dst: String,
    /// Largest shard, e.g. 256MiB or 1GB [default: 256MiB]
    #[arg(long, value_parser = parse_size, value_name = "SIZE", conflicts_with = "samples_per_shard")]
    shard_size: Option<u64>,
    /// Samples per shard instead of a size (the last shard may have fewer)
    #[arg(long, value_name = "N")]
    samples_per_shard: Option<u64>,
    /// Shuffle the samples before cutting them into shards (fixed algorithm, see --seed)
    #[arg(long)]
    shuffle: bool,
    /// Seed of --shuffle
    #[arg(long, default_value_t = 0, value_name = "S", requires = "shuffle")]
    seed: u64,
    /// Labels: the class folder as a `.cls` member (`folder`), none, or `auto` (folder labels
    /// when every sample sits in a folder and has no `.cls` of its own)
    #[arg(long, value_enum, default_value_t = LabelArg::Auto, value_name = "FROM")]
    label_from: LabelArg,
    /// Build only slice i of N (0-based; e.g. 3/8), then run `bucketload merge DST`
    #[arg(long, value_parser = parse_part, value_name = "I/N")]
    part: Option<PartSpec>,
    /// Leave out objects deleted since the listing (counted and reported) instead of failing
    #[arg(long)]
    skip_missing: bool,
    /// Leave out objects that differ from the source's manifest or listing (size, ETag,
    /// CRC32C), counted and reported, instead of failing; a changed object is never packaged
    #[arg(long)]
    skip_changed: bool,
    /// Delete what a run with another plan left at DST and start over
    #[arg(long)]
    overwrite: bool,
    /// Also record each shard's MD5 (as `md5sum` prints it) in its index and the manifest;
    /// CRC32C is always recorded. Costs about 1.5 ms of CPU per MB
    #[arg(long)]
    md5: bool,
    /// Fetched objects held in memory at most, e.g. 256MiB
    #[arg(long, value_parser = parse_size, default_value = "256MiB", value_name = "SIZE")]
    buffer: u64,
    /// Create the destination bucket if it does not exist (automatic for loopback endpoints)
    #[arg(long)]
    create_bucket: bool,
    /// List the source even when it has a bucketload manifest (objects added since it was
    /// written are packaged too)
    #[arg(long)]
    no_manifest: bool,
    /// Manifest format: 2 (`_bucketload/manifest.bin`, compact and checksummed) or 1
    /// (`_bucketload/manifest.json`, for bucketload versions before format 2); the other
    /// format's manifest is deleted
    #[arg(long, value_parser = parse_manifest_format, default_value = "2", value_name = "N")]
    manifest_format: ManifestFormat,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LabelArg {
    Auto,
    Folder,
    None,
}

/// Parses `i/N`.
fn parse_part(s: &str) -> Result<PartSpec, String> {
    let bad = || format!("{s:?} is not a slice: use i/N with 0 <= i < N, e.g. 0/8");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (index, count) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if count == 0 || index >= count {
        return Err(bad());
    }
    Ok(PartSpec { index, count })
}

/// `shard`.
pub async fn shard(args: &StoreArgs, a: ShardArgs) -> anyhow::Result<()> {
    let mut config = args.config();
    if args.concurrency.is_none() {
        config = config.with_concurrency(shards::DEFAULT_GETS_IN_FLIGHT);
    }
    let cut = match (a.samples_per_shard, a.shard_size) {
        (Some(n), _) => Cut::Samples(n),
        (None, size) => Cut::Bytes(size.unwrap_or(shards::DEFAULT_SHARD_SIZE)),
    };
    let options = ShardOptions::builder()
        .with_cut(cut)
        .with_seed(a.shuffle.then_some(a.seed))
        .with_label_from(match a.label_from {
            LabelArg::Auto => LabelFrom::Auto,
            LabelArg::Folder => LabelFrom::Folder,
            LabelArg::None => LabelFrom::None,
        })
        .with_part(a.part)
        .with_gets_in_flight(config.concurrency())
        .with_buffer_bytes(a.buffer)
        .with_skip_missing(a.skip_missing)
        .with_skip_changed(a.skip_changed)
        .with_overwrite(a.overwrite)
        .with_md5(a.md5)
        .with_manifest_format(a.manifest_format)
        .with_source_manifest(!a.no_manifest)
        .build()?;
    let (src, _) = open_dir(&local_to_absolute(&a.src)?, &config)?;
    let (dst, _) = open_dir(&local_to_absolute(&a.dst)?, &args.config())?;
    prepare_destination(&dst, &args.config(), a.create_bucket).await?;
    let bar = Bar::new("sharding");
    let report = shards::shard_dataset(&src, &dst, &options, &bar).await?;
    print_report(&report, a.json)
}

fn print_report(r: &ShardReport, json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, r)?;
        writeln!(out)?;
        return Ok(());
    }
    for uri in &r.missing {
        writeln!(out, "left out (gone since listed): {uri}")?;
    }
    for change in &r.changed {
        writeln!(out, "left out (changed since listed): {change}")?;
    }
    let secs = r.seconds.max(1e-3);
    let kept = match r.kept {
        0 => String::new(),
        n => format!(" ({n} kept from an earlier run)"),
    };
    writeln!(
        out,
        "wrote {} of {} shards{kept}: {} samples, {} bytes; fetched {} objects ({} bytes) in \
         {:.1} s, {:.0} objects/s, {:.1} MB/s",
        r.written,
        r.shards,
        r.samples,
        r.shard_bytes,
        r.objects,
        r.object_bytes,
        r.seconds,
        r.objects as f64 / secs,
        r.object_bytes as f64 / 1e6 / secs,
    )?;
    if !r.missing.is_empty() {
        writeln!(
            out,
            "left out {} objects gone since the listing",
            r.missing.len()
        )?;
    }
    if !r.changed.is_empty() {
        writeln!(
            out,
            "left out {} objects changed since the manifest or listing",
            r.changed.len()
        )?;
    }
    writeln!(out, "manifest: {} (plan {})", r.manifest, r.plan)?;
    Ok(())
}

/// Flags of `merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The destination of the `shard --part i/N` runs
    dst: String,
    /// Manifest format: 2 (`_bucketload/manifest.bin`, compact and checksummed) or 1
    /// (`_bucketload/manifest.json`, for bucketload versions before format 2); the other
    /// format's manifest is deleted
    #[arg(long, value_parser = parse_manifest_format, default_value = "2", value_name = "N")]
    manifest_format: ManifestFormat,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

/// `merge`.
pub async fn merge(args: &StoreArgs, a: MergeArgs) -> anyhow::Result<()> {
    let (dst, _) = open_dir(&local_to_absolute(&a.dst)?, &args.config())?;
    let report = shards::merge_parts(&dst, a.manifest_format).await?;
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "merged {} slices: {} shards, {} samples; wrote {}",
            report.parts, report.shards, report.samples, report.manifest
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_zero_based_slices() {
        assert_eq!(parse_part("3/8"), Ok(PartSpec { index: 3, count: 8 }));
        assert!(parse_part("8/8").is_err());
        assert!(parse_part("1/0").is_err());
        assert!(parse_part("x").is_err());
    }
}
