//! `bucketload serve`: the embedded S3-compatible server in the foreground.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use bucketload_server::{
    DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY, FaultConfig, LatencySpec, ServerConfig,
};
use clap::Args;

use crate::store_args::parse_size;

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
    /// Secret key clients must sign with [env: AWS_SECRET_ACCESS_KEY; default: bucketload-dev-secret]
    #[arg(
        long,
        env = "AWS_SECRET_ACCESS_KEY",
        hide_env_values = true,
        hide_env = true
    )]
    secret_key: Option<String>,
    /// First-byte latency of every request: fixed ("50ms") or uniform ("30ms..120ms")
    #[arg(long, value_parser = parse_latency)]
    latency: Option<LatencySpec>,
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

impl ServeArgs {
    fn config(&self) -> anyhow::Result<ServerConfig> {
        let key = self
            .access_key
            .clone()
            .unwrap_or_else(|| DEFAULT_ACCESS_KEY.to_string());
        let secret = self
            .secret_key
            .clone()
            .unwrap_or_else(|| DEFAULT_SECRET_KEY.to_string());
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
            .with_faults(faults);
        if let Some(l) = self.latency {
            builder = builder.with_latency(l);
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
    let config = args.config()?;
    let server = bucketload_server::start(config)
        .await
        .with_context(|| format!("cannot start the server on {}", args.addr))?;
    let endpoint = server.endpoint();
    let key = args.access_key.as_deref().unwrap_or(DEFAULT_ACCESS_KEY);
    let secret_hint = if args.secret_key.is_some() {
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
