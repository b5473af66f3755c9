//! `bucketload`: the command-line face of bucketload.
//!
//! `serve` runs the embedded S3-compatible server; `gen`, `ls`, `stats` and `cp` create, list,
//! describe and copy datasets in any store (`s3://`, `file://`, local paths, `mem://`); `index`
//! writes the `.idx` of tar shards that other tools wrote, `manifest` the manifest of a
//! one-object-per-sample dataset, and `verify` checks a dataset against either; `shard` packs a
//! one-object-per-sample dataset into indexed tar shards and `merge` joins the slices of a split
//! run; `read` drains the loader, `bench` emulates training over it and writes a benchmark log,
//! `report` draws charts of benchmark logs as PNG files and one HTML page, `demo` runs the
//! whole story against an embedded server, and `mount` serves a bucket as a file system
//! (FUSE). Store flags are global and share their names with the store crate's configuration;
//! exit codes are documented in `docs/CLI.md` and in [`exit`].
//!
//! Layout: this file parses the command line, runs the command and turns its outcome into an
//! exit code. [`cmd`] holds one module per command (or family: `shard` and `merge`), [`args`]
//! the groups of flags several commands share (store, loader, checkpoint transfer), [`common`]
//! the few helpers they share; [`metrics`], [`progress`], [`logging`] and [`redact`] are the
//! output around a command, and [`decode`] the image pipeline of `read` and `bench`.

mod args;
mod cmd;
mod common;
mod decode;
mod exit;
mod logging;
mod metrics;
mod progress;
mod redact;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};

use cmd::{Command, mount};

/// Keeps accelerators fed from object storage.
#[derive(Debug, Parser)]
#[command(name = "bucketload", version, about, propagate_version = true)]
#[command(after_help = exit::EXIT_CODES_HELP)]
struct Cli {
    /// More log output on stderr (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(flatten)]
    store: args::store::StoreArgs,
    #[command(subcommand)]
    command: Command,
}

fn main() -> ExitCode {
    let cli = match parse(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => return exit::usage(e),
    };
    logging::init(cli.verbose);
    logging::quiet_panics();
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

/// Parses the command line. The store flags are global, but `serve` runs a server, not a
/// client: it gets hidden copies of them (clap does not propagate a global flag to a
/// subcommand that has one of that name), so its help leaves them out, and it refuses them.
fn parse(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Cli, clap::Error> {
    let store = args::store::args();
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

async fn run(cli: Cli) -> anyhow::Result<()> {
    let store = cli.store;
    metrics::load_price_table(store.price_table.as_deref())?;
    let result = cli.command.run(&store).await;
    if store.metrics {
        // Reported on failure too: the counts say how far the command got.
        let _ = metrics::report(&mut std::io::stderr().lock());
    }
    result
}
