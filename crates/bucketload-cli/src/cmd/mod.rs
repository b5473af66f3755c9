//! One module per command, or per family of commands that share their flags (`shard` and
//! `merge`); [`Command`] lists them and [`Command::run`] dispatches. Each module holds its
//! command's flags and translates them into calls of the engine; flags shared by several
//! commands live in [`crate::args`].

pub mod bench;
pub mod ckpt;
pub mod ckpt_bench;
pub mod cp;
pub mod demo;
pub mod generate;
pub mod index;
pub mod ls;
pub mod manifest;
pub mod mount;
pub mod read;
pub mod report;
pub mod serve;
pub mod shard;
pub mod stats;
pub mod verify;

use clap::Subcommand;

use crate::args::store::StoreArgs;

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the embedded S3-compatible server (latency, bandwidth and fault emulation).
    Serve(serve::ServeArgs),
    /// Generate a synthetic image-classification dataset (noise JPEGs, one folder per class).
    Gen(generate::GenArgs),
    /// List objects and directories, or the samples inside tar shards (`--samples`).
    Ls(ls::LsArgs),
    /// Describe a dataset (files or shards): counts per class and shard, sizes, image dimensions, cost.
    Stats(stats::StatsArgs),
    /// Copy objects between local folders and object stores.
    Cp(cp::CpArgs),
    /// Index tar shards written by other tools: writes `<shard>.idx` beside each `*.tar`.
    Index(index::IndexArgs),
    /// Write the manifest of a one-object-per-sample dataset (`_bucketload/manifest.bin`).
    Manifest(manifest::ManifestArgs),
    /// Check a dataset against its manifest or shard indexes; exit 6 if anything differs.
    Verify(verify::VerifyArgs),
    /// Pack a one-object-per-sample dataset into tar shards with indexes and a manifest.
    Shard(shard::ShardArgs),
    /// Stitch the manifests of `shard --part i/N` slices into the dataset's manifest.
    Merge(shard::MergeArgs),
    /// Drain the loader over a dataset: samples/s, MB/s, requests, cache hits, stage utilisation.
    Read(read::ReadArgs),
    /// Emulate training (MLPerf Storage style): epochs of batches with a fixed compute time each;
    /// a JSON log of epoch times, accelerator utilisation, data wait, requests and cost.
    Bench(bench::BenchArgs),
    /// Checkpoints: save, load, list, prune, and abort unfinished saves.
    Ckpt(ckpt::CkptArgs),
    /// Checkpoint time to the object store against the local disk: save and load, sync and
    /// async; logs for `report`.
    CkptBench(ckpt_bench::CkptBenchArgs),
    /// The whole story on one machine: embedded S3 server, dataset, files vs shards, cache,
    /// checkpoints, and the report.
    Demo(demo::DemoArgs),
    /// Charts of benchmark logs: PNG files and one self-contained HTML page with a summary table.
    Report(report::ReportArgs),
    /// Mount a bucket as a file system (FUSE): cached listings, prefetched reads, the loader's
    /// disk cache, uploads completed atomically on close, rename.
    Mount(mount::MountArgs),
    /// Started by a root `mount`, not by people: unmounts DIR if the mount process dies.
    #[command(hide = true)]
    MountWatchdog(mount::WatchdogArgs),
}

impl Command {
    /// Runs the command, with the global store flags. `mount` and `mount-watchdog` run before
    /// the async runtime starts, in [`mount::main`] and [`mount::watchdog`].
    pub async fn run(self, store: &StoreArgs) -> anyhow::Result<()> {
        match self {
            Command::Serve(args) => serve::run(args).await,
            Command::Gen(args) => generate::gen_cmd(store, args).await,
            Command::Ls(args) => ls::ls(store, args).await,
            Command::Stats(args) => stats::stats(store, args).await,
            Command::Cp(args) => cp::cp(store, args).await,
            Command::Index(args) => index::index(store, args).await,
            Command::Manifest(args) => manifest::manifest(store, args).await,
            Command::Verify(args) => verify::verify(store, args).await,
            Command::Shard(args) => shard::shard(store, args).await,
            Command::Merge(args) => shard::merge(store, args).await,
            Command::Read(args) => read::read(store, args).await,
            Command::Bench(args) => bench::bench(store, args).await,
            Command::Report(args) => report::report(args).await,
            Command::Ckpt(args) => ckpt::ckpt(store, args).await,
            Command::CkptBench(args) => ckpt_bench::ckpt_bench(store, args).await,
            Command::Demo(args) => demo::demo(store, args).await,
            Command::Mount(_) | Command::MountWatchdog(_) => {
                anyhow::bail!("mount runs outside the async runtime")
            }
        }
    }
}
