//! `verify`: a dataset checked against its manifest or its shard indexes.

use std::io::Write;

use bucketload::shards::{self, IndexOptions};
use clap::Args;

use crate::args::store::{StoreArgs, open_dir};
use crate::progress::Bar;

/// Flags of `verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The dataset root, e.g. s3://demo/train (a `files` manifest or `*.tar` shards with indexes)
    uri: String,
    /// Shards read at the same time
    #[arg(long, default_value_t = 4, value_name = "N")]
    shards_in_flight: usize,
}

/// `verify`: prints every problem (and warning), then the totals; exit 6 if any problem.
pub async fn verify(args: &StoreArgs, a: VerifyArgs) -> anyhow::Result<()> {
    let config = args.config();
    let gets = (config.concurrency() / a.shards_in_flight.max(1)).clamp(1, 4);
    let options = IndexOptions::builder()
        .with_shards_in_flight(a.shards_in_flight)
        .with_gets_per_shard(gets)
        .with_part_size(config.part_size())
        .build()?;
    let (store, _) = open_dir(&a.uri, &config)?;
    let bar = Bar::new("verifying");
    let report = shards::verify(&store, config.concurrency(), &options, &bar).await?;
    let mut out = std::io::stdout().lock();
    for warning in &report.warnings {
        writeln!(out, "warning: {warning}")?;
    }
    for problem in &report.problems {
        writeln!(out, "{problem}")?;
    }
    let problems = report.problems.len();
    writeln!(
        out,
        "verified {} objects ({} bytes) in {:.1} s: {problems} problems",
        report.objects, report.bytes, report.seconds
    )?;
    if problems == 0 {
        return Ok(());
    }
    Err(bucketload::Error::Corrupt {
        uri: store.uri().to_string(),
        reason: format!("{problems} problems (listed above)"),
    }
    .into())
}
