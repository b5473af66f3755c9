//! `bucketload demo`: the whole story on one machine, in one command.
//!
//! Starts the embedded S3 server on loopback with S3-like first-byte latency (unless `--bucket`
//! points at a real store), generates a dataset of JPEGs, then runs what a user would run, one
//! step at a time, each printed as the command line that reproduces it:
//!
//! 1. `gen` — the dataset, one object per sample in a folder per class;
//! 2. `bench --format files`, three epochs without and with the local cache, then the same
//!    files from an S3 Express One Zone directory bucket, a few ms to first byte (the embedded
//!    server's `demo--use1-az4--x-s3`, or `--express-bucket` on a real store);
//! 3. `shard` — the same samples packed into indexed tar shards;
//! 4. `bench --format shards` and `--format indexed`, three epochs each (these runs skip
//!    decoding, so they measure the store and the loader), then shards once more with decoding
//!    and augmentation, to show what the CPU adds;
//! 5. `ckpt-bench` — checkpoints to the object store against the local disk, saved and in the
//!    background;
//! 6. `report` — the charts and one HTML page; its summary table is printed last.
//!
//! Every training run emulates an accelerator that computes for a fixed time per batch of 64
//! (`--compute-ms`), by default one that asks for 1.5× the samples per second small files can
//! give at the store's first-byte latency (Little's law: 256 requests in flight ÷ the latency;
//! 8.3 ms per batch at 50 ms), so the accelerator column says which layouts keep it busy.
//!
//! Each step is this same binary run as a child process, so its progress bar and errors are
//! exactly the ones a user sees, and a failed step stops the demo naming the step.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use bucketload_server::{DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY, LatencySpec, ServerConfig};
use clap::Args;

use crate::args::store::{StoreArgs, parse_size};
use bucketload::loader::DEFAULT_LOADER_CONCURRENCY;

/// Flags of `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Samples in the generated dataset (the full workshop dataset is 100000)
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    samples: u64,
    /// Size of each generated JPEG, e.g. 100KB
    #[arg(long, default_value = "100KB", value_parser = parse_size, value_name = "SIZE")]
    size: u64,
    /// Classes (one folder per class)
    #[arg(long, default_value_t = 10, value_name = "N")]
    classes: u32,
    /// Epochs of every training run
    #[arg(long, default_value_t = 3, value_name = "N")]
    epochs: u32,
    /// Emulated compute per batch of 64 in milliseconds (0: as fast as the input allows)
    /// [default: the accelerator asks for 1.5× what 256 requests in flight give one object per
    /// sample at --latency's mean: 8.3 ms at 50 ms]
    #[arg(long, value_name = "MS")]
    compute_ms: Option<f64>,
    /// Size of the checkpoint written to the object store and to the local disk
    #[arg(long, default_value = "256MiB", value_parser = parse_size, value_name = "SIZE")]
    ckpt_size: u64,
    /// First-byte latency of the embedded server, fixed ("50ms") or a range ("30ms..120ms")
    #[arg(long, default_value = "50ms", value_parser = parse_latency, value_name = "LATENCY")]
    latency: LatencySpec,
    /// First-byte latency of the embedded server's directory bucket (S3 Express One Zone
    /// answers in single-digit milliseconds)
    #[arg(long, default_value = "3ms..6ms", value_parser = parse_latency, value_name = "LATENCY")]
    express_latency: LatencySpec,
    /// Directory of the logs, cache, local checkpoints and report (created; must be empty or a
    /// previous demo's)
    #[arg(long, default_value = "bucketload-demo", value_name = "DIR")]
    out: PathBuf,
    /// Run against this existing bucket of a real store (with --endpoint or the AWS_* settings)
    /// instead of the embedded server; the demo writes under `bucketload-demo/` in it
    #[arg(long, value_name = "NAME")]
    bucket: Option<String>,
    /// With --bucket: also read the small files from this S3 Express One Zone directory bucket
    /// (`name--zone-id--x-s3`; the demo writes under `bucketload-demo/` in it)
    #[arg(long, value_name = "NAME")]
    express_bucket: Option<String>,
    /// Keep the embedded server's objects (under DIR/s3) after the run
    #[arg(long)]
    keep_data: bool,
}

/// Batch size of the demo's training runs (`bench`'s default).
const BATCH: f64 = 64.0;
/// How much faster than small files' Little's-law bound the default accelerator trains.
const DEMAND_OVER_FILES: f64 = 1.5;

/// The compute time per batch: the one asked for, else one that asks for
/// [`DEMAND_OVER_FILES`]× the samples per second `concurrency` requests in flight give at the
/// mean first-byte latency (Little's law), so that uncached small files cannot keep the
/// accelerator busy and streamed shards, a handful of large GETs, can.
fn compute_ms(args: &DemoArgs, concurrency: usize) -> f64 {
    if let Some(ms) = args.compute_ms {
        return ms;
    }
    let latency_s = (args.latency.min() + args.latency.max()).as_secs_f64() / 2.0;
    let files_per_s = concurrency.max(1) as f64 / latency_s.max(1e-3);
    let ms = BATCH / (DEMAND_OVER_FILES * files_per_s) * 1e3;
    (ms * 100.0).round() / 100.0
}

fn parse_latency(s: &str) -> Result<LatencySpec, String> {
    s.parse::<LatencySpec>().map_err(|e| e.to_string())
}

/// One step of the story: a title and the arguments of a `bucketload` command.
struct Step {
    title: String,
    args: Vec<String>,
}

impl Step {
    fn new(title: impl Into<String>, args: &[&str]) -> Step {
        Step {
            title: title.into(),
            args: args.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn arg(mut self, flag: &str, value: impl ToString) -> Step {
        self.args.push(flag.to_owned());
        self.args.push(value.to_string());
        self
    }
}

/// Runs the demo.
pub async fn demo(store: &StoreArgs, args: DemoArgs) -> anyhow::Result<()> {
    let out = prepare_out(&args.out)?;
    let started = Instant::now();
    let (server, env, base, express) = match &args.bucket {
        Some(bucket) => (
            None,
            Vec::new(),
            format!("s3://{bucket}/bucketload-demo"),
            args.express_bucket
                .as_ref()
                .map(|b| format!("s3://{b}/bucketload-demo")),
        ),
        None => {
            let (server, env) = start_server(&out, args.latency, args.express_latency).await?;
            let express = format!("s3://{EXPRESS_BUCKET}");
            (Some(server), env, "s3://demo".to_owned(), Some(express))
        }
    };
    let steps = story(&args, &out, &base, express.as_deref());
    let compute = compute_ms(&args, DEFAULT_LOADER_CONCURRENCY);
    if compute > 0.0 {
        println!(
            "bucketload demo: the emulated accelerator computes {compute} ms per batch of {BATCH} \
             ({:.0} samples/s when its input keeps up)",
            BATCH / compute * 1e3
        );
    }
    let outcome = run_steps(store, &env, &steps).await;
    if let Some(server) = server {
        server.shutdown().await;
        if !args.keep_data {
            let _ = std::fs::remove_dir_all(out.join("s3"));
        }
    }
    outcome?;
    let page = out.join("report").join("index.html");
    println!(
        "\nbucketload demo: done in {:.0} s. The report: {}",
        started.elapsed().as_secs_f64(),
        page.display()
    );
    Ok(())
}

/// Creates the output directory; refuses one that holds anything but a previous demo's output,
/// so the demo never mixes its logs with someone else's files.
fn prepare_out(out: &Path) -> anyhow::Result<PathBuf> {
    const OURS: [&str; 5] = ["logs", "cache", "ckpt-disk", "report", "s3"];
    std::fs::create_dir_all(out)
        .with_context(|| format!("cannot create the demo directory {}", out.display()))?;
    let entries = std::fs::read_dir(out)
        .with_context(|| format!("cannot read the demo directory {}", out.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot read {}", out.display()))?;
        let name = entry.file_name();
        if !OURS.iter().any(|ours| name == *ours) {
            return Err(bucketload::Error::invalid_input(format!(
                "{} holds {:?}, which the demo did not write; choose an empty directory with --out",
                out.display(),
                name
            ))
            .into());
        }
    }
    // A previous run's results would be drawn again: start from empty logs and a cold cache.
    for dir in OURS {
        let path = out.join(dir);
        if path.exists() {
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("cannot clear {}", path.display()))?;
        }
    }
    std::path::absolute(out).with_context(|| format!("cannot resolve {}", out.display()))
}

/// The embedded server's directory bucket (an S3 Express One Zone name).
const EXPRESS_BUCKET: &str = "demo--use1-az4--x-s3";

/// The embedded server on a free loopback port, its root under `out/s3`, and the environment
/// that points the child processes at it.
async fn start_server(
    out: &Path,
    latency: LatencySpec,
    express_latency: LatencySpec,
) -> anyhow::Result<(bucketload_server::RunningServer, Vec<(String, String)>)> {
    let root = out.join("s3");
    std::fs::create_dir_all(&root)
        .with_context(|| format!("cannot create the server root {}", root.display()))?;
    let config = ServerConfig::builder(&root)
        .with_addr(([127, 0, 0, 1], 0).into())
        .with_credentials(DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY)
        .with_latency(latency)
        .with_directory_latency(express_latency)
        .build()?;
    let server = bucketload_server::start(config)
        .await
        .context("cannot start the embedded S3 server")?;
    println!(
        "bucketload demo: embedded S3 server at {} with {latency:?} to first byte, \
         {express_latency:?} for its directory bucket {EXPRESS_BUCKET} (root {})",
        server.endpoint(),
        root.display()
    );
    let env = vec![
        ("AWS_ENDPOINT_URL".to_owned(), server.endpoint()),
        (
            "AWS_ACCESS_KEY_ID".to_owned(),
            DEFAULT_ACCESS_KEY.to_owned(),
        ),
        (
            "AWS_SECRET_ACCESS_KEY".to_owned(),
            DEFAULT_SECRET_KEY.to_owned(),
        ),
        ("AWS_REGION".to_owned(), "us-east-1".to_owned()),
    ];
    Ok((server, env))
}

/// The steps, in order; `express` is the directory bucket's base, if there is one.
fn story(args: &DemoArgs, out: &Path, base: &str, express: Option<&str>) -> Vec<Step> {
    let files = format!("{base}/train");
    let shards = format!("{base}/train-shards");
    let logs = out.join("logs");
    let logs = logs.to_string_lossy();
    let cache = out.join("cache");
    let cache = cache.to_string_lossy();
    let compute = compute_ms(args, DEFAULT_LOADER_CONCURRENCY);
    // The I/O story is told without decoding (as DLIO does), so the store and the loader are
    // what is measured; one last run decodes and augments, to show what the CPU adds.
    let bench = |title: &str, format: &str, dataset: &str, name: &str| {
        Step::new(title, &["bench"])
            .arg("--dataset", dataset)
            .arg("--format", format)
            .arg("--epochs", args.epochs)
            .arg("--compute-ms", compute)
            .arg("--log-dir", &logs)
            .arg("--name", name)
    };
    // Shards of about 1/8 of the dataset: enough shards to stream several at once.
    let shard_size = (args.samples * args.size / 8).max(8 << 20);
    let generate = |title: &str, dataset: &str| {
        Step::new(title, &["gen"])
            .arg("--samples", args.samples)
            .arg("--classes", args.classes)
            .arg("--size", args.size)
            .arg("--seed", 7)
            .with_positional(dataset)
    };
    // The same files (the same seed) in a directory bucket, read as small files again.
    let express_steps = express.map(|express| {
        let express_files = format!("{express}/train");
        [
            generate(
                "the same dataset in an S3 Express One Zone directory bucket",
                &express_files,
            ),
            bench(
                "small files from the directory bucket: a few ms to first byte",
                "files",
                &express_files,
                "files-express",
            )
            .flag("--no-decode"),
        ]
    });
    let mut steps = vec![
        generate("generate the dataset: one JPEG object per sample", &files),
        bench(
            "small files, no cache: every epoch goes to the store",
            "files",
            &files,
            "files",
        )
        .flag("--no-decode"),
        bench(
            "small files with the local cache: later epochs read the disk",
            "files",
            &files,
            "files-cached",
        )
        .flag("--no-decode")
        .arg("--cache", &cache),
    ];
    steps.extend(express_steps.into_iter().flatten());
    steps.extend([
        Step::new("pack the files into indexed tar shards", &["shard"])
            .with_positional(&files)
            .with_positional(&shards)
            .arg("--shard-size", shard_size),
        bench(
            "tar shards streamed sequentially",
            "shards",
            &shards,
            "shards",
        )
        .flag("--no-decode"),
        bench(
            "indexed shards: one ranged GET per sample",
            "indexed",
            &shards,
            "indexed",
        )
        .flag("--no-decode"),
        bench(
            "tar shards decoded and augmented into 224x224 batches on every core",
            "shards",
            &shards,
            "shards-decoded",
        ),
        Step::new(
            "checkpoints: object store against the local disk, saved and in the background",
            &["ckpt-bench"],
        )
        .arg("--size", args.ckpt_size)
        .arg("--to", format!("{base}/checkpoints"))
        .arg("--vs", out.join("ckpt-disk").to_string_lossy())
        .arg("--runs", 2)
        .arg("--log-dir", &logs),
        Step::new("draw the report", &["report"])
            .with_positional(&logs)
            .arg("--out", out.join("report").to_string_lossy()),
    ]);
    steps
}

impl Step {
    fn with_positional(mut self, value: &str) -> Step {
        self.args.push(value.to_owned());
        self
    }

    fn flag(mut self, flag: &str) -> Step {
        self.args.push(flag.to_owned());
        self
    }
}

/// The store flags the user gave, passed on to every step.
fn store_flags(store: &StoreArgs) -> Vec<String> {
    let mut flags = Vec::new();
    let mut push = |flag: &str, value: Option<String>| {
        if let Some(value) = value {
            flags.push(flag.to_owned());
            flags.push(value);
        }
    };
    push("--endpoint", store.endpoint.clone());
    push("--region", store.region.clone());
    push("--profile", store.profile.clone());
    if store.no_sign_request {
        flags.push("--no-sign-request".to_owned());
    }
    flags
}

async fn run_steps(
    store: &StoreArgs,
    env: &[(String, String)],
    steps: &[Step],
) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("cannot find the bucketload executable")?;
    let global = store_flags(store);
    for (i, step) in steps.iter().enumerate() {
        println!(
            "\n── step {}/{}: {}\n$ bucketload {}",
            i + 1,
            steps.len(),
            step.title,
            step.args.join(" ")
        );
        let status = tokio::process::Command::new(&exe)
            .args(&step.args)
            .args(&global)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .kill_on_drop(true)
            .status()
            .await
            .with_context(|| format!("cannot run step {} ({})", i + 1, step.title))?;
        if !status.success() {
            bail!(
                "step {} ({}) failed with {status}; rerun its command above to see it alone",
                i + 1,
                step.title
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        demo: DemoArgs,
    }

    #[test]
    fn the_story_runs_every_step_in_order() {
        let cli = Cli::parse_from(["demo", "--samples", "100", "--size", "10KB"]);
        let steps = story(
            &cli.demo,
            Path::new("/tmp/d"),
            "s3://demo",
            Some("s3://demo--use1-az4--x-s3"),
        );
        let commands: Vec<&str> = steps.iter().map(|s| s.args[0].as_str()).collect();
        assert_eq!(
            commands,
            [
                "gen",
                "bench",
                "bench",
                "gen",
                "bench",
                "shard",
                "bench",
                "bench",
                "bench",
                "ckpt-bench",
                "report"
            ]
        );
        assert!(
            steps[2]
                .args
                .windows(2)
                .any(|w| w == ["--cache", "/tmp/d/cache"])
        );
        assert!(steps[0].args.contains(&"s3://demo/train".to_owned()));
        assert!(
            steps[4]
                .args
                .windows(2)
                .any(|w| w == ["--dataset", "s3://demo--use1-az4--x-s3/train"])
        );
        let without = story(&cli.demo, Path::new("/tmp/d"), "s3://demo", None);
        assert_eq!(without.len(), steps.len() - 2);
    }

    #[test]
    fn the_default_accelerator_outpaces_small_files_by_half() {
        let cli = Cli::parse_from(["demo"]);
        // 256 in flight at 50 ms: 5,120 samples/s; 1.5x that is 7,680/s, 8.33 ms per 64.
        assert_eq!(compute_ms(&cli.demo, 256), 8.33);
        let cli = Cli::parse_from(["demo", "--latency", "20ms..100ms"]);
        assert_eq!(compute_ms(&cli.demo, 256), 10.0);
        let cli = Cli::parse_from(["demo", "--compute-ms", "0"]);
        assert_eq!(compute_ms(&cli.demo, 256), 0.0);
        let steps = story(&cli.demo, Path::new("/tmp/d"), "s3://demo", None);
        assert!(
            steps
                .iter()
                .filter(|s| s.args[0] == "bench")
                .all(|s| s.args.windows(2).any(|w| w == ["--compute-ms", "0"]))
        );
    }

    #[test]
    fn a_directory_with_foreign_files_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        let err = prepare_out(dir.path()).unwrap_err().to_string();
        assert!(err.contains("notes.txt"), "{err}");
        std::fs::remove_file(dir.path().join("notes.txt")).unwrap();
        std::fs::create_dir(dir.path().join("logs")).unwrap();
        std::fs::write(dir.path().join("logs").join("old.json"), "{}").unwrap();
        prepare_out(dir.path()).unwrap();
        assert!(!dir.path().join("logs").exists());
    }
}
