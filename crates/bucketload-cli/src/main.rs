//! `bucketload`: the command-line face of bucketload.
//!
//! `serve` runs the embedded S3-compatible server; `gen`, `ls`, `stats` and `cp` create, list,
//! describe and copy datasets in any store (`s3://`, `file://`, local paths, `mem://`); `index`
//! writes the `.idx` of tar shards that other tools wrote, `manifest` the manifest of a
//! one-object-per-sample dataset, and `verify` checks a dataset against either; `shard` packs a
//! one-object-per-sample dataset into indexed tar shards and `merge` joins the slices of a split
//! run; `read` drains the loader, `bench` emulates training over it and writes a benchmark log,
//! `report` draws charts of benchmark logs as PNG files and one HTML page, and `demo` runs the
//! whole story against an embedded server, and `mount` serves a bucket as a file system (FUSE). Store flags are
//! global and share their names with the store crate's configuration; exit codes are documented
//! in `docs/CLI.md` and in [`exit`].

mod bench;
mod ckpt;
mod ckpt_bench;
mod data;
mod decode;
mod demo;
mod exit;
mod metrics;
mod mount;
mod progress;
mod read;
mod redact;
mod report;
mod serve;
mod sharding;
mod shards;
mod store_args;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Keeps accelerators fed from object storage.
#[derive(Debug, Parser)]
#[command(name = "bucketload", version, about, propagate_version = true)]
#[command(after_help = exit::EXIT_CODES_HELP)]
struct Cli {
    /// More log output on stderr (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(flatten)]
    store: store_args::StoreArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the embedded S3-compatible server (latency, bandwidth and fault emulation).
    Serve(serve::ServeArgs),
    /// Generate a synthetic image-classification dataset (noise JPEGs, one folder per class).
    Gen(data::GenArgs),
    /// List objects and directories, or the samples inside tar shards (`--samples`).
    Ls(data::LsArgs),
    /// Describe a dataset (files or shards): counts per class and shard, sizes, image dimensions, cost.
    Stats(data::StatsArgs),
    /// Copy objects between local folders and object stores.
    Cp(data::CpArgs),
    /// Index tar shards written by other tools: writes `<shard>.idx` beside each `*.tar`.
    Index(shards::IndexArgs),
    /// Write the manifest of a one-object-per-sample dataset (`_bucketload/manifest.json`).
    Manifest(shards::ManifestArgs),
    /// Check a dataset against its manifest or shard indexes; exit 6 if anything differs.
    Verify(shards::VerifyArgs),
    /// Pack a one-object-per-sample dataset into tar shards with indexes and a manifest.
    Shard(sharding::ShardArgs),
    /// Stitch the manifests of `shard --part i/N` slices into the dataset's manifest.
    Merge(sharding::MergeArgs),
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

fn main() -> ExitCode {
    let cli = match parse(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => return exit::usage(e),
    };
    init_logging(cli.verbose);
    quiet_panics();
    // The mount serves the kernel from its own threads and runtime.
    let cli = match cli.command {
        Command::Mount(args) => return mount::main(&cli.store, args),
        Command::MountWatchdog(args) => return mount::watchdog(&args),
        command => Cli { command, ..cli },
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return exit::report(&anyhow::Error::new(e).context("cannot start the async runtime"));
        }
    };
    let outcome = runtime.block_on(async {
        let outcome = run_until_interrupted(cli).await;
        // An interrupted or failed command dropped its unfinished multipart uploads: wait for
        // their aborts, so no parts stay stored (and billed) after the process ends.
        let unfinished = bucketload_store::settle_aborts(ABORT_WAIT).await;
        if unfinished > 0 {
            tracing::warn!(
                "{unfinished} unfinished multipart upload(s) could not be aborted within {}s; \
                 remove them with `bucketload ckpt gc URI --older-than 0s`",
                ABORT_WAIT.as_secs()
            );
        }
        outcome
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match outcome {
        Some(Ok(())) => ExitCode::SUCCESS,
        Some(Err(e)) => exit::report(&e),
        None => exit::interrupted(),
    }
}

/// A panic (a bug, caught and reported as an error with its message) is logged as one line with
/// where it happened, not printed with a backtrace: the user sees `error: …`, as for any other
/// failure. `RUST_BACKTRACE` set brings the default report back, for debugging.
fn quiet_panics() {
    if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
        return;
    }
    std::panic::set_hook(Box::new(|info| {
        let location = info.location().map(ToString::to_string).unwrap_or_default();
        tracing::error!(%location, "panic: {}", bucketload::panics::message(info.payload()));
    }));
}

/// Runs the command; a panic in it (a bug) is an error carrying its message, never exit 101.
async fn run_caught(cli: Cli) -> anyhow::Result<()> {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(run(cli)).catch_unwind().await {
        Ok(result) => result,
        Err(payload) => Err(bucketload::panics::error("the command", payload.as_ref()).into()),
    }
}

/// How long an ending process waits for the aborts of its unfinished multipart uploads.
const ABORT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs the command; `None` when Ctrl-C or SIGTERM arrived first (`serve` handles its own
/// signals).
async fn run_until_interrupted(cli: Cli) -> Option<anyhow::Result<()>> {
    if matches!(cli.command, Command::Serve(_)) {
        return Some(run_caught(cli).await);
    }
    tokio::select! {
        result = run_caught(cli) => Some(result),
        _ = tokio::signal::ctrl_c() => None,
        () = terminated() => None,
    }
}

/// Resolves at SIGTERM (what `kill`, `timeout`, Kubernetes and Slurm send first); never when
/// the handler cannot be installed.
async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            term.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let store = cli.store;
    metrics::load_price_table(store.price_table.as_deref())?;
    let result = match cli.command {
        Command::Serve(args) => serve::run(args).await,
        Command::Gen(args) => data::gen_cmd(&store, args).await,
        Command::Ls(args) => data::ls(&store, args).await,
        Command::Stats(args) => data::stats(&store, args).await,
        Command::Cp(args) => data::cp(&store, args).await,
        Command::Index(args) => shards::index(&store, args).await,
        Command::Manifest(args) => shards::manifest(&store, args).await,
        Command::Verify(args) => shards::verify(&store, args).await,
        Command::Shard(args) => sharding::shard(&store, args).await,
        Command::Merge(args) => sharding::merge(&store, args).await,
        Command::Read(args) => read::read(&store, args).await,
        Command::Bench(args) => bench::bench(&store, args).await,
        Command::Report(args) => report::report(args).await,
        Command::Ckpt(args) => ckpt::ckpt(&store, args).await,
        Command::CkptBench(args) => ckpt_bench::ckpt_bench(&store, args).await,
        Command::Demo(args) => demo::demo(&store, args).await,
        Command::Mount(_) | Command::MountWatchdog(_) => unreachable_mount(),
    };
    if store.metrics {
        // Reported on failure too: the counts say how far the command got.
        let _ = metrics::report(&mut std::io::stderr().lock());
    }
    result
}

/// `main` runs `mount` before the runtime starts.
fn unreachable_mount() -> anyhow::Result<()> {
    anyhow::bail!("mount runs outside the async runtime")
}

/// Logs go to stderr; quiet by default so command output stays clean. Colours only on a
/// terminal: a log redirected to a file or a pipe holds plain text.
/// Parses the command line. The store flags are global, but `serve` runs a server, not a
/// client: it gets hidden copies of them (clap does not propagate a global flag to a
/// subcommand that has one of that name), so its help leaves them out, and it refuses them.
fn parse(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Cli, clap::Error> {
    let store = store_args::args();
    let mut cmd = Cli::command().mut_subcommand("serve", |serve| {
        store.iter().fold(serve, |serve, arg| {
            serve.arg(arg.clone().global(false).hide(true))
        })
    });
    let matches = cmd.try_get_matches_from_mut(args)?;
    if let Some(serve) = matches.subcommand_matches("serve") {
        let given = |m: &clap::ArgMatches, id: &str| {
            m.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
        };
        if let Some(arg) = store
            .iter()
            .find(|a| given(&matches, a.get_id().as_str()) || given(serve, a.get_id().as_str()))
        {
            let flag = format!("--{}", arg.get_long().unwrap_or(arg.get_id().as_str()));
            return Err(cmd.error(
                clap::error::ErrorKind::ArgumentConflict,
                format!("{flag} configures clients and does not apply to `serve`"),
            ));
        }
    }
    Cli::from_arg_matches(&matches)
}

/// The most s3s may log unless RUST_LOG names it (see [`init_logging`]).
const S3S_CAP: &str = "s3s=info";

fn init_logging(verbose: u8) {
    // s3s prints whole requests at debug (headers, presigned query strings) and the
    // signature it expected on a mismatch: it stays at info unless RUST_LOG names it, and
    // every line is redacted anyway (see `redact`).
    let default = match verbose {
        0 => "warn",
        1 => "info,bucketload=info",
        _ => "debug,hyper=info,h2=info,rustls=info,s3s=info",
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) => {
            let filter = tracing_subscriber::EnvFilter::new(&directives);
            if directives.contains("s3s") {
                filter
            } else {
                filter.add_directive(S3S_CAP.parse().expect("S3S_CAP is a valid directive"))
            }
        }
        Err(_) => tracing_subscriber::EnvFilter::new(default),
    };
    for name in ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"] {
        if let Ok(value) = std::env::var(name) {
            redact::add_secret(&value);
        }
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(redact::RedactingStderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
