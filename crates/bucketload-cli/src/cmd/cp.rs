//! `cp`: objects copied between local folders and object stores.

use std::io::Write;

use bucketload::base::Location;
use bucketload::dataset::{self, CopyOptions};
use bucketload_store::object_store::path::Path;
use bucketload_store::{StoreConfig, key_path};
use clap::Args;

use crate::args::store::{StoreArgs, open_dir, open_object, prepare_destination, split_last};
use crate::common::{human, local_to_absolute, objects};
use crate::progress::Bar;

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
            "skipped {} whose key cannot name a file in the folder (named above, with the reason)",
            objects(report.skipped)
        )?;
    }
    if report.not_copied.is_empty() {
        return Ok(());
    }
    let mut stderr = std::io::stderr().lock();
    for not in &report.not_copied {
        writeln!(stderr, "error: cannot copy {}: {}", not.uri, not.reason)?;
    }
    Err(PartialCopy {
        not_copied: report.not_copied.len() as u64,
    }
    .into())
}

/// A copy that copied what it could and left out objects it named: exit code
/// [`PARTIAL`](crate::exit::PARTIAL).
#[derive(Debug)]
pub struct PartialCopy {
    /// Objects left out.
    pub not_copied: u64,
}

impl std::fmt::Display for PartialCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} could not be copied (named above); everything else was copied",
            objects(self.not_copied)
        )
    }
}

impl std::error::Error for PartialCopy {}

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
        || split_last(dst).1.is_empty()
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
