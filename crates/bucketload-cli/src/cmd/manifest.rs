//! `manifest`: the manifest of a dataset of one object per sample.

use std::io::Write;

use bucketload::shards::{self, format::ManifestFormat};
use clap::Args;

use crate::args::store::{StoreArgs, open_dir, parse_manifest_format};
use crate::progress::Bar;

/// Flags of `manifest`.
#[derive(Debug, Args)]
pub struct ManifestArgs {
    /// The dataset root, e.g. s3://demo/train (one object per sample)
    uri: String,
    /// Manifest format: 2 (`_bucketload/manifest.bin`, compact and checksummed) or 1
    /// (`_bucketload/manifest.json`, for bucketload versions before format 2); the other
    /// format's manifest is deleted
    #[arg(long, value_parser = parse_manifest_format, default_value = "2", value_name = "N")]
    manifest_format: ManifestFormat,
    /// Take the objects from an S3 Inventory report instead of listing the bucket: the URI of
    /// the report's manifest.json (CSV or Parquet reports), e.g.
    /// s3://inventory/data/daily/2026-11-28T01-00Z/manifest.json. Sizes and ETags come from the
    /// report and no object is read (no CRC32Cs); objects deleted since the report are errors
    /// naming them when the dataset is read, objects added since are not in it
    #[arg(long, value_name = "URI")]
    from_inventory: Option<String>,
}

/// `manifest`.
pub async fn manifest(args: &StoreArgs, a: ManifestArgs) -> anyhow::Result<()> {
    let config = args.config();
    let (store, _) = open_dir(&a.uri, &config)?;
    if let Some(inventory) = &a.from_inventory {
        return from_inventory(&config, &store, inventory, a.manifest_format).await;
    }
    let bar = Bar::new("reading");
    let report =
        shards::write_files_manifest(&store, config.concurrency(), a.manifest_format, &bar).await?;
    writeln!(
        std::io::stdout().lock(),
        "{} in {:.1} s",
        wrote(&report),
        report.seconds
    )?;
    Ok(())
}

/// "wrote URI (N files, B bytes, C classes)": what a written manifest describes.
fn wrote(report: &shards::ManifestReport) -> String {
    let m = &report.header;
    format!(
        "wrote {} ({} files, {} bytes, {} classes)",
        report.uri,
        m.samples,
        m.bytes,
        m.classes.len()
    )
}

/// `manifest --from-inventory`.
async fn from_inventory(
    config: &bucketload_store::StoreConfig,
    store: &bucketload_store::Store,
    inventory: &str,
    format: ManifestFormat,
) -> anyhow::Result<()> {
    let parsed = bucketload_store::StoreUri::parse(inventory)?;
    let key = parsed.prefix();
    if parsed.scheme() != bucketload_store::Scheme::S3 || !key.ends_with("manifest.json") {
        anyhow::bail!(
            "--from-inventory {inventory}: give the s3:// URI of an S3 Inventory report's \
             manifest.json"
        );
    }
    let root = format!("s3://{}", parsed.bucket());
    let (reports, _) = open_dir(&root, config)?;
    let bar = Bar::new("reading the report");
    let (report, summary) =
        shards::write_inventory_manifest(store, &reports, key, format, &bar).await?;
    writeln!(
        std::io::stdout().lock(),
        "{} from {} ({} data files, {} rows{}) in {:.1} s",
        wrote(&report),
        summary.manifest_uri,
        summary.files,
        summary.rows,
        match summary.not_current {
            0 => String::new(),
            n => format!(", {n} delete markers or noncurrent versions left out"),
        },
        report.seconds
    )?;
    Ok(())
}
