//! `bucketload ckpt`: save, load, list, prune and clean up checkpoints in any store
//! (docs/CHECKPOINTS.md). A checkpoint URI is a prefix and a name: `s3://ckpt/run-7/step-100.pt`
//! is `step-100.pt` under `s3://ckpt/run-7`, and its key is `run-7/step-100.pt` (on S3 the
//! key is always the URI's, byte for byte).

use std::io::Write;
use std::time::{Instant, SystemTime};

use anyhow::Context;
use bucketload::checkpoint::{CheckpointConfig, CheckpointInfo, Checkpoints, ORPHAN_AGE, Orphan};
use bytes::BytesMut;
use clap::{Args, Subcommand};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::args::ckpt::{TransferArgs, create_local_bucket, open_prefix};
use crate::args::store::StoreArgs;
use crate::common::human;

/// Bytes read from the source file per write.
const CHUNK: usize = 8 << 20;

/// `bucketload ckpt` subcommands.
#[derive(Debug, Subcommand)]
pub enum CkptCommand {
    /// Save a file (or stdin, `-`) as a checkpoint: parallel multipart upload, visible only
    /// when whole.
    Save(SaveArgs),
    /// Load a checkpoint into a file (or stdout, `-`) with parallel ranged GETs.
    Load(LoadArgs),
    /// List the checkpoints under a prefix, oldest first.
    Ls(LsArgs),
    /// Delete all but the newest K checkpoints under a prefix.
    Prune(PruneArgs),
    /// Abort saves that were started and never finished (left by killed writers).
    Gc(GcArgs),
}

/// `ckpt` arguments.
#[derive(Debug, Args)]
pub struct CkptArgs {
    #[command(subcommand)]
    pub command: CkptCommand,
}

/// `ckpt save`.
#[derive(Debug, Args)]
pub struct SaveArgs {
    /// The file to save, or `-` for stdin
    pub src: String,
    /// The checkpoint's URI, e.g. s3://ckpt/run-7/step-100.pt
    pub uri: String,
    #[command(flatten)]
    pub transfer: TransferArgs,
}

/// `ckpt load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// The checkpoint's URI
    pub uri: String,
    /// Where to write it, or `-` for stdout
    pub dst: String,
    #[command(flatten)]
    pub transfer: TransferArgs,
}

/// `ckpt ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// The checkpoints' prefix, e.g. s3://ckpt/run-7
    pub prefix: String,
}

/// `ckpt prune`.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// The checkpoints' prefix
    pub prefix: String,
    /// Checkpoints to keep (the newest)
    #[arg(long, value_name = "K")]
    pub keep_last: usize,
    /// Only print what would be deleted
    #[arg(long)]
    pub dry_run: bool,
}

/// `ckpt gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// The checkpoints' prefix
    pub prefix: String,
    /// Only saves started longer ago than this (younger ones may still be running)
    #[arg(long, default_value_t = ORPHAN_AGE.into(), value_name = "AGE")]
    pub older_than: humantime::Duration,
    /// Only print what would be aborted
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs `bucketload ckpt …`.
pub async fn ckpt(store: &StoreArgs, args: CkptArgs) -> anyhow::Result<()> {
    match args.command {
        CkptCommand::Save(a) => save(store, a).await,
        CkptCommand::Load(a) => load(store, a).await,
        CkptCommand::Ls(a) => ls(store, a).await,
        CkptCommand::Prune(a) => prune(store, a).await,
        CkptCommand::Gc(a) => gc(store, a).await,
    }
}

/// Opens the prefix of checkpoint `uri` and returns the name under it (on S3 the key is the
/// URI's, byte for byte: `s3://b/a//x.pt` is the key `a//x.pt`).
pub fn open_named(
    store: &StoreArgs,
    uri: &str,
    config: CheckpointConfig,
) -> anyhow::Result<(Checkpoints, String)> {
    let (prefix, name) = bucketload::checkpoint::split_uri(uri);
    if name.is_empty() {
        return Err(bucketload::Error::invalid_input(format!(
            "`{uri}` names a prefix, not a checkpoint; add the checkpoint's name"
        ))
        .into());
    }
    Ok((open_prefix(store, prefix, config)?, name.to_owned()))
}

async fn save(store: &StoreArgs, a: SaveArgs) -> anyhow::Result<()> {
    let (ckpt, name) = open_named(store, &a.uri, a.transfer.config(store))?;
    create_local_bucket(store, &ckpt).await?;
    let mut src: Box<dyn tokio::io::AsyncRead + Unpin + Send> = match a.src.as_str() {
        "-" => Box::new(tokio::io::stdin()),
        path => Box::new(
            tokio::fs::File::open(path)
                .await
                .with_context(|| format!("cannot open {path}"))?,
        ),
    };
    let mut writer = ckpt.writer(&name).await?;
    loop {
        let mut buf = BytesMut::with_capacity(CHUNK);
        while buf.len() < CHUNK {
            let n = src
                .read_buf(&mut buf)
                .await
                .with_context(|| format!("cannot read {}", a.src))?;
            if n == 0 {
                break;
            }
        }
        if buf.is_empty() {
            break;
        }
        // On error the writer aborts the upload: nothing becomes visible.
        writer.write(buf.freeze()).await?;
    }
    let saved = writer.finish().await?;
    println!(
        "saved {}: {} in {:.2} s ({}/s)",
        saved.uri,
        human(saved.bytes),
        saved.seconds,
        human(saved.bytes_per_s() as u64)
    );
    Ok(())
}

async fn load(store: &StoreArgs, a: LoadArgs) -> anyhow::Result<()> {
    let (ckpt, name) = open_named(store, &a.uri, a.transfer.config(store))?;
    let started = Instant::now();
    let bytes = ckpt.load(&name).await?;
    let seconds = started.elapsed().as_secs_f64();
    if a.dst == "-" {
        let mut out = tokio::io::stdout();
        out.write_all(&bytes).await?;
        out.flush().await?;
    } else {
        write_local(&a.dst, bytes.clone()).await?;
    }
    eprintln!(
        "loaded {}: {} in {:.2} s ({}/s)",
        ckpt.uri_of(&name),
        human(bytes.len() as u64),
        seconds,
        human((bytes.len() as f64 / seconds.max(1e-9)) as u64)
    );
    Ok(())
}

/// Writes `bytes` to the local file `dst` as a local checkpoint is saved: a temporary file beside
/// it, `fsync`ed and renamed over it, so a failed write (a full disk) leaves an older file whole.
async fn write_local(dst: &str, bytes: bytes::Bytes) -> anyhow::Result<()> {
    let path = std::path::Path::new(dst);
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{dst} names no file"))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let dir = dir.to_str().with_context(|| format!("{dst}: not UTF-8"))?;
    let local = Checkpoints::open(dir, &Default::default(), CheckpointConfig::default())?;
    local
        .save(name, bytes)
        .await
        .with_context(|| format!("cannot write {dst}"))?;
    Ok(())
}

async fn ls(store: &StoreArgs, a: LsArgs) -> anyhow::Result<()> {
    let ckpt = open_prefix(store, &a.prefix, CheckpointConfig::default())?;
    let list = ckpt.list().await?;
    let mut out = std::io::stdout().lock();
    for c in &list {
        print_info(&mut out, c)?;
    }
    // The unfinished saves are a footnote: a store without ListMultipartUploads (501), or
    // credentials without the right to list uploads, must not fail the listing above.
    let orphans = match ckpt.orphaned_uploads().await {
        Ok(orphans) => orphans,
        Err(e) => {
            let reason = crate::exit::one_line(&anyhow::Error::new(e));
            eprintln!(
                "warning: cannot count the unfinished saves under {}: {reason}; the checkpoints \
                 listed are complete",
                a.prefix
            );
            Vec::new()
        }
    };
    writeln!(
        out,
        "{} checkpoints, {}{}",
        list.len(),
        human(list.iter().map(|c| c.bytes).sum()),
        unfinished_note(&orphans, &a.prefix)
    )?;
    Ok(())
}

/// What `ckpt ls` says about unfinished saves: how many, and the `gc` command that removes
/// them — those started within `gc`'s default age only with `--older-than 0s`, which would
/// also abort a save running right now.
fn unfinished_note(orphans: &[Orphan], prefix: &str) -> String {
    if orphans.is_empty() {
        return String::new();
    }
    let cutoff = SystemTime::now().checked_sub(ORPHAN_AGE);
    let recent = orphans
        .iter()
        .filter(|o| matches!((o.initiated, cutoff), (Some(t), Some(c)) if t > c))
        .count();
    let n = orphans.len();
    let gc = format!("bucketload ckpt gc {prefix}");
    let age = humantime::format_duration(ORPHAN_AGE);
    match recent {
        0 => format!("; {n} unfinished saves (`{gc}` aborts them)"),
        r if r == n => format!(
            "; {n} unfinished saves started within {age} (a save may still be running; if none \
             is, `{gc} --older-than 0s` aborts them)"
        ),
        r => format!(
            "; {n} unfinished saves (`{gc}` aborts the {} older than {age}; if no save is \
             running, `{gc} --older-than 0s` also aborts the {r} recent ones)",
            n - r
        ),
    }
}

fn print_info(out: &mut impl Write, c: &CheckpointInfo) -> std::io::Result<()> {
    writeln!(
        out,
        "{}  {:>10}  {:>5} objects  {}",
        when(c.last_modified),
        human(c.bytes),
        c.objects,
        c.name
    )
}

fn when(t: Option<SystemTime>) -> String {
    match t {
        Some(t) => humantime::format_rfc3339_seconds(t).to_string(),
        None => "-".repeat(20),
    }
}

async fn prune(store: &StoreArgs, a: PruneArgs) -> anyhow::Result<()> {
    let ckpt = open_prefix(store, &a.prefix, CheckpointConfig::default())?;
    if a.dry_run {
        let list = ckpt.list().await?;
        let old = list.len().saturating_sub(a.keep_last);
        for c in &list[..old] {
            println!("would delete {}", ckpt.uri_of(&c.name));
        }
        return Ok(());
    }
    let deleted = ckpt.keep_last(a.keep_last).await?;
    for name in &deleted {
        println!("deleted {}", ckpt.uri_of(name));
    }
    println!("kept the newest {}, deleted {}", a.keep_last, deleted.len());
    Ok(())
}

async fn gc(store: &StoreArgs, a: GcArgs) -> anyhow::Result<()> {
    let ckpt = open_prefix(store, &a.prefix, CheckpointConfig::default())?;
    let orphans: Vec<Orphan> = if a.dry_run {
        let cutoff = SystemTime::now().checked_sub(*a.older_than);
        ckpt.orphaned_uploads()
            .await?
            .into_iter()
            .filter(|o| match (o.initiated, cutoff) {
                (Some(t), Some(c)) => t <= c,
                _ => true,
            })
            .collect()
    } else {
        ckpt.abort_orphans(*a.older_than).await?
    };
    let verb = if a.dry_run { "would abort" } else { "aborted" };
    for o in &orphans {
        println!(
            "{verb} {} (started {})",
            ckpt.uri_of(&o.name),
            when(o.initiated)
        );
    }
    println!(
        "{verb} {} unfinished saves older than {}",
        orphans.len(),
        humantime::format_duration(*a.older_than)
    );
    Ok(())
}
