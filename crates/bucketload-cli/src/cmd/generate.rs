//! `gen`: a synthetic image-classification dataset.

use std::io::Write;

use bucketload::dataset::{self, GenSpec};
use clap::Args;

use crate::args::store::{StoreArgs, open_dir, parse_size, prepare_destination};
use crate::common::{human, local_to_absolute, objects};
use crate::progress::Bar;

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
