//! `manifest`: the manifest of a dataset of one object per sample.

use std::io::Write;

use bucketload::shards::{self};
use clap::Args;

use crate::args::store::{StoreArgs, open_dir};
use crate::progress::Bar;

/// Flags of `manifest`.
#[derive(Debug, Args)]
pub struct ManifestArgs {
    /// The dataset root, e.g. s3://demo/train (one object per sample)
    uri: String,
}

/// `manifest`.
pub async fn manifest(args: &StoreArgs, a: ManifestArgs) -> anyhow::Result<()> {
    let config = args.config();
    let (store, _) = open_dir(&a.uri, &config)?;
    let bar = Bar::new("reading");
    let report = shards::write_files_manifest(&store, config.concurrency(), &bar).await?;
    let m = &report.manifest;
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
