//! `index`: the `.idx` of tar shards written by other tools.

use std::io::Write;

use bucketload::shards::{self, IndexOptions, IndexReport, SHARD_EXT};
use clap::Args;

use crate::args::store::{StoreArgs, open_dir, open_object};
use crate::progress::Bar;

/// Flags of `index`.
#[derive(Debug, Args)]
pub struct IndexArgs {
    /// One shard (`s3://b/shards/shard-000.tar`) or a prefix holding `*.tar` shards
    uri: String,
    /// Re-index shards that already have an index
    #[arg(long)]
    force: bool,
    /// Shards read at the same time
    #[arg(long, default_value_t = 4, value_name = "N")]
    shards_in_flight: usize,
    /// Also record each shard's MD5 (as `md5sum` prints it); CRC32C is always recorded
    #[arg(long)]
    md5: bool,
}

/// `index`.
pub async fn index(args: &StoreArgs, a: IndexArgs) -> anyhow::Result<()> {
    let config = args.config();
    // Memory holds at most shards × GETs × part size: 4 × 4 × 8 MiB = 128 MiB by default.
    let gets = (config.concurrency() / a.shards_in_flight.max(1)).clamp(1, 4);
    let options = IndexOptions::builder()
        .with_force(a.force)
        .with_md5(a.md5)
        .with_shards_in_flight(a.shards_in_flight)
        .with_gets_per_shard(gets)
        .with_part_size(config.part_size())
        .build()?;
    let single = a.uri.ends_with(SHARD_EXT);
    let (store, key) = if single {
        let (store, _, key) = open_object(&a.uri, &config)?;
        (store, Some(key))
    } else {
        (open_dir(&a.uri, &config)?.0, None)
    };
    let found = shards::find_shards(&store, key.as_ref()).await?;
    if found.is_empty() {
        let message = format!("no *{SHARD_EXT} objects below {}", store.uri());
        return Err(bucketload::Error::invalid_input(message).into());
    }
    let bar = Bar::new("indexing");
    let report = shards::index_shards(&store, found, &options, &bar).await;
    summarize(&a.uri, report)
}

/// Prints each failure and the totals; fails (exit 6 for corrupt shards) if a shard failed.
fn summarize(uri: &str, report: IndexReport) -> anyhow::Result<()> {
    let mut err = std::io::stderr().lock();
    for failure in &report.failures {
        writeln!(err, "error: {}", failure.error)?;
    }
    let mut out = std::io::stdout().lock();
    let skipped = match report.skipped {
        0 => String::new(),
        n => format!(" ({n} already indexed, skipped; --force re-indexes them)"),
    };
    writeln!(
        out,
        "indexed {} shards, {} samples, {} bytes in {:.1} s{skipped}",
        report.indexed, report.samples, report.bytes, report.seconds
    )?;
    let failed = report.failures.len();
    let Some(first) = report.failures.into_iter().next() else {
        return Ok(());
    };
    let summary = format!(
        "{failed} of {} shards failed; no index was written for them (errors above)",
        report.shards - report.skipped
    );
    match first.error {
        bucketload::Error::Format(_) => Err(bucketload::Error::Corrupt {
            uri: uri.to_owned(),
            reason: format!("{summary}; re-create those shards and run `bucketload index` again"),
        }
        .into()),
        other => Err(anyhow::Error::new(other).context(summary)),
    }
}
