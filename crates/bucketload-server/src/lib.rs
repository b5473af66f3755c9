//! An S3-compatible server over a local directory, for development, tests and demos, with
//! S3-over-a-WAN emulation: first-byte latency, per-connection bandwidth caps, per-prefix
//! request-rate limits (503 SlowDown), and fault injection (500/503 errors, connections
//! reset mid-body, truncated bodies), random with a seed or by deterministic rules.
//!
//! Reach for [`start`] in tests (binds `127.0.0.1:0`, stops when the [`RunningServer`] is
//! dropped) and [`serve_forever`] for a long-running server. Clients sign requests (SigV4)
//! with the configured credentials, [`DEFAULT_ACCESS_KEY`] / [`DEFAULT_SECRET_KEY`] unless
//! set otherwise, and use path-style addressing. Operations, semantics and limits are in
//! `docs/SERVER.md`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), bucketload_server::Error> {
//! use bucketload_server::{FaultKind, ServerConfig, start};
//!
//! let config = ServerConfig::builder("/tmp/bucketload-data")
//!     .with_latency("30ms..120ms".parse()?)
//!     .build()?;
//! let server = start(config).await?;
//! println!("S3 endpoint: {}", server.endpoint());
//! // The next two GetObject requests answer 503 SlowDown.
//! server.faults().fail_next("GetObject", 2, FaultKind::Status(503));
//! // ... run a client ...
//! assert!(server.counters().get("GetObject") >= 2);
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! Architecture: [`start`] raises the open-file limit, locks the root and removes what earlier
//! runs left in it, binds a listener and spawns an accept loop, which stops accepting at the
//! connection cap. Every connection gets a watchdog (header, idle and body timeouts), a
//! socket wrapper (bandwidth cap, injected RSTs) and a service that counts the request,
//! applies latency, rate limit and faults, then calls the s3s service (SigV4 check, S3
//! protocol) backed by our own storage of one directory per bucket with sidecar metadata.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod auth;
mod body;
mod bufpool;
mod checksum;
mod config;
mod conn;
mod directory;
mod express;
mod faults;
mod fdlimit;
mod fidelity;
mod lanes;
mod latency;
#[allow(unsafe_code)]
mod mapped;
mod s3;
mod server;
mod service;
mod storage;
mod tagging;
mod timeouts;

use std::net::SocketAddr;
use std::path::PathBuf;

pub use config::{
    DEFAULT_ACCESS_KEY, DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MIN_PART_SIZE, DEFAULT_SECRET_KEY, DEFAULT_UPLOAD_EXPIRY, FaultConfig, LatencySpec,
    ServerBuilder, ServerConfig,
};
pub use express::DEFAULT_SESSION_TTL;
pub use faults::{Counters, FaultControl, FaultKind};
pub use server::{RunningServer, serve_forever, start};
pub use service::COUNTERS_PATH;
pub use storage::Reclaimed;

/// Errors starting or configuring the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The builder's settings are inconsistent.
    #[error("invalid server configuration: {problems}")]
    InvalidConfig {
        /// Every problem found, separated by "; ".
        problems: String,
    },
    /// A latency spec did not parse.
    #[error(
        "invalid latency {input:?}: expected a duration such as \"50ms\" or a range such as \"30ms..120ms\""
    )]
    InvalidLatency {
        /// The text given.
        input: String,
    },
    /// A fault spec did not parse.
    #[error(
        "invalid fault spec {input:?}: {reason} (example: \"error=0.01,reset=0.001,truncate=0.001,seed=42\")"
    )]
    InvalidFaults {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}; choose another address or port")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Another server uses the data directory (it holds the directory's lock file).
    #[error(
        "data directory {path} is in use by another bucketload server (lock {lock}); stop it or choose another root"
    )]
    RootInUse {
        /// The directory.
        path: PathBuf,
        /// The lock file.
        lock: PathBuf,
    },
    /// The data directory could not be created or used.
    #[error("cannot use data directory {path}; check that it is writable")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}
