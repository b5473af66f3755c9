//! `bucketload serve`: the embedded S3-compatible server in the foreground.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use bucketload_server::{
    DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY, FaultConfig, LatencySpec, ServerConfig,
};
use clap::Args;

use crate::args::store::parse_size;

/// Flags of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory holding the buckets (one sub-directory per bucket); created if missing
    #[arg(long, value_name = "DIR")]
    root: PathBuf,
    /// Address to listen on; non-loopback addresses need --allow-non-loopback
    #[arg(long, default_value = "127.0.0.1:9000")]
    addr: SocketAddr,
    /// Access key clients must sign with [env: AWS_ACCESS_KEY_ID; default: bucketload]
    #[arg(long, env = "AWS_ACCESS_KEY_ID", hide_env = true)]
    access_key: Option<String>,
    /// Secret key clients must sign with [env: AWS_SECRET_ACCESS_KEY; default: bucketload-dev-secret].
    /// Prefer the variable or --secret-key-file: other users can read command lines (`ps`)
    #[arg(
        long,
        env = "AWS_SECRET_ACCESS_KEY",
        hide_env_values = true,
        hide_env = true
    )]
    secret_key: Option<String>,
    /// Read the secret key from this file (its first line); overrides AWS_SECRET_ACCESS_KEY
    #[arg(long, value_name = "PATH")]
    secret_key_file: Option<PathBuf>,
    /// First-byte latency of every request: fixed ("50ms") or uniform ("30ms..120ms")
    #[arg(long, value_parser = parse_latency)]
    latency: Option<LatencySpec>,
    /// First-byte latency of requests to directory buckets (named base--zone--x-s3), in place of
    /// --latency: fixed ("3ms") or uniform ("2ms..6ms")
    #[arg(long, value_parser = parse_latency, value_name = "LATENCY")]
    directory_latency: Option<LatencySpec>,
    /// Bandwidth cap per connection, bytes per second ("100MB" = 100 MB/s)
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    bandwidth: Option<u64>,
    /// Requests per second allowed per prefix; above it the server answers 503 SlowDown
    #[arg(long, value_name = "N")]
    rate_limit: Option<u32>,
    /// Fraction of requests answered 500 InternalError / 503 SlowDown (0..1)
    #[arg(long, value_parser = parse_rate, default_value_t = 0.0, value_name = "F")]
    fault_rate: f64,
    /// Fraction of responses whose connection is reset mid-body (0..1)
    #[arg(long, value_parser = parse_rate, default_value_t = 0.0, value_name = "F")]
    reset_rate: f64,
    /// Fraction of responses cut short of their Content-Length (0..1)
    #[arg(long, value_parser = parse_rate, default_value_t = 0.0, value_name = "F")]
    truncate_rate: f64,
    /// Seed of the fault injection
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Allow listening on an address other than loopback (the server is for development only)
    #[arg(long)]
    allow_non_loopback: bool,
    /// Accept requests signed with Signature Version 2 (S3 refuses them for buckets made
    /// since 2020; so does the server by default)
    #[arg(long)]
    allow_sigv2: bool,
    /// Close a connection whose request head (request line and headers) is not complete this
    /// long after its first byte; 0 turns it off
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20s", value_name = "DURATION")]
    header_timeout: Duration,
    /// Close a connection that sends no request for this long (after it opens, and between
    /// requests), as S3 does after about 20 s; 0 turns it off
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20s", value_name = "DURATION")]
    idle_timeout: Duration,
    /// Fail an upload whose body brings no bytes for this long (400 RequestTimeout, nothing
    /// stored), and close a connection that does not read its response for this long; 0 turns
    /// it off
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20s", value_name = "DURATION")]
    body_timeout: Duration,
    /// Most connections open at once; more wait until one closes [default: from the
    /// open-file limit, which the server raises to its hard maximum]
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// At start, remove multipart uploads begun longer ago than this (S3's lifecycle rule
    /// AbortIncompleteMultipartUpload); 0 keeps them all
    #[arg(long, value_parser = humantime::parse_duration, default_value = "7days", value_name = "DURATION")]
    upload_expiry: Duration,
    /// Serve ROOT beside other servers started with this flag (e.g. one injecting faults next
    /// to a clean one over the same objects); nothing is cleaned at start. Without it a second
    /// server on the same ROOT is refused
    #[arg(long)]
    shared_root: bool,
    /// How long the sessions CreateSession hands out for directory buckets (buckets named
    /// `base--zone--x-s3`, which behave as S3 Express One Zone's) last, as S3's 5 minutes
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5m", value_name = "DURATION")]
    session_ttl: Duration,
}

fn parse_latency(s: &str) -> Result<LatencySpec, String> {
    s.parse::<LatencySpec>().map_err(|e| e.to_string())
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("`{s}` is not a fraction between 0 and 1")),
    }
}

/// The secret key in the first line of `path`.
fn read_secret(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --secret-key-file {}", path.display()))?;
    let secret = text.lines().next().unwrap_or("").trim();
    anyhow::ensure!(
        !secret.is_empty(),
        "--secret-key-file {} is empty; write the secret key on its first line",
        path.display()
    );
    Ok(secret.to_owned())
}

impl ServeArgs {
    /// The secret key: from --secret-key-file, else --secret-key / AWS_SECRET_ACCESS_KEY.
    fn secret(&self) -> anyhow::Result<Option<String>> {
        match &self.secret_key_file {
            Some(_) if self.secret_on_command_line() => {
                anyhow::bail!("--secret-key and --secret-key-file exclude each other; give one")
            }
            Some(path) => read_secret(path).map(Some),
            None => Ok(self.secret_key.clone()),
        }
    }

    /// Whether --secret-key was given as a flag (rather than by AWS_SECRET_ACCESS_KEY).
    fn secret_on_command_line(&self) -> bool {
        self.secret_key.is_some() && std::env::var("AWS_SECRET_ACCESS_KEY").ok() != self.secret_key
    }

    fn config(&self, secret: Option<String>) -> anyhow::Result<ServerConfig> {
        let key = self
            .access_key
            .clone()
            .unwrap_or_else(|| DEFAULT_ACCESS_KEY.to_string());
        let secret = secret.unwrap_or_else(|| DEFAULT_SECRET_KEY.to_string());
        let faults = FaultConfig::default()
            .with_error_rate(self.fault_rate)
            .with_reset_rate(self.reset_rate)
            .with_truncate_rate(self.truncate_rate)
            .with_seed(self.seed);
        let mut builder = ServerConfig::builder(&self.root)
            .with_addr(self.addr)
            .with_allow_non_loopback(self.allow_non_loopback)
            .with_allow_sigv2(self.allow_sigv2)
            .with_credentials(key, secret)
            .with_faults(faults)
            .with_header_timeout(self.header_timeout)
            .with_idle_timeout(self.idle_timeout)
            .with_body_timeout(self.body_timeout)
            .with_upload_expiry(self.upload_expiry)
            .with_session_ttl(self.session_ttl)
            .with_shared_root(self.shared_root);
        if let Some(n) = self.max_connections {
            builder = builder.with_max_connections(n);
        }
        if let Some(l) = self.latency {
            builder = builder.with_latency(l);
        }
        if let Some(l) = self.directory_latency {
            builder = builder.with_directory_latency(l);
        }
        if let Some(b) = self.bandwidth {
            builder = builder.with_bandwidth(b);
        }
        if let Some(r) = self.rate_limit {
            builder = builder.with_rate_limit(r);
        }
        Ok(builder.build()?)
    }
}

/// Runs the server until Ctrl-C or SIGTERM.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.root)
        .with_context(|| format!("cannot create --root {}", args.root.display()))?;
    let secret = args.secret()?;
    if let Some(secret) = &secret {
        crate::redact::add_secret(secret);
        if args.secret_on_command_line() {
            tracing::warn!(
                "--secret-key is visible to other users of this machine (ps); \
                 use AWS_SECRET_ACCESS_KEY or --secret-key-file instead"
            );
        }
    }
    let secret_given = secret.is_some();
    let config = args.config(secret)?;
    let server = bucketload_server::start(config)
        .await
        .with_context(|| format!("cannot start the server on {}", args.addr))?;
    let endpoint = server.endpoint();
    let key = args.access_key.as_deref().unwrap_or(DEFAULT_ACCESS_KEY);
    let secret_hint = if secret_given {
        "<your secret>"
    } else {
        DEFAULT_SECRET_KEY
    };
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "bucketload serve: S3 endpoint {endpoint} (root {}); use it with: \
         AWS_ENDPOINT_URL={endpoint} AWS_ACCESS_KEY_ID={key} AWS_SECRET_ACCESS_KEY={secret_hint} aws s3 ls",
        args.root.display()
    )?;
    stdout.flush()?;
    drop(stdout);
    wait_for_signal().await?;
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}

#[cfg(unix)]
async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("cannot listen for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}

#[cfg(not(unix))]
async fn wait_for_signal() -> anyhow::Result<()> {
    tokio::signal::ctrl_c()
        .await
        .context("cannot listen for Ctrl-C")
}
