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
}

/// `manifest`.
pub async fn manifest(args: &StoreArgs, a: ManifestArgs) -> anyhow::Result<()> {
    let config = args.config();
    let (store, _) = open_dir(&a.uri, &config)?;
    let bar = Bar::new("reading");
    let report =
        shards::write_files_manifest(&store, config.concurrency(), a.manifest_format, &bar).await?;
    let m = &report.header;
    writeln!(
        std::io::stdout().lock(),
        "wrote {} ({} files, {} bytes, {} classes) in {:.1} s",
        report.uri,
        m.samples,
        m.bytes,
        m.classes.len(),
        report.seconds
    )?;
    Ok(())
}
